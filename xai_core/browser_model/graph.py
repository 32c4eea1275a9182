"""One forward of a timm ViT that returns everything the ViT Explainer draws, written as a
module torch's ONNX exporter can trace (`ExplainerGraph`), and its export (`export_onnx`).

Inputs: `pixels` (1, 3, H, W), normalised as `images.to_model_tensor` does, and
`head_mask` (blocks, heads): 1 keeps a head, 0 switches it off. A head switched off has its
slice of softmax(QK^T/sqrt(d))V set to 0 before W_O (attn.proj), page 9's `heads_off` with
the zero fill (`interventions._edit_heads`).

Outputs (B blocks, H heads, N tokens, d = head_dim):
- `output`: what the model returns (DINOv2: the [CLS] feature its k-NN head votes on; a
  classifier: its logits);
- `attention` (B, H, N, N): every block's attention probabilities;
- `norms` (B, 8, N): each token's length after each step of a block, in `NORM_STEPS` order
  (the block cards);
- `q_norms`, `context_heads` (B, H, N): each head's query and output lengths;
- `q`, `k` (B, H, N, d): the queries and keys (the query · key panel).

The layout (grid, prefix tokens, input size) is the model's: nothing here assumes 14x14 or
224. Only models whose blocks are timm's self-attention `Block` are taken (DeiT, DINOv2
and its register variants); CaiT's class-attention blocks are refused in one sentence.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch import nn

from ..capture import transformer_blocks

NORM_STEPS = ("x_in", "ln1", "context", "attn_out", "x_mid", "ln2", "mlp", "x_out")
INPUTS = ("pixels", "head_mask")
OUTPUTS = ("output", "attention", "norms", "q_norms", "context_heads", "q", "k")
OPSET = 17


class UnsupportedModel(ValueError):
    """The model's blocks are not ones this graph can follow (said in one sentence)."""


def self_attention_blocks(module: nn.Module) -> list[nn.Module]:
    """The model's blocks, when every one is a timm self-attention block."""
    found = transformer_blocks(module)
    if not found or any(kind != "self" for kind, _ in found):
        raise UnsupportedModel("The browser model follows self-attention ViTs only (DeiT, "
                               "DINOv2); this model has other blocks.")
    blocks = [block for _, block in found]
    for block in blocks:
        attn = getattr(block, "attn", None)
        if attn is None or not hasattr(attn, "qkv") or not hasattr(attn, "proj"):
            raise UnsupportedModel("The browser model needs timm attention blocks (qkv, proj).")
    return blocks


class ExplainerGraph(nn.Module):
    """A timm ViT's forward, step by step, returning `OUTPUTS` (see the module note)."""

    def __init__(self, module: nn.Module):
        super().__init__()
        self.vit = module.eval()
        self.blocks = self_attention_blocks(module)

    @property
    def heads(self) -> int:
        return int(self.blocks[0].attn.num_heads)

    def forward(self, pixels: torch.Tensor, head_mask: torch.Tensor):
        vit = self.vit
        x = vit.norm_pre(vit.patch_drop(vit._pos_embed(vit.patch_embed(pixels))))
        attentions, norms, q_norms, context_heads, queries, keys = [], [], [], [], [], []
        for index, block in enumerate(self.blocks):
            x, found = self._block(block, x, head_mask[index])
            attentions.append(found["attention"])
            norms.append(torch.stack([found[name] for name in NORM_STEPS]))
            q_norms.append(found["q"].norm(dim=-1))
            context_heads.append(found["context_heads"])
            queries.append(found["q"])
            keys.append(found["k"])
        output = vit.forward_head(vit.norm(x))
        return (output, torch.stack(attentions), torch.stack(norms), torch.stack(q_norms),
                torch.stack(context_heads), torch.stack(queries), torch.stack(keys))

    @staticmethod
    def _block(block: nn.Module, x: torch.Tensor, mask: torch.Tensor):
        """One block on one image: its output and what the Explainer reads of it."""
        attn = block.attn
        heads = attn.num_heads
        tokens, width = x.shape[1], x.shape[2]
        head_dim = width // heads
        ln1 = block.norm1(x)
        qkv = attn.qkv(ln1).reshape(1, tokens, 3, heads, head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q, k = attn.q_norm(q), attn.k_norm(k)
        probabilities = ((q * attn.scale) @ k.transpose(-2, -1)).softmax(dim=-1)
        # heads switched off: their slice of softmax(QK^T)V is 0 before W_O (zero fill)
        per_head = (probabilities @ v) * mask.reshape(1, heads, 1, 1)
        context = attn.norm(per_head.transpose(1, 2).reshape(1, tokens, width))
        attn_out = attn.proj(context)
        x_mid = x + block.ls1(attn_out)
        ln2 = block.norm2(x_mid)
        mlp = block.mlp(ln2)
        x_out = x_mid + block.ls2(mlp)
        length = lambda t: t[0].norm(dim=-1)  # noqa: E731  (tokens,)
        found = {"attention": probabilities[0], "q": q[0], "k": k[0],
                 "context_heads": per_head[0].norm(dim=-1),
                 "x_in": length(x), "ln1": length(ln1), "context": length(context),
                 "attn_out": length(attn_out), "x_mid": length(x_mid), "ln2": length(ln2),
                 "mlp": length(mlp), "x_out": length(x_out)}
        return x_out, found


def all_heads_on(graph: ExplainerGraph) -> torch.Tensor:
    return torch.ones(len(graph.blocks), graph.heads)


def export_onnx(module: nn.Module, input_size: tuple[int, int], path: Path) -> Path:
    """The graph of `module` as one ONNX file (weights inside, float32), for inputs of
    `input_size` (H, W), exported with torch's TorchScript-based exporter."""
    graph = ExplainerGraph(module)
    pixels = torch.zeros(1, 3, *input_size)
    # the tracer warns about timm's shape checks, which are constants for one input size
    with torch.inference_mode(False), torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(graph, (pixels, all_heads_on(graph)), str(path), dynamo=False,
                          input_names=list(INPUTS), output_names=list(OUTPUTS),
                          opset_version=OPSET, do_constant_folding=True)
    return path
