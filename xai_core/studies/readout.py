"""What each block would answer: the read-out ("logit lens") of a ViT.

Block k's output goes through the model's own ending - the final norm, then the head's
pooling and classifier (timm's `forward_head`: the [CLS] token, [CLS] and [DIST] averaged for
DeiT-distilled) - as if the blocks after k were not there. At the last block this is the
model's own output, so the read-out there is the model's prediction.

- Image-level: the top-5 of each block's read-out and the target's score there.
- Patch-level (ViT-Prisma's patch logit lens): each patch token of block k, after the final
  norm, put where the head reads ([CLS], and [DIST] for DeiT-distilled) and classified
  alone: the target's score per patch, block by block.

The score is the metrics' class score (`pipeline.class_scorer`: the softmax probability of
an ImageNet classifier). That score is not comparable from block to block: at DINOv2's early
blocks every class of the bank scores 0.94-0.997, so the answer's score there is higher than
at the last block, where the model has decided. What can be compared is the class's place
among the others: its rank and its margin over the runner-up (its score minus the best other
class's), and a block where every class scores within `ALIKE` of every other is flagged: it
does not tell the classes apart.

A self-supervised model (DINOv2) has a k-NN head whose bank holds final-block features; each block k gets a bank of its own, built once from
the same gallery views as the default bank (`models.knn`), so block k's features are
compared with block-k features.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..infra.cache import BoundedCache, cache_key
from ..capture import live_forward, model_layout, sharing_forwards, transformer_blocks
from ..infra.errors import OptionError
from ..images import image_sha256
from ..pipeline import Prediction, head_of, predictions_of, prepare, resolve_target

RESULTS = BoundedCache(max_entries=32, max_bytes=64 * 2**20, shared=True)
BANKS = BoundedCache(max_entries=4, max_bytes=64 * 2**20)  # kept on disk by models.knn
TOP_K = 5
ALIKE = 0.1  # a block whose class scores all lie within this of each other tells none apart
COMPARE = ("the answer's rank among the classes and its margin over the runner-up (its score "
           "minus the best other class's) can be compared across blocks; the score itself "
           f"cannot (at early blocks every class may score high); a block whose class scores "
           f"all lie within {ALIKE} of each other does not tell the classes apart")


@dataclass
class Readout:
    top: list[list[Prediction]]  # per block, best first
    target: int
    label: str
    score_kind: str
    target_scores: np.ndarray  # (blocks,): the target's score read out at each block
    patch_scores: np.ndarray | None  # (blocks, rows, cols): each patch token alone (if asked)
    bank: str  # which bank a k-NN head compares with ("" for a classifier)
    ranks: np.ndarray  # (blocks,): the target's rank among every class there (1 = top)
    margins: np.ndarray  # (blocks,): target's score minus the best other class's
    spreads: np.ndarray  # (blocks,): highest minus lowest class score

    @property
    def alike(self) -> np.ndarray:
        """(blocks,) bool: every class scores within ALIKE of every other there."""
        return self.spreads < ALIKE

    @property
    def first_block(self) -> int:
        """The first block from which every read-out's top class is the model's answer."""
        final = self.top[-1][0].index
        agree = [row[0].index == final for row in self.top]
        return next(k for k in range(len(agree)) if all(agree[k:]))

    def as_dict(self) -> dict:
        return {"blocks": [{"block": k, "top": [asdict(p) for p in row],
                            "target_score": float(self.target_scores[k]),
                            "rank": int(self.ranks[k]), "margin": float(self.margins[k]),
                            "spread": float(self.spreads[k]),
                            "classes_alike": bool(self.alike[k])}
                           for k, row in enumerate(self.top)],
                "target": self.target, "label": self.label, "score_kind": self.score_kind,
                "first_block": self.first_block, "bank": self.bank, "compare": COMPARE}


def _check(model) -> None:
    module = model.module
    if model.spec.family != "vit" or not hasattr(module, "forward_head") or any(
            kind != "self" for kind, _ in transformer_blocks(module)):
        raise OptionError(f"The read-out needs a timm VisionTransformer; "
                          f"{model.spec.display_name} has another layout.")


def normed_blocks(model, pixels: torch.Tensor) -> list[torch.Tensor]:
    """Every block's output after the final norm, (B, N, C) each, from one forward under
    the model's lock (hooks removed afterwards)."""
    outputs: list[torch.Tensor] = []
    module = model.module
    with model.lock, ExitStack() as stack, torch.inference_mode():
        for block in module.blocks:
            handle = block.register_forward_hook(lambda _m, _i, out: outputs.append(out))
            stack.callback(handle.remove)
        module(pixels.to(model.device))
        return [module.norm(out) for out in outputs]


def image_blocks(model, pixels: torch.Tensor) -> list[torch.Tensor]:
    """`normed_blocks` of one image; inside `capture.shared_forwards()` read from the
    thread's kept forward of it (the one the Explainer's capture and DAAM read), so the
    read-out runs no pass of its own."""
    if not sharing_forwards():
        return normed_blocks(model, pixels)
    live, _ = live_forward(model.module, pixels.to(model.device), model.lock)
    if len(live.recorders) != len(model.module.blocks):
        return normed_blocks(model, pixels)
    with model.lock, torch.inference_mode():
        return [model.module.norm(recorder.raw["out"].detach())
                for recorder in live.recorders]


def _ending(model, tokens: torch.Tensor) -> torch.Tensor:
    with model.lock, torch.inference_mode():
        return model.module.forward_head(tokens).float().cpu()


def _alone(model, patches: torch.Tensor) -> torch.Tensor:
    """(P, C) patch tokens, each alone in a sequence where it fills every prefix slot and
    one patch slot, so any pooling the head does reads that token only."""
    prefix = int(model.module.num_prefix_tokens)
    return patches[:, None].expand(-1, prefix + 1, -1)


def block_heads(model, head) -> tuple[list, str]:
    """One head per block: the classifier itself, or a k-NN head over block-k features of
    the gallery (only the model's default bank has block banks)."""
    blocks = len(model.module.blocks)
    if head.kind != "knn":
        return [head] * blocks, ""
    if head.fingerprint() != model.head.fingerprint():
        raise OptionError("The read-out compares each block with the gallery's bank of that "
                          "block; the examples added in this session have no such banks, so "
                          "it is shown for the model's own bank only.")
    from ..models.heads import KnnHead
    from ..models.knn import load_or_build_banks

    key = cache_key("block-banks", model, head=model.head)
    banks = BANKS.get_or_compute(key, lambda: load_or_build_banks(
        model, "knn-block-banks", lambda: _block_banks(model)))
    return [KnnHead(bank) for bank in banks], "gallery bank of each block's features"


def warm_block_banks(model) -> bool:
    """Build (or read from disk) the per-block banks of a ViT with a k-NN head, so that
    no visitor waits for them (13 s for DINOv2-S/14 on a 2-core CPU); False when the model
    has none."""
    try:
        _check(model)
    except OptionError:
        return False
    if model.head is None or model.head.kind != "knn":
        return False
    block_heads(model, model.head)
    return True


def _block_banks(model) -> list:
    """The default bank's gallery views (models.knn), embedded at every block."""
    from ..images import SAMPLES, load_sample, to_model_tensor
    from ..models.knn import VIEWS_PER_IMAGE, MemoryBank, _augmented_views

    spec, per_block, labels, sources = model.spec, None, [], []
    for sample in SAMPLES.values():
        views = list(_augmented_views(load_sample(sample.id), spec, VIEWS_PER_IMAGE))
        batch = torch.cat([to_model_tensor(view, spec.mean, spec.std) for view in views])
        features = [_ending(model, normed) for normed in normed_blocks(model, batch)]
        per_block = features if per_block is None else [
            torch.cat([old, new]) for old, new in zip(per_block, features)]
        labels += [sample.label] * len(views)
        sources += [f"{sample.id}#{i}" for i in range(len(views))]
    return [MemoryBank(F.normalize(block, dim=1), tuple(labels), tuple(sources))
            for block in per_block]


def readout(model, image, target=None, head=None, patches: bool = True) -> Readout:
    """Every block's read-out of one image (cached by content); `patches=False` leaves out
    the per-patch read-out (one forward and a head per block instead of a head per patch)."""
    _check(model)
    head = head_of(model, head)
    target = resolve_target(model, target, image, head)
    key = cache_key("readout", model, target, patches, image=image_sha256(image), head=head)
    return RESULTS.get_or_compute(key, lambda: _readout(model, image, target, head, patches))


def _readout(model, image, target: int, head, patches: bool) -> Readout:
    from ..pipeline import class_scorer, score_kind

    heads, bank = block_heads(model, head)
    grid = model_layout(model).tokens.grid
    prefix = int(model.module.num_prefix_tokens)
    top, every, per_patch = [], [], []
    for normed, block_head in zip(image_blocks(model, prepare(model, image).pixels), heads):
        scorer = class_scorer(model, target, block_head)
        output = _ending(model, normed)
        top.append(predictions_of(block_head, output, TOP_K))
        every.append(class_scores(model, block_head, output))
        if patches:
            per_patch.append(
                scorer(_ending(model, _alone(model, normed[0, prefix:]))).reshape(grid))
    every = np.stack(every)  # (blocks, classes)
    scores = every[:, target]
    others = np.delete(every, target, axis=1)
    ranks = 1 + (others > scores[:, None]).sum(axis=1)
    margins = scores - (others.max(axis=1) if others.shape[1] else scores)
    return Readout(top, target, head.class_names[target], score_kind(model, head), scores,
                   np.stack(per_patch) if patches else None, bank, ranks, margins,
                   every.max(axis=1) - every.min(axis=1))


def class_scores(model, head, output: torch.Tensor) -> np.ndarray:
    """(classes,) every class's score (`class_scorer`) for one output: the softmax of an
    ImageNet head at once, a k-NN head's class scores one class at a time (a bank has few)."""
    from ..pipeline import class_scorer

    if head.kind == "imagenet":
        return head.probabilities(output).double().numpy().ravel()
    return np.array([class_scorer(model, c, head)(output)[0]
                     for c in range(len(head.class_names))])
