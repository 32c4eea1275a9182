"""Page 7's pieces that are not a view: one model's column of choices (target, methods,
their options) with its runs, and Integrated Gradients' completeness note."""

import streamlit as st

from xai_core.studies import method_runs
from xai_core.lessons.comparison import FAMILY_LABEL
from xai_core.infra import budget
from xai_core.methods import METHODS
from xai_core.methods.integrated_gradients import COMPLETENESS_LIMIT
from xai_core.pipeline import score_kind

from . import links, literal, state, ui


def model_section(model, image) -> method_runs.ModelSection:
    """One model's column: its target class, methods and their options, and their runs."""
    family = model.spec.family
    head = state.session_head(model)
    ui.model_caption(model)
    target = ui.target_picker(model, image, key=f"cmp_target_{family}", head=head,
                              label=f"Target class for the {FAMILY_LABEL[family]}")
    names = [info.name for info in method_runs.applicable_methods(model)]
    if not names:
        st.info(f"No explanation method for a {FAMILY_LABEL[family]} is registered yet.")
    chosen = links.choices(
        st.multiselect, f"{FAMILY_LABEL[family]} methods", names, key=f"cmp_methods_{family}",
        default=method_runs.default_methods(model), what="method",
        help="Every registered method for this kind of model. Off by default: " + "; ".join(
            f"{name} ({why})" for name, why in method_runs.off_by_default().items()) + ".")
    options = {}
    if ui.panel_switch("Change the methods' options (off: every method at its defaults)",
                       key=f"cmp_options_{family}", opened_by_prefix=f"cmp_opt_{family}_"):
        for name in [n for n in chosen if METHODS[n].options]:
            st.markdown(f"**{name}**")
            options[name] = ui.method_options(METHODS[name], model, key=f"cmp_opt_{family}_{name}")
    chosen = [name for name in chosen if options.get(name, {}) is not None]  # over budget
    with st.spinner(f"Running {len(chosen)} methods on {model.spec.display_name}..."):
        runs = method_runs.run_methods(model, image, chosen, target, head, options,
                                   should_stop=ui.stop_check())
    for run in runs:
        if run.over_budget:
            st.error(literal.text(run.error))
        elif run.error:
            st.warning(f"**{run.name}** cannot run here: {literal.text(run.error)}")
    return method_runs.ModelSection(model, target, head.class_names[target],
                                    score_kind(model, head), runs, head=head)


def completeness_note(section, run) -> None:
    """Integrated Gradients promises that its map adds up to f(x) - f(reference): say how
    far it misses, and offer more steps when it misses by more than COMPLETENESS_LIMIT."""
    family, error = section.model.spec.family, run.meta.get("completeness_error")
    change, steps, delta = run.meta["score_change"], run.options["steps"], run.meta.get(
        "convergence_delta")
    who = f"{FAMILY_LABEL[family]} Integrated Gradients"
    if error is None:
        st.caption(f"{who}: the score does not change from the reference, so there is nothing "
                   "for the attributions to add up to.")
    elif error <= COMPLETENESS_LIMIT:
        st.caption(f"{who}: the attributions add up to the score change f(x) - f(reference) = "
                   f"{change:.4g} within {error:.1%} (convergence delta {delta:.3g}, {steps} "
                   "steps).")
    else:
        st.warning(f"{who}: the attributions miss the score change f(x) - f(reference) = "
                   f"{change:.4g} by {error:.1%} (Captum's convergence delta {delta:.3g} at "
                   f"{steps} steps), more than {COMPLETENESS_LIMIT:.0%}: the map does not add "
                   "up. Raise **steps** under 'Change the methods' options' above (the error "
                   "shrinks as steps grow).")
        fitting = budget.fitting_range(METHODS[run.name], "steps", run.options, section.model)
        more = min(2 * steps, fitting[1]) if fitting else steps
        if more <= steps:
            st.caption("More steps do not fit this server's budget for one request.")
        else:
            st.button(f"Rerun {FAMILY_LABEL[family]} Integrated Gradients with {more} steps",
                      key=f"cmp_more_steps_{family}", on_click=ask_for_steps, args=(family, more))


def ask_for_steps(family: str, steps: int) -> None:
    """Rerun through the option's link, as a shared address would."""
    st.query_params[f"cmp_options_{family}"] = "true"
    st.query_params[f"cmp_opt_{family}_integrated-gradients_steps"] = str(steps)
