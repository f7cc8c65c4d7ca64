"""One benchmark harness for every ``experiments/bench_*.py``: interleaved timing, ratio statistics,
a load guard, and the environment record.

Why: a shared machine's load drifts over minutes, so timing implementation A for a while and
then B for a while measures the drift as much as the code. :func:`interleave` runs the
implementations in turn (A B A B ...), one call each per repeat, so both see the same load, and
:func:`ratio_stats` summarises the per-repeat ratios ``t_A[i] / t_B[i]`` (median and spread)
rather than a ratio of two separately taken means.

A committed table must come from a quiet machine: :func:`write_table` refuses (raises
:class:`LoadTooHigh`) when the 1-minute load average before the run exceeds the threshold
(default: the number of CPU cores, i.e. 2 on the project's 2-core machine), or when other
processes used more than :data:`OTHER_CPU_THRESHOLD` of the machine's CPU time during the run
(:func:`other_cpu_share`, from ``/proc/stat`` and the process's own CPU time), unless
``force=True``, and then marks the table ``FORCED UNDER LOAD``. The load after the run is
recorded but decides only where the other processes' share cannot be measured: a run that keeps
every core busy raises the load to about the core count by itself, so the load after it cannot
tell a loaded machine from a busy benchmark. Every written table carries the command, the loads,
the other processes' share, the library versions and the device (:func:`environment`). The load guard
lives in :mod:`experiments.benchmarks.load` (its names are re-exported here).

Usage in a benchmark script::

    from experiments.benchmarks import harness
    load0, cpu0 = harness.load_average(), harness.cpu_sample()
    times = harness.interleave({"ours": run_ours, "paper": run_paper}, repeats=5)
    stats = harness.ratio_stats(times["ours"], times["paper"])
    harness.write_table("docs/bench_x.md", title, body, command=harness.command_line("experiments.bench_x"),
                        load_before=load0, cpu_start=cpu0, force=args.force)
"""

from __future__ import annotations

import importlib.metadata
import math
import os
import pathlib
import platform
import shlex
import statistics
import sys
import time
from typing import Callable, Mapping, Sequence

from experiments.benchmarks.load import (
    OTHER_CPU_THRESHOLD,
    CpuSample,
    LoadTooHigh,
    check_load,
    cpu_sample,
    default_threshold,
    load_average,
    other_cpu_share,
)

__all__ = [
    "LoadTooHigh",
    "OTHER_CPU_THRESHOLD",
    "CpuSample",
    "default_threshold",
    "load_average",
    "cpu_sample",
    "other_cpu_share",
    "block",
    "time_call",
    "interleave",
    "interleave_order",
    "ratio_stats",
    "summary",
    "environment",
    "environment_line",
    "command_line",
    "check_load",
    "header",
    "write_table",
    "add_arguments",
]


def block(out):
    """Wait for every JAX array in ``out`` (a pytree); other values pass through. Returns ``out``."""
    try:
        import jax
    except ImportError:  # pragma: no cover - JAX is a dependency
        return out
    return jax.block_until_ready(out)


def time_call(fn: Callable[[], object], clock: Callable[[], float] = time.perf_counter) -> tuple[float, object]:
    """``(seconds, result)`` of one call ``fn()``, waiting for asynchronous JAX results."""
    t0 = clock()
    out = block(fn())
    return clock() - t0, out


def interleave_order(names: Sequence[str], repeats: int, warmup: int = 1) -> list[tuple[str, int]]:
    """The call order of :func:`interleave`: ``warmup`` untimed rounds, then ``repeats`` timed ones.

    Each round calls every implementation once, in the given order: ``A B A B ...``. Entries are
    ``(name, round)`` with negative rounds for warm-up (``-warmup .. -1``).
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"`repeats` must be >= 1 and `warmup` >= 0; got {repeats} and {warmup}.")
    if len(set(names)) != len(names) or not names:
        raise ValueError(f"`names` must be distinct and non-empty; got {list(names)}.")
    return [(n, r) for r in range(-warmup, repeats) for n in names]


def interleave(
    fns: Mapping[str, Callable[[], object]],
    repeats: int = 5,
    warmup: int = 1,
    clock: Callable[[], float] = time.perf_counter,
    results: dict | None = None,
) -> dict[str, list[float]]:
    """Time the implementations in turn, ``A B A B ...``: ``{name: [seconds per timed round]}``.

    Warm-up rounds (compilation, caches) run in the same interleaved order and are discarded.
    If ``results`` is a dict, ``results[name]`` receives each implementation's last return value.
    """
    times: dict[str, list[float]] = {n: [] for n in fns}
    for name, rnd in interleave_order(list(fns), repeats, warmup):
        dt, out = time_call(fns[name], clock)
        if rnd >= 0:
            times[name].append(dt)
        if results is not None:
            results[name] = out
    return times


def _quantile(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    if len(s) == 1:
        return s[0]
    pos = q * (len(s) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summary(xs: Sequence[float]) -> dict:
    """Median, quartiles, min, max and count of ``xs`` (linear-interpolated quantiles)."""
    xs = [float(x) for x in xs]
    if not xs or not all(math.isfinite(x) for x in xs):
        raise ValueError(f"`xs` must be a non-empty sequence of finite numbers; got {xs}.")
    return {
        "median": statistics.median(xs),
        "q25": _quantile(xs, 0.25),
        "q75": _quantile(xs, 0.75),
        "min": min(xs),
        "max": max(xs),
        "n": len(xs),
    }


def ratio_stats(times_a: Sequence[float], times_b: Sequence[float]) -> dict:
    """Statistics of the per-round ratios ``r_i = t_A[i] / t_B[i]`` of two interleaved series.

    Returns :func:`summary` of the ``r_i`` plus ``spread = (q75 - q25) / median`` (relative
    inter-quartile range) and the ratio of the medians, ``median_a / median_b``.
    """
    if len(times_a) != len(times_b) or not times_a:
        raise ValueError(
            f"`times_a` and `times_b` must be equally long and non-empty; got {len(times_a)} and {len(times_b)}."
        )
    if min(times_b) <= 0 or min(times_a) < 0:
        raise ValueError("times must be non-negative and `times_b` positive.")
    ratios = [a / b for a, b in zip(times_a, times_b)]
    out = summary(ratios)
    out["spread"] = (out["q75"] - out["q25"]) / out["median"] if out["median"] else math.inf
    out["ratio_of_medians"] = statistics.median(times_a) / statistics.median(times_b)
    return out


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def environment(
    packages: Sequence[str] = ("jax", "jaxlib", "numpy", "scipy", "torch", "flax", "optax", "diffrax"),
) -> dict:
    """Library versions, Python, platform, CPU count, the JAX device (``platform:kind``) and whether x64 is on.

    The one environment record: benchmark tables print it (:func:`environment_line`) and every
    experiment's ``results.json`` stores it (:func:`experiments.common.write_results`).
    """
    env = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "versions": {p: v for p in packages if (v := _version(p)) is not None},
    }
    try:
        import jax

        dev = jax.devices()[0]
        env["device"] = f"{dev.platform}:{dev.device_kind}"
        env["device_count"] = jax.device_count()
        env["x64"] = bool(jax.config.read("jax_enable_x64"))
    except Exception as err:  # noqa: BLE001 - the record must not fail the benchmark
        env["device"] = f"unknown ({type(err).__name__})"
    threads = os.environ.get("OMP_NUM_THREADS")
    if threads:
        env["OMP_NUM_THREADS"] = threads
    for name in ("XLA_FLAGS", "JAX_DEFAULT_MATMUL_PRECISION"):  # both change what the timed code computes
        if os.environ.get(name):
            env[name] = os.environ[name]
    return env


def environment_line(env: dict | None = None) -> str:
    """One line: device, cores, Python and the library versions."""
    env = environment() if env is None else env
    vers = ", ".join(f"{k} {v}" for k, v in env["versions"].items())
    extra = "".join(
        f"; {k}={env[k]}" for k in ("OMP_NUM_THREADS", "XLA_FLAGS", "JAX_DEFAULT_MATMUL_PRECISION") if k in env
    )
    return (
        f"device {env['device']}, {env['processor']}, {env['cpu_count']} CPU cores, "
        f"Python {env['python']}; {vers}{extra}"
    )


def command_line(module: str, argv: Sequence[str] | None = None) -> str:
    """``python -m <module> <args>`` as run (``argv`` defaults to ``sys.argv[1:]``)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    return " ".join(["python", "-m", module, *map(shlex.quote, argv)])


def header(
    title: str,
    command: str,
    *,
    load_before: float,
    load_after: float,
    mark: str | None,
    env: dict | None = None,
    threshold: float | None = None,
    other_share: float = math.nan,
) -> str:
    """The block every committed table starts with: title, command, loads, the other processes' CPU share,
    environment, mark."""
    threshold = default_threshold() if threshold is None else float(threshold)
    other = (
        ""
        if math.isnan(other_share)
        else f"; other processes used {100 * other_share:.1f}% of the CPU during the run "
        f"(threshold {100 * OTHER_CPU_THRESHOLD:g}%)"
    )
    lines = [
        f"# {title}",
        "",
        f"Command: `{command}`",
        "",
        f"1-minute load average {load_before:.2f} before (threshold {threshold:g}) and {load_after:.2f} after "
        f"the run{other}; {environment_line(env)}.",
        "",
    ]
    if mark:
        lines += [mark, ""]
    return "\n".join(lines) + "\n"  # a blank line before the body


def write_table(
    path: str | os.PathLike | None,
    title: str,
    body: str,
    *,
    command: str,
    load_before: float,
    load_after: float | None = None,
    threshold: float | None = None,
    force: bool = False,
    env: dict | None = None,
    cpu_start: CpuSample | None = None,
    other_share: float | None = None,
) -> str:
    """Check the machine was quiet (:func:`check_load`), then write ``header + body`` to ``path``; returns the text.

    ``load_after`` defaults to the load now; ``other_share`` to :func:`other_cpu_share` from ``cpu_start`` (the
    :func:`cpu_sample` taken with ``load_before``) to now, ``nan`` without one. ``path=None`` returns the text
    without writing (the check still applies, so a forced table is always marked).
    """
    load_after = load_average() if load_after is None else load_after
    other_share = other_cpu_share(cpu_start) if other_share is None else float(other_share)
    mark = check_load(load_before, load_after, threshold=threshold, force=force, other_share=other_share)
    text = (
        header(
            title,
            command,
            load_before=load_before,
            load_after=load_after,
            mark=mark,
            env=env,
            threshold=threshold,
            other_share=other_share,
        )
        + body.rstrip()
        + "\n"
    )
    if path is not None:
        p = pathlib.Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(p.suffix + ".tmp")
        tmp.write_text(text)
        tmp.replace(p)
    return text


def add_arguments(ap, *, repeats: int = 5, warmup: int = 1) -> None:
    """The harness's command-line options: ``--repeats --warmup --force --load-threshold``."""
    ap.add_argument("--repeats", type=int, default=repeats, help="timed interleaved rounds")
    ap.add_argument("--warmup", type=int, default=warmup, help="untimed interleaved rounds first")
    ap.add_argument(
        "--force",
        action="store_true",
        help="write the table even when the load exceeds the threshold (marked FORCED UNDER LOAD)",
    )
    ap.add_argument(
        "--load-threshold",
        type=float,
        default=None,
        help="1-minute load average before the run above which no table is written (default: CPU count)",
    )
