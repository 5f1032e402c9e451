"""SGLang with FlashInfer on an NVIDIA H200: the bundles of docs/validation's SGLang section.

    python3 scripts/gpu_sglang.py --out DIR [--budget S] [--plans NAME=S ...]
    python3 scripts/gpu_sglang.py --out DIR --print-plans [--device cpu]  # the plans, here

Run from the repository root on the GPU machine, after the carry
(scripts/gpu_carry.py: the wheel sets `servediff-deps` and `sglang-0.5.17`, and the
SmolLM2 GGUF, stashed in /root/stash). Every step is idempotent, so the same command
resumes within the lease: it installs the wheel sets (once), makes the models (once),
then runs each plan under the time left and packs its bundle (whole or cut short) into
DIR as NAME.tar.gz. `--moe-build` starts the CPU-only JIT build of FlashInfer's fused
MoE module for Hopper in the background (once; its log comes back with the bundles):
it is asked for only beside plans without cost loads, since it keeps most cores busy.

The models, made there without a download:
- `seed`: the seed report's attention shape (24 query heads, 4 KV heads, head_dim 256),
  2 layers, a byte-level tokenizer (259 entries: one token per byte, so a prompt's
  length is exact), random weights (torch.manual_seed(0)), bf16;
- `moe`: a tiny Qwen3-MoE of the same tokenizer (8 experts, 2 active), random, bf16;
- `smollm2`: the trained SmolLM2-135M-Instruct, from the packaged Q4_1 GGUF carried
  there, dequantised by transformers (servediff.engines.hf_convert), served in bf16.

FlashInfer's JIT builds and Triton's compiled kernels are compiled code, not per-load
choices (SGLang's Triton attention and MoE kernels carry no triton.autotune): the plans
keep them in one directory per machine (`launch.keep_caches` with FLASHINFER_WORKSPACE_BASE
and TRITON_CACHE_DIR in their env, recorded as "plan-env"), while SGLang's own cache
(FlashInfer's autotune results), Inductor's and the CUDA driver's stay under the plan's
cache policy, fresh per load.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("SERVEDIFF_VALIDATION_WORK", "/root/work")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_carried import (  # after the variable above, which they read
    JIT,
    ROOT,
    WORK,
    carried_env,
    install,
    launch_table,
    random_model,
    smollm2,
)
from gpu_validation import run_plan

SGLANG_SET = "sglang-0.5.17"
MOE_LOG = WORK / "fused-moe-90-build.log"
MOE_DONE = WORK / "fused-moe-90-build.done"
MOE_PID = WORK / "fused-moe-90-build.pid"
# compiled code kept across every load of the machine: FlashInfer's JIT builds, and
# Triton's kernels (SGLang's Triton attention and MoE kernels carry no triton.autotune)
KEEP = {"FLASHINFER_WORKSPACE_BASE": JIT / "flashinfer", "TRITON_CACHE_DIR": JIT / "triton"}


MOE_BUILD = """
import time
from flashinfer.jit.fused_moe import gen_cutlass_fused_moe_sm90_module
t0 = time.monotonic()
spec = gen_cutlass_fused_moe_sm90_module()
print("sources", len(spec.sources), flush=True)
spec.build(verbose=True)
print(f"built fused_moe_90 in {time.monotonic() - t0:.0f} s", flush=True)
"""


def start_moe_build() -> None:
    """FlashInfer's CUTLASS fused MoE for sm90 is the one module on Hopper whose path
    runs FlashInfer's autotuner for bf16; its JIT build is long, so it starts at once,
    CPU-only, in its own session (it outlives this call while the machine is warm)."""
    if MOE_LOG.exists():
        return
    WORK.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **carried_env(SGLANG_SET), **{k: str(v) for k, v in KEEP.items()},
           "CUDA_VISIBLE_DEVICES": "",
           "FLASHINFER_CUDA_ARCH_LIST": "9.0a", "MAX_JOBS": str(max(1, (os.cpu_count() or 4) - 4))}
    script = f"{MOE_BUILD}\nopen({str(MOE_DONE)!r}, 'w').write('ok')\n"
    with MOE_LOG.open("w") as log:
        proc = subprocess.Popen(["nice", sys.executable, "-c", script], env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    MOE_PID.write_text(f"{proc.pid}\n")
    print(f"fused_moe_90 JIT build started in the background ({MOE_LOG})", flush=True)


def seed_model() -> Path:
    from transformers import LlamaConfig

    return random_model("seed-gqa24x4-hd256-random", "a 2-layer Llama with the seed "
                        "report's attention shape (24 query heads, 4 KV heads, head_dim 256)",
                        lambda: LlamaConfig(
                            vocab_size=320, hidden_size=1536, intermediate_size=4096,
                            num_hidden_layers=2, num_attention_heads=24, num_key_value_heads=4,
                            head_dim=256, max_position_embeddings=32768, rope_theta=1e6,
                            tie_word_embeddings=False))


def moe_model() -> Path:
    from transformers import Qwen3MoeConfig

    return random_model("qwen3moe-8x2-random", "a 2-layer Qwen3-MoE (8 experts, 2 active)",
                        lambda: Qwen3MoeConfig(
                            vocab_size=320, hidden_size=1024, intermediate_size=2048,
                            moe_intermediate_size=512, num_experts=8, num_experts_per_tok=2,
                            num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=4,
                            head_dim=64, max_position_embeddings=32768, decoder_sparse_step=1,
                            mlp_only_layers=[], tie_word_embeddings=False))


MAKERS = {"seed": seed_model, "moe": moe_model, "smollm2": smollm2}


def launch(device: str, extra: list[str]) -> str:
    if device == "cuda":
        return launch_table("python3", ["-m", "sglang.launch_server"], [*SERVE, *extra],
                            carried_env(SGLANG_SET), KEEP, {"device": "gpu"})
    # a CPU dry run of the same plans: the SGLang of scripts/setup-sglang-cpu.sh
    python = ROOT / ".cache" / "servediff" / "engines" / "sglang-cpu" / "bin" / "python"
    return launch_table(str(python), ["-m", "sglang.launch_server"], [*SERVE, *extra],
                        {"HF_HUB_OFFLINE": "1"}, {}, {"device": "cpu"})


# the longest prompt of the seed plan's concurrency and speed probes (see plans())
CONCURRENT = 1536
# Its sweep bisects single prompts only: a death costs a restart (about 50 s), and the
# deterministic FlashInfer arm would die about 8 times bisecting 4 at once as well, which
# with 12 cold loads and the carry does not fit one lease.
SWEEP_LEVELS = "1"
SERVE = ["--model-path", "{model}", "--host", "{host}", "--port", "{port}"]
QUIET = '[quiet]\naction = "mark"\nwait_s = 20\nwindow_s = 2\n'
OFF = "".join(f"[probes.{p}]\nenabled = false\n" for p in ("concurrency", "generate", "speed",
                                                          "sweep", "prefix"))


def drift_plan(name: str, model: Path, loads: int, served: str,
               factors: dict[str, list[str]], require: list[str], texts: int) -> str:
    """A factor plan of scores and repeats alone (the cost probes and the other drift
    probes off): `loads` cold loads per arm, `texts` texts, What to ship held to
    `require`."""
    return (f'name = "{name}"\nengine = "sglang"\nmodel = "{model}"\n'
            f"loads_per_arm = {loads}\n" + served
            + "".join(f"[factors.{factor}]\nargs = {json.dumps(args)}\n"
                      for factor, args in factors.items())
            + f"[ship]\nrequire = {json.dumps(require)}\n"
            + f"[corpus]\nmax_texts = {texts}\n[probes.repeat]\ncount = 1\n" + OFF + QUIET)


def plans(device: str, models: dict[str, Path], moe_backend: str | None
          ) -> list[tuple[str, str]]:
    gpu = device == "cuda"
    seed_args = ["--attention-backend", "flashinfer", "--context-length",
                 "16384" if gpu else "2048", "--cuda-graph-max-bs-decode", "16"]
    if not gpu:
        seed_args = ["--context-length", "2048", "--dtype", "float32"]
    first = (f'name = "h200-sglang-first-start"\nengine = "sglang"\n'
             f'model = "{models["seed"]}"\nloads_per_arm = 1\n'
             + launch(device, seed_args) + "[arms.baseline]\n"
             + "[corpus]\nmax_texts = 2\n[probes.repeat]\ncount = 0\n" + OFF + QUIET)
    # The seed report's stack captured no prefill CUDA graphs (0.5.17's breakable prefill
    # graph is newer): with them, --enable-deterministic-inference on FlashInfer cannot
    # start at all (h200-sglang-seed-pair), so the factor plan turns them off in every arm
    # and the sweep can find where a long prefill overflows the 2 GiB workspace instead.
    # Its concurrency and speed prompts stay at 1,536 tokens, 4 at once 6,144: under the
    # 7,281 tokens that 2 GiB holds at 24 heads of 256 (2,415,919,104 bytes for 8,192),
    # so that only the sweep, which bisects it, pays the restarts a death costs.
    seed_stack = [*seed_args, "--disable-prefill-cuda-graph"] if gpu else seed_args
    # Combined loads: each arm's first cold load runs its drift probes and then its cost
    # probes, its second the drift probes alone: 8 cold loads for the four arms, not 12.
    # The radix cache stays on in both parts, as the arm serves (a deterministic arm's
    # SGLang turns it off itself). Scoring asks logprobs from position 0, and SGLang caps
    # a logprob request's cache match at its logprob_start_len, so no scoring request
    # reads the cache; the speed probe salts its prompts and the prefix probe uses its own.
    seed = (f'name = "h200-sglang-seed"\nengine = "sglang"\nmodel = "{models["seed"]}"\n'
            'loads_per_arm = 2\ncost_loads_per_arm = 1\nloads = "combined"\n'
            + launch(device, seed_stack).replace("[engine_options]\n",
                                                 "[engine_options]\nprefix_cache = true\n")
            + '[factors.deterministic]\nargs = ["--enable-deterministic-inference"]\n'
            + '[factors.triton]\nargs = ["--attention-backend", "triton"]\n'
            + "[corpus]\nmax_texts = 12\n[probes.repeat]\ncount = 1\n"
            + f"[probes.concurrency]\nlengths = [512, {CONCURRENT if gpu else 1024}]\n"
            + "levels = [1, 4]\nrequests = 8\n"
            + "max_tokens = 16\n[probes.generate]\ntexts = 4\nmax_tokens = 32\n"
            + f"[probes.speed]\nprompt_tokens = [512, {CONCURRENT if gpu else 1024}]\n"
            + "max_tokens = 32\nreplicates = 3\nlevels = [1, 4]\n"
            + f"[probes.sweep]\nstart = {4096 if gpu else 256}\nlevels = [{SWEEP_LEVELS}]\n"
            + "resolution = 16\nrequest_timeout_s = 120\n"
            + f"[probes.prefix]\nprefix_tokens = {4096 if gpu else 512}\n"
            + "question_tokens = 32\nrequests = 3\n" + QUIET)
    moe_args = ["--attention-backend", "flashinfer", "--context-length", "4096",
                "--cuda-graph-max-bs-decode", "16"]
    if moe_backend:
        moe_args += ["--moe-runner-backend", moe_backend]
    if not gpu:
        moe_args = ["--context-length", "2048", "--dtype", "float32"]
    moe = drift_plan("h200-sglang-moe-autotune", models["moe"], 2, launch(device, moe_args),
                     {"autotune_off": ["--disable-flashinfer-autotune"],
                      "deterministic": ["--enable-deterministic-inference"]},
                     ["across loads", "within a load"], 8)
    trained_args = ["--attention-backend", "flashinfer", "--dtype", "bfloat16",
                    "--context-length", "8192", "--cuda-graph-max-bs-decode", "16"]
    if not gpu:
        trained_args = ["--context-length", "2048", "--dtype", "float32"]
    # combined loads as in the seed plan: 4 cold loads for the two arms, not 6
    trained = (f'name = "h200-sglang-smollm2"\nengine = "sglang"\n'
               f'model = "{models["smollm2"]}"\nloads_per_arm = 2\ncost_loads_per_arm = 1\n'
               'loads = "combined"\n'
               + launch(device, trained_args).replace("[engine_options]\n",
                                                      "[engine_options]\nprefix_cache = true\n")
               + '[factors.deterministic]\nargs = ["--enable-deterministic-inference"]\n'
               + "[corpus]\nmax_texts = 16\n[probes.repeat]\ncount = 1\n"
               + "[probes.concurrency]\nlengths = [512, 2048]\nlevels = [1, 4]\n"
               + "requests = 8\nmax_tokens = 16\n[probes.generate]\ntexts = 4\n"
               + "max_tokens = 32\n[probes.speed]\nprompt_tokens = [512, 4096]\n"
               + "max_tokens = 32\nreplicates = 3\nlevels = [1, 4]\n"
               + f"[probes.sweep]\nstart = {1024 if gpu else 256}\nlevels = [1, 4]\n"
               + "resolution = 16\n"
               + f"[probes.prefix]\nprefix_tokens = {2048 if gpu else 512}\n"
               + "question_tokens = 32\nrequests = 3\n" + QUIET)
    # the seed's own two arms alone (stock against deterministic), for a lease too short
    # for the factor plan's 12 cold loads
    pair = (seed.replace('loads = "combined"\n', "").replace("prefix_cache = true\n", "")
            .replace(f"start = {4096 if gpu else 256}", f"start = {2048 if gpu else 256}")
            .replace('name = "h200-sglang-seed"', 'name = "h200-sglang-seed-pair"')
            .replace('[factors.triton]\nargs = ["--attention-backend", "triton"]\n', "")
            .replace(launch(device, seed_stack), launch(device, seed_args))
            .replace(f"levels = [{SWEEP_LEVELS}]", "levels = [1, 4]")
            .replace(f"lengths = [512, {CONCURRENT if gpu else 1024}]",
                     f"lengths = [512, {4096 if gpu else 1024}]")
            .replace(f"prompt_tokens = [512, {CONCURRENT if gpu else 1024}]",
                     f"prompt_tokens = [512, {8192 if gpu else 1024}]"))
    # the seed's headline alone, for what is left of a lease: where each arm's single
    # prompts stop surviving and its KV pool, on the seed's stack (no prefill graphs), in
    # four cold loads (one drift and one cost load per arm)
    limit = (f'name = "h200-sglang-limit"\nengine = "sglang"\nmodel = "{models["seed"]}"\n'
             "loads_per_arm = 1\ncost_loads_per_arm = 1\n" + launch(device, seed_stack)
             + '[factors.deterministic]\nargs = ["--enable-deterministic-inference"]\n'
             + "[corpus]\nmax_texts = 4\n[probes.repeat]\ncount = 1\n"
             + "".join(f"[probes.{p}]\nenabled = false\n"
                       for p in ("concurrency", "generate", "speed", "prefix"))
             + f"[probes.sweep]\nstart = {4096 if gpu else 256}\nlevels = [1]\n"
             + "resolution = 256\nrequest_timeout_s = 120\n" + QUIET)
    # FP8 on Hopper, the other way into FlashInfer's autotuner that SGLang 0.5.17 has
    # (should_run_flashinfer_autotune): `--fp8-gemm-backend flashinfer_cutlass`. Every
    # arm quantises the seed model's linear layers to FP8 as it loads
    # (`--quantization fp8`); the factor asks for FlashInfer's CUTLASS FP8 GEMM, which
    # 0.5.17's own source refuses off Blackwell; `autotune_off` is the issue's switch
    # (`--disable-flashinfer-autotune`), so each arm's log shows the autotuner's state
    # with and without it. Triton attention spares the lease
    # FlashInfer's attention build; one cold load per arm and the drift probes alone fit
    # what a lease leaves after the carry. The log of each start says whether the
    # autotuner ran (`flashinfer_autotune`), or why the engine refused.
    fp8_args = ["--quantization", "fp8", "--attention-backend", "triton",
                "--context-length", "4096", "--cuda-graph-max-bs-decode", "16"]
    if not gpu:
        fp8_args = ["--context-length", "2048", "--dtype", "float32"]
    fp8 = drift_plan("h200-sglang-fp8-autotune", models["seed"], 1, launch(device, fp8_args),
                     {"flashinfer_fp8": ["--fp8-gemm-backend", "flashinfer_cutlass"],
                      "autotune_off": ["--disable-flashinfer-autotune"]},
                     ["within a load"], 4)
    return [("h200-sglang-first-start", first), ("h200-sglang-seed-pair", pair),
            ("h200-sglang-seed", seed), ("h200-sglang-limit", limit),
            ("h200-sglang-smollm2", trained), ("h200-sglang-moe-autotune", moe),
            ("h200-sglang-fp8-autotune", fp8)]


def moe_backend() -> str | None:
    """flashinfer_cutlass once its JIT build has finished here, else SGLang's default
    (Triton fused MoE, which has no autotune): the bundle's launch says which."""
    return "flashinfer_cutlass" if MOE_DONE.exists() else None


def wait_for_moe_build(end: float) -> None:
    """Until the fused MoE build started by --moe-build has finished (or died, or `end`):
    the MoE plan's arms launch flashinfer_cutlass only once it has, and say which."""
    if not MOE_PID.exists():
        return
    pid = int(MOE_PID.read_text())
    t0 = time.monotonic()
    while not MOE_DONE.exists() and time.monotonic() < end:
        stat = Path(f"/proc/{pid}/stat")
        # exited (or a zombie of this process) without writing MOE_DONE: it failed
        if not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z":
            break
        time.sleep(5)
    state = "done" if MOE_DONE.exists() else "not done"
    print(f"fused_moe_90 build {state} after waiting {time.monotonic() - t0:.0f} s",
          flush=True)


def warm_up(models: dict[str, Path], budget_s: float, triton: bool, out: Path) -> None:
    """Build the compiled code the plans' arms need before their first load: one server
    per (backend, deterministic), one after another, each until it answers /health (its
    own first prefill has then run), then stopped. The builds land in the kept caches
    (KEEP); every load records what it found there.

    One at a time: SGLang 0.5.17 sizes its KV pool from the memory free when it starts,
    so a second server beside a first is refused ("Loaded weights leave no GPU memory
    for the KV cache under --mem-fraction-static=0.2"; 2026-12-05, H100)."""
    if (WORK / "warm.done").exists():
        return
    import signal
    import urllib.request

    # as the drift loads launch them (radix cache off); the triton arm only for the seed plan
    seed = ["--context-length", "16384", "--cuda-graph-max-bs-decode", "16",
            "--disable-prefill-cuda-graph", "--disable-radix-cache"]
    configs = [["--attention-backend", "flashinfer", *seed],
               ["--attention-backend", "flashinfer", *seed, "--enable-deterministic-inference"]]
    if triton:
        configs.append(["--attention-backend", "triton", *seed,
                        "--enable-deterministic-inference"])
    env = {**os.environ, **carried_env(SGLANG_SET), **{k: str(v) for k, v in KEEP.items()}}
    t0 = time.monotonic()
    ready = 0
    for n, extra in enumerate(configs):
        port = 31000 + n
        with (WORK / f"warm-{n}.log").open("w") as log:
            proc = subprocess.Popen(
                ["python3", "-m", "sglang.launch_server", "--model-path", str(models["seed"]),
                 "--host", "127.0.0.1", "--port", str(port), *extra],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            while time.monotonic() - t0 < budget_s:
                if proc.poll() is not None:
                    print(f"warm-up server {n} exited {proc.returncode} after "
                          f"{time.monotonic() - t0:.0f} s", flush=True)
                    break
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health",
                                                timeout=2):
                        print(f"warm-up server {n} ready after "
                              f"{time.monotonic() - t0:.0f} s", flush=True)
                        ready += 1
                        break
                except OSError:
                    time.sleep(2)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        shutil.copy(WORK / f"warm-{n}.log", out / f"warm-{n}.log")  # why one died
    if ready == len(configs):
        (WORK / "warm.done").write_text(f"{time.monotonic() - t0:.0f}\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget", type=float, default=540.0)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--plans", nargs="*", help="only these, each with its budget: NAME=S")
    parser.add_argument("--print-plans", action="store_true")
    parser.add_argument("--warm", type=float, default=0, help="seconds for the warm-up "
                        "servers that build the kept compiled code first (0: none)")
    parser.add_argument("--moe-build", action="store_true", help="start the fused MoE JIT "
                        "build (CPU) in the background; never beside a cost load")
    args = parser.parse_args()
    deadline = time.monotonic() + args.budget
    args.out.mkdir(parents=True, exist_ok=True)
    if args.print_plans:
        fake = {k: Path(f"/models/{k}") for k in MAKERS}
        for name, text in plans(args.device, fake, "flashinfer_cutlass"):
            (args.out / f"{name}.toml").write_text(text)
        return
    install(SGLANG_SET)
    if args.moe_build:
        start_moe_build()
    t0 = time.monotonic()
    budgets = dict(p.split("=") for p in args.plans or [])
    # only the models the chosen plans serve (the SmolLM2 conversion takes a minute)
    fake = {k: Path(f"/models/{k}") for k in MAKERS}
    chosen = [text for name, text in plans(args.device, fake, None)
              if not budgets or name in budgets]
    needed = {k for k in MAKERS if any(f'"{fake[k]}"' in t for t in chosen)}
    needed |= {"seed"} if args.warm else set()  # the warm-up servers serve the seed model
    models = {k: make() if k in needed else fake[k] for k, make in MAKERS.items()}
    print(f"models ready after {time.monotonic() - t0:.0f} s", flush=True)
    if args.warm:
        warm_up(models, args.warm, not budgets or "h200-sglang-seed" in budgets, args.out)
    walls: dict[str, float] = {}
    for name, text in plans(args.device, models, moe_backend()):
        if budgets and name not in budgets:
            continue
        end = min(deadline, time.monotonic() + float(budgets[name])) if budgets else deadline
        if name == "h200-sglang-moe-autotune":
            wait_for_moe_build(end - 120)
            text = dict(plans(args.device, models, moe_backend()))[name]
        walls[name] = run_plan(name, text, end, args.out, ("--yes",))
        (args.out / "walls.json").write_text(json.dumps(walls, indent=1))
    if MOE_LOG.exists():
        shutil.copy(MOE_LOG, args.out / MOE_LOG.name)


if __name__ == "__main__":
    main()
