"""Showing a run's progress on the terminal: the runner's Observer, drawn with rich."""

from __future__ import annotations

from collections.abc import Callable

from rich.console import RenderableType
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
    def __init__(self, on_drift: Callable[[], RenderableType] | None = None) -> None:
        # the drift table so far: shown when an arm's drift loads are done
        self.on_drift = on_drift
        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), console=err, transient=False,
        )
        self._task: TaskID | None = None
        self._loading: TaskID | None = None

    def __enter__(self) -> RichObserver:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def note(self, message: str) -> None:
        self.progress.console.print(f"[dim]{message}[/dim]", markup=True, highlight=False)

    def load_starting(self, arm: str, load: int, attempt: int, phase: Phase) -> None:
        again = f" (attempt {attempt})" if attempt > 1 else ""
        self._loading = self.progress.add_task(f"{_load(arm, load, phase)}: cold start{again}",
                                               total=None)

    def load_ready(self, arm: str, load: int, seconds: float, phase: Phase) -> None:
        if self._loading is not None:
            self.progress.update(self._loading, total=1, completed=1,
                                 description=f"{_load(arm, load, phase)}: ready in "
                                 f"{seconds:.1f}s")
            self._loading = None

    def cell_starting(self, name: str, total: int) -> None:
        self._task = self.progress.add_task(f"  {name}", total=total)

    def cell_advanced(self, done: int) -> None:
        if self._task is not None:
            self.progress.update(self._task, completed=done)

    def drift_finished(self, done: list[str], pending: list[str]) -> None:
        if self.on_drift is None:
            return
        try:
            table = self.on_drift()
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
        if self._task is not None:
            self.progress.update(self._task, description=f"  {name} ({seconds:.1f}s)")
            self._task = None
