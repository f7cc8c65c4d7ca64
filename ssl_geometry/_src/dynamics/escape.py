"""Reading a trajectory: the first recorded time it left a collapsed state (:func:`escape_time`)."""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import jax
import numpy as np

from ssl_geometry._src.checks import check_choice
from ssl_geometry._src.dynamics.trajectory import PyTree, Trajectory
from ssl_geometry._src.instrument.metrics import normalized_std

__all__ = ["EscapeResult", "ESCAPE_CRITERIA", "escape_time"]


@dataclasses.dataclass(frozen=True)
class EscapeResult:
    """Outcome of :func:`escape_time`.

    ``escaped`` is False (and ``time``/``index``/``value`` None) when the criterion never
    held at a recorded time; ``held_initially`` flags a criterion already true at the
    first save time (so the run started outside the collapsed region).
    """

    escaped: bool
    time: Optional[float]
    index: Optional[int]
    value: Optional[float]
    criterion: str
    threshold: float
    key: Optional[str]
    held_initially: bool
    series: np.ndarray

    def __str__(self) -> str:
        if not self.escaped:
            return (
                f"did not escape: {self.criterion} > {self.threshold:g} never held "
                f"(max {np.nanmax(self.series) if self.series.size else float('nan'):.4g})"
            )
        return f"escaped at t = {self.time:.6g} (index {self.index}): {self.criterion} = {self.value:.4g} > {self.threshold:g}"


ESCAPE_CRITERIA = ("std_threshold", "distance")


def escape_time(
    result: Trajectory,
    criterion: str | Callable = "std_threshold",
    *,
    threshold: float,
    key: Optional[str] = None,
    reference: PyTree = None,
) -> EscapeResult:
    """First recorded time at which a trajectory has left a collapsed state.

    Criteria (on ``result.observed``; only recorded entries, ``result.saved``, count):

    * ``"std_threshold"``: ``s(t) > threshold`` with ``s`` the mean per-dimension std of
      L2-normalised outputs (SimSiam's collapse monitor). ``observed[key]`` (default key
      ``"std"``) is either the series ``s`` (shape ``(n_save,)``) or the outputs themselves
      (``(n_save, n, k)``), from which :func:`ssl_geometry.metrics.normalized_std`
      (``ddof=1``, PyTorch's ``std``) computes it.
    * ``"distance"``: ``d(t) > threshold``. ``observed[key]`` (default ``"distance"``) is
      the series ``d``; or, with ``reference`` given, ``d(t) = |theta(t) - reference|_2``
      over the observed pytree (``observed`` = parameters when ``observe=None``).
    * a callable ``series_fn(observed) -> (n_save,)`` with the rule ``series > threshold``.

    Returns:
      :class:`EscapeResult` recording criterion, threshold and key; ``escaped=False`` with
      ``time=None`` when the criterion never held.
    """
    if not isinstance(result, Trajectory):
        raise TypeError(f"`result` must be a Trajectory; got {type(result).__name__}.")
    threshold = float(threshold)
    if not np.isfinite(threshold):
        raise ValueError(f"`threshold` must be finite; got {threshold}.")
    obs = result.observed
    if callable(criterion):
        name = getattr(criterion, "__name__", "custom")
        series = np.asarray(criterion(obs), dtype=np.float64)
    else:
        check_choice(criterion, "criterion", ESCAPE_CRITERIA)
        name = criterion
        if criterion == "distance" and reference is not None:
            leaves = jax.tree_util.tree_leaves(obs)
            refs = jax.tree_util.tree_leaves(reference)
            if len(leaves) != len(refs):
                raise ValueError("`reference` must have the structure of `result.observed` (one time slice).")
            sq = sum(
                np.sum((np.asarray(a) - np.asarray(r)[None]) ** 2, axis=tuple(range(1, np.ndim(a))))
                for a, r in zip(leaves, refs)
            )
            series = np.sqrt(sq)
        else:
            key = key or ("std" if criterion == "std_threshold" else "distance")
            if not isinstance(obs, dict) or key not in obs:
                raise ValueError(
                    f"criterion {criterion!r} reads `observed[{key!r}]`; the trajectory's observed "
                    f"pytree has keys {sorted(obs) if isinstance(obs, dict) else type(obs).__name__}."
                    + (" Pass `reference` to measure parameter distance." if criterion == "distance" else "")
                )
            series = np.asarray(obs[key], dtype=np.float64)
            if criterion == "std_threshold" and series.ndim == 3:
                series = np.array([float(normalized_std(u)) if ok else np.nan for u, ok in zip(series, result.saved)])
    if series.shape != result.ts.shape:
        raise ValueError(
            f"criterion series must have shape {result.ts.shape} (one value per save time); got {series.shape}."
        )
    hits = np.nonzero(result.saved & np.isfinite(series) & (series > threshold))[0]
    if hits.size == 0:
        return EscapeResult(False, None, None, None, name, threshold, key, False, series)
    i = int(hits[0])
    return EscapeResult(True, float(result.ts[i]), i, float(series[i]), name, threshold, key, i == 0, series)
