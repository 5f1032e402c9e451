"""The drift tables as the terminal shows them, built from a summary alone."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table

from servediff.analysis.findings import Comparison, ConcurrencyTable, Summary, TableCell
from servediff.evidence import Skipped
from servediff.report import words


def fmt_nll(value: float) -> str:
    return "0" if value == 0 else f"{value:.3g}"


def fmt_ppl(value: float | None) -> str:
    return "-" if value is None else f"{value:.6f}"


def drift_table(summary: Summary) -> Group:
    pairs = Table(title=f"Drift per text ({summary.engine}, {summary.model}; "
                  f"moved = |dNLL| > {summary.threshold_abs_nll:g} nats)")
    for column in ("arm", "pair", "moved", "max |dNLL|", "on text", "identical"):
        pairs.add_column(column, no_wrap=column != "on text")
    for arm, data in summary.arms.items():
        rows: list[tuple[str, Comparison | None]] = [
            (f"L{p.load_a} vs L{p.load_b}", p) for p in data.across_load]
        rows += [(f"L{p.load} repeat {p.repeat}", p) for p in data.within_load]
        rows += [(f"L{s.load} repeat {s.repeat}", None) for s in data.within_load_skipped]
        rows += [(f"L{p.load} batch {p.batch_size} vs {p.arm_batch_size}", p)
                 for p in data.batch_size]
        for i, (label, p) in enumerate(rows):
            end = i == len(rows) - 1
            if p is None:
                # measured by another launch than its load's first pass: not comparable
                pairs.add_row(arm if i == 0 else "", label, "not compared", "-",
                              "another launch", "-", end_section=end)
                continue
            pairs.add_row(arm if i == 0 else "", label, f"{p.moved}/{p.compared}",
                          fmt_nll(p.max_abs_delta), p.max_tag or "-",
                          "yes" if p.bit_identical else "no", end_section=end)
    for shift in summary.arm_shifts:
        pairs.add_row(f"{shift.arm_a}/{shift.arm_b}", words.shift_text(shift.signature),
                      f"{shift.moved}/{shift.compared}", fmt_nll(shift.max_abs_delta),
                      shift.max_tag or "-", "yes" if shift.bit_identical else "no")
    arms = Table(title="Signature per arm")
    for column in ("arm", "signature", "perplexity per load", "JIT caches"):
        arms.add_column(column)
    for arm, data in summary.arms.items():
        arms.add_row(arm, words.signature_text(data.signature),
                     ", ".join(f"L{r.load} {fmt_ppl(r.perplexity)}" for r in data.loads),
                     data.cache_policy or "-")
    return Group(pairs, arms, *concurrency_tables(summary))


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
        table = Table(title=f"{arm}: distinct results of identical requests, prompt length x "
                      f"concurrency (control {'ok' if conc.control_ok else 'FAILED'})")
        table.add_column("request")
        table.add_column("tokens")
        for level in grid.levels:
            table.add_column(f"c={level}" + (" (control)" if level == 1 else ""))
        for kind, length, row in grid_rows(grid):
            table.add_row(kind, str(length), *row)
        tables.append(table)
    return tables


def survival_table(summary: Summary) -> Table | None:
    from servediff.report.costs import OUTCOME_MARK, survival_grid

    grid = survival_grid(summary)
    if grid is None:
        return None
    _, columns, lengths, at = grid
    table = Table(title="Survival per prompt length (DEATH: process exited; HANG: no answer "
                  "and no work while alive; TIMEOUT: busy but no answer by the bound; slow: "
                  "answered after the request timeout; error past the context is the "
                  "expected refusal)")
    table.add_column("tokens")
    for arm, level in columns:
        table.add_column(f"{arm} x{level}")
    for n in lengths:
        row = []
        for arm, level in columns:
            p = at.get((arm, level, n))
            row.append("-" if p is None else OUTCOME_MARK[p.outcome])
        table.add_row(f"{n:,}", *row)
    return table


def verdict_tables(summary: Summary) -> list[Table]:
    tables = []
    for pair in summary.verdict.pairs:
        table = Table(title=words.headline(pair), title_justify="left", show_lines=False)
        table.add_column("kind", no_wrap=True)
        table.add_column("claim")
        for c in pair.claims:
            if kind := words.shown_kind(c) or (c.kind if c.kind == "survival" else None):
                table.add_row(kind, words.claim_text(c))
        tables.append(table)
    return tables


def run_view(summary: Summary) -> Group:
    """Everything the terminal shows after a run or a rederive."""
    survival = survival_table(summary)
    return Group(drift_table(summary), *([survival] if survival else []),
                 *verdict_tables(summary))
