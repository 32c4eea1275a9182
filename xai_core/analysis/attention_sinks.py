"""Attention sinks: heads that send most of every query's attention to one key.

(The analysis itself; `xai_core.methods.sinks` is the `sinks` method that caches it for one
image, named after the method it registers like every method file.)

Definitions, over the self-attention blocks of a capture (named in the UI and
in the CLI's `meta`; A_bh is block b, head h's post-softmax attention, rows are
queries, every query of the block counts: prefix tokens and patches):

    received   r_bh[j] = mean over queries q of A_bh[q, j]
    sink key   j*_bh   = argmax_j r_bh[j]        (a prefix token or a patch)
    sink score s_bh    = r_bh[j*_bh]             in [1/N_keys, 1]; 1 = every query
                                                 attends to j* alone
    entropy    H_bh    = mean over q of -sum_j A_bh[q, j] ln A_bh[q, j]
                         in nats: 0 = one key, ln N_keys = uniform

A head is a *sink head* when s_bh >= SINK_THRESHOLD (more than half of the
head's attention, averaged over queries, lands on one key). A block is
*sink-dominated* when it has a sink head whose key is an image patch: that
patch then appears in rollout as a bright background pixel. A sink into a
prefix token ([CLS], [DIST], a register) is listed but does not make a block
sink-dominated, since prefix tokens are not drawn on the patch map.

CaiT's class-attention blocks are left out: they have a single query ([CLS]),
so "the key all queries agree on" would just be the peak of one attention row.

The cached analysis of one image is the `sinks` method's `detail`
(`xai_core.methods.sinks.explain(model, image)`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..capture import Capture, CaptureError
from .entropy import entropy

SINK_THRESHOLD = 0.5
DEFINITION = ("sink score = mean over all queries of A[q, j*], j* = the key with the largest "
              "mean attention (per block and head, post-softmax, self-attention blocks only); "
              f"sink head: score >= {SINK_THRESHOLD:g}; sink-dominated block: has a sink head "
              "whose key is an image patch")
ENTROPY_DEFINITION = ("entropy = mean over queries of -sum_j A[q, j] ln A[q, j], in nats "
                      "(0 = one key, ln(number of keys) = uniform)")


@dataclass(frozen=True)
class SinkHead:
    block: int  # capture block index
    head: int
    score: float
    key: int  # index in the block's key sequence (prefix tokens first)
    key_name: str
    on_patch: bool  # the key is an image patch (not [CLS], [DIST] or a register)


@dataclass(frozen=True)
class SinkAnalysis:
    scores: np.ndarray  # (blocks, heads)
    keys: np.ndarray  # (blocks, heads) int: j*, an index into the key sequence
    entropy: np.ndarray  # (blocks, heads) nats
    received: np.ndarray  # (blocks, heads, keys): r_bh, the mean attention each key gets
    blocks: list[int]  # capture block index of each row
    num_prefix_tokens: int
    prefix_names: tuple[str, ...]
    grid: tuple[int, int]

    @property
    def num_keys(self) -> int:
        return self.received.shape[-1]

    def key_name(self, key: int) -> str:
        """'[CLS]', '[REG2]', ... or 'patch 3 (row 0, col 3)'."""
        if key < self.num_prefix_tokens:
            return self.prefix_names[key]
        patch = key - self.num_prefix_tokens
        row, col = divmod(patch, self.grid[1])
        return f"patch {patch} (row {row}, col {col})"

    def is_patch(self, key: int) -> bool:
        return key >= self.num_prefix_tokens

    def head(self, position: int, head: int) -> SinkHead:
        key = int(self.keys[position, head])
        return SinkHead(self.blocks[position], head, float(self.scores[position, head]), key,
                        self.key_name(key), self.is_patch(key))

    def sink_heads(self, threshold: float = SINK_THRESHOLD) -> list[SinkHead]:
        """Every head with a sink score >= threshold, strongest first."""
        found = [self.head(int(p), int(h))
                 for p, h in zip(*np.nonzero(self.scores >= threshold))]
        return sorted(found, key=lambda s: -s.score)

    def patch_sinks(self, position: int, threshold: float = SINK_THRESHOLD) -> list[SinkHead]:
        """The sink heads of one block (by position) whose key is an image patch."""
        heads = [self.head(position, int(h))
                 for h in np.flatnonzero(self.scores[position] >= threshold)]
        return [s for s in heads if s.on_patch]

    def sink_dominated(self, threshold: float = SINK_THRESHOLD) -> list[int]:
        """Positions (rows) of the sink-dominated blocks."""
        return [p for p in range(len(self.blocks)) if self.patch_sinks(p, threshold)]

    def patch_map(self, position: int, head: int) -> np.ndarray:
        """r_bh over the patches only, on the grid: the mean attention each patch receives."""
        return self.received[position, head, self.num_prefix_tokens:].reshape(self.grid)

    def strongest(self) -> SinkHead:
        position, head = np.unravel_index(int(self.scores.argmax()), self.scores.shape)
        return self.head(int(position), int(head))


def analyse_sinks(capture: Capture, prefix_names: list[str] | None = None) -> SinkAnalysis:
    """Sink score, sink key, entropy and mean received attention of every head of every
    self-attention block. `prefix_names` (from `tokens.prefix_token_names`) label the
    prefix keys; without them they are called [PREFIX1], ..."""
    records = capture.self_attention_blocks()
    if not records:
        raise CaptureError("Sink analysis needs self-attention blocks; this model has none.")
    prefix = records[0].num_prefix_tokens
    names = list(prefix_names or [])[:prefix]
    names += [f"[PREFIX{i + 1}]" for i in range(len(names), prefix)]
    received, entropies = [], []
    for record in records:
        attn = record.acts["attn"][0].double().numpy()  # (heads, Nq, Nk)
        received.append(attn.mean(1))
        entropies.append(entropy(attn).mean(-1))  # (heads,): mean over queries, nats
    received = np.stack(received)
    return SinkAnalysis(scores=received.max(-1), keys=received.argmax(-1),
                        entropy=np.stack(entropies), received=received,
                        blocks=[r.index for r in records], num_prefix_tokens=prefix,
                        prefix_names=tuple(names), grid=capture.layout.grid)


def value_norm_ratio(capture: Capture, block: int, head: int, key: int) -> float:
    """|v_key| / median_j |v_j| for one head: how large a vector a sink head copies into
    every token (a no-op head in the strict sense would copy a near-zero one)."""
    lengths = capture.blocks[block].acts["v"][0, head].double().norm(dim=-1).numpy()
    return float(lengths[key] / np.median(lengths))
