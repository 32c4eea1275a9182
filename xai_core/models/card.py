"""The facts on a model's card, read from the loaded model (never from a table)."""

from __future__ import annotations

from ..capture import CaptureError, token_layout, transformer_blocks
from ..pipeline import prepare


def model_card(model, image=None) -> dict[str, str]:
    """Rows for the home page's card; token facts come from the real model and input."""
    spec = model.spec
    card = {"family": spec.family.upper(), "source": spec.source,
            "weights": model.weights_source,
            "parameters": f"{model.num_parameters() / 1e6:.1f} M",
            "input": f"{spec.input_size[0]}x{spec.input_size[1]} px"}
    if spec.is_vit:
        card.update(_vit_facts(model, image))
    return {key: str(value) for key, value in card.items()}


def _vit_facts(model, image) -> dict[str, str]:
    module = model.module
    try:
        blocks = transformer_blocks(module)
    except CaptureError:
        return {}
    kinds = [kind for kind, _ in blocks]
    first = blocks[0][1]
    facts = {"blocks": f"{kinds.count('self')} self-attention"
                       + (f" + {kinds.count('class')} class-attention" if "class" in kinds else ""),
             "heads": first.attn.num_heads, "width (D)": getattr(module, "embed_dim", "?")}
    if image is not None:
        layout = token_layout(module, prepare(model, image).pixels)
        facts.update({
            "patch": f"{layout.patch_size[0]}x{layout.patch_size[1]} px",
            "grid": f"{layout.grid[0]}x{layout.grid[1]} = {layout.num_patches} patches",
            "prefix tokens": layout.num_prefix_tokens,
            "tokens (N)": layout.num_tokens})
    return facts
