"""The verdict and the cost sections of report.md, rendered from the summary alone."""

from __future__ import annotations

from servediff.analysis.findings import ArmCosts, Speed, Summary, Survival, SweepPointView
from servediff.digits import cell
from servediff.report import words

OUTCOME_MARK = {"ok": "ok", "slow": "slow", "error": "error", "hang": "HANG",
                "timeout": "TIMEOUT", "death": "DEATH"}

SurvivalGrid = tuple[dict[str, Survival], list[tuple[str, int]], list[int],
                     dict[tuple[str, int, int], SweepPointView]]


def verdict_lines(summary: Summary) -> list[str]:
    if not summary.verdict.pairs:
        return []
    lines = ["### Verdict per arm pair", ""]
    for pair in summary.verdict.pairs:
        lines += [f"**{words.headline(pair)}.**", ""]
        if fix := words.fix_text(pair):
            lines += [fix + ".", ""]
        for c in pair.claims:
            if kind := words.shown_kind(c):
                regime = words.claim_regime(c)
                where = f" _(covers: {regime})_" if regime else ""
                refs = f" [{', '.join(c.evidence[:4])}]" if c.evidence else ""
                lines.append(f"- {kind}: {words.claim_text(c)}{where}{refs}")
        lines.append("")
    return lines


def speed_lines(arm: str, speed: Speed) -> list[str]:
    lines = [f"Speed of `{arm}` (mean of the kept replicates, 95 % bootstrap band):", "",
             "| prompt tokens | in flight | replicates | decode tok/s | prefill tok/s | TTFT s |",
             "| --- | --- | --- | --- | --- | --- |"]
    for e in speed.per_length:
        cells = []
        for m in (e.decode_tok_s, e.prefill_tok_s, e.ttft_s):
            band = m.band95
            cells.append(cell(m.mean) + (f" [{cell(band[0])}, {cell(band[1])}]" if band else ""))
        lines.append(f"| {e.prompt_tokens} | {e.concurrency} | {e.replicates} | "
                     + " | ".join(cells) + " |")
    return [*lines, ""]


def survival_grid(summary: Summary) -> SurvivalGrid | None:
    """Every arm's sweep as one grid: sweeps per arm, (arm, level) columns, lengths, and
    the point at (arm, level, length); None when no arm has a sweep."""
    sweeps = {arm: c.survival for arm, c in summary.costs.items() if c.survival}
    if not sweeps:
        return None
    columns = [(arm, lv) for arm, s in sweeps.items() for lv in s.levels]
    lengths = sorted({p.length for s in sweeps.values() for p in s.points})
    at = {(arm, p.level, p.length): p for arm, s in sweeps.items() for p in s.points}
    return sweeps, columns, lengths, at


def survival_lines(summary: Summary) -> list[str]:
    grid = survival_grid(summary)
    if grid is None:
        return []
    sweeps, columns, lengths, at = grid
    lines = ["Survival map (prompt length x concurrency x arm; DEATH = the server process "
             "exited, HANG = no answer and no work while alive, TIMEOUT = busy but no answer "
             "by the bound, slow = answered after the request timeout; past the context an "
             "error is the expected refusal):", "",
             "| prompt tokens | " + " | ".join(f"`{a}` x{lv}" for a, lv in columns) + " |",
             "| --- |" + " --- |" * len(columns)]
    for n in lengths:
        row = []
        for arm, lv in columns:
            p = at.get((arm, lv, n))
            if p is None:
                row.append("-")
                continue
            mark = OUTCOME_MARK[p.outcome]
            if p.outcome == "error" and p.http_status:
                mark += f" {p.http_status}"
            if p.outcome == "death" and p.signal:
                mark += f" {p.signal}"
            if p.achieved_ok is False:
                mark += " (short)"
            row.append(mark)
        lines.append(f"| {n:,} | " + " | ".join(row) + " |")
    lines.append("")
    for arm, s in sweeps.items():
        largest = s.largest_ok_length.get("1")
        lines.append(f"- `{arm}`: largest single prompt that survived: "
                     f"{'none' if largest is None else f'{largest:,}'} tokens"
                     f" (context length {cell(s.context_length)})"
                     + ("" if s.complete else "; the sweep did not finish"))
    return [*lines, ""]


def capacity_lines(costs: dict[str, ArmCosts]) -> list[str]:
    rows = [(arm, c.capacity) for arm, c in costs.items()]
    if not any(c.reported for _, c in rows):
        return ["Capacity: the engine reports no KV pool or concurrency limit.", ""]
    base = rows[0][1].kv_tokens
    lines = ["| arm | KV pool tokens | vs first arm | max concurrency |",
             "| --- | --- | --- | --- |"]
    for arm, c in rows:
        kv = c.kv_tokens
        rel = f"{kv / base - 1:+.0%}" if kv and base else "-"
        lines.append(f"| `{arm}` | {cell(kv)} | {rel} | {cell(c.max_concurrency)} |")
    return [*lines, ""]


def conditions_lines(summary: Summary) -> list[str]:
    """What the box was doing per arm, shown where the arms differ (or a cell was busy)."""
    rows = summary.conditions
    if not rows:
        return []
    shown = {arm: (c.machines, c.gpus_used, c.gpu_sm_clock_mhz, c.busy_cells > 0,
                   c.throttled_cells > 0)
             for arm, c in rows.items()}
    busy = any(c.busy_cells or c.gates_not_quiet for c in rows.values())
    if len(set(map(str, shown.values()))) <= 1 and not busy:
        return []
    lines = ["Conditions per arm (read before and after every cell; other processes are "
             "everything but servediff and the engine):", "",
             "| arm | machine | engine's GPUs | other processes, CPU cores (max) | "
             "load average (max) | GPU SM clocks MHz | cells throttled | cells busy | "
             "gates not quiet |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for arm, c in rows.items():
        lines.append(f"| `{arm}` | {', '.join(c.machines) or '-'} | "
                     f"{', '.join(c.gpus_used) or '-'} | "
                     f"{cell(c.foreign_cpu_cores_max)} | {cell(c.loadavg_max)} | "
                     f"{', '.join(str(x) for x in c.gpu_sm_clock_mhz) or '-'} | "
                     f"{c.throttled_cells} | {c.busy_cells} | {c.gates_not_quiet} of {c.gates} |")
    return [*lines, ""]


def cost_lines(summary: Summary) -> list[str]:
    costs = summary.costs
    if not costs:
        return []
    lines = ["### What the arms cost", ""]
    for arm, c in costs.items():
        if c.speed:
            lines += speed_lines(arm, c.speed)
    lines += conditions_lines(summary)
    lines += survival_lines(summary)
    lines += capacity_lines(costs)
    starts = [(arm, c.startup) for arm, c in costs.items() if c.startup.mean]
    if starts:
        lines += ["Start-up to ready: " + "; ".join(
            f"`{arm}` {s.mean or 0:.1f} s over {len(s.seconds_to_ready)} starts"
            for arm, s in starts) + ".", ""]
    return lines
