"""The embedded engine: one HF transformers model behind an OpenAI-style HTTP API.

servediff starts this module as its own process (`python -m
servediff.engines.hf_server`), bound to 127.0.0.1, so every load is a real
cold start. It speaks the subset of vLLM's API that scoring needs:
`/v1/completions` with `prompt_logprobs` (entry 0 is null, the rest hold the
logprob of the prompt token itself plus its rank), `/tokenize`, `/health`,
`/version`. A request whose `prompt` is a list of id lists is computed as one
right-padded batch: that is how a plan measures batch-composition numerics.
Requests that arrive together are computed together (engines/batcher.py): up
to `--max-batch` rows of scoring requests in one right-padded pass, greedy
generations of one length in one left-padded `generate`; so concurrency above
1 changes what a request is computed with, as on a serving engine.

torch and transformers are imported only here, never by the CLI.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import threading
import time
from collections.abc import Hashable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import metadata
from pathlib import Path
from typing import Any

from servediff.engines.batcher import Batcher


def bucket(length: int, limit: int) -> int:
    """The padded length of a compiled batch: the next power of two from 128, at most the
    context (`limit`). Every compiled shape costs a compile (minutes with max-autotune on a
    GPU), so short prompts, the ready check's included, share the smallest bucket."""
    width = 128
    while width < length:
        width *= 2
    return max(length, min(width, limit))


def native_dtype(torch: Any, device: str) -> str:
    """What `--dtype auto` loads: bfloat16 where the device computes it natively (a CUDA
    GPU with bf16, or a CPU whose oneDNN has bf16 instructions), float32 elsewhere, where
    bfloat16 would be emulated and slower than float32."""
    if device.startswith("cuda"):
        return "bfloat16" if torch.cuda.is_bf16_supported() else "float32"
    native = torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    return "bfloat16" if native else "float32"


class Engine:
    """The loaded model; `score` holds a lock, one forward pass at a time. Requests reach
    it through `batcher`, which puts those that arrive together into one pass."""

    def __init__(self, model_dir: Path, device: str, dtype: str, attn: str, threads: int,
                 max_len: int | None = None, compile_mode: str = "none",
                 tf32: bool = False, max_batch: int = 8, window_ms: float = 5.0) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if threads > 0:
            torch.set_num_threads(threads)
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.torch = torch
        self.device = device
        self.dtype = native_dtype(torch, device) if dtype == "auto" else dtype
        self.dtype_asked = dtype
        self.attn = attn
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        # transformers' own annotations of from_pretrained/to are not usable under mypy.
        loaded: Any = AutoModelForCausalLM.from_pretrained(
            model_dir, dtype=getattr(torch, self.dtype), attn_implementation=attn
        )
        self.model: Any = loaded.to(device).eval()
        # TF32 matmuls on Ampere and newer: faster, and numerically another arm.
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        self.compile_mode = compile_mode
        self.tf32 = tf32
        # What scores: the model itself, or a compiled copy of its forward pass. With
        # max-autotune, Inductor times candidate kernels at the first call of each shape
        # and keeps the fastest: per process, so per cold load (the analogue of an
        # engine's autotuner). Shapes are static (dynamic=False): each batch is padded to
        # a length bucket, so a handful of shapes is compiled once each, which is what
        # makes the arm start within minutes; a dynamic-shape compile with max-autotune
        # did not get ready at all. Greedy generation runs eager (its shapes grow every
        # step).
        self.scorer: Any = self.model
        if compile_mode != "none":
            torch._dynamo.config.cache_size_limit = 64
            self.scorer = torch.compile(self.model, mode=compile_mode, dynamic=False)
        # Like vLLM's --max-model-len: a smaller context than the model's own.
        self.max_len = max_len or int(getattr(self.model.config, "max_position_embeddings", 2048))
        self.name = model_dir.name
        self.lock = threading.Lock()
        self.batcher: Batcher[list[int], Any] = Batcher(self._compute, window_ms / 1000,
                                                        max_batch)

    def _compute(self, key: Hashable, rows: list[list[int]]) -> list[Any]:
        """One pass over rows of requests that arrived together."""
        if key == "score":
            scored, nexts = self.score(rows)
            return list(zip(scored, nexts, strict=True))
        assert isinstance(key, tuple) and key[0] == "generate"
        return self.generate_batch(rows, key[1])

    def info(self) -> dict[str, Any]:
        torch = self.torch
        return {
            "engine": "servediff-transformers",
            "model": self.name,
            "device": self.device,
            "device_name": torch.cuda.get_device_name(0) if self.device == "cuda" else
            platform.processor() or platform.machine(),
            "dtype": self.dtype,
            "dtype_asked": self.dtype_asked,
            "attn_implementation": self.attn,
            "compile": self.compile_mode,
            "shapes": "static, padded to power-of-two length buckets from 128"
            if self.compile_mode != "none" else "as sent",
            "tf32": self.tf32,
            "batching": {"max_rows": self.batcher.max_rows,
                         "window_ms": round(self.batcher.window_s * 1000, 3)},
            "threads": torch.get_num_threads(),
            "max_model_len": self.max_len,
            "bos_token_id": self.tokenizer.bos_token_id,
            "versions": {
                "torch": torch.__version__,
                "transformers": metadata.version("transformers"),
                "python": platform.python_version(),
                "cuda": torch.version.cuda,
            },
        }

    def score(self, batch: list[list[int]]) -> tuple[list[list[tuple[float, int]]], list[int]]:
        """One padded forward pass over the batch.

        Per prompt: (logprob, rank) of tokens 2..N given their prefix, and the
        greedy next token after the whole prompt (from the same logits, so
        `max_tokens: 1` costs no second pass).
        """
        torch = self.torch
        width = max(len(ids) for ids in batch)
        if self.compile_mode != "none":
            width = bucket(width, self.max_len)
        input_ids = torch.zeros((len(batch), width), dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, ids in enumerate(batch):
            input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            mask[row, : len(ids)] = 1
        with self.lock, torch.inference_mode():
            logits = self.scorer(
                input_ids=input_ids.to(self.device), attention_mask=mask.to(self.device)
            ).logits
            out: list[list[tuple[float, int]]] = []
            nexts: list[int] = []
            for row, ids in enumerate(batch):
                n = len(ids)
                nexts.append(int(logits[row, n - 1].argmax()))
                if n < 2:
                    out.append([])
                    continue
                lp = torch.log_softmax(logits[row, : n - 1].float(), dim=-1)
                target = input_ids[row, 1:n].to(self.device)
                chosen = lp.gather(1, target[:, None])
                ranks = (lp > chosen).sum(dim=1) + 1
                out.append(list(zip(chosen[:, 0].tolist(), ranks.tolist(), strict=True)))
        return out, nexts


    def generate_batch(self, batch: list[list[int]], max_tokens: int
                       ) -> list[tuple[list[int], list[float]]]:
        """Greedy continuations of the prompts, left-padded into one batch: per prompt the
        tokens and each one's logprob. A batch of one is the prompt alone, unpadded."""
        torch = self.torch
        width = max(len(ids) for ids in batch)
        pad = self.tokenizer.eos_token_id
        input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, ids in enumerate(batch):
            input_ids[row, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
            mask[row, width - len(ids):] = 1
        with self.lock, torch.inference_mode():
            out = self.model.generate(
                input_ids=input_ids.to(self.device), attention_mask=mask.to(self.device),
                max_new_tokens=max_tokens, min_new_tokens=max_tokens, do_sample=False,
                output_logits=True, return_dict_in_generate=True, pad_token_id=pad,
            )
            results = []
            for row in range(len(batch)):
                tokens = out.sequences[row, width:].tolist()
                logprobs = [float(torch.log_softmax(step[row].float(), dim=-1)[tok])
                            for step, tok in zip(out.logits, tokens, strict=True)]
                results.append((tokens, logprobs))
        return results


class Handler(BaseHTTPRequestHandler):
    """The embedded server's HTTP endpoints: health, version, tokenize, completions."""

    engine: Engine
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: with Nagle's algorithm on, the body waits
    # for the client's delayed ACK of the headers, about 40 ms added to every response.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        sys.stderr.write(f"{time.strftime('%H:%M:%S')} {self.command} {self.path} {args[1:]}\n")

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str) -> None:
        self._send(status, {"error": {"message": message, "code": status}})

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(200, {"status": "ok"})
        elif self.path == "/version":
            self._send(200, self.engine.info())
        elif self.path == "/v1/models":
            self._send(200, {"object": "list", "data": [
                {"id": self.engine.name, "object": "model", "max_model_len": self.engine.max_len}
            ]})
        else:
            self._error(404, f"no route {self.path}")

    def do_POST(self) -> None:
        try:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
        except (ValueError, json.JSONDecodeError) as exc:
            self._error(400, f"invalid JSON body: {exc}")
            return
        try:
            if self.path == "/tokenize":
                self._send(200, self._tokenize(body))
            elif self.path == "/v1/completions":
                self._send(200, self._completions(body))
            else:
                self._error(404, f"no route {self.path}")
        except ValueError as exc:
            self._error(400, str(exc))

    def _tokenize(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            raise ValueError("'prompt' must be a string")
        ids = self.engine.tokenizer.encode(
            prompt, add_special_tokens=bool(body.get("add_special_tokens", False))
        )
        return {"tokens": ids, "count": len(ids), "max_model_len": self.engine.max_len}

    def _completions(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and all(isinstance(i, int) for i in prompt):
            prompts: list[list[int]] = [prompt]
        elif (
            isinstance(prompt, list)
            and prompt
            and all(isinstance(p, list) and p and all(isinstance(i, int) for i in p)
                    for p in prompt)
        ):
            prompts = prompt
        else:
            raise ValueError("'prompt' must be a list of token ids or a list of such lists")
        max_tokens = int(body.get("max_tokens", 1))
        if max_tokens < 0:
            raise ValueError("max_tokens must be >= 0")
        want_logprobs = body.get("prompt_logprobs") is not None or bool(body.get("echo"))
        # As vLLM: the prompt and the tokens asked for must fit the context.
        extra = 0 if want_logprobs else max_tokens
        too_long = [len(p) for p in prompts if len(p) + extra > self.engine.max_len]
        if too_long:
            raise ValueError(
                f"prompt of {too_long[0]} tokens + {extra} to generate exceeds max_model_len "
                f"{self.engine.max_len}"
            )
        if not want_logprobs and max_tokens >= 1:
            return self._generate(prompts, max_tokens)
        if max_tokens > 1:
            raise ValueError("scoring requests (prompt_logprobs or echo) take max_tokens 0 or 1")
        results = self.engine.batcher.submit("score", prompts)
        scored = [rows for rows, _ in results]
        nexts = [nxt for _, nxt in results]
        choices = []
        for index, (ids, rows) in enumerate(zip(prompts, scored, strict=True)):
            choice: dict[str, Any] = {"index": index, "text": "", "finish_reason": "length"}
            if want_logprobs:
                entries: list[dict[str, Any] | None] = [None]
                for tok, (lp, rank) in zip(ids[1:], rows, strict=True):
                    entries.append({str(tok): {"logprob": lp, "rank": rank}})
                choice["prompt_logprobs"] = entries
            if max_tokens == 1:
                choice["text"] = self.engine.tokenizer.decode([nexts[index]])
            choices.append(choice)
        n_prompt = sum(len(p) for p in prompts)
        return {
            "object": "text_completion",
            "model": self.engine.name,
            "choices": choices,
            "usage": {
                "prompt_tokens": n_prompt,
                "prompt_tokens_per_prompt": [len(p) for p in prompts],
                "completion_tokens": max_tokens * len(prompts),
                "total_tokens": n_prompt + max_tokens * len(prompts),
            },
        }


    def _generate(self, prompts: list[list[int]], max_tokens: int) -> dict[str, Any]:
        """Greedy generation in vLLM's shape, tokens as `token_id:N` (as vLLM's
        `return_tokens_as_token_ids`)."""
        choices = []
        results = self.engine.batcher.submit(("generate", max_tokens), prompts)
        for index, (tokens, logprobs) in enumerate(results):
            choices.append({
                "index": index,
                "text": self.engine.tokenizer.decode(tokens),
                "finish_reason": "length",
                "logprobs": {"tokens": [f"token_id:{t}" for t in tokens],
                             "token_logprobs": logprobs},
            })
        n_prompt = sum(len(p) for p in prompts)
        return {"object": "text_completion", "model": self.engine.name, "choices": choices,
                "usage": {"prompt_tokens": n_prompt,
                          "completion_tokens": max_tokens * len(prompts),
                          "total_tokens": n_prompt + max_tokens * len(prompts)}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="servediff-hf-server")
    parser.add_argument("--model", required=True, type=Path)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--attn-implementation", default="sdpa")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--max-model-len", type=int, default=None)
    parser.add_argument("--compile", default="none",
                        choices=["none", "default", "reduce-overhead", "max-autotune",
                                 "max-autotune-no-cudagraphs"])
    parser.add_argument("--tf32", action="store_true")
    parser.add_argument("--max-batch", type=int, default=8,
                        help="rows of requests that arrive together computed in one pass "
                             "(1: one request at a time)")
    parser.add_argument("--batch-window-ms", type=float, default=5.0,
                        help="how long the first request waits for others to join its pass")
    args = parser.parse_args(argv)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        parser.error("the embedded engine binds to the loopback interface only")
    started = time.monotonic()
    Handler.engine = Engine(args.model, args.device, args.dtype, args.attn_implementation,
                            args.threads, args.max_model_len, args.compile, args.tf32,
                            args.max_batch, args.batch_window_ms)
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    sys.stderr.write(
        f"servediff-hf-server ready on {args.host}:{args.port} after "
        f"{time.monotonic() - started:.1f}s ({Handler.engine.device}, {Handler.engine.dtype}, "
        f"{args.attn_implementation})\n"
    )
    sys.stderr.flush()
    server.serve_forever()


if __name__ == "__main__":
    main()
