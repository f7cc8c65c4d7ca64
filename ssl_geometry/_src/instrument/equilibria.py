"""Collapsed equilibria of a head: constructed where they exist, certified, and where they cannot exist.

At a collapsed state every sample sits at one point, ``z_i = c``, so (for a sample-wise head)
``u_i = h(c) = u*`` and ``J_i = J = dh/dz(c)`` (``k x d``). With ``rho_i = grad_{u_i} L``:

* stationary in ``z``:     ``grad_{z_i} L = J^T rho_i = 0``   for every ``i``;
* stationary in the head:  ``grad_theta L = (dh(c)/dtheta)^T (sum_i rho_i) = 0``.

**Fixed-target objectives** (MSE to fixed targets, DINO's cross-entropy against a fixed
teacher): the residual rows are set by the targets, so choose ``rho_i in null(J^T)`` with
``sum_i rho_i = 0`` and solve for the targets. Then both stationarity conditions hold exactly
and ``rho != 0``, whenever ``n >= 2`` and ``null(J^T) != {0}`` (``k > rank J``, e.g. an
expanding head ``d < k``). :func:`null_space_residuals` draws such residuals,
:func:`collapsed_equilibrium` builds the state and certifies it with
:func:`ssl_geometry.geometry.thm41_premises`.

**Objectives whose samples are exchangeable at collapse** (SimSiam, BYOL, contrastive and
decorrelation losses with both views collapsed): permuting the samples leaves ``L`` and the
state unchanged, so all residual rows are equal, ``rho_i = r``. Head stationarity then reads
``n (dh(c)/dtheta)^T r = 0``; when ``dh(c)/dtheta`` (``k x P``) has full row rank -- an output
bias gives it, and so does a bias-free last layer whose input ``a(c) != 0`` -- this forces
``r = 0``: ``|r| <= |grad_theta L| / (n sigma_min(dh(c)/dtheta))``. So Thm 4.1's premise
``rho != 0`` cannot hold at an equilibrium of those objectives; :func:`identical_rows_finding`
measures the bound.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, ArrayLike, Float

from ssl_geometry._src.checks import check_choice, check_finite, check_positive, check_rank
from ssl_geometry._src.instrument.thm41 import Thm41Premises, thm41_premises
from ssl_geometry._src.models.base import Model
from ssl_geometry._src.ssl.losses import cosine as _cosine
from ssl_geometry._src.ssl.losses import distillation as _distillation

__all__ = [
    "EQUILIBRIUM_OBJECTIVES",
    "CollapsedEquilibrium",
    "collapsed_equilibrium",
    "identical_rows_finding",
    "null_space_residuals",
]

#: Objectives for which :func:`collapsed_equilibrium` constructs an equilibrium with ``rho != 0``.
EQUILIBRIUM_OBJECTIVES = ("mse_target", "dino_fixed_teacher")


def null_space_residuals(
    jacobian: Float[ArrayLike, "k d"],
    n: int,
    *,
    key: Array,
    scale: float = 1.0,
    sum_to_zero_features: bool = False,
    constraints: Float[ArrayLike, "m k"] | None = None,
) -> Float[Array, "n k"]:
    """Residual rows ``R`` (``n x k``) with ``J^T R_i = 0`` for every row and ``sum_i R_i = 0``.

    ``R = (A - mean_rows A) N^T`` with ``N`` an orthonormal basis of ``null(J^T)`` (of
    ``null([J^T; 1^T])`` when ``sum_to_zero_features``: rows of a difference of two
    probability vectors; further rows ``c`` with ``c . R_i = 0`` from ``constraints``) and ``A``
    Gaussian; rescaled so that ``max_i |R_i| = scale``.

    Raises:
      ValueError: when ``n < 2`` (one row cannot sum to zero unless it is zero) or when the
        null space is trivial (``k <= rank J``): no non-zero residual is stationary in ``z``.
    """
    J = np.asarray(jacobian, np.float64)
    check_rank(J, "jacobian", 2)
    check_finite(J, "jacobian")
    check_positive(scale, "scale")
    if not isinstance(n, int) or n < 2:
        raise ValueError(f"`n` must be an int >= 2 (rows summing to zero, not all zero); got {n!r}.")
    k = J.shape[0]
    C = _constraint_matrix(J, sum_to_zero_features, constraints)
    _, s, vt = np.linalg.svd(C, full_matrices=True)
    rank = int(np.sum(s > max(C.shape) * np.finfo(np.float64).eps * (s[0] if s.size else 0.0)))
    N = vt[rank:].T  # (k, m)
    if N.shape[1] == 0:
        raise ValueError(
            f"`jacobian` ({J.shape}) leaves no null space for J^T (rank {rank} of k = {k}"
            f"{' with the sum-to-one constraint' if sum_to_zero_features else ''}): no residual "
            "rho != 0 is stationary in z. Use an expanding head (k > d)."
        )
    A = np.asarray(jax.random.normal(key, (n, N.shape[1]), jnp.float64))
    A = A - A.mean(axis=0, keepdims=True)
    R = A @ N.T
    R = R * (scale / np.max(np.linalg.norm(R, axis=1)))
    return jnp.asarray(R)


class CollapsedEquilibrium(NamedTuple):
    """A constructed collapsed equilibrium and its certificate.

    Attributes:
      objective: ``"mse_target"`` or ``"dino_fixed_teacher"``.
      z: ``(n, d)``, every row ``c``.
      loss_fn: ``u (n, k) -> L`` (targets / teacher fixed inside).
      targets: MSE targets ``t`` (``n x k``) or teacher logits (``n x k``, centre 0).
      residual: the residual rows ``rho`` the construction set.
      residual_error: ``max |grad_u L - residual|`` (the construction, checked by AD).
      null_dim: dimension of the null space the residuals were drawn from.
      premises: :class:`~ssl_geometry.geometry.Thm41Premises` at the state.
      certified: ``residual_nonzero and stationary_z and stationary_head`` (from ``premises``).
    """

    objective: str
    z: Array
    loss_fn: Callable
    targets: Array
    residual: Array
    residual_error: float
    null_dim: int
    premises: Thm41Premises
    certified: bool


def _constraint_matrix(J, sum_to_zero, constraints=None):
    """Rows ``c`` the residual must be orthogonal to: ``J^T`` (stationary in z), ``1`` and ``constraints``."""
    rows = [J.T] + ([np.ones((1, J.shape[0]))] if sum_to_zero else [])
    if constraints is not None:
        rows.append(np.atleast_2d(np.asarray(constraints, np.float64)))
    return np.vstack(rows)


def _null_dim(J, sum_to_zero, constraints=None):
    C = _constraint_matrix(J, sum_to_zero, constraints)
    s = np.linalg.svd(C, compute_uv=False)
    return J.shape[0] - int(np.sum(s > max(C.shape) * np.finfo(np.float64).eps * (s[0] if s.size else 0.0)))


def _fixed_teacher_targets(
    J: np.ndarray, u_star: Array, n: int, key: Array, residual_scale: float, student_temp: float, teacher_temp: float
) -> tuple[np.ndarray, int, Array]:
    """Residual ``R``, its null-space dimension and teacher logits ``T`` of a DINO fixed-teacher equilibrium.

    With ``q* = softmax(u*/tau_s)``: ``R_i = q* V_i s`` where ``V_i`` spans ``null([(diag(q*) J)^T; q*^T])``
    (so ``J^T R_i = 0`` and ``sum_k R_ik = 0``) and ``s = residual_scale / (2 n tau_s max|V|)``; teacher
    probabilities ``P_i = q* - n tau_s R_i >= (1 - residual_scale/2) q* > 0`` and logits ``T_i = tau_t log P_i``.
    """
    q = np.asarray(jax.nn.softmax(u_star / student_temp), np.float64)
    # A multiplicative perturbation of the teacher: R_i = q * V_i with J^T (q * V_i) = 0 and
    # q . V_i = 0 (so sum_k R_ik = 0), i.e. V_i in null([(diag(q) J)^T; q^T]). Then
    # P_i = q (1 - n tau_s s V_i) >= (1 - 0.5 scale) q > 0 with s = scale / (2 n tau_s max|V|), scale < 2.
    Jq = q[:, None] * J
    V = np.asarray(null_space_residuals(Jq, n, key=key, scale=1.0, constraints=q[None, :]))
    s = residual_scale * 0.5 / (n * student_temp * float(np.max(np.abs(V))))
    R = q[None, :] * V * s
    P = q[None, :] - n * student_temp * R
    null_dim = _null_dim(Jq, False, q[None, :])
    return R, null_dim, jnp.asarray(teacher_temp * np.log(P))


def collapsed_equilibrium(
    model: Model,
    variables: dict,
    objective: str,
    c: Float[ArrayLike, " d"],
    n: int,
    *,
    key: Array,
    residual_scale: float = 1.0,
    student_temp: float = 0.1,
    teacher_temp: float = 0.04,
    **premise_options,
) -> CollapsedEquilibrium:
    """Build a collapsed state ``z_i = c`` stationary in ``z`` and in the head with ``rho != 0``.

    * ``"mse_target"``: ``L = (1/n) sum_i |u_i - t_i|^2`` (:func:`ssl_geometry.losses.mse`), so
      ``rho_i = (2/n)(u* - t_i)``; targets ``t_i = u* - (n/2) R_i`` with ``R`` from
      :func:`null_space_residuals` (``max_i |R_i| = residual_scale * 2/n``).
    * ``"dino_fixed_teacher"``: :func:`ssl_geometry.losses.dino` with both student views the
      online outputs and a fixed teacher ``T`` (centre 0), i.e. ``L = -(1/n) sum_i P_i . log
      softmax(u_i / tau_s)``, ``rho_i = (q* - P_i) / (n tau_s)`` with ``q* = softmax(u*/tau_s)``;
      teacher probabilities ``P_i = q* - n tau_s R_i`` with ``R_i = q* V_i`` (a multiplicative
      perturbation: ``J^T R_i = 0`` and ``sum_k R_ik = 0``), scaled so that
      ``P_i = q* (1 - (s/2) V_i / max|V|)``, ``s = residual_scale``: ``P_i >= q*/2`` at ``s = 1``, and
      ``P_i >= q* (1 - s/2)`` stays a probability vector only for ``s < 2`` (``ValueError`` otherwise:
      the residual of a fixed teacher is bounded by the simplex); logits ``T_i = tau_t log P_i``.

    The head is applied in eval mode (sample-wise). ``premise_options`` go to
    :func:`~ssl_geometry.geometry.thm41_premises` (e.g. ``timescale_ratio``, ``activation``).
    """
    check_choice(objective, "objective", EQUILIBRIUM_OBJECTIVES)
    if not isinstance(model, Model):
        raise TypeError(f"`model` must be a head Model; got {type(model).__name__}.")
    c = jnp.asarray(c)
    check_rank(c, "c", 1)
    check_positive(residual_scale, "residual_scale")
    if objective == "dino_fixed_teacher" and not residual_scale < 2.0:
        raise ValueError(
            f"`residual_scale` must be < 2 for 'dino_fixed_teacher' (the teacher probabilities "
            f"P_i >= q* (1 - residual_scale / 2) must stay positive); got {residual_scale}."
        )
    z = jnp.tile(c[None, :], (n, 1))

    def h(x):
        return model.apply(variables, x, train=False)[0]

    u_star = h(c)
    J = np.asarray(jax.jacfwd(h)(c))
    dino = objective == "dino_fixed_teacher"
    if not dino:
        R = np.asarray(null_space_residuals(J, n, key=key, scale=1.0)) * residual_scale * 2.0 / n
        null_dim = _null_dim(J, False)
        targets = u_star[None, :] - 0.5 * n * jnp.asarray(R)

        def loss_fn(u):
            return _cosine.mse(u, targets)
    else:
        R, null_dim, targets = _fixed_teacher_targets(J, u_star, n, key, residual_scale, student_temp, teacher_temp)
        centre = jnp.zeros((J.shape[0],), z.dtype)

        def loss_fn(u):
            return _distillation.dino(
                jnp.stack([u, u]),
                jnp.stack([targets, targets]),
                centre,
                student_temp=student_temp,
                teacher_temp=teacher_temp,
            )[0]

    rho = jax.grad(loss_fn)(jnp.tile(u_star[None, :], (n, 1)))
    err = float(jnp.max(jnp.abs(rho - R)))
    prem = thm41_premises(model, variables, loss_fn, z, **premise_options)
    certified = bool(prem.residual_nonzero and prem.stationary_z and prem.stationary_head)
    return CollapsedEquilibrium(
        objective=objective,
        z=z,
        loss_fn=loss_fn,
        targets=targets,
        residual=jnp.asarray(R),
        residual_error=err,
        null_dim=null_dim,
        premises=prem,
        certified=certified,
    )


def identical_rows_finding(
    model: Model,
    variables: dict,
    loss_fn: Callable,
    z: Float[ArrayLike, "n d"],
    *,
    train: bool = False,
    max_dense_entries: int = 1 << 22,
) -> dict:
    """Whether head stationarity forces ``rho = 0`` at a collapsed state with identical residual rows.

    Returns ``{"rows_identical", "row_spread", "residual_norm", "sigma_min_head_jacobian",
    "grad_head_norm", "rho_bound", "forces_zero_residual"}``: ``row_spread = max_i |rho_i - mean
    rho| / |rho|``; ``sigma_min_head_jacobian`` is the smallest singular value of ``dh(c)/dtheta``
    (``k x P``) at the first row ``c``; ``rows_identical`` also when ``|rho| <= sqrt(eps) max(1, |L|)``
    (every row zero to working precision); ``rho_bound = |grad_theta L| / (sqrt(n) sigma_min)`` bounds
    ``|rho|`` when the rows are identical (``|rho| = sqrt(n) |r|``); ``forces_zero_residual`` is
    ``rows_identical and sigma_min > sqrt(eps) * |dh/dtheta|_2``: any head-stationary state of
    this objective then has ``rho = 0`` (module docstring).
    """
    z = jnp.asarray(z)
    check_rank(z, "z", 2)
    flat, unravel = ravel_pytree(variables["params"])

    def out(theta, x):
        return model.apply({**variables, "params": unravel(theta)}, x, train=train)[0]

    u = out(flat, z)
    rho = np.asarray(jax.grad(loss_fn)(u))
    check_finite(rho, "residual rho at the given `z`")
    r_norm = float(np.linalg.norm(rho))
    spread = float(np.max(np.linalg.norm(rho - rho.mean(axis=0), axis=1))) / max(r_norm, np.finfo(float).tiny)
    s_min, s_max = _head_jacobian_extreme_singular_values(lambda th: out(th, z[:1])[0], flat, max_dense_entries)
    g = float(jnp.linalg.norm(jax.grad(lambda th: loss_fn(out(th, z)))(flat)))
    eps = float(np.finfo(np.asarray(z).dtype).eps)
    # identical up to sqrt(eps) relative, or rho itself at round-off level (sqrt(eps) max(1, |L|), the
    # residual tolerance of thm41_premises), where every row is zero to working precision
    identical = bool(spread <= np.sqrt(eps) or r_norm <= np.sqrt(eps) * max(1.0, abs(float(loss_fn(u)))))
    return {
        "rows_identical": identical,
        "row_spread": spread,
        "residual_norm": r_norm,
        "sigma_min_head_jacobian": s_min,
        "grad_head_norm": g,
        "rho_bound": float(g / (np.sqrt(z.shape[0]) * s_min)) if s_min > 0 else float("inf"),
        "forces_zero_residual": bool(identical and s_min > np.sqrt(eps) * s_max),
    }


def _head_jacobian_extreme_singular_values(fn, flat, max_dense_entries):
    """``(sigma_min, sigma_max)`` of the ``k x P`` Jacobian of ``fn`` at ``flat`` (``0`` when ``k > P``).

    Dense SVD up to ``max_dense_entries`` entries; beyond, Lanczos on the ``k x k`` Gram operator
    ``v -> J (J^T v)`` (a vjp then a jvp), whose extreme eigenvalues are ``sigma^2``.
    """
    k = int(np.prod(jax.eval_shape(fn, flat).shape))
    if k > flat.size:
        return 0.0, float("nan")
    if k * flat.size <= max_dense_entries:
        s = np.linalg.svd(np.asarray(jax.jacfwd(fn)(flat)), compute_uv=False)
        return float(s[-1]), float(s[0])
    from ssl_geometry._src.instrument.thm41 import lanczos_extremes

    def gram(v, theta):
        _, vjp = jax.vjp(fn, theta)
        return jax.jvp(fn, (theta,), (vjp(v)[0],))[1]

    lo, hi, _ = lanczos_extremes(gram, (flat,), k, flat.dtype, key=jax.random.PRNGKey(0), num_steps=min(k, 200))
    return float(np.sqrt(max(lo, 0.0))), float(np.sqrt(max(hi, 0.0)))
