"""`servediff export RUN --packet`: the run as an evidence packet (schema 1.0)."""

from __future__ import annotations

from pathlib import Path

import click

from servediff import atomic
from servediff.bisection import BISECT_FILE
from servediff.bundle import verify
from servediff.cli.console import out
from servediff.derived import write_derived
from servediff.errors import InputError
from servediff.packet.bisected import bisection_packet
from servediff.packet.evidence import build
from servediff.packet.registry import registry_packet


@click.command(epilog="Example: servediff export runs/attention --packet")
@click.argument("run_dir", type=click.Path(path_type=Path, file_okay=False, exists=True))
@click.option("--packet", is_flag=True, required=True,
              help="write the evidence packet, and beside it the same in the trap registry's "
              "shape (<RUN>.registry-packet.json)")
@click.option("--revision", help="the model's exact revision (commit sha or weights sha256), "
              "needed when servediff did not hash the weights itself")
@click.option("--out", "out_path", type=click.Path(path_type=Path, dir_okay=False),
              help="where to write it (default: next to RUN, <RUN>.packet.json)")
def export(run_dir: Path, packet: bool, revision: str | None, out_path: Path | None) -> None:
    """Export RUN for filing: every artifact hashed, scrubbed, validated against the schema.
    RUN may be a bisection's folder (servediff bisect --out): its first bad build's bundle
    is the repro, and the pin chain comes from the bisection."""
    path = out_path or run_dir.resolve().parent / f"{run_dir.resolve().name}.packet.json"
    if run_dir.resolve() in path.resolve().parents:
        raise InputError(f"--out {path}: inside the run directory; the packet hashes that "
                         "directory, so write it elsewhere")
    if (run_dir / BISECT_FILE).exists():
        written, run_dir, summary = bisection_packet(run_dir, revision)
    else:
        verify(run_dir)
        summary = write_derived(run_dir)
        written = build(run_dir, summary, revision)
    atomic.write_json(path, written.model_dump(mode="json"))
    out.print(f"evidence packet: {path}")
    # the same, in the shape the trap registry accepts (its schema has no place for the
    # applicability block and the pin chain: its claim boundary names them)
    registry = path.with_name(path.name.removesuffix(".packet.json").removesuffix(".json")
                              + ".registry-packet.json")
    atomic.write_json(registry, registry_packet(run_dir, written, summary).model_dump(
        mode="json"))
    out.print(f"evidence packet for the trap registry: {registry}")
