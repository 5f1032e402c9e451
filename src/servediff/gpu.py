"""GPU memory held by given processes, read through NVML (nvidia-ml-py).

Used around every stop: an engine worker that survives its parent and keeps
device memory makes the next "cold" load not cold. Without NVML or a GPU
every answer is None ("not applicable"), never a guess.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def _nvml() -> Iterator[Any]:
    try:
        import pynvml
    except ImportError:
        yield None
        return
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        yield None
        return
    try:
        yield pynvml
    finally:
        pynvml.nvmlShutdown()


def names() -> list[str]:
    """The GPUs NVML sees here (empty without NVML or a GPU)."""
    with _nvml() as nvml:
        if nvml is None:
            return []
        return [str(nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(i)))
                for i in range(nvml.nvmlDeviceGetCount())]


def uuids() -> list[str]:
    """The UUIDs of the GPUs NVML sees here, sorted (empty without NVML or a GPU)."""
    with _nvml() as nvml:
        if nvml is None:
            return []
        return sorted(str(nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(i)))
                      for i in range(nvml.nvmlDeviceGetCount()))


def memory_by_pid(pids: set[int]) -> dict[int, int] | None:
    """MiB of device memory each of `pids` holds on any GPU; None without NVML."""
    with _nvml() as nvml:
        if nvml is None:
            return None
        held: dict[int, int] = {}
        for i in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            for proc in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if proc.pid in pids:
                    used = proc.usedGpuMemory or 0
                    held[proc.pid] = held.get(proc.pid, 0) + int(used) // 2**20
        return held


def busy(pids: set[int]) -> bool | None:
    """Whether a GPU on which one of `pids` holds memory is computing now (utilisation
    above 0 in NVML's last sample); None without NVML, False when none of them is on a
    GPU."""
    with _nvml() as nvml:
        if nvml is None:
            return None
        for i in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            holders = {p.pid for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)}
            if holders & pids and nvml.nvmlDeviceGetUtilizationRates(handle).gpu > 0:
                return True
        return False
