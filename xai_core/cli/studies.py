"""`python -m xai_core interventions` (the declarations) and `intervene` (one image before
and after). Added to the parser by `cli.main`; heavy imports happen only when a command runs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..infra.provenance import run_meta
from .common import (CliError, add_budget_flag, emit, labelled, load_image, load_model,
                     parse_sets, save_npz)


def add_interventions_commands(add) -> None:
    add_head_importance_command(add)
    add_readout_command(add)
    add_cause_vs_claim_command(add)
    add("interventions", cmd_interventions, "list the interventions with their values and "
                                            "conventions", image=False)
    sub = add("intervene", cmd_intervene, "top-5 and the target's score before and after "
                                          "switching heads off, dropping tokens, ...")
    sub.add_argument("--set", action="append", metavar="KEY=VALUE",
                     help="intervention, e.g. heads_off=0.5,3.2 (0-based); repeatable")
    sub.add_argument("--target", help="class index or name (default: the top prediction)")
    sub.add_argument("--out", help="folder to write the maps under the intervention to")


def cmd_interventions(args) -> None:
    from ..studies.interventions import describe

    described = describe()
    lines = [f"{o['name']:14} {o['type']:8} default {o['default']}: {o['help']}"
             for o in described["interventions"]]
    emit(args, described, "\n".join(lines + ["", described["convention"]]))


def cmd_intervene(args) -> None:
    from ..studies.interventions import check_before_load, intervene

    given = parse_sets(args.set)
    check_before_load(args.model, given)  # every bad value refused before the weights load
    out = _out_folder(args.out)
    model, image = load_model(args), load_image(args.image)
    if model.head is None:
        raise CliError(f"{model.spec.display_name} has no class score to change.")
    outcome = intervene(model, image, target=args.target, maps=out is not None, **given)
    payload = outcome.as_dict()
    if out is not None:
        path = out / "intervention.npz"
        save_npz(str(path), outcome.maps, run_meta(model, image, {
            "target": outcome.target, "intervention": outcome.intervention,
            "maps_skipped": outcome.maps_skipped}))
        payload["out"] = str(path)
    payload.update(model=model.spec.id, random_weights=model.random_weights)
    emit(args, payload, labelled(model, _text(outcome)))


def _out_folder(name: str | None) -> Path | None:
    if name is None:
        return None
    folder = Path(name)
    if not folder.parent.exists():
        raise CliError(f"The folder {folder.parent} does not exist.")
    if folder.exists() and not folder.is_dir():
        raise CliError(f"{folder} is a file, not a folder.")
    folder.mkdir(exist_ok=True)
    return folder


def _text(outcome) -> str:
    from ..studies.interventions import drop_words

    target = outcome.target
    rows = [f"{'before':32} after"]
    for before, after in zip(outcome.before, outcome.after):
        rows.append(f"{before.probability:7.2%}  {before.label[:22]:22}  "
                    f"{after.probability:7.2%}  {after.label}")
    rows.append(f"target {target['label']} ({target['index']}): {target['score_kind']} "
                f"{target['before']:.4f} -> {target['after']:.4f} "
                f"(drop {target['drop']:+.4f}: it {drop_words(target['drop'])})")
    rows.append(f"interventions: {outcome.intervention['values'] or 'none'}")
    if outcome.maps:
        rows.append(f"maps under the intervention: {', '.join(sorted(outcome.maps))} "
                    f"{np.shape(next(iter(outcome.maps.values())))}")
    return "\n".join(rows)


def add_head_importance_command(add) -> None:
    sub = add("head-importance", cmd_head_importance, "the target's score drop when each head "
                                                      "is switched off, blocks x heads")
    sub.add_argument("--target", help="class index or name (default: the top prediction)")
    sub.add_argument("--fill", default="zero", choices=("zero", "mean"),
                     help="what replaces the head's output before W_O (heads_fill)")
    sub.add_argument("--out", help="write the grid to this .npz")


def cmd_head_importance(args) -> None:
    from ..studies.interventions import check_before_load, head_importance

    check_before_load(args.model, {"heads_fill": args.fill})  # a ViT, before it loads
    model, image = load_model(args), load_image(args.image)
    if model.head is None:
        raise CliError(f"{model.spec.display_name} has no class score to change.")
    grid = head_importance(model, image, target=args.target, fill=args.fill)
    payload = {**grid.as_dict(), "model": model.spec.id, "random_weights": model.random_weights}
    if args.out:
        save_npz(args.out, {"drops": grid.drops.astype(np.float32),
                            "sink_scores": grid.sink_scores.astype(np.float32),
                            "entropy": grid.entropy.astype(np.float32)},
                 run_meta(model, image, {k: v for k, v in payload.items() if k != "drops"}))
        payload["out"] = args.out
    block, head = np.unravel_index(int(grid.drops.argmax()), grid.drops.shape)
    text = (f"target {grid.label} ({grid.target}): {grid.score_kind} {grid.score:.4f}; "
            f"largest drop (score before - with the head off) {grid.drops.max():+.4f} at "
            f"block {block}, head {head} "
            f"({grid.fill}); Spearman rho with sink score "
            f"{grid.correlations['sink_score']:+.2f}, with entropy "
            f"{grid.correlations['entropy']:+.2f}; {grid.seconds:.1f} s")
    emit(args, payload, labelled(model, text))


def add_readout_command(add) -> None:
    sub = add("readout", cmd_readout, "what each block would answer (logit lens), per block "
                                      "and per patch")
    sub.add_argument("--target", help="class index or name (default: the top prediction)")
    sub.add_argument("--out", help="write the per-patch scores (blocks x rows x cols) to this "
                                   ".npz")


def cmd_readout(args) -> None:
    from ..models import get_spec
    from ..studies.readout import COMPARE, readout

    if not get_spec(args.model).is_vit:
        raise CliError("readout reads a ViT's blocks: choose a ViT model.")
    model, image = load_model(args), load_image(args.image)
    if model.head is None:
        raise CliError(f"{model.spec.display_name} has no class score to read out.")
    result = readout(model, image, target=args.target)
    payload = {**result.as_dict(), "model": model.spec.id,
               "random_weights": model.random_weights}
    if args.out:
        save_npz(args.out, {"patch_scores": result.patch_scores.astype(np.float32),
                            "target_scores": result.target_scores.astype(np.float32)},
                 run_meta(model, image, {k: v for k, v in payload.items() if k != "blocks"}))
        payload["out"] = args.out
    rows = [f"block {k:2}: {row[0].label} ({row[0].probability:.2%}), "
            f"{result.label} {result.target_scores[k]:.4f}, rank {result.ranks[k]}, margin "
            f"{result.margins[k]:+.4f}" + (" (every class alike)" if result.alike[k] else "")
            for k, row in enumerate(result.top)]
    rows.append(f"the answer holds from block {result.first_block} on ({result.score_kind}); "
                f"{COMPARE}")
    emit(args, payload, labelled(model, "\n".join(rows)))


def add_cause_vs_claim_command(add) -> None:
    sub = add("cause-vs-claim", cmd_cause_vs_claim,
              "score drop when each method's top-k patches are removed, against k random "
              "patches and your own")
    sub.add_argument("--target", help="class index or name (default: the top prediction)")
    sub.add_argument("--remove", help="tokens, pixels or tokens,pixels (default: both on a "
                                      "ViT, pixels on a CNN)")
    sub.add_argument("--baseline", help="what masked pixels show (the benchmark's baselines; "
                                        "default: the masking intervention's)")
    sub.add_argument("--k", help="patch counts, comma-separated (default: 1,2,4,8,16,32, "
                                 "those below the model's patch count)")
    sub.add_argument("--draws", default="20", help="random draws per k (20-200)")
    sub.add_argument("--seed", default="0", help="seed of the random draws")
    sub.add_argument("--methods", help="comma-separated (default: page 7's ticked methods)")
    sub.add_argument("--learner", default="", help="your patches (0-based, raster order), "
                                                   "e.g. 3,7-9")
    add_budget_flag(sub)


def cmd_cause_vs_claim(args) -> None:
    from ..studies.cause_vs_claim import BASELINE, cause_vs_claim, check_budget, check_request
    from ..studies.interventions import model_shell

    shell = model_shell(args.model)
    removals = (args.remove.split(",") if args.remove
                else ("tokens", "pixels") if shell.spec.family == "vit" else ("pixels",))
    learner = args.learner
    methods = args.methods.split(",") if args.methods else None
    request = dict(removals=removals, ks=args.k, draws=args.draws, seed=args.seed,
                   learner=learner, methods=methods, baseline=args.baseline or BASELINE.default)
    check_budget(check_request(shell, **request), shell)  # refused before the weights load
    model, image = load_model(args), load_image(args.image)
    if model.head is None:
        raise CliError(f"{model.spec.display_name} has no class score to change.")
    found = cause_vs_claim(model, image, target=args.target, **request)
    payload = {**found.as_dict(), "model": model.spec.id, "random_weights": model.random_weights}
    emit(args, payload, labelled(model, _claims_text(found)))


def _claims_text(found) -> str:
    rows = [f"target {found.label} ({found.target}): {found.score_kind} {found.score:.4f}; "
            f"drop = score before - after, at k = {', '.join(map(str, found.ks))}"]
    for name, removal in found.removals.items():
        rows.append(f"-- {name} ({removal.removal}):")
        for method, drops in removal.methods.items():
            rows.append(f"{method:18} " + " ".join(f"{d:+.4f}" for d in drops))
        low_high = removal.random_interval()
        rows.append(f"{'random (mean)':18} " + " ".join(f"{d:+.4f}"
                                                        for d in removal.random_mean()))
        rows.append(f"{'random 95% t':18} " + " ".join(f"[{lo:+.4f},{hi:+.4f}]"
                                                       for lo, hi in low_high))
        if removal.learner is not None:
            rows.append(f"your {len(found.learner)} patches: {removal.learner:+.4f}")
    closest = found.closest_method()
    if closest is not None:
        rows.append(f"closest to your choice: {closest[0]} ({closest[1]:.0%} of your patches)")
    rows += [f"{name}: {why}" for name, why in found.failed.items()]
    return "\n".join(rows)
