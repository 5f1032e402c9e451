"""JIT and autotune cache directories per load, and what the engines say about them."""

from __future__ import annotations

from pathlib import Path

from servediff.caches import TORCH, prepare, settle
from servediff.engines.vllm import VllmAdapter

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def fill(path: str, size: int) -> None:
    (Path(path) / "kernel.bin").write_bytes(b"x" * size)


def test_fresh_directories_are_new_empty_and_removed_after(tmp_path: Path):
    env, caches = prepare("fresh", TORCH, tmp_path, "a", "a-load1", {})
    assert set(env) == set(TORCH) and all(c.empty_at_start for c in caches)
    fill(env["TORCHINDUCTOR_CACHE_DIR"], 100)
    after = {c.env: c for c in settle(caches)}
    assert after["TORCHINDUCTOR_CACHE_DIR"].bytes_after == 100
    assert all(c.removed and not Path(c.path or "").exists() for c in after.values())
    # a second launch of the same load starts empty again, even if something was left
    env2, _ = prepare("fresh", TORCH, tmp_path, "a", "a-load1", {})
    fill(env2["TRITON_CACHE_DIR"], 5)
    _, again = prepare("fresh", TORCH, tmp_path, "a", "a-load1", {})
    assert all(c.empty_at_start for c in again)


def test_shared_directories_are_kept_across_an_arms_loads(tmp_path: Path):
    env1, first = prepare("shared", TORCH, tmp_path, "a", "a-load1", {})
    fill(env1["TORCHINDUCTOR_CACHE_DIR"], 64)
    settle(first)
    env2, second = prepare("shared", TORCH, tmp_path, "a", "a-load2", {})
    assert env2 == env1
    inductor = {c.env: c for c in second}["TORCHINDUCTOR_CACHE_DIR"]
    assert inductor.empty_at_start is False and inductor.bytes_at_start == 64
    assert not any(c.removed for c in settle(second))
    env3, _ = prepare("shared", TORCH, tmp_path, "b", "b-load1", {})
    assert env3["TORCHINDUCTOR_CACHE_DIR"] != env1["TORCHINDUCTOR_CACHE_DIR"]  # per arm


def test_as_is_leaves_the_environment_and_says_what_it_found(tmp_path: Path):
    warm = tmp_path / "mine"
    warm.mkdir()
    fill(str(warm), 10)
    env, caches = prepare("as-is", TORCH, tmp_path, "a", "a-load1",
                          {"TORCHINDUCTOR_CACHE_DIR": str(warm)})
    assert env == {}
    by = {c.env: c for c in caches}
    assert by["TORCHINDUCTOR_CACHE_DIR"].empty_at_start is False
    assert by["TRITON_CACHE_DIR"].path is None  # not set: the engine's own default place
    assert not any(c.removed for c in settle(caches)) and warm.exists()


def test_vllm_start_up_from_its_log():
    adapter = VllmAdapter()
    first = adapter.startup_from_log((LOGS / "vllm-cpu-first-load.log").read_text())
    assert first == {"engine_init_s": 59.93, "compile_warmup_s": 53,
                     "compile_cache": "empty, compiled and saved"}
    # vLLM 0.32 on the CPU finds the cached artefact, fails to load it and compiles again
    second = adapter.startup_from_log((LOGS / "vllm-cpu-second-load.log").read_text())
    assert second["compile_cache"] == "found, failed to load, compiled again"
    assert second["engine_init_s"] == 41.27 and second["compile_warmup_s"] == 34


def test_vllm_s_prompt_chunk_from_its_log():
    # vLLM 0.32 on the CPU: chunked prefill on in its config line, the chunk in the
    # non-default args the arm gave
    said = VllmAdapter().startup_from_log((LOGS / "vllm-cpu-chunk-args.log").read_text())
    assert said["chunked_prefill"] is True and said["max_num_batched_tokens"] == 2048
    assert VllmAdapter().startup_from_log(
        "Chunked prefill is enabled with max_num_batched_tokens=8192.\n") == {
        "chunked_prefill": True, "max_num_batched_tokens": 8192}
    off = "non-default args: {'max_num_batched_tokens': 4096}\n... enable_chunked_prefill=False,"
    assert VllmAdapter().startup_from_log(off) == {"chunked_prefill": False}
