"""What a sweep tells an observer (experiment tracking, say) as it runs.

`jobs.sweep.driver.job.run(..., observer=...)` calls these on the driver's sweep thread. The
base class does nothing, so an observer overrides only what it needs. An observer that raises
never fails the sweep: `Guarded` logs a warning and the sweep goes on.
"""
from __future__ import annotations

from typing import Any, Callable, Concatenate, ParamSpec

from tfos_jobs.contracts.epoch_line import EpochLine
from tfos_jobs.contracts.trial import TrialResult
from tfos_jobs.config.sweep import SweepConfig


class SweepObserver:
    def sweep_started(self, sweep: SweepConfig, sweep_dir: str, total: int) -> None:
        """Before the first trial starts; `total`: the trials the sweep runs (finished ones included).
        `sweep.storage` comes with its password masked."""

    def trial_started(self, number: int, settings: dict[str, Any]) -> None:
        """Trial `number` (from 1) starts, or starts again after a stop, with these settings by config key."""

    def trial_epoch(self, number: int, line: EpochLine) -> None:
        """One finished epoch of a trial, once each."""

    def trial_finished(self, number: int, result: TrialResult) -> None:
        """A trial's row of the results, `status` included: completed, pruned, failed, or cancelled (stopped by the time
        budget or an interrupt: it runs again when the sweep is resumed)."""

    def sweep_finished(self, best: TrialResult | None, rows: list[TrialResult], best_model: str | None) -> None:
        """After the results, the plot and best/ are written: the best completed trial's row
        (None when none completed), every trial's row, and the path of best/saved_model (None
        without a best). Not called when the sweep stops on an error or an interrupt."""


P = ParamSpec("P")


class Guarded:
    """Calls an observer's method, logging (not raising) what it raises. The method is named by
    `SweepObserver`'s own (`notify(SweepObserver.trial_started, n, settings)`), so that its name
    and its arguments are checked; the observer's override of it is the one called."""

    def __init__(self, observer: SweepObserver | None, log: Callable[[str], None]):
        self.observer, self.log = observer, log

    def __call__(self, method: Callable[Concatenate[SweepObserver, P], None], *args: P.args, **kwargs: P.kwargs) -> None:
        if self.observer is None:
            return
        name = method.__name__
        try:
            getattr(self.observer, name)(*args, **kwargs)
        except Exception as e:
            self.log(f"warning: the sweep observer's {name} failed ({type(e).__name__}: {e}); the sweep goes on")
