"""`servediff scores RUN`: the per-text score rows of a run."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from servediff.analysis.rows import ScoreRow, score_rows
from servediff.bundle import read_evidence
from servediff.cli.console import out
from servediff.errors import InputError


@click.command(epilog="Example: servediff scores runs/demo-20261205-090712 --arm sdpa "
                        "--load 1 --json")
@click.argument("run_dir", type=click.Path(path_type=Path, file_okay=False, exists=True))
@click.option("--json", "as_json", is_flag=True, help="one JSON row per line (JSONL)")
@click.option("--arm", help="only this arm")
@click.option("--load", type=int, help="only this load number")
@click.option("--probe", type=click.Choice(["score", "repeat"]), help="only this probe")
def scores(run_dir: Path, as_json: bool, arm: str | None, load: int | None,
           probe: str | None) -> None:
    """List arm, load, repeat, tag, token ids, sum NLL and token count per text, and the
    first position where its logprobs differ from the arm's first scored load (a repeat or
    batch-size row: from its own load's score pass)."""
    evidence = read_evidence(run_dir)
    rows = score_rows(evidence, arm, load, probe)
    if not rows and (arm, load, probe) != (None, None, None):
        every = score_rows(evidence, None, None, None)
        asked = ", ".join(f"--{k} {v}" for k, v in (("arm", arm), ("load", load),
                                                     ("probe", probe)) if v is not None)
        raise InputError(
            f"{run_dir}: no score rows match {asked}; the run has arms "
            f"{', '.join(dict.fromkeys(r.arm for r in every)) or 'none'}, loads "
            f"{', '.join(str(n) for n in sorted({r.load for r in every})) or 'none'}, probes "
            f"{', '.join(sorted({r.probe for r in every})) or 'none'}")
    if as_json:
        for row in rows:
            out.print(row.model_dump_json(), markup=False, highlight=False, soft_wrap=True)
        return
    table = Table("arm", "load", "probe", "repeat", "batch", "tag", "n_tokens", "sum_nll",
                  "status", "first diff")
    for column in table.columns:  # a tag or a sum NLL is folded onto the next line, never cut
        column.overflow = "fold"
    for row in rows:
        table.add_row(row.arm, str(row.load), row.probe, str(row.repeat),
                      "" if row.batch_size is None else str(row.batch_size), row.tag,
                      str(row.n_tokens), repr(row.sum_nll), row.status, _first_diff(row))
    out.print(table)
    out.print("first diff: the first position whose logprob differs from the same text in "
              "the reference (ref: this row is the reference or has none; =: none differs; "
              "?: not comparable)",
              markup=False, highlight=False)


def _first_diff(row: ScoreRow) -> str:
    if row.vs is None:
        return "ref"
    if row.differing is None:
        return "?"
    return "=" if row.first_differs is None else f"{row.first_differs:,}"
