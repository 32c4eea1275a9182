"""`python -m xai_core benchmark` (added to the parser by `cli.main`; the benchmark package
is imported only when the command runs)."""

from __future__ import annotations

from .metrics import add_curve_flags, curve_options

METRIC_HELP = ("comma-separated, as declared in xai_core.metrics: deletion, insertion, "
               "pos-perturb, neg-perturb, road, randomisation, pointing-game, energy-in-box "
               "(the last two need --boxes; default: deletion,insertion)")


def add_benchmark_command(add) -> None:
    sub = add("benchmark", cmd_benchmark, "methods x images x metrics -> results.csv/json and a "
                                          "ranked summary with t intervals and sign tests",
              image=False)
    sub.add_argument("--model", action="append", metavar="ID",
                     help="model id, repeatable (default: dinov2-s14 and efficientnet-lite0)")
    sub.add_argument("--images", default="sample:",
                     help="sample: (the gallery), sample:a,b, a folder, or an ImageFolder tree")
    sub.add_argument("--methods", default="all", help="a,b,... or all (the comparison "
                                                      "page's default methods)")
    sub.add_argument("--metrics", help=METRIC_HELP)
    add_curve_flags(sub)
    sub.add_argument("--boxes", help="CSV (image,x0,y0,x1,y1) or COCO JSON boxes")
    sub.add_argument("--seed", type=int, default=0, help="random floor, bootstrap, ROAD noise")
    sub.add_argument("--out", default="benchmark-results", help="output folder")
    sub.add_argument("--backend", default="local", choices=("local", "ray"))
    sub.add_argument("--address", help="Ray cluster address (auto = the local `ray start`)")
    sub.add_argument("--shard", help="i/n: only every n-th image from the i-th (0-based)")
    sub.add_argument("--stability", action="store_true",
                     help="also each map's seed stability (mean Spearman of the maps at the "
                          "seed and the next two; two more runs of every seeded method)")
    sub.add_argument("--random-weights", action="store_true",
                     help="hub models only: random weights, for shapes and code paths")
    sub.add_argument("--progress", choices=("auto", "on", "off"), default="auto",
                     help="progress bar on stderr (auto: when it is a terminal)")


def cmd_benchmark(args) -> None:
    from ..benchmark.plan import DEFAULT_METRICS, DEFAULT_MODELS, Settings
    from ..benchmark.run import run_benchmark
    from ..benchmark.summary import format_ranking
    from .common import emit, require_available

    steps, baseline = curve_options(args)
    metrics = DEFAULT_METRICS if args.metrics is None else tuple(
        m.strip() for m in args.metrics.split(",") if m.strip())
    settings = Settings(
        models=tuple(args.model or DEFAULT_MODELS), images=args.images,
        methods=tuple(m.strip() for m in args.methods.split(",") if m.strip()),
        metrics=metrics, steps=steps, baseline=baseline, boxes=args.boxes, seed=args.seed,
        random_weights=args.random_weights, stability=args.stability)
    if not args.random_weights:
        for model_id in settings.models:
            require_available(model_id)
    progress = {"auto": None, "on": True, "off": False}[args.progress]
    summary = run_benchmark(settings, args.out, args.backend, args.address, args.shard,
                            progress)
    emit(args, summary, f"{format_ranking(summary)}\n\nwrote {args.out}/results.csv, "
                        "results.json, summary.json")
