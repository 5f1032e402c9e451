"""The drift tables as the terminal shows them, built from a summary alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from servediff.analysis.findings import Comparison, ConcurrencyTable, Summary, TableCell
from servediff.evidence import Skipped
from servediff.hub import hub_id
from servediff.report import ship, words


def table(title: str, headers: list[str], rows: list[list[str]], words_in: set[str],
          ends: list[bool] | None = None, **options: Any) -> Table:
    """A terminal table that stays readable at 80 columns: the columns in `words_in`
    (sentences, names) wrap; every other column keeps its widest value whole."""
    out = Table(title=title, **options)
    for i, header in enumerate(headers):
        if header in words_in:
            out.add_column(header, overflow="fold", ratio=1)
        else:
            widest = max((len(r[i]) for r in rows), default=0)
            out.add_column(header, no_wrap=True, min_width=max(widest, 1))
    for i, row in enumerate(rows):
        out.add_row(*row, end_section=bool(ends and ends[i]))
    return out


def fmt_nll(value: float) -> str:
    return "0" if value == 0 else f"{value:.3g}"


def fmt_ppl(value: float | None) -> str:
    return "-" if value is None else f"{value:.6f}"


def drift_table(summary: Summary) -> Group:
    rows: list[list[str]] = []
    ends: list[bool] = []
    for arm, data in summary.arms.items():
        mine: list[tuple[str, Comparison | None]] = [
            (f"L{p.load_a} vs L{p.load_b}", p) for p in data.across_load]
        mine += [(f"L{p.load} repeat {p.repeat}", p) for p in data.within_load]
        mine += [(f"L{s.load} repeat {s.repeat}", None) for s in data.within_load_skipped]
        mine += [(f"L{p.load} batch {p.batch_size} vs {p.arm_batch_size}", p)
                 for p in data.batch_size]
        for i, (label, p) in enumerate(mine):
            ends.append(i == len(mine) - 1)
            if p is None:
                # measured by another launch than its load's first pass: not comparable
                rows.append([arm if i == 0 else "", label, "not compared", "-",
                             "another launch", "-"])
                continue
            rows.append([arm if i == 0 else "", label, f"{p.moved}/{p.compared}",
                         fmt_nll(p.max_abs_delta), p.max_tag or "-",
                         "yes" if p.bit_identical else "no"])
    for shift in summary.arm_shifts:
        ends.append(False)
        rows.append([f"{shift.arm_a}/{shift.arm_b}", words.shift_text(shift.signature),
                     f"{shift.moved}/{shift.compared}", fmt_nll(shift.max_abs_delta),
                     shift.max_tag or "-", "yes" if shift.bit_identical else "no"])
    pairs = table(f"Drift per text ({summary.engine}, {model_name(summary.model)}; "
                  f"moved = |dNLL| > {summary.threshold_abs_nll:g} nats)",
                  ["arm", "pair", "moved", "max |dNLL|", "on text", "identical"], rows,
                  {"arm", "pair", "on text"}, ends)
    arms = table("Signature per arm", ["arm", "signature", "perplexity per load",
                                       "JIT caches"],
                 [[arm, words.signature_text(data.signature),
                   ", ".join(f"L{r.load} {fmt_ppl(r.perplexity)}" for r in data.loads),
                   data.cache_policy or "-"] for arm, data in summary.arms.items()],
                 {"arm", "signature", "perplexity per load"})
    return Group(pairs, arms, *concurrency_tables(summary))


def model_name(model: str) -> str:
    """A model as the terminal names it: a hub id as given, a path by its last part."""
    return model if hub_id(model) is not None or "/" not in model else Path(model).name


def grid_cell(entry: TableCell) -> str:
    """`1` when every response agreed (above level 1: with the control too); else distinct
    results and the responses off the control's result (level 1: off the majority)."""
    text = str(entry.distinct)
    off = entry.off_control if entry.level > 1 else entry.off_majority
    if off:
        text += f" ({off} off)"
    if entry.errors:
        text += f" [{entry.errors} err]"
    return text


def grid_rows(grid: ConcurrencyTable) -> list[tuple[str, int, list[str]]]:
    """(request kind, prompt length, one entry per level) rows of a concurrency table."""
    out: list[tuple[str, int, list[str]]] = []
    for kind in grid.kinds:
        for length in grid.lengths:
            row = {e.level: grid_cell(e) for e in grid.cells
                   if e.length == length and e.kind == kind}
            if row:
                out.append((kind, length, [row.get(c, "-") for c in grid.levels]))
    return out


def skip_label(skip: Skipped) -> str:
    if skip.length is not None:
        return f"{skip.length} tokens"
    return f"{skip.kind} requests"


def concurrency_tables(summary: Summary) -> list[Table]:
    tables = []
    for arm, data in summary.arms.items():
        conc = data.concurrency
        if not conc:
            continue
        grid = conc.table
        levels = [f"c={level}" + (" (control)" if level == 1 else "") for level in grid.levels]
        tables.append(table(
            f"{arm}: distinct results of identical requests, prompt length x concurrency "
            f"(control {'ok' if conc.control_ok else 'FAILED'})",
            ["request", "tokens", *levels],
            [[kind, str(length), *row] for kind, length, row in grid_rows(grid)], set()))
    return tables


def survival_table(summary: Summary) -> Table | None:
    from servediff.report.costs import OUTCOME_MARK, survival_grid

    grid = survival_grid(summary)
    if grid is None:
        return None
    _, columns, lengths, at = grid
    rows = [[f"{n:,}", *("-" if (p := at.get((arm, level, n))) is None
                         else OUTCOME_MARK[p.outcome] for arm, level in columns)]
            for n in lengths]
    return table("Survival per prompt length (DEATH: process exited; HANG: no answer and no "
                 "work while alive; TIMEOUT: busy but no answer by the bound; slow: answered "
                 "after the request timeout; error past the context is the expected refusal)",
                 ["tokens", *(f"{arm} x{level}" for arm, level in columns)], rows, set())


def verdict_tables(summary: Summary) -> list[Table]:
    return [table(words.headline(pair), ["kind", "claim"],
                  [[kind, words.claim_text(c)] for c in pair.claims
                   if (kind := words.shown_kind(c) or (c.kind if c.kind == "survival"
                                                       else None))],
                  {"claim"}, title_justify="left", show_lines=False)
            for pair in summary.verdict.pairs]


def ship_view(summary: Summary) -> list[Text]:
    """What to ship and which factor changes what, as the terminal shows them first."""
    if summary.factors is None:
        return []
    return [Text("What to ship", style="bold"), *map(Text, ship.ship_lines(summary)),
            Text("Which factor changes what", style="bold"),
            *map(Text, ship.attribution_lines(summary)), Text("")]


def run_view(summary: Summary) -> Group:
    """Everything the terminal shows after a run or a rederive: what to ship first."""
    survival = survival_table(summary)
    return Group(*ship_view(summary), drift_table(summary),
                 *([survival] if survival else []), *verdict_tables(summary))
