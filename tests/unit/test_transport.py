"""Slow is not hung: a request past its timeout is waited on while the engine works.

A real HTTP server in this process answers after computing (CPU busy) or after
sleeping (no work at all). The watch reads this process's CPU time, so the
verdict comes from what the "engine" does, never from how fast the machine is:
the busy handler must be answered however slow the machine, the sleeping one
must be called hung.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psutil
import pytest

from servediff.engines.activity import EngineActivity, worked
from servediff.engines.transport import EngineClient, Watch
from servediff.errors import EngineRequestError


class Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        end = time.monotonic() + body["seconds"]
        if self.path == "/burn":
            while time.monotonic() < end:
                sum(i * i for i in range(5_000))
        else:
            time.sleep(body["seconds"])
        data = json.dumps({"done": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class ThisProcess:
    """The activity of the test process alone (the server runs in it)."""

    def cpu_seconds(self) -> float:
        times = psutil.Process().cpu_times()
        return times.user + times.system

    def gpu_busy(self) -> bool | None:
        return None


@pytest.fixture()
def url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    for made in CLIENTS:
        made.close()
    CLIENTS.clear()


CLIENTS: list[EngineClient] = []


def client(url: str, give_up_s: float = 120.0) -> EngineClient:
    made = EngineClient(url, 0.3, watch=Watch(ThisProcess(), stall_window_s=0.5,
                                              give_up_s=give_up_s))
    CLIENTS.append(made)
    return made


def test_a_busy_engine_past_the_timeout_is_waited_on(url: str):
    t0 = time.monotonic()
    assert client(url).post_json("/burn", {"seconds": 1.5}) == {"done": "/burn"}
    assert time.monotonic() - t0 >= 1.5  # answered long after the 0.3 s timeout


def test_an_engine_that_does_no_work_is_hung(url: str):
    with pytest.raises(EngineRequestError) as caught:
        client(url).post_json("/sleep", {"seconds": 60})
    assert caught.value.timed_out and caught.value.stalled
    assert "did no work" in str(caught.value)


def test_a_busy_engine_is_given_up_on_at_the_bound(url: str):
    with pytest.raises(EngineRequestError) as caught:
        client(url, give_up_s=1.0).post_json("/burn", {"seconds": 60})
    assert caught.value.timed_out and not caught.value.stalled
    assert "still busy" in str(caught.value)


def test_without_a_watch_the_timeout_is_the_bound(url: str):
    with pytest.raises(EngineRequestError) as caught:
        CLIENTS.append(EngineClient(url, 0.3))
        CLIENTS[-1].post_json("/burn", {"seconds": 5})
    assert caught.value.timed_out and not caught.value.stalled


@pytest.mark.parametrize("code, busy", [("while True: sum(range(1000))", True),
                                        ("import time; time.sleep(60)", False)])
def test_engine_activity_reads_the_whole_process_group(code: str, busy: bool):
    # The "engine" forks a worker that does the work, as vLLM's engine core does.
    script = f"import os\nif os.fork() == 0:\n    {code}\nelse:\n    import time; time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    try:
        activity = EngineActivity(proc.pid)
        time.sleep(0.5)
        # one-second windows: a busy worker is seen working in one of them however busy
        # the machine (on an oversubscribed CI box it once got too little CPU in the first
        # second); a sleeping one in none
        seen = []
        for _ in range(60 if busy else 3):
            cpu, wall = activity.cpu_seconds(), time.monotonic()
            time.sleep(1.0)
            seen.append(worked(activity, cpu, wall))
            if seen[-1]:
                break
        assert any(seen) is busy, seen
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
