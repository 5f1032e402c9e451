"""How much of the demo's wall time is spent outside the engine.

Runs the demo plan (2 arms x 2 cold loads x score + 1 repeat on SmolLM2,
embedded engine) into a temporary folder and prints, side by side from the
same run: total wall time, time inside the engine (start-up to ready plus
scoring requests, as the evidence records them), and their ratio. Target:
ratio <= 1.15. The model conversion is done (and cached) before the clock
starts, since it happens once per machine, not once per run.

    python benchmarks/demo_overhead.py [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import tomllib
from importlib import resources
from pathlib import Path

from servediff import models
from servediff.derived import write_derived
from servediff.plan import resolve_plan
from servediff.runner import Runner, SilentObserver


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keep", type=Path, help="write the run here instead of a temp folder")
    args = parser.parse_args()
    models.smollm2_dir(lambda message: None)
    text = resources.files("servediff.plans").joinpath("demo.toml").read_text()
    plan, corpus = resolve_plan(tomllib.loads(text), "demo.toml", Path.cwd())
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp) / "run"
        t0 = time.monotonic()
        Runner(plan, corpus, root, Path.cwd(), SilentObserver()).run()
        write_derived(root)
        wall = time.monotonic() - t0
        ready = stop = 0.0
        for path in (root / "loads").glob("*.json"):
            for launch in json.loads(path.read_text())["launches"]:
                ready += launch["seconds_to_ready"] or 0.0
                stop += launch["stop"]["stop_seconds"]
        scoring = sum(json.loads(p.read_text())["engine_seconds"]
                      for p in (root / "cells").glob("*.json"))
    engine = ready + scoring
    print(f"demo plan: {len(plan.arms)} arms x {plan.loads_per_arm} loads, "
          f"{len(corpus.texts)} texts, {plan.probes.repeat.count} repeat(s)")
    print(f"wall time              {wall:8.1f} s")
    print(f"engine start to ready  {ready:8.1f} s")
    print(f"engine scoring         {scoring:8.1f} s")
    print(f"engine stop            {stop:8.1f} s (outside the engine's work)")
    print(f"outside the engine     {wall - engine:8.1f} s")
    print(f"ratio wall / engine    {wall / engine:8.3f}  (target <= 1.15)")


if __name__ == "__main__":
    main()
