"""Designed experiments: which factor sets a plan's `[factors]` measure, and what the
design can tell apart.

Each factor is two-level: absent (the baseline's setting, -1) or present (+1). A design
is a set of rows, each row the factor set of one arm:

- `full`: every subset (2^k arms), the default up to three factors;
- `fractional`: a regular fraction 2^(k-p) of the resolution asked for (III, IV, V), or
  of the generators given, the default past three factors (resolution IV);
- `screening`: a Plackett-Burman design (the next multiple of four above k rows).

The matrices come from pyDOE3. Every design is turned, by flipping the sign of whole
columns (which keeps its aliasing), so that one row is all -1: the baseline is always
measured. Arms are ordered as the full factorial orders them: by size, then plan order.

What a design cannot tell apart is computed from its matrix, not assumed: two effects
(a factor's main effect, or two factors' interaction) whose columns are equal or
opposite over the design's rows are aliased; a Plackett-Burman design's columns
correlate partly (|r| < 1), and those are named as partly aliased.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt
import pyDOE3
from pydantic import BaseModel, ConfigDict, Field, model_validator

DesignKind = Literal["full", "fractional", "screening"]
# Up to this many factors the default design is the full factorial (2^k arms); past it,
# a fractional design of resolution DEFAULT_RESOLUTION.
FULL_FACTORIAL = 3
DEFAULT_RESOLUTION = 4
# fracfact_opt searches every generator set: 3 s for 8 factors, minutes for 9
MAX_FRACTIONAL = 8
ROMAN = {3: "III", 4: "IV", 5: "V", 6: "VI", 7: "VII", 8: "VIII", 9: "IX"}
Matrix = npt.NDArray[np.int_]


class DesignSpec(BaseModel):
    """The plan's `[design]`: how its `[factors]` become arms."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: DesignKind | None = Field(
        default=None, examples=["fractional"], description='"full", "fractional" or "screening" '
        "(default: full up to three factors, else fractional of resolution IV)")
    resolution: Literal[3, 4, 5] | None = Field(
        default=None,
        examples=[4], description="fractional: the resolution asked for, the smallest "
        "fraction that has it")
    generators: str | None = Field(
        default=None, examples=["a b c ab ac"], description="fractional, instead of a resolution: "
        "pyDOE3's generator string, one word per factor in plan order (the 4th factor set "
        "by a x b, the 5th by a x c)")
    confirm: bool = Field(
        default=True,
        description="after a fractional or screening design, measure the arm it would "
        "ship (and the baseline) with full loads; What to ship rests on that confirmation")

    @model_validator(mode="after")
    def _consistent(self) -> DesignSpec:
        if self.kind != "fractional" and (self.resolution or self.generators):
            raise ValueError("resolution and generators belong to kind = \"fractional\"")
        if self.resolution and self.generators:
            raise ValueError("give resolution or generators, not both")
        return self


@dataclass(frozen=True)
class Design:
    """The design a plan's factors make: its rows (factor sets, the baseline first) and
    what it aliases."""

    kind: DesignKind
    factors: list[str]
    rows: list[list[str]]
    resolution: int | None = None
    generators: str | None = None
    # the defining relation's words (fractional designs), as factor names
    defining: list[list[str]] = field(default_factory=list)

    @property
    def full(self) -> bool:
        return bool(len(self.rows) == 2 ** len(self.factors))

    def matrix(self) -> Matrix:
        return _matrix(self.factors, self.rows)

    def aliases(self) -> list[list[str]]:
        """Groups of effects (main effects and two-factor interactions, named "a" and
        "a x b") that the design cannot tell apart, each group of two or more."""
        return aliased_groups(self.factors, self.matrix())

    def partial(self) -> list[tuple[str, str, float]]:
        """Main effects partly aliased with a two-factor interaction: (main, interaction,
        correlation), for designs whose columns are not orthogonal to the interactions."""
        m = self.matrix()
        out = []
        for effect in self.factors:
            x = _column(self.factors, m, (effect,))
            for pair in itertools.combinations(self.factors, 2):
                if effect in pair:
                    continue
                r = float(np.corrcoef(x, _column(self.factors, m, pair))[0, 1])
                if 1e-9 < abs(r) < 1 - 1e-9:
                    out.append((effect, effect_name(pair), round(r, 3)))
        return out


def effect_name(names: Sequence[str]) -> str:
    return " x ".join(names)


def make(factors: list[str], spec: DesignSpec | None = None) -> Design:
    """The design of `spec` for these factors (in plan order)."""
    spec = spec or DesignSpec()
    k = len(factors)
    kind: DesignKind = spec.kind or ("full" if k <= FULL_FACTORIAL else "fractional")
    if kind == "full" or k < 2:
        rows = [list(c) for n in range(k + 1) for c in itertools.combinations(factors, n)]
        return Design(kind="full", factors=factors, rows=rows)
    if kind == "screening":
        m = _as_int(pyDOE3.pbdesign(k))
    elif spec.generators is not None:
        words = spec.generators.split()
        if len(words) != k:
            raise ValueError(f"generators: {len(words)} words for {k} factors; give one "
                             f"word per factor, in plan order ({_letters(k)})")
        allowed = set(_letters(k).replace(" ", ""))
        if any(set(w.lstrip("+-")) - allowed for w in words):
            raise ValueError(f"generators: use the letters {_letters(k)} (one per factor, "
                             "in plan order), optionally signed")
        m = _as_int(pyDOE3.fracfact(spec.generators))
    else:
        m = _by_resolution(k, spec.resolution or DEFAULT_RESOLUTION)
    m = m * -m[:1]  # flip whole columns so that the first row is the baseline (all -1)
    rows = _rows(factors, m)
    unique = {tuple(r) for r in rows}
    if len(unique) < len(rows):
        raise ValueError("generators: the design repeats arms; a generator word must not "
                         "repeat another factor's column")
    defining = _defining(factors, m)
    resolution = min((len(w) for w in defining), default=None)
    order = {f: i for i, f in enumerate(factors)}
    rows.sort(key=lambda r: (len(r), [order[f] for f in r]))
    return Design(kind=kind, factors=factors, rows=rows, resolution=resolution,
                  generators=spec.generators, defining=defining)


def aliased_groups(factors: list[str], m: Matrix) -> list[list[str]]:
    """Effects of order 1 and 2 whose columns are equal or opposite over the rows."""
    effects = [(f,) for f in factors] + list(itertools.combinations(factors, 2))
    groups: dict[bytes, list[str]] = {}
    for e in effects:
        col = _column(factors, m, e)
        key = (col * col[0]).astype(np.int8).tobytes()  # sign-free
        groups.setdefault(key, []).append(effect_name(e))
    return [g for g in groups.values() if len(g) > 1]


def aliases_of(design: Design, effect: str) -> list[str]:
    """The effects aliased with `effect` (none when the design separates it)."""
    for group in design.aliases():
        if effect in group:
            return [e for e in group if e != effect]
    return []


def _letters(k: int) -> str:
    return " ".join("abcdefghijklmnopqrstuvwxyz"[:k])


def _as_int(m: npt.NDArray[np.float64]) -> Matrix:
    return np.rint(m).astype(np.int_)


def _by_resolution(k: int, resolution: int) -> Matrix:
    """The smallest regular fraction of at least this resolution: pyDOE3's least-aliased
    generators (fracfact_opt) for each fraction, from the smallest."""
    for erased in range(k - 1, 0, -1):
        gens = _generators(k, erased)
        if gens is None:
            continue
        m = _as_int(pyDOE3.fracfact(gens))
        if min(map(len, _defining(list(map(str, range(k))), m)), default=k + 1) >= resolution:
            return m
    raise ValueError(f"resolution: no fraction of 2^{k} has resolution "
                     f"{ROMAN[resolution]}; use kind = \"full\"")


@functools.cache
def _generators(k: int, erased: int) -> str | None:
    if k > MAX_FRACTIONAL:
        raise ValueError(f"resolution: up to {MAX_FRACTIONAL} factors (the search for "
                         f"the least-aliased fraction grows fast past it); for {k}, give "
                         "generators or use kind = \"screening\"")
    try:
        gens, _, _ = pyDOE3.fracfact_opt(k, erased)
    except ValueError:  # a fraction too small for any aliasing pattern pyDOE3 builds
        return None
    return str(gens)


def _matrix(factors: list[str], rows: list[list[str]]) -> Matrix:
    return np.array([[1 if f in r else -1 for f in factors] for r in rows], dtype=np.int_)


def _rows(factors: list[str], m: Matrix) -> list[list[str]]:
    return [[f for f, x in zip(factors, row, strict=True) if x > 0] for row in m]


def _column(factors: list[str], m: Matrix, effect: Sequence[str]) -> Matrix:
    col: Matrix = np.prod(m[:, [factors.index(f) for f in effect]], axis=1)
    return col


def _defining(factors: list[str], m: Matrix) -> list[list[str]]:
    """The words of the defining relation: the interactions constant over every row."""
    out = []
    for n in range(1, len(factors) + 1):
        for word in itertools.combinations(factors, n):
            col = _column(factors, m, word)
            if np.all(col == col[0]):
                out.append(list(word))
    return out
