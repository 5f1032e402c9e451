"""Requests that arrive together are computed together: the embedded engine's batching.

A serving engine batches whatever requests are waiting when it starts a step,
so what a request is computed with depends on what else arrived with it. The
embedded engine does the same at the granularity of a request: one worker
thread owns the model; a request that arrives while it is busy, or within
`window_s` of the first one it picks up, joins the next forward pass as rows of
one padded batch (up to `max_rows` rows, requests of one kind only: scoring,
or generation of one length). A request alone is computed alone, as before;
concurrency above 1 then measures batch composition, as it does on vLLM or
llama-server. `max_rows = 1` serves one request at a time.

torch-free: the engine hands in the function that computes a batch.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Generic, TypeVar

Row = TypeVar("Row")
Result = TypeVar("Result")


@dataclass
class _Waiting(Generic[Row, Result]):
    key: Hashable
    rows: list[Row]
    done: Future[list[Result]] = field(default_factory=Future)


class Batcher(Generic[Row, Result]):
    """Scoring requests that arrive together, padded into one forward pass (the embedded
    engine's batching)."""

    def __init__(self, compute: Callable[[Hashable, list[Row]], list[Result]],
                 window_s: float = 0.005, max_rows: int = 8) -> None:
        self.compute = compute
        self.window_s = window_s
        self.max_rows = max_rows
        self.sizes: list[int] = []  # rows of every pass, in order (the engine reports them)
        self._queue: list[_Waiting[Row, Result]] = []
        self._cv = threading.Condition()
        threading.Thread(target=self._serve, name="batcher", daemon=True).start()

    def submit(self, key: Hashable, rows: list[Row]) -> list[Result]:
        """Compute `rows` (with whatever arrives with them); blocks until done."""
        waiting: _Waiting[Row, Result] = _Waiting(key, rows)
        with self._cv:
            self._queue.append(waiting)
            self._cv.notify()
        return waiting.done.result()

    def _take(self) -> list[_Waiting[Row, Result]]:
        """The oldest request and those of its kind behind it, up to `max_rows` rows; a
        request is never split, so one larger than `max_rows` goes alone."""
        with self._cv:
            key = self._queue[0].key
            taken: list[_Waiting[Row, Result]] = []
            rows = 0
            for waiting in list(self._queue):
                if waiting.key != key:
                    continue
                if taken and rows + len(waiting.rows) > self.max_rows:
                    break
                taken.append(waiting)
                rows += len(waiting.rows)
                self._queue.remove(waiting)
            return taken

    def _serve(self) -> None:
        while True:
            with self._cv:
                while not self._queue:
                    self._cv.wait()
            if self.window_s > 0 and self.max_rows > 1:
                time.sleep(self.window_s)  # requests sent together reach the queue together
            taken = self._take()
            rows = [row for waiting in taken for row in waiting.rows]
            try:
                results = self.compute(taken[0].key, rows)
            except Exception as exc:  # every request of the pass gets the engine's error
                for waiting in taken:
                    waiting.done.set_exception(exc)
                continue
            self.sizes.append(len(rows))
            start = 0
            for waiting in taken:
                waiting.done.set_result(results[start:start + len(waiting.rows)])
                start += len(waiting.rows)
