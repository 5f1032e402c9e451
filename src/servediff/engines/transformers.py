"""Adapter for the embedded engine: HF transformers in a servediff-owned process.

Launches `python -m servediff.engines.hf_server`; speaks the vLLM dialect
(completions.py). This module never imports torch.
"""

from __future__ import annotations

import re
import sys
from typing import Any, ClassVar, Literal

from pydantic import Field

from servediff.caches import TORCH
from servediff.engines.base import Capability, EngineInfo, EngineOptions, has_module
from servediff.engines.completions import CompletionsAdapter
from servediff.engines.transport import EngineClient
from servediff.evidence import Launch


class TransformersOptions(EngineOptions):
    device: str = "auto"
    # "auto": bfloat16 where the device computes it natively (a CUDA GPU, or a CPU with
    # AVX-512 BF16 or AMX, where it is about twice as fast as float32), float32 elsewhere;
    # the dtype chosen is recorded in the engine's info
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "float32"
    attn_implementation: Literal["sdpa", "eager"] = "sdpa"
    threads: int = Field(default=0, ge=0)
    # A context shorter than the model's own (as vLLM's --max-model-len).
    max_model_len: int | None = Field(default=None, ge=2)
    # torch.compile of the scoring forward pass, static shapes in length buckets
    # ("max-autotune*": kernels chosen per load by timing them); generation runs eager
    compile: Literal["none", "default", "reduce-overhead", "max-autotune",
                     "max-autotune-no-cudagraphs"] = "none"
    # TF32 matmuls on CUDA (Ampere and newer)
    tf32: bool = False
    # Requests that arrive together computed in one pass, up to this many rows (1: one
    # request at a time), and how long a request waits for others to join it
    max_batch: int = Field(default=8, ge=1, le=256)
    batch_window_ms: float = Field(default=5.0, ge=0, le=1000)


BUCKETS_FROM = re.compile(r"buckets from (\d+)")


class TransformersAdapter(CompletionsAdapter):
    """The embedded engine (hf_server.py): HF transformers behind the completions dialect."""

    name = "transformers"
    recorded_name = "servediff-transformers"
    example_arms = ({}, {"options": {"attn_implementation": "eager"}},
                    "eager attention instead of sdpa")
    # 3-5 s for SmolLM2-135M on a 2-core CPU (the demo), 12-19 s for a 1.7B model on an
    # H200 (docs/validation/h200-transformers-cost)
    typical_start_s = 10.0
    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {"score", "generate", "version", "reload"})
    options_model = TransformersOptions
    default_command: ClassVar[list[str]] = [
        sys.executable, "-m", "servediff.engines.hf_server",
        "--model", "{model}", "--host", "{host}", "--port", "{port}",
    ]
    # The embedded server serves one model and takes any name.
    served = "default"
    caches = TORCH

    def example_options(self, small: bool) -> list[str]:
        return ["device = \"auto\"",
                "# bfloat16 where the device computes it natively, else float32",
                "dtype = \"auto\"",
                *(["# a shorter context than the model's own keeps the sweep short",
                   "max_model_len = 2048"] if small else [])]

    def bucket_floor(self, launch: Launch) -> int | None:
        # the embedded engine says how it pads: "... length buckets from 128"
        found = BUCKETS_FROM.search(str(launch.engine.get("shapes") or ""))
        return int(found.group(1)) if found else None

    @classmethod
    def locate(cls) -> str | None:
        return "this Python environment" if has_module("torch") and has_module(
            "transformers") else None

    def option_args(self, options: EngineOptions) -> list[str]:
        assert isinstance(options, TransformersOptions)
        return ["--device", options.device, "--dtype", options.dtype,
                "--attn-implementation", options.attn_implementation,
                "--threads", str(options.threads),
                *(["--max-model-len", str(options.max_model_len)]
                  if options.max_model_len else []),
                *(["--compile", options.compile] if options.compile != "none" else []),
                *(["--tf32"] if options.tf32 else []),
                "--max-batch", str(options.max_batch),
                "--batch-window-ms", f"{options.batch_window_ms:g}"]

    def info(self, client: EngineClient) -> EngineInfo:
        raw: dict[str, Any] = client.get_json("/version")
        return EngineInfo(
            version={"engine": raw.get("engine"), **raw.get("versions", {})},
            bos_token_id=raw.get("bos_token_id"),
            max_model_len=raw.get("max_model_len"),
            raw=raw,
        )
