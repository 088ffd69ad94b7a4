"""A sweep's results: the lines it prints, the table (Parquet and CSV), the plot, the leaderboard and `best/`."""
from __future__ import annotations

import json
import math
import os
import tempfile
from typing import Any, Callable

from tfos_jobs.contracts.epoch_line import EpochLine
from tfos_jobs.contracts.sweep_dir import SweepDir
from tfos_jobs.errors import ConfigError
from tfos_jobs.config.sweep import Goal, SweepConfig
from tfos_jobs.contracts.trial import FINISHED, TrialResult, TrialStatus
from tfos_jobs.storage import Storage

COLUMNS = ("trial", "status", "value", "epochs_run", "seconds", "started", "finished", "host", "pid", "error")


def ranked(sweep: SweepConfig, rows: list[TrialResult]) -> list[TrialResult]:
    """Completed trials with a finite metric, best first; ties go to the earlier trial."""
    sign = -1 if sweep.goal == Goal.MAXIMIZE else 1
    done = [r for r in rows if r["status"] == TrialStatus.COMPLETED and _finite(r["value"])]
    return sorted(done, key=lambda r: (sign * (r["value"] or 0.0), r["trial"]))  # every value is finite here


def best(sweep: SweepConfig, rows: list[TrialResult]) -> TrialResult | None:
    top = ranked(sweep, rows)
    return top[0] if top else None


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def frame(sweep: SweepConfig, rows: list[TrialResult]):
    """One row per trial: number, status, the metric (named as in the sweep), each parameter."""
    import pandas as pd

    records = []
    for r in sorted(rows, key=lambda r: r["trial"]):
        rec = {"trial": r["trial"], "status": r["status"], sweep.metric: r.get("value")}
        rec.update({k: r.get(k) for k in COLUMNS if k not in rec and k != "value"})
        for p in sweep.params:
            rec[p.column] = r["settings"].get(p.key)
        records.append(rec)
    df = pd.DataFrame.from_records(records)
    for p in sweep.params:  # a categorical of mixed kinds (e.g. 64 and "auto") is stored as text
        if p.type == "categorical" and len({type(v) for v in df[p.column].dropna()}) > 1:
            df[p.column] = df[p.column].astype(str)
    df["started"] = pd.to_datetime(df["started"], unit="s")
    df["finished"] = pd.to_datetime(df["finished"], unit="s")
    return df


def write_table(storage: Storage, sweep_dir: str, sweep: SweepConfig, rows: list[TrialResult]) -> str:
    """`results.parquet` and `results.csv`, replaced whole each time."""
    df = frame(sweep, rows)
    base = SweepDir(sweep_dir).results
    with tempfile.TemporaryDirectory(prefix="tfos-results-") as tmp:
        # microsecond timestamps: Spark cannot read pandas' nanosecond ones
        df.to_parquet(f"{tmp}/t.parquet", index=False, coerce_timestamps="us", allow_truncated_timestamps=True)
        storage.upload_file(f"{tmp}/t.parquet", f"{base}.parquet")
        df.to_csv(f"{tmp}/t.csv", index=False)
        storage.upload_file(f"{tmp}/t.csv", f"{base}.csv")
    return base


def leaderboard(sweep: SweepConfig, rows: list[TrialResult], top: int = 10) -> str:
    """The best trials first, then how many were stopped early or failed."""
    names = [p.column for p in sweep.params]
    header = ["rank", "trial", sweep.metric, *names, "epochs", "seconds"]
    body = [[str(i + 1), f"{r['trial']:03d}", f"{r['value']:.4f}", *(_fmt(r["settings"].get(p.key)) for p in sweep.params),
             str(r["epochs_run"]), f"{r['seconds']:.0f}"] for i, r in enumerate(ranked(sweep, rows)[:top])]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(header)]
    lines = [f"leaderboard ({sweep.goal} {sweep.metric}):", "  " + "  ".join(h.rjust(w) for h, w in zip(header, widths))]
    lines += ["  " + "  ".join(c.rjust(w) for c, w in zip(b, widths)) for b in body]
    for status in (TrialStatus.PRUNED, TrialStatus.FAILED, TrialStatus.CANCELLED):
        trials = [f"{r['trial']:03d}" for r in rows if r["status"] == status]
        if trials:
            lines.append(f"  {status}: {', '.join(trials)}")
    return "\n".join(lines)


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def plot(storage: Storage, sweep_dir: str, sweep: SweepConfig, rows: list[TrialResult]) -> str:
    """`sweep.png`: the metric against each parameter, and over trials with the best so far."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    panels = len(sweep.params) + 1
    cols = min(3, panels)
    nrows = math.ceil(panels / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.6 * cols, 3.6 * nrows), squeeze=False)
    flat = list(axes.flat)
    shown = [r for r in rows if _finite(r["value"]) and r["status"] in (TrialStatus.COMPLETED, TrialStatus.PRUNED)]
    styles = {TrialStatus.COMPLETED: dict(color="tab:blue", marker="o", label="completed"),
              TrialStatus.PRUNED: dict(color="tab:gray", marker="x", label="stopped early")}
    top = best(sweep, rows)
    for ax, p in zip(flat, sweep.params):
        for status, style in styles.items():
            pts = [r for r in shown if r["status"] == status]
            if pts:
                ax.scatter([_axis_value(p, r["settings"][p.key]) for r in pts], [r["value"] for r in pts], **style)
        if top:
            ax.scatter([_axis_value(p, top["settings"][p.key])], [top["value"]], marker="*", s=220,
                       color="tab:green", zorder=3, label="best")
        if p.values is not None:
            ax.set_xticks(range(len(p.values)), [str(v) for v in p.values])
            ax.set_xlim(-0.5, len(p.values) - 0.5)
        elif p.scale == "log":
            ax.set_xscale("log")
        elif p.type == "int":
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel(p.column)
        ax.set_ylabel(sweep.metric)
        ax.grid(alpha=0.3)
    ax = flat[len(sweep.params)]
    for status, style in styles.items():
        pts = [r for r in shown if r["status"] == status]
        if pts:
            ax.scatter([r["trial"] for r in pts], [r["value"] for r in pts], **style)
    done = sorted((r for r in shown if r["status"] == TrialStatus.COMPLETED), key=lambda r: r["trial"])
    if done:
        running, xs, ys = None, [], []
        for r in done:
            value = r["value"]
            if value is not None and (running is None or
                                      (value > running if sweep.goal == Goal.MAXIMIZE else value < running)):
                running = value
            xs.append(r["trial"])
            ys.append(running)
        last = max(r["trial"] for r in rows)
        ax.step(xs + [last], ys + [ys[-1]], where="post", color="tab:green", label="best so far")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("trial")
    ax.set_ylabel(sweep.metric)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # no trial with a value yet: nothing to name
        ax.legend(fontsize=8)
    for extra in flat[panels:]:
        extra.set_visible(False)
    failed = sum(r["status"] == TrialStatus.FAILED for r in rows)
    fig.suptitle(f"{sweep.algorithm} sweep, {len(rows)} trials ({failed} failed): {sweep.goal} {sweep.metric}")
    fig.tight_layout()
    path = SweepDir(sweep_dir).plot
    with tempfile.TemporaryDirectory(prefix="tfos-plot-") as tmp:
        fig.savefig(f"{tmp}/plot.png", dpi=110)
        storage.upload_file(f"{tmp}/plot.png", path)
    plt.close(fig)
    return path


def _axis_value(p, value: Any) -> Any:
    """Listed values sit at their position in the list, in the order the sweep file gives."""
    return list(p.values).index(value) if p.values is not None and value in p.values else value


def export_best(storage: Storage, sweep_dir: str, sweep: SweepConfig, rows: list[TrialResult]) -> TrialResult | None:
    """The best trial's SavedModel and its row as `<sweep_dir>/best/` (replaced whole)."""
    top = best(sweep, rows)
    if top is None:
        return None
    directory = SweepDir(sweep_dir)
    with tempfile.TemporaryDirectory(prefix="tfos-best-") as tmp:
        local = SweepDir(tmp)  # best/ laid out here, then published whole
        os.makedirs(local.best)
        storage.download(directory.trial(top["trial"]).saved_model, local.best_model)
        with open(local.best_row, "w", encoding="utf-8") as fh:
            json.dump({"metric": sweep.metric, "goal": sweep.goal, **top}, fh, indent=2)
        storage.replace_dir(local.best, directory.best)
    return top


def epoch_line(sweep: SweepConfig, number: int, line: EpochLine) -> str:
    """A trial's finished epoch, as the sweep prints it."""
    value = line.metrics.get(sweep.metric)
    shown = f"{sweep.metric} {value:.4f}" if value is not None else ""
    return (f"  trial {number:03d} epoch {line.epoch}/{line.epochs}  {shown}  "
            f"loss {line.metrics.get('loss', float('nan')):.4f}  {line.examples_per_sec:,.0f} ex/s")


def finished_line(sweep: SweepConfig, result: TrialResult, rows: list[TrialResult], total: int,
                  running: int) -> str:
    """A trial's end, with the sweep's count and best so far."""
    n, status = result["trial"], result["status"]
    value = f"{sweep.metric} {result['value']:.4f}" if result["value"] is not None else ""
    what = result["error"] if status == TrialStatus.FAILED else value
    top = best(sweep, rows)
    best_text = f"best trial {top['trial']:03d} ({sweep.metric} {top['value']:.4f})" if top else "no best yet"
    done = sum(r["status"] in FINISHED for r in rows)
    return (f"trial {n:03d} {status} in {result['seconds']:.0f} s: {what}  "
            f"[{done}/{total} done, {running} running; {best_text}]")


def finish(storage: Storage, sweep_dir: str, sweep: SweepConfig, results: dict[int, TrialResult], total: int,
           seconds: float, log: Callable[[str], None]) -> TrialResult | None:
    """The table, the plot, best/ and the leaderboard at the sweep's end; returns the best row."""
    rows = [results[n] for n in sorted(results)]
    if not rows:
        raise ConfigError("the sweep ran no trial (is the time budget too small?)")
    table = write_table(storage, sweep_dir, sweep, rows)
    plot(storage, sweep_dir, sweep, rows)
    top = export_best(storage, sweep_dir, sweep, rows)
    log(leaderboard(sweep, rows))
    counts = {s: sum(r["status"] == s for r in rows) for s in TrialStatus}
    log(f"sweep finished in {seconds:.0f} s: " + ", ".join(f"{v} {k.value}" for k, v in counts.items() if v)
        + (f"; {total - len(rows)} not run" if len(rows) < total else ""))
    log(f"results: {table}.parquet, {table}.csv; plot: {SweepDir(sweep_dir).plot}")
    if top:
        log(f"best: trial {top['trial']:03d}, {sweep.metric} {top['value']:.4f}; model: {SweepDir(sweep_dir).best_model}")
    else:
        log("no trial completed: no best model")
    return top
