"""Builds of an engine as a source: which builds lie between two, and how to get one.

An adapter that can name its builds returns a `BuildSource` from `EngineAdapter.builds()`
(servediff bisect asks it): the builds between two ends, oldest first, as the engine
numbers them, and for one build the launch command that serves it, built or installed
into a cache keyed by the build, so that the next bisection reuses it. A build that fails
to build or install raises `BuildFailed`: the bisection skips it and names it, as
`git bisect skip` does. `source` gives a build's source tree, so that the answer can show
what changed between the last good build and the first bad one.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Literal, Protocol

import httpx

from servediff.errors import ServediffError


class BuildFailed(ServediffError):
    """A build that could not be built or installed: the message says why."""


class BuildSource(Protocol):
    # path prefixes of the source tree that the builds it makes leave out or that cannot
    # change a served number (another GPU backend, other tools): left out of the diff at
    # a flip
    aside: tuple[str, ...]

    def between(self, good: str, bad: str) -> list[str]:
        """The builds from `good` to `bad`, both included, oldest first; raises InputError
        for an end that is not a build of this engine."""
        ...

    def command(self, build: str) -> list[str]:
        """The launch command template ({model}, {host}, {port}) that serves `build`, once
        it is built or installed; raises BuildFailed."""
        ...

    def source(self, build: str) -> Path:
        """`build`'s source tree, unpacked once into the cache; raises BuildFailed where
        it cannot be had."""
        ...


def registry_releases(package: str) -> list[str]:
    """`package`'s release versions on the package registry (PyPI's JSON API)."""
    url = f"https://pypi.org/pypi/{package}/json"
    try:
        releases = httpx.get(url, timeout=60, follow_redirects=True).json()["releases"]
    except (httpx.HTTPError, ValueError, KeyError) as exc:
        raise ServediffError(f"cannot list {package}'s releases from {url}: {exc}") from None
    return [str(version) for version in releases]


def downloaded(build: str, requirement: str, kind: Literal["source", "wheel"], into: Path,
               timeout: float) -> Path:
    """`requirement` (one package, no dependencies) downloaded by pip into `into`, as its
    source package or its wheel; raises BuildFailed with pip's last words."""
    name = requirement.split("==")[0]
    form = ["--no-binary", name] if kind == "source" else ["--only-binary", ":all:"]
    got = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", *form,
                          "-d", str(into), requirement],
                         capture_output=True, text=True, timeout=timeout, check=False)
    files = sorted(into.glob("*.tar.gz" if kind == "source" else "*.whl"))
    if got.returncode != 0 or not files:
        said = (got.stderr.strip().splitlines()
                or ["no source package" if kind == "source" else "no wheel"])[-1]
        raise BuildFailed(f"build {build}: its {kind} could not be had: {said}")
    return files[0]
