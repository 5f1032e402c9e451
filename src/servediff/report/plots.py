"""The report's plots, drawn with matplotlib from a summary alone, as inline SVG.

Each function returns an SVG document (text) or None when the run has nothing
to draw for it. SVG metadata carries no date and ids are salted with a fixed
string, so the same summary always gives the same bytes.
"""

from __future__ import annotations

import io
import textwrap
from collections.abc import Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from servediff.analysis.findings import Comparison, Metric, SpeedAtLength, Summary
from servediff.report.costs import survival_grid

plt.rcParams.update({"svg.hashsalt": "servediff", "font.size": 9,
                     "axes.spines.top": False, "axes.spines.right": False})

OUTCOMES = ["ok", "slow", "error", "hang", "timeout", "death", "not run"]
OUTCOME_COLORS = ["#4c9a2a", "#9ccc65", "#e0a400", "#d4540f", "#8e3b0b", "#b00020", "#dddddd"]
# One colour for "identical" in every plot: no dNLL, one distinct result, survived.
IDENTICAL = "#4c9a2a"
NOT_MEASURED = "#dddddd"
# 2, 3, ... distinct results: redder with every result more (the last one repeats).
MORE_RESULTS = ["#f4a582", "#e66a50", "#d6301f", "#b00020", "#7a0016"]


def distinct_color(distinct: int) -> str:
    """The heat-map colour of a cell with this many distinct results (0: not measured)."""
    if distinct <= 0:
        return NOT_MEASURED
    if distinct == 1:
        return IDENTICAL
    return MORE_RESULTS[min(distinct - 2, len(MORE_RESULTS) - 1)]


def svg(fig: Figure) -> str:
    """A figure as an SVG document (closed after), the same bytes for the same drawing."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def comparisons(summary: Summary, repeats: bool) -> list[tuple[str, dict[str, float]]]:
    """(label, per-text deltas) of every load pair (and repeat) of every arm, and between
    arms; comparisons with no text left out."""
    series = []
    for arm, data in summary.arms.items():
        for p in data.across_load:
            series.append((f"{arm}: load {p.load_a} vs {p.load_b}", p.deltas))
        for r in data.within_load if repeats else []:
            series.append((f"{arm}: load {r.load} repeat {r.repeat}", r.deltas))
    for s in summary.arm_shifts:
        series.append((f"{s.arm_a} vs {s.arm_b}", s.deltas))
    return [(label, d) for label, d in series if d]


def dnll_per_text(summary: Summary) -> str | None:
    """Per-text dNLL for every load pair of every arm, and between arms."""
    series = comparisons(summary, repeats=True)
    if not series:
        return None
    tags = sorted({t for _, d in series for t in d})
    fig, ax = plt.subplots(figsize=(9, 0.35 * len(series) + 1.6))
    for row, (_, deltas) in enumerate(series):
        xs = [tags.index(t) for t in deltas]
        values = list(deltas.values())
        colors = ["#b00020" if v != 0 else IDENTICAL for v in values]
        ax.scatter(xs, [row] * len(xs), c=colors, s=[8 + min(abs(v) * 2e4, 120)
                                                     for v in values])
    ax.set_yticks(range(len(series)), [label for label, _ in series])
    ax.set_xticks(range(len(tags)), tags, rotation=90, fontsize=6)
    ax.set_xlim(-1, len(tags))
    ax.set_title("dNLL per text (red: moved, size grows with |dNLL|; green: identical)")
    return svg(fig)


def overlaid(series: list[tuple[str, dict[str, float]]]) -> list[tuple[str, list[float]]]:
    """Each distinct curve of sorted |dNLL| once, labelled with every comparison that
    draws it: a line exactly on top of another would hide it."""
    curves: dict[tuple[float, ...], list[str]] = {}
    for label, deltas in series:
        key = tuple(sorted((abs(v) for v in deltas.values()), reverse=True))
        curves.setdefault(key, []).append(label)
    return [(labels[0] if len(labels) == 1 else
             f"{'; '.join(labels)} ({len(labels)} identical curves)", list(values))
            for values, labels in curves.items()]


def dnll_magnitude(summary: Summary) -> str | None:
    """|dNLL| per text on a log scale, one line per comparison (one per distinct curve)."""
    series = comparisons(summary, repeats=False)
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(9, 3))
    for i, (label, values) in enumerate(overlaid(series)):
        ax.plot(range(1, len(values) + 1), [v if v > 0 else 1e-12 for v in values],
                marker="o", markersize=3, label=textwrap.fill(label, 90), gid=f"curve-{i}")
    ax.set_yscale("log")
    ax.set_xlabel("texts, largest |dNLL| first")
    ax.set_ylabel("|dNLL| (nats; 1e-12 = identical)")
    ax.legend(fontsize=7)
    ax.set_title("How far texts moved (comparisons with the same values share a line)")
    return svg(fig)


def moved_comparisons(summary: Summary) -> list[tuple[str, Comparison]]:
    """(label, comparison) of every comparison with moved texts whose positions are known:
    load pairs, repeats and batch sizes of every arm, and arm shifts."""
    found: list[tuple[str, Comparison]] = []
    for arm, data in summary.arms.items():
        found += [(f"{arm}: load {p.load_a} vs {p.load_b}", p) for p in data.across_load]
        found += [(f"{arm}: load {r.load} repeat {r.repeat}", r) for r in data.within_load]
        found += [(f"{arm}: load {b.load} batch {b.batch_size}", b) for b in data.batch_size]
    found += [(f"{s.arm_a} vs {s.arm_b}", s) for s in summary.arm_shifts]
    return [(label, c) for label, c in found if c.first_moved is not None]


def first_moved(summary: Summary) -> str | None:
    """Each moved text's first differing position against its length, per comparison,
    with the text's end (the diagonal) and every engine size a comparison hinted at."""
    series = moved_comparisons(summary)
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(9, 4))
    longest = max(t.length for _, c in series for t in c.moved_texts)
    ax.plot([0, longest], [0, longest], color=NOT_MEASURED, linewidth=1, zorder=0)
    markers = "osD^vP*X"
    for i, (label, c) in enumerate(series):
        known = [(t.length, t.first) for t in c.moved_texts if t.first is not None]
        ax.scatter([n for n, _ in known], [f for _, f in known], s=14,
                   marker=markers[i % len(markers)], label=textwrap.fill(label, 60),
                   alpha=0.8, gid=f"first-moved-{i}")
    hints = {(c.boundary.name, c.boundary.tokens) for _, c in series if c.boundary}
    for name, tokens in sorted(hints):
        ax.axhline(tokens, linestyle="--", linewidth=1, color="#555555")
        ax.annotate(f"{name} = {tokens:,}", (0, tokens), fontsize=7,
                    textcoords="offset points", xytext=(2, 2))
    ax.set_xlabel("text length (scored positions)")
    ax.set_ylabel("first position that differs")
    ax.legend(fontsize=7)
    ax.set_title("Where moved texts first differ (grey diagonal: the text's end; dashed: "
                 "an engine size every moved text was identical before)", fontsize=8)
    return svg(fig)


def survival_map(summary: Summary) -> str | None:
    found = survival_grid(summary)
    if found is None:
        return None
    _, columns, lengths, at = found
    grid = []
    for n in lengths:
        row = []
        for arm, lv in columns:
            p = at.get((arm, lv, n))
            row.append(OUTCOMES.index(p.outcome if p else "not run"))
        grid.append(row)
    fig, ax = plt.subplots(figsize=(1.2 * len(columns) + 2.5, 0.35 * len(lengths) + 1.4))
    ax.imshow(grid, cmap=ListedColormap(OUTCOME_COLORS), vmin=0, vmax=len(OUTCOMES) - 1,
              aspect="auto")
    for i, row in enumerate(grid):
        for j, value in enumerate(row):
            ax.text(j, i, OUTCOMES[value], ha="center", va="center", fontsize=7,
                    color="white" if OUTCOMES[value] in ("ok", "timeout", "death")
                    else "black")
    ax.set_xticks(range(len(columns)), [f"{a}\nx{lv}" for a, lv in columns])
    ax.set_yticks(range(len(lengths)), [f"{n:,}" for n in lengths])
    ax.set_ylabel("prompt tokens")
    ax.set_title("Survival: prompt length x concurrency x arm")
    return svg(fig)


SPEED_METRICS: list[tuple[Metric, str]] = [("decode_tok_s", "decode tok/s"),
                                           ("prefill_tok_s", "prefill tok/s"),
                                           ("ttft_s", "TTFT (s)")]


def short(value: float) -> str:
    """A bar's label: 1,688, 43.2, 0.304."""
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.3g}"


def speed_series(summary: Summary) -> list[tuple[str, list[SpeedAtLength]]]:
    """(arm, or arm and level above 1; its entries by prompt length)."""
    return [(arm if level == 1 else f"{arm}, {level} at once",
             [e for e in cost.speed.per_length if e.concurrency == level])
            for arm, cost in summary.costs.items() if cost.speed
            for level in sorted({e.concurrency for e in cost.speed.per_length})]


def speed_vs_length(summary: Summary) -> str | None:
    fig = speed_figure(summary)
    return None if fig is None else svg(fig)


def speed_figure(summary: Summary) -> Figure | None:
    """Speed per arm: lines over prompt length, or labelled bars when one length was
    measured. Rates and latencies start at zero, so a gap looks as large as it is."""
    series = speed_series(summary)
    if not series:
        return None
    lengths = sorted({e.prompt_tokens for _, entries in series for e in entries})
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.2), layout="constrained")
    for ax, (metric, label) in zip(axes, SPEED_METRICS, strict=True):
        if len(lengths) == 1:
            _speed_bars(ax, series, metric)
        else:
            _speed_lines(ax, series, metric)
            ax.set_xlabel("prompt tokens")
        ax.set_ylim(bottom=0)
        ax.set_title(label)
    if len(lengths) > 1:
        axes[0].legend(fontsize=7)
        fig.suptitle("Speed vs prompt length (mean, 95 % bootstrap band)")
    else:
        fig.suptitle(f"Speed at {lengths[0]:,} prompt tokens (mean, 95 % bootstrap band)")
    return fig


def _speed_lines(ax: Axes, series: list[tuple[str, list[SpeedAtLength]]], metric: Metric) -> None:
    for name, entries in series:
        rows = [(e, mean) for e in entries if (mean := e.metric(metric).mean) is not None]
        xs = [e.prompt_tokens for e, _ in rows]
        line = ax.plot(xs, [mean for _, mean in rows], marker="o", label=name)[0]
        bands = [(x, band) for x, (e, _) in zip(xs, rows, strict=True)
                 if (band := e.metric(metric).band95)]
        if bands:
            ax.fill_between([x for x, _ in bands], [b[0] for _, b in bands],
                            [b[1] for _, b in bands], alpha=0.25, color=line.get_color())
            if len(bands) == 1:  # a band at one length only: fill_between draws nothing
                x, b = bands[0]
                ax.errorbar([x], [(b[0] + b[1]) / 2], yerr=[[(b[1] - b[0]) / 2]],
                            color=line.get_color(), capsize=4)


def _speed_bars(ax: Axes, series: list[tuple[str, list[SpeedAtLength]]], metric: Metric) -> None:
    names, means, errors = [], [], []
    for name, entries in series:
        summary = entries[0].metric(metric) if entries else None
        if summary is None or summary.mean is None:
            continue
        band = summary.band95
        names.append(name)
        means.append(summary.mean)
        # (a band is rounded to stable digits, so its end may pass the mean by a hair)
        errors.append((max(0.0, summary.mean - band[0]), max(0.0, band[1] - summary.mean))
                      if band else (0.0, 0.0))
    arms = list(dict.fromkeys(n.split(",")[0] for n in names))
    colors = [f"C{arms.index(n.split(',')[0])}" for n in names]
    bars = ax.bar(range(len(names)), means, color=colors,
                  yerr=[[e[0] for e in errors], [e[1] for e in errors]], capsize=4)
    for name, bar in zip(names, bars, strict=True):
        bar.set_gid(f"speed-{metric}-{name}")
    ax.bar_label(bars, [short(m) for m in means], fontsize=7, label_type="center",
                 color="white")
    ax.set_xticks(range(len(names)), [textwrap.fill(n, 14) for n in names], fontsize=7)


def capacity_bars(summary: Summary) -> str | None:
    caps = [(arm, c.capacity.kv_tokens) for arm, c in summary.costs.items()]
    if not any(kv for _, kv in caps):
        return None
    fig, ax = plt.subplots(figsize=(5, 2.6))
    bars = ax.bar([a for a, _ in caps], [kv or 0 for _, kv in caps], color="#3b6ea8")
    for bar, (_, kv) in zip(bars, caps, strict=True):
        ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(),
                "not reported" if kv is None else f"{kv:,}", ha="center", va="bottom",
                fontsize=8)
    ax.set_ylabel("KV pool tokens")
    ax.set_title("Capacity per arm, as the engine reported it")
    return svg(fig)


def drift_heatmap(summary: Summary) -> str | None:
    """Distinct results of identical requests: prompt length x concurrency, per arm and kind."""
    panels = []
    for arm, data in summary.arms.items():
        conc = data.concurrency
        if not conc:
            continue
        grid = conc.table
        for kind in grid.kinds:
            cells = {(e.length, e.level): e.distinct for e in grid.cells if e.kind == kind}
            panels.append((f"{arm}: {kind}", grid.lengths, grid.levels, cells))
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels) + 0.5, 3.0),
                             squeeze=False, layout="constrained")
    for p, (ax, (title, lengths, levels, cells)) in enumerate(zip(axes[0], panels,
                                                                   strict=True)):
        for i, n in enumerate(lengths):
            for j, c in enumerate(levels):
                v = cells.get((n, c), 0)
                # one rectangle per cell, its colour in the SVG (gid: panel, length, level)
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor=distinct_color(v),
                                       edgecolor="white", gid=f"heat-{p}-{n}-{c}-{v}"))
                ax.text(j, i, str(v) if v else "-", ha="center", va="center", fontsize=8,
                        color="white" if v > 1 else "black")
        ax.set_xlim(-0.5, len(levels) - 0.5)
        ax.set_ylim(len(lengths) - 0.5, -0.5)
        ax.set_xticks(range(len(levels)), [f"c={c}" for c in levels])
        ax.set_yticks(range(len(lengths)), [str(n) for n in lengths])
        ax.set_title(title, fontsize=8)
    fig.suptitle("Distinct results of identical requests (green 1: identical; above c=1 "
                 "the control's result counts)", fontsize=9)
    return svg(fig)


# key: (caption, draw, what the page says when there is nothing to draw)
NOT_RUN = "not measured in this run"
PLOTS: dict[str, tuple[str, Callable[[Summary], str | None], str]] = {
    "dnll-per-text": ("Per-text dNLL per load pair and arm", dnll_per_text, NOT_RUN),
    "dnll-magnitude": ("How far texts moved", dnll_magnitude, NOT_RUN),
    "first-moved": ("Where moved texts first differ", first_moved,
                    "no text moved in any comparison (or no per-token logprobs were stored)"),
    "drift-heatmap": ("Drift by prompt length x concurrency", drift_heatmap, NOT_RUN),
    "survival-map": ("Survival map", survival_map, NOT_RUN),
    "speed": ("Speed per arm", speed_vs_length, NOT_RUN),
    "capacity": ("Capacity per arm", capacity_bars, NOT_RUN),
}
