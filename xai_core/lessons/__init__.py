"""What a page or lesson shows, computed without Streamlit: the Explainer's payload, page 7's
sections, page 9's lab and the warm-up of every page's defaults."""
