"""`docs/benchmarks.md` and its plots, from one run's figures.

Everything in the file comes from the run. What was changed for speed, with the figures measured
before and after, is kept by hand in `docs/tuning.md` (TUNING_LOG), which the file links."""
from __future__ import annotations

import os
from typing import Mapping

from benchmarks import records
from benchmarks.arguments import DEFAULT_OUTPUT
from benchmarks.harness import Figure, Result, fmt, ratio
from benchmarks.context import Run
from benchmarks.stages import hundredfold, serving, streaming
from benchmarks.stages.node_inputs import P16A_CHUNKS
from benchmarks.stages.registered import FREE_MLFLOW, FREE_OURS, KERAS_LOAD, TASKS, TFOS_PYFUNC
from tfos_jobs.topology import Role, Strategy


TUNING_LOG = "tuning.md"  # beside docs/benchmarks.md


def plots_dir(output: str) -> str:
    """docs/benchmarks.md -> docs/benchmarks/"""
    return os.path.splitext(output)[0]


def record_of(stage: str) -> str:
    """Where a run of one stage (`--only`) writes by default: beside the plots of the whole run,
    whose report links it (docs/benchmarks/p14.md)."""
    return os.path.join(plots_dir(DEFAULT_OUTPUT), f"{stage.lower()}.md")


def write(output: str, run: Run, machine: Mapping[str, str], *, command: str, date: str, wall_seconds: float,
          load: tuple[str, str], only: str | None = None) -> list[str]:
    """Write the markdown file and its PNGs; returns every path written."""
    out_dir = plots_dir(output)
    os.makedirs(out_dir, exist_ok=True)
    pngs = {"results": plot_results(run, f"{out_dir}/results.png")}
    if run.facts.get("training baselines"):  # a run of one stage (--only) draws only its own plots
        pngs["input"] = plot_input(run, f"{out_dir}/input_pipeline.png")
        pngs["scaling"] = plot_scaling(run, f"{out_dir}/scaling.png")
    if hundredfold.NAME in run.facts:
        pngs[hundredfold.NAME] = hundredfold.plot(run, f"{out_dir}/hundredfold.png")
    if streaming.NAME in run.facts:
        pngs[streaming.NAME] = streaming.plot(run, f"{out_dir}/streaming.png")
    rel = os.path.basename(out_dir)
    text = markdown(run, machine, command=command, date=date, wall_seconds=wall_seconds, load=load,
                    images={k: f"{rel}/{os.path.basename(p)}" for k, p in pngs.items()}, only=only,
                    records=[] if only else records.embedded(out_dir, rel))
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    with open(output, "w", encoding="utf-8") as fh:
        fh.write(text)
    return [output, *pngs.values()]


def _goal(r: Result) -> str:
    return f"{'≥' if r.goal_op == '>=' else '≤'} {fmt(r.goal)}" + (f" {r.measured.unit}" if r.baseline is None else "")


def _figure(f: Figure | None) -> str:
    if f is None:
        return "—"
    return f"{fmt(f.median)} {f.unit} ({f.spread()})"


def _value(r: Result) -> str:
    if r.baseline is None:
        worst = " (slowest run)" if r.measured.unit == "s" else " (the most of any run)"
        return f"{fmt(r.value)} {r.measured.unit}" + (worst if r.worst and len(r.measured.samples) > 1 else "")
    pairs = r.pair_ratios
    shown = f"**{fmt(r.value)}**"
    if len(pairs) > 1:
        shown += f" ({fmt(min(pairs))}–{fmt(max(pairs))})"
    return shown


def markdown(run: Run, machine: Mapping[str, str], *, command: str, date: str, wall_seconds: float,
             load: tuple[str, str], images: Mapping[str, str], only: str | None = None,
             records: list[str] = ()) -> str:
    """The report; `records`: the pages recorded apart, as its sections (`benchmarks.records`)."""
    met = sum(r.met for r in run.results)
    lines = [
        f"# Benchmarks: {only} alone" if only else "# Benchmarks",
        "",
        f"Written by `{command}` on {date}; the whole run took **{wall_seconds / 60:.1f} min** "
        f"(load average at start {load[0]}, at end {load[1]}). {met} of {len(run.results)} goals met.",
        "",
        "Each measurement runs against its baseline in the same process and the same run, alternating "
        "(A B, B A, A B…). A figure is the median of its repeats with the min–max range as spread; a ratio is "
        "measured median ÷ baseline median, followed by the range of the per-repeat ratios.",
        "",
        "| id | what | measured | baseline | ratio | goal | met |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in run.results:
        base = f"{r.baseline.name}: {_figure(r.baseline)}" if r.baseline else "—"
        lines.append(f"| {r.id} | {r.title} | {r.measured.name}: {_figure(r.measured)} | {base} | {_value(r)} | "
                     f"{_goal(r)} | {'yes' if r.met else '**no**'} |")
    lines += ["", f"![results]({images['results']})", ""]
    lines += _scaling_section(run, images.get("scaling", ""))
    lines += _input_section(run, images.get("input", ""))
    lines += hundredfold.section(run, images.get(hundredfold.NAME, ""))
    lines += streaming.section(run, images.get(streaming.NAME, ""))
    details = _details(run)
    lines += details if details[2:] != [""] else []
    lines += records
    lines += [] if only else [
        "## Tuning: what was changed, before and after", "",
        f"The changes made for speed, and the model changes that could cost it (the census demo's training speed and "
        f"eval AUC before and after), each with its figures, and what bounds the ratios that sit near their goals: "
        f"[{TUNING_LOG}]({TUNING_LOG}).", ""]
    lines += ["## Machine and versions", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in machine.items()]
    lines += ["", "## Sizes", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in run.sizes.items()]
    lines += ["", "## Time per stage", "", "| stage | seconds |", "|---|---|"]
    lines += [f"| {k} | {v:.0f} |" for k, v in run.stages.items()]
    lines += ["", "Run it again with `make bench` (or `tfos bench --config conf/census.toml`); "
              "`tfos bench --smoke` checks the harness on tiny data in about a minute.", ""]
    return "\n".join(lines)


def _scaling_section(run: Run, image: str) -> list[str]:
    """Examples/s and where a step's time goes, per TF cluster shape, against one process."""
    d, baselines = run.details, run.facts.get("training baselines", {})
    rows = [n for n in baselines if f"train {n}" in d]
    if Strategy.LOCAL not in rows or len(rows) < 2:
        return []
    lines = [
        "## Scaling: one process, 1–3 workers, parameter server",
        "",
        "Every row trains the same model on the same data; *÷ local* divides by the local strategy with as many "
        "examples per update. "
        "A step below is one batch on one worker: *compute* is that step alone in a non-distributed copy of "
        "the model, *exchange* the step's communication alone (the gradients' sum across workers, or the "
        "parameter servers' reads and updates), *other* the rest of the measured step (dispatch, waiting for the "
        "slowest worker, the cores shared with the other nodes); *input* is one batch from the node's input "
        "pipeline alone, which overlaps the step (`cluster/node/step_profile.py`). Milliseconds, medians; "
        "*start* is reservation to the first finished step.",
        "",
        "| configuration | examples/s | ÷ local (same batch) | step | compute | exchange | other | input | start (s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for n in rows:
        f = d[f"train {n}"]
        local = d[f"train {baselines[n]}"]
        parts = [d.get(f"step {n} {p}") for p in ("step_ms", "compute_ms", "exchange_ms", "other_ms", "input_ms")]
        cells = [fmt(x.median) if x and x.samples else "—" for x in parts]
        start = d.get(f"startup {n} to_first_step_seconds")
        cells.append(f"{fmt(start.median)} (max {fmt(start.high)})" if start and start.samples else "—")
        lines.append(f"| {f.name} | {fmt(f.median)} ({f.spread()}) | {fmt(ratio(f.median, local.median))} | "
                     + " | ".join(cells) + " |")
    return lines + ["", f"![scaling]({image})", ""]


def _input_section(run: Run, image: str) -> list[str]:
    d = run.details
    needed = ("input in memory", "input batch then parse", "input parse then batch", "train tfos", "train local")
    if not all(k in d for k in needed):
        return []
    memory, fast, slow, tfos, local = (d[k] for k in needed)
    lines = [
        "## Input pipeline alone vs training consumption",
        "",
        "| pipeline or consumer | records/s (median, spread) |",
        "|---|---|",
    ]
    for f in (memory, fast, slow, tfos, local):
        lines.append(f"| {f.name} | {fmt(f.median)} ({f.spread()}) |")
    lines += [
        "",
        f"A shard held in memory (what training reads when a worker's share fits `train.in_memory_mb`) gives "
        f"{fmt(ratio(memory.median, fast.median))}× the batches of the streaming reader, which reads "
        f"{fmt(ratio(fast.median, slow.median))}× as fast as parse-then-batch. In memory, the input delivers "
        f"{fmt(ratio(memory.median, local.median))}× what the local strategy consumes "
        f"({fmt(ratio(memory.median, tfos.median))}× two TFoS workers). "
        "(The pipeline here has the whole machine; in training it shares it with the model.)",
        "",
        f"![input pipeline]({image})",
        "",
    ]
    return lines


def _details(run: Run) -> list[str]:
    d = {r.id: r for r in run.results}
    lines = ["## Details", ""]
    if "P3" in d and "train seconds tfos" in run.details:
        lines.append(f"- **P3** whole training runs, start-up and export included: TFoS "
                     f"{_figure(run.details['train seconds tfos'])}, local {_figure(run.details['train seconds local'])}.")
    if "P6" in d and d["P6"].measured.samples:
        text = (f"- **P6** per TFoS run, reservation server start to the chief's first finished step: "
                f"{', '.join(fmt(x) for x in d['P6'].measured.samples)} s")
        reserved = run.details.get("startup reserved")
        if reserved and reserved.samples:
            text += f" (every node reserved after {', '.join(fmt(x) for x in reserved.samples)} s)"
        lines.append(text + ". Each run starts its TF nodes in fresh Python workers (a process that hosted a TF "
                            "node cannot host another), so every run includes importing TensorFlow on the executor.")
    if "P4" in d and "udf floor" in run.details:
        floor, p4 = run.details["udf floor"], d["P4"]
        lines.append(
            f"- **P4** floor: an Arrow UDF with the same input and output but no model runs at "
            f"{_figure(floor)}, {fmt(ratio(floor.median, p4.baseline.median))}× the in-process rate; with a model "
            "costing nothing the UDF could not beat that ratio. The real UDF reaches "
            f"{fmt(ratio(p4.measured.median, floor.median))}× the floor.")
    if "P4" in d and "udf struct" in run.details:
        struct = run.details["udf struct"]
        lines.append(f"- **P4** with one struct, `predict(struct(*))`, instead of the columns as arguments: "
                     f"{_figure(struct)}, {fmt(ratio(struct.median, d['P4'].measured.median))}× the argument form "
                     "(Spark builds a struct per row, the worker takes it apart).")
    if "P4" in d and "in-process codes" in run.details:
        codes = run.details["in-process codes"]
        lines.append(f"- **P4**'s baseline calls `serving_default` on raw columns; the UDF calls the model's "
                     f"`serving_codes` (lookups and crosses on distinct values, the same outputs). Called in-process "
                     f"on the same rows, encoded beforehand: {_figure(codes)}, "
                     f"{fmt(ratio(codes.median, d['P4'].baseline.median))}× `serving_default`; the UDF reaches "
                     f"{fmt(ratio(d['P4'].measured.median, codes.median))}× it.")
    if "P12" in d and TFOS_PYFUNC in run.details:
        tfos, ours, theirs = run.details[TFOS_PYFUNC], run.details[FREE_OURS], run.details[FREE_MLFLOW]
        load, tasks = run.details[KERAS_LOAD], run.details[TASKS]
        lines.append(
            f"- **P12** `mlflow.pyfunc.spark_udf` on version 1, the model as tfos registers it (its python_function "
            f"scores with the UDF's Scorer): {_figure(tfos)}, "
            f"{fmt(ratio(tfos.median, d['P12'].baseline.median))}× the same model logged with `mlflow.tensorflow`; "
            f"the UDF runs at {fmt(ratio(d['P12'].measured.median, tfos.median))}× it. With a model that costs "
            f"nothing on both sides, the no-op Arrow UDF {_figure(ours)} against tfos's python_function through "
            f"spark_udf {_figure(theirs)}: {fmt(ratio(ours.median, theirs.median))}×, the most the UDF can gain over "
            "spark_udf on tfos's registration. On a master named `local…` spark_udf loads MLflow's flavour again in "
            f"every task: {int(tasks.median)} tasks per query, {fmt(load.median)} s per load on the driver.")
    if "P11" in d:
        lines.append(
            f"- **P11** whole runs, start-up, export and publishing included: dataset on local files "
            f"{_figure(run.details['P11 local files seconds'])}, remote {_figure(run.details['P11 remote seconds'])}; "
            f"control server start to the first step (each node's shard read through Spark before it) "
            f"{_figure(run.details['P11 local files first step'])} vs {_figure(run.details['P11 remote first step'])}.")
    if "model fetch executor" in run.details:
        lines.append(
            f"- **Serving a model from the remote filesystem**: `register` (the driver fetches, checks and ships "
            f"it) {_figure(run.details['model fetch driver'])}; an executor's fetch of the archive and load of the "
            f"model in a new Python worker (first one-row query minus a warm one) "
            f"{_figure(run.details['model fetch executor'])}.")
    if "predict rows" in run.details:
        scored, plain = run.details["predict rows"], run.details["write rows"]
        lines.append(f"- **tfos predict** (joins, scoring, Parquet write, output check) runs at {_figure(scored)}; "
                     f"writing the same joined rows without a model runs at {_figure(plain)}: "
                     f"{fmt(ratio(scored.median, plain.median))}× ({run.sizes.get('predict rows', '')}).")
    if "P16a" in d and P16A_CHUNKS in run.details:
        chunks = run.details[P16A_CHUNKS]
        lines.append(f"- **P16a** with `train.node_inputs = \"chunks\"` (each file's bytes through Arrow to the "
                     f"node's task): {_figure(chunks)}, {fmt(ratio(chunks.median, d['P16a'].baseline.median))}× the "
                     "whole-file path.")
    if "P18a" in d and "P18 epoch checkpoints loss" in run.details:
        loss, again = run.details["P18 epoch checkpoints loss"], run.details["P18 epoch checkpoints again"]
        lines.append(f"- **P18** with epoch checkpoints only (`train.checkpoint_steps = 0`, as training was before "
                     f"step checkpoints): the next training step {fmt(loss.median)} s after the loss (range "
                     f"{loss.spread()}), {fmt(again.median)} steps trained again.")
    lines.append("")
    lines += serving.p4_cpu(run)
    lines += serving.batch_sizes(run)
    return lines


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _thousands(axis) -> None:
    from matplotlib.ticker import FuncFormatter

    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if abs(v) >= 100 else f"{v:g}"))


def plot_results(run: Run, path: str) -> str:
    """One panel per result: baseline and measured with their min-max, or each run against the goal."""
    plt = _plt()
    results = run.results
    cols = 3
    rows = max(1, -(-len(results) // cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    for ax in axes.flat[len(results):]:
        ax.axis("off")
    for ax, r in zip(axes.flat, results):
        colour = "tab:green" if r.met else "tab:red"
        if r.baseline is None:
            xs = list(range(1, len(r.measured.samples) + 1))
            ax.bar(xs, r.measured.samples, color=colour)
            ax.axhline(r.goal, color="black", linestyle="--", linewidth=1, label=f"goal {_goal(r)}")
            ax.set_xticks(xs)
            ax.set_xlabel("run")
            ax.legend(fontsize=8)
            title = f"{r.id}: {fmt(r.value)} s"
        else:
            figs = [r.baseline, r.measured]
            medians = [f.median for f in figs]
            errors = [[f.median - f.low for f in figs], [f.high - f.median for f in figs]]
            ax.bar([0, 1], medians, yerr=errors, capsize=6, color=["tab:gray", colour])
            ax.set_xticks([0, 1])
            ax.set_xticklabels([_short(f.name) for f in figs], fontsize=8)
            title = f"{r.id}: ratio {fmt(r.value)} (goal {_goal(r)})"
        ax.set_ylabel(r.measured.unit)
        _thousands(ax.yaxis)
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _short(name: str, width: int = 22) -> str:
    words, lines, line = name.split(), [], ""
    for w in words:
        if line and len(line) + 1 + len(w) > width:
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}".strip()
    lines.append(line)
    return "\n".join(lines)


def plot_input(run: Run, path: str) -> str:
    """Records/s of the input pipeline both ways and of training."""
    plt = _plt()
    keys = [k for k in ("input in memory", "input batch then parse", "input parse then batch", "train tfos", "train local")
            if k in run.details]
    figs = [run.details[k] for k in keys]
    fig, ax = plt.subplots(figsize=(8, 3.2))
    if figs:
        ys = list(range(len(figs)))
        errors = [[f.median - f.low for f in figs], [f.high - f.median for f in figs]]
        ax.barh(ys, [f.median for f in figs], xerr=errors, capsize=5,
                color=["tab:blue" if k.startswith("input") else "tab:orange" for k in keys])
        ax.set_yticks(ys)
        ax.set_yticklabels([f.name for f in figs], fontsize=8)
        _thousands(ax.xaxis)
        ax.invert_yaxis()
    ax.set_xlabel("records (examples) per second")
    ax.set_title("input pipeline alone (blue) vs training consumption (orange)", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_scaling(run: Run, path: str) -> str:
    """Left: examples/s per cluster shape against one process. Right: a step's parts."""
    plt = _plt()
    d = run.details
    rows = [n for n in run.facts.get("training baselines", {}) if f"train {n}" in d]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.4))
    if rows:
        figs = [d[f"train {n}"] for n in rows]
        xs = list(range(len(rows)))
        errors = [[f.median - f.low for f in figs], [f.high - f.median for f in figs]]
        left.bar(xs, [f.median for f in figs], yerr=errors, capsize=5,
                 color=["tab:gray" if n.startswith(Strategy.LOCAL) else "tab:orange" if n.startswith(Role.PS) else
                        "tab:blue" for n in rows])
        left.set_xticks(xs)
        left.set_xticklabels(rows, fontsize=7, rotation=30, ha="right")
        left.set_ylabel("examples/s")
        _thousands(left.yaxis)
        left.set_title("training examples/s, same examples per update", fontsize=10)
        left.grid(axis="y", alpha=0.3)
        bottom = [0.0] * len(rows)
        for part, colour in (("compute_ms", "tab:green"), ("exchange_ms", "tab:red"), ("other_ms", "tab:purple")):
            values = [max(0.0, d[f"step {n} {part}"].median) if f"step {n} {part}" in d else 0.0 for n in rows]
            right.bar(xs, values, bottom=bottom, color=colour, label=part.removesuffix("_ms"))
            bottom = [b + v for b, v in zip(bottom, values)]
        right.set_xticks(xs)
        right.set_xticklabels(rows, fontsize=7, rotation=30, ha="right")
        right.set_ylabel("ms per step (one batch on one worker)")
        right.set_title("where a step's time goes", fontsize=10)
        right.legend(fontsize=8)
        right.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
