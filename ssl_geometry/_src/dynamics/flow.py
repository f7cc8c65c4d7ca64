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

* :func:`ssl_geometry.dynamics` runs any optax optimiser (``optax.sgd`` = gradient descent,
  SGD with momentum, Adam, LARS, ...) inside ``lax.scan``. Step ``k`` is placed at
  time ``t = k * lr``, the time at which the flow is compared with it
  (``theta_{k+1} = theta_k - lr g_k`` is Euler's method on the flow with step lr).

Both record ``observe(params, t, args)`` (a pytree of statistics) at a set of times, so
full trajectories are never stored unless asked for (``observe=None`` stores the
parameters). Failure is explicit: exhausting ``max_steps``, step-size underflow or a
non-finite state raises :class:`DynamicsError` (default) or, with ``throw=False``,
returns a :class:`Trajectory` with ``ok=False``, the status, the time and step
count reached and the statistics of the last good state; observations at times that
were never reached are NaN placeholders marked ``saved=False``.

:func:`ssl_geometry.dynamics.escape_time` reads a trajectory and reports the first time a named
criterion (leaving a collapsed state) holds, or says explicitly that it never did.

One loss signature for both, that of :func:`ssl_geometry.fit` (``args`` is always passed,
as diffrax passes it to every vector field)::

    loss_fn(params, batch, args) -> scalar
    observe(params, t, args) -> pytree

``batch`` is the step's mini-batch in :func:`discrete` (``batches[k]``) and ``None`` in the
flow, which follows the full-batch loss: write the full-batch data into ``args`` and the same
``loss_fn`` drives both. A loss with state (:func:`discrete` only, ``has_state=True``; e.g.
BatchNorm in train mode) is ``loss_fn(params, state, batch, args) -> (loss, new_state)``; the
flow has no notion of a state update per step (BatchNorm in train mode normalises with batch
statistics, so the flow of a BN model is that of ``lambda p, b, a: loss_fn(p, state, b, a)[0]``).
"""
from __future__ import annotations

import functools
import math
from typing import Any, Callable, ClassVar, Optional

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

from ssl_geometry._src.checks import check_arity, check_choice, check_positive, check_rank
from ssl_geometry._src.core.loop import tree_all_finite
from ssl_geometry._src.dynamics.trajectory import DynamicsError, PyTree, Trajectory, nan_where_unsaved
from ssl_geometry._src.ops import loop_reports_non_finite

__all__ = ["RK4", "SOLVERS", "gradient_flow"]


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
def _flow_solver(loss_fn, observe, solver_name, adaptive_cfg, max_steps, use_igr, fixed, count):
    """Build and jit the diffrax solve (cached per loss/observe/solver configuration)."""
    factory = SOLVERS[solver_name][0]

    def full_batch_loss(p, data):
        return loss_fn(p, None, data)

    grad_fn = jax.grad(full_batch_loss)

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
        return y if observe is None else observe(y, t, a[0])

    def nonfinite(t, y, a, **kw):
        return jnp.logical_not(tree_all_finite(y))

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

        def run(_):
            sol = diffrax.diffeqsolve(
                diffrax.ODETerm(vector_field), factory(), t0, t1, dt0, params0, (data, lr),
                saveat=saveat, stepsize_controller=controller, max_steps=max_steps, throw=False,
                event=diffrax.Event(nonfinite),
            )
            observed, (t_last, y_last) = sol.ys
            return (observed, t_last[0], jax.tree_util.tree_map(lambda x: x[0], y_last), sol.result._value,
                    sol.stats["num_steps"], sol.stats["num_accepted_steps"], sol.stats["num_rejected_steps"])

        def skip(_):  # a non-finite field at the start: no step can be accepted, so none is attempted
            shapes = jax.eval_shape(run, None)
            nan = lambda s: jnp.full(s.shape, jnp.nan if jnp.issubdtype(s.dtype, jnp.inexact) else 0, s.dtype)
            return (jax.tree_util.tree_map(nan, shapes[0]), t0.astype(shapes[1].dtype), params0,
                    *(nan(x) for x in shapes[3:]))

        field_ok = tree_all_finite(grad_fn(params0, data))
        observed, t_last, y_last, result, n_all, n_acc, n_rej = jax.lax.cond(field_ok, run, skip, None)
        field_ok_last = tree_all_finite(grad_fn(y_last, data))
        last = obs(t_last, y_last, (data, lr))
        loss_last = full_batch_loss(y_last, data)
        return (observed, t_last, y_last, last, loss_last, result, n_all, n_acc, n_rej, field_ok, field_ok_last)

    return solve


_EVAL_COUNTER = [0]


def _bump_counter():
    _EVAL_COUNTER[0] += 1


_RESULT_NAMES = ("successful", "max_steps_reached", "dt_min_reached", "event_occurred")


def _result_name(value) -> tuple[str, str]:
    for name in _RESULT_NAMES:
        item = getattr(diffrax.RESULTS, name, None)
        if item is not None and int(item._value) == int(value):
            return name, diffrax.RESULTS[item]  # type: ignore[misc]  # equinox's Enumeration: RESULTS[item] is its message
    for name in dir(diffrax.RESULTS):
        item = getattr(diffrax.RESULTS, name)
        if hasattr(item, "_value") and int(item._value) == int(value):
            return name, diffrax.RESULTS[item]  # type: ignore[misc]  # equinox's Enumeration: RESULTS[item] is its message
    return f"result_{int(value)}", "unknown diffrax result"


def _step_grid(solver, fixed, t0, t1, ts, dt0, dtmin, rtol, atol, max_steps, dtype):
    """``(grid, dt0)`` for the solve: the fixed-step grid (save times inserted as nodes) or ``[t0, t1]``."""
    if fixed:
        if dt0 is None:
            raise ValueError(f"solver {solver!r} takes fixed steps: pass `dt0` (the step size).")
        check_positive(dt0, "dt0")
        n_uniform = int(math.ceil((t1 - t0) / float(dt0) - 1e-9))
        grid = np.unique(np.concatenate([t0 + float(dt0) * np.arange(n_uniform), ts, [t1]]))
        grid = grid[(grid >= t0) & (grid <= t1)]
        if len(grid) - 1 > max_steps:
            raise ValueError(f"fixed step dt0={dt0} needs {len(grid) - 1} steps > `max_steps`={max_steps}.")
        return grid, None
    check_positive(rtol, "rtol")
    check_positive(atol, "atol")
    if dt0 is not None:
        check_positive(dt0, "dt0")
    if dtmin is not None:
        check_positive(dtmin, "dtmin")
    return np.array([t0, t1]), (None if dt0 is None else jnp.asarray(dt0, dtype))


def _grad_evals(count_evals, counted, n_stages, fsal, n_all):
    """Vector-field evaluations: counted exactly (``count_evals``, including diffrax's initial-step selection),
    or from the tableau: Tsit5/Dopri5 (FSAL) ``1 + 6 * attempted steps``, which can miss the one or two
    evaluations of the initial-step heuristic; RK4 ``4 * steps``, exact; ``None`` for implicit solvers."""
    if count_evals:
        return int(counted)
    if n_stages is None:
        return None
    return 1 + (n_stages - 1) * n_all if fsal else n_stages * n_all


_FAILURE_HINTS = {
    "max_steps_reached": " Increase `max_steps`, loosen rtol/atol, or use an implicit solver "
                         "(solver='kvaerno5') if the flow is stiff.",
    "dt_min_reached": " The flow may be stiff or blow up; try solver='kvaerno5' or check the loss.",
    "non_finite": " Check the loss for overflow; reduce the step (rk4) or the time horizon.",
}


def check_loss_signature(loss_fn, params, args) -> None:
    """Raise ``TypeError`` naming the expected signature ``loss_fn(params, batch, args) -> scalar`` unless the
    loss's signature takes three positional arguments (``inspect.signature``, where it can be read) and
    ``loss_fn(params, None, args)`` traces (``jax.eval_shape``: nothing is computed) to a scalar."""
    check_arity(loss_fn, "loss_fn", 3, "loss_fn(params, batch, args) -> scalar")
    try:
        out = jax.eval_shape(loss_fn, params, None, args)
    except TypeError as err:
        raise TypeError(f"`loss_fn` must be loss_fn(params, batch, args) -> scalar (called as loss_fn(params0, None, "
                        f"args)); calling it raised TypeError: {' '.join(str(err).split())[:300]}") from err
    shape = getattr(out, "shape", None)
    if shape != ():
        got = f"shape {tuple(shape)}" if shape is not None else type(out).__name__
        raise TypeError(f"`loss_fn` must be loss_fn(params, batch, args) -> scalar; it returned {got}.")


def _check_flow_args(params0, t0, t1, save_at, solver, max_steps, igr_lr):
    """Validate :func:`gradient_flow`'s arguments; returns ``(t0, t1, save times, dtype of params0)``."""
    check_choice(solver, "solver", SOLVERS)
    check_positive(max_steps, "max_steps")
    t0, t1 = float(t0), float(t1)
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
    return t0, t1, ts, jnp.result_type(*leaves)


def _flow_status(result, field_ok: bool, field_ok_last: bool, t_last: float, loss_last, params) -> tuple[str, str]:
    """``(status, message)`` of a finished solve: diffrax's result, refined to ``"non_finite"`` when the field at
    the start or at the last state, the state itself or the final loss is non-finite."""
    name, message = _result_name(result)
    if not field_ok:
        return "non_finite", (f"the vector field -grad L is non-finite at the start t = {t_last:.6g} "
                              f"(the loss there is {loss_last}), so no step can be taken.")
    if name in ("max_steps_reached", "dt_min_reached") and not field_ok_last:
        return "non_finite", (f"the vector field -grad L is non-finite at t = {t_last:.6g} (the loss there "
                              f"is {loss_last}): every later step was rejected ({name}).")
    if name == "event_occurred":
        return "non_finite", f"the state became non-finite at t = {t_last:.6g}"
    if name == "successful" and not bool(jax.device_get(tree_all_finite(params))):
        return "non_finite", "the final state is non-finite"
    if name == "successful" and not np.isfinite(loss_last):
        return "non_finite", f"the loss at the final state t = {t_last:.6g} is non-finite ({loss_last})"
    return name, message


def _method_name(solver, fixed, rtol, atol, dt0, igr_lr) -> str:
    """The trajectory's ``method`` label, e.g. ``"gradient flow (tsit5, rtol=1e-06, atol=1e-08)"``."""
    return (f"gradient flow ({solver}" + ("" if fixed else f", rtol={rtol:g}, atol={atol:g}")
            + (f", dt={dt0:g}" if fixed else "") + (f", IGR eta={igr_lr:g}" if igr_lr is not None else "") + ")")


def _counted_solve(solve, operands, count_evals: bool):
    """``(host copy of solve(*operands), vector-field evaluations counted at run time or None)``."""
    if count_evals:
        jax.effects_barrier()
        _EVAL_COUNTER[0] = 0
    with loop_reports_non_finite():  # a blow-up is reported as the flow's non-finite event
        out = jax.device_get(solve(*operands))
    if not count_evals:
        return out, None
    jax.effects_barrier()
    return out, _EVAL_COUNTER[0]


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
    count_evals: bool = False,
    throw: bool = True,
) -> Trajectory:
    """Integrate ``d theta/dt = -grad L(theta)`` from ``t0`` to ``t1`` with diffrax.

    Args:
      loss_fn: ``loss_fn(params, batch, args) -> scalar`` (the signature of :func:`discrete` and
        :func:`ssl_geometry.fit`), called with ``batch=None`` (the full-batch loss's flow) and
        ``args`` as given; data goes in ``args`` (an argument of the jitted solve, never closed over).
      params0: initial parameter pytree (float leaves; float64 for exact checks).
      t1: final time (> t0).
      save_at: 1-D non-decreasing array of times in ``[t0, t1]`` at which ``observe``
        is recorded (diffrax ``SaveAt(ts=..., fn=...)``: only the statistics are stored).
      observe: ``observe(params, t, args) -> pytree``; ``None`` records the parameters.
      solver: ``"tsit5"`` (adaptive, default), ``"dopri5"`` (adaptive), ``"kvaerno5"`` (implicit,
        L-stable, for stiff small models: it forms dense Hessians) or ``"rk4"`` (fixed step ``dt0``;
        save times are inserted into the step grid, so observations are exact nodes).
      rtol, atol: tolerances of the adaptive PID step-size controller.
      max_steps: cap on solver steps (exceeding it is a failure, never a truncation).
      dt0: initial step (adaptive; ``None`` lets diffrax choose) or the fixed step (rk4,
        required).
      dtmin: smallest adaptive step; reaching it is reported as ``"dt_min_reached"``.
      igr_lr: if given (``eta``), integrate the implicit-gradient-regularisation flow
        ``-grad(L + (eta/4)|grad L|^2)`` (Barrett & Dherin 2021) instead.
      args: data pytree passed to ``loss_fn`` and ``observe``.
      t0: initial time.
      count_evals: count vector-field evaluations exactly at run time (a host callback
        per evaluation: use for benchmarks of small problems, not on accelerators).
      throw: raise :class:`DynamicsError` on failure (default); ``False`` returns the
        flagged trajectory instead.

    Returns:
      :class:`Trajectory`; ``n_grad_evals`` is exact with ``count_evals=True``, else the
      tableau count (Tsit5/Dopri5 ``1 + 6 * steps``, RK4 ``4 * steps``, Kvaerno5 ``None``).

    Example:
      >>> import jax.numpy as jnp, numpy as np
      >>> tr = gradient_flow(lambda p, batch, args: 0.5 * jnp.sum(p ** 2), jnp.ones(2), t1=1.0,
      ...                    save_at=jnp.array([0.0, 1.0]), rtol=1e-10, atol=1e-12)
      >>> bool(np.allclose(tr.params, np.exp(-1.0), atol=1e-9)), tr.ok
      (True, True)
    """
    t0, t1, ts, dtype = _check_flow_args(params0, t0, t1, save_at, solver, max_steps, igr_lr)
    check_loss_signature(loss_fn, params0, args)
    if observe is not None:
        check_arity(observe, "observe", 3, "observe(params, t, args) -> pytree")
    _, n_stages, fsal, adaptive = SOLVERS[solver]
    fixed = not adaptive
    grid, dt_arg = _step_grid(solver, fixed, t0, t1, ts, dt0, dtmin, rtol, atol, max_steps, dtype)
    adaptive_cfg = (float(rtol), float(atol), None if dtmin is None else float(dtmin))
    solve = _flow_solver(loss_fn, observe, solver, adaptive_cfg, int(max_steps), igr_lr is not None, fixed,
                         bool(count_evals))
    operands = (params0, jnp.asarray(t0, dtype), jnp.asarray(t1, dtype), jnp.asarray(ts, dtype), dt_arg,
                jnp.asarray(grid, dtype), args, jnp.asarray(0.0 if igr_lr is None else igr_lr, dtype))
    out, counted = _counted_solve(solve, operands, bool(count_evals))
    observed, t_last, params, last, loss_last, result, n_all, n_acc, n_rej, field_ok, field_ok_last = out
    t_last = float(t_last)
    name, message = _flow_status(result, bool(field_ok), bool(field_ok_last), t_last, loss_last, params)
    if not field_ok:
        n_all = n_acc = n_rej = 0
    ok = name == "successful"
    saved = np.ones(ts.shape, bool) if ok else (ts <= t_last) & bool(field_ok)
    observed = nan_where_unsaved(observed, saved)
    n_all = int(n_all)
    n_evals = _grad_evals(count_evals, counted, n_stages, fsal, n_all)
    traj = Trajectory(ts=ts, observed=observed, params=params, ok=ok, status=name, message=message,
                      t_final=t_last, n_steps=int(n_acc), n_rejected=int(n_rej), n_grad_evals=n_evals,
                      saved=saved, last=last, method=_method_name(solver, fixed, rtol, atol, dt0, igr_lr))
    if not ok and throw:
        raise DynamicsError(
            f"gradient_flow failed ({name}): {message} Reached t = {t_last:.6g} of t1 = {t1:.6g} after "
            f"{n_all} steps ({int(n_rej)} rejected); {int(saved.sum())} of {len(ts)} save times recorded."
            f"{_FAILURE_HINTS.get(name, '')} Pass throw=False to get the flagged trajectory.", traj)
    return traj
