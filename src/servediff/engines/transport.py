"""HTTP to an engine, written once: explicit timeouts, retries only where safe.

GETs (health, info) are idempotent and retried on connection errors; POSTs
that compute are never retried here, since a retry would hide a hang or a
crash that the runner must record.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from servediff.errors import EngineRequestError


class EngineClient:
    def __init__(
        self,
        base_url: str,
        timeout_s: float,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url
        self._http = httpx.Client(
            base_url=base_url,
            timeout=httpx.Timeout(timeout_s, connect=5.0),
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
        try:
            response = self._http.post(path, json=payload)
        except httpx.TimeoutException as exc:
            raise EngineRequestError(f"POST {path}: timed out ({type(exc).__name__})",
                                     timed_out=True) from None
        except httpx.TransportError as exc:
            raise EngineRequestError(f"POST {path}: {type(exc).__name__}: {exc}") from None
        return self._decode(path, response)

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
