"""`servediff engines`: adapters, what each can measure, and whether it is found here."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from servediff.cli.console import out
from servediff.engines import registry


@click.command(epilog="Example: servediff engines")
def engines() -> None:
    """List engine adapters, their capabilities, and whether each is found here."""
    table = Table("engine", "capabilities", "default launch", "found on this machine", "note")
    for name in registry.ENGINES:
        adapter = registry.create(name)
        table.add_row(
            name,
            ", ".join(sorted(adapter.capabilities)),
            " ".join([Path(adapter.default_command[0]).name, *adapter.default_command[1:]])
            if adapter.default_command else "-",
            adapter.locate() or "[red]not found[/red]",
            adapter.caveat or "",
        )
    for column in table.columns:  # a narrow terminal wraps a cell, never cuts it
        column.overflow = "fold"
    out.print(table)
