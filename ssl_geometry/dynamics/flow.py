"""Gradient flow against discrete optimisers, on one time axis.

Two drivers produce the same kind of :class:`Trajectory`:

* :func:`gradient_flow` integrates the continuous-time gradient flow

      d theta / dt = -grad_theta L(theta)

  over any parameter pytree with `diffrax <https://docs.kidger.site/diffrax/>`_
  (adaptive Tsit5 by default; Dopri5; the implicit stiff solver Kvaerno5; or
  fixed-step classical RK4 for parity with the edge-of-stability literature).
  With ``igr_lr = eta`` it integrates instead the *modified* flow of implicit
  gradient regularisation (Barrett & Dherin, "Implicit Gradient Regularization",
  ICLR 2021), the flow that gradient descent with step ``eta`` follows to second
  order in ``eta``::

      d theta / dt = -grad ( L + (eta / 4) |grad L|^2 ) = -(g + (eta / 2) H g),

  ``g = grad L``, ``H g`` a Hessian-vector product (forward-over-reverse).

* :func:`discrete` runs any optax optimiser (``optax.sgd`` = gradient descent,
  SGD with momentum, Adam, LARS, ...) inside ``lax.scan``. Step ``k`` is placed at
  time ``t = k * lr``, the time at which the flow is compared with it
  (``theta_{k+1} = theta_k - lr g_k`` is Euler's method on the flow with step lr).

Both record ``observe(params, t)`` (a pytree of statistics) at a set of times, so
full trajectories are never stored unless asked for (``observe=None`` stores the
parameters). Failure is explicit: exhausting ``max_steps``, step-size underflow or a
non-finite state raises :class:`DynamicsError` (default) or, with ``throw=False``,
returns a :class:`Trajectory` with ``ok=False``, the status, the time and step
count reached and the statistics of the last good state; observations at times that
were never reached are NaN placeholders marked ``saved=False``.

:func:`escape_time` reads a trajectory and reports the first time a named
criterion (leaving a collapsed state) holds, or says explicitly that it never did.

Loss signatures (``data`` is ``args`` or the current mini-batch):

* stateless: ``loss_fn(params, data) -> scalar``; ``loss_fn(params) -> scalar``
  when there is no data (``args=None`` and ``batches=None``);
* with state (``has_state=True``, :func:`discrete` only; e.g. BatchNorm in train
  mode): ``loss_fn(params, state, data) -> (loss, new_state)``. The flow has no
  notion of a state update per step; BatchNorm in train mode normalises with batch
  statistics, so the flow of a BN model is that of ``lambda p, d: loss_fn(p, state, d)[0]``.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable, ClassVar, Optional

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import optax

from ssl_geometry._checks import check_choice, check_positive, check_rank
from ssl_geometry.instrument.metrics import normalized_std

PyTree = Any

__all__ = [
    "Trajectory",
    "DynamicsError",
    "EscapeResult",
    "RK4",
    "SOLVERS",
    "gradient_flow",
    "discrete",
    "escape_time",
    "dense_hessian",
    "sharpness",
]


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


# --------------------------------------------------------------------------- solvers


def _linear_from_k(*, t0, t1, y0, y1, k):
    del k
    return diffrax.LocalLinearInterpolation(t0=t0, t1=t1, y0=y0, y1=y1)


class RK4(diffrax.AbstractERK):
    """Classical fourth-order Runge--Kutta (4 stages, no error estimate, not FSAL).

    Only for fixed steps (``diffrax.ConstantStepSize`` / ``diffrax.StepTo``); the
    embedded error weights are zero, so an adaptive controller would never reject.
    """

    tableau: ClassVar[diffrax.ButcherTableau] = diffrax.ButcherTableau(
        a_lower=(np.array([0.5]), np.array([0.0, 0.5]), np.array([0.0, 0.0, 1.0])),
        b_sol=np.array([1 / 6, 1 / 3, 1 / 3, 1 / 6]),
        b_error=np.zeros(4),
        c=np.array([0.5, 0.5, 1.0]),
    )
    interpolation_cls: ClassVar[Callable[..., diffrax.LocalLinearInterpolation]] = staticmethod(_linear_from_k)

    def order(self, terms):
        del terms
        return 4


#: name -> (solver factory, explicit stages, FSAL, adaptive)
SOLVERS: dict[str, tuple[Callable[[], diffrax.AbstractSolver], Optional[int], bool, bool]] = {
    "tsit5": (diffrax.Tsit5, 7, True, True),
    "dopri5": (diffrax.Dopri5, 7, True, True),
    "kvaerno5": (diffrax.Kvaerno5, None, False, True),
    "rk4": (RK4, 4, False, False),
}


def _call_loss(loss_fn, params, data, has_data):
    return loss_fn(params, data) if has_data else loss_fn(params)


def _tree_all_finite(tree) -> jax.Array:
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree_util.tree_leaves(tree)
              if jnp.issubdtype(jnp.result_type(x), jnp.inexact)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


def _nan_where_unsaved(observed, saved: np.ndarray):
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


def _check_save_at(save_at, t0, t1):
    ts = np.asarray(save_at, dtype=np.float64)
    check_rank(ts, "save_at", 1)
    if ts.size == 0:
        raise ValueError("`save_at` must hold at least one time.")
    if not np.all(np.isfinite(ts)):
        raise ValueError("`save_at` must be finite.")
    if np.any(np.diff(ts) < 0):
        raise ValueError("`save_at` must be non-decreasing.")
    if ts[0] < t0 or ts[-1] > t1:
        raise ValueError(f"`save_at` must lie in [t0, t1] = [{t0}, {t1}]; got [{ts[0]}, {ts[-1]}].")
    return ts


@functools.lru_cache(maxsize=64)
def _flow_solver(loss_fn, observe, observe_args, has_data, solver_name, adaptive_cfg, max_steps, use_igr, fixed,
                 count):
    """Build and jit the diffrax solve (cached per loss/observe/solver configuration)."""
    factory = SOLVERS[solver_name][0]

    grad_fn = jax.grad(lambda p, d: _call_loss(loss_fn, p, d, has_data))

    def vector_field(t, y, a):
        data, lr = a
        if count:
            jax.debug.callback(_bump_counter)
        g = grad_fn(y, data)
        if use_igr:
            # grad (eta/4 |g|^2) = (eta/2) H g, by forward-over-reverse differentiation.
            _, hg = jax.jvp(lambda p: grad_fn(p, data), (y,), (g,))
            g = jax.tree_util.tree_map(lambda gi, hi: gi + 0.5 * lr * hi, g, hg)
        return jax.tree_util.tree_map(jnp.negative, g)

    def obs(t, y, a):
        if observe is None:
            return y
        return observe(y, t, a[0]) if observe_args else observe(y, t)

    def nonfinite(t, y, a, **kw):
        return jnp.logical_not(_tree_all_finite(y))

    @jax.jit
    def solve(params0, t0, t1, save_at, dt0, grid, data, lr):
        if fixed:
            controller = diffrax.StepTo(ts=grid)
            dt0 = None
        else:
            rtol, atol, dtmin = adaptive_cfg
            controller = diffrax.PIDController(rtol=rtol, atol=atol, dtmin=dtmin)
        saveat = diffrax.SaveAt(subs=[
            diffrax.SubSaveAt(ts=save_at, fn=obs),
            diffrax.SubSaveAt(t1=True, fn=lambda t, y, a: (t, y)),
        ])
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(vector_field), factory(), t0, t1, dt0, params0, (data, lr),
            saveat=saveat, stepsize_controller=controller, max_steps=max_steps, throw=False,
            event=diffrax.Event(nonfinite),
        )
        observed, (t_last, y_last) = sol.ys
        last = obs(t_last[0], jax.tree_util.tree_map(lambda x: x[0], y_last), (data, lr))
        return (observed, t_last[0], jax.tree_util.tree_map(lambda x: x[0], y_last), last,
                sol.result._value, sol.stats["num_steps"], sol.stats["num_accepted_steps"],
                sol.stats["num_rejected_steps"])

    return solve


_EVAL_COUNTER = [0]


def _bump_counter():
    _EVAL_COUNTER[0] += 1


_RESULT_NAMES = ("successful", "max_steps_reached", "dt_min_reached", "event_occurred")


def _result_name(value) -> tuple[str, str]:
    for name in _RESULT_NAMES:
        item = getattr(diffrax.RESULTS, name, None)
        if item is not None and int(item._value) == int(value):
            return name, diffrax.RESULTS[item]
    for name in dir(diffrax.RESULTS):
        item = getattr(diffrax.RESULTS, name)
        if hasattr(item, "_value") and int(item._value) == int(value):
            return name, diffrax.RESULTS[item]
    return f"result_{int(value)}", "unknown diffrax result"


def gradient_flow(
    loss_fn: Callable,
    params0: PyTree,
    *,
    t1: float,
    save_at,
    observe: Optional[Callable] = None,
    solver: str = "tsit5",
    rtol: float = 1e-6,
    atol: float = 1e-8,
    max_steps: int = 100_000,
    dt0: Optional[float] = None,
    dtmin: Optional[float] = None,
    igr_lr: Optional[float] = None,
    args: Any = None,
    t0: float = 0.0,
    observe_args: bool = False,
    count_evals: bool = False,
    throw: bool = True,
) -> Trajectory:
    """Integrate ``d theta/dt = -grad L(theta)`` from ``t0`` to ``t1`` with diffrax.

    Args:
      loss_fn: ``loss_fn(params, args) -> scalar`` (``loss_fn(params)`` when ``args`` is
        None). Differentiable in ``params``; data goes in ``args`` (passed to the jitted
        solve as an argument, never closed over).
      params0: initial parameter pytree (float leaves; float64 for exact checks).
      t1: final time (> t0).
      save_at: 1-D non-decreasing array of times in ``[t0, t1]`` at which ``observe``
        is recorded (diffrax ``SaveAt(ts=..., fn=...)``: only the statistics are stored).
      observe: ``observe(params, t) -> pytree`` (``observe(params, t, args)`` with
        ``observe_args=True``); ``None`` records the parameters.
      solver: ``"tsit5"`` (adaptive, default), ``"dopri5"`` (adaptive), ``"kvaerno5"``
        (implicit, L-stable, for stiff small models: it forms Jacobians of the vector
        field, i.e. dense Hessians) or ``"rk4"`` (classical RK4 with fixed step ``dt0``;
        save times are inserted into the step grid so observations are exact nodes).
      rtol, atol: tolerances of the adaptive PID step-size controller.
      max_steps: cap on solver steps (exceeding it is a failure, never a truncation).
      dt0: initial step (adaptive; ``None`` lets diffrax choose) or the fixed step (rk4,
        required).
      dtmin: smallest adaptive step; reaching it is reported as ``"dt_min_reached"``.
      igr_lr: if given (``eta``), integrate the implicit-gradient-regularisation flow
        ``-grad(L + (eta/4)|grad L|^2)`` (Barrett & Dherin 2021) instead.
      args: data pytree passed to ``loss_fn``.
      t0: initial time.
      observe_args: pass ``args`` to ``observe`` as a third argument.
      count_evals: count vector-field evaluations exactly at run time (a host callback
        per evaluation: use for benchmarks of small problems, not on accelerators).
      throw: raise :class:`DynamicsError` on failure (default); ``False`` returns the
        flagged trajectory instead.

    Returns:
      :class:`Trajectory`. ``n_grad_evals``: with ``count_evals=True`` the exact number
      of vector-field evaluations (including diffrax's initial-step selection);
      otherwise the tableau count for the explicit solvers (Tsit5/Dopri5, FSAL:
      ``1 + 6 * attempted steps``, which can miss the one or two evaluations of the
      initial-step heuristic; RK4: ``4 * steps``, exact) and ``None`` for Kvaerno5.

    Example:
      >>> import jax.numpy as jnp, numpy as np
      >>> tr = gradient_flow(lambda p: 0.5 * jnp.sum(p ** 2), jnp.ones(2), t1=1.0,
      ...                    save_at=jnp.array([0.0, 1.0]), rtol=1e-10, atol=1e-12)
      >>> bool(np.allclose(tr.params, np.exp(-1.0), atol=1e-9)), tr.ok
      (True, True)
    """
    check_choice(solver, "solver", SOLVERS)
    check_positive(max_steps, "max_steps")
    t0 = float(t0)
    t1 = float(t1)
    if not (np.isfinite(t1) and t1 > t0):
        raise ValueError(f"`t1` must be finite and > t0 = {t0}; got {t1}.")
    ts = _check_save_at(save_at, t0, t1)
    if igr_lr is not None:
        check_positive(igr_lr, "igr_lr")
    leaves = jax.tree_util.tree_leaves(params0)
    if not leaves:
        raise ValueError("`params0` has no leaves.")
    for leaf in leaves:
        if not jnp.issubdtype(jnp.result_type(leaf), jnp.floating):
            raise TypeError(f"`params0` leaves must be floating point; got {jnp.result_type(leaf)}.")
    dtype = jnp.result_type(*leaves)
    _, n_stages, fsal, adaptive = SOLVERS[solver]
    fixed = not adaptive
    if fixed:
        if dt0 is None:
            raise ValueError(f"solver {solver!r} takes fixed steps: pass `dt0` (the step size).")
        check_positive(dt0, "dt0")
        n_uniform = int(math.ceil((t1 - t0) / float(dt0) - 1e-9))
        grid = np.unique(np.concatenate([t0 + float(dt0) * np.arange(n_uniform), ts, [t1]]))
        grid = grid[(grid >= t0) & (grid <= t1)]
        if len(grid) - 1 > max_steps:
            raise ValueError(f"fixed step dt0={dt0} needs {len(grid) - 1} steps > `max_steps`={max_steps}.")
        dt_arg = None
    else:
        check_positive(rtol, "rtol")
        check_positive(atol, "atol")
        if dt0 is not None:
            check_positive(dt0, "dt0")
        if dtmin is not None:
            check_positive(dtmin, "dtmin")
        grid = np.array([t0, t1])
        dt_arg = None if dt0 is None else jnp.asarray(dt0, dtype)
    adaptive_cfg = (float(rtol), float(atol), None if dtmin is None else float(dtmin))
    has_data = args is not None
    solve = _flow_solver(loss_fn, observe, bool(observe_args), has_data, solver, adaptive_cfg,
                         int(max_steps), igr_lr is not None, fixed, bool(count_evals))
    if count_evals:
        jax.effects_barrier()
        _EVAL_COUNTER[0] = 0
    out = solve(params0, jnp.asarray(t0, dtype), jnp.asarray(t1, dtype), jnp.asarray(ts, dtype), dt_arg,
                jnp.asarray(grid, dtype), args, jnp.asarray(0.0 if igr_lr is None else igr_lr, dtype))
    observed, t_last, params, last, result, n_all, n_acc, n_rej = jax.device_get(out)
    if count_evals:
        jax.effects_barrier()
        counted = _EVAL_COUNTER[0]
    t_last = float(t_last)
    name, message = _result_name(result)
    if name == "event_occurred":
        name, message = "non_finite", f"the state became non-finite at t = {t_last:.6g}"
    if name == "successful" and not bool(jax.device_get(_tree_all_finite(params))):
        name, message = "non_finite", "the final state is non-finite"
    ok = name == "successful"
    saved = np.ones(ts.shape, bool) if ok else ts <= t_last
    observed = _nan_where_unsaved(observed, saved)
    n_all = int(n_all)
    if count_evals:
        n_evals = int(counted)
    elif n_stages is None:
        n_evals = None
    elif fsal:
        n_evals = 1 + (n_stages - 1) * n_all
    else:
        n_evals = n_stages * n_all
    method = f"gradient flow ({solver}" + ("" if fixed else f", rtol={rtol:g}, atol={atol:g}") + \
        (f", dt={dt0:g}" if fixed else "") + (f", IGR eta={igr_lr:g}" if igr_lr is not None else "") + ")"
    traj = Trajectory(ts=ts, observed=observed, params=params, ok=ok, status=name, message=message,
                      t_final=t_last, n_steps=int(n_acc), n_rejected=int(n_rej), n_grad_evals=n_evals,
                      saved=saved, last=last, method=method)
    if not ok and throw:
        hint = {
            "max_steps_reached": " Increase `max_steps`, loosen rtol/atol, or use an implicit solver "
                                 "(solver='kvaerno5') if the flow is stiff.",
            "dt_min_reached": " The flow may be stiff or blow up; try solver='kvaerno5' or check the loss.",
            "non_finite": " Check the loss for overflow; reduce the step (rk4) or the time horizon.",
        }.get(name, "")
        raise DynamicsError(
            f"gradient_flow failed ({name}): {message} Reached t = {t_last:.6g} of t1 = {t1:.6g} after "
            f"{n_all} steps ({int(n_rej)} rejected); {int(saved.sum())} of {len(ts)} save times recorded.{hint}"
            " Pass throw=False to get the flagged trajectory.", traj)
    return traj


# --------------------------------------------------------------------------- discrete


@functools.lru_cache(maxsize=64)
def _discrete_runner(loss_fn, optimizer, observe, observe_args, has_state, has_batches, has_args,
                     n_chunks, every):
    has_data = has_batches or has_args

    def loss_and_grad(params, state, data):
        if has_state:
            (loss, new_state), g = jax.value_and_grad(
                lambda p: loss_fn(p, state, data) if has_data else loss_fn(p, state), has_aux=True)(params)
        else:
            loss, g = jax.value_and_grad(lambda p: _call_loss(loss_fn, p, data, has_data))(params)
            new_state = state
        return loss, g, new_state

    def obs(params, t, args):
        if observe is None:
            return params
        return observe(params, t, args) if observe_args else observe(params, t)

    @jax.jit
    def run(params0, state0, batches, args, lr):
        opt_state0 = optimizer.init(params0)

        def step(carry, xs):
            params, state, opt_state, first_bad = carry
            k, batch = xs
            data = batch if has_batches else args
            loss, g, new_state = loss_and_grad(params, state, data)
            updates, new_opt = optimizer.update(g, opt_state, params)
            new_params = optax.apply_updates(params, updates)
            good = jnp.isfinite(loss) & _tree_all_finite(g) & _tree_all_finite(new_params) & \
                _tree_all_finite(new_state)
            alive = first_bad < 0
            take = good & alive
            first_bad = jnp.where(alive & ~good, k, first_bad)
            pick = lambda new, old: jax.tree_util.tree_map(lambda a, b: jnp.where(take, a, b), new, old)
            carry = (pick(new_params, params), pick(new_state, state), pick(new_opt, opt_state), first_bad)
            return carry, None

        def chunk(carry, xs):
            ks, bs = xs
            carry, _ = jax.lax.scan(step, carry, (ks, bs))
            t = (ks[-1] + 1).astype(lr.dtype) * lr
            return carry, obs(carry[0], t, args)

        ks = jnp.arange(n_chunks * every).reshape(n_chunks, every)
        init = (params0, state0, opt_state0, jnp.asarray(-1))
        carry, observed = jax.lax.scan(chunk, init, (ks, batches))
        first = obs(params0, jnp.zeros((), lr.dtype), args)
        observed = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]), first, observed)
        params, state, _, first_bad = carry
        n_taken = jnp.where(first_bad < 0, n_chunks * every, first_bad)
        last = obs(params, n_taken.astype(lr.dtype) * lr, args)
        return observed, params, state, first_bad, last

    return run


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
    observe_args: bool = False,
    throw: bool = True,
) -> Trajectory:
    """Run an optax optimiser for ``steps`` steps inside ``lax.scan``.

    ``theta_{k+1} = theta_k + optimizer.update(grad L(theta_k; data_k))``, with
    ``data_k = batches[k]`` (mini-batch noise; every leaf of ``batches`` has leading
    axis ``steps``) or ``data_k = args`` (full batch). Statistics ``observe(params, t)``
    are recorded at steps ``0, m, 2m, ..., steps`` (``m = observe_every``) at times
    ``t = step * lr``, so a :func:`gradient_flow` trajectory saved at the same times
    overlays directly. Without ``lr`` the time axis is the step count.

    Args:
      loss_fn: ``loss_fn(params, data) -> scalar`` (``loss_fn(params)`` without data);
        with ``has_state=True`` ``loss_fn(params, state, data) -> (loss, new_state)``
        (e.g. BatchNorm in train mode; ``new_state`` is carried to the next step).
      params0: initial parameters.
      optimizer: any ``optax.GradientTransformation`` (``optax.sgd(lr)`` is GD).
      steps: number of optimiser steps (a multiple of ``observe_every``).
      observe: ``observe(params, t) -> pytree`` (``observe(params, t, args)`` with
        ``observe_args=True``); ``None`` records the parameters.
      observe_every: record every this many steps.
      batches: per-step data (leading axis ``steps``) or ``None``.
      args: full-batch data (used when ``batches`` is None; passed to ``observe`` with
        ``observe_args=True``).
      lr: the learning rate that sets the time axis ``t = step * lr``.
      has_state, state0: stateful loss and its initial state.
      throw: raise :class:`DynamicsError` when a loss, gradient, state or update is
        non-finite (default); ``False`` returns a flagged trajectory whose parameters are
        the last finite ones and whose ``first_bad_step`` names the failing step.

    Returns:
      :class:`Trajectory` with ``n_steps`` steps taken and ``n_grad_evals = n_steps``.

    Example:
      >>> import jax.numpy as jnp, optax
      >>> tr = discrete(lambda p: 0.5 * jnp.sum(p ** 2), jnp.ones(2), optax.sgd(0.1), steps=10,
      ...               observe=lambda p, t: p[0], observe_every=5, lr=0.1)
      >>> [round(float(t), 6) for t in tr.ts], [round(float(x), 6) for x in tr.observed]
      ([0.0, 0.5, 1.0], [1.0, 0.59049, 0.348678])
    """
    if not isinstance(optimizer, optax.GradientTransformation):
        raise TypeError(f"`optimizer` must be an optax.GradientTransformation; got {type(optimizer).__name__}.")
    if not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"`steps` must be a positive int; got {steps!r}.")
    if not isinstance(observe_every, (int, np.integer)) or observe_every < 1:
        raise ValueError(f"`observe_every` must be a positive int; got {observe_every!r}.")
    if steps % observe_every:
        raise ValueError(f"`steps` ({steps}) must be a multiple of `observe_every` ({observe_every}).")
    if lr is not None:
        check_positive(lr, "lr")
    if has_state and state0 is None:
        raise ValueError("`has_state=True` needs the initial loss state `state0`.")
    if not has_state and state0 is not None:
        raise ValueError("`state0` was given but `has_state=False`; pass has_state=True for a stateful loss.")
    leaves = jax.tree_util.tree_leaves(params0)
    if not leaves:
        raise ValueError("`params0` has no leaves.")
    dtype = jnp.result_type(*leaves)
    n_chunks = steps // observe_every
    if batches is not None:
        for leaf in jax.tree_util.tree_leaves(batches):
            if jnp.ndim(leaf) < 1 or jnp.shape(leaf)[0] != steps:
                raise ValueError(f"every leaf of `batches` must have leading axis `steps`={steps}; "
                                 f"got shape {tuple(jnp.shape(leaf))}.")
        xb = jax.tree_util.tree_map(lambda b: jnp.reshape(b, (n_chunks, observe_every) + jnp.shape(b)[1:]), batches)
    else:
        xb = jnp.zeros((n_chunks, observe_every), dtype)  # placeholder scanned alongside the step index
    run = _discrete_runner(loss_fn, optimizer, observe, bool(observe_args), bool(has_state), batches is not None,
                           args is not None, n_chunks, int(observe_every))
    scale = 1.0 if lr is None else float(lr)
    out = run(params0, state0, xb, args, jnp.asarray(scale, dtype))
    observed, params, state, first_bad, last = jax.device_get(out)
    first_bad = int(first_bad)
    ok = first_bad < 0
    ts = np.arange(n_chunks + 1, dtype=np.float64) * observe_every * scale
    n_taken = steps if ok else first_bad
    saved = np.ones(ts.shape, bool) if ok else np.arange(n_chunks + 1) * observe_every <= first_bad
    observed = _nan_where_unsaved(observed, saved)
    status = "successful" if ok else "non_finite"
    message = "completed" if ok else (
        f"the loss, gradient, state or update of step {first_bad} (t = {first_bad * scale:.6g}) was non-finite; "
        f"parameters are those before that step")
    traj = Trajectory(ts=ts, observed=observed, params=params, ok=ok, status=status, message=message,
                      t_final=float(n_taken * scale), n_steps=int(n_taken), n_rejected=0,
                      n_grad_evals=int(n_taken) + (0 if ok else 1), saved=saved, last=last,
                      first_bad_step=None if ok else first_bad, state=state if has_state else None,
                      method=f"optax optimiser, {steps} steps" + (f", t = step * {lr:g}" if lr else ", t = step"))
    if not ok and throw:
        raise DynamicsError(
            f"discrete run failed: {message}. {int(saved.sum())} of {len(ts)} observations recorded. "
            "Lower the learning rate, or pass throw=False to get the flagged trajectory.", traj)
    return traj


# --------------------------------------------------------------------------- escape


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
            return (f"did not escape: {self.criterion} > {self.threshold:g} never held "
                    f"(max {np.nanmax(self.series) if self.series.size else float('nan'):.4g})")
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
            sq = sum(np.sum((np.asarray(a) - np.asarray(r)[None]) ** 2, axis=tuple(range(1, np.ndim(a))))
                     for a, r in zip(leaves, refs))
            series = np.sqrt(sq)
        else:
            key = key or ("std" if criterion == "std_threshold" else "distance")
            if not isinstance(obs, dict) or key not in obs:
                raise ValueError(f"criterion {criterion!r} reads `observed[{key!r}]`; the trajectory's observed "
                                 f"pytree has keys {sorted(obs) if isinstance(obs, dict) else type(obs).__name__}."
                                 + (" Pass `reference` to measure parameter distance." if criterion == "distance" else ""))
            series = np.asarray(obs[key], dtype=np.float64)
            if criterion == "std_threshold" and series.ndim == 3:
                series = np.array([float(normalized_std(u)) if ok else np.nan
                                   for u, ok in zip(series, result.saved)])
    if series.shape != result.ts.shape:
        raise ValueError(f"criterion series must have shape {result.ts.shape} (one value per save time); "
                         f"got {series.shape}.")
    hits = np.nonzero(result.saved & np.isfinite(series) & (series > threshold))[0]
    if hits.size == 0:
        return EscapeResult(False, None, None, None, name, threshold, key, False, series)
    i = int(hits[0])
    return EscapeResult(True, float(result.ts[i]), i, float(series[i]), name, threshold, key, i == 0, series)


# --------------------------------------------------------------------------- sharpness


def dense_hessian(loss_fn: Callable, params: PyTree, args: Any = None) -> jax.Array:
    """Dense Hessian ``d^2 L / d theta^2`` over the ravelled parameter vector (small models).

    ``loss_fn(params, args)`` (``loss_fn(params)`` when ``args`` is None); ordering as
    :func:`jax.flatten_util.ravel_pytree`.
    """
    from jax.flatten_util import ravel_pytree

    flat, unravel = ravel_pytree(params)
    f = lambda x: _call_loss(loss_fn, unravel(x), args, args is not None)
    return jax.hessian(f)(flat)


def sharpness(loss_fn: Callable, params: PyTree, args: Any = None) -> jax.Array:
    """Top Hessian eigenvalue ``lambda_max(d^2 L / d theta^2)`` by a dense eigendecomposition.

    The edge-of-stability literature (Cohen et al., ICLR 2021) compares it with ``2/lr``:
    GD with step ``lr`` is linearly unstable along directions with curvature above ``2/lr``.
    """
    return jnp.linalg.eigvalsh(dense_hessian(loss_fn, params, args))[-1]
