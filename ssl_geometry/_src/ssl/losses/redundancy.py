"""Redundancy-reduction losses: Barlow Twins, VICReg, W-MSE (batch statistics of each view)."""

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, ScalarLike

from ssl_geometry._src import fields
from ssl_geometry._src import ops as _ops
from ssl_geometry._src.checks import is_concrete
from ssl_geometry._src.ops import ArrayIn
from ssl_geometry._src.ssl.losses._common import (
    EPS_TORCH_NORMALIZE,
    check_pair,
    finite_loss,
    off_diagonal_mask,
    positive,
    unit_interval,
)
from ssl_geometry._src.ssl.losses.specs import BatchAboveDim, BatchNeeds, Hyper, LossSpec, ObjectiveSpec

__all__ = ["SPECS", "barlow_twins", "cholesky_whiten", "vicreg", "wmse"]


def _standardize(z, eps):
    """``(z - mean) / sqrt(var + eps)`` per feature, computed on ``(z - mean) / s`` (``s = max |z - mean|``).

    ``(zc/s) / sqrt(var(zc/s) + eps/s^2)`` equals the formula for every fixed ``s > 0``,
    so the value and gradient are exact and ``var`` cannot overflow.
    """
    zc = z - jnp.mean(z, axis=0)
    s = _ops.safe_scale(zc, axis=0)
    y = zc / s
    var = jnp.mean(jnp.square(y), axis=0)
    return y * jax.lax.rsqrt(var + eps / jnp.square(s[0]))


def barlow_twins(
    z1: Float[ArrayIn, "n k"], z2: Float[ArrayIn, "n k"], *, lambd: ScalarLike = 5e-3, eps: ScalarLike = 1e-5
) -> Float[Array, ""]:
    """Barlow Twins redundancy-reduction loss.

    Zbontar et al., "Barlow Twins: Self-Supervised Learning via Redundancy
    Reduction", ICML 2021, Eq. (1)-(2), as their code computes it: each view is
    standardised per feature over the batch, ``z^ = (z - mean) / sqrt(var + eps)``
    (``BatchNorm1d(affine=False)``: biased variance, ``eps = 1e-5``), then

        C = z1^T z2^ / n,      L = sum_i (1 - C_ii)^2 + lambd * sum_{i != j} C_ij^2.

    With ``eps = 0`` the loss is invariant to per-feature affine maps
    ``z -> a * z + b`` (``a != 0``) applied to both views; with ``eps > 0`` only
    up to ``O(eps / var)``. The standardisation is overflow-safe: inputs of any
    finite scale give ``C`` with entries in ``[-1, 1]``.

    Args:
      z1, z2: ``(n, k)``, ``n >= 2``.
      lambd: off-diagonal weight (paper: ``5e-3``; code default ``0.0051``).
      eps: variance floor of the standardisation.
    """
    check_pair(z1, z2, "z1", "z2", 2, "Barlow Twins standardises over the batch")
    lambd = positive(lambd, "lambd", strict=False)
    eps = positive(eps, "eps", strict=False)
    z1, z2 = _ops.upcast(z1, z2)
    n, k = z1.shape
    c = _standardize(z1, eps).T @ _standardize(z2, eps) / n
    on = jnp.sum(jnp.square(jnp.diagonal(c) - 1.0))
    off = jnp.sum(jnp.square(c) * off_diagonal_mask(k, c.dtype))
    return finite_loss(on + lambd * off, "barlow_twins", (z1, z2))


def vicreg(
    z1: Float[ArrayIn, "n k"],
    z2: Float[ArrayIn, "n k"],
    *,
    sim_coeff: ScalarLike = 25.0,
    std_coeff: ScalarLike = 25.0,
    cov_coeff: ScalarLike = 1.0,
    eps: ScalarLike = 1e-4,
) -> Float[Array, ""]:
    """VICReg: variance-invariance-covariance regularisation.

    Bardes, Ponce & LeCun, "VICReg", ICLR 2022, Eq. (1)-(6), exactly as their
    ``main_vicreg.py``::

        inv = (1/(n k)) sum_{i,f} (z1_if - z2_if)^2
        std = (1/2k) sum_f relu(1 - sqrt(Var(z1_f) + eps)) + (same for z2)
        cov = (1/k) sum_{f != g} C(z1)_fg^2 + (1/k) sum_{f != g} C(z2)_fg^2
        L   = sim_coeff * inv + std_coeff * std + cov_coeff * cov

    with unbiased ``Var`` and covariance ``C(z) = (z - mean)^T (z - mean) / (n - 1)``.
    The hinge makes ``L`` piecewise smooth: its Hessian jumps where some feature's
    ``sqrt(Var + eps)`` crosses 1.

    Limit: ``inv`` is of degree 2 and ``cov`` of degree 4 in the input scale ``s``;
    once ``k s^4`` exceeds the dtype's range (float32: ``s >~ 1e9``) the loss raises
    ``FloatingPointError`` (under ``jit``: a run-time error) instead of returning NaN.

    Args:
      z1, z2: ``(n, k)``, ``n >= 2``.
    """
    check_pair(z1, z2, "z1", "z2", 2, "VICReg uses unbiased batch variances")
    sim_coeff = positive(sim_coeff, "sim_coeff", strict=False)
    std_coeff = positive(std_coeff, "std_coeff", strict=False)
    cov_coeff = positive(cov_coeff, "cov_coeff", strict=False)
    eps = positive(eps, "eps", strict=False)
    z1, z2 = _ops.upcast(z1, z2)
    n, k = z1.shape
    inv = jnp.mean(jnp.square(z1 - z2))
    mask = off_diagonal_mask(k, z1.dtype)

    def std_cov(z):
        zc = z - jnp.mean(z, axis=0)
        var = jnp.sum(jnp.square(zc), axis=0) / (n - 1)
        std = jnp.sqrt(var + eps)
        cov = zc.T @ zc / (n - 1)
        return jnp.mean(jax.nn.relu(1.0 - std)) / 2.0, jnp.sum(jnp.square(cov) * mask) / k

    s1, c1 = std_cov(z1)
    s2, c2 = std_cov(z2)
    loss = sim_coeff * inv + std_coeff * (s1 + s2) + cov_coeff * (c1 + c2)
    return finite_loss(loss, "vicreg", (z1, z2), degree=4)


def cholesky_whiten(z: Float[ArrayIn, "n k"], eps: ScalarLike = 0.0) -> Float[Array, "n k"]:
    """W-MSE's whitening of one batch: rows ``w_i = L^{-1} (z_i - mean)``, ``L L^T = S_eps``.

    ``S = zc^T zc / (n - 1)``, ``S_eps = (1 - eps) S + eps I`` (Ermolov et al. 2021,
    ``Whitening2d``). Computed on ``zc / s`` with ``s = max |zc|`` (stop-gradient) and
    ``S'_eps = (1 - eps) S / s^2 + (eps / s^2) I``, whose Cholesky factor is ``L / s``:
    ``w = (L / s)^{-1} zc / s`` exactly, and ``S`` cannot overflow.
    """
    n, k = z.shape
    zc = z - jnp.mean(z, axis=0)
    s = jnp.max(_ops.safe_scale(zc, axis=None))
    y = zc / s
    cov = y.T @ y / (n - 1)
    cov = (1.0 - eps) * cov + (eps / jnp.square(s)) * jnp.eye(k, dtype=cov.dtype)
    chol = jnp.linalg.cholesky(cov)
    # rows w_i = L^{-1} y_i, i.e. W = y L^{-T}
    return jax.scipy.linalg.solve_triangular(chol, y.T, lower=True).T


def wmse(z1: Float[ArrayIn, "n k"], z2: Float[ArrayIn, "n k"], *, eps: ScalarLike = 0.0) -> Float[Array, ""]:
    """W-MSE: MSE of unit vectors after Cholesky whitening of *each view's batch on its own*.

    Ermolov et al., "Whitening for Self-Supervised Representation Learning",
    ICML 2021 (reference code ``methods/whitening.py``, ``methods/wmse.py``): the
    reference ``forward`` whitens ``h[idx + i * bs]`` -- the sub-batch ``idx`` of view
    ``i`` -- separately for every view ``i``, each with its own mean and covariance;
    the views are not pooled into one whitening batch. Our exact choice: the whole
    batch is one whitening sub-batch, one iteration (``w_size = n``, ``w_iter = 1``,
    no random sub-batch split, so the loss is deterministic):

        zc = z - mean(z),   S = zc^T zc / (n - 1),   S_eps = (1 - eps) S + eps I = L L^T,
        w_i = L^{-1} zc_i    (for z = z1 and z = z2 separately, :func:`cholesky_whiten`),
        L_WMSE = (1/n) sum_i |w1_i/|w1_i| - w2_i/|w2_i||^2 = 2 - (2/n) sum_i cos(w1_i, w2_i)

    (normalisation ``F.normalize``, norm floor ``1e-12``). The reference
    default is ``eps = 0``, which needs ``n >= k + 1`` for ``S`` to be positive
    definite; ``eps > 0`` (shrinkage towards I) admits any ``n >= 2``.
    For ``eps = 0`` the whitened batch satisfies ``w^T w / (n - 1) = I``, and the
    loss is invariant to ``z -> z A + b`` applied to either view separately for
    any *upper*-triangular ``A`` with positive diagonal (e.g. per-feature
    positive rescaling): the Cholesky factor maps to ``A^T L``, so ``w`` is
    unchanged. A general invertible ``A`` rotates the whitened batch, which
    changes the loss.

    Raises:
      FloatingPointError: when ``S_eps`` is not positive definite and the Cholesky
        factorisation fails (under ``jit``: a run-time error with the same message).
    """
    check_pair(z1, z2, "z1", "z2", 2, "W-MSE whitens with the batch covariance")
    eps = unit_interval(eps, "eps")
    n, k = z1.shape
    if is_concrete(eps) and float(np.asarray(eps)) == 0.0 and n < k + 1:
        raise ValueError(
            f"`z1` needs a batch of at least k + 1 = {k + 1} samples for W-MSE with eps=0 "
            f"(the covariance of {k} features must be positive definite); got {n}. "
            "Pass eps > 0 to shrink the covariance towards the identity."
        )
    z1, z2 = _ops.upcast(z1, z2)
    w1 = _ops.l2_normalize(cholesky_whiten(z1, eps), EPS_TORCH_NORMALIZE)
    w2 = _ops.l2_normalize(cholesky_whiten(z2, eps), EPS_TORCH_NORMALIZE)
    loss = 2.0 - 2.0 * jnp.mean(jnp.sum(w1 * w2, axis=-1))
    return _ops.check_finite_result(
        loss,
        "`wmse` loss",
        (z1, z2),
        "The batch covariance is not positive definite (Cholesky failed); the embeddings are "
        "(nearly) rank-deficient. Pass eps > 0 or a larger batch.",
    )


# ----------------------------------------------------------------------------- this family's entries of the table

_BARLOW_LAMBDA = Hyper("barlow_lambda", 5e-3, fields.number(0), "Barlow Twins' off-diagonal weight lambda")
_VICREG_COEFFS = Hyper("vicreg_coeffs", (25.0, 25.0, 1.0), fields.sequence(fields.number(0), 3), "VICReg a, b, c")


#: This family's entries of the objective table (:data:`ssl_geometry.objectives.TABLE`, which collects the
#: ``SPECS`` of every family module in table order): one :class:`~ssl_geometry.objectives.ObjectiveSpec` per loss
#: above, with its training wiring where a training objective is built on it (``docs/howto/extend.md``).
SPECS: tuple[ObjectiveSpec, ...] = (
    ObjectiveSpec(
        "barlow_twins",
        LossSpec(
            fn=barlow_twins,
            args=("z1", "z2"),
            differentiable=(0, 1),
            stop_gradient=(),
            stateful=False,
            batch=BatchNeeds(True, 2, "per-feature batch standardisation"),
            hessian_psd=False,
            degree=0,
            family="redundancy",
        ),
        aliases=("barlow",),
        objective="barlow_twins",
        inputs=("z1", "z2"),
        options={"lambd": "barlow_lambda"},
        hypers=(_BARLOW_LAMBDA,),
    ),
    ObjectiveSpec(
        "vicreg",
        LossSpec(
            fn=vicreg,
            args=("z1", "z2"),
            differentiable=(0, 1),
            stop_gradient=(),
            stateful=False,
            batch=BatchNeeds(True, 2, "unbiased batch variance and covariance"),
            hessian_psd=False,
            degree=4,
            family="redundancy",
        ),
        objective="vicreg",
        inputs=("z1", "z2"),
        options={
            "sim_coeff": ("vicreg_coeffs", 0),
            "std_coeff": ("vicreg_coeffs", 1),
            "cov_coeff": ("vicreg_coeffs", 2),
        },
        hypers=(_VICREG_COEFFS,),
    ),
    ObjectiveSpec(
        "wmse",
        LossSpec(
            fn=wmse,
            args=("z1", "z2"),
            differentiable=(0, 1),
            stop_gradient=(),
            stateful=False,
            batch=BatchNeeds(True, 2, "batch covariance whitening (n >= k + 1 when eps = 0)"),
            hessian_psd=False,
            degree=0,
            family="redundancy",
        ),
        aliases=("w_mse",),
        objective="wmse",
        inputs=("z1", "z2"),
        # eps = 0 (the default, and the objective's): each view's k x k covariance must have full rank
        batch_above_dim=BatchAboveDim(1, "W-MSE whitens each view with the covariance of its {k} projector outputs"),
    ),
)
