"""Where the suite's CPU goes: the CPU seconds of each test module, printed at the end.

On the 2-core machines that run this suite the CPU is busy from start to end, so the wall
time is the CPU work divided by two, and a slow test is one that computes a lot, not one
that waits long. pytest's durations table says how long each test took beside the others;
this says what each module cost. Each test phase (set-up, call, tear-down) is charged the
CPU time of its test worker and of the processes it waited for during that phase: the
servediff runs it started, and through them the engines they stopped. A process whose
parent dies first is reaped by init and is not in the table: vLLM's engine-core and worker
processes (their API server is stopped with them) and Ray's workers, so the vLLM and Ray
rows are lower bounds. The engine set-ups that run in the background are not in it either.
"""

from __future__ import annotations

import resource
from collections import Counter
from collections.abc import Generator

import pytest
from _pytest.terminal import TerminalReporter

KEY = "cpu_s"
_last = [0.0]


def _cpu() -> float:
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
    _last[0] = _cpu()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> Generator[None, object, None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    now = _cpu()
    report.user_properties.append((KEY, round(now - _last[0], 3)))
    _last[0] = now


def pytest_terminal_summary(terminalreporter: TerminalReporter) -> None:
    per_module: Counter[str] = Counter()
    per_phase: Counter[str] = Counter()
    for reports in terminalreporter.stats.values():
        for report in reports:
            for name, value in getattr(report, "user_properties", ()):
                if name == KEY:
                    per_module[report.nodeid.split("::")[0]] += value
                    per_phase[f"{report.when:8} {report.nodeid}"] += value
    if not per_module:
        return
    terminalreporter.write_sep("=", "the 15 test phases that cost the most CPU seconds")
    for phase, seconds in per_phase.most_common(15):
        terminalreporter.write_line(f"{seconds:9.1f}  {phase}")
    terminalreporter.write_sep("=", "CPU seconds per test module (tests and what they waited for)")
    for module, seconds in per_module.most_common(15):
        terminalreporter.write_line(f"{seconds:9.1f}  {module}")
    terminalreporter.write_line(f"{sum(per_module.values()):9.1f}  in all "
                                f"({len(per_module)} modules)")
