"""A toy engine added the way any engine is: this one file plus its registry line.

`ToyAdapter` says how to launch it and inherits the completions dialect; run
as a module, this file is the toy server itself (an HTTP server on the given
host and port answering as tests/engines/fake.py's FakeEngine does).
tests/integration/test_toy_engine.py registers it and runs a plan on it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

from servediff.engines.base import Capability, EngineInfo
from servediff.engines.builds import BuildFailed, BuildSource
from servediff.engines.completions import CompletionsAdapter
from servediff.engines.transport import EngineClient
from servediff.errors import InputError

ENTRY = "tests.engines.toy:ToyAdapter"


class ToyBuilds:
    """The toy engine's builds 1 to 99 (`servediff bisect`): from build TOY_FLIP on, its
    server adds 0.001 to every logprob (a kernel changed between two builds); from build
    TOY_KV_FLIP on, its KV pool is half as large (4,096 tokens, not 8,192); from build
    TOY_JITTER_FLIP on, each start adds its own offset (drift across loads); from build
    TOY_DIES_FLIP on, a prompt over 1,500 tokens kills it; from build TOY_SLOW_FLIP on, each
    completion request waits 0.2 s more; the builds in TOY_BROKEN (comma-separated) fail
    to build; TOY_SLOW: seconds each request waits in every build."""

    aside: tuple[str, ...] = ()

    def between(self, good: str, bad: str) -> list[str]:
        if not (good.isdigit() and bad.isdigit() and 1 <= int(good) < int(bad) <= 99):
            raise InputError(f"toy builds are 1 to 99, good before bad; got {good}, {bad}")
        return [str(n) for n in range(int(good), int(bad) + 1)]

    def source(self, build: str) -> Path:
        """A toy source tree: a README naming the build, and the kernel's offset."""
        tree = Path(tempfile.gettempdir()) / f"servediff-toy-{os.getpid()}" / build
        tree.mkdir(parents=True, exist_ok=True)
        (tree / "README.md").write_text(f"toy engine, build {build}\n")
        (tree / "src").mkdir(exist_ok=True)
        (tree / "src" / "kernel.c").write_text(
            f"float offset = {self._offset(build)};\nfloat scale = 1;\n")
        return tree

    def _offset(self, build: str) -> str:
        return "0.001" if int(build) >= int(os.environ.get("TOY_FLIP", "100")) else "0"

    def command(self, build: str) -> list[str]:
        if build in os.environ.get("TOY_BROKEN", "").split(","):
            raise BuildFailed(f"build {build}: the toy compiler failed")
        def since(flip: str) -> bool:
            return int(build) >= int(os.environ.get(flip, "100"))

        return [*ToyAdapter.default_command, "--build", build, "--offset", self._offset(build),
                "--slow", os.environ.get("TOY_SLOW", "0"),
                "--slow-completion", "0.2" if since("TOY_SLOW_FLIP") else "0",
                *(["--dies-above", "1500"] if since("TOY_DIES_FLIP") else []),
                "--kv", "4096" if since("TOY_KV_FLIP") else "8192",
                *(["--jitter"] if since("TOY_JITTER_FLIP") else [])]


class ToyAdapter(CompletionsAdapter):
    name = "toy"
    capabilities: ClassVar[frozenset[Capability]] = frozenset({"score", "generate", "version",
                                                         "reload"})
    default_command: ClassVar[list[str]] = [sys.executable, "-m", "tests.engines.toy",
                                            "--model", "{model}", "--host", "{host}",
                                            "--port", "{port}"]

    def builds(self) -> BuildSource | None:
        return ToyBuilds()

    def info(self, client: EngineClient) -> EngineInfo:
        raw: dict[str, Any] = client.get_json("/version")
        return EngineInfo(version={"engine": "toy", "build": raw.get("build", "1")},
                          bos_token_id=raw["bos_token_id"],
                          max_model_len=raw["max_model_len"], raw=raw,
                          capacity=raw.get("capacity") or {})


def main() -> None:
    from tests.engines.fake import FakeEngine

    parser = argparse.ArgumentParser()
    parser.add_argument("--model")
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    # exit at start with this message, as an engine that refuses a flag does
    parser.add_argument("--refuse")
    # the build this server says it is (/version "build"): another build of the engine
    parser.add_argument("--build", default="1")
    # added to every logprob it gives (a build whose kernels compute otherwise)
    parser.add_argument("--offset", type=float, default=0.0)
    # seconds each POST waits before its answer (a slow engine, to interrupt mid-cell)
    parser.add_argument("--slow", type=float, default=0.0)
    # seconds each completion request waits on top (a slower build's kernels)
    parser.add_argument("--slow-completion", type=float, default=0.0)
    # the KV pool /version reports (tokens; 0: none)
    parser.add_argument("--kv", type=int, default=0)
    # each start adds an offset of its own to every logprob (drift across loads)
    parser.add_argument("--jitter", action="store_true")
    # a completion request with a prompt longer than this kills the server (a build that
    # dies on long prompts)
    parser.add_argument("--dies-above", type=int)
    # an engine adapter's own flags (the embedded engine's, when a plan launches this
    # server in its place) are taken and ignored
    # every other tokenization of this text comes back with one more token (an engine
    # whose tokenizer does not answer alike: the toy probe's finding)
    parser.add_argument("--flaky-tokenize")
    args, _ = parser.parse_known_args()
    if args.refuse:
        sys.exit(f"ValueError: {args.refuse}")
    jitter = (os.getpid() % 1000 + 1) * 1e-6 if args.jitter else 0.0
    engine = FakeEngine(load_offset=args.offset + jitter, kv_tokens=args.kv or None)
    build = args.build
    calls: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *rest: object) -> None:
            pass

        def _reply(self, body: dict[str, Any]) -> None:
            status, answer = engine.answer(self.path, body)
            if self.path == "/tokenize" and body.get("prompt") == args.flaky_tokenize:
                calls.append(1)
                if len(calls) % 2 == 0:
                    answer = {**answer, "tokens": [*answer["tokens"], 0]}
            if self.path == "/version":
                answer = {**answer, "build": build}
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._reply({})

        def do_POST(self) -> None:
            time.sleep(args.slow)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            prompt = body.get("prompt") or [[]]
            if self.path == "/v1/completions":
                time.sleep(args.slow_completion)
            if (args.dies_above and self.path == "/v1/completions"
                    and max(map(len, prompt if isinstance(prompt[0], list) else [prompt]))
                    > args.dies_above):
                os._exit(1)
            self._reply(body)

    ThreadingHTTPServer((args.host, args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
