"""The benchmark harness's load guard: the load average, the other processes' CPU share, and the rule that
refuses a committed table from a busy machine (:func:`check_load`). Re-exported by
:mod:`experiments.benchmarks.harness`, whose docstring states the rule.
"""

from __future__ import annotations

import math
import os
import time
from typing import NamedTuple

__all__ = [
    "LoadTooHigh",
    "OTHER_CPU_THRESHOLD",
    "CpuSample",
    "default_threshold",
    "load_average",
    "cpu_sample",
    "other_cpu_share",
    "check_load",
]


class LoadTooHigh(RuntimeError):
    """The machine was too busy for a committed benchmark table (see :func:`check_load`)."""


def default_threshold() -> float:
    """Load-average threshold for committed tables: the number of CPU cores (2 on 2 cores)."""
    return float(os.cpu_count() or 1)


def load_average() -> float:
    """The 1-minute load average (``nan`` where the OS does not report one)."""
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):
        return math.nan


#: The largest share of the machine's CPU time (all cores over the run's wall time) other processes may use during a
#: committed run: 10%, a fifth of one core on 2 cores (an idle machine here measures about 0.4%; one busy process
#: beside a 2-core run, about 30%).
OTHER_CPU_THRESHOLD = 0.10


class CpuSample(NamedTuple):
    """CPU time at one moment: ``wall`` (monotonic s), ``busy`` (the machine's non-idle CPU seconds, all cores:
    user, nice, system, irq, softirq and steal of ``/proc/stat``), ``own`` (this process's and its waited-for
    children's user and system seconds) and ``cores`` (the CPUs ``/proc/stat`` counts)."""

    wall: float
    busy: float
    own: float
    cores: int


def cpu_sample(stat_path: str = "/proc/stat") -> CpuSample | None:
    """A :class:`CpuSample` now (``None`` where ``stat_path`` cannot be read or parsed: not Linux)."""
    try:
        with open(stat_path) as f:
            lines = f.read().splitlines()
        fields = [float(x) for x in lines[0].split()[1:]]
        cores = sum(1 for ln in lines[1:] if ln.startswith("cpu") and ln[3:4].isdigit())
        tick = float(os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    if lines[0].split()[0] != "cpu" or len(fields) < 7 or cores < 1:
        return None
    busy = (sum(fields[i] for i in (0, 1, 2, 5, 6)) + (fields[7] if len(fields) > 7 else 0.0)) / tick
    t = os.times()
    return CpuSample(time.monotonic(), busy, t.user + t.system + t.children_user + t.children_system, cores)


def other_cpu_share(start: CpuSample | None, end: CpuSample | None = None) -> float:
    """The share of the machine's CPU time other processes used between two samples:
    ``(busy_1 - busy_0 - (own_1 - own_0)) / (cores * (wall_1 - wall_0))``, clipped at 0 (the counters tick at
    different rates), ``nan`` when either sample is missing or no time passed. ``end`` defaults to now."""
    end = cpu_sample() if end is None else end
    if start is None or end is None or end.wall <= start.wall:
        return math.nan
    other = (end.busy - start.busy) - (end.own - start.own)
    return max(0.0, other / (end.cores * (end.wall - start.wall)))


def check_load(
    load_before: float,
    load_after: float,
    *,
    threshold: float | None = None,
    force: bool = False,
    other_share: float = math.nan,
    other_threshold: float = OTHER_CPU_THRESHOLD,
) -> str | None:
    """``None`` when the machine was quiet; else raise :class:`LoadTooHigh`, or with ``force`` return the mark to
    print on the table.

    Quiet: ``load_before <= threshold`` and, where ``other_share`` (:func:`other_cpu_share`) is measured,
    ``other_share <= other_threshold``; where it is not (``nan``), ``load_after <= threshold`` instead. A ``nan``
    load (no load average on this OS) passes its check.
    """
    threshold = default_threshold() if threshold is None else float(threshold)
    measured = not math.isnan(other_share)
    reasons = []
    if load_before > threshold:
        reasons.append(f"load average {load_before:.2f} before the run exceeds the threshold {threshold:g}")
    if measured and other_share > other_threshold:
        reasons.append(
            f"other processes used {100 * other_share:.1f}% of the CPU during the run (threshold "
            f"{100 * other_threshold:g}%)"
        )
    if not measured and load_after > threshold:
        reasons.append(
            f"load average {load_after:.2f} after the run exceeds the threshold {threshold:g} (the other "
            "processes' share could not be measured)"
        )
    if not reasons:
        return None
    msg = "; ".join(reasons)
    if not force:
        raise LoadTooHigh(
            msg + ": refusing to write a committed benchmark table (wait for a quiet machine, "
            "or pass --force to write it marked FORCED UNDER LOAD)."
        )
    return f"**FORCED UNDER LOAD: {msg}; these timings are not quiet-machine numbers.**"
