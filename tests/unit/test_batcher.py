"""The embedded engine's batching: requests that arrive together share one pass, and each
gets back exactly its own rows (or the pass's error)."""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable

import pytest

from servediff.engines.batcher import Batcher


def test_requests_sent_together_share_a_pass_and_get_their_own_rows():
    passes: list[tuple[Hashable, list[int]]] = []
    entered, release = threading.Event(), threading.Event()

    def compute(key: Hashable, rows: list[int]) -> list[str]:
        entered.set()
        release.wait(30)  # the first pass holds the model while the others arrive
        passes.append((key, rows))
        return [f"{key}:{r}" for r in rows]

    batcher: Batcher[int, str] = Batcher(compute, window_s=0.0, max_rows=4)
    results: dict[int, list[str]] = {}

    def send(i: int, rows: list[int], key: str = "score") -> threading.Thread:
        thread = threading.Thread(target=lambda: results.update({i: batcher.submit(key, rows)}))
        thread.start()
        return thread

    threads = [send(0, [0])]
    assert entered.wait(30)  # request 0 is being computed, alone
    for i in (1, 2, 3):
        threads.append(send(i, [10 * i, 10 * i + 1]))
        while len(batcher._queue) < i:  # queued in this order
            time.sleep(0.001)
    threads.append(send(9, [90], "generate"))
    while len(batcher._queue) < 4:
        time.sleep(0.001)
    release.set()
    for t in threads:
        t.join(timeout=30)
    # every request got its own rows back, in its own order
    assert results[0] == ["score:0"] and results[9] == ["generate:90"]
    for i in (1, 2, 3):
        assert results[i] == [f"score:{10 * i}", f"score:{10 * i + 1}"]
    # then the waiting scoring requests together up to 4 rows (a request is never split),
    # oldest first; the generation request in a pass of its own
    assert passes == [("score", [0]), ("score", [10, 11, 20, 21]), ("score", [30, 31]),
                      ("generate", [90])]
    assert batcher.sizes == [1, 4, 2, 1]


def test_an_error_reaches_every_request_of_its_pass():
    def compute(key: Hashable, rows: list[int]) -> list[int]:
        raise ValueError("out of memory")

    batcher: Batcher[int, int] = Batcher(compute, window_s=0.0)
    with pytest.raises(ValueError, match="out of memory"):
        batcher.submit("score", [1])
    # the worker survives its error and serves the next request
    batcher.compute = lambda key, rows: [r * 2 for r in rows]
    assert batcher.submit("score", [3, 4]) == [6, 8]
