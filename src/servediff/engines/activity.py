"""Is an engine making progress? Its process group's CPU time and its GPUs' activity.

A request that has not answered after its timeout is not yet a hang: a slow
engine on a busy machine is still computing. `EngineActivity` tells the two
apart from what the engine does, not from a wall clock: the CPU seconds its
whole process group spends (psutil), and whether a GPU that one of its
processes holds is busy (NVML). A hung engine spends neither; a slow one does.
A spinning deadlock looks busy: it is caught by the hard bound the caller
puts on every request instead.
"""

from __future__ import annotations

import contextlib
import time
from typing import Protocol

import psutil

from servediff import gpu
from servediff.engines.groups import group_members

# CPU seconds per wall second below which a process group counts as idle: a health
# check or a log line costs far less, one core computing costs 1.0.
IDLE_CPU_SHARE = 0.02


class Activity(Protocol):
    """Something that can say whether an engine worked during a wall-clock window."""

    def cpu_seconds(self) -> float: ...

    def gpu_busy(self) -> bool | None: ...


class EngineActivity:
    """The activity of every live process in the engine's process group."""

    def __init__(self, pgid: int) -> None:
        self.pgid = pgid

    def _members(self) -> list[int]:
        return sorted({self.pgid, *group_members(self.pgid)})

    def cpu_seconds(self) -> float:
        total = 0.0
        for pid in self._members():
            with contextlib.suppress(psutil.Error):
                times = psutil.Process(pid).cpu_times()
                # children_* count reaped children, which also worked for this engine
                total += times.user + times.system + times.children_user + \
                    times.children_system
        return total

    def gpu_busy(self) -> bool | None:
        return gpu.busy(set(self._members()))


def worked(activity: Activity, start_cpu: float, start_wall: float) -> bool:
    """Did the engine work since (`start_cpu`, `start_wall`)? CPU share above idle, or a
    GPU it holds is busy now."""
    wall = time.monotonic() - start_wall
    cpu = activity.cpu_seconds() - start_cpu
    if wall > 0 and cpu / wall >= IDLE_CPU_SHARE:
        return True
    return bool(activity.gpu_busy())
