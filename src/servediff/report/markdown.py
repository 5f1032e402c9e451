"""report.md: a paste-ready Markdown report rendered from a summary alone."""

from __future__ import annotations

from servediff import probes as registry
from servediff.analysis.findings import (
    ArmDrift,
    Comparison,
    GenerationComparison,
    Setup,
    Summary,
)
from servediff.report import ship, words
from servediff.report.costs import cost_lines, verdict_lines
from servediff.report.table import fmt_nll, fmt_ppl, grid_rows, skip_label

# the section that report.html puts after the plots, with all it holds
SAW = "What you saw"


def _block(line: str) -> str:
    if line.startswith("- "):
        return "item"
    if line.startswith("|"):
        return "row"
    return "other"


def _apart(before: str, line: str) -> bool:
    """Whether two adjacent lines need a blank line between them: a line of text after
    any line (else CommonMark folds it into the paragraph or list item above), a table
    after anything but its own rows, a list after a table. A list may follow text
    directly: a bullet list interrupts a paragraph."""
    kind, prior = _block(line), _block(before)
    if kind == "other":
        return True
    return kind != prior and not (kind == "item" and prior == "other")


def blocks(lines: list[str]) -> list[str]:
    """The report's lines as Markdown blocks, so that every Markdown renderer (GitHub,
    report.html) shows each line of text as a paragraph of its own, as the report
    means."""
    out: list[str] = []
    for line in (part for entry in lines for part in entry.split("\n")):
        if out and out[-1].strip() and line.strip() and _apart(out[-1], line):
            out.append("")
        out.append(line)
    return out


def _first(entry: GenerationComparison) -> str:
    if not entry.divergences:
        return ""
    d = min(entry.divergences, key=lambda d: d.first_position)
    return f" (earliest: `{d.tag}` at generated token {d.first_position}, {d.differs_in})"


def _cached(values: list[int | None]) -> str:
    return ", ".join("not reported" if v is None else str(v) for v in values) or "-"


def _ci(p: Comparison) -> str:
    ci = p.moved_ci95
    return f" (95% CI {ci[0]:.0%}-{ci[1]:.0%})" if ci else ""


def _pair_line(label: str, p: Comparison) -> str:
    ids = f" ({len(p.ids_differ)} texts scored with different ids, not compared)" \
        if p.ids_differ else ""
    return (f"| {label} | {p.moved}/{p.compared}{_ci(p)} | {fmt_nll(p.max_abs_delta)} | "
            f"{p.max_tag or '-'} | {'yes' if p.bit_identical else 'no'} |{ids}")


def what_broke(summary: Summary) -> list[str]:
    """Drift found per arm and every cost the verdict named, first thing in the report."""
    lines = ["## What broke", ""]
    lines += [f"- {words.refused_text(r.arm, r.message, r.launches)}"
              for r in summary.did_not_start]
    found = bool(summary.did_not_start)
    for arm, data in summary.arms.items():
        if data.signature.name == "drift":
            detail = "".join(f"; moved {p.moved} of {p.compared} texts between cold loads "
                             f"{p.load_a} and {p.load_b} (max |dNLL| "
                             f"{fmt_nll(p.max_abs_delta)})"
                             for p in data.across_load if p.moved)
            lines.append(f"- `{arm}`: {words.signature_text(data.signature)}{detail}")
            found = True
    for pair in summary.verdict.pairs:
        if pair.costs:
            lines.append(f"- {words.headline(pair)}")
            found = True
    for arm, c in summary.costs.items():
        s = c.survival
        if s and any(s.first_failure.values()) and not summary.verdict.pairs:
            lines.append(f"- `{arm}`: the sweep found failures (see the survival map)")
            found = True
    if not found:
        lines.append(f"Nothing within the regime covered "
                     f"({words.coverage_text(summary.verdict.coverage)}); read \"Not tested\" "
                     "before generalising.")
    return [*lines, ""]


def what_fixed_it(summary: Summary) -> list[str]:
    fixes = [text for p in summary.verdict.pairs if (text := words.fix_text(p))]
    if not fixes:
        # this section reads reload drift only; the other kinds' fixes are the attribution's
        return ["## What fixed it", "", "No arm stopped a reload drift that another arm "
                "showed (drift within a load, by batch and under concurrency: Which factor "
                "changes what, where the plan has factors).", ""]
    return ["## What fixed it", "", *[f"- {f}." for f in fixes], ""]


def arm_lines(arm: str, data: ArmDrift) -> list[str]:
    caches = words.caches_text(data)
    lines = [f"### Arm `{arm}`: {words.signature_text(data.signature)}", "",
             f"_{words.signature_meaning(data.signature)}_", "",
             *([f"Caches: {caches}.", ""] if caches else []),
             "| comparison | moved | max abs dNLL | text | bit-identical |",
             "| --- | --- | --- | --- | --- |"]
    lines += [_pair_line(f"load {p.load_a} vs load {p.load_b}", p) for p in data.across_load]
    lines += [_pair_line(f"load {p.load}, repeat {p.repeat} vs first pass", p)
              for p in data.within_load]
    lines += [_pair_line(f"load {p.load}, scored at batch size {p.batch_size} vs "
                         f"{p.arm_batch_size}", p) for p in data.batch_size]
    where = [text for label, p in (
        *((f"Load {p.load_a} vs load {p.load_b}", p) for p in data.across_load),
        *((f"Load {p.load}, repeat {p.repeat}", p) for p in data.within_load),
        *((f"Load {p.load}, batch size {p.batch_size}", p) for p in data.batch_size))
        for text in words.where_drift_starts(label, p)]
    if where:
        lines += ["", "Where drift starts (positions count scored tokens from 0): "
                  + "; ".join(where) + "."]
    lines += ["", "Perplexity per load: " + ", ".join(
        f"load {r.load}: {fmt_ppl(r.perplexity)} over {r.tokens_scored} tokens"
        for r in data.loads) + "."]
    conc = data.concurrency
    if conc:
        grid = conc.table
        lines += ["", f"Concurrency probe (identical requests; distinct results, the "
                  "control's counted in above c=1, and the responses off the control's "
                  f"result (c=1: off the majority), summed over {len(conc.loads)} load(s)). "
                  "Concurrency-1 control: "
                  + ("every length gave one result." if conc.control_ok else
                     "FAILED: requests sent one at a time already disagree."), "",
                  "| request | prompt tokens | " + " | ".join(
                      f"c={c}" + (" (control)" if c == 1 else "") for c in grid.levels) + " |",
                  "| --- | --- |" + " --- |" * len(grid.levels)]
        for kind, length, row in grid_rows(grid):
            lines.append(f"| {kind} | {length} | " + " | ".join(row) + " |")
        skipped = {skip_label(s): s for load in conc.loads for s in load.skipped}
        if skipped:
            lines.append("")
            lines += [f"Skipped: {label} ({s.reason})." for label, s in skipped.items()]
        if conc.cache_splits:
            lines += ["", f"Prefix cache: {len(conc.cache_splits)} group(s) mixed cached and "
                      f"fresh responses; in {sum(x.differ for x in conc.cache_splits)} they "
                      "differed."]
        lines.append("")
    gen = data.generation
    if gen:
        lines += ["", "Greedy generation (generate probe), prompts whose outputs diverged:"]
        lines += [f"- within load {w.load}: {w.diverged} of {w.prompts}" + _first(w)
                  for w in gen.within_load]
        lines += [f"- load {a.load_a} vs load {a.load_b}: {a.diverged} of {a.prompts}"
                  + _first(a) for a in gen.across_load]
        lines.append("")
    if data.within_load_skipped:
        lines.append(f"Not compared: {len(data.within_load_skipped)} repeat(s) measured "
                     "by a different launch than their load's first pass.")
    return [*lines, ""]


def render(summary: Summary, run_name: str, bundle_sha256: str | None = None) -> str:
    s = summary.setup
    lines = [
        f"# servediff report: {run_name}",
        "",
        f"Engine `{summary.engine}`, model `{summary.model}`, "
        f"{len(summary.arms)} arms x {s.loads_per_arm} cold loads, "
        f"{s.repeats} within-load repeat(s), corpus `{s.corpus.name}` "
        f"({s.corpus.texts} texts). A text counts as moved when "
        f"|dNLL| > {summary.threshold_abs_nll:g} nats.",
        "",
    ]
    if summary.factors is not None:
        lines += ["## What to ship", "", *ship.ship_lines(summary), "",
                  "## Which factor changes what", "",
                  *[f"- {line}" for line in ship.attribution_lines(summary)], ""]
    lines += what_broke(summary)
    lines += [f"## {SAW}", ""]
    lines += verdict_lines(summary)
    for arm, data in summary.arms.items():
        lines += arm_lines(arm, data)
    for g in summary.generation_arm_shifts:
        lines += [f"Greedy generation, `{g.arm_a}` vs `{g.arm_b}` (first loads): "
                  f"{g.diverged} of {g.prompts} prompts diverged" + _first(g) + ".", ""]
    if summary.arm_shifts:
        lines += ["### Arm shifts (first load of each arm)", "",
                  "| arms | moved | max abs dNLL | text | bit-identical |",
                  "| --- | --- | --- | --- | --- |"]
        lines += [_pair_line(f"{p.arm_a} vs {p.arm_b}: {words.shift_text(p.signature)}", p)
                  for p in summary.arm_shifts]
        for p in summary.arm_shifts:
            lines += [f"\n{text}." for text in
                      words.where_drift_starts(f"`{p.arm_a}` vs `{p.arm_b}`", p)]
            d = p.reload_discordant
            if d.texts:
                pval = "n/a" if d.mcnemar_p is None else f"{d.mcnemar_p:.3g}"
                lines.append(f"\nReload stability, paired on {d.texts} texts: moved between "
                             f"cold loads under `{p.arm_a}` only: {d.moved_in_a_only}, "
                             f"under `{p.arm_b}` only: {d.moved_in_b_only} "
                             f"(exact McNemar p = {pval}).")
        lines.append("")
    if summary.detectable_rate is not None:
        lines += [f"With {s.corpus.texts} texts, a per-text move rate of "
                  f"{summary.detectable_rate:.1%} or more would have shown at least one "
                  "moved text with 95% probability; \"0 moved\" says nothing about rarer "
                  "drift.", ""]
    lines += [
        f"Invalid rows (token count or logprob count mismatch): {summary.invalid_rows}; "
        f"error rows: {summary.error_rows}.",
        "",
    ]
    if summary.failed_launches:
        lines += ["Launches that failed or died:", ""]
        lines += [f"- {words.failed_launch_text(f)}" for f in summary.failed_launches]
        lines.append("")
    if summary.partial_cells:
        lines += [f"{len(summary.partial_cells)} cell(s) were cut short by an engine death; "
                  "their rows are kept under `partial/` and not compared.", ""]
    lines += cost_lines(summary)
    lines += probe_lines(summary)
    lines += what_fixed_it(summary)
    lines += serving_lines(s)
    lines += ["## Not tested", "",
              "This run does not show anything about the following; do not read its silence "
              "as \"no effect\":", ""]
    lines += [f"- `{name}`: {words.untested_text(name, why)}"
              for name, why in summary.untested.items()]
    lines += [f"- {words.gap_text(gap)}" for gap in summary.gaps]
    lines += [
        "",
        "## Diagnostic evidence",
        "",
        f"- plan sha256: `{summary.plan_sha256}`",
        *([f"- evidence sha256 (every raw file, as listed in `manifest.json`): "
           f"`{bundle_sha256}`"] if bundle_sha256 else []),
        f"- {summary.cells} cell files with raw rows (per-token logprobs, hashes, timings), "
        "load records with launch and stop, engine logs, `plan.lock.json`.",
        "- re-derive every number above: `servediff rederive RUN`; check every file: "
        "`servediff verify RUN`; re-render: `servediff report RUN --format md|html|json`.",
        "",
    ]
    return "\n".join(blocks(lines))


def probe_lines(summary: Summary) -> list[str]:
    """A section for each probe whose finding is its own, in its own words."""
    lines = []
    for section, finding in summary.probe_findings.items():
        probe = registry.by_section(section)
        lines += [f"## {probe.title[:1].upper()}{probe.title[1:]}", "", *probe.report(finding), ""]
    return lines


def serving_lines(s: Setup) -> list[str]:
    lines = ["## What were you serving", ""]
    for arm, a in s.arms.items():
        opts = ", ".join(f"{k}={v}" for k, v in sorted(a.options.items()))
        ready = ", ".join(f"{x:.1f}" for x in a.seconds_to_ready)
        capacity = ", ".join(f"{k}={v}" for k, v in sorted(a.capacity.items()))
        command = " ".join(a.command or []) or "-"
        lines.append(f"- arm `{arm}`: command `{command}`; options {opts or '-'}; extra args "
                     f"`{' '.join(a.args) or '-'}`; env "
                     f"`{' '.join(f'{k}={v}' for k, v in a.env.items()) or '-'}`; "
                     f"seconds to ready per launch: {ready or '-'}; "
                     f"capacity as the engine reported it: {capacity or 'not reported'}; "
                     f"prefix cache: {', '.join(a.cache_isolation) or 'not recorded'}; "
                     "cached tokens on the first request after each start: "
                     f"{_cached(a.first_request_cached_tokens)}"
                     + (f"; JIT and autotune caches: {a.cache_policy}" if a.cache_policy
                        else "")
                     + ("; start-up as the engine printed it: " + "; ".join(
                         ", ".join(f"{k} {v}" for k, v in sorted(x.items()))
                         for x in a.startup) if a.startup else "")
                     + ("; an external endpoint, not started by servediff"
                        if a.external else ""))
    return [
        *lines,
        f"- engine versions: {', '.join(s.engine_versions) or '-'}",
        f"- weights sha256: {', '.join(s.weights_sha256) or '-'}",
        f"- devices: {', '.join(s.devices) or '-'}; CPU: {', '.join(s.cpu) or '-'}; "
        f"GPUs: {', '.join(s.gpus) or 'none'}; Python {', '.join(s.python)}",
        f"- scoring prefix convention: `{s.prefix}` (the token put before every text)",
        f"- context length as the engine reported it: "
        f"{', '.join(str(n) for n in s.context_lengths) or 'not reported'}",
        f"- protocol: {protocol(s)}",
        "",
    ]


def protocol(setup: Setup) -> str:
    """The probes that ran, with the settings that bound what they could see: each
    probe's own words (probes/base.py), drift probes first, then the cost loads'."""
    probes = setup.probes
    parts = [f"{setup.loads_per_arm} drift load(s) per arm, {setup.repeats} repeat(s)"]
    for phase in ("drift", "cost"):
        if phase == "cost" and probes.cost_probes():
            parts.append(f"{setup.cost_loads_per_arm} cost load(s) per arm" + (
                " (added where a speed comparison was within noise: " + ", ".join(
                    f"`{arm}` {n}" for arm, n in setup.cost_loads.items()) + ")"
                if setup.cost_loads else "") + (
                ", each run by the drift load of its number after its drift probes "
                "(loads = \"combined\"; a cost load past the drift loads runs alone)"
                if setup.loads == "combined" else ""))
        for probe in registry.ordered():
            spec = probes.get(probe.settings)
            if probe.phase == phase and spec.on() and (text := probe.protocol(spec)):
                parts.append(text)
    return "; ".join(parts)
