"""Head-stationary collapsed states: the head driven to stationarity at a collapsed batch, and rho there.

The measurement behind the registry claim ``stationarity-forces-rho-zero`` (experiments/claims/),
decided by experiment 3 (:mod:`experiments.collapse_hessians`) and experiment 7
(:mod:`experiments.objectives`) with :func:`experiments.rules.decide_rho_zero`.

At a collapsed state (both views at one point ``c``) of an objective whose samples are
exchangeable, every residual row is the same ``r`` and the head's gradient is
``n (dh(c)/dtheta)^T r``; when ``dh(c)/dtheta`` has full row rank, a stationary head forces
``r = 0`` (:func:`ssl_geometry.geometry.identical_rows_finding` measures the bound). Here the head
is *driven* to a stationary point of ``theta -> L(h_theta(z))`` (BFGS on the flattened head
parameters, the state's other arrays held fixed) and the residual is read there, beside the
residual ``rho_ref`` of the same state with the head perturbed.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize
from jax.flatten_util import ravel_pytree

from experiments import claims, rules
from ssl_geometry import geometry

__all__ = ["stationary_head_state"]

_EPS = float(np.finfo(np.float64).eps)
#: Above this many head parameters L-BFGS replaces BFGS (whose inverse Hessian is dense) and no Newton step is
#: taken (its Hessian is dense too).
MAX_DENSE_PARAMS = 4096


def _residual(model, variables, loss_fn, z, train):
    """``theta_flat -> (|rho|, L)`` with ``rho = grad_u L`` at ``u = h_theta(z)``."""
    _, unravel = ravel_pytree(variables["params"])

    def out(theta):
        return model.apply({**variables, "params": unravel(theta)}, z, train=train)[0]

    def res(theta):
        u = out(theta)
        return jnp.linalg.norm(jax.grad(loss_fn)(u)), loss_fn(u)

    return jax.jit(out), jax.jit(res)


def _newton_polish(fg, hessian, x, steps):
    """Up to ``steps`` minimum-norm Newton steps ``x <- x - H^+ g`` on the gradient, each kept only if it is
    smaller than ``|x| / 10`` and lowers ``|g|``; returns ``(x, steps kept)``.

    BFGS's line search reads ``L``, whose round-off (``eps |L|``) stops it where ``|g|`` is still about
    ``sqrt(eps)`` of its scale; Newton's step reads only ``g`` and ``H`` (dense, ``P x P``; singular for an
    over-parametrised head, hence the least-squares solve), so it reaches the gradient's own round-off.
    """
    g = fg(x)[1]
    kept = 0
    for _ in range(int(steps)):
        H = np.asarray(hessian(jnp.asarray(x)), np.float64)
        step = np.linalg.lstsq(0.5 * (H + H.T), g, rcond=1e-12)[0]
        if not np.linalg.norm(step) <= 0.1 * np.linalg.norm(x):  # a local polish, never a jump
            break
        g_new = fg(x - step)[1]
        if not (np.all(np.isfinite(g_new)) and np.linalg.norm(g_new) < np.linalg.norm(g)):
            break
        x, g, kept = x - step, g_new, kept + 1
    return x, kept


def stationary_head_state(model, variables, loss_fn, z, *, key, train: bool = False, max_iter: int = 400,
                          newton_steps: int = 5) -> dict:
    """Drive the head to stationarity at ``z`` and measure the residual there (module docstring).

    BFGS (scipy, float64, exact gradients; L-BFGS beyond :data:`MAX_DENSE_PARAMS` parameters) minimises ``L(theta) = loss_fn(h_theta(z))`` from
    ``variables["params"]`` for at most ``max_iter`` iterations (it stops earlier where the line search
    can no longer decrease ``L``: round-off), then at most ``newton_steps`` Newton steps polish the
    gradient (:func:`_newton_polish`) where BFGS's head is not yet stationary. At the head ``theta*``
    reached:

    * ``grad_norm = |grad_theta L|``, ``jac_norm = |dh/dtheta|_2`` (:func:`ssl_geometry.geometry.operator_norm`);
    * ``rho = |grad_u L|``, ``residual_tol = sqrt(eps) max(1, |L|)`` (the certificate's ``rho = 0``);
    * ``rho_ref``: ``|grad_u L|`` with every parameter of ``theta*`` multiplied by ``1 + p xi``,
      ``xi ~ N(0, 1)``, ``p`` the registry's ``head_perturbation``;
    * ``stationary``: ``grad_norm <= sqrt(eps) jac_norm rho_ref`` or ``rho_ref <= residual_tol`` (the rule);
    * ``rho_bound``: :func:`experiments.rules.rho_zero_bound`, ``within_bound = rho <= rho_bound``;
    * ``rho_start``, ``grad_norm_start``: the same at the head it started from.
    """
    flat0, _ = ravel_pytree(variables["params"])
    flat0 = jnp.asarray(flat0, jnp.float64)
    out, res = _residual(model, variables, loss_fn, z, train)
    value_grad = jax.jit(jax.value_and_grad(lambda th: loss_fn(out(th))))

    def fg(x):
        v, g = value_grad(jnp.asarray(x))
        return float(v), np.asarray(g, np.float64)

    p = float(claims.CLAIMS[rules.RHO_ZERO].thresholds["head_perturbation"])
    xi = jax.random.normal(key, flat0.shape, flat0.dtype)

    def at(x) -> dict:
        loss, grad = fg(x)
        if not (np.isfinite(loss) and np.all(np.isfinite(grad))):
            raise FloatingPointError("the head's loss or gradient became non-finite while driving it to stationarity.")
        theta = jnp.asarray(x)
        rho_ref = float(res(theta * (1.0 + p * xi))[0])
        jac, g = geometry.operator_norm(out, theta), float(np.linalg.norm(grad))
        r_tol = float(np.sqrt(_EPS) * max(1.0, abs(loss)))
        st = {"rho": float(res(theta)[0]), "rho_ref": rho_ref, "residual_tol": r_tol, "grad_norm": g,
              "jac_norm": jac, "loss": loss,
              "stationary": bool(g <= np.sqrt(_EPS) * jac * rho_ref or rho_ref <= r_tol)}
        st["rho_bound"] = rules.rho_zero_bound(st)
        st["within_bound"] = bool(st["rho"] <= st["rho_bound"])
        return st

    start = at(np.asarray(flat0))
    dense = flat0.size <= MAX_DENSE_PARAMS
    opt = scipy.optimize.minimize(fg, np.asarray(flat0), jac=True, method="BFGS" if dense else "L-BFGS-B",
                                  options={"gtol": 0.0, "maxiter": int(max_iter)})
    state, newton = at(opt.x), 0
    if not state["stationary"] and newton_steps and dense:
        x, newton = _newton_polish(fg, jax.jit(jax.hessian(lambda th: loss_fn(out(th)))), opt.x, newton_steps)
        state = at(x)
    return {**state, "rho_start": start["rho"], "grad_norm_start": start["grad_norm"], "iterations": int(opt.nit),
            "newton_steps": newton}
