"""The app's pages in menu order (importable without running the app)."""

from __future__ import annotations

from pathlib import Path

PAGES = Path(__file__).resolve().parent.parent / "pages"
PAGE_LIST = [  # (file in pages/, title, icon); a page appears once its file exists
    ("home.py", "Home", ":material/home:"),
    ("0_vit_explainer.py", "0 · ViT Explainer", ":material/school:"),
    ("1_tokenization.py", "1 · Tokenization", ":material/grid_on:"),
    ("2_self_attention.py", "2 · Self-attention toy", ":material/hub:"),
    ("3_attention_distance.py", "3 · Attention distance", ":material/straighten:"),
    ("4_rollout_heads.py", "4 · Rollout & heads", ":material/layers:"),
    ("5_gradcam.py", "5 · Grad-CAM", ":material/local_fire_department:"),
    ("6_daam_flow.py", "6 · DAAM flow", ":material/animation:"),
    ("7_comparison.py", "7 · Comparison matrix", ":material/table_chart:"),
    ("8_text_attention.py", "8 · Text attention", ":material/text_fields:"),
    ("9_interventions.py", "9 · Interventions", ":material/science:"),
]


def existing_pages() -> list[tuple[str, str, str]]:
    """(file, title, icon) of every listed page whose file exists."""
    return [entry for entry in PAGE_LIST if (PAGES / entry[0]).exists()]


def url_path(page_file: str) -> str:
    """Streamlit's address of a page: its file name without the number prefix (Home: '')."""
    stem = page_file.removesuffix(".py")
    return "" if stem == "home" else stem.split("_", 1)[1] if stem[0].isdigit() else stem
