"""ViT Lens core: models, one capture engine, XAI methods, metrics and figures.

Pure Python + torch. This package never imports streamlit.
"""

__version__ = "0.1.0"
