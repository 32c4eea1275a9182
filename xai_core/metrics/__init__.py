"""Numbers about explanation maps: `faithfulness` (deletion, insertion and perturbation
curves), `road`, `randomisation`, `localisation` (against a box), `agreement` (between two
maps), `stability`, and `text_heads` (what the attention heads of a text encoder do over a
token sequence).

The benchmark's metrics are declared with `@metric` (`contract.py`: which direction is better,
what a metric needs, its typed options); importing this package imports the modules that
declare them, in the order `METRICS` lists them."""

from . import faithfulness, road, randomisation, localisation  # noqa: F401  (they register)
from .contract import HIGHER, LOWER, METRICS, Metric, MetricRequest, curve_metrics, needing

__all__ = ["HIGHER", "LOWER", "METRICS", "Metric", "MetricRequest", "curve_metrics", "needing"]
