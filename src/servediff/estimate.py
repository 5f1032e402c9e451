"""A rough duration estimate for a plan, before anything starts.

The probes say what each cell asks of the engine (requests, prompt tokens,
generated tokens: `probes.protocol_size`); this module turns that into time
with reference rates measured by servediff itself, scaled by the model's
parameter count, plus each engine's typical cold start per load and the
quiet-box looks. It is a rough guide, never a measurement: engines differ by
several times on one device, concurrency overlaps requests, long prompts cost
more than linearly, and the estimate counts none of that. While a run goes
on, its progress lines give a time left from the run's own cells instead.
"""

from __future__ import annotations

import contextlib
import json
import struct
from dataclasses import dataclass
from pathlib import Path

from servediff import gpu, models
from servediff.design import ROMAN
from servediff.engines import registry
from servediff.engines.base import EngineAdapter
from servediff.plan import Plan
from servediff.probes import Size
from servediff.schedule import cost_runs, schedule

# SmolLM2-135M, the built-in model
SMOLLM2_PARAMETERS = 134_515_008
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


@dataclass(frozen=True)
class Rates:
    """Reference throughput of the embedded engine on one kind of device."""

    device: str
    prefill_tok_s: float
    decode_tok_s: float
    # the model size they were measured at; prefill is scaled by parameters on both
    # kinds of device, decode only on a CPU (where memory bandwidth bounds it; the
    # embedded engine's decode on a GPU is bound by its per-token overhead)
    parameters: int
    source: str


# `servediff demo` on a 2-core AMD EPYC (AVX-512 BF16), bfloat16: the sdpa arm's speed
# cells at 512 prompt tokens, one request at a time (1,688 tok/s prefill; decode 35 and
# 41 tok/s in the two arms), 2026-12-01.
CPU = Rates("CPU", prefill_tok_s=1690.0, decode_tok_s=38.0, parameters=SMOLLM2_PARAMETERS,
            source="the demo on a 2-core CPU, bf16")
# The same plan in float32 on the same kind of machine (`python benchmarks/plan_overhead.py
# --plan demo --dtype float32`, 2026-12-05): the sdpa arm's speed cells at 512 prompt
# tokens, one request at a time (741 tok/s prefill, 26.2 tok/s decode). A CPU without
# native bf16 computes in float32 (dtype "auto"); one without AVX-512 is slower still.
CPU_FP32 = Rates("CPU", prefill_tok_s=741.0, decode_tok_s=26.2,
                 parameters=SMOLLM2_PARAMETERS, source="the demo on a 2-core CPU, float32")
# docs/validation/h200-transformers-cost: bf16 arm, 4,096 prompt tokens, NVIDIA H200.
GPU = Rates("GPU", prefill_tok_s=46_675.0, decode_tok_s=54.6, parameters=1_711_000_000,
            source="docs/validation/h200-transformers-cost, an H200, bf16")


@dataclass(frozen=True)
class Estimate:
    seconds: float
    # what it assumed, in words
    basis: str


def _safetensors_parameters(path: Path) -> int:
    with path.open("rb") as fh:
        (length,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(length))
    total = 0
    for name, entry in header.items():
        if name != "__metadata__":
            count = 1
            for dim in entry["shape"]:
                count *= int(dim)
            total += count
    return total


def model_parameters(model: str, base_dir: Path) -> tuple[int, str] | None:
    """The model's parameter count and how it was found; None where it cannot be known
    before the model loads."""
    if model in models.BUILTIN_MODELS:
        return SMOLLM2_PARAMETERS, "the built-in SmolLM2-135M"
    path = models.local_path(model, base_dir)
    files = [path] if path.is_file() else sorted(path.glob("*")) if path.is_dir() else []
    tensors = [f for f in files if f.suffix == ".safetensors"]
    try:
        if tensors:
            counted = sum(_safetensors_parameters(f) for f in tensors)
            return counted, "read from its safetensors headers"
        weights = [f for f in files if f.suffix in (".gguf", ".bin", ".pt", ".pth")]
        if weights:
            size = sum(f.stat().st_size for f in weights)
            return size // 2, "its weight files' size at 2 bytes a parameter"
    except (OSError, ValueError, KeyError, struct.error):
        return None
    return None


def on_gpu(plan: Plan) -> bool:
    """Whether the plan's engine will most likely compute on a GPU here."""
    device = plan.engine_options.get("device")
    if isinstance(device, str) and device.startswith("cpu"):
        return False
    return bool(gpu.names())


def native_bf16() -> bool:
    """Whether this CPU computes bfloat16 natively (AVX-512 BF16 or AMX), as oneDNN, and
    so the embedded engine's dtype "auto", finds it; read without importing torch."""
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("flags"):
                return bool(BF16_FLAGS & set(line.split(":", 1)[1].split()))
    return False


def cpu_rates(plan: Plan, adapter: EngineAdapter) -> Rates:
    """The CPU rates for the dtype the plan's engine will compute in: the plan's
    `engine_options.dtype`, else its engine's default; "auto" is bfloat16 only where the
    CPU has it natively. An engine with no dtype option keeps the bf16 rates."""
    dtype = plan.engine_options.get("dtype")
    if dtype is None:
        field = adapter.options_model.model_fields.get("dtype")
        dtype = field.default if field is not None else None
    if dtype == "auto":
        dtype = "bfloat16" if native_bf16() else "float32"
    return CPU_FP32 if dtype == "float32" else CPU


def estimate(plan: Plan, size: Size, base_dir: Path,
             measured: tuple[Rates, float] | None = None) -> Estimate | str:
    """The estimate, or why there is none; `measured`: the rates and a load's start
    measured on this machine (servediff.calibrate), in place of the reference ones."""
    found = model_parameters(plan.model, base_dir)
    if found is None:
        return "no duration estimate: the model's size is not known before it loads"
    parameters, how = found
    adapter = registry.create(plan.engine)
    rates = measured[0] if measured else GPU if on_gpu(plan) else cpu_rates(plan, adapter)
    scale = parameters / rates.parameters
    decode = rates.decode_tok_s / (scale if rates is not GPU else 1.0)
    compute = size.prompt_tokens / (rates.prefill_tok_s / scale) + size.new_tokens / decode
    start = measured[1] if measured else adapter.typical_start_s
    # one gate before each cost load, or before the cost part of a combined load
    cost_parts = sum(map(plan.cost_loads_of, plan.arms)) if cost_runs(plan) else 0
    gated = (cost_parts if plan.quiet.gate_cost else 0) + (
        plan.loads_per_arm * len(plan.arms) if plan.quiet.gate_drift else 0)
    seconds = size.loads * start + gated * plan.quiet.window_s + compute
    basis = (f"{parameters / 1e6:,.0f} M parameters ({how}) on the {rates.device}, at rates "
             f"from {rates.source}, and a {start:.0f} s start per load")
    return Estimate(seconds=seconds, basis=basis)


def describe(found: Estimate | str) -> str:
    if isinstance(found, str):
        return found
    return (f"rough estimate: about {duration(found.seconds)} ({found.basis}; engines differ "
            "by several times on one device; the progress lines give the time left from "
            "this run's own cells)")


def duration(seconds: float) -> str:
    """4 min, 1.5 h: the precision a rough estimate deserves."""
    if seconds < 90:
        return f"{max(1, round(seconds / 10) * 10)} s"
    if seconds < 5400:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def shape_lines(plan: Plan, size: Size) -> list[str]:
    """What the plan saves on cold loads, beside what it would take otherwise: a design
    short of the full factorial, combined loads."""
    return [line for line in (design_text(plan, size), loads_text(plan, size)) if line]


def loads_text(plan: Plan, size: Size) -> str | None:
    """For combined loads: the cold loads, beside what separate drift and cost loads
    would take."""
    if plan.loads != "combined":
        return None
    separate = len(schedule(plan.model_copy(update={"loads": "separate"})))
    return (f'loads: combined, drift then cost probes in each cold load: {size.loads} cold '
            f"loads; separate drift and cost loads would take {separate}")


def design_text(plan: Plan, size: Size) -> str | None:
    """For a design short of the full factorial: its arms and cold loads, beside what the
    full factorial of the same factors would cost."""
    if not plan.factors:
        return None
    made = plan.made_design()
    if made.full:
        return None
    per_arm = size.loads / len(plan.arms)
    full = 2 ** len(plan.factors) + len(plan.arms) - len(made.rows)
    shape = (f"resolution {ROMAN[made.resolution]}" if made.resolution in ROMAN
             else "Plackett-Burman" if made.kind == "screening" else made.kind)
    return (f"design: {made.kind} ({shape}), {len(made.rows)} of {2 ** len(plan.factors)} "
            f"factor arms: {size.loads} cold loads; the full factorial would take "
            f"{round(per_arm * full)}")
