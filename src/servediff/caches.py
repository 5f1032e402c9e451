"""JIT and autotune caches per load: fresh, shared by an arm's loads, or the user's own.

An engine makes some choices once per process and keeps them on disk:
Inductor's compiled kernels and autotune results, Triton's compiled
kernels, vLLM's compile cache, FlashInfer's JIT builds, the CUDA driver's
PTX cache. Whether a restart makes those choices again depends on whether
that disk cache was warm. So a cold load is cold only if its caches were
empty, and the plan says which it measures (`launch.cache_policy`, or an
arm's own `cache_policy`):

    fresh    every load gets new, empty directories for every cache the engine
             is known to use (the default: a restart on a new host)
    shared   one set of directories per arm, kept across its loads (a restart on
             the same host, warm caches)
    as-is    the user's environment, untouched

Directories live in the run directory under `.jit/` (hidden: not evidence,
not in the manifest). A fresh load's directories are removed after the load
is stopped; their sizes are recorded first. The load record states, for
each cache, its path, whether it was empty at start and its size after.

A cache the plan keeps (`launch.keep_caches`, its directory in `launch.env`) is
left as given, whatever the policy, and recorded as "plan-env": compiled code
that is no per-load choice, such as FlashInfer's JIT builds, can then be kept
across every load on a machine while the tuned choices stay fresh.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from servediff.evidence import CacheDir, CachePolicy

# The caches each engine is known to use: environment variable -> what it holds.
TORCH = {
    "TORCHINDUCTOR_CACHE_DIR": "Inductor (torch.compile): compiled kernels, FX graphs, "
                               "autotune results",
    "TRITON_CACHE_DIR": "Triton compiled kernels",
    "CUDA_CACHE_PATH": "CUDA driver JIT (PTX to SASS)",
}
VLLM = {"VLLM_CACHE_ROOT": "vLLM: its torch.compile cache and other artefacts",
        "FLASHINFER_WORKSPACE_BASE": "FlashInfer JIT builds (vLLM's sampler on CUDA)",
        **TORCH}
SGLANG = {"FLASHINFER_WORKSPACE_BASE": "FlashInfer JIT builds (under .cache/flashinfer)",
          "SGLANG_CACHE_DIR": "SGLang: FlashInfer autotune results (flashinfer/autotune)",
          **TORCH}


def size(path: Path) -> int:
    """Bytes of every file under `path` (0 when it does not exist)."""
    if not path.exists():
        return 0
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def prepare(policy: CachePolicy, known: dict[str, str], root: Path, arm: str, load: str,
            environ: dict[str, str], given: frozenset[str] = frozenset()
            ) -> tuple[dict[str, str], list[CacheDir]]:
    """The environment that points each known cache at the policy's directory, and what
    each directory held at start (`environ`: the engine's environment otherwise; `given`:
    the variables the plan keeps as its env sets them)."""
    env: dict[str, str] = {}
    caches = []
    for var in sorted(known):
        if var in given:
            kept = Path(environ[var])
            kept.mkdir(parents=True, exist_ok=True)
            caches.append(CacheDir(env=var, what=known[var], policy="plan-env",
                                   path=str(kept), empty_at_start=not any(kept.iterdir()),
                                   bytes_at_start=size(kept)))
            continue
        if policy == "as-is":
            value = environ.get(var)
            path = Path(value) if value else None
        else:
            folder = f"{arm}-shared" if policy == "shared" else load
            path = root / ".jit" / folder / var.lower()
            if policy == "fresh" and path.exists():
                shutil.rmtree(path)  # a new launch of the same load starts empty too
            path.mkdir(parents=True, exist_ok=True)
            env[var] = str(path)
        at_start = size(path) if path is not None else None
        caches.append(CacheDir(env=var, what=known[var], policy=policy,
                               path=str(path) if path is not None else None,
                               empty_at_start=None if path is None
                               else not path.exists() or not any(path.iterdir()),
                               bytes_at_start=at_start))
    return env, caches


def settle(caches: list[CacheDir]) -> list[CacheDir]:
    """After the load: each cache's size, and a fresh load's directories removed."""
    out = []
    for c in caches:
        path = Path(c.path) if c.path else None
        after = size(path) if path is not None else None
        removed = c.policy == "fresh" and path is not None and path.exists()
        if removed and path is not None:
            shutil.rmtree(path, ignore_errors=True)
        out.append(c.model_copy(update={"bytes_after": after, "removed": removed}))
    return out
