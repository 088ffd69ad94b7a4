"""Live epoch lines on the driver while the cluster trains, and the learning curve at the end."""
from __future__ import annotations

import sys
from typing import Callable

from tfos_jobs.contracts.epoch_line import EpochLine
from tfos_jobs.contracts.metrics import StepBreakdown, StepProfile
from tfos_jobs.progress_log import ProgressLog

SHOWN = ("loss", "auc", "accuracy", "rmse", "val_loss", "val_auc", "val_accuracy", "val_rmse")
BAR = 24


def format_epoch(e: EpochLine) -> str:
    """The built-in models' figures in `SHOWN` order, then any other a model compiled by its own function reports
    (its metrics, then their eval values)."""
    done = round(BAR * e.epoch / e.epochs)
    others = sorted((k for k in e.metrics if k not in SHOWN), key=lambda k: (k.startswith("val_"), k))
    metrics = "  ".join(f"{k} {e.metrics[k]:.4f}" for k in (*(k for k in SHOWN if k in e.metrics), *others))
    return (f"epoch {e.epoch:>3}/{e.epochs} [{'#' * done}{'.' * (BAR - done)}] {metrics}  "
            f"{e.examples_per_sec:,.0f} ex/s  {e.seconds:.1f} s")


EARLIER = "  (trained before the resume)"


class ProgressPrinter:
    """Call `poll()` now and then: prints each epoch the run reported since, once, and hands it to `on_epoch` (the
    tracking server's run). The epochs a resumed run starts with were trained by the run it resumes, and say so."""

    def __init__(self, progress: ProgressLog, log: Callable[[str], None] = print,
                 on_epoch: Callable[[EpochLine], None] | None = None):
        self.progress, self.log, self.on_epoch, self.seen = progress, log, on_epoch, 0
        self.earlier = len(progress.lines())

    def poll(self) -> None:
        epochs = self.progress.lines()
        for i, e in enumerate(epochs[self.seen:], start=self.seen):
            # On a terminal, first clear the line Spark's console progress bar may be drawing on.
            self.log(("\r\x1b[K" if self.log is print and sys.stdout.isatty() else "") + format_epoch(e)
                     + (EARLIER if i < self.earlier else ""))
            if self.on_epoch is not None:
                self.on_epoch(e)
        self.seen = max(self.seen, len(epochs))


def step_breakdown(epochs: list[EpochLine], profile: StepProfile | None, steps_per_epoch: int,
                   parallel_steps: int) -> StepBreakdown | None:
    """The nodes' step profile (cluster.node.step_profile) with the step time measured in training added: the mean over
    the epochs after the first (which traces the functions). A step is one batch on one worker; with `parallel_steps`
    workers taking steps independently (parameter_server) a worker's step lasts that many intervals between steps."""
    if not profile or not epochs:
        return None
    steady = epochs[1:] or epochs
    seconds = sum(e.seconds - e.eval_seconds for e in steady) / len(steady)
    step_ms = 1000 * seconds / steps_per_epoch * parallel_steps
    other = step_ms - profile["compute_ms"] - profile["exchange_ms"]
    return StepBreakdown(**profile, step_ms=round(step_ms, 3), other_ms=round(other, 3))


def format_breakdown(b: StepBreakdown) -> str:
    how = f" ({b['gradient_exchange']})" if b.get("gradient_exchange") else ""
    return (f"per step (one batch on one worker): {b['step_ms']:.2f} ms = compute {b['compute_ms']:.2f} "
            f"+ exchange{how} {b['exchange_ms']:.2f} + other {b['other_ms']:.2f}; input alone {b['input_ms']:.2f} ms "
            f"(overlaps the step)")


def plot_learning_curve(epochs: list[EpochLine], path: str, title: str) -> None:
    """Loss and the main quality metric per epoch, train and eval, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    x = [e.epoch for e in epochs]
    metric = next((m for m in ("auc", "accuracy", "rmse") if m in epochs[0].metrics), None)
    panels = [("loss", "loss")] + ([(metric, metric)] if metric else [])
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.6), squeeze=False)
    for ax, (key, label) in zip(axes[0], panels):
        ax.plot(x, [e.metrics[key] for e in epochs], marker="o", label=f"train {label}")
        if f"val_{key}" in epochs[0].metrics:
            ax.plot(x, [e.metrics[f"val_{key}"] for e in epochs], marker="o", label=f"eval {label}")
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
