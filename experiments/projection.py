"""Dry runs (``config.dry_run``): the step time of a paper path, measured on whatever device runs it, and the
wall time of the full variant projected from it (the record every dry run stores as ``measurements["dry_run"]``).
"""

from __future__ import annotations

import math
import statistics
from typing import Callable

import numpy as np

from experiments.benchmarks import harness


def step_time(fn: Callable[[], object], repeats: int = 3) -> float:
    """Median wall time (s) of ``fn()`` over ``repeats`` calls after one untimed call (compilation).

    The calls are timed by :func:`experiments.benchmarks.harness.interleave` (results waited for).
    The step time of a dry run (``config.dry_run``, see :func:`dry_run_record`).
    """
    return float(statistics.median(harness.interleave({"step": fn}, repeats=repeats, warmup=1)["step"]))


def time_at_sizes(make_step: Callable[[int], Callable[[], object]], sizes, repeats: int = 2) -> list[list]:
    """``[[size, seconds], ...]``: :func:`step_time` of ``make_step(size)`` at each size (compilation excluded).

    ``make_step(size)`` builds the work of one unit (a training step, one analysis case) at that size;
    each is called once untimed, then timed ``repeats`` times (the median is kept).
    """
    return [[int(n), step_time(make_step(int(n)), repeats)] for n in sizes]


def power_law_projection(points, full_size: float, count: float = 1.0) -> dict:
    """Project ``count`` units at ``full_size`` from units timed at reduced sizes, ``t(n) = a n^p``.

    ``p`` and ``log a`` are the least-squares line through ``(log n_i, log t_i)`` (with two points,
    ``p = log(t_2 / t_1) / log(n_2 / n_1)``); the projection is ``count * a * full_size^p``. A fixed
    cost per unit (dispatch, a constant solver overhead) lowers ``p`` at small sizes, so the fit
    under-projects where that cost dominates; a negative ``p`` (the smaller size timed slower: noise)
    is kept in the record and projected as ``p = 0`` from the largest point, with a ``note``.

    Raises:
      ValueError: unless ``points`` holds at least two distinct positive sizes with finite positive
        times, and ``full_size`` and ``count`` are finite and positive.
    """
    pts = [(float(n), float(t)) for n, t in points]
    if len({n for n, _ in pts}) < 2 or not all(
        math.isfinite(n) and n > 0 and math.isfinite(t) and t > 0 for n, t in pts
    ):
        raise ValueError(
            f"power_law_projection: `points` must hold at least two distinct positive sizes with "
            f"finite positive times; got {points!r}."
        )
    for name, value in (("full_size", full_size), ("count", count)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"power_law_projection: `{name}` must be finite and positive; got {value!r}.")
    p, log_a = np.polyfit(np.log([n for n, _ in pts]), np.log([t for _, t in pts]), 1)
    rec = {
        "points": [[n, t] for n, t in pts],
        "exponent": float(p),
        "full_size": float(full_size),
        "count": float(count),
    }
    if p < 0:
        n_max, t_max = max(pts)
        rec["note"] = "negative fitted exponent (timing noise): projected at the largest size's time, exponent 0"
        unit = t_max
    else:
        unit = float(np.exp(log_a) * float(full_size) ** p)
    rec.update(unit_time_s=float(unit), projected_s=float(count * unit))
    return rec


def points_text(record: dict) -> str:
    """The measured points of a :func:`power_law_projection` record as ``"n1: t1 s, n2: t2 s"`` (sizes as
    integers, times to 3 significant digits): the reports' one format for them."""
    return ", ".join(f"{n:.0f}: {t:.3g} s" for n, t in record["points"])


def reduced_sizes(full_size: int, fractions=(1 / 8, 1 / 4), minimum: int = 2) -> list[int]:
    """The two (or more) reduced sizes a dry run times: ``max(minimum, round(f * full_size))`` for each
    fraction ``f``, distinct and sorted (the paper's batch or width at 1/8 and 1/4 by default).

    A size too small for the fractions to give two distinct values (a toy variant's dry run, say
    ``full_size = 3``) is timed at ``max(minimum, full_size // 2)`` and at ``full_size`` itself: a toy run is
    cheap enough to time at its own size.

    Raises:
      ValueError: when even that gives fewer than two distinct sizes (``full_size <= minimum``), naming
        ``full_size``.
    """
    sizes = sorted({max(int(minimum), int(round(f * int(full_size)))) for f in fractions})
    if len(sizes) < 2:
        sizes = sorted({max(int(minimum), int(full_size) // 2), int(full_size)})
    if len(sizes) < 2:
        raise ValueError(
            f"reduced_sizes: `full_size` = {full_size!r} is too small to time at two distinct "
            f"sizes of at least {minimum} (fractions {tuple(fractions)}, then half and full); "
            f"an exponent needs two."
        )
    return sizes


def project_at_sizes(
    make_unit: Callable[[int], Callable[[], object]], full_size: int, count: float, *, sizes=None, repeats: int = 2
) -> dict:
    """Time one unit (a training step, an analysis case) at reduced sizes and project ``count`` of them at
    ``full_size``: :func:`time_at_sizes` then :func:`power_law_projection` (``t(n) = a n^p``).

    ``sizes`` defaults to :func:`reduced_sizes` of ``full_size`` (1/8 and 1/4). The record holds both
    measured points, the fitted exponent and the projection (``projected_s``); pass it to
    :func:`dry_run_record` as ``training=`` or ``analysis=``.
    """
    sizes = reduced_sizes(full_size) if sizes is None else sorted({int(n) for n in sizes})
    return power_law_projection(time_at_sizes(make_unit, sizes, repeats), full_size, count)


def dry_run_record(
    step_time_s: float,
    n_steps: int | None = None,
    other_s: float = 0.0,
    *,
    projected_wall_time_s: float | None = None,
    training: dict | None = None,
    analysis: dict | None = None,
    **extra,
) -> dict:
    """``measurements["dry_run"]``: the measured step time and the projected wall time of the full variant.

    One of three forms:

    * ``n_steps``: ``projected_wall_time_s = n_steps * step_time_s + other_s`` (``other_s`` the
      analysis, timed once);
    * ``projected_wall_time_s``: the projection itself, computed by an experiment whose cost is not
      one step time times a step count (say how in ``projection=``);
    * ``training`` and/or ``analysis``: records of :func:`power_law_projection` (each from units timed
      at two reduced sizes); ``projected_wall_time_s`` is the sum of their ``projected_s``, and the
      record also carries ``training_s``, ``analysis_s`` and ``training_device_hours`` (the training
      projected at the measured step rate on ``device``).

    ``device`` is the harness's ``platform:kind`` (:func:`experiments.benchmarks.harness.environment`).

    Raises:
      ValueError: unless exactly one form is given, or when a time is not a finite non-negative number.
    """
    measured = training is not None or analysis is not None
    if sum((n_steps is not None, projected_wall_time_s is not None, measured)) != 1:
        raise ValueError(
            "dry_run_record: give exactly one of `n_steps`, `projected_wall_time_s` and `training`/`analysis`."
        )
    parts = {
        name: float(r["projected_s"]) for name, r in (("training", training), ("analysis", analysis)) if r is not None
    }
    if measured:
        projected = sum(parts.values())
    elif projected_wall_time_s is None:
        projected = float(n_steps * step_time_s + other_s)
    else:
        projected = float(projected_wall_time_s)
    for name, value in (("step_time_s", step_time_s), ("projected_wall_time_s", projected)):
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"dry_run_record: `{name}` must be a finite non-negative time; got {value!r}.")
    rec = {
        "step_time_s": float(step_time_s),
        "projected_wall_time_s": projected,
        "device": harness.environment()["device"],
        **extra,
    }
    if n_steps is not None:
        rec["n_steps"] = int(n_steps)
    for name, r in (("training", training), ("analysis", analysis)):
        if r is not None:
            rec[name], rec[f"{name}_s"] = r, parts[name]
    if training is not None:
        rec["training_device_hours"] = parts["training"] / 3600
    return rec
