"""What a run adds once it has seen its loads: a design's confirmation arm, and cost
loads where a comparison is still unsure (`adaptive`).

Both rules are the plan's (locked with it) and are applied between rounds of loads,
from the analysis of what was measured so far; each decision is written to the run
directory (confirmation.json, cost_loads.json) before the loads it asks for start, so an
interrupted run resumes them, and bundle.as_run folds them into the plan as it runs.

- Confirmation: after the arms of a design short of the full factorial, the analysis
  names the factor set it predicts meets the criterion (analysis.screening); when that
  set is not among the design's arms, its arm is measured with the plan's drift and cost
  loads. A design that cannot say, or whose predicted arm it measured already, is
  written down as such, and nothing is added.
- Adaptive cost loads: every arm of a speed comparison still within noise (or short of
  replicates for a band; analysis.unsure) gets one more cost load, up to the plan's
  `max_cost_loads`; a comparison that is clear gets none. Rounds repeat until no arm
  that is asked for can take another.
"""

from __future__ import annotations

from servediff.bundle import (
    as_run,
    read_confirmation,
    read_cost_rounds,
    read_evidence,
    write_confirmation,
    write_cost_rounds,
)
from servediff.plan import arm_name
from servediff.runner import Runner
from servediff.schedule import cost_runs


def confirm(runner: Runner) -> bool:
    """Write the confirmation of the runner's design once its loads are done; whether an
    arm is to be measured."""
    plan, root = runner.locked_plan, runner.layout.root
    if (not plan.factors or plan.made_design().full or not plan.design.confirm
            or read_confirmation(root) is not None):
        return False
    from servediff.analysis.summary import summarize  # scipy: loaded when it is due

    summary = summarize(read_evidence(root))
    predicted = summary.factors.ship.predicted if summary.factors else None
    if predicted is None:
        write_confirmation(root, None, "the design cannot say which factors meet the "
                                       "criterion, so there is no set to confirm")
        return False
    name = arm_name(predicted)
    if name in plan.arms:
        write_confirmation(root, None, f"the predicted arm `{name}` is one of the design's "
                                       "arms, measured with the plan's loads")
        return False
    write_confirmation(root, predicted, f"the design predicts that `{name}` meets the "
                                        "criterion; its arm is measured with the plan's loads")
    runner.context.observer.note(f"confirmation: the design predicts `{name}`; measuring "
                                 "its arm with the plan's drift and cost loads")
    return True


def add_cost_loads(runner: Runner) -> bool:
    """One round of the adaptive rule, once the loads so far are done: whether cost loads
    were added."""
    plan, root = runner.locked_plan, runner.layout.root
    if not plan.adaptive or not cost_runs(plan):
        return False
    from servediff.analysis.summary import summarize
    from servediff.analysis.unsure import unsure_pairs

    current = as_run(root, plan)
    counts = {arm: current.cost_loads_of(arm) for arm in current.arms}
    asked: dict[str, list[str]] = {}
    for (a, b), rows in unsure_pairs(summarize(read_evidence(root))).items():
        asked.setdefault(a, []).extend(f"against `{b}`: {row}" for row in rows)
        asked.setdefault(b, []).extend(f"against `{a}`: {row}" for row in rows)
    grow = sorted(arm for arm in asked if arm in counts and counts[arm] < plan.max_cost_loads)
    if not grow:
        return False
    counts.update({arm: counts[arm] + 1 for arm in grow})
    write_cost_rounds(root, [*read_cost_rounds(root),
                             {"loads": counts, "unsure": {arm: asked[arm] for arm in grow}}])
    runner.context.observer.note(
        "adaptive: a speed comparison is still within noise; one more cost load for "
        + ", ".join(f"`{arm}` ({counts[arm]} of at most {plan.max_cost_loads})"
                    for arm in grow))
    return True


def run(runner: Runner) -> None:
    """The runner's loads, then what its rules add, until they add nothing."""
    runner.run()
    while confirm(runner) or add_cost_loads(runner):
        runner.run()
