"""Stochastic spectral estimates of symmetric operators: SLQ densities and trace estimators.

* :func:`slq_density` -- stochastic Lanczos quadrature (Ubaru, Chen & Saad 2017;
  Ghorbani, Krishnan & Xiao 2019).
* :func:`hutchinson_trace`, :func:`hutchpp_trace` -- Hutchinson (1989) and Hutch++
  (Meyer, Musco, Musco & Woodruff 2021).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ssl_geometry._src.checks import check_int, check_positive
from ssl_geometry._src.linalg.lanczos import prepare_lanczos
from ssl_geometry._src.linalg.lanczos_core import advance, coefficients, lanczos_init, ritz_batch, round_rows
from ssl_geometry._src.linalg.operators import Vmapped, as_dtype, check_callable, default_key, prepare_matvec

__all__ = ["SpectralDensity", "slq_density", "hutchinson_trace", "hutchpp_trace"]


class SpectralDensity(NamedTuple):
    """Stochastic Lanczos quadrature output.

    Attributes:
      nodes: ``(num_probes, m)`` Gauss quadrature nodes (Ritz values) per probe.
      weights: ``(num_probes, m)`` quadrature weights ``tau_j = (e_1^T s_j)^2`` (each row sums to 1).
      grid: ``(num_grid,)`` evaluation points.
      density: ``(num_grid,)`` smoothed density
        ``phi(t) = (1/N) sum_p sum_j tau_pj N(t; theta_pj, sigma^2)``.
      sigma: Gaussian smoothing width.
    """

    nodes: np.ndarray
    weights: np.ndarray
    grid: np.ndarray
    density: np.ndarray
    sigma: float

    def moment(self, p: int = 1) -> float:
        """Quadrature estimate of ``(1/dim) tr(A^p)`` (exact per probe for ``p <= 2m - 1``)."""
        return float(np.mean(np.sum(self.weights * self.nodes**p, axis=1)))


def slq_density(
    matvec: Callable,
    dim: int,
    *,
    num_probes: int = 8,
    num_steps: int = 64,
    key=None,
    args: Sequence = (),
    grid: Float[Array | np.ndarray, " num_grid"] | None = None,
    num_grid: int = 512,
    sigma: float | None = None,
    dtype=None,
) -> SpectralDensity:
    """Spectral density of a symmetric operator by stochastic Lanczos quadrature.

    For Rademacher probes ``v_p`` normalised to unit length, ``m`` Lanczos steps
    give ``T_m = S diag(theta) S^T``; ``v^T g(A) v ~ sum_j tau_j g(theta_j)`` with
    ``tau_j = (e_1^T s_j)^2`` (Gauss quadrature, exact for polynomials of degree
    ``< 2m``). Averaging over probes estimates ``(1/dim) tr g(A) = int g dphi``
    (Ubaru, Chen & Saad, SIAM J. Matrix Anal. Appl. 2017; Ghorbani et al., ICML
    2019). The density is smoothed with a Gaussian of width ``sigma`` (default
    ``(theta_max - theta_min) / 200``) on ``grid`` (default: ``num_grid`` points
    spanning the nodes plus ``5 sigma``). Probes run as a batch (``matvec`` is
    vmapped over them); breakdowns restart cleanly and carry zero weight.
    """
    check_callable(matvec, "matvec")
    num_probes = check_int(num_probes, "num_probes")
    dim, _, dtype, num_steps, _, key = prepare_lanczos(dim, 1, num_steps, dtype, None, key, num_probes)
    k0, key = jax.random.split(key)
    v0 = jax.random.rademacher(k0, (num_probes, dim), dtype)
    mv, margs = prepare_matvec(Vmapped(matvec), (num_probes, dim), dtype, tuple(args))
    btol = jnp.asarray(100 * float(jnp.finfo(dtype).eps), dtype)
    state, q = lanczos_init(v0, num_steps, dtype, round_rows(num_steps + 1))
    state, _ = advance(mv, state, q, 0, num_steps, key, btol, margs)
    alpha, beta, resid, broke = coefficients(state, num_steps)
    if not (np.all(np.isfinite(alpha)) and np.all(np.isfinite(beta))):
        raise FloatingPointError("SLQ: the matvec returned non-finite values.")
    nodes, S, _ = ritz_batch(alpha, beta, resid, broke)
    weights = S[:, 0, :] ** 2
    lo, hi = float(nodes.min()), float(nodes.max())
    if sigma is None:
        sigma = max(hi - lo, abs(hi), 1e-30) / 200.0
    check_positive(sigma, "sigma")
    if grid is None:
        grid = np.linspace(lo - 5 * sigma, hi + 5 * sigma, check_int(num_grid, "num_grid"))
    grid = np.asarray(grid, np.float64)
    z = (grid[:, None, None] - nodes[None]) / sigma
    density = np.mean(np.sum(weights[None] * np.exp(-0.5 * z**2), axis=2), axis=1) / (sigma * math.sqrt(2 * math.pi))
    return SpectralDensity(nodes, weights, grid, density, float(sigma))


@functools.partial(jax.jit, static_argnums=(0,))
def _quad_forms(batched_matvec, Z, args):
    return jnp.sum(Z * batched_matvec(Z, *args).astype(Z.dtype), axis=-1)


def hutchinson_trace(
    matvec: Callable, dim: int, *, num_matvecs: int, key=None, args: Sequence = (), dtype=None
) -> Float[Array, ""]:
    """Hutchinson's trace estimator ``tr(A) ~ (1/m) sum_i z_i^T A z_i``, Rademacher ``z_i``.

    Unbiased, variance ``2 (|A|_F^2 - sum_i A_ii^2) / m`` (Hutchinson 1989).
    Uses exactly ``num_matvecs`` matvecs (one vmapped batch).

    Example:
      >>> import jax.numpy as jnp
      >>> est = hutchinson_trace(lambda v, d: d * v, 10, num_matvecs=4, args=(jnp.arange(10.0),))
      >>> float(est)   # diagonal A: z_i^2 = 1, exact
      45.0
    """
    check_callable(matvec, "matvec")
    dim, m = check_int(dim, "dim"), check_int(num_matvecs, "num_matvecs")
    dtype = as_dtype(dtype)
    Z = jax.random.rademacher(default_key(key), (m, dim), dtype)
    mv, margs = prepare_matvec(Vmapped(matvec), (m, dim), dtype, tuple(args))
    return jnp.mean(_quad_forms(mv, Z, margs))


@functools.partial(jax.jit, static_argnums=(0,))
def _hutchpp(batched_matvec, S, G, args):
    AS = batched_matvec(S, *args).astype(S.dtype)  # (s, n): m/3 matvecs
    Q, _ = jnp.linalg.qr(AS.T)  # (n, s) orthonormal basis of range(A S)
    AQ = batched_matvec(Q.T, *args).astype(S.dtype)  # m/3 matvecs
    t_low = jnp.sum(Q.T * AQ)  # tr(Q^T A Q)
    Gp = G - (G @ Q) @ Q.T  # (I - Q Q^T) G, rows
    AGp = batched_matvec(Gp, *args).astype(S.dtype)  # m/3 matvecs
    t_rest = jnp.sum(Gp * AGp) / G.shape[0]
    return t_low + t_rest


def hutchpp_trace(
    matvec: Callable, dim: int, *, num_matvecs: int, key=None, args: Sequence = (), dtype=None
) -> Float[Array, ""]:
    """Hutch++ trace estimator (Meyer, Musco, Musco & Woodruff, SOSA 2021, Alg. 1).

    With ``s = num_matvecs // 3``: ``Q = orth(A S)`` for a Rademacher ``S`` (n x s),
    ``tr(A) ~ tr(Q^T A Q) + (1/s) tr(G^T (I - QQ^T) A (I - QQ^T) G)`` with a fresh
    Rademacher ``G`` (n x s). The low-rank part is captured exactly, so the
    variance only sees the tail of the spectrum: error ``O(1/m)`` instead of
    Hutchinson's ``O(1/sqrt(m))`` for PSD ``A``. Uses ``3 s`` matvecs.
    """
    check_callable(matvec, "matvec")
    dim, m = check_int(dim, "dim"), check_int(num_matvecs, "num_matvecs", 3)
    dtype = as_dtype(dtype)
    s = m // 3
    if s > dim:
        raise ValueError(f"`num_matvecs // 3` must be <= dim = {dim}; got {s}.")
    mv, margs = prepare_matvec(Vmapped(matvec), (s, dim), dtype, tuple(args))
    k1, k2 = jax.random.split(default_key(key))
    S = jax.random.rademacher(k1, (s, dim), dtype)
    G = jax.random.rademacher(k2, (s, dim), dtype)
    return _hutchpp(mv, S, G, margs)
