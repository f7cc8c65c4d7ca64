"""Head-stationary collapsed states: the head driven to stationarity at a collapsed batch, and rho there.

The measurement behind the registry claim ``stationarity-forces-rho-zero`` (experiments/claims/), decided by
experiment 3 (:mod:`experiments.collapse_hessians`) and experiment 7 (:mod:`experiments.objectives`) with
:func:`experiments.rules.decide_rho_zero`. At a collapsed state (both views at one point ``c``) of an objective whose
samples are exchangeable, every residual row is the same ``r`` and the head's gradient is ``n (dh(c)/dtheta)^T r``;
when ``dh(c)/dtheta`` has full row rank, a stationary head forces ``r = 0``
(:func:`ssl_geometry.geometry.identical_rows_finding` measures the bound). Here the head is *driven* to a stationary
point of ``theta -> L(h_theta(z))`` (BFGS or L-BFGS, then Newton steps, on the flattened head parameters, the
state's other arrays held fixed) and the residual is read there, beside the residual ``rho_ref`` of the same state
with the head perturbed, and beside the extreme singular values of ``dh(c)/dtheta`` at the head reached
(:func:`head_jacobian_singular_values`), where the premise (:func:`experiments.rules.rho_zero_full_row_rank`) is checked.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import scipy.optimize
from jax.flatten_util import ravel_pytree

from experiments import claims, rules
from ssl_geometry import curvature

__all__ = ["head_jacobian_singular_values", "stationary_head_state"]

_EPS = float(np.finfo(np.float64).eps)
#: Above this many head parameters L-BFGS replaces BFGS (whose inverse Hessian is dense) and the Newton polish
#: solves matrix-free (:func:`_newton_cg_step`) where the dense Hessian would not fit.
MAX_DENSE_PARAMS = 4096


def head_jacobian_singular_values(fn, theta, *, max_dense_entries: int = 1 << 22) -> dict:
    """Extreme singular values of ``J = d fn / d theta`` at ``theta`` (``fn: R^P -> R^k``, ``theta`` flat).

    Returns ``{"sigma_min", "sigma_max", "rows": k, "cols": P, "method"}``:

    * ``method = "dense svd"`` when ``k P <= max_dense_entries``: ``J`` by ``jax.jacrev``, then
      ``numpy.linalg.svd`` in float64; ``sigma_min = s_k``, ``sigma_max = s_1``;
    * ``method = "gram eigvalsh"`` otherwise: the ``k x k`` Gram ``G = J J^T`` built matrix-free, column
      ``i`` as ``J (J^T e_i)`` (a vjp then the linearised ``fn``; ``jax.lax.map`` over the basis in batches
      of ``max(1, max_dense_entries // P)``, so ``J`` is never stored), symmetrised, then
      ``jnp.linalg.eigvalsh``: ``sigma = sqrt(max(lambda, 0))``. The Gram squares the condition number, so
      ``sigma_min`` is resolved down to about ``sqrt(eps) sigma_max`` (round-off of ``G`` is ``eps |J|_2^2``);
    * ``method = "k > P"``: ``rank J <= P < k``, so ``sigma_min = 0`` (``sigma_max`` from the dense SVD:
      ``k P < k^2`` entries).

    Raises:
      ValueError: ``theta`` not 1-D or ``fn``'s output not a vector, or ``max_dense_entries < 1``.
      FloatingPointError: a non-finite Jacobian or Gram entry.
    """
    theta = jnp.asarray(theta)
    if theta.ndim != 1:
        raise ValueError(f"`theta` must be a flat (1-D) parameter vector; got shape {theta.shape}.")
    if not isinstance(max_dense_entries, int) or max_dense_entries < 1:
        raise ValueError(f"`max_dense_entries` must be a positive int; got {max_dense_entries!r}.")
    out = jax.eval_shape(fn, theta)
    if len(out.shape) != 1:
        raise ValueError(f"`fn` must map theta to a vector (one row's output, shape (k,)); got shape {out.shape}.")
    k, P = int(out.shape[0]), int(theta.size)
    if k * P <= max_dense_entries or k > P:
        # reverse mode for k <= P (k vjps; forward mode would push a P x P basis), forward for k > P
        J = np.asarray((jax.jacfwd if k > P else jax.jacrev)(fn)(theta), np.float64)
        if not np.all(np.isfinite(J)):
            raise FloatingPointError("head_jacobian_singular_values: the Jacobian dh/dtheta has a non-finite entry.")
        s = np.linalg.svd(J, compute_uv=False) if J.size else np.zeros(1)
        return {"sigma_min": 0.0 if k > P else float(s[-1]), "sigma_max": float(s[0]), "rows": k, "cols": P,
                "method": "k > P" if k > P else "dense svd"}
    _, vjp = jax.vjp(fn, theta)
    _, lin = jax.linearize(fn, theta)
    cols = jax.lax.map(lambda e: lin(vjp(e)[0]), jnp.eye(k, dtype=theta.dtype),
                       batch_size=max(1, min(k, max_dense_entries // P)))
    G = np.asarray(cols, np.float64)
    if not np.all(np.isfinite(G)):
        raise FloatingPointError("head_jacobian_singular_values: the Gram J J^T has a non-finite entry.")
    lam = np.asarray(jnp.linalg.eigvalsh(jnp.asarray(0.5 * (G + G.T))), np.float64)
    return {"sigma_min": float(np.sqrt(max(lam[0], 0.0))), "sigma_max": float(np.sqrt(max(lam[-1], 0.0))),
            "rows": k, "cols": P, "method": "gram eigvalsh"}


def _residual(model, variables, loss_fn, z, train):
    """``(out, res)``: ``out(theta) = h_theta(z)`` and ``res(theta) = (|rho|, L)`` with ``rho = grad_u L`` at
    ``u = h_theta(z)``; ``res`` is closure-converted (:func:`ssl_geometry.curvature.closure_convert`), so every
    array it reads is an argument of one compiled program shared by every state of the same code and shapes."""
    flat0, unravel = ravel_pytree(variables["params"])

    def out(theta):
        return model.apply({**variables, "params": unravel(theta)}, z, train=train)[0]

    def res(theta):
        u = out(theta)
        return jnp.linalg.norm(jax.grad(loss_fn)(u)), loss_fn(u)

    canon, consts, _ = curvature.closure_convert(res, jnp.asarray(flat0, jnp.float64))
    return out, lambda theta: _call(canon, jnp.asarray(theta), consts)


@functools.partial(jax.jit, static_argnums=0)
def _call(canon, theta, consts):
    """``canon(consts, theta)``, compiled once per closure-converted program and shapes."""
    return canon(consts, theta)


@functools.partial(jax.jit, static_argnums=0)
def _value_grad(canon, theta, consts):
    """``(L, grad L)`` at ``theta`` for ``L = canon(consts, .)``, compiled once per program and shapes."""
    return jax.value_and_grad(lambda t: canon(consts, t))(theta)


@functools.partial(jax.jit, static_argnums=(0, 4))
def _newton_cg_step(canon, theta, consts, g, iters):
    """The matrix-free Newton step ``s ~ H^+ g`` of :func:`_newton_polish` above :data:`MAX_DENSE_PARAMS`:
    ``iters`` conjugate-gradient iterations (``jax.scipy.sparse.linalg.cg`` from ``s = 0``, relative tolerance
    ``1e-12``) on ``H s = g``, ``H v = d/de grad L(theta + e v)`` (forward over reverse; ``H`` is never formed).
    From ``s = 0`` the iterates stay in the Krylov space of ``g``, so on a singular positive semi-definite ``H``
    (an over-parametrised head) CG approximates the minimum-norm solution, as the dense least-squares step does."""
    grad = jax.grad(lambda t: canon(consts, t))
    step, _ = jax.scipy.sparse.linalg.cg(lambda v: jax.jvp(grad, (theta,), (v,))[1], g, tol=1e-12, maxiter=iters)
    return step


def _newton_polish(fg, solve, x, steps):
    """Up to ``steps`` Newton steps ``x <- x - s`` on the gradient, ``s = solve(x, g) ~ H^+ g``, each kept only if
    it is smaller than ``|x| / 10`` and lowers ``|g|``; returns ``(x, steps kept)``. A line search reads ``L``,
    whose round-off (``eps |L|``) stalls it while ``|g|`` is still about ``sqrt(eps)`` of its scale; a Newton step
    reads only ``g`` and ``H``, so it reaches the gradient's own round-off (``solve``: :func:`_newton_solver`)."""
    g, kept = fg(x)[1], 0
    for _ in range(int(steps)):
        step = np.asarray(solve(x, g), np.float64)
        if not np.linalg.norm(step) <= 0.1 * np.linalg.norm(x):  # a local polish, never a jump (NaN: stop)
            break
        g_new = fg(x - step)[1]
        if not (np.all(np.isfinite(g_new)) and np.linalg.norm(g_new) < np.linalg.norm(g)):
            break
        x, g, kept = x - step, g_new, kept + 1
    return x, kept


@functools.partial(jax.jit, static_argnums=0)
def _dense_hessian(canon, theta, consts):
    """The dense ``P x P`` Hessian of ``L = canon(consts, .)`` at ``theta`` (up to :data:`MAX_DENSE_PARAMS`)."""
    return jax.hessian(lambda t: canon(consts, t))(theta)


def _newton_solver(canon, consts, dense: bool):
    """``solve(x, g) ~ H^+ g`` for :func:`_newton_polish`: the minimum-norm least-squares solution of the symmetrised
    dense Hessian (``dense``), else :func:`_newton_cg_step` with :data:`NEWTON_CG_ITERS` iterations."""
    if not dense:
        return lambda x, g: _newton_cg_step(canon, jnp.asarray(x), consts, jnp.asarray(g), NEWTON_CG_ITERS)

    def solve(x, g):
        H = np.asarray(_dense_hessian(canon, jnp.asarray(x), consts), np.float64)
        return np.linalg.lstsq(0.5 * (H + H.T), g, rcond=1e-12)[0]

    return solve


#: Conjugate-gradient iterations per matrix-free Newton step (:func:`_newton_cg_step`). At the paper's SimSiam head
#: (7,340,032 parameters, batch 32) one such step took ``|g|`` from 1.2e-9, where L-BFGS stopped, to 4.8e-14.
NEWTON_CG_ITERS = 10


#: L-BFGS's memory (pairs of curvature vectors), scipy's L-BFGS-B default ``maxcor``.
LBFGS_MEMORY = 10
#: Why :func:`_lbfgs_search` stopped, by its status code.
SEARCH_STOPS = ("running", "max_iter", "gtol", "line search failed", "non-finite", "no decrease")


def _objective_program(model, variables, loss_fn, z, train):
    """``(canon, consts, theta0)``: ``L(theta) = loss_fn(h_theta(z))`` at the flat head ``theta0``, closure-converted
    (:func:`ssl_geometry.curvature.closure_convert`, the library's one caching policy): ``canon`` is equal for every
    state of the same code, and every array it reads (``z``, the head's other state, the arrays ``loss_fn`` closes
    over) is in ``consts``, an argument of the compiled search, so one compilation serves every such state."""
    flat0, unravel = ravel_pytree(variables["params"])
    flat0 = jnp.asarray(flat0, jnp.float64)
    rest = {k: v for k, v in variables.items() if k != "params"}

    def objective(theta):
        return loss_fn(model.apply({**rest, "params": unravel(theta)}, z, train=train)[0])

    canon, consts, out = curvature.closure_convert(objective, flat0)
    if getattr(out, "shape", None) != ():
        raise ValueError(f"`loss_fn` must return a scalar; got shape {getattr(out, 'shape', None)}.")
    return canon, consts, flat0


@functools.partial(jax.jit, static_argnums=0)
def _lbfgs_run(canon, theta0, consts, max_iter, gtol):
    """The jitted search on ``L = canon(consts, .)`` (compiled once per program and shapes):
    ``(theta, value, grad, iterations, status)``.

    ``optax.lbfgs`` (memory :data:`LBFGS_MEMORY`, its zoom line search: strong Wolfe conditions, at most 20
    trial steps) in a ``jax.lax.while_loop``. From ``theta_0`` each iteration ``t`` takes the step the line search
    returns where it does not raise ``L`` (``L_{t+1} <= L_t``, finite, gradient finite); the loop stops (``status``,
    :data:`SEARCH_STOPS`) when ``t = max_iter``, when ``|grad L|_inf <= gtol`` (scipy's ``gtol``), when the line
    search finds no step of sufficient decrease (``decrease_error > 0``: the round-off floor of ``L``), when the
    step did not lower ``L`` (``L_{t+1} >= L_t``: its approximate Wolfe condition accepts such steps at the
    round-off floor; scipy's BFGS stops there too), or when ``L`` or its gradient at the step is non-finite.
    """
    opt = optax.lbfgs(memory_size=LBFGS_MEMORY)

    def f(theta):
        return canon(consts, theta)

    v0, g0 = jax.value_and_grad(f)(theta0)
    finite0 = jnp.isfinite(v0) & jnp.all(jnp.isfinite(g0))
    status0 = jnp.where(~finite0, 4, jnp.where(max_iter <= 0, 1, jnp.where(jnp.max(jnp.abs(g0)) <= gtol, 2, 0)))

    def body(carry):
        theta, state, v, g, it, _ = carry
        updates, new_state = opt.update(g, state, theta, value=v, grad=g, value_fn=f)
        theta_new = optax.apply_updates(theta, updates)
        v_new = optax.tree_utils.tree_get(new_state, "value")
        g_new = optax.tree_utils.tree_get(new_state, "grad")
        info = optax.tree_utils.tree_get(new_state, "info")
        finite = jnp.isfinite(v_new) & jnp.all(jnp.isfinite(g_new))
        failed = info.decrease_error > 0
        take, v_old = finite & (v_new <= v), v
        # a step not taken ends the loop (status 3, 4 or 5), so the optimiser's state needs no selection
        theta, v, g = jax.tree.map(lambda a, b: jnp.where(take, a, b), (theta_new, v_new, g_new), (theta, v, g))
        it = it + take.astype(it.dtype)
        status = jnp.where(~finite, 4, jnp.where(failed, 3, jnp.where(~(v_new < v_old), 5, jnp.where(
            jnp.max(jnp.abs(g)) <= gtol, 2, jnp.where(it >= max_iter, 1, 0)))))
        return theta, new_state, v, g, it, status

    carry = (theta0, opt.init(theta0), v0, g0, jnp.asarray(0, jnp.int32), status0)
    theta, _, v, g, it, status = jax.lax.while_loop(lambda c: c[-1] == 0, body, carry)
    return theta, v, g, it, status


def _lbfgs_search(model, variables, loss_fn, z, train, *, max_iter: int, gtol: float = 0.0):
    """Run the jitted L-BFGS of :func:`_lbfgs_run` on ``theta -> loss_fn(h_theta(z))`` from
    ``variables["params"]`` (flat); returns ``(theta, iterations, stop)``, ``stop`` one of :data:`SEARCH_STOPS`.

    Raises:
      FloatingPointError: ``L`` or its gradient non-finite at the start or at a step the line search returned.
    """
    canon, consts, theta0 = _objective_program(model, variables, loss_fn, z, train)
    theta, _, _, it, status = _lbfgs_run(canon, theta0, consts, jnp.asarray(int(max_iter), jnp.int32),
                                         jnp.asarray(float(gtol), jnp.float64))
    stop = SEARCH_STOPS[int(status)]
    if stop == "non-finite":
        raise FloatingPointError(f"the head's loss or gradient became non-finite after {int(it)} L-BFGS iterations "
                                 "while driving it to stationarity.")
    return theta, int(it), stop


def stationary_head_state(model, variables, loss_fn, z, *, key, train: bool = False, max_iter: int = 400,
                          gtol: float = 0.0, newton_steps: int = 5, measure_rank: bool = True,
                          method: str = "auto") -> dict:
    """Drive the head to stationarity at ``z`` and measure the residual there (module docstring).

    A quasi-Newton search (float64, exact gradients) minimises ``L(theta) = loss_fn(h_theta(z))`` from
    ``variables["params"]`` for at most ``max_iter`` iterations, stopping earlier where ``|grad L|_inf <= gtol``
    or where the line search can no longer decrease ``L`` (round-off); ``method``:

    * ``"lbfgs"``: the jitted L-BFGS of :func:`_lbfgs_run` (``optax.lbfgs``, zoom line search, the loop a
      ``jax.lax.while_loop`` on the device, every array the loss reads passed as an argument, so a state with the
      same program and shapes reuses the compiled search);
    * ``"bfgs"``: scipy's BFGS (dense inverse Hessian; only for at most :data:`MAX_DENSE_PARAMS` parameters);
    * ``"auto"`` (default): ``"bfgs"`` up to :data:`MAX_DENSE_PARAMS` parameters (a tiny head: the compiled
      search costs more to compile than scipy takes to run), ``"lbfgs"`` beyond.

    Then at most ``newton_steps`` Newton steps polish the gradient (:func:`_newton_polish`: dense up to
    :data:`MAX_DENSE_PARAMS` parameters, :data:`NEWTON_CG_ITERS` conjugate-gradient iterations on Hessian-vector
    products beyond) where the head reached is not yet stationary. At the head ``theta*`` reached:

    * ``grad_norm = |grad_theta L|``, ``jac_norm = |dh/dtheta|_2`` (:func:`ssl_geometry.curvature.operator_norm`);
    * ``rho = |grad_u L|``, ``residual_tol = sqrt(eps) max(1, |L|)`` (the certificate's ``rho = 0``);
    * ``rho_ref``: ``|grad_u L|`` with every parameter of ``theta*`` multiplied by ``1 + p xi``,
      ``xi ~ N(0, 1)``, ``p`` the registry's ``head_perturbation``;
    * ``stationary``: ``grad_norm <= sqrt(eps) jac_norm rho_ref`` or ``rho_ref <= residual_tol`` (the rule);
    * ``rho_bound``: :func:`experiments.rules.rho_zero_bound`, ``within_bound = rho <= rho_bound``;
    * ``jac_sigma_min``, ``jac_sigma_max``, ``jac_rows`` (``k``), ``jac_cols`` (``P``), ``jac_method``: the
      extreme singular values of ``dh(c)/dtheta`` at ``theta*`` (:func:`head_jacobian_singular_values` of one row's
      output, ``c = z[0]``: ``h(z[:1])`` unless ``train``, where BatchNorm couples the rows); ``full_row_rank``: the
      rule's premise on them (:func:`experiments.rules.rho_zero_full_row_rank`); ``rho_implied_bound = grad_norm / (sqrt(n)
      jac_sigma_min)`` (``inf`` when ``jac_sigma_min = 0``), the bound on ``|rho|`` that the gradient reached
      implies when the rows are identical (``grad = n J^T r``, ``|rho| = sqrt(n) |r|``), reported; all of these
      only with ``measure_rank`` (``False`` is for timing probes of the search alone: the state then carries no
      premise and :func:`experiments.rules.decide_rho_zero` cannot read it);
    * ``rho_start``, ``grad_norm_start``: the same at the head it started from;
    * ``iterations`` (quasi-Newton iterations made), ``search_stop`` (why it stopped: ``"max_iter"``, ``"gtol"``,
      ``"line search failed"``, ``"no decrease"``; see :data:`SEARCH_STOPS`), ``search_method`` (``"lbfgs"`` or
      ``"scipy bfgs"``), ``newton_steps`` (Newton steps kept).

    Raises:
      ValueError: the rows of ``z`` are not all equal (not a collapsed batch); ``max_iter`` not a non-negative int,
        ``gtol`` not finite and >= 0, ``method`` unknown or ``"bfgs"`` above :data:`MAX_DENSE_PARAMS` parameters.
      FloatingPointError: a non-finite loss, gradient or Jacobian on the way (L-BFGS: at the start or at a step its
        line search returned).
    """
    if method not in ("auto", "lbfgs", "bfgs"):
        raise ValueError(f"`method` must be 'auto', 'lbfgs' or 'bfgs'; got {method!r}.")
    if isinstance(max_iter, bool) or not isinstance(max_iter, (int, np.integer)) or max_iter < 0:
        raise ValueError(f"`max_iter` must be a non-negative int; got {max_iter!r}.")
    if not (np.isfinite(gtol) and gtol >= 0):
        raise ValueError(f"`gtol` must be a finite float >= 0; got {gtol!r}.")
    z = jnp.asarray(z)
    if z.ndim != 2 or not bool(jnp.all(z == z[:1])):
        raise ValueError(f"`z` must be a collapsed batch (n, d) with every row equal; got shape {z.shape}"
                         + ("" if z.ndim != 2 else " with rows that differ") + ".")
    flat0, unravel = ravel_pytree(variables["params"])
    flat0 = jnp.asarray(flat0, jnp.float64)
    out, res = _residual(model, variables, loss_fn, z, train)
    canon, consts, _ = _objective_program(model, variables, loss_fn, z, train)

    def fg(x):
        v, g = _value_grad(canon, jnp.asarray(x, jnp.float64), consts)
        return float(v), np.asarray(g, np.float64)

    p = float(claims.CLAIMS[rules.RHO_ZERO].thresholds["head_perturbation"])
    xi = jax.random.normal(key, flat0.shape, flat0.dtype)

    def at(x) -> dict:
        loss, grad = fg(x)
        if not (np.isfinite(loss) and np.all(np.isfinite(grad))):
            raise FloatingPointError("the head's loss or gradient became non-finite while driving it to stationarity.")
        theta = jnp.asarray(x)
        rho_ref = float(res(theta * (1.0 + p * xi))[0])
        jac, g = curvature.operator_norm(out, theta), float(np.linalg.norm(grad))
        r_tol = float(np.sqrt(_EPS) * max(1.0, abs(loss)))
        st = {"rho": float(res(theta)[0]), "rho_ref": rho_ref, "residual_tol": r_tol, "grad_norm": g,
              "jac_norm": jac, "loss": loss,
              "stationary": bool(g <= np.sqrt(_EPS) * jac * rho_ref or rho_ref <= r_tol)}
        st["rho_bound"] = rules.rho_zero_bound(st)
        st["within_bound"] = bool(st["rho"] <= st["rho_bound"])
        return st

    start = at(np.asarray(flat0))
    dense = flat0.size <= MAX_DENSE_PARAMS
    if method == "bfgs" and not dense:
        raise ValueError(f"`method` 'bfgs' keeps a dense P x P inverse Hessian: only for at most {MAX_DENSE_PARAMS} "
                         f"parameters; this head has {flat0.size} (use 'lbfgs' or 'auto').")
    if method == "lbfgs" or (method == "auto" and not dense):
        theta, iterations, stop = _lbfgs_search(model, variables, loss_fn, z, train, max_iter=max_iter, gtol=gtol)
        x, method = np.asarray(theta, np.float64), "lbfgs"
    else:
        opt = scipy.optimize.minimize(fg, np.asarray(flat0), jac=True, method="BFGS",
                                      options={"gtol": float(gtol), "maxiter": int(max_iter)})
        x, iterations, method = opt.x, int(opt.nit), "scipy bfgs"
        if opt.status == 3:  # scipy: "NaN result encountered"
            raise FloatingPointError(f"the head's loss or gradient became non-finite in scipy's BFGS: {opt.message}")
        stop = "gtol" if opt.status == 0 else "max_iter" if opt.status == 1 else "line search failed"
    state, newton = at(x), 0
    if not state["stationary"] and newton_steps:
        x, newton = _newton_polish(fg, _newton_solver(canon, consts, dense), x, newton_steps)
        state = at(x)
    if measure_rank:
        row = out if train else lambda th: model.apply({**variables, "params": unravel(th)}, z[:1], train=False)[0]
        sv = head_jacobian_singular_values(lambda th: row(th)[0], jnp.asarray(x))
        state.update({f"jac_{k}": v for k, v in sv.items() if k != "method"}, jac_method=sv["method"])
        state["full_row_rank"] = rules.rho_zero_full_row_rank(state)
        s_min, n = state["jac_sigma_min"], int(z.shape[0])
        state["rho_implied_bound"] = float(state["grad_norm"] / (np.sqrt(n) * s_min)) if s_min > 0 else float("inf")
    return {**state, "rho_start": start["rho"], "grad_norm_start": start["grad_norm"], "iterations": iterations,
            "search_stop": stop, "search_method": method, "newton_steps": newton}
