"""Reading the machine's conditions around a cell: CPU, load, memory, processes, GPUs.

Cheap reads only (procfs through psutil, package metadata, NVML when
installed), so taking them before and after every cell costs nothing
measurable. CPU use is measured since the previous reading: each process's
share (psutil keeps the per-process counters between readings), so the
reading after a cell says what every process did during it. The engine's
own process group, servediff itself and the processes that started it are not
foreign, on the CPU and on the GPU; every other process that used CPU, and every
other compute process on a GPU, is.
"""

from __future__ import annotations

import contextlib
import os
import platform
import socket
import time
from functools import cache
from importlib import metadata
from typing import Any

import psutil

from servediff.engines.groups import group_members
from servediff.evidence import Conditions, GpuReading, ProcessUse

PACKAGES = ("servediff", "torch", "transformers", "numpy", "httpx")
TOP = 8
# Clock reductions that slow a measurement (idle, application or user clocks do not).
THROTTLES = {
    "HwSlowdown": "hardware slowdown", "HwThermalSlowdown": "hardware thermal slowdown",
    "HwPowerBrakeSlowdown": "hardware power brake", "SwThermalSlowdown": "software thermal",
    "SwPowerCap": "power cap",
}


@cache
def _cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


@cache
def _packages() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def ours(engine_pgid: int | None) -> set[int]:
    """servediff's own processes and the engine's process group: not foreign."""
    me = psutil.Process()
    mine = {me.pid, *(c.pid for c in me.children(recursive=True))}
    with contextlib.suppress(psutil.Error):
        mine |= {p.pid for p in me.parents()}  # the shell or test runner that started us
    if engine_pgid:
        mine |= {engine_pgid, *group_members(engine_pgid)}
    return mine


def processes(exclude: set[int]) -> list[ProcessUse]:
    """Every other process's CPU use since the previous reading, busiest first."""
    out = []
    for proc in psutil.process_iter(["name"]):
        if proc.pid in exclude:
            continue
        with contextlib.suppress(psutil.Error):
            share = proc.cpu_percent(None) / 100.0
            if share > 0:
                out.append(ProcessUse(pid=proc.pid, name=str(proc.info["name"]),
                                      cpu_cores=round(share, 3)))
    return sorted(out, key=lambda p: -p.cpu_cores)


def _gpus(engine: set[int], mine: set[int] | None = None) -> list[GpuReading]:
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return []
    gpus = []
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            gpus.append(_gpu(pynvml, i, engine, mine or set()))
    finally:
        pynvml.nvmlShutdown()
    return gpus


def _gpu(nvml: Any, index: int, engine: set[int], mine: set[int]) -> GpuReading:
    h = nvml.nvmlDeviceGetHandleByIndex(index)
    mem = nvml.nvmlDeviceGetMemoryInfo(h)
    reasons = None
    with contextlib.suppress(nvml.NVMLError):
        mask = nvml.nvmlDeviceGetCurrentClocksEventReasons(h)
        reasons = [words for name, words in THROTTLES.items()
                   if mask & getattr(nvml, f"nvmlClocksEventReason{name}", 0)]
    power = None
    with contextlib.suppress(nvml.NVMLError):
        power = round(nvml.nvmlDeviceGetPowerUsage(h) / 1000, 1)
    compute = [p.pid for p in nvml.nvmlDeviceGetComputeRunningProcesses(h)]
    not_foreign = engine | mine
    return GpuReading(
        index=index, name=nvml.nvmlDeviceGetName(h),
        memory_used_mb=int(mem.used) // 2**20, memory_total_mb=int(mem.total) // 2**20,
        temperature_c=nvml.nvmlDeviceGetTemperature(h, 0),
        utilization_pct=nvml.nvmlDeviceGetUtilizationRates(h).gpu,
        sm_clock_mhz=nvml.nvmlDeviceGetClockInfo(h, 1),
        mem_clock_mhz=nvml.nvmlDeviceGetClockInfo(h, 2), power_w=power, throttle=reasons,
        compute_pids=compute, foreign_pids=[pid for pid in compute if pid not in not_foreign])


def gpu_models() -> list[str]:
    return sorted(g.name for g in _gpus(set()))


def read_conditions(engine_pgid: int | None = None, node: str | None = None,
                    gpus_given: str | None = None) -> Conditions:
    """The box now; `node` and `gpus_given` name where the engine runs (a Ray node, its
    CUDA_VISIBLE_DEVICES), so that a cell read alone says where it was measured."""
    mem = psutil.virtual_memory()
    exclude = ours(engine_pgid)
    others = processes(exclude)
    freq = None
    with contextlib.suppress(Exception):
        current = psutil.cpu_freq()
        freq = round(current.current, 1) if current else None
    engine = set(group_members(engine_pgid)) | {engine_pgid} if engine_pgid else set()
    return Conditions(
        time=time.time(), host=socket.gethostname(), cpu_model=_cpu_model(),
        cpu_count=os.cpu_count() or 0, loadavg=os.getloadavg(), cpu_freq_mhz=freq,
        mem_total_mb=mem.total // 2**20, mem_available_mb=mem.available // 2**20,
        python=platform.python_version(), packages=_packages(), gpus=_gpus(engine, exclude),
        engine_pids=sorted(engine),
        foreign_cpu_cores=round(sum(p.cpu_cores for p in others), 3), foreign=others[:TOP],
        node=node, gpus_given=gpus_given, system=platform.system())
