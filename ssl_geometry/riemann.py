"""Riemannian curvature of a metric field, from exact derivatives.

A metric field is a function ``g: R^m -> SPD(m)``, ``x -> g(x)`` (a symmetric
positive-definite ``(m, m)`` matrix). Derivatives are exact (``jax.jacfwd``,
nested), so a flat metric gives curvature zero up to round-off, not up to a
finite-difference error.

Index conventions (do Carmo / Lee; ``d_i = partial / partial x^i``):

* Christoffel symbols ``Gamma[k, i, j] = Gamma^k_ij
  = 1/2 g^{kl} (d_i g_jl + d_j g_il - d_l g_ij)``.
* Riemann tensor ``R[l, i, j, k] = R^l_{ijk}`` with
  ``R(d_i, d_j) d_k = R^l_{ijk} d_l`` and
  ``R(X, Y) Z = nabla_X nabla_Y Z - nabla_Y nabla_X Z - nabla_[X,Y] Z``, so
  ``R^l_{ijk} = d_i Gamma^l_jk - d_j Gamma^l_ik + Gamma^l_im Gamma^m_jk - Gamma^l_jm Gamma^m_ik``.
* Ricci tensor ``Ric[j, k] = R^i_{ijk}``; scalar curvature ``S = g^{jk} Ric_jk``.
* Sectional curvature ``K(u, v) = Rm(u, v, v, u) / (g(u,u) g(v,v) - g(u,v)^2)`` with
  ``Rm(X, Y, Z, W) = g(R(X, Y) Z, W)``.

Compilation: :func:`christoffel`, :func:`riemann_tensor`, :func:`lowered_riemann`,
:func:`ricci_tensor`, :func:`scalar_curvature` and :func:`sectional_curvature` run
under ``jax.jit`` with the metric function static, so repeated calls with the same
function object and point shape reuse one compilation (``jax.vmap`` over points
works too). Arrays a metric function closes over become compile-time constants;
that is fine for the small metrics this module is for (``R`` has ``m^4`` entries).

With these conventions the round sphere of radius ``R`` has ``K = 1/R^2``,
``Ric = (m-1)/R^2 g`` and ``S = m (m-1) / R^2``.

Prop 3.3 (curvature barrier, arXiv 2605.17180): for the loss metric
``g_L(u) = hess_u L(u)`` (:func:`loss_metric`), non-zero curvature means no
constant linear head makes the pulled-back metric isotropic everywhere; a
quadratic loss (constant ``g_L``, curvature exactly 0) is the negative control.

Also: :func:`metric_derivatives` (``d_l g_ij``, exact) and :func:`pullback` (``J^T g J`` of a metric
through a map).
"""

from ssl_geometry._src.instrument.riemann import christoffel as christoffel
from ssl_geometry._src.instrument.riemann import loss_metric as loss_metric
from ssl_geometry._src.instrument.riemann import lowered_riemann as lowered_riemann
from ssl_geometry._src.instrument.riemann import metric_derivatives as metric_derivatives
from ssl_geometry._src.instrument.riemann import pullback as pullback
from ssl_geometry._src.instrument.riemann import ricci_tensor as ricci_tensor
from ssl_geometry._src.instrument.riemann import riemann_tensor as riemann_tensor
from ssl_geometry._src.instrument.riemann import scalar_curvature as scalar_curvature
from ssl_geometry._src.instrument.riemann import sectional_curvature as sectional_curvature

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
