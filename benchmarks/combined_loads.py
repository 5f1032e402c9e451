"""Separate and combined loads of one plan, side by side: cold loads, answer, costs.

Runs the same plan twice in one sitting on this machine, first with
`loads = "separate"` (drift loads, then cost loads) and then with `loads = "combined"`
(drift, then cost probes in each cold load), and prints from the two bundles:

- the cold loads each took, and the wall time;
- the drift answer per arm and regime, and What to ship, with whether they agree;
- every speed cell (arm, metric, prompt length, level): the mean over cost loads with
  its 95 % band in each mode, and whether each mode's mean lies in the other's band.

    python benchmarks/combined_loads.py                      # docs/examples/embedded-factors.toml
    python benchmarks/combined_loads.py --vllm-cpu           # real vLLM CPU (see vllm_plan)
    python benchmarks/combined_loads.py --plan PLAN.toml --keep DIR

With two cost loads per arm a band is Student's t on one degree of freedom: wide. The
question it answers is whether the combined load measures the engine as a separate
cost load does, not whether two arms differ.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

from servediff import models
from servediff.analysis.factors import regime_drift
from servediff.analysis.findings import Summary
from servediff.analysis.summary import summarize
from servediff.bundle import read_evidence
from servediff.derived import write_derived
from servediff.plan import REGIMES, resolve_plan
from servediff.runner import Runner, SilentObserver
from servediff.sequential import run as run_plan

EXAMPLE = Path(__file__).resolve().parent.parent / "docs" / "examples" / "embedded-factors.toml"
METRICS = ("ttft_s", "prefill_tok_s", "decode_tok_s")


ROOT = Path(__file__).resolve().parent.parent
VLLM = ROOT / ".cache" / "servediff" / "engines" / "vllm-cpu" / "bin" / "python"


def vllm_plan(work: Path) -> dict[str, Any]:
    """Real vLLM on the CPU (the venv of scripts/setup-vllm-cpu.sh), eager, SmolLM2: arms
    with the prefix cache on and off (`no_prefix`), 2 loads per arm, scoring with a
    repeat, identical requests 2 at once, speed at 256 tokens and prefix reuse. The prefix
    cache is set in the plan, as combined loads need."""
    if not VLLM.exists():
        raise SystemExit(f"{VLLM}: no vLLM CPU venv; make it with scripts/setup-vllm-cpu.sh")
    command = [str(VLLM), "-m", "vllm.entrypoints.openai.api_server", "--model", "{model}",
               "--host", "{host}", "--port", "{port}", "--max-model-len", "1024",
               "--dtype", "float32", "--enforce-eager"]
    return {"name": "vllm-cpu-combined", "engine": "vllm", "model": "smollm2",
            "loads_per_arm": 2, "cost_loads_per_arm": 2,
            "engine_options": {"prefix_cache": True},
            "launch": {"command": command, "cache_policy": "shared",
                       "env": {"VLLM_CPU_KVCACHE_SPACE": "1",
                               "VLLM_CACHE_ROOT": str(work / "vllm-cache")}},
            "factors": {"no_prefix": {"options": {"prefix_cache": False}}},
            "corpus": {"max_texts": 4},
            "probes": {"repeat": {"count": 1},
                       "concurrency": {"lengths": [128], "levels": [1, 2], "requests": 4,
                                       "max_tokens": 8},
                       "generate": {"texts": 2, "max_tokens": 8},
                       "speed": {"prompt_tokens": [256], "max_tokens": 16, "replicates": 3,
                                 "levels": [1]},
                       "prefix": {"prefix_tokens": 256, "question_tokens": 16, "requests": 3},
                       "sweep": {"enabled": False}},
            "quiet": {"action": "mark"}}


def measure(raw: dict[str, Any], loads: str, base: Path, out: Path) -> tuple[Summary, float]:
    plan, corpus = resolve_plan({**raw, "loads": loads}, f"plan ({loads})", base)
    started = time.monotonic()
    run_plan(Runner(plan, corpus, out, base, SilentObserver()))
    wall = time.monotonic() - started
    write_derived(out)
    return summarize(read_evidence(out)), wall


def drift(summary: Summary) -> dict[tuple[str, str], bool | None]:
    """Whether each arm was reproducible in each regime (None: not measured)."""
    return {(arm, regime): regime_drift(a, regime).reproducible
            for arm, a in summary.arms.items() for regime in REGIMES}


def ship(summary: Summary) -> str:
    if summary.factors is None:
        return "-"
    s = summary.factors.ship
    return f"{s.arm} (meets: {s.meets})"


def speeds(summary: Summary) -> dict[tuple[str, str, int, int], tuple[float, list[float]]]:
    out = {}
    for arm, costs in summary.costs.items():
        for row in costs.speed.per_length if costs.speed else []:
            for metric in METRICS:
                stats = getattr(row, metric)
                if stats.mean is not None and stats.band95 is not None:
                    out[arm, metric, row.prompt_tokens, row.concurrency] = (
                        stats.mean, stats.band95)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--plan", type=Path, default=EXAMPLE)
    parser.add_argument("--vllm-cpu", action="store_true", help="the vLLM CPU plan instead")
    parser.add_argument("--combined-first", action="store_true",
                        help="run the combined loads first (the order is a confound too)")
    parser.add_argument("--keep", type=Path, help="write both runs here, not to a temp folder")
    args = parser.parse_args()
    models.smollm2_dir(lambda message: None)  # converted once per machine, not per run
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        raw = vllm_plan(root) if args.vllm_cpu else tomllib.loads(args.plan.read_text())
        order = ("combined", "separate") if args.combined_first else ("separate", "combined")
        found = {mode: measure(raw, mode, args.plan.parent, root / mode) for mode in order}
        loads = {mode: len(read_evidence(root / mode).loads) for mode in found}
    (sep, sep_wall), (com, com_wall) = found["separate"], found["combined"]
    print(f"plan: {'vLLM CPU (vllm_plan)' if args.vllm_cpu else args.plan}; ran "
          f"{' first, then '.join(order)}")
    print(f"cold loads: separate {loads['separate']}, combined {loads['combined']} "
          f"(ratio {loads['combined'] / loads['separate']:.2f}); wall: separate "
          f"{sep_wall:.0f} s, combined {com_wall:.0f} s (ratio {com_wall / sep_wall:.2f})")
    same = drift(sep) == drift(com)
    print(f"drift answer per arm and regime: {'the same' if same else 'DIFFERS'}")
    for key in sorted(set(drift(sep)) | set(drift(com))):
        print(f"  {key[0]:<16} {key[1]:<14} separate {drift(sep).get(key)!s:<6} "
              f"combined {drift(com).get(key)}")
    print(f"what to ship: separate {ship(sep)}, combined {ship(com)}"
          f" ({'the same' if ship(sep) == ship(com) else 'DIFFERS'})")
    a, b = speeds(sep), speeds(com)
    print(f"{'arm':<16} {'metric':<14} {'tokens':>6} {'level':>5}   separate mean [95 % band]"
          f"      combined mean [95 % band]      each in the other's band")
    inside = 0
    for cell in sorted(set(a) & set(b)):
        (ma, ba), (mb, bb) = a[cell], b[cell]
        both = ba[0] <= mb <= ba[1] and bb[0] <= ma <= bb[1]
        inside += both
        print(f"{cell[0]:<16} {cell[1]:<14} {cell[2]:>6} {cell[3]:>5}   {ma:9.3f} "
              f"[{ba[0]:8.3f}, {ba[1]:8.3f}]   {mb:9.3f} [{bb[0]:8.3f}, {bb[1]:8.3f}]   "
              f"{'yes' if both else 'no'}")
    print(f"speed cells whose means lie in each other's band: {inside} of "
          f"{len(set(a) & set(b))}")


if __name__ == "__main__":
    main()
