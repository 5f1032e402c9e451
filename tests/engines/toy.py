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
    server adds 0.001 to every logprob (a kernel changed between two builds); the builds
    in TOY_BROKEN (comma-separated) fail to build; TOY_SLOW: seconds each request waits."""

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
        return [*ToyAdapter.default_command, "--build", build, "--offset", self._offset(build),
                "--slow", os.environ.get("TOY_SLOW", "0")]


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
                          max_model_len=raw["max_model_len"], raw=raw)


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
    # an engine adapter's own flags (the embedded engine's, when a plan launches this
    # server in its place) are taken and ignored
    # every other tokenization of this text comes back with one more token (an engine
    # whose tokenizer does not answer alike: the toy probe's finding)
    parser.add_argument("--flaky-tokenize")
    args, _ = parser.parse_known_args()
    if args.refuse:
        sys.exit(f"ValueError: {args.refuse}")
    engine = FakeEngine(load_offset=args.offset)
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
            self._reply(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))

    ThreadingHTTPServer((args.host, args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
