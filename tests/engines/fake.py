"""An in-process fake of the embedded engine, for runner unit tests (no socket, no process).

`FakeEngine` answers the embedded engine's dialect (health, version, tokenize,
`/v1/completions` for scoring with prompt logprobs and for greedy generation)
through an httpx MockTransport, with logprobs that are a pure function of the
ids, so every load agrees unless it is given a per-load offset (a kernel
chosen per load). It can refuse to start, die after a number of completion
requests or on any prompt above a length, like a crashing server, report a KV
pool and serve a prefix cache. `FakeLauncher` hands one out per launch, in the
order the scenarios are given or made from the launch command, and stands in
for the process; `FakeAdapter` is the embedded engine's adapter that also reads
the fake's KV pool.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from servediff.engines.base import EngineInfo
from servediff.engines.transformers import TransformersAdapter
from servediff.engines.transport import EngineClient, Watch
from servediff.evidence import Stop

ENTRY = "tests.engines.fake:FakeAdapter"
CONTEXT = 4096


@dataclass
class FakeEngine:
    starts: bool = True
    # exits at start with code 1, this line last in its log (a flag it refuses)
    refuses: str | None = None
    # completion requests answered before the engine dies (None: never)
    dies_after: int | None = None
    # the engine dies on any prompt longer than this (None: never)
    dies_above: int | None = None
    # added to every logprob: a kernel chosen per load, the same all through the load
    load_offset: float = 0.0
    # the KV pool /version reports (None: none), and whether a prefix cache serves
    # repeated prefixes (None: no cached-token counts reported)
    kv_tokens: int | None = None
    prefix_cache: bool | None = None
    completions: int = 0
    alive: bool = True
    seen: list[list[int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.alive = self.starts and self.refuses is None

    def handle(self, request: httpx.Request) -> httpx.Response:
        if not self.alive:
            raise httpx.ConnectError("connection refused", request=request)
        body = json.loads(request.content or b"{}")
        if request.url.path == "/v1/completions":
            self.completions += 1
            prompt = body.get("prompt") or [[]]
            longest = max(map(len, prompt if isinstance(prompt[0], list) else [prompt]))
            if (self.dies_after is not None and self.completions > self.dies_after) or (
                    self.dies_above is not None and self.dies_above < longest <= CONTEXT):
                self.alive = False
                raise httpx.RemoteProtocolError("server disconnected", request=request)
        status, body = self.answer(request.url.path, body)
        return httpx.Response(status, json=body)

    def answer(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """(HTTP status, JSON body) for one request, as the embedded engine answers it."""
        if path == "/health":
            return 200, {"status": "ok"}
        if path == "/version":
            return 200, {"engine": "fake", "versions": {"fake": "1"}, "bos_token_id": 1,
                         "max_model_len": CONTEXT,
                         **({"capacity": {"kv_tokens": self.kv_tokens}}
                            if self.kv_tokens else {})}
        if path == "/tokenize":
            return 200, {"tokens": [2 + sum(map(ord, w)) % 500
                                    for w in str(body["prompt"]).split()]}
        if path == "/v1/completions":
            prompt = body["prompt"]
            if max(map(len, prompt if prompt and isinstance(prompt[0], list) else [prompt])
                   ) > CONTEXT:
                return 400, {"error": f"prompt longer than the context ({CONTEXT} tokens)"}
            return 200, self.complete(body)
        return 404, {"error": path}

    @staticmethod
    def logprob(context: list[int], token: int) -> float:
        return -1.0 - (sum(context[-4:]) * 31 + token) % 97 / 50

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt = body["prompt"]
        batch = prompt if prompt and isinstance(prompt[0], list) else [prompt]
        if body.get("prompt_logprobs") is not None:
            choices = [{"index": i, "text": "", "prompt_logprobs": [None] + [
                {str(t): {"logprob": self.logprob(ids[:pos], t) + self.load_offset,
                          "rank": 1}}
                for pos, t in enumerate(ids[1:], start=1)]} for i, ids in enumerate(batch)]
            return {"choices": choices, "usage": {
                "prompt_tokens": sum(map(len, batch)),
                "prompt_tokens_per_prompt": [len(ids) for ids in batch]}}
        ids = batch[0]
        out: list[int] = []
        for _ in range(int(body.get("max_tokens", 1))):
            out.append(2 + sum(ids + out) % 500)
        usage: dict[str, Any] = {"prompt_tokens": len(ids)}
        if self.prefix_cache is not None:
            reused = max((_common(ids, old) for old in self.seen), default=0)
            usage["prompt_tokens_details"] = {
                "cached_tokens": reused // 16 * 16 if self.prefix_cache else 0}
        self.seen.append(list(ids))
        return {"choices": [{"index": 0, "text": " ".join(map(str, out)), "logprobs": {
            "tokens": [f"token_id:{t}" for t in out],
            "token_logprobs": [self.logprob(ids, t) + self.load_offset for t in out]}}],
            "usage": usage}


def _common(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class FakeAdapter(TransformersAdapter):
    """The embedded engine's adapter, reading the KV pool the fake reports."""

    name = "fake"

    def info(self, client: EngineClient) -> EngineInfo:
        info = super().info(client)
        return dataclasses.replace(info, capacity=dict(info.raw.get("capacity", {})))


@dataclass
class FakeProcess:
    engine: FakeEngine
    log_path: Path
    pid: int
    started_at: float = field(default_factory=time.time)
    stopped: bool = False

    @property
    def returncode(self) -> int | None:
        if self.engine.refuses is not None:
            return 1
        return None if self.engine.alive and not self.stopped else -9

    def alive(self) -> bool:
        return self.engine.alive and not self.stopped

    def exited_within(self, seconds: float) -> bool:
        return not self.alive()

    def exit_status(self, wait_s: float) -> tuple[int | None, str | None] | None:
        if self.alive():
            return None
        return (1, None) if self.engine.refuses is not None else (-9, "SIGKILL")

    def stop(self, grace_s: float) -> Stop:
        died = not self.engine.alive
        self.stopped = True
        self.engine.alive = False
        return Stop(died_before_stop=died, returncode=-9 if died else -15,
                    signal="SIGKILL" if died else "SIGTERM", needed_kill=False,
                    stop_seconds=0.0, port_closed=True, group_gone=True, log_tail="")


@dataclass
class FakeLauncher:
    """One FakeEngine per launch, from `scenarios` in order, then from `make` (the launch
    command and the launch's number), else healthy ones."""

    scenarios: list[FakeEngine] = field(default_factory=list)
    launched: list[FakeProcess] = field(default_factory=list)
    make: Callable[[list[str], int], FakeEngine] | None = None

    def __call__(self, argv: list[str], env: dict[str, str], log_path: Path, host: str,
                 port: int) -> FakeProcess:
        engine = (self.scenarios.pop(0) if self.scenarios else
                  self.make(argv, len(self.launched)) if self.make else FakeEngine())
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("a") as log:
            log.write(f"fake engine for {' '.join(argv)}\n")
            if engine.refuses is not None:
                log.write(f"Traceback (most recent call last):\n  ...\n{engine.refuses}\n")
        proc = FakeProcess(engine, log_path, pid=4_000_000 + len(self.launched))
        self.launched.append(proc)
        return proc

    def client(self, url: str, timeout_s: float, watch: Watch | None) -> EngineClient:
        """The client factory: requests go to the engine of the newest launch."""
        engine = self.launched[-1].engine
        return EngineClient(url, timeout_s, transport=httpx.MockTransport(engine.handle))
