"""Re-derive every committed bundle with the servediff on the path and keep what it wrote.

    PYTHONPATH=OLD/src python scripts/render_bundles.py . /tmp/old
    PYTHONPATH=src     python scripts/render_bundles.py . /tmp/new
    diff -r /tmp/old /tmp/new

Each bundle under docs/validation and tests/fixtures is unpacked into a temporary
folder and re-derived as `servediff report` does (summary.json, report.md,
report.html); the three files land in OUT/<bundle>/<run>/, beside the committed ones
as committed-<file>. A renovation that changes no behaviour leaves `diff -r` empty.
"""

from __future__ import annotations

import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

from servediff.derived import write_derived

DERIVED = ("summary.json", "report.md", "report.html")


def main(repo: Path, out: Path) -> int:
    tars = [*sorted((repo / "docs" / "validation").glob("*.tar.gz")),
            *sorted((repo / "tests" / "fixtures").rglob("*.tar.gz"))]
    for tar in tars:
        name = tar.name.removesuffix(".tar.gz")
        with tempfile.TemporaryDirectory() as tmp:
            with tarfile.open(tar) as archive:
                archive.extractall(tmp, filter="data")
            for lock in sorted(Path(tmp).rglob("plan.lock.json")):
                root = lock.parent
                dest = out / name / root.relative_to(tmp)
                dest.mkdir(parents=True, exist_ok=True)
                for file in DERIVED:
                    if (root / file).exists():
                        shutil.copy(root / file, dest / f"committed-{file}")
                write_derived(root)
                for file in DERIVED:
                    shutil.copy(root / file, dest / file)
                print(f"{name}: {root.relative_to(tmp)}", flush=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
