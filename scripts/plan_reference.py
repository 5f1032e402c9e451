"""Write docs/plans.md's "Every setting" block from the settings' own descriptions.

    python scripts/plan_reference.py           # rewrite the block in docs/plans.md
    python scripts/plan_reference.py --check   # exit 1 when it is not current

The block is servediff.reference.settings_reference(): every plan and probe setting with
its example or default and its Field description. tests/unit/test_reference.py fails
while the committed block differs from it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from servediff import atomic
from servediff.reference import settings_reference

DOC = Path(__file__).resolve().parents[1] / "docs" / "plans.md"
BEGIN = "<!-- every-setting: written by scripts/plan_reference.py; do not edit -->\n```toml\n"
END = "```\n<!-- every-setting: end -->\n"


def with_reference(text: str) -> str:
    """`text` (docs/plans.md) with its block rewritten."""
    head, begin, rest = text.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise SystemExit(f"{DOC}: the markers of the generated block are missing")
    return head + BEGIN + settings_reference() + END + tail


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check, write nothing")
    args = parser.parse_args()
    text = DOC.read_text(encoding="utf-8")
    current = with_reference(text)
    if args.check:
        if current != text:
            sys.exit(f"{DOC}: its settings block is out of date; run "
                     "python scripts/plan_reference.py")
        return
    atomic.write_bytes(DOC, current.encode())


if __name__ == "__main__":
    main()
