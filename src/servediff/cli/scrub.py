"""`servediff scrub FILE|-`: the scrubbed text on stdout, what was taken out on stderr."""

from __future__ import annotations

import sys

import click

from servediff.cli.console import err, out
from servediff.errors import InputError
from servediff.scrub import policy
from servediff.scrub import scrub as scrub_text


@click.command(epilog="Example: servediff scrub server.log > server-scrubbed.log")
@click.argument("source", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--allow-host", "allow", multiple=True, metavar="HOST",
              help="keep this host (and its subdomains) verbatim; repeatable")
@click.option("--deny-host", "deny", multiple=True, metavar="HOST",
              help="always replace this host, even bare; repeatable")
def scrub(source: str, allow: tuple[str, ...], deny: tuple[str, ...]) -> None:
    """Remove private hosts, addresses, buckets, paths, users, e-mails, tokens and keys
    from SOURCE ("-" for standard input) before it is shared."""
    if source == "-":
        text = sys.stdin.read()
    else:
        try:
            with open(source, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except OSError as exc:
            raise InputError(f"{source}: cannot read ({exc.strerror})") from None
    result = scrub_text(text, policy(allow, deny))
    out.print(result.text, end="", markup=False, highlight=False, soft_wrap=True)
    err.print(f"scrubbed: {result.summary()}", markup=False, highlight=False)
