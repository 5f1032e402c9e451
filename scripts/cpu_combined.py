"""Combined against separate loads on this machine's CPU (issue 46): one example plan, run
as it stands (`loads = "combined"`) and with `loads = "separate"`, each packed as a bundle.

    python scripts/cpu_combined.py docs/examples/embedded-combined.toml --out DIR

The bundles are `cpu-<plan>.tar.gz` and `cpu-<plan>-separate.tar.gz` (with `--again`,
the combined plan once more as `cpu-<plan>-again.tar.gz`; with `--again separate`, the
separate one once more as `cpu-<plan>-separate-again.tar.gz`, named so in its plan); the
plan inside each is the example's text (the separate one with its `loads` line
changed), which tests/unit/test_validation_bundles.py checks.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_validation import run_plan

COMBINED = 'loads = "combined"\n'
SEPARATE = 'loads = "separate"\n'


def variants(text: str, name: str) -> list[tuple[str, str]]:
    """The plan as it stands and as separate loads, each under its bundle's name."""
    if COMBINED not in text:
        raise SystemExit(f"{name}: the plan has no line {COMBINED.strip()!r}")
    return [(f"cpu-{name}", text.replace(f'name = "{name}"', f'name = "cpu-{name}"')),
            (f"cpu-{name}-separate",
             text.replace(COMBINED, SEPARATE).replace(f'name = "{name}"',
                                                      f'name = "cpu-{name}-separate"'))]


def again(text: str, name: str, mode: str) -> tuple[str, str]:
    """One variant once more: the combined plan as it stands (its bundle `-again`), or the
    separate one under the name `cpu-<plan>-separate-again`."""
    runs = variants(text, name)
    if mode == "combined":
        return f"{runs[0][0]}-again", runs[0][1]
    bundle = f"{runs[1][0]}-again"
    return bundle, runs[1][1].replace(f'name = "{runs[1][0]}"', f'name = "{bundle}"')


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("plan", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget", type=float, default=7200.0)
    parser.add_argument("--again", nargs="?", const="combined", choices=["combined", "separate"],
                        help="only one variant, a second time (`cpu-<plan>-again`, or "
                        "`cpu-<plan>-separate-again`): how far two runs of one plan differ")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + args.budget
    runs = variants(args.plan.read_text(), args.plan.stem)
    if args.again:
        runs = [again(args.plan.read_text(), args.plan.stem, args.again)]
    for name, text in runs:
        run_plan(name, text, deadline, args.out.resolve(), ("--yes",))


if __name__ == "__main__":
    main()
