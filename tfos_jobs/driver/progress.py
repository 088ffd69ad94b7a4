"""Live epoch lines on the driver while the cluster trains, and the learning curve at the end."""
from __future__ import annotations

import sys
from typing import Any, Callable

from tfos_jobs.progress_log import read_progress

SHOWN = ("loss", "auc", "accuracy", "rmse", "val_loss", "val_auc", "val_accuracy", "val_rmse")
BAR = 24


def format_epoch(e: dict[str, Any]) -> str:
    done = round(BAR * e["epoch"] / e["epochs"])
    metrics = "  ".join(f"{k} {e[k]:.4f}" for k in SHOWN if k in e)
    return (f"epoch {e['epoch']:>3}/{e['epochs']} [{'#' * done}{'.' * (BAR - done)}] {metrics}  "
            f"{e['examples_per_sec']:,.0f} ex/s  {e['seconds']:.1f} s")


class ProgressPrinter:
    """Call `poll()` now and then: prints each new epoch of `progress.jsonl` once."""

    def __init__(self, path: str, log: Callable[[str], None] = print):
        self.path, self.log, self.seen = path, log, 0

    def poll(self) -> None:
        epochs = read_progress(self.path)
        for e in epochs[self.seen:]:
            # On a terminal, first clear the line Spark's console progress bar may be drawing on.
            self.log(("\r\x1b[K" if self.log is print and sys.stdout.isatty() else "") + format_epoch(e))
        self.seen = max(self.seen, len(epochs))


def plot_learning_curve(epochs: list[dict[str, Any]], path: str, title: str) -> None:
    """Loss and the main quality metric per epoch, train and eval, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    x = [e["epoch"] for e in epochs]
    metric = next((m for m in ("auc", "accuracy", "rmse") if m in epochs[0]), None)
    panels = [("loss", "loss")] + ([(metric, metric)] if metric else [])
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.6), squeeze=False)
    for ax, (key, label) in zip(axes[0], panels):
        ax.plot(x, [e[key] for e in epochs], marker="o", label=f"train {label}")
        if f"val_{key}" in epochs[0]:
            ax.plot(x, [e[f"val_{key}"] for e in epochs], marker="o", label=f"eval {label}")
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
