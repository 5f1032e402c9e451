"""A design's confirmation: after the arms of a design short of the full factorial, the
arm of the factors it predicts meet the criterion, measured with full loads.

The rule is the plan's (`design.confirm`, locked with it), applied once the design's
loads are done: the analysis of what they measured names the predicted factor set
(analysis.screening); when that set is not among the design's arms, servediff writes it
to the run's confirmation.json and measures its arm with the plan's drift and cost
loads. The decision is written before the arm's first load, so an interrupted run
resumes it; a design that cannot say which set meets the criterion, or whose predicted
arm it measured already, is written down as such, and nothing is added.
"""

from __future__ import annotations

from servediff.bundle import read_confirmation, read_evidence, write_confirmation
from servediff.plan import arm_name
from servediff.runner import Runner


def decide(runner: Runner) -> bool:
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


def run(runner: Runner) -> None:
    """The runner's loads, then its design's confirmation arm if the rule asks for one."""
    runner.run()
    if decide(runner):
        runner.run()
