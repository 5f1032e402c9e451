"""The `servediff` command line: a thin layer over the library.

Each command lives in its own module and prints only through
`servediff.cli.console`. `main` maps servediff's exceptions to a one-line
message and an exit code (2 for bad input); nothing here imports torch.
"""

from __future__ import annotations

import sys

import click

from servediff import __version__
from servediff.cli import (
    compare,
    engines,
    export,
    init,
    rederive,
    report,
    run,
    scores,
    scrub,
    verify,
)
from servediff.cli.console import err
from servediff.errors import ServediffError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="servediff")
def cli() -> None:
    """Reproducibility and flag-cost audits for LLM serving stacks."""


for command in (run.demo, init.init, run.run, rederive.rederive, verify.verify, report.report,
                scores.scores, compare.compare, engines.engines, scrub.scrub, export.export):
    cli.add_command(command)


def main(argv: list[str] | None = None) -> None:
    try:
        code = cli.main(args=argv, prog_name="servediff", standalone_mode=False)
    except ServediffError as exc:
        err.print(f"[bold red]error:[/bold red] {exc}", highlight=False, markup=True,
                  soft_wrap=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        err.print("interrupted")
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    sys.exit(code if isinstance(code, int) else 0)
