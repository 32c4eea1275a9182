"""A timm ViT's forward, cut where the browser needs to restart it, written as graphs torch's
ONNX exporter can trace; and the backward DAAM needs, written out as forward operations.

Three graphs run the model (B blocks, H heads, N tokens, C width, d = head_dim):
- `embed`: `pixels` (1, 3, H, W), normalised as `images.to_model_tensor` does -> `tokens`
  (N, C), the sequence entering block 0 (patches, prefix tokens, positions);
- `block`: ONE graph for every block: `x` (N, C) entering the block, `head_mask` (H,)
  (1 keeps a head, 0 switches it off) and the block's weights as inputs (`BLOCK_WEIGHTS`,
  the same for every block: the browser feeds block b's) -> `BLOCK_OUTPUTS`: the sequence
  leaving the block, its attention (H, N, N), each token's length after each of the block's
  eight steps (8, N, in `NORM_STEPS` order), each head's query and output lengths (H, N),
  the queries and keys (H, N, d) and the read-out (what the model would answer if it ended
  after this block: the final norm and the head, `studies/readout.py`). The last block's
  read-out is the model's output. A head switched off has its slice of softmax(QKᵀ/√d)V set
  to 0 before W_O, page 9's `heads_off` with the zero fill (`interventions._edit_heads`);
- `block_grad` and `ending_grad`: DAAM's backward (methods/daam.py, the k-NN variant): from
  the gradient w of the answer's score at the output (`ending_grad`: through the final
  norm and the [CLS] pooling), block by block down (`block_grad`: the gradient at the
  block's input from the gradient at its output, and the block's DAAM map
  L_b = ReLU(Σ_c C_b,c S_b[:, c]) over the patch tokens, unclipped channel weights as the
  k-NN variant's default). Written out with forward operations (LayerNorm's, GELU's,
  softmax's and the linear layers' derivatives), checked against torch's autograd.

Because the block's weights are inputs, one small graph serves every block: a head switch
in block b restarts from the sequence that entered block b in the photo's forward, and a
full forward is embed, then block 0..B-1 in turn: both run the same operations on the same
numbers, so a restarted run equals the full one bit for bit.

The layout (grid, prefix tokens, input size) is the model's: nothing here assumes 14x14 or
224. Only models whose blocks are timm's plain self-attention `Block` are taken (DeiT,
DINOv2 and its register variants); anything else is refused in one sentence.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ..capture import transformer_blocks

NORM_STEPS = ("x_in", "ln1", "context", "attn_out", "x_mid", "ln2", "mlp", "x_out")
# what the browser stacks over the blocks (the Explainer's payloads read these)
OUTPUTS = ("output", "attention", "norms", "q_norms", "context_heads", "q", "k", "readout")
BLOCK_WEIGHTS = ("norm1.weight", "norm1.bias", "attn.qkv.weight", "attn.qkv.bias",
                 "attn.proj.weight", "attn.proj.bias", "ls1", "norm2.weight", "norm2.bias",
                 "mlp.fc1.weight", "mlp.fc1.bias", "mlp.fc2.weight", "mlp.fc2.bias", "ls2")
ENDING_WEIGHTS = ("norm.weight", "norm.bias")
BLOCK_OUTPUTS = ("x_out", "attention", "norms", "q_norms", "context_heads", "q", "k", "readout")
GRAPHS = {  # name -> (inputs, outputs)
    "embed": (("pixels",), ("tokens",)),
    "block": (("x", "head_mask", *BLOCK_WEIGHTS, *ENDING_WEIGHTS), BLOCK_OUTPUTS),
    "block_grad": (("x", "grad_out", *BLOCK_WEIGHTS), ("grad_in", "daam")),
    "ending_grad": (("x", "score_grad", "norm.weight"), ("grad",)),
}
OPSET = 17


class UnsupportedModel(ValueError):
    """The model's blocks are not ones these graphs follow (said in one sentence)."""


def _identity(module) -> bool:
    return module is None or isinstance(module, nn.Identity)


def self_attention_blocks(module: nn.Module) -> list[nn.Module]:
    """The model's blocks, when every one is a plain timm self-attention block (LayerNorms,
    no query/key norm, exact GELU MLP; LayerScale optional)."""
    found = transformer_blocks(module)
    if not found or any(kind != "self" for kind, _ in found):
        raise UnsupportedModel("The browser model follows self-attention ViTs only (DeiT, "
                               "DINOv2); this model has other blocks.")
    blocks = [block for _, block in found]
    for block in blocks:
        attn, mlp = getattr(block, "attn", None), getattr(block, "mlp", None)
        if attn is None or not hasattr(attn, "qkv") or not hasattr(attn, "proj") or mlp is None:
            raise UnsupportedModel("The browser model needs timm attention blocks (qkv, proj).")
        plain = (isinstance(block.norm1, nn.LayerNorm) and isinstance(block.norm2, nn.LayerNorm)
                 and all(_identity(getattr(attn, n, None)) for n in ("q_norm", "k_norm", "norm"))
                 and _identity(getattr(mlp, "norm", None))
                 and isinstance(mlp.act, nn.GELU) and mlp.act.approximate == "none"
                 and hasattr(mlp, "fc1") and hasattr(mlp, "fc2"))
        if not plain:
            raise UnsupportedModel("The browser model follows plain ViT blocks (LayerNorm, "
                                   "attention, a GELU MLP); this model's blocks differ.")
    return blocks


def _layer_scale(module, width: int) -> torch.Tensor:
    gamma = getattr(module, "gamma", None)
    return torch.ones(width) if gamma is None else gamma.detach()


def block_weights(block: nn.Module) -> dict[str, torch.Tensor]:
    """One block's weights by `BLOCK_WEIGHTS` name (LayerScale 1 where the block has none,
    a 0 bias where a layer has none), float32."""
    width = block.norm1.normalized_shape[0]

    def bias(linear):
        return (linear.bias if linear.bias is not None
                else torch.zeros(linear.out_features)).detach()

    attn, mlp = block.attn, block.mlp
    found = {"norm1.weight": block.norm1.weight.detach(), "norm1.bias": block.norm1.bias.detach(),
             "attn.qkv.weight": attn.qkv.weight.detach(), "attn.qkv.bias": bias(attn.qkv),
             "attn.proj.weight": attn.proj.weight.detach(), "attn.proj.bias": bias(attn.proj),
             "ls1": _layer_scale(block.ls1, width),
             "norm2.weight": block.norm2.weight.detach(), "norm2.bias": block.norm2.bias.detach(),
             "mlp.fc1.weight": mlp.fc1.weight.detach(), "mlp.fc1.bias": bias(mlp.fc1),
             "mlp.fc2.weight": mlp.fc2.weight.detach(), "mlp.fc2.bias": bias(mlp.fc2),
             "ls2": _layer_scale(block.ls2, width)}
    return {name: value.float().contiguous() for name, value in found.items()}


def ending_weights(module: nn.Module) -> dict[str, torch.Tensor]:
    norm = module.norm
    return {"norm.weight": norm.weight.detach().float(), "norm.bias": norm.bias.detach().float()}


class Layout:
    """What the block graphs need to know of the model besides weights."""

    def __init__(self, module: nn.Module):
        blocks = self_attention_blocks(module)
        first = blocks[0]
        self.blocks = len(blocks)
        self.heads = int(first.attn.num_heads)
        self.width = int(first.norm1.normalized_shape[0])
        self.head_dim = self.width // self.heads
        self.scale = float(first.attn.scale)
        self.eps = (float(first.norm1.eps), float(first.norm2.eps), float(module.norm.eps))
        self.prefix = int(module.num_prefix_tokens)


# --- the forward --------------------------------------------------------------------------------

def _attention(x, w, layout: Layout):
    """LayerNorm 1, queries, keys, values (H, N, d) and the attention probabilities."""
    tokens, heads, d = x.shape[0], layout.heads, layout.head_dim
    ln1 = F.layer_norm(x, (layout.width,), w["norm1.weight"], w["norm1.bias"], layout.eps[0])
    qkv = F.linear(ln1, w["attn.qkv.weight"], w["attn.qkv.bias"])
    q, k, v = qkv.reshape(tokens, 3, heads, d).permute(1, 2, 0, 3).unbind(0)
    probabilities = ((q * layout.scale) @ k.transpose(-2, -1)).softmax(dim=-1)
    return ln1, q, k, v, probabilities


def block_forward(x, head_mask, w: dict, layout: Layout) -> dict[str, torch.Tensor]:
    """One block on one image's tokens (N, C): every intermediate the graphs read."""
    tokens, heads, width = x.shape[0], layout.heads, layout.width
    ln1, q, k, v, probabilities = _attention(x, w, layout)
    per_head = (probabilities @ v) * head_mask.reshape(heads, 1, 1)
    context = per_head.transpose(0, 1).reshape(tokens, width)
    attn_out = F.linear(context, w["attn.proj.weight"], w["attn.proj.bias"])
    x_mid = x + w["ls1"] * attn_out
    ln2 = F.layer_norm(x_mid, (width,), w["norm2.weight"], w["norm2.bias"], layout.eps[1])
    hidden = F.linear(ln2, w["mlp.fc1.weight"], w["mlp.fc1.bias"])
    mlp = F.linear(F.gelu(hidden), w["mlp.fc2.weight"], w["mlp.fc2.bias"])
    x_out = x_mid + w["ls2"] * mlp
    return {"x_in": x, "ln1": ln1, "q": q, "k": k, "v": v, "attention": probabilities,
            "per_head": per_head, "context": context, "attn_out": attn_out, "x_mid": x_mid,
            "ln2": ln2, "hidden": hidden, "mlp": mlp, "x_out": x_out}


class EmbedGraph(nn.Module):
    def __init__(self, module: nn.Module):
        super().__init__()
        self.vit = module.eval()

    def forward(self, pixels):
        vit = self.vit
        return vit.norm_pre(vit.patch_drop(vit._pos_embed(vit.patch_embed(pixels))))[0]


class BlockGraph(nn.Module):
    """`block`: one block, its weights as inputs, the model's head for the read-out."""

    def __init__(self, module: nn.Module):
        super().__init__()
        self.vit = module.eval()
        self.layout = Layout(module)

    def forward(self, x, head_mask, *weights):
        # float16-stored weights come in as float16: the arithmetic is float32
        w = {name: value.float() for name, value in zip(BLOCK_WEIGHTS + ENDING_WEIGHTS, weights)}
        found = block_forward(x, head_mask, w, self.layout)
        x_out = found["x_out"]
        normed = F.layer_norm(x_out, (self.layout.width,), w["norm.weight"], w["norm.bias"],
                              self.layout.eps[2])
        readout = self.vit.forward_head(normed[None])[0]
        lengths = torch.stack([found[name].norm(dim=-1) for name in NORM_STEPS])
        return (x_out, found["attention"], lengths, found["q"].norm(dim=-1),
                found["per_head"].norm(dim=-1), found["q"], found["k"], readout)


# --- DAAM's backward ----------------------------------------------------------------------------

def layer_norm_grad(x, grad_y, weight, eps: float):
    """d/dx of LayerNorm(x) (last dimension) given the gradient at its output."""
    mean = x.mean(-1, keepdim=True)
    centred = x - mean
    sigma = (centred.pow(2).mean(-1, keepdim=True) + eps).sqrt()
    normed = centred / sigma
    grad_normed = grad_y * weight
    return (grad_normed - grad_normed.mean(-1, keepdim=True)
            - normed * (grad_normed * normed).mean(-1, keepdim=True)) / sigma


def gelu_grad(x):
    """d/dx of the exact GELU x·Φ(x): Φ(x) + x·φ(x)."""
    return 0.5 * (1 + torch.erf(x / math.sqrt(2))) + x * torch.exp(-0.5 * x * x) / math.sqrt(
        2 * math.pi)


def block_backward(x, grad_out, w: dict, layout: Layout):
    """(the gradient at the block's input, the [CLS] context's gradient C_b (C,), the values
    (H, N, d) and the attention (H, N, N)): the block's backward from the gradient at its
    output, every head on (DAAM explains the model as trained)."""
    tokens, heads, width, d = x.shape[0], layout.heads, layout.width, layout.head_dim
    found = block_forward(x, torch.ones(heads), w, layout)
    probabilities, q, k, v = found["attention"], found["q"], found["k"], found["v"]
    grad_hidden = ((w["ls2"] * grad_out) @ w["mlp.fc2.weight"]) * gelu_grad(found["hidden"])
    grad_ln2 = grad_hidden @ w["mlp.fc1.weight"]
    grad_mid = grad_out + layer_norm_grad(found["x_mid"], grad_ln2, w["norm2.weight"],
                                          layout.eps[1])
    grad_context = (w["ls1"] * grad_mid) @ w["attn.proj.weight"]  # (N, C)
    grad_heads = grad_context.reshape(tokens, heads, d).transpose(0, 1)  # (H, N, d)
    grad_probabilities = grad_heads @ v.transpose(-2, -1)
    grad_v = probabilities.transpose(-2, -1) @ grad_heads
    grad_scores = probabilities * (
        grad_probabilities - (grad_probabilities * probabilities).sum(-1, keepdim=True))
    grad_q = (grad_scores @ k) * layout.scale
    grad_k = (grad_scores.transpose(-2, -1) @ q) * layout.scale
    grad_qkv = torch.stack([grad_q, grad_k, grad_v]).permute(2, 0, 1, 3).reshape(tokens, 3 * width)
    grad_ln1 = grad_qkv @ w["attn.qkv.weight"]
    grad_in = grad_mid + layer_norm_grad(x, grad_ln1, w["norm1.weight"], layout.eps[0])
    return grad_in, grad_context[0], v, probabilities


def daam_map(channel_grad, v, probabilities, prefix: int):
    """L_b over the patch tokens: ReLU(Σ_c C_c S[n, c]) with S[n, h·d+j] = a0[h, n] V[h, n, j]
    (methods/daam.py, channel weights unclipped)."""
    heads, _, d = v.shape
    per_token = (v * channel_grad.reshape(heads, 1, d)).sum(-1) * probabilities[:, 0, :]
    return per_token.sum(0)[prefix:].clamp(min=0)


class BlockGradGraph(nn.Module):
    """`block_grad`: the gradient at a block's input and its DAAM map."""

    def __init__(self, module: nn.Module):
        super().__init__()
        self.layout = Layout(module)

    def forward(self, x, grad_out, *weights):
        w = {name: value.float() for name, value in zip(BLOCK_WEIGHTS, weights)}
        grad_in, channel_grad, v, probabilities = block_backward(x, grad_out, w, self.layout)
        return grad_in, daam_map(channel_grad, v, probabilities, self.layout.prefix)


def check_daam_ending(module: nn.Module) -> None:
    """The ending the DAAM backward follows: the final norm, then the [CLS] token as the
    output (a k-NN head's model: no classifier layer)."""
    plain = (getattr(module, "global_pool", None) == "token" and _identity(module.fc_norm)
             and _identity(module.head) and isinstance(module.norm, nn.LayerNorm))
    if not plain:
        raise UnsupportedModel("DAAM in the browser follows a model whose output is its "
                               "normalised [CLS] token (DINOv2); this model ends otherwise.")


class EndingGradGraph(nn.Module):
    """`ending_grad`: the gradient at the last block's output of ⟨output, score_grad⟩."""

    def __init__(self, module: nn.Module):
        super().__init__()
        check_daam_ending(module)
        self.eps = float(module.norm.eps)

    def forward(self, x, score_grad, norm_weight):
        cls = layer_norm_grad(x[:1], score_grad[None], norm_weight.float(), self.eps)
        return torch.cat([cls, x[1:] * 0])  # only [CLS] reaches the output


# --- export -------------------------------------------------------------------------------------

def example_inputs(module: nn.Module, input_size: tuple[int, int],
                   halved: frozenset[str] = frozenset()) -> dict[str, tuple]:
    """Inputs of the right shapes for each graph (the tracer's examples); the weights named
    in `halved` come as float16."""
    layout = Layout(module)
    block = self_attention_blocks(module)[0]
    with torch.no_grad():
        tokens = EmbedGraph(module)(torch.zeros(1, 3, *input_size))
    stored = lambda found: tuple(v.half() if k in halved else v  # noqa: E731
                                 for k, v in found.items())
    weights, ending = stored(block_weights(block)), stored(ending_weights(module))
    x = torch.randn_like(tokens)
    return {"embed": (torch.zeros(1, 3, *input_size),),
            "block": (x, torch.ones(layout.heads), *weights, *ending),
            "block_grad": (x, torch.randn_like(x), *weights),
            "ending_grad": (x, torch.randn(layout.width), ending[0])}


def graph_modules(module: nn.Module) -> dict[str, nn.Module]:
    graphs = {"embed": EmbedGraph(module), "block": BlockGraph(module),
              "block_grad": BlockGradGraph(module)}
    try:
        graphs["ending_grad"] = EndingGradGraph(module)
    except UnsupportedModel:
        pass  # no DAAM in the browser for this model
    return graphs


def export_onnx(module: nn.Module, input_size: tuple[int, int], folder: Path,
                halved: frozenset[str] = frozenset()) -> dict[str, Path]:
    """Every graph of `module` as an ONNX file in `folder` (the embedding's weights inside,
    float32; the blocks' as inputs, float16 for those named in `halved`), for inputs of
    `input_size` (H, W), exported with torch's TorchScript-based exporter. An input a graph
    does not use is left out of it (the ONNX file lists the inputs it kept)."""
    examples = example_inputs(module, input_size, frozenset(halved))
    paths = {}
    for name, graph in graph_modules(module).items():
        inputs, outputs = GRAPHS[name]
        paths[name] = folder / f"{name}.onnx"
        # the tracer warns about timm's shape checks, which are constants for one input size
        with torch.inference_mode(False), torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(graph, examples[name], str(paths[name]), dynamo=False,
                              input_names=list(inputs), output_names=list(outputs),
                              opset_version=OPSET, do_constant_folding=True)
    return paths
