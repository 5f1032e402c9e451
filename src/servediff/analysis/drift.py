"""Drift analysis: across loads, within a load, between arms, and the named signature.

Everything here is a pure function of parsed evidence, so `servediff
rederive` on any machine gets the same numbers the run printed. A signature
is a list of structured findings; `report/words.py` says them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from itertools import combinations

from servediff.analysis import concurrency, generation, stats
from servediff.analysis.boundaries import EngineShapes, engine_shapes
from servediff.analysis.compare import TextScore, compare
from servediff.analysis.findings import (
    ArmConcurrency,
    ArmDrift,
    ArmGeneration,
    ArmPair,
    ArmSetup,
    BatchPair,
    BatchSizeDrift,
    CacheArmsDrift,
    CacheSplitDrift,
    Comparison,
    ConcurrencyDrift,
    ControlDrift,
    CorpusSetup,
    DidNotStart,
    Discordant,
    DriftFinding,
    FailedLaunch,
    FirstRequestCached,
    Gap,
    LoadPair,
    LoadRow,
    LoadsDrift,
    LoadsMissing,
    PartialCell,
    PlanGap,
    ProbeOnSomeLoads,
    RepeatDrift,
    RepeatPair,
    Setup,
    ShiftKind,
    Signature,
    SkippedRepeat,
)
from servediff.bundle import Evidence, Layout
from servediff.evidence import Cell, RequestKind, load_name
from servediff.probes.concurrency import ConcurrencySettings
from servediff.probes.repeat import RepeatSettings


def scores_of(cell: Cell) -> dict[str, TextScore]:
    return {
        r.tag: TextScore(r.sum_nll, r.token_ids, r.token_logprobs)
        for r in cell.records
        if r.status == "ok" and r.sum_nll is not None
    }


def perplexity(cell: Cell) -> float | None:
    ok = [r for r in cell.records if r.status == "ok" and r.sum_nll is not None]
    tokens = sum(r.n_scored for r in ok)
    if not tokens:
        return None
    return math.exp(math.fsum(r.sum_nll or 0.0 for r in ok) / tokens)


def _load_row(cell: Cell) -> LoadRow:
    ok = [r for r in cell.records if r.status == "ok"]
    return LoadRow(
        load=cell.load, launch=cell.launch, texts=len(cell.records), ok=len(ok),
        invalid=sum(r.status == "invalid" for r in cell.records),
        errors=sum(r.status == "error" for r in cell.records),
        tokens_scored=sum(r.n_scored for r in ok),
        sum_nll=math.fsum(r.sum_nll or 0.0 for r in ok), perplexity=perplexity(cell))


def _refs(*cells: Cell) -> list[str]:
    return [Layout.cell_ref(c.name) for c in cells]


def _kinds(score: bool, generate: bool) -> list[RequestKind]:
    kinds: list[RequestKind] = []
    if score:
        kinds.append("score")
    if generate:
        kinds.append("generate")
    return kinds


def signature(across: list[tuple[Cell, Cell, Comparison]],
              within: list[tuple[Cell, Cell, Comparison]],
              conc: ArmConcurrency | None = None, batches: list[BatchPair] | None = None,
              gen: ArmGeneration | None = None,
              batch_cells: list[Cell] | None = None) -> Signature:
    """Every place drift was found; or why nothing was."""
    findings: list[DriftFinding] = []
    batches = batches or []
    within_moved = [(a, b, c) for a, b, c in within if c.moved]
    gen_within = [w for w in (gen.within_load if gen else []) if w.diverged]
    gen_across = [p for p in (gen.across_load if gen else []) if p.diverged]
    moved_batches = [b for b in batches if b.moved]
    if conc is not None and not conc.control_ok:
        controls = [r for load in conc.loads for r in load.groups if r.level == 1]
        findings.append(ControlDrift(
            evidence=conc.cells,
            count=sum(len(load.control_failed) for load in conc.loads), of=len(controls)))
    if within_moved or gen_within:
        findings.append(RepeatDrift(
            evidence=sorted({ref for a, b, _ in within_moved for ref in _refs(a, b)})
            + (gen.cells if gen and gen_within else []),
            count=sum(c.moved for *_, c in within_moved), of=sum(c.compared for *_, c in within),
            request_kinds=_kinds(bool(within_moved), bool(gen_within))))
    if moved_batches and not within_moved:
        # Plain repeats at the arm's own batch size are the control: they held still.
        findings.append(BatchSizeDrift(
            evidence=_refs(*(batch_cells or [])),
            count=sum(b.moved for b in moved_batches), of=sum(b.compared for b in batches),
            batch_sizes=sorted({b.batch_size for b in moved_batches}),
            arm_batch_size=moved_batches[0].arm_batch_size, control=bool(within)))
    if conc is not None and conc.control_ok and conc.batch_composition and conc.first_drift:
        first = conc.first_drift
        findings.append(ConcurrencyDrift(
            evidence=conc.cells,
            count=sum(load.drifting_groups for load in conc.loads),
            request_kinds=first.kinds, length=first.length, level=first.level))
    splits = [*(conc.cache_splits if conc else []), *(gen.cache_splits if gen else [])]
    differing = [x for x in splits if x.differ]
    if differing:
        findings.append(CacheSplitDrift(
            evidence=[*(conc.cells if conc else []), *(gen.cells if gen else [])],
            count=len(differing), of=len(splits)))
    control_moved = conc is not None and any(g.distinct > 1 for g in conc.across_loads)
    across_moved = [(a, b, c) for a, b, c in across if c.moved]
    if across_moved or control_moved or gen_across:
        findings.append(LoadsDrift(
            evidence=sorted({ref for a, b, _ in across_moved for ref in _refs(a, b)}),
            count=max((c.moved for *_, c in across_moved), default=0),
            of=max((c.compared for *_, c in across), default=0),
            request_kinds=_kinds(bool(across_moved or control_moved),
                                 bool(gen_across or control_moved))))
    if len(findings) == 1 and findings[0].kind == "across-load":
        findings = [findings[0].model_copy(update={"only": True})]
    if findings:
        return Signature(name="drift", findings=findings)
    if not across and not within and conc is None and not batches and gen is None:
        return Signature(name="not measured")
    if all(c.bit_identical for *_, c in [*across, *within]) and \
            all(b.bit_identical for b in batches):
        return Signature(name="bit-identical")
    return Signature(name="stable within threshold")


Shapes = Mapping[str, EngineShapes]


def cell_shapes(evidence: Evidence) -> dict[str, EngineShapes]:
    """What each cell's launch says of the shapes its engine computed in, by cell name."""
    launches = {(rec.name, x.attempt): x for rec in evidence.loads for x in rec.launches}
    out = {}
    for cell in evidence.cells:
        launch = launches.get((load_name(cell.arm, cell.load, cell.phase), cell.launch))
        if launch is not None:
            out[cell.name] = engine_shapes(launch)
    return out


def compare_cells(a: Cell, b: Cell, threshold: float, shapes: Shapes) -> Comparison:
    """Two cells' scores compared, with the shapes of the launches that measured them."""
    none = EngineShapes()
    return compare(scores_of(a), scores_of(b), threshold,
                   shapes.get(a.name, none).joined(shapes.get(b.name, none)))


def analyse_arm(cells: list[Cell], threshold: float, prefix_cache: bool | None,
                shapes: Shapes | None = None) -> ArmDrift:
    shapes = shapes or {}
    score_cells = sorted((c for c in cells if c.probe == "score"), key=lambda c: c.load)
    repeats = [c for c in cells if c.probe == "repeat"]
    across = [(a, b, compare_cells(a, b, threshold, shapes))
              for a, b in combinations(score_cells, 2)]
    within: list[tuple[Cell, Cell, Comparison]] = []
    skipped: list[SkippedRepeat] = []
    batches: list[BatchPair] = []
    batch_cells: list[Cell] = []
    sized = [(c, c.batch_size) for c in cells if c.batch_size is not None]
    for cell, size in sorted(sized, key=lambda x: (x[0].load, x[1])):
        base = next((c for c in score_cells if c.load == cell.load), None)
        if base is not None and base.launch == cell.launch:
            sizes = sorted({r.batch_size for r in base.records})
            comp = compare_cells(base, cell, threshold, shapes)
            batches.append(BatchPair(load=cell.load, batch_size=size,
                                     arm_batch_size=max(sizes) if sizes else None,
                                     **comp.model_dump()))
            if comp.moved:
                batch_cells += [base, cell]
    for rep in sorted(repeats, key=lambda c: (c.load, c.repeat)):
        base = next((c for c in score_cells if c.load == rep.load), None)
        if base is None:
            continue
        if base.launch != rep.launch:
            # Measured by two different processes after a resumed load:
            # comparing them would call across-launch drift within-load.
            skipped.append(SkippedRepeat(load=rep.load, repeat=rep.repeat,
                                         reason="different launches"))
            continue
        within.append((base, rep, compare_cells(base, rep, threshold, shapes)))
    conc = concurrency.analyse_arm(cells)
    gen = generation.analyse_arm(cells)
    return ArmDrift(
        loads=[_load_row(c) for c in score_cells],
        across_load=[LoadPair(load_a=a.load, load_b=b.load, **c.model_dump())
                     for a, b, c in across],
        within_load=[RepeatPair(load=a.load, repeat=b.repeat, **c.model_dump())
                     for a, b, c in within],
        within_load_skipped=skipped, batch_size=batches, concurrency=conc, generation=gen,
        signature=signature(across, within, conc, batches, gen, batch_cells),
        invalid_rows=sum(r.status == "invalid" for c in cells for r in c.records),
        error_rows=sum(r.status == "error" for c in cells for r in c.records),
        prefix_cache=prefix_cache)


def cache_dependence(per_arm: dict[str, ArmDrift]) -> dict[str, ArmDrift]:
    """Name within-load drift of a cache-on arm cache-dependent when a cache-off arm of the
    same plan held still within its loads: the cache is the difference between them."""
    still = [arm for arm, d in per_arm.items()
             if d.prefix_cache is False and not d.signature.has("within-load") and d.within_load]
    out = dict(per_arm)
    for arm, d in per_arm.items():
        sig = d.signature
        if d.prefix_cache and sig.has("within-load") and not sig.has("cache-dependent") \
                and still:
            finding = CacheArmsDrift(reference_arm=still[0])
            out[arm] = d.model_copy(update={"signature": sig.model_copy(
                update={"findings": [*sig.findings, finding]})})
    return out


def shift_signature(moved_count: int, a: Signature, b: Signature) -> ShiftKind:
    if not moved_count:
        return "no arm shift"
    if a.stable and b.stable:
        return "arm shift"
    return "arms differ and an arm drifts"


def _moved_across(cells: list[Cell], threshold: float) -> dict[str, bool]:
    """Per text: did it move between any two cold loads of this arm?"""
    scored = sorted((c for c in cells if c.probe == "score"), key=lambda c: c.load)
    out: dict[str, bool] = {}
    for x, y in combinations(scored, 2):
        comp = compare(scores_of(x), scores_of(y), threshold)
        for tag in set(scores_of(x)) & set(scores_of(y)):
            out[tag] = out.get(tag, False) or tag in comp.moved_tags
    return out


def arm_shifts(by_arm: Mapping[str, list[Cell]], threshold: float,
               signatures: Mapping[str, Signature], shapes: Shapes | None = None
               ) -> list[ArmPair]:
    """Each pair of arms compared on their first measured load's score cell."""
    shapes = shapes or {}
    firsts = {}
    for arm, cells in by_arm.items():
        scored = sorted((c for c in cells if c.probe == "score"), key=lambda c: c.load)
        if scored:
            firsts[arm] = scored[0]
    out = []
    for a, b in combinations(firsts, 2):
        comp = compare_cells(firsts[a], firsts[b], threshold, shapes)
        # Paired on texts: which moved between cold loads under one arm only.
        moved_a, moved_b = _moved_across(by_arm[a], threshold), _moved_across(by_arm[b], threshold)
        common = set(moved_a) & set(moved_b)
        a_only = sum(moved_a[t] and not moved_b[t] for t in common)
        b_only = sum(moved_b[t] and not moved_a[t] for t in common)
        out.append(ArmPair(
            arm_a=a, arm_b=b, load_a=firsts[a].load, load_b=firsts[b].load,
            signature=shift_signature(comp.moved, signatures[a], signatures[b]),
            reload_discordant=Discordant(texts=len(common), moved_in_a_only=a_only,
                                         moved_in_b_only=b_only,
                                         mcnemar_p=stats.mcnemar(a_only, b_only)),
            **comp.model_dump()))
    return out


def drift_gaps(evidence: Evidence, per_arm: Mapping[str, ArmDrift]) -> list[Gap]:
    plan = evidence.plan
    gaps: list[Gap] = [LoadsMissing(kind="loads missing", arm=arm, count=len(d.loads),
                                    of=plan.loads_per_arm)
                       for arm, d in per_arm.items() if len(d.loads) < plan.loads_per_arm]
    if plan.base_url:
        gaps.append(PlanGap(kind="external endpoint"))
    elif plan.loads_per_arm < 2:
        gaps.append(PlanGap(kind="one load"))
    if plan.probes.get(RepeatSettings).count == 0:
        gaps.append(PlanGap(kind="no repeat"))
    repeat, grid = plan.probes.get(RepeatSettings), plan.probes.get(ConcurrencySettings)
    for name, loads, runs in (("repeat", repeat.loads, bool(repeat.count or repeat.batch_sizes)),
                              ("concurrency", grid.loads, grid.enabled)):
        if runs and loads is not None and set(loads) != set(range(1, plan.loads_per_arm + 1)):
            gaps.append(ProbeOnSomeLoads(reason=name, count=len(set(loads)),
                            of=plan.loads_per_arm))
    for rec in evidence.loads:
        for launch in rec.launches:
            if launch.first_request_cached_tokens:
                gaps.append(FirstRequestCached(arm=rec.arm, load=rec.load,
                                phase=rec.phase, count=launch.first_request_cached_tokens))
    return gaps


def failed_launches(evidence: Evidence) -> list[FailedLaunch]:
    return [FailedLaunch(arm=rec.arm, load=rec.load, phase=rec.phase, attempt=launch.attempt,
                         error=launch.error,
                         died_before_stop=bool(launch.stop and launch.stop.died_before_stop),
                         at_resume=bool(launch.stop and launch.stop.at_resume),
                         found_alive=launch.stop.found_alive if launch.stop else None)
            for rec in evidence.loads for launch in rec.launches
            if launch.error or (launch.stop and launch.stop.died_before_stop)]


def did_not_start(evidence: Evidence) -> list[DidNotStart]:
    """Arms with a load whose every launch (max_attempts of them, those servediff stopped
    before they were ready passed over) was refused by the engine with one message: the
    runner started nothing more of them; `launches` counts the refused ones."""
    out: dict[str, DidNotStart] = {}
    for rec in evidence.loads:
        message = rec.did_not_start(evidence.plan.launch.max_attempts)
        if message and rec.arm not in out:
            out[rec.arm] = DidNotStart(arm=rec.arm, message=message,
                                       launches=sum(x.engine_refusal == message
                                                    for x in rec.launches),
                                       evidence=[Layout.load_ref(rec.name)])
    return [out[arm] for arm in evidence.arms if arm in out]


def partial_cells(evidence: Evidence) -> list[PartialCell]:
    return [PartialCell(arm=c.arm, load=c.load, probe=c.probe, repeat=c.repeat,
                        batch_size=c.batch_size,
                        launch=c.launch, rows=len(c.records)) for c in evidence.partial]


def analyse_arms(evidence: Evidence, by_arm: Mapping[str, list[Cell]]) -> dict[str, ArmDrift]:
    threshold = evidence.plan.thresholds.moved_abs_nll
    shapes = cell_shapes(evidence)
    per_arm = {arm: analyse_arm(by_arm[arm], threshold, prefix_cache_of(evidence, arm), shapes)
               .model_copy(update=jit_caches(evidence, arm)) for arm in evidence.arms}
    return cache_dependence(per_arm)


def jit_caches(evidence: Evidence, arm: str) -> dict[str, object]:
    """The JIT/autotune cache policy of the arm's drift loads, and per launch that got
    ready whether every cache it started with was empty."""
    ready = [x for rec in evidence.loads if rec.arm == arm and rec.phase == "drift"
             for x in rec.launches if x.seconds_to_ready is not None]
    policies = {x.cache_policy for x in ready}
    return {"cache_policy": policies.pop() if len(policies) == 1 else None,
            "caches_empty_at_start": [None if not x.caches else
                                      all(c.empty_at_start for c in x.caches
                                          if c.policy != "plan-env")
                                      for x in ready if x.cache_policy is not None]}


def cells_by_arm(evidence: Evidence) -> dict[str, list[Cell]]:
    by_arm: dict[str, list[Cell]] = {arm: [] for arm in evidence.arms}
    for cell in evidence.cells:
        by_arm.setdefault(cell.arm, []).append(cell)
    return by_arm


def prefix_cache_of(evidence: Evidence, arm: str) -> bool | None:
    """Whether the arm's launches served with a prefix cache (None: not recorded)."""
    states = {launch.prefix_cache for rec in evidence.loads if rec.arm == arm
              for launch in rec.launches if launch.seconds_to_ready is not None}
    return states.pop() if len(states) == 1 else None


def setup(evidence: Evidence) -> Setup:
    """What was served and on what, as the evidence recorded it (for the report)."""
    plan = evidence.plan
    launches = [(rec.arm, launch) for rec in evidence.loads for launch in rec.launches]
    arms = {}
    for arm in evidence.arms:
        spec = plan.arms[arm]
        mine = [launch for a, launch in launches if a == arm]
        arms[arm] = ArmSetup(
            args=spec.args, env=spec.env,
            options=mine[0].options if mine else spec.options,
            command=mine[0].command if mine else None,
            launches=len(mine), external=any(launch.external for launch in mine),
            seconds_to_ready=[x.seconds_to_ready for x in mine if x.seconds_to_ready is not None],
            capacity=next((launch.capacity for launch in mine if launch.capacity), {}),
            cache_isolation=sorted({x.cache_isolation for x in mine if x.cache_isolation}),
            first_request_cached_tokens=[x.first_request_cached_tokens for x in mine],
            cache_policy=next((x.cache_policy for x in mine if x.cache_policy), None),
            startup=[x.startup for x in mine if x.startup])
    conditions = [c.conditions for c in evidence.cells]
    return Setup(
        corpus=CorpusSetup(name=evidence.locked.corpus.name,
                           texts=len(evidence.locked.corpus.texts)),
        prefix=plan.scoring.prefix, loads_per_arm=plan.loads_per_arm,
        cost_loads_per_arm=plan.cost_loads_per_arm,
        cost_loads={a: n for a, n in (plan.cost_loads or {}).items()
                    if n > plan.cost_loads_per_arm}, loads=plan.loads,
        repeats=plan.probes.get(RepeatSettings).count,
        probes=plan.probes,
        context_lengths=sorted({n for _, x in launches if (n := x.context_length())}),
        arms=arms,
        engine_versions=sorted({f"{k}={v}" for _, x in launches
                                for k, v in x.engine_versions().items() if v is not None}),
        weights_sha256=sorted({f"{k}={v}" for _, x in launches
                               for k, v in x.weights_sha256.items()}),
        devices=sorted({x.device() for _, x in launches if x.engine}),
        cpu=sorted({c.cpu_model for c in conditions}),
        gpus=sorted({g.name for c in conditions for g in c.gpus}),
        python=sorted({c.python for c in conditions}))
