"""`servediff verify RUN`: every file against the sha256 in manifest.json."""

from __future__ import annotations

from pathlib import Path

import click

from servediff.bundle import verify as verify_bundle
from servediff.cli.console import out


@click.command(epilog="Example: servediff verify runs/demo-20261205-090712")
@click.argument("run_dir", type=click.Path(path_type=Path, file_okay=False, exists=True))
def verify(run_dir: Path) -> None:
    """Fail, naming each file, if anything in RUN changed since it was written."""
    count = verify_bundle(run_dir)
    out.print(f"{run_dir}: all {count} files match manifest.json")
