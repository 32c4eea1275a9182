"""How far apart two float32 computations of one thing may land, derived from the computation
instead of tuned on one machine.

Two float32 computations of the same numbers (timm's fused attention and the softmax written
out, a batch of one and of two, AVX-512 kernels and another CPU's SSE ones) add the same terms
in different orders, so each rounds differently. The derivation:

1. One rounding: |fl(a + b) - (a + b)| <= u |a + b|, u = 2**-24 for float32 (`UNIT_ROUNDOFF`).
2. One reduction of n terms (a dot product, a row of a matrix product, a softmax's sum): in
   the worst case the error grows like n u, but roundings go up as often as down, so it
   grows like sqrt(n) u times the size of the terms (Higham & Mary, "A new approach to
   probabilistic rounding error analysis", SIAM J. Sci. Comput. 2019). In a network the
   terms are about the size of the tensor's largest entry: `scale = max |reference|`. n is
   the longest reduction of one layer (`longest_reduction`): on a ViT the MLP's hidden width
   (1536 on ViT-S), longer than the model width, the tokens and the patch embedding's fan-in.
3. Depth: each block's error rides on in the residual stream and the next block adds its
   own. Taken where none cancels another, L blocks give L times one block's error
   (`depth_of`); a gradient runs the blocks forward and back: 2 L.
4. `SAFETY` = 8 covers what the estimate leaves out: both computations carry an error (2),
   a block runs about six reductions one after another (q.k, softmax, attention times values,
   the projections, the MLP), and a LayerNorm divides by a standard deviation below 1.

So   atol = SAFETY * u * sqrt(n) * L * scale,  rtol = 0.
On DINOv2 ViT-S/14 (n = 1536, L = 12) an output of scale 7 gets 1.6e-3, 2.2e-4 of its largest
entry; switching one head off moves it by 6-46 % of that entry (three heads measured), and the
interventions tests check that a head left on, or another permutation of the positions, lands
over ten times the tolerance away (120-3100 times, measured). A score read off the output (a
probability, a k-NN cosine) moves at most |d score / d output|_1 times the output's tolerance
(`score_tolerance`, `probability_tolerance`).

Measured (the numeric tests, `-m numeric`, on the development machine's 2-core AVX-512 Xeon and
with the kernels another x86-64 CPU would run: OMP_NUM_THREADS=1; ATEN_CPU_CAPABILITY=default
or avx2; DNNL_MAX_CPU_ISA=AVX2 or SSE41; MKL_ENABLE_INSTRUCTIONS=AVX2 or SSE4_2): the largest
difference reached 0.06 of this tolerance, the DINOv2 forwards 0.02. The fixed tolerances
before this module failed two tests there: the shuffled positions' forward (3.0e-5 over
1e-5 with oneDNN at SSE4.1, 1.4e-5 with ATen at AVX2, as on another machine), and a batch of
two against one image (MKL at AVX2: 2.2e-6 apart where the test wanted the same bits). Where
a sum can cancel (a Grad-CAM cell), the scale is that of its terms, not of the result.

Exact comparisons stay exact: a computation against itself, toy numbers, an identity on the
same tensors computed the same way. VIT_LENS_TOLERANCE_LOG=<file> appends every comparison's
largest difference and its tolerance to that file.
"""

from __future__ import annotations

import math
import os

import numpy as np
import torch

UNIT_ROUNDOFF = 2.0 ** -24  # float32, round to nearest
SAFETY = 8.0  # see the module docstring, step 4


def tolerance(reference, *, reduction: int, depth: int = 1) -> float:
    """Absolute tolerance for two float32 computations of `reference` that run `depth`
    reductions of up to `reduction` terms one after another, in different orders."""
    scale = float(np.abs(as_array(reference)).max())
    return SAFETY * UNIT_ROUNDOFF * math.sqrt(reduction) * depth * scale


def network_tolerance(module: torch.nn.Module, reference, *, passes: int = 1) -> float:
    """`tolerance` of a network's output (passes=1) or of a gradient through it (passes=2),
    with the longest reduction and the depth read from the module."""
    return tolerance(reference, reduction=longest_reduction(module),
                     depth=passes * depth_of(module))


def longest_reduction(module: torch.nn.Module) -> int:
    """The most terms any one output number of a layer adds: a Linear's inputs, a
    convolution's fan-in, and on a ViT the tokens an attention row sums over."""
    longest = 1
    for layer in module.modules():
        if isinstance(layer, torch.nn.Linear):
            longest = max(longest, layer.in_features)
        elif isinstance(layer, torch.nn.Conv2d):
            fan_in = layer.in_channels // layer.groups
            longest = max(longest, fan_in * math.prod(layer.kernel_size))
    embed = getattr(module, "patch_embed", None)
    if embed is not None and hasattr(embed, "num_patches"):
        longest = max(longest, embed.num_patches + int(getattr(module, "num_prefix_tokens", 1)))
    return longest


def depth_of(module: torch.nn.Module) -> int:
    """Residual blocks one after another: a ViT's `blocks`, a timm CNN's stages of blocks."""
    blocks = getattr(module, "blocks", None)
    if blocks is None:
        return sum(isinstance(m, (torch.nn.Linear, torch.nn.Conv2d)) for m in module.modules())
    return sum(len(stage) if isinstance(stage, torch.nn.Sequential) else 1 for stage in blocks)


def as_array(value) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().double().numpy()
    return np.asarray(value, dtype=np.float64)


def assert_close(got, expected, atol: float, what: str = "") -> None:
    """`got` equals `expected` within `atol` (from `tolerance`) everywhere, rtol 0."""
    got, expected = as_array(got), as_array(expected)
    assert got.shape == expected.shape, (what, got.shape, expected.shape)
    largest = float(np.abs(got - expected).max()) if got.size else 0.0
    log = os.environ.get("VIT_LENS_TOLERANCE_LOG")
    if log:
        test = os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0]
        with open(log, "a") as out:
            share = largest / atol if atol else (math.inf if largest else 0.0)
            out.write(f"{test}\t{what}\t{largest:.3e}\t{atol:.3e}\t{share:.3f}\n")
    assert largest <= atol, (f"{what}: largest difference {largest:.3e} over the float32 "
                             f"tolerance {atol:.3e}")


def score_tolerance(score, output: torch.Tensor, output_atol: float) -> float:
    """Tolerance of a score read off a network's output (a probability, a k-NN class score):
    to first order the score moves by at most sum |d score / d output| times the output's
    own tolerance (`score` a differentiable function of the output, summed over a batch)."""
    with torch.enable_grad(), torch.inference_mode(False):
        output = output.detach().clone().float().requires_grad_(True)
        (slope,) = torch.autograd.grad(score(output), [output])
    return output_atol * float(slope.abs().sum())


def probability_tolerance(module: torch.nn.Module, logits: torch.Tensor) -> float:
    """Tolerance of any softmax probability read off a network's `logits`: a probability
    moves by at most half the largest change of a logit (sum_j |dp_t/dz_j| = 2 p (1 - p)),
    so one bound serves every class and every image whose logits are of this scale."""
    return network_tolerance(module, logits) / 2


def class_score_tolerance(model, target: int, output: torch.Tensor) -> float:
    """Tolerance of the class score the app reads off a loaded model's `output`
    (`metrics.faithfulness.class_scorer`): the softmax probability of an ImageNet head,
    the k-NN class score (cosines) of a bank."""
    if model.head.kind == "imagenet":
        return probability_tolerance(model.module, output)
    return score_tolerance(model.head.score_fn(target), output,
                           network_tolerance(model.module, output))
