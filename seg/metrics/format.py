"""The small numeric helpers every report shares: a ratio that is NaN over nothing, and a
percentage for tables."""

from __future__ import annotations

import math


def ratio(num: float, den: float) -> float:
    """``num / den``, NaN when ``den`` is 0 (a metric over no pixel is undefined, not 0)."""
    return num / den if den > 0 else float("nan")


def percent(x: float | None, digits: int = 2) -> str:
    """``0.9312`` -> ``"93.12%"``; None or NaN -> ``"n/a"``."""
    return "n/a" if x is None or math.isnan(x) else f"{100 * x:.{digits}f}%"
