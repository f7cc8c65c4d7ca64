"""Riemannian curvature of a metric field, from exact derivatives.

Implementation of :mod:`ssl_geometry.riemann`; the conventions and formulas are in its docstring.
"""

from __future__ import annotations

import functools
from typing import Callable

import jax
import jax.numpy as jnp

from ssl_geometry._src.checks import check_rank, check_same_shape, is_concrete

Array = jax.Array
MetricFn = Callable[[Array], Array]

__all__ = [
    "metric_derivatives",
    "christoffel",
    "riemann_tensor",
    "lowered_riemann",
    "ricci_tensor",
    "scalar_curvature",
    "sectional_curvature",
    "loss_metric",
    "pullback",
]


def _point(x) -> Array:
    x = jnp.asarray(x)
    check_rank(x, "x", 1)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(f"`x` must be a floating-point vector; got dtype {x.dtype}.")
    return x


def _metric(metric_fn: MetricFn, x: Array) -> Array:
    g = metric_fn(x)
    m = x.shape[0]
    if jnp.shape(g) != (m, m):
        raise ValueError(f"`metric_fn` must return an ({m}, {m}) matrix at a point of R^{m}; got {jnp.shape(g)}.")
    return g


def metric_derivatives(metric_fn: MetricFn, x: Array) -> Array:
    """``dg[i, j, l] = d_l g_ij`` at ``x`` (``jax.jacfwd``)."""
    x = _point(x)
    _metric(metric_fn, x)
    return jax.jacfwd(metric_fn)(x)


def _christoffel(metric_fn: MetricFn, x: Array) -> Array:
    """Christoffel symbols of the second kind ``Gamma[k, i, j] = Gamma^k_ij`` at ``x``.

    ``Gamma^k_ij = 1/2 g^{kl} (d_i g_jl + d_j g_il - d_l g_ij)``; ``g^{kl}`` is applied
    by a linear solve, not an explicit inverse.

    Example (polar coordinates, ``g = diag(1, r^2)``: ``Gamma^r_tt = -r``,
    ``Gamma^t_rt = 1/r``):
      >>> import jax.numpy as jnp
      >>> G = christoffel(lambda x: jnp.diag(jnp.array([1.0, x[0] ** 2])), jnp.array([2.0, 0.3]))
      >>> float(G[0, 1, 1]), float(G[1, 0, 1])
      (-2.0, 0.5)
    """
    x = _point(x)
    g = _metric(metric_fn, x)
    dg = jax.jacfwd(metric_fn)(x)  # dg[a, b, c] = d_c g_ab
    # first kind: Gamma_{l,ij} = 1/2 (d_i g_jl + d_j g_il - d_l g_ij)
    first = 0.5 * (jnp.einsum("jli->lij", dg) + jnp.einsum("ilj->lij", dg) - jnp.einsum("ijl->lij", dg))
    m = x.shape[0]
    return jnp.linalg.solve(g, first.reshape(m, m * m)).reshape(m, m, m)


def _riemann_tensor(metric_fn: MetricFn, x: Array) -> Array:
    """Riemann tensor ``R[l, i, j, k] = R^l_{ijk}`` (convention in the module docstring).

    ``R^l_{ijk} = d_i Gamma^l_jk - d_j Gamma^l_ik + Gamma^l_im Gamma^m_jk - Gamma^l_jm Gamma^m_ik``,
    with ``d_i Gamma`` from ``jax.jacfwd`` of :func:`christoffel` (third derivatives
    of nothing: second derivatives of ``g``, exact).
    """
    x = _point(x)
    Gam = _christoffel(metric_fn, x)
    dGam = jax.jacfwd(lambda y: _christoffel(metric_fn, y))(x)  # dGam[l, j, k, i] = d_i Gamma^l_jk
    term1 = jnp.einsum("ljki->lijk", dGam)  # d_i Gamma^l_jk
    term2 = jnp.einsum("likj->lijk", dGam)  # d_j Gamma^l_ik
    term3 = jnp.einsum("lim,mjk->lijk", Gam, Gam)
    term4 = jnp.einsum("ljm,mik->lijk", Gam, Gam)
    return term1 - term2 + term3 - term4


def _lowered_riemann(metric_fn: MetricFn, x: Array) -> Array:
    """``Rm[i, j, k, l] = Rm(d_i, d_j, d_k, d_l) = g(R(d_i, d_j) d_k, d_l) = g_{lm} R^m_{ijk}``."""
    x = _point(x)
    return jnp.einsum("lm,mijk->ijkl", _metric(metric_fn, x), _riemann_tensor(metric_fn, x))


def _ricci_tensor(metric_fn: MetricFn, x: Array) -> Array:
    """Ricci tensor ``Ric[j, k] = R^i_{ijk}`` (``(m-1)/R^2 g`` on a sphere of radius R)."""
    return jnp.einsum("iijk->jk", _riemann_tensor(metric_fn, x))


def _scalar_curvature(metric_fn: MetricFn, x: Array) -> Array:
    """Scalar curvature ``S = g^{jk} Ric_jk`` (``m (m-1) / R^2`` on a sphere of radius R).

    Example (2-sphere of radius 2 in spherical coordinates ``(theta, phi)``):
      >>> import jax.numpy as jnp
      >>> g = lambda x: jnp.diag(jnp.array([4.0, 4.0 * jnp.sin(x[0]) ** 2]))
      >>> round(float(scalar_curvature(g, jnp.array([0.7, 0.1]))), 12)
      0.5
    """
    x = _point(x)
    g = _metric(metric_fn, x)
    ric = _ricci_tensor(metric_fn, x)
    return jnp.trace(jnp.linalg.solve(g, ric))


def sectional_curvature(metric_fn: MetricFn, x: Array, u: Array, v: Array) -> Array:
    """Sectional curvature of the plane spanned by tangent vectors ``u, v`` at ``x``.

    ``K(u, v) = Rm(u, v, v, u) / (g(u,u) g(v,v) - g(u,v)^2)``. Raises if ``u, v``
    are (numerically) linearly dependent, where ``K`` is undefined.
    """
    x = _point(x)
    u = jnp.asarray(u, x.dtype)
    v = jnp.asarray(v, x.dtype)
    check_same_shape(u, x, "u", "x")
    check_same_shape(v, x, "v", "x")
    g = _metric(metric_fn, x)
    Rm = _lowered_riemann(metric_fn, x)
    num = jnp.einsum("ijkl,i,j,k,l->", Rm, u, v, v, u)
    guu, gvv, guv = u @ g @ u, v @ g @ v, u @ g @ v
    den = guu * gvv - guv**2
    if is_concrete(den):
        eps = float(jnp.finfo(x.dtype).eps)
        if not float(den) > 100 * eps * float(guu * gvv):
            raise ValueError("`u` and `v` must be linearly independent (g(u,u) g(v,v) - g(u,v)^2 ~ 0).")
    return num / den


def _jitted(impl):
    """Public wrapper: check ``x`` eagerly, then run ``impl`` under ``jit`` with the
    metric function static (one compilation per metric function and shape)."""
    jitted = jax.jit(impl, static_argnums=0)

    @functools.wraps(impl)
    def wrapper(metric_fn: MetricFn, x: Array) -> Array:
        return jitted(metric_fn, _point(x))

    wrapper.__name__ = impl.__name__.lstrip("_")
    wrapper.__qualname__ = wrapper.__name__
    impl.__doc__ = None  # the docstring (and its doctest) lives on the public wrapper only
    return wrapper


christoffel = _jitted(_christoffel)
riemann_tensor = _jitted(_riemann_tensor)
lowered_riemann = _jitted(_lowered_riemann)
ricci_tensor = _jitted(_ricci_tensor)
scalar_curvature = _jitted(_scalar_curvature)


def loss_metric(loss_fn: Callable[[Array], Array]) -> MetricFn:
    """Prop 3.3's loss metric ``g_L(u) = hess_u L(u)`` as a metric field ``u -> (k, k)``.

    It is a Riemannian metric where ``L`` is strictly convex (``hess L`` SPD); check
    that at the points you evaluate (e.g. ``numpy.linalg.eigvalsh``). A quadratic loss
    has a constant ``g_L`` and zero curvature.

    Example:
      >>> import jax.numpy as jnp
      >>> g = loss_metric(lambda u: jnp.sum(u ** 2))
      >>> g(jnp.array([1.0, -1.0]))
      Array([[2., 0.],
             [0., 2.]], dtype=float64)
    """
    hess = jax.hessian(loss_fn)

    def g(u):
        u = jnp.asarray(u)
        check_rank(u, "u", 1)
        return hess(u)

    return g


def pullback(metric_fn: MetricFn, map_fn: Callable[[Array], Array]) -> MetricFn:
    """Pullback ``(phi^* g)(x) = J_phi(x)^T g(phi(x)) J_phi(x)`` of a metric through ``phi``.

    E.g. ``pullback(loss_metric(L), lambda z: z @ W)`` is Prop 3.3's ``W^T g_L(W z) W``
    in the ``z @ W`` layout, or the Euclidean metric pulled back to polar coordinates.
    The result is a metric field (SPD where ``J_phi`` has full column rank).
    """

    def g(x):
        J = jax.jacfwd(map_fn)(x)
        return J.T @ metric_fn(map_fn(x)) @ J

    return g
