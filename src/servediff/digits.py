"""How servediff writes a number in words and tables: three significant digits, whole
thousands with separators. The report and a probe's own lines share it, so one value
reads the same wherever it is shown."""

from __future__ import annotations


def num3(x: float | None, digits: int = 3) -> str:
    """A number in a sentence ("n/a": none)."""
    if x is None:
        return "n/a"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def cell(x: float | None) -> str:
    """A number in a table cell ("-": none)."""
    return "-" if x is None else f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3g}"
