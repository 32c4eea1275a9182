"""The one reset of a stored widget value, for every page and for `links`."""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st


@dataclass(frozen=True)
class Interval:
    """`value in Interval(low, high)`: low <= value <= high (for number widgets)."""

    low: float
    high: float

    def __contains__(self, value) -> bool:
        return isinstance(value, (int, float)) and self.low <= value <= self.high


def keep_valid(key: str, valid, default) -> None:
    """Reset a widget's stored value to `default` when it is not one of `valid`: a first
    visit, another model with fewer blocks or patches or other classes, a stale link."""
    if st.session_state.get(key) not in valid:
        st.session_state[key] = default
