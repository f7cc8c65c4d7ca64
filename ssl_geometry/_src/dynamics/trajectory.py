"""What a dynamics run returns: :class:`Trajectory`, and :class:`DynamicsError` for a run that failed.

Shared by :func:`ssl_geometry.dynamics.gradient_flow` and :func:`ssl_geometry.dynamics`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import jax
import numpy as np

PyTree = Any

__all__ = ["Trajectory", "DynamicsError"]


class DynamicsError(RuntimeError):
    """A flow or optimiser run that did not reach its final time.

    ``.trajectory`` holds the flagged :class:`Trajectory` (``ok=False``) with the time,
    step count and last statistics reached.
    """

    def __init__(self, message: str, trajectory: "Trajectory"):
        super().__init__(message)
        self.trajectory = trajectory


@dataclasses.dataclass(frozen=True)
class Trajectory:
    """Result of :func:`gradient_flow` or :func:`discrete`.

    Attributes:
      ts: ``(n_save,)`` save times (flow time; for :func:`discrete` ``step * lr``).
      observed: the pytree ``observe`` returned, each leaf stacked over ``ts`` (leading
        axis ``n_save``); the parameters themselves when ``observe=None``. Entries with
        ``saved[i] == False`` were never reached and are NaN placeholders.
      params: final parameters (at ``t_final``; the last good state on failure).
      ok: True when the run reached its final time with a finite state.
      status: ``"successful"``, ``"max_steps_reached"``, ``"dt_min_reached"``,
        ``"non_finite"`` or another diffrax result name.
      message: human-readable description of the status.
      t_final: time reached.
      n_steps: accepted solver steps (flow) or optimiser steps taken (discrete).
      n_rejected: rejected adaptive steps (flow), 0 for discrete runs.
      n_grad_evals: gradient (vector-field) evaluations where known; with ``igr_lr``
        each also costs one Hessian-vector product; ``None`` for implicit solvers.
      saved: ``(n_save,)`` bool, True where ``observed`` holds a real statistic.
      last: ``observe`` at ``(params, t_final)`` (the last statistics).
      first_bad_step: discrete runs: first step whose loss, gradient or update was
        non-finite (``None`` when none was).
      state: final loss state (discrete runs with ``has_state=True``), else ``None``.
      method: description of the solver or optimiser.
    """

    ts: np.ndarray
    observed: PyTree
    params: PyTree
    ok: bool
    status: str
    message: str
    t_final: float
    n_steps: int
    n_rejected: int
    n_grad_evals: Optional[int]
    saved: np.ndarray
    last: PyTree
    first_bad_step: Optional[int] = None
    state: PyTree = None
    method: str = ""


def nan_where_unsaved(observed, saved: np.ndarray):
    """Replace entries at unreached save times with NaN (float leaves) / -1 (int leaves)."""

    def fix(x):
        x = np.array(x)
        if x.ndim == 0 or x.shape[0] != saved.shape[0] or saved.all():
            return x
        mask = ~saved.reshape((-1,) + (1,) * (x.ndim - 1))
        if np.issubdtype(x.dtype, np.inexact):
            return np.where(mask, np.nan, x)
        if np.issubdtype(x.dtype, np.integer):
            return np.where(mask, -1, x)
        return x

    return jax.tree_util.tree_map(fix, observed)
