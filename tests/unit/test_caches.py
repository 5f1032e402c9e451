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


def test_a_cache_the_plan_s_env_sets_is_kept_as_given(tmp_path: Path):
    # compiled code kept across the loads of a machine (FlashInfer's JIT builds): the
    # plan's env names it, the policy leaves it alone and the record says so
    kept = tmp_path / "jit"
    kept.mkdir()
    fill(str(kept), 7)
    env, caches = prepare("fresh", TORCH, tmp_path, "a", "a-load1",
                          {"TRITON_CACHE_DIR": str(kept)}, given=frozenset({"TRITON_CACHE_DIR"}))
    assert "TRITON_CACHE_DIR" not in env and "TORCHINDUCTOR_CACHE_DIR" in env
    by = {c.env: c for c in caches}
    triton = by["TRITON_CACHE_DIR"]
    assert triton.policy == "plan-env" and triton.path == str(kept)
    assert triton.empty_at_start is False and triton.bytes_at_start == 7
    after = {c.env: c for c in settle(caches)}
    assert not after["TRITON_CACHE_DIR"].removed and kept.exists()
    assert after["TORCHINDUCTOR_CACHE_DIR"].removed


def test_sglang_start_up_from_its_h200_log():
    """The lease's first start of SGLang 0.5.17 on the H200 (docs/validation): weights,
    KV pool, both CUDA graph captures (the prefill one holding FlashInfer's JIT builds),
    no FlashInfer autotune, and the start from its first line to ready."""
    import tarfile

    from servediff.engines.sglang import SglangAdapter

    bundle = Path(__file__).resolve().parents[2] / "docs" / "validation"
    with tarfile.open(bundle / "h200-sglang-first-start.tar.gz") as tar:
        member = tar.extractfile("h200-sglang-first-start/logs/baseline-load1.log")
        assert member is not None
        log = member.read().decode()
    second = log.index("server_args=", log.index("server_args=") + 1)
    startup = SglangAdapter().startup_from_log(log[:log.rfind("\n", 0, second) + 1])
    assert startup == {
        "weights_s": 0.19, "weights_gb": 0.19, "kv_pool_tokens": 16509519,
        "kv_pool_gb": 125.96, "graph_capture_s": {"target prefill": 222.47,
                                                  "target decode": 1.18},
        "chunked_prefill_size": 8192, "max_prefill_tokens": 16384,
        "flashinfer_autotune": "did not run", "logged_start_s": 273,
        "sglang_timings_s": {"load_weight": 0.19, "kv_cache_allocation": 0.04,
                             "scheduler_e2e": 229.23, "tokenizer_e2e": 260.22}}
    # a log of two launches is read from the last one's start
    assert SglangAdapter().startup_from_log(log) != startup
    ran = ("[2026-12-04 18:00:00] server_args=ServerArgs(x)\n[2026-12-04 18:00:05] Load "
           "weight end. elapsed=1.00 s, type=X, avail mem=1.00 GB, mem usage=2.00 GB.\n"
           "[2026-12-04 18:00:06] Running FlashInfer autotune with cache: /c/at.json\n"
           "[2026-12-04 18:00:09] FlashInfer autotune completed.\n")
    said = SglangAdapter().startup_from_log(ran)
    assert said["flashinfer_autotune"] == "ran" and said["flashinfer_autotune_cache"] == \
        "/c/at.json"


def test_vllm_s_start_up_on_cuda_split_from_its_log():
    # the lines vLLM 0.26 logs on CUDA (format strings of its gpu_model_runner, gpu_worker,
    # compilation monitor, engine core and platform), each read once
    log = "\n".join([
        "(EngineCore pid=1) INFO 12-04 10:00:01 [cuda.py:483] Using FLASH_ATTN attention "
        "backend out of potential backends: ['FLASH_ATTN', 'FLASHINFER'].",
        "(EngineCore pid=1) INFO 12-04 10:00:03 [default_loader.py:431] Loading weights took "
        "0.41 seconds",
        "(EngineCore pid=1) INFO 12-04 10:00:03 [gpu_model_runner.py:5348] Model loading "
        "took 0.2578 GiB memory and 1.234567 seconds",
        "(EngineCore pid=1) INFO 12-04 10:00:13 [monitor.py:20] torch.compile took 9.02 s in "
        "total",
        "(EngineCore pid=1) INFO 12-04 10:00:14 [gpu_worker.py:561] Available KV cache "
        "memory: 40.95 GiB",
        "(EngineCore pid=1) INFO 12-04 10:00:14 [kv_cache_utils.py:2177] GPU KV cache size: "
        "1,789,104 tokens",
        "(EngineCore pid=1) INFO 12-04 10:00:30 [gpu_model_runner.py:6845] Graph capturing "
        "finished in 16 secs, took 0.45 GiB",
        "(EngineCore pid=1) INFO 12-04 10:02:29 [core.py:348] init engine (profile, create kv "
        "cache, warmup model) took 145.50 s",
    ])
    adapter = VllmAdapter()
    assert adapter.startup_from_log(log) == {
        "attention_backend": "FLASH_ATTN", "weights_s": 0.41, "model_load_s": 1.234567,
        "model_load_gib": 0.2578, "torch_compile_s": 9.02, "kv_cache_gib": 40.95,
        "graph_capture_s": 16.0, "graph_capture_gib": 0.45, "engine_init_s": 145.5}
    assert adapter.capacity_from_log(log)["kv_tokens"] == 1789104


def test_vllm_s_batch_invariant_start_on_cuda_split_from_its_log():
    # lines of VLLM_BATCH_INVARIANT=1 on an H100 (docs/validation, vLLM 0.26.0): its
    # torch.compile line has another form, and it saves no AOT function; the kernel
    # warm-up runs FlashInfer's autotuner and finds nothing to tune
    log = "\n".join([
        "(EngineCore pid=5824) INFO 12-06 19:36:05 [backends.py:378] Cache the graph of "
        "compile range (1, 8192) for later use",
        "(EngineCore pid=5824) INFO 12-06 19:36:42 [backends.py:393] Compiling a graph for "
        "compile range (1, 8192) takes 42.78 s",
        "(EngineCore pid=5824) INFO 12-06 19:36:43 [monitor.py:53] torch.compile and "
        "initial profiling/warmup run together took 51.78 s in total",
        "(EngineCore pid=5824) 2026-12-06 19:36:45,372 - INFO - autotuner.py:651 - "
        "flashinfer.jit: [Autotuner]: Autotuning process starts ...",
        "(EngineCore pid=5824) 2026-12-06 19:36:45,405 - INFO - autotuner.py:674 - "
        "flashinfer.jit: [Autotuner]: Autotuning process ends",
        "(EngineCore pid=5824) WARNING 12-06 19:36:45 [kernel_warmup.py:258] No FlashInfer "
        "autotune cache entries found.Falling back to default tactics.",
    ])
    assert VllmAdapter().startup_from_log(log) == {
        "torch_compile_s": 51.78, "graph_compile_s": 42.78,
        "compile_cache": "empty, compiled, not saved",
        "flashinfer_autotune": "ran, no tuned entries: default tactics"}
    tuned = log.replace("No FlashInfer autotune cache entries found.", "")
    assert VllmAdapter().startup_from_log(tuned)["flashinfer_autotune"] == "ran"
