"""Showing a run's progress on the terminal: the runner's Observer, drawn with rich."""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.console import RenderableType
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from servediff.cli.console import err
from servediff.evidence import Phase


def _load(arm: str, load: int, phase: Phase) -> str:
    return f"{arm} {'cost load' if phase == 'cost' else 'load'} {load}"


class RichObserver:
    """Progress on the terminal: a bar per load and cell and one for the whole run (its
    position and ETA). Where stderr is not a terminal (a log file, nohup, CI) the bars
    cannot redraw, so every step is a plain line instead, each with its position and ETA."""

    def __init__(self, on_drift: Callable[[list[str]], RenderableType] | None = None) -> None:
        # the drift table of the arms whose drift loads are done: shown as each finishes
        self.on_drift = on_drift
        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), console=err, transient=False,
        )
        self.plain = not err.is_terminal
        self._task: TaskID | None = None
        self._loading: TaskID | None = None
        self._overall: TaskID | None = None
        self.loads = self.cells = 0  # to measure in this run
        self.load_no = self.cells_done = 0
        self.started = time.monotonic()

    def __enter__(self) -> RichObserver:
        if not self.plain:
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def run_starting(self, loads: int, cells: int) -> None:
        # a run of its own: `servediff bisect` runs one per build with one observer
        self.loads, self.cells, self.started = loads, cells, time.monotonic()
        self.load_no = self.cells_done = 0
        self.say(f"{loads} loads and {cells} cells to measure")
        if not self.plain:
            self._overall = self.progress.add_task(f"whole run: {self.position()}", total=cells)

    def position(self) -> str:
        """`cell 7 of 26, load 3 of 8, 4:10 elapsed, about 9:30 left`."""
        elapsed = time.monotonic() - self.started
        text = (f"cell {min(self.cells_done + 1, self.cells)} of {self.cells}, load "
                f"{self.load_no} of {self.loads}, {clock(elapsed)} elapsed")
        if self.cells_done:
            left = elapsed / self.cells_done * (self.cells - self.cells_done)
            text += f", about {clock(left)} left"
        return text

    def say(self, line: str) -> None:
        """A plain progress line (only where the bars cannot be drawn)."""
        if self.plain:
            self.progress.console.print(line, markup=False, highlight=False, soft_wrap=True)

    def note(self, message: str) -> None:
        self.progress.console.print(f"[dim]{escape(message)}[/dim]", markup=True, highlight=False)

    def load_starting(self, arm: str, load: int, attempt: int, phase: Phase) -> None:
        again = f" (attempt {attempt})" if attempt > 1 else ""
        if attempt == 1:
            self.load_no += 1
        if self._overall is not None:
            self.progress.update(self._overall, description=f"whole run: {self.position()}")
        self.say(f"[{self.position()}] {_load(arm, load, phase)}: cold start{again}")
        if not self.plain:
            self._loading = self.progress.add_task(
                f"{_load(arm, load, phase)} ({self.load_no}/{self.loads}): cold start{again}",
                total=None)

    def load_ready(self, arm: str, load: int, seconds: float, phase: Phase) -> None:
        self.say(f"[{self.position()}] {_load(arm, load, phase)}: ready in {seconds:.1f}s")
        if self._loading is not None:
            self.progress.update(self._loading, total=1, completed=1,
                                 description=f"{_load(arm, load, phase)} ({self.load_no}/"
                                 f"{self.loads}): ready in {seconds:.1f}s")
            self._loading = None

    def cell_starting(self, name: str, total: int) -> None:
        self.say(f"[{self.position()}] {name}: {total} steps")
        if not self.plain:
            self._task = self.progress.add_task(f"  {name}", total=total)

    def cell_advanced(self, done: int) -> None:
        if self._task is not None:
            self.progress.update(self._task, completed=done)

    def drift_finished(self, done: list[str], pending: list[str]) -> None:
        if self.on_drift is None:
            return
        try:
            table = self.on_drift(done)
        except Exception as exc:  # a view must never stop a measurement
            self.note(f"drift table not shown yet: {exc}")
            return
        console = self.progress.console
        if pending:
            console.print(f"[bold]Drift so far[/bold]: the drift loads of {', '.join(done)} "
                          f"are done; those of {', '.join(pending)} are not all measured yet",
                          markup=True, highlight=False)
        console.print(table)
        console.print("[dim]" + ("more drift loads come next" if pending else
                                 "the cost loads come next") +
                      "; the whole verdict follows at the end[/dim]", markup=True)

    def cell_finished(self, name: str, seconds: float) -> None:
        self.cells_done += 1
        if self._overall is not None:
            self.progress.update(self._overall, completed=self.cells_done,
                                 description=f"whole run: {self.position()}")
        self.say(f"[{self.position()}] {name}: done in {seconds:.1f}s")
        if self._task is not None:
            self.progress.update(self._task, description=f"  {name} ({seconds:.1f}s)")
            self._task = None


def clock(seconds: float) -> str:
    """12:05 (minutes:seconds), or 1:02:05 past an hour."""
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"
