"""`python -m servediff` runs the CLI."""

from servediff.cli import main

main()
