"""HTTP to an engine, written once: explicit timeouts, retries only where safe.

GETs (health, info) are idempotent and retried on connection errors; POSTs
that compute are never retried here, since a retry would hide a hang or a
crash that the runner must record.

A POST that has not answered after `timeout_s` is not yet a failure when the
client can watch the engine (`Watch`): from then on the engine's activity is
checked every `stall_window_s`. An engine that did no work for a whole window
is hung (`EngineRequestError.stalled`); one that keeps working is waited on,
up to `give_up_s`. Without a watch (an external endpoint), `timeout_s` is the
bound.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

import httpx

from servediff.engines.activity import Activity, worked
from servediff.errors import EngineRequestError


@dataclass(frozen=True)
class Watch:
    """How a slow request is told from a hung one: the engine's activity, the window
    without any activity that makes a hang, and the bound past which a busy engine is
    given up on."""

    activity: Activity
    stall_window_s: float
    give_up_s: float


class EngineClient:
    """HTTP to one engine: explicit timeouts on every call, and past a request's timeout
    the engine's own activity decides between slow and hung (`Watch`)."""

    def __init__(
        self,
        base_url: str,
        timeout_s: float,
        transport: httpx.BaseTransport | None = None,
        watch: Watch | None = None,
    ) -> None:
        self.base_url = base_url
        self.timeout_s = timeout_s
        self.watch = watch
        bound = max(timeout_s, watch.give_up_s) if watch else timeout_s
        self._http = httpx.Client(
            base_url=base_url,
            timeout=httpx.Timeout(bound, connect=5.0),
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def get_json(self, path: str, retries: int = 2, timeout_s: float | None = None) -> Any:
        last: Exception | None = None
        for attempt in range(retries + 1):
            try:
                response = self._http.get(
                    path, timeout=timeout_s if timeout_s is not None else httpx.USE_CLIENT_DEFAULT
                )
                return self._decode(path, response)
            except httpx.TransportError as exc:
                last = exc
                time.sleep(0.2 * (attempt + 1))
        raise EngineRequestError(f"GET {path}: {type(last).__name__}: {last}")

    def get_text(self, path: str, timeout_s: float = 10.0) -> str:
        try:
            response = self._http.get(path, timeout=timeout_s)
        except httpx.HTTPError as exc:
            raise EngineRequestError(f"GET {path}: {type(exc).__name__}: {exc}") from None
        if response.status_code != 200:
            raise EngineRequestError(f"GET {path}: HTTP {response.status_code}")
        return response.text

    def healthy(self, path: str, timeout_s: float = 2.0) -> bool:
        try:
            return self._http.get(path, timeout=timeout_s).status_code == 200
        except httpx.HTTPError:
            return False

    def post_json(self, path: str, payload: dict[str, Any]) -> Any:
        if self.watch is None:
            return self._post(path, payload)
        return self._watched(path, payload, self.watch)

    def _post(self, path: str, payload: dict[str, Any]) -> Any:
        try:
            response = self._http.post(path, json=payload)
        except httpx.TimeoutException as exc:
            busy = f", the engine still busy (gave up after {self.watch.give_up_s:g} s)" \
                if self.watch else ""
            raise EngineRequestError(f"POST {path}: timed out ({type(exc).__name__}){busy}",
                                     timed_out=True) from None
        except httpx.TransportError as exc:
            raise EngineRequestError(f"POST {path}: {type(exc).__name__}: {exc}") from None
        return self._decode(path, response)

    def _watched(self, path: str, payload: dict[str, Any], watch: Watch) -> Any:
        """The POST in a thread of its own; past `timeout_s`, wait only while the engine
        works. A hung request is left behind: it ends when the engine is stopped."""
        done: Future[Any] = Future()

        def send() -> None:
            try:
                done.set_result(self._post(path, payload))
            except BaseException as exc:  # handed to the waiting caller
                done.set_exception(exc)

        threading.Thread(target=send, name=f"POST {path}", daemon=True).start()
        t0 = time.monotonic()
        try:
            return done.result(timeout=self.timeout_s)
        except FutureTimeout:
            pass
        while True:
            cpu, wall = watch.activity.cpu_seconds(), time.monotonic()
            try:
                return done.result(timeout=watch.stall_window_s)
            except FutureTimeout:
                if not worked(watch.activity, cpu, wall):
                    raise EngineRequestError(
                        f"POST {path}: no answer after {time.monotonic() - t0:.1f} s and the "
                        f"engine did no work for {watch.stall_window_s:g} s (hung)",
                        timed_out=True, stalled=True) from None

    def post_stream(self, path: str, payload: dict[str, Any]) -> tuple[list[tuple[float, Any]],
                                                                      float]:
        """POST for server-sent events: each `data:` event's JSON with its arrival time after
        the request was sent, and the time of the whole. No retry; the client's timeout
        bounds each read."""
        t0 = time.monotonic()
        events: list[tuple[float, Any]] = []
        try:
            with self._http.stream("POST", path, json=payload) as response:
                if response.status_code != 200:
                    response.read()
                    self._decode(path, response)
                for line in response.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line.removeprefix("data:").strip()
                    if data == "[DONE]":
                        break
                    events.append((time.monotonic() - t0, json.loads(data)))
        except httpx.TimeoutException as exc:
            raise EngineRequestError(f"POST {path} (stream): timed out ({type(exc).__name__})",
                                     timed_out=True) from None
        except httpx.TransportError as exc:
            raise EngineRequestError(f"POST {path} (stream): {type(exc).__name__}: {exc}"
                                     ) from None
        except ValueError as exc:
            raise EngineRequestError(f"POST {path} (stream): an event is not JSON: {exc}"
                                     ) from None
        return events, time.monotonic() - t0

    def post_many(self, path: str, payloads: list[dict[str, Any]],
                  concurrency: int) -> list[Any]:
        """POST each payload with up to `concurrency` in flight; results in order.

        The first failure is raised after the requests already in flight finish,
        so the caller sees the same error it would have seen one at a time.
        """
        if concurrency <= 1 or len(payloads) <= 1:
            return [self.post_json(path, p) for p in payloads]
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            return list(pool.map(lambda p: self.post_json(path, p), payloads))

    @staticmethod
    def _decode(path: str, response: httpx.Response) -> Any:
        if response.status_code != 200:
            raise EngineRequestError(
                f"{response.request.method} {path}: HTTP {response.status_code}: "
                f"{response.text[:500]}", status=response.status_code,
            )
        try:
            return response.json()
        except ValueError:
            raise EngineRequestError(
                f"{response.request.method} {path}: response is not JSON: {response.text[:200]}"
            ) from None
