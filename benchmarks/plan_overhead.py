"""How long a plan takes on the embedded engine, and the share spent outside the engine.

Runs a plan into a temporary folder and prints, side by side from the same
run: total wall time, time inside the engine as the evidence records it
(start-up to ready, plus every cell's time waiting on engine responses) and
the share of wall time outside it. The model conversion is done (and cached)
before the clock starts, since it happens once per machine, not once per run.

    python benchmarks/plan_overhead.py --plan default   # drift + the full cost protocol
    python benchmarks/plan_overhead.py --plan demo      # the demo's smaller grids
    python benchmarks/plan_overhead.py --plan demo --dtype float32  # as on a CPU without bf16
    python benchmarks/plan_overhead.py --plan demo --dtype float32 --budget 300  # as
        # `servediff demo` sizes itself there: rates measured first, grids cut to fit

It also prints the duration `servediff run` estimates before the run, beside the wall.

`default` is a plan that names only engine, model and arms (two attention
implementations): what a user gets without choosing any probe settings.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import tomllib
from collections import defaultdict
from importlib import resources
from pathlib import Path

from servediff import models
from servediff.budget import size
from servediff.derived import write_derived
from servediff.estimate import estimate
from servediff.plan import resolve_plan
from servediff.probes import protocol_size
from servediff.runner import Runner, SilentObserver

DEFAULT = """
name = "default"
engine = "transformers"
model = "smollm2"
[arms.sdpa]
options = { attn_implementation = "sdpa" }
[arms.eager]
options = { attn_implementation = "eager" }
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--plan", choices=("default", "demo"), default="default")
    parser.add_argument("--keep", type=Path, help="write the run here instead of a temp folder")
    parser.add_argument("--dtype", choices=("auto", "float32", "bfloat16"),
                        help="the plan's engine_options.dtype (default: the plan's own)")
    parser.add_argument("--budget", type=float, default=0.0,
                        help="cut the plan's grids to fit this many seconds, as `servediff "
                             "demo --budget` and a plan's budget_s do (0: the whole plan)")
    args = parser.parse_args()
    models.smollm2_dir(lambda message: None)
    text = (DEFAULT if args.plan == "default" else
            resources.files("servediff.plans").joinpath("demo.toml").read_text())
    raw = tomllib.loads(text)
    if args.dtype:
        raw.setdefault("engine_options", {})["dtype"] = args.dtype
    plan, corpus = resolve_plan(raw, f"{args.plan}.toml", Path.cwd())
    measured = None
    measuring_s = 0.0
    if args.budget:
        sized = size(raw, f"{args.plan}.toml", args.budget, Path.cwd(), print)
        plan, corpus, measured = sized.plan, sized.corpus, sized.measured
        measuring_s = sized.measuring_s
        if measured:
            print(f"measured {measured[0]}, start {measured[1]:.1f} s")
        print(f"cuts: {sized.cuts}")
    found = estimate(plan, protocol_size(plan, corpus), Path.cwd(), measured)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp) / "run"
        t0, started = time.monotonic(), time.time()
        Runner(plan, corpus, root, Path.cwd(), SilentObserver()).run()
        write_derived(root)
        wall = time.monotonic() - t0
        ready = stop = gate = 0.0
        launches = 0
        for path in (root / "loads").glob("*.json"):
            for launch in json.loads(path.read_text())["launches"]:
                launches += 1
                ready += launch["seconds_to_ready"] or 0.0
                stop += launch["stop"]["stop_seconds"] if launch["stop"] else 0.0
                gate += (launch.get("gate") or {}).get("waited_s") or 0.0
        per_probe: dict[str, float] = defaultdict(float)
        drift_end: dict[str, float] = defaultdict(float)  # per arm, as time.time()
        for p in (root / "cells").glob("*.json"):
            cell = json.loads(p.read_text())
            per_probe[cell["probe"]] += cell["engine_seconds"]
            if cell["phase"] == "drift":
                end = cell["started_at"] + cell["wall_seconds"]
                drift_end[cell["arm"]] = max(drift_end[cell["arm"]], end)
    engine = ready + sum(per_probe.values())
    print(f"{args.plan} plan: {len(plan.arms)} arms x {plan.loads_per_arm} drift loads + "
          f"{plan.cost_loads_per_arm} cost loads, {len(corpus.texts)} texts, "
          f"{launches} launches")
    print(f"wall time              {wall:8.1f} s")
    if args.budget:
        print(f"measuring the rates    {measuring_s:8.1f} s (before the run, out of the "
              f"budget: {measuring_s + wall:.1f} s in all against {args.budget:.0f} s)")
    first = min(drift_end.values(), default=started) - started
    print(f"first arm's drift done {first:8.1f} s (its drift table is shown then)")
    print(f"engine start to ready  {ready:8.1f} s")
    for probe, seconds in sorted(per_probe.items()):
        print(f"engine, {probe:<14} {seconds:8.1f} s")
    print(f"engine stop            {stop:8.1f} s (counted outside the engine's work)")
    print(f"quiet-box gate         {gate:8.1f} s (looking at the machine before cost loads)")
    print(f"outside the engine     {wall - engine:8.1f} s  "
          f"({(wall - engine) / wall:.1%} of the wall time)")
    harness = wall - engine - gate
    print(f"  of which not gate    {harness:8.1f} s  ({harness / wall:.1%}: servediff's own "
          "overhead)")
    print(f"ratio wall / engine    {wall / engine:8.3f}")
    if isinstance(found, str):
        print(found)
    else:
        print(f"estimated before it    {found.seconds:8.1f} s  (wall / estimate "
              f"{wall / found.seconds:.3f}; {found.basis})")


if __name__ == "__main__":
    main()
