"""Widget helpers shared by the pages: keeping a stored widget value valid, and one widget
per declared option of an explanation method."""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st


@dataclass(frozen=True)
class Interval:
    """`value in Interval(low, high)`: low <= value <= high (for float widgets)."""

    low: float
    high: float

    def __contains__(self, value) -> bool:
        return isinstance(value, (int, float)) and self.low <= value <= self.high


def keep_valid(key: str, valid, default) -> None:
    """Reset a widget's stored value to `default` when it is not one of `valid`: a first
    visit, another model with fewer blocks or patches, a stale link."""
    if st.session_state.get(key) not in valid:
        st.session_state[key] = default


def method_options(method, model, key: str) -> dict:
    """One widget per declared option of `method` (xai_core.methods.Method), its bounds and
    choices read from `model`; returns the options set away from their defaults."""
    changed = {}
    for option in method.options:
        limits = option.limits(model)
        widget_key = f"{key}_{option.name}"
        default = limits["default"]
        if option.kind == "choice" or option.word is not None:
            choices = list(limits["choices"]) if option.kind == "choice" else [
                option.word, *range(limits["low"], limits["high"] + 1)]
            keep_valid(widget_key, choices, default)
            value = st.selectbox(option.name, choices, key=widget_key, help=option.help)
        elif option.kind == "int":
            keep_valid(widget_key, range(limits["low"], limits["high"] + 1), default)
            value = st.number_input(option.name, limits["low"], limits["high"], step=1,
                                    key=widget_key, help=option.help)
        else:
            keep_valid(widget_key, Interval(limits["low"], limits["high"]), default)
            value = st.number_input(option.name, float(limits["low"]), float(limits["high"]),
                                    step=0.05, key=widget_key, help=option.help)
        if value != default:
            changed[option.name] = value
    return changed
