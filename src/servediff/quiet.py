"""The quiet box: a gate before a load, so that no cost comes from a busy machine.

Before every cost load (and, if the plan says so, every drift load) servediff
looks at the machine over a short window and checks four things:

- no compute process of anyone else on a GPU;
- other processes' CPU use and the load average under the plan's limits;
- no GPU clock held down (thermal, power, hardware slowdown);
- the previous load's GPU memory returned (within the plan's margin of what
  was in use before the run's first load).

A machine that is not quiet is waited on, up to `quiet.wait_s`. Then the
plan decides: `refuse` (the default) stops the run with a one-line reason and
keeps every finished cell; `mark` goes on and the load record carries the
gate's finding, so that every speed or TTFT claim built from its cells is
reported as measured on a busy machine, never as a plain cost.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import psutil

from servediff.conditions import ours, processes, read_conditions
from servediff.errors import BusyMachineError
from servediff.evidence import Conditions, Gate
from servediff.plan import QuietSpec


def look(spec: QuietSpec, baseline_mb: dict[int, int],
         engine_up: bool = False) -> tuple[list[str], Conditions]:
    """Why the machine is not quiet now (empty: quiet), from a reading over the window.
    With the load's own engine up (`engine_up`), the GPU memory it holds says nothing of
    an earlier load's, and is not checked."""
    exclude = ours(None)
    processes(exclude)  # start every process's CPU counter now
    time.sleep(spec.window_s)
    now = read_conditions()
    reasons = []  # the GPU's first: another's kernels there weigh most
    for gpu in now.gpus:
        if gpu.foreign_pids:
            reasons.append(f"GPU {gpu.index}: compute processes of others: "
                           f"{', '.join(_named(p) for p in gpu.foreign_pids)}")
        if gpu.throttle:
            reasons.append(f"GPU {gpu.index}: clocks held down ({', '.join(gpu.throttle)})")
        used, before = gpu.memory_used_mb or 0, baseline_mb.get(gpu.index)
        if not engine_up and before is not None and used - before > spec.max_gpu_memory_mb:
            reasons.append(f"GPU {gpu.index}: {used - before} MiB more in use than before the "
                           f"run's first load (limit {spec.max_gpu_memory_mb} MiB): the "
                           "previous load's memory did not come back")
    if (foreign := now.foreign_cpu_cores or 0.0) > spec.max_foreign_cpu:
        top = ", ".join(f"{p.name} (pid {p.pid}) {p.cpu_cores:.2f}" for p in now.foreign[:3])
        reasons.append(f"other processes use {foreign:.2f} CPU cores (limit "
                       f"{spec.max_foreign_cpu:g}): {top}")
    load = now.loadavg[0] / max(now.cpu_count, 1)
    if load > spec.max_load_per_core:
        reasons.append(f"load average {now.loadavg[0]:.2f} on {now.cpu_count} cores "
                       f"(limit {spec.max_load_per_core:g} per core)")
    return reasons, now


def _named(pid: int) -> str:
    try:
        return f"{psutil.Process(pid).name()} (pid {pid})"
    except psutil.Error:  # gone, or in another pid namespace
        return f"pid {pid}"


def gate(spec: QuietSpec, baseline_mb: dict[int, int], what: str,
         say: Callable[[str], None], engine_up: bool = False) -> Gate:
    """Wait until the machine is quiet, up to `spec.wait_s`; then refuse or mark."""
    t0 = time.monotonic()
    reasons, now = look(spec, baseline_mb, engine_up)
    while reasons and time.monotonic() - t0 < spec.wait_s:
        say(f"waiting for a quiet machine before {what}: {reasons[0]}")
        time.sleep(min(5.0, max(0.0, spec.wait_s - (time.monotonic() - t0))))
        reasons, now = look(spec, baseline_mb, engine_up)
    found = Gate(quiet=not reasons, action=spec.action,
                 waited_s=round(time.monotonic() - t0, 3), reasons=reasons,
                 foreign_cpu_cores=now.foreign_cpu_cores, loadavg=now.loadavg[0],
                 foreign=now.foreign[:3])
    if reasons and spec.action == "refuse":
        raise BusyMachineError(
            f"the machine is not quiet enough for {what}: {reasons[0]}"
            + (f" (and {len(reasons) - 1} more)" if len(reasons) > 1 else "")
            + f"; waited {found.waited_s:.0f} s. Finished cells are kept: run the same "
            "command again when the machine is quiet, or set quiet.action = \"mark\" to "
            "measure anyway with the claims marked as from a busy machine", gate=found)
    return found


def baseline() -> dict[int, int]:
    """GPU memory in use before the run's first load, per GPU."""
    return {g.index: g.memory_used_mb or 0 for g in read_conditions().gpus}
