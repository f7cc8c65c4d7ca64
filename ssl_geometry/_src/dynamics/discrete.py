"""Discrete optimisers on the flow's time axis: step ``k`` of an optax optimiser sits at ``t = k * lr``.

``theta_{k+1} = theta_k - lr g_k`` is Euler's method on ``d theta/dt = -grad L`` with step ``lr``,
so a :func:`ssl_geometry.dynamics.gradient_flow` trajectory saved at the same times overlays
directly. The steps themselves are :func:`ssl_geometry.fit`, the one optimisation
loop of the library.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ssl_geometry._src.checks import check_positive
from ssl_geometry._src.core import loop as _loop
from ssl_geometry._src.dynamics.trajectory import DynamicsError, PyTree, Trajectory, nan_where_unsaved

__all__ = ["discrete"]


@functools.lru_cache(maxsize=128)
def _observer(observe, scale: float):
    """``observe(params, t, args)`` as :func:`~ssl_geometry.fit` calls it (``observe(params, k, args)``),
    ``t = k * scale``; the parameters themselves without ``observe``.

    Cached so that repeated runs with the same ``observe`` reuse one compiled program.
    """

    def obs(params, k, args):
        t = jnp.asarray(k, jnp.result_type(*jax.tree_util.tree_leaves(params))) * scale
        return params if observe is None else observe(params, t, args)

    return obs


def _check_discrete_args(params0, steps, observe_every, lr, has_state, state0) -> None:
    """Validate :func:`discrete`'s arguments (``steps`` itself is checked by :func:`ssl_geometry.fit`)."""
    if not isinstance(observe_every, (int, np.integer)) or observe_every < 1:
        raise ValueError(f"`observe_every` must be a positive int; got {observe_every!r}.")
    if isinstance(steps, (int, np.integer)) and steps % observe_every:
        raise ValueError(f"`steps` ({steps}) must be a multiple of `observe_every` ({observe_every}).")
    if lr is not None:
        check_positive(lr, "lr")
    if has_state and state0 is None:
        raise ValueError("`has_state=True` needs the initial loss state `state0`.")
    if not has_state and state0 is not None:
        raise ValueError("`state0` was given but `has_state=False`; pass has_state=True for a stateful loss.")
    if not jax.tree_util.tree_leaves(params0):
        raise ValueError("`params0` has no leaves.")


def _trajectory_of(
    res, observe, scale: float, *, steps: int, observe_every: int, args, has_state: bool, lr: Optional[float]
) -> Trajectory:
    """The :class:`Trajectory` of a :func:`ssl_geometry.fit` result ``res`` run in chunks of ``observe_every``.

    Observation ``j`` sits at ``t_j = j * observe_every * scale``; it counts as saved when the run succeeded or
    ``j * observe_every <= first_bad_step`` (unsaved rows are NaN); ``last`` is ``observe`` at the final
    parameters, ``t_final = n_steps * scale``; a failed run counts one extra gradient evaluation (the bad step).
    """
    n_chunks = steps // observe_every
    observed, params, state = jax.device_get((res.observed, res.params, res.state))
    ok = res.ok
    first_bad = steps if res.first_bad_step is None else res.first_bad_step  # read only when a step failed
    ts = np.arange(n_chunks + 1, dtype=np.float64) * observe_every * scale
    n_taken = res.n_steps
    saved = np.ones(ts.shape, bool) if ok else np.arange(n_chunks + 1) * observe_every <= first_bad
    last = jax.device_get(_observer(observe, scale)(res.params, n_taken, args))
    observed = nan_where_unsaved(observed, saved)
    status = "successful" if ok else "non_finite"
    message = (
        "completed"
        if ok
        else (
            f"the loss, gradient, state or update of step {first_bad} (t = {first_bad * scale:.6g}) was non-finite; "
            f"parameters are those before that step"
        )
    )
    return Trajectory(
        ts=ts,
        observed=observed,
        params=params,
        ok=ok,
        status=status,
        message=message,
        t_final=float(n_taken * scale),
        n_steps=int(n_taken),
        n_rejected=0,
        n_grad_evals=int(n_taken) + (0 if ok else 1),
        saved=saved,
        last=last,
        first_bad_step=first_bad,
        state=state if has_state else None,
        method=f"optax optimiser, {steps} steps" + (f", t = step * {lr:g}" if lr else ", t = step"),
    )


def discrete(
    loss_fn: Callable,
    params0: PyTree,
    optimizer: optax.GradientTransformation,
    *,
    steps: int,
    observe: Optional[Callable] = None,
    observe_every: int = 1,
    batches: PyTree = None,
    args: Any = None,
    lr: Optional[float] = None,
    has_state: bool = False,
    state0: PyTree = None,
    throw: bool = True,
) -> Trajectory:
    """Run an optax optimiser for ``steps`` steps inside ``lax.scan``.

    ``theta_{k+1} = theta_k + optimizer.update(grad L(theta_k; batch_k, args))``, with
    ``batch_k = batches[k]`` (mini-batch noise; every leaf of ``batches`` has leading
    axis ``steps``) or ``None`` (full batch: the data is in ``args``). Statistics
    ``observe(params, t, args)`` are recorded at steps ``0, m, 2m, ..., steps``
    (``m = observe_every``) at times ``t = step * lr``, so a :func:`gradient_flow` trajectory
    of the same loss saved at the same times overlays directly. Without ``lr`` the time axis
    is the step count.

    Args:
      loss_fn: ``loss_fn(params, batch, args) -> scalar``, the signature of
        :func:`ssl_geometry.fit` and :func:`gradient_flow` (``batch`` is ``None`` without
        ``batches``, ``args`` ``None`` when not given); with ``has_state=True``
        ``loss_fn(params, state, batch, args) -> (loss, new_state)`` (e.g. BatchNorm in train
        mode; ``new_state`` is carried to the next step).
      params0: initial parameters.
      optimizer: any ``optax.GradientTransformation`` (``optax.sgd(lr)`` is GD).
      steps: number of optimiser steps (a multiple of ``observe_every``).
      observe: ``observe(params, t, args) -> pytree``; ``None`` records the parameters.
      observe_every: record every this many steps.
      batches: per-step data (leading axis ``steps``) or ``None``.
      args: data shared by every step (full-batch data), passed to ``loss_fn`` and ``observe``.
      lr: the learning rate that sets the time axis ``t = step * lr``.
      has_state, state0: stateful loss and its initial state.
      throw: raise :class:`DynamicsError` when a loss, gradient, state or update is
        non-finite (default); ``False`` returns a flagged trajectory whose parameters are
        the last finite ones and whose ``first_bad_step`` names the failing step.

    Returns:
      :class:`Trajectory` with ``n_steps`` steps taken and ``n_grad_evals = n_steps``.

    Example:
      >>> import jax.numpy as jnp, optax
      >>> tr = discrete(lambda p, batch, args: 0.5 * jnp.sum(p ** 2), jnp.ones(2), optax.sgd(0.1), steps=10,
      ...               observe=lambda p, t, args: p[0], observe_every=5, lr=0.1)
      >>> [round(float(t), 6) for t in tr.ts], [round(float(x), 6) for x in tr.observed]
      ([0.0, 0.5, 1.0], [1.0, 0.59049, 0.348678])
    """
    _check_discrete_args(params0, steps, observe_every, lr, has_state, state0)
    scale = 1.0 if lr is None else float(lr)
    res = _loop.fit(
        loss_fn,
        params0,
        optimizer,
        steps=steps,
        batches=batches,
        args=args,
        state=state0,
        chunk=int(observe_every),
        observe=_observer(observe, scale),
        throw=False,
    )
    traj = _trajectory_of(
        res, observe, scale, steps=steps, observe_every=observe_every, args=args, has_state=has_state, lr=lr
    )
    if not traj.ok and throw:
        raise DynamicsError(
            f"discrete run failed: {traj.message}. {int(traj.saved.sum())} of {len(traj.ts)} observations recorded. "
            "Lower the learning rate, or pass throw=False to get the flagged trajectory.",
            traj,
        )
    return traj
