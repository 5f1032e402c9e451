"""A bisection's report (bisect.md, bisect.html): the answer, each step, what changed at
the flip, and a plot of the property per tested build, from bisect.json alone."""

from __future__ import annotations

import html

import matplotlib.pyplot as plt

from servediff.bisect_verdicts import UNITS
from servediff.bisection import Bisection, Step
from servediff.report.html import markdown_to_html, page
from servediff.report.plots import IDENTICAL, NOT_MEASURED, svg
from servediff.sourcediff import changes_text

VERDICT_COLORS = {"good": IDENTICAL, "bad": "#b00020", "skip": NOT_MEASURED}


def _measured(step: Step) -> str:
    m = step.measure
    if m is None:
        return "-"
    if m.value is not None:
        return m.value
    if m.compared is None:
        return "started" if m.started else "did not start"
    moved = f"{m.moved} of {m.compared}"
    if m.retokenized:
        moved += f", {m.retokenized} tokenized otherwise"
    return moved


def _cell(text: str) -> str:
    """Text for a table cell: a `|` in it (|dNLL|) would end the cell."""
    return text.replace("|", "\\|")


def _dnll(step: Step) -> str:
    m = step.measure
    return "-" if m is None or m.max_abs_dnll is None else f"{m.max_abs_dnll:.3g}"


def in_build_order(found: Bisection) -> list[tuple[int, Step]]:
    """Each step with its number (1: measured first), in the order of the builds."""
    order = {b: i for i, b in enumerate(found.builds)}
    return sorted(enumerate(found.steps, 1), key=lambda x: order[x[1].build])


def bisect_markdown(found: Bisection) -> str:
    """bisect.md: the answer, the steps in build order, what changed at the flip."""
    lines = [f"# Bisection of {len(found.builds)} builds on {found.property}", "",
             found.why + ".", "",
             f"{len(found.steps)} of {len(found.builds)} builds measured, from "
             f"{found.builds[0]} to {found.builds[-1]}; each step's bundle is its own run "
             "(`servediff rederive` judges every step again from it).", "",
             "## Steps, in build order", "",
             "| build | step | verdict | measured | max abs dNLL | why | bundle |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for n, step in in_build_order(found):
        lines.append(f"| {step.build} | {n} | {step.verdict} | {_cell(_measured(step))} | "
                     f"{_dnll(step)} | {_cell(step.why)} | {step.bundle or '-'} |")
    lines += ["", "## What changed at the flip", ""]
    if found.changes is not None:
        lines.append(f"Builds {changes_text(found.changes)}; the diff of those that can "
                     f"change a served number: {found.changes.diff}.")
        lines += ["", "| file | status | lines added | lines removed |",
                  "| --- | --- | --- | --- |"]
        lines += [f"| {c.path} | {c.status} | {c.added} | {c.removed} |"
                  for c in found.changes.mattering()]
    else:
        lines.append(found.changes_why or "No flip was found, so no two builds to compare.")
    return "\n".join(lines) + "\n"


def _label(found: Bisection, step: Step) -> str:
    m = step.measure
    if m is None:
        return ""
    if found.property == "scores":
        return _dnll(step)
    if found.property == "starts":
        return "started" if m.started else "no start"
    if m.number is None:
        return "-"
    return f"{m.number:+.0%}" if found.property == "speed" else f"{m.number:,.0f}"


def _height(found: Bisection, step: Step) -> float:
    m = step.measure
    if m is None:
        return 0.0
    if found.property == "starts":
        return float(m.started)
    return float(m.number or 0.0)


def bisect_plot(found: Bisection) -> str | None:
    """The property per tested build, in build order (None: nothing measured), coloured
    by verdict: texts moved against the good end (labelled with the largest |dNLL|),
    whether the engine started, drift scopes, KV tokens, the longest single prompt held,
    or the largest speed change; a dashed line between the last good and first bad."""
    steps = [s for _, s in in_build_order(found) if s.measure is not None]
    if not steps:
        return None
    fig, ax = plt.subplots(figsize=(max(4.0, 0.7 * len(steps) + 1.5), 3.0))
    xs = range(len(steps))
    heights = [_height(found, s) for s in steps]
    colors = [VERDICT_COLORS[s.verdict] for s in steps]
    ax.bar(xs, heights, color=colors, width=0.6)
    # a marker on every build, so that a build of height 0 shows its verdict too
    ax.scatter(xs, heights, color=colors, edgecolors="#333333", s=28, zorder=3)
    for verdict in sorted({s.verdict for s in steps}):
        ax.scatter([], [], color=VERDICT_COLORS[verdict], edgecolors="#333333", s=28,
                   label=verdict)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False)
    for x, (step, h) in enumerate(zip(steps, heights, strict=True)):
        ax.annotate(_label(found, step), (x, max(h, 0.0)), xytext=(0, 5),
                    textcoords="offset points", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(list(xs), [s.build for s in steps], rotation=45, ha="right")
    ax.set_xlabel("build (measured ones, in build order)")
    ax.set_ylabel(UNITS[found.property])
    if found.property == "scores":
        tops = [float(s.measure.compared or 0) for s in steps if s.measure is not None]
        ax.set_ylim(0, max([*tops, *heights, 1.0]) * 1.15)
    at = [i for i, s in enumerate(steps) if s.build in (found.last_good, found.first_bad)]
    if len(at) == 2:
        ax.axvline(sum(at) / 2, color="#555555", linestyle="--", linewidth=1)
    return svg(fig)


def bisect_html(found: Bisection, markdown: str) -> str:
    """bisect.html: bisect.md's text with the plot after the answer."""
    title = f"Bisection of {len(found.builds)} builds on {found.property}"
    body = markdown.split("\n", 1)[1]
    plot = bisect_plot(found)
    figure = (f'<figure id="plot-builds" data-drawn="{"yes" if plot else "no"}">'
              f"<figcaption>{html.escape(UNITS[found.property])}, per measured build"
              + (" (label: the largest |dNLL| against the good end)"
                 if found.property == "scores" else "") + "</figcaption>"
              + (plot or '<p class="missing">no step measured anything</p>') + "</figure>")
    head, sep, rest = body.partition("## Steps")
    return page(title, markdown_to_html(head) + figure + markdown_to_html(sep + rest))
