"""Adapter for SGLang's native HTTP API.

Run against SGLang 0.5.23 on the CPU (scripts/setup-sglang-cpu.sh; docs/engines.md says
what of SGLang is real there). On a machine without an NVIDIA GPU the launch adds SGLang's
CPU path: `--device cpu --attention-backend torch_native --disable-cuda-graph
--sleep-on-idle`, `SGLANG_USE_CPU_ENGINE=1`, and servediff's import-only stand-in for the
`sgl_kernel` package first on PYTHONPATH (its CPU build is not on the package registry).
Each launch record says so, and a load whose engine log shows a stand-in op was called
fails, naming the op. Unless the arm sets the KV pool, a CPU launch gets one sized by
servediff (`--max-total-tokens`): SGLang's own default takes most of the free RAM.

Scoring: `/generate` with `input_ids`, `return_logprob: true`, `logprob_start_len: 0`,
`max_new_tokens: 1`; `meta_info.input_token_logprobs` holds `[logprob, token_id, text]`
per prompt token, the first logprob null. Such a request never reuses a cached prefix
(SGLang does not reuse the prefix of tokens whose logprobs it returns); generation asks
for output logprobs only, so the prefix probe sees the radix cache. Capacity and version:
`/get_server_info` (`max_total_num_tokens`, `disable_radix_cache`, `version`); the
context: `/v1/models` (`max_model_len`).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from pathlib import Path
from typing import Any, ClassVar, Literal

from servediff import gpu
from servediff.caches import SGLANG
from servediff.engines.base import (
    Capability,
    EngineAdapter,
    EngineInfo,
    EngineOptions,
    Generated,
    LaunchSpec,
    Scored,
    fill_template,
    has_module,
)
from servediff.engines.completions import first_model, tokenize
from servediff.engines.rows import Position, judge, shape
from servediff.engines.transport import EngineClient
from servediff.errors import EngineRequestError, EngineStartError
from servediff.evidence import Launch
from servediff.models import cache_root

# SGLang's CPU path: the flags and environment a launch on a machine without a GPU gets.
CPU_FLAGS: list[tuple[str, str | None]] = [
    ("--device", "cpu"), ("--attention-backend", "torch_native"), ("--disable-cuda-graph", None),
    ("--sleep-on-idle", None)]
# The KV pool of a CPU launch whose arm does not size it: 1 GiB of KV cache, beside the
# test suite's other engines on a 24 GiB machine (SGLang's default, a fraction of the free
# RAM, took about 14 GB here and changed with what else ran).
KV_BUDGET_BYTES = 1 << 30
KV_FLAGS = ("--max-total-tokens", "--mem-fraction-static")
STUB_CALLED = re.compile(r"servediff sgl_kernel stand-in: (\S+) was called")
# What SGLang (0.5.17 on CUDA, 0.5.23 on the CPU) logs while it starts, each line once per
# start; a load's log holds every launch of the load, so the last start's lines are read.
STAMP = re.compile(r"^\[(?P<h>\d{2}):(?P<m>\d{2}):(?P<s>\d{2})|"
                   r"^\[\d{4}-\d{2}-\d{2} (?P<H>\d{2}):(?P<M>\d{2}):(?P<S>\d{2})")
WEIGHTS = re.compile(r"Load weight end\. elapsed=(?P<s>[\d.]+) s.*?mem usage=(?P<gb>[\d.]+) GB")
KV_POOL = re.compile(r"KV Cache is allocated\. dtype: (?P<dtype>\S+), #tokens: (?P<tokens>\d+), "
                     r"(?:K size: (?P<k>[\d.]+) GB, V size: (?P<v>[\d.]+) GB|"
                     r"KV size: (?P<kv>[\d.]+) GB)")
GRAPHS = re.compile(r"Capture (?P<what>[\w -]+?) (?:CUDA graph|cuda graph|[\w-]+) end\. "
                    r"elapsed=(?P<s>[\d.]+) s, mem usage=(?P<gb>[\d.]+) GB")
SCHEDULER = re.compile(r"max_total_num_tokens=(?P<kv>\d+), "
                       r"chunked_prefill_size=(?P<chunk>-?\d+), "
                       r"max_prefill_tokens=(?P<prefill>\d+), "
                       r"max_running_requests=(?P<running>\d+), context_len=(?P<context>\d+)")
AUTOTUNE = re.compile(r"Running FlashInfer autotune with cache: (?P<path>\S+)")
AUTOTUNE_DONE = "FlashInfer autotune completed."
RADIX_OFF = re.compile(r"radix cache is not compatible with (?P<backend>\S+) attention backend "
                       r"for deterministic inference")
READY = "The server is fired up and ready to roll!"
# what SGLang logs before it kills its own process tree after a child's failure
SELF_KILLED = "Received sigquit from a child process"
# SGLang's own summary of its start (0.5.17): top-level `name=seconds` pairs
TIMINGS = re.compile(r"Engine startup timings \(s\): (?P<pairs>.*)$", re.MULTILINE)
TIMING = re.compile(r"(?:^|, )(?P<name>\w+)=(?P<s>[\d.]+)")


def environment() -> Path:
    """Where scripts/setup-sglang-cpu.sh puts its virtual environment."""
    return cache_root() / "engines" / "sglang-cpu"


def _find(data: Any, key: str) -> Any:
    """`key` at the top level or, where that is missing or null, in `internal_states[0]`."""
    if not isinstance(data, dict):
        return None
    if data.get(key) is not None:
        return data[key]
    states = data.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], dict):
        return states[0].get(key)
    return None


def kv_bytes_per_token(model: Path, float32: bool) -> int | None:
    """K and V of one token over every layer, in the dtype the weights are served in (SGLang
    on the CPU serves float32 weights as float16 unless told --dtype float32); None when
    the model's config.json does not say."""
    try:
        config = json.loads((model / "config.json").read_text())
        heads = int(config["num_attention_heads"])
        kv_heads = int(config.get("num_key_value_heads") or heads)
        head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // heads)
        layers = int(config["num_hidden_layers"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return 2 * layers * kv_heads * head_dim * (4 if float32 else 2)


def _has(args: list[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


def parse_generate(body: Any, batch: list[list[int]]) -> list[Scored]:
    items = body if isinstance(body, list) else [body]
    if len(items) != len(batch):
        raise EngineRequestError(f"asked {len(batch)} prompts, got {len(items)} results")
    out = []
    with shape("/generate", body):
        for item, ids in zip(items, batch, strict=True):
            meta = item["meta_info"]
            entries = meta["input_token_logprobs"]
            if not isinstance(entries, list):
                raise EngineRequestError(
                    "/generate answered without meta_info.input_token_logprobs")
            # [logprob, token_id, text] per prompt token; the first logprob is null
            positions = [Position(int(e[1]), None if e[0] is None else float(e[0]))
                         for e in entries[1:]]
            server = meta.get("prompt_tokens")
            out.append(judge(ids, positions,
                             first="logprob" if entries and entries[0][0] is not None
                             else "null",
                             server_tokens=None if server is None else int(server)))
    return out


class SglangOptions(EngineOptions):
    # SGLang's radix (prefix) cache; off unless an arm measures with it.
    # None (cost loads): no flag, as the arm's own args leave it.
    prefix_cache: bool | None = False
    # "cpu": SGLang's CPU path (flags, environment, the sgl_kernel stand-in, a sized KV
    # pool); "gpu": the launch as given; "auto": cpu where NVML sees no GPU.
    device: Literal["auto", "cpu", "gpu"] = "auto"


class SglangAdapter(EngineAdapter):
    """SGLang's server: `/generate` with input-token logprobs, `/get_server_info` for the KV
    pool and radix cache, and its CPU path (docs/engines.md)."""

    name = "sglang"
    example_arms = ({}, {"args": ["--enable-deterministic-inference"]},
                    "SGLang's deterministic mode")
    # measured on a 2-core AMD EPYC, SmolLM2-135M float32: ready in 22 to 24 s (2026-12-02)
    typical_start_s = 30.0
    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {"score", "generate", "stream", "capacity", "version", "reload"}
    )
    default_command: ClassVar[list[str]] = [
        sys.executable, "-m", "sglang.launch_server", "--model-path", "{model}",
        "--host", "{host}", "--port", "{port}",
    ]
    hub_revision_flag = "--revision"
    options_model = SglangOptions
    caches = SGLANG
    cache_option = "prefix_cache"
    cache_states: ClassVar[dict[bool | None, str]] = {
        None: "radix cache as the arm's args leave it (cost load; SGLang's default is on)",
        True: "radix cache ON (a cache arm)",
        False: "radix cache off: --disable-radix-cache",
    }
    caveat = ("on a CPU: torch_native attention with an import-only sgl_kernel stand-in; "
              "no sgl_kernel ops, FlashInfer, CUDA graphs or deterministic inference")

    def prompt_sizes(self, launch: Launch) -> dict[str, int]:
        tokens = (launch.engine.get("server_info") or {}).get("chunked_prefill_size")
        # -1: chunked prefill off
        return {"chunked_prefill_size": tokens} if isinstance(tokens, int) and tokens > 0 \
            else {}

    @classmethod
    def locate(cls) -> str | None:
        if has_module("sglang"):
            return "this Python environment"
        venv = environment() / "bin" / "python"
        return f"{venv} (scripts/setup-sglang-cpu.sh)" if venv.exists() else None

    def launch(self, template: list[str] | None, model: str, host: str, port: int,
               args: list[str], options: EngineOptions) -> LaunchSpec:
        assert isinstance(options, SglangOptions)
        notes: list[str] = []
        argv = fill_template(template or self.default_command, model, host, port)
        if template is None and not has_module("sglang"):
            venv = environment() / "bin" / "python"
            if not venv.exists():
                raise EngineStartError(
                    "SGLang is not importable in servediff's environment and "
                    "scripts/setup-sglang-cpu.sh has not made its own: run that script, "
                    "or give [launch] command")
            argv[0] = str(venv)
            notes.append(f"SGLang from {venv} (scripts/setup-sglang-cpu.sh)")
        own = [*self.option_args(options), *args]
        env: dict[str, str] = {}
        device = options.device
        if device == "auto":
            device = "gpu" if gpu.names() else "cpu"
        if device == "cpu":
            # each unless the arm's args set it themselves
            added = [part for flag, value in CPU_FLAGS if not _has(args, flag)
                     for part in (flag, value) if part is not None]
            own = [*added, *own]
            stand_in = environment() / "stand-in"
            env["SGLANG_USE_CPU_ENGINE"] = "1"
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(stand_in), os.environ.get("PYTHONPATH")) if p)
            notes.append(
                f"sgl_kernel: servediff's import-only stand-in ({stand_in}; SGLang's CPU "
                "kernel build is not on the package registry); every op of it raises when "
                "called, and a call fails the load")
            notes.append("CPU path added by servediff: " + " ".join(added)
                         + " and SGLANG_USE_CPU_ENGINE=1")
            if not any(_has(args, f) for f in KV_FLAGS):
                per_token = kv_bytes_per_token(Path(model), _dtype(args) == "float32")
                if per_token:
                    tokens = KV_BUDGET_BYTES // per_token
                    own = ["--max-total-tokens", str(tokens), *own]
                    notes.append(
                        f"KV pool sized by servediff: --max-total-tokens {tokens} (1 GiB at "
                        f"{per_token} bytes a token, for a 24 GiB machine that also runs "
                        "other engines); the arm's args did not size it")
                else:
                    own = ["--mem-fraction-static", "0.1", *own]
                    notes.append("KV pool sized by servediff: --mem-fraction-static 0.1 "
                                 "(the model's config.json did not give its KV size)")
        return LaunchSpec(argv=[*argv, *own], env=env, notes=notes)

    def option_args(self, options: EngineOptions) -> list[str]:
        assert isinstance(options, SglangOptions)
        return ["--disable-radix-cache"] if options.prefix_cache is False else []

    def startup_from_log(self, log_text: str) -> dict[str, Any]:
        """Where the last start's time went, as SGLang logged it: weights loaded, KV pool
        allocated, each CUDA graph captured (FlashInfer's JIT builds, when its cache was
        cold, fall inside the capture), FlashInfer's autotune (whether it ran, and its
        cache), SGLang's own timings line where it prints one (0.5.17: weights, KV
        allocation, scheduler and tokenizer start), and the whole start from the first
        log line to ready."""
        start = log_text.rfind("server_args=")
        text = log_text[log_text.rfind("\n", 0, start) + 1:] if start >= 0 else log_text
        # what SGLang says while it reads its arguments comes before its server_args line:
        # the lines after the previous start's server_args line (0.5.17, the H200)
        before = log_text.rfind("server_args=", 0, start) if start >= 0 else -1
        lead = log_text[max(before, 0):max(start, 0)]
        out: dict[str, Any] = {}
        if m := _last(WEIGHTS, text):
            out["weights_s"], out["weights_gb"] = float(m["s"]), float(m["gb"])
        if m := _last(KV_POOL, text):
            out["kv_pool_tokens"] = int(m["tokens"])
            out["kv_pool_gb"] = round(float(m["kv"]) if m["kv"] else
                                      float(m["k"]) + float(m["v"]), 2)
        graphs = {m["what"].strip(): float(m["s"]) for m in GRAPHS.finditer(text)}
        if graphs:
            out["graph_capture_s"] = graphs
        if m := _last(SCHEDULER, text):
            out["chunked_prefill_size"] = int(m["chunk"])
            out["max_prefill_tokens"] = int(m["prefill"])
        if m := _last(AUTOTUNE, text):
            out["flashinfer_autotune"] = ("ran" if AUTOTUNE_DONE in text[m.end():]
                                          else "started, not completed")
            out["flashinfer_autotune_cache"] = m["path"]
        elif "Load weight end" in text:
            out["flashinfer_autotune"] = "did not run"
        if m := _last(TIMINGS, text):
            pairs = re.sub(r"\{[^}]*\}", "", m["pairs"])  # the graphs are read above
            out["sglang_timings_s"] = {t["name"]: float(t["s"]) for t in TIMING.finditer(pairs)}
        if m := RADIX_OFF.search(lead) or RADIX_OFF.search(text):
            out["radix_cache_off_by_sglang"] = m["backend"]
        stamps = [_seconds(line) for line in text.splitlines() if STAMP.match(line)]
        ready = next((_seconds(line) for line in text.splitlines() if READY in line
                      and STAMP.match(line)), None)
        if stamps and ready is not None:
            out["logged_start_s"] = (ready - stamps[0]) % 86400
        return out

    def refused_itself(self, returncode: int, log_text: str) -> bool:
        # A child that fails at start-up (FlashInfer's workspace too small for a prefill
        # graph, 0.5.17 on the H200) makes SGLang kill its own process tree, itself
        # included, with SIGKILL: a refusal that looks like a kill but for this line.
        return super().refused_itself(returncode, log_text) or (
            returncode == -signal.SIGKILL and SELF_KILLED in log_text)

    def fault_in_log(self, log_text: str) -> str | None:
        if m := STUB_CALLED.search(log_text):
            return (f"SGLang called the sgl_kernel stand-in's {m.group(1)}: that op has no "
                    "CPU build here, so this configuration cannot be served on this stack")
        return None

    def info(self, client: EngineClient) -> EngineInfo:
        raw: dict[str, Any] = client.get_json("/get_server_info")
        first = first_model(client)
        context = first.get("max_model_len") or _find(raw, "context_length")
        slots = (_find(raw, "max_running_requests")
                 or _find(raw, "effective_max_running_requests_per_dp"))
        keep = {k: _find(raw, k) for k in (
            "version", "max_total_num_tokens", "max_total_tokens", "disable_radix_cache",
            "device", "attention_backend", "dtype", "kv_cache_dtype", "mem_fraction_static",
            "chunked_prefill_size", "disable_cuda_graph", "enable_deterministic_inference",
            "disable_flashinfer_autotune", "page_size", "random_seed", "sleep_on_idle")}
        kv = _find(raw, "max_total_num_tokens")
        # SGLang's own rule (managers/tp_worker.py, 0.5.23): max_req_input_len is
        # min(context - 1, KV pool - 1) - 5, and a prompt must be shorter than that (measured
        # with a 1,024-token context: 1,017 tokens answered, 1,018 got HTTP 400 "Input length
        # (1018 tokens) exceeds the maximum allowed length (1018 tokens)").
        limit = (min(int(context) - 1, int(kv) - 1) - 6) if context and kv else None
        return EngineInfo(
            version={"engine": "sglang", "sglang": raw.get("version")},
            bos_token_id=None,
            max_model_len=None if context is None else int(context),
            capacity={"kv_tokens": kv, "max_prompt_tokens": limit,
                      "max_running_requests": slots,
                      "radix_cache": None if (off := _find(raw, "disable_radix_cache")) is None
                      else not off},
            raw={"server_info": keep, "model": first},
        )

    def tokenize(self, client: EngineClient, text: str, options: EngineOptions) -> list[int]:
        try:
            return tokenize(client, text, model=None)
        except EngineRequestError as exc:
            if "HTTP 500" not in str(exc):
                raise
            raise EngineRequestError(
                f"{exc}; SGLang 0.5.17 answers /tokenize with HTTP 500 when the tokenizer "
                "has no length limit (no model_max_length in tokenizer_config.json: "
                "'Integer exceeds 64-bit range' in its log); give the tokenizer one") from None

    def score(self, client: EngineClient, batch: list[list[int]],
              options: EngineOptions) -> list[Scored]:
        payload = {
            "input_ids": batch[0] if len(batch) == 1 else batch,
            "sampling_params": {"max_new_tokens": 1, "temperature": 0.0},
            "return_logprob": True,
            "logprob_start_len": 0,
        }
        return parse_generate(client.post_json("/generate", payload), batch)

    def generate(self, client: EngineClient, ids: list[int], max_tokens: int,
                 options: EngineOptions) -> Generated:
        # Output logprobs only (logprob_start_len -1): a request that asks for the prompt's
        # logprobs never reuses a cached prefix, and the prefix probe would see nothing.
        body = client.post_json("/generate", {
            "input_ids": ids,
            "sampling_params": {"max_new_tokens": max_tokens, "min_new_tokens": max_tokens,
                                "temperature": 0.0, "ignore_eos": True},
            "return_logprob": True,
            "logprob_start_len": -1,
        })
        with shape("/generate", body):
            meta = body["meta_info"]
            steps = meta["output_token_logprobs"]
            return Generated(token_ids=[int(s[1]) for s in steps],
                             logprobs=[float(s[0]) for s in steps],
                             text=str(body.get("text", "")),
                             prompt_tokens=meta.get("prompt_tokens"),
                             cached_tokens=meta.get("cached_tokens"))


def _last(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    matches = list(pattern.finditer(text))
    return matches[-1] if matches else None


def _seconds(line: str) -> int:
    m = STAMP.match(line)
    assert m is not None
    h, mi, s = (m["h"], m["m"], m["s"]) if m["h"] else (m["H"], m["M"], m["S"])
    return int(h) * 3600 + int(mi) * 60 + int(s)


def _dtype(args: list[str]) -> str | None:
    for i, a in enumerate(args):
        if a == "--dtype" and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("--dtype="):
            return a.split("=", 1)[1]
    return None
