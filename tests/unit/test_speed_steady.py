"""The speed probe's steady mode: streamed requests with a bound on those in flight, a new
one started as one finishes, Poisson arrivals at a rate; and the stream it reads."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import httpx
import numpy as np
import pytest

from servediff.engines.base import Streamed
from servediff.engines.completions import parse_stream, stream_payload
from servediff.engines.transport import EngineClient
from servediff.errors import PlanError
from servediff.plan import resolve_plan
from servediff.probes.speed import SpeedSettings, _steady


def sse(*events: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + \
        b"data: [DONE]\n\n"


def test_a_stream_is_read_event_by_event_with_its_usage():
    body = sse({"choices": [{"text": "a"}]}, {"choices": [{"text": "b"}]},
               {"choices": [{"text": ""}]},  # a chunk without text is not a token
               {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 2}})
    seen: list[dict[str, Any]] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    client = EngineClient("http://engine", 30, transport=httpx.MockTransport(handle))
    events, total = client.post_stream("/v1/completions", stream_payload("m", [1, 2], 2))
    assert len(events) == 4 and total >= events[-1][0] >= 0
    got = parse_stream(events, total)
    assert (got.completion_tokens, got.prompt_tokens, len(got.chunk_s)) == (2, 12, 2)
    assert seen[0]["stream"] is True and seen[0]["ignore_eos"] is True
    assert seen[0]["min_tokens"] == seen[0]["max_tokens"] == 2


def test_a_stream_timed_by_arrival_gives_ttft_and_inter_token_gaps():
    got = Streamed(chunk_s=[0.5, 0.6, 0.8], total_s=0.85, completion_tokens=3)
    assert got.ttft_s == 0.5
    assert got.itl_s == pytest.approx([0.1, 0.2])


@dataclass
class Engine:
    """Streams `max_tokens` tokens a fixed gap apart, and counts those in flight."""

    gap_s: float = 0.05
    in_flight: int = 0
    most: int = 0
    starts: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def stream(self, client: object, ids: list[int], max_tokens: int,
               options: object) -> Streamed:
        with self.lock:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            self.starts.append(time.monotonic())
        t0 = time.monotonic()
        times = []
        for _ in range(max_tokens):
            time.sleep(self.gap_s)
            times.append(time.monotonic() - t0)
        with self.lock:
            self.in_flight -= 1
        return Streamed(chunk_s=times, total_s=times[-1], completion_tokens=max_tokens,
                        prompt_tokens=len(ids))


def context(engine: Engine) -> Any:
    return SimpleNamespace(adapter=engine, engine=None, options=None)


def test_steady_keeps_level_in_flight_and_starts_one_as_one_finishes():
    engine = Engine()
    spec = SpeedSettings(mode="steady", requests=9, max_tokens=4, levels=[3])
    sample = _steady(context(engine), spec, {"replicate": 0, "warmup": False,
                                             "prompt_tokens": 5, "concurrency": 3},
                     [[1] * 5 for _ in range(9)], 3, 5, seed=1)
    assert sample.status == "ok" and sample.mode == "steady" and sample.requests == 9
    # never more than 3 at once, and 3 at once at some point (not one after another)
    assert engine.most == 3
    assert sample.generated == 4 and sample.achieved_prompt_tokens == 5
    assert sample.ttft_s is not None and sample.itl_s is not None and sample.itl_s > 0
    assert sample.decode_tok_s is not None and sample.throughput_tok_s is not None


def test_steady_at_a_rate_starts_no_request_before_its_arrival():
    engine = Engine(gap_s=0.001)
    spec = SpeedSettings(mode="steady", requests=6, max_tokens=2, levels=[6],
                         request_rate=20.0)
    t0 = time.monotonic()
    _steady(context(engine), spec, {"replicate": 0, "warmup": False, "prompt_tokens": 3,
                                    "concurrency": 6}, [[1] * 3 for _ in range(6)], 6, 3,
            seed=7)
    arrivals = np.cumsum(np.random.default_rng(7).exponential(1 / 20.0, 6))
    starts = sorted(s - t0 for s in engine.starts)
    # each request began at its Poisson arrival or later, never before
    assert all(start >= arrival - 0.002 for start, arrival in zip(starts, arrivals,
                                                                   strict=True))


def test_an_engine_error_in_a_steady_replicate_is_recorded_not_raised():
    class Failing(Engine):
        def stream(self, *args: object) -> Streamed:
            from servediff.errors import EngineRequestError
            raise EngineRequestError("POST /v1/completions (stream): HTTP 500")

    spec = SpeedSettings(mode="steady", requests=2, max_tokens=2, levels=[1])
    sample = _steady(context(Failing()), spec, {"replicate": 0, "warmup": False,
                                                "prompt_tokens": 3, "concurrency": 1},
                     [[1], [2]], 1, 3, seed=1)
    assert sample.status == "error" and "HTTP 500" in (sample.error or "")


def plan_with(engine: str, speed: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {"engine": engine, "model": "smollm2", "arms": {"a": {}},
                            "probes": {"speed": speed}}
    return body


def test_steady_mode_needs_an_engine_that_streams(tmp_path):
    with pytest.raises(PlanError, match="does not stream"):
        resolve_plan(plan_with("transformers", {"mode": "steady"}), "p.toml", tmp_path)
    plan, _ = resolve_plan(plan_with("vllm", {"mode": "steady", "requests": 8}), "p.toml",
                           tmp_path)
    with pytest.raises(PlanError, match="settings of mode"):
        resolve_plan(plan_with("vllm", {"requests": 8}), "p.toml", tmp_path)
    assert plan.probes.get(SpeedSettings).per_replicate(4) == 8
    assert SpeedSettings(mode="steady").per_replicate(4) == 12
    assert SpeedSettings().per_replicate(4) == 4
