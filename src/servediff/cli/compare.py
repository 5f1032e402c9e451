"""`servediff compare A B`: two per-text score files from anywhere."""

from __future__ import annotations

import json
from pathlib import Path

import click

from servediff.analysis.compare import compare as compare_scores
from servediff.cli.console import out
from servediff.scorefile import read_scores


@click.command(epilog="Example: servediff compare before.json after.json --fail-on-moved")
@click.argument("a", type=click.Path(path_type=Path, dir_okay=False))
@click.argument("b", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="print the comparison as JSON")
@click.option("--threshold", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="a text moved when |B - A| exceeds this (0: any difference)")
@click.option("--fail-on-moved", is_flag=True,
              help="exit 1 when a text moved or was scored with different token ids")
def compare(a: Path, b: Path, as_json: bool, threshold: float, fail_on_moved: bool) -> None:
    """Texts compared, moved, max |delta| and its tag, tags in only one file.

    Exit 0: compared (with --fail-on-moved: and nothing moved); 1: with --fail-on-moved,
    a text moved or was scored with other token ids; 2: a file cannot be read."""
    result = compare_scores(read_scores(a), read_scores(b), threshold)
    failed = fail_on_moved and bool(result.moved or result.ids_differ)
    if as_json:
        out.print(json.dumps(result.model_dump(mode="json"), indent=1), markup=False,
                  highlight=False, soft_wrap=True)
        if failed:
            raise SystemExit(1)
        return
    out.print(f"compared {result.compared} texts: {result.moved} moved "
              f"(|dNLL| > {threshold:g}); max |dNLL| {result.max_abs_delta:.6g}"
              + (f" on {result.max_tag}" if result.max_tag else ""), markup=False)
    if result.ids_differ:
        out.print(f"scored with different token ids, not compared: {', '.join(result.ids_differ)}",
                  markup=False)
    for name, tags in (("only in A", result.only_a), ("only in B", result.only_b)):
        if tags:
            out.print(f"{name} ({len(tags)}): {', '.join(tags)}", markup=False)
    if failed:
        raise SystemExit(1)
