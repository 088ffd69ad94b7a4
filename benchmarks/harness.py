"""Repeats, medians, spreads and ratios: the arithmetic every benchmark figure goes through.

A measurement and its baseline run in the same process, one after the other, repeat after
repeat; the order alternates (A B, B A, A B, ...) so that a slow drift of the machine (other
jobs, caches warming, the JIT) falls on both sides equally. A figure is the median of its
repeats, its spread the min-max range; a ratio is the ratio of the two medians.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Literal, Mapping

Sample = Mapping[str, float]  # what one run of one variant yields: named figures, e.g. {"rows_per_sec": ...}
Log = Callable[[str], None]


@dataclass
class Figure:
    """One measured quantity, repeated."""

    name: str
    unit: str
    samples: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.samples) if self.samples else float("nan")

    @property
    def low(self) -> float:
        return min(self.samples) if self.samples else float("nan")

    @property
    def high(self) -> float:
        return max(self.samples) if self.samples else float("nan")

    def spread(self) -> str:
        """min-max as a share of the median: how much one repeat can be trusted."""
        if len(self.samples) < 2 or not self.median:
            return "one run"
        return f"{fmt(self.low)}–{fmt(self.high)}, ±{50 * (self.high - self.low) / abs(self.median):.0f}%"


@dataclass
class Result:
    """One row of the table: a measured figure against its baseline (or alone), and a goal.

    `goal_op` says which side of the goal passes. For `absolute` results the value is the
    measured median itself (seconds, say), and `worst` decides instead when every repeat
    must meet the goal."""

    id: str
    title: str
    measured: Figure
    baseline: Figure | None
    goal: float
    goal_op: Literal[">=", "<="]
    worst: bool = False

    @property
    def value(self) -> float:
        if self.baseline is not None:
            return ratio(self.measured.median, self.baseline.median)
        if self.worst:
            return self.measured.high if self.goal_op == "<=" else self.measured.low
        return self.measured.median

    @property
    def pair_ratios(self) -> list[float]:
        """The ratio of each repeat's pair: its range says how stable the ratio is."""
        if self.baseline is None:
            return []
        return [ratio(m, b) for m, b in zip(self.measured.samples, self.baseline.samples)]

    @property
    def met(self) -> bool:
        v = self.value
        return v >= self.goal if self.goal_op == ">=" else v <= self.goal


def ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def fmt(x: float) -> str:
    """Numbers as a reader wants them: 3 significant digits, thousands separated."""
    if x != x:  # NaN
        return "n/a"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if abs(x) >= 100:
        return f"{x:.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def timed(fn: Callable[[], object]) -> float:
    """Wall seconds of one call."""
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def interleave(label: str, variants: Mapping[str, Callable[[], Sample]], repeats: int, log: Log, *,
               warmup: bool = False) -> dict[str, dict[str, list[float]]]:
    """Run every variant `repeats` times, alternating their order each repeat.

    Returns {variant: {figure name: [one value per repeat]}}. With `warmup`, each variant
    runs once first, unrecorded: model loading, Python worker start and JIT are not what
    the figure is about."""
    names = list(variants)
    if warmup:
        for name in names:
            log(f"  {label}: warm-up {name}")
            variants[name]()
    out: dict[str, dict[str, list[float]]] = {name: {} for name in names}
    for i in range(repeats):
        order = names if i % 2 == 0 else names[::-1]
        for name in order:
            sample = variants[name]()
            for key, value in sample.items():
                out[name].setdefault(key, []).append(float(value))
            shown = "  ".join(f"{k} {fmt(v)}" for k, v in sample.items())
            log(f"  {label}: repeat {i + 1}/{repeats} {name}: {shown}")
    return out
