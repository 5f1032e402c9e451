"""The drift tables as the terminal shows them, built from a summary alone."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table


def fmt_nll(value: float) -> str:
    return "0" if value == 0 else f"{value:.3g}"


def fmt_ppl(value: float | None) -> str:
    return "-" if value is None else f"{value:.6f}"


def drift_table(summary: dict[str, Any]) -> Group:
    pairs = Table(title=f"Drift per text ({summary['engine']}, {summary['model']}; "
                  f"moved = |dNLL| > {summary['threshold_abs_nll']:g} nats)")
    for column in ("arm", "pair", "moved", "max |dNLL|", "on text", "identical"):
        pairs.add_column(column, no_wrap=column != "on text")
    for arm, data in summary["arms"].items():
        rows = [(f"L{p['load_a']} vs L{p['load_b']}", p) for p in data["across_load"]]
        rows += [(f"L{p['load']} repeat {p['repeat']}", p) for p in data["within_load"]]
        rows += [(f"L{p['load']} batch {p['batch_size']} vs {p['arm_batch_size']}", p)
                 for p in data.get("batch_size", [])]
        for i, (label, p) in enumerate(rows):
            pairs.add_row(arm if i == 0 else "", label, f"{p['moved']}/{p['compared']}",
                          fmt_nll(p["max_abs_delta"]), p["max_tag"] or "-",
                          "yes" if p["bit_identical"] else "no",
                          end_section=i == len(rows) - 1)
    for shift in summary["arm_shifts"]:
        pairs.add_row(f"{shift['arm_a']}/{shift['arm_b']}", shift["signature"],
                      f"{shift['moved']}/{shift['compared']}", fmt_nll(shift["max_abs_delta"]),
                      shift["max_tag"] or "-", "yes" if shift["bit_identical"] else "no")
    arms = Table(title="Signature per arm")
    for column in ("arm", "signature", "perplexity per load"):
        arms.add_column(column)
    for arm, data in summary["arms"].items():
        arms.add_row(arm, data["signature"],
                     ", ".join(f"L{r['load']} {fmt_ppl(r['perplexity'])}" for r in data["loads"]))
    return Group(pairs, arms, *concurrency_tables(summary))


def grid_cell(entry: dict[str, Any]) -> str:
    """`1` when every response agreed; else distinct results and responses off the majority."""
    text = str(entry["distinct"])
    if entry["off_majority"]:
        text += f" ({entry['off_majority']} off)"
    if entry["errors"]:
        text += f" [{entry['errors']} err]"
    return text


def grid_rows(grid: dict[str, Any]) -> list[tuple[str, int, list[str]]]:
    """(request kind, prompt length, one entry per level) rows of a concurrency table."""
    out = []
    for kind in grid.get("kinds", ["generate"]):
        for length in grid["lengths"]:
            row = {e["level"]: grid_cell(e) for e in grid["cells"]
                   if e["length"] == length and e.get("kind", "generate") == kind}
            if row:
                out.append((kind, length, [row.get(c, "-") for c in grid["levels"]]))
    return out


def skip_label(skip: dict[str, Any]) -> str:
    if "length" in skip:
        return f"{skip['length']} tokens"
    return f"{skip['kind']} requests"


def concurrency_tables(summary: dict[str, Any]) -> list[Table]:
    tables = []
    for arm, data in summary["arms"].items():
        conc = data.get("concurrency")
        if not conc:
            continue
        grid = conc["table"]
        table = Table(title=f"{arm}: distinct results of identical requests, prompt length x "
                      f"concurrency (control {'ok' if conc['control_ok'] else 'FAILED'})")
        table.add_column("request")
        table.add_column("tokens")
        for level in grid["levels"]:
            table.add_column(f"c={level}" + (" (control)" if level == 1 else ""))
        for kind, length, row in grid_rows(grid):
            table.add_row(kind, str(length), *row)
        tables.append(table)
    return tables


def survival_table(summary: dict[str, Any]) -> Table | None:
    from servediff.report.costs import OUTCOME_MARK, survival_grid

    grid = survival_grid(summary.get("costs") or {})
    if grid is None:
        return None
    _, columns, lengths, at = grid
    table = Table(title="Survival per prompt length (DEATH: process exited; HANG: no answer "
                  "while alive; error past the context is the expected refusal)")
    table.add_column("tokens")
    for arm, level in columns:
        table.add_column(f"{arm} x{level}")
    for n in lengths:
        row = []
        for arm, level in columns:
            p = at.get((arm, level, n))
            row.append("-" if p is None else OUTCOME_MARK[p["outcome"]])
        table.add_row(f"{n:,}", *row)
    return table


def verdict_tables(summary: dict[str, Any]) -> list[Table]:
    tables = []
    for pair in (summary.get("verdict") or {}).get("pairs", []):
        table = Table(title=pair["headline"], title_justify="left", show_lines=False)
        table.add_column("kind", no_wrap=True)
        table.add_column("claim")
        for c in pair["claims"]:
            if c["kind"] in ("cost", "gain", "within noise", "drift", "survival"):
                table.add_row(c["kind"], c["text"])
        tables.append(table)
    return tables


def run_view(summary: dict[str, Any]) -> Group:
    """Everything the terminal shows after a run or a rederive."""
    survival = survival_table(summary)
    return Group(drift_table(summary), *([survival] if survival else []),
                 *verdict_tables(summary))
