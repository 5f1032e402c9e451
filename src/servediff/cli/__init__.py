"""The `servediff` command line: a thin layer over the library.

Each command lives in its own module and prints only through
`servediff.cli.console`. `main` maps servediff's exceptions to a one-line
message and an exit code (2 for bad input); nothing here imports torch.
"""

from __future__ import annotations

import importlib
import sys

import click
from rich.markup import escape

from servediff import __version__
from servediff.cli.console import err
from servediff.errors import ServediffError

# Each command's module, imported only when that command runs: `servediff verify` need not
# load the analysis, scipy and matplotlib that `servediff run` and the reports use.
COMMANDS = {
    "demo": "servediff.cli.run:demo",
    "init": "servediff.cli.init:init",
    "run": "servediff.cli.run:run",
    "rederive": "servediff.cli.rederive:rederive",
    "verify": "servediff.cli.verify:verify",
    "report": "servediff.cli.report:report",
    "scores": "servediff.cli.scores:scores",
    "compare": "servediff.cli.compare:compare",
    "engines": "servediff.cli.engines:engines",
    "scrub": "servediff.cli.scrub:scrub",
    "export": "servediff.cli.export:export",
    "bisect": "servediff.cli.bisect:bisect",
}


class Commands(click.Group):
    """The command group, with each command loaded from `COMMANDS` when it is asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, name = COMMANDS[cmd_name].split(":")
        command: click.Command = getattr(importlib.import_module(module), name)
        return command


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="servediff")
def cli() -> None:
    """Reproducibility and flag-cost audits for LLM serving stacks."""


def main(argv: list[str] | None = None) -> None:
    try:
        code = cli.main(args=argv, prog_name="servediff", standalone_mode=False)
    except ServediffError as exc:
        err.print(f"[bold red]error:[/bold red] {escape(str(exc))}", highlight=False, markup=True,
                  soft_wrap=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        err.print("interrupted")
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    sys.exit(code if isinstance(code, int) else 0)
