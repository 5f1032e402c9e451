"""Reading the machine's conditions for a cell: CPU, load, memory, versions, GPUs.

Cheap reads only (procfs, package metadata, NVML when installed), so taking
them per cell costs nothing measurable.
"""

from __future__ import annotations

import contextlib
import os
import platform
import time
from functools import cache
from importlib import metadata

from servediff.evidence import Conditions, GpuReading

PACKAGES = ("servediff", "torch", "transformers", "numpy", "httpx")


@cache
def _cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _meminfo() -> dict[str, int]:
    out: dict[str, int] = {}
    with contextlib.suppress(OSError), open("/proc/meminfo", encoding="utf-8") as fh:
        for line in fh:
            key, _, rest = line.partition(":")
            out[key] = int(rest.split()[0]) // 1024
    return out


@cache
def _packages() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def _gpus() -> list[GpuReading]:
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
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            gpus.append(GpuReading(
                index=i,
                name=pynvml.nvmlDeviceGetName(h),
                memory_used_mb=int(mem.used) // 2**20,
                memory_total_mb=int(mem.total) // 2**20,
                temperature_c=pynvml.nvmlDeviceGetTemperature(h, 0),
                utilization_pct=pynvml.nvmlDeviceGetUtilizationRates(h).gpu,
                sm_clock_mhz=pynvml.nvmlDeviceGetClockInfo(h, 1),
            ))
    finally:
        pynvml.nvmlShutdown()
    return gpus


def read_conditions() -> Conditions:
    mem = _meminfo()
    return Conditions(
        time=time.time(),
        cpu_model=_cpu_model(),
        cpu_count=os.cpu_count() or 0,
        loadavg=os.getloadavg(),
        mem_total_mb=mem.get("MemTotal"),
        mem_available_mb=mem.get("MemAvailable"),
        python=platform.python_version(),
        packages=_packages(),
        gpus=_gpus(),
    )
