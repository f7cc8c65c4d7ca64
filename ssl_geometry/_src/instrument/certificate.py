"""Thm 4.1 repaired: a certificate that predicts, from one collapsed state, whether it is unstable.

docs/theory.md, section "Thm 4.1 repaired: when a collapsed equilibrium is unstable", derives what this module computes.
At a collapsed state ``z_i = c`` of a sample-wise head and a loss whose Hessian ``H_L`` has no blocks coupling two
samples, the effective Hessian is block diagonal by sample, block ``i`` being ``G_i + M_i`` with

    G_i = J^T H_L,ii J,      M_i = sum_a rho_ia hess h_a(c),      J = dh/dz(c).

Along the family ``rho -> s rho`` (head, ``c`` and ``H_L`` fixed; ``s = 1`` is the given state) block ``i`` is
``G_i + s M_i`` and ``f_i(s) = lambda_min(G_i + s M_i)`` is concave in ``s`` (a minimum of affine functions) with
``f_i(0) = lambda_min(G_i) >= 0`` where ``H_L >= 0``. So the block is stable on ``[0, s*_i]`` and unstable beyond, and
``s* = min_i s*_i`` is the critical residual scale. :func:`collapse_certificate` computes it per block
(``N_i = null(G_i)``, ``Q_i`` an orthonormal basis of it, ``B_i = Q_i^T M_i Q_i``):

``Q_i`` comes from the SVD of ``J_i`` when ``null(J_i) = null(G_i)`` (whose error is the square root of that
of ``eigh(G_i)``'s null vectors; ``_null_basis``), and ``B_i`` is decided to that error:

1. ``lambda_min(B_i) < 0``, or a null direction ``y`` of ``B_i`` with ``M_i Q_i y != 0``: then
   ``G_i + s M_i`` has a negative Rayleigh quotient at every ``s > 0``, ``s*_i = 0``;
2. otherwise ``G_i`` and ``M_i`` both vanish on ``K_i = Q_i null(B_i)``: exact zero eigenvalues at
   every ``s`` (degenerate directions), and on ``V_i = K_i^perp`` (``G'`` and ``M'`` the compressions):
   ``s*_i = 1 / mu_i`` with ``mu_i = lambda_max(-G'^{-1/2} M' G'^{-1/2})`` when ``G' > 0``
   (``s*_i = inf`` when ``mu_i <= 0``), or, when ``G'`` is singular (``B_i > 0`` on part of
   ``N_i``), the root of ``f`` by Newton from the right (monotone for a concave ``f``);
3. the bracket ``lambda_min(G')/|lambda_min(M')| <= s*_i <= min(lambda_min(G')/(-q^T M' q),
   w^T G' w/(-w^T M' w))`` (``q``, ``w`` the unit bottom eigenvectors of ``G'`` and ``M'``; a
   term is ``inf`` when its denominator is not positive): Weyl's inequality below, two Rayleigh
   quotients above.

Up to the dense limit (``min(max_dense_dim, MATRIX_FREE_ABOVE)``, the latter
:data:`ssl_geometry.geometry.MATRIX_FREE_ABOVE`) everything is computed densely in float64 (``eigh`` of
each ``d x d`` block). Above it the certificate is matrix-free on the whole ``n d``-dimensional
operators: Lanczos (:func:`ssl_geometry.curvature.extreme_eigenvalues`) for the extremes of ``G`` and
``M``, and ``s*`` as the root of ``f(s) = lambda_min(G + s M)`` by Newton with ``f'(s) = q^T M q``;
that path needs ``G > 0`` (a non-trivial ``null(G)`` is refused by name there). Above ``n d =``
:data:`~ssl_geometry._src.instrument.diagonal_blocks.DENSE_METRIC_MAX` only the blocks ``G_ii`` are formed, in chunks,
and Gaussian probes of ``J^T H_L J`` decide whether ``H_L`` couples the samples (``_chunked_blocks``).
"""
from __future__ import annotations

import functools
import zlib
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from ssl_geometry._src.checks import check_finite, check_positive, check_rank
from ssl_geometry._src.instrument.diagonal_blocks import DENSE_METRIC_MAX, diagonal_sample_blocks
from ssl_geometry._src.instrument.effective import effective_hvp_operator, sample_blocks
from ssl_geometry._src.instrument.premises import sign_tolerance
from ssl_geometry._src.instrument.thm41 import MATRIX_FREE_ABOVE
from ssl_geometry._src.linalg.canonical import closure_convert
from ssl_geometry._src.linalg.lanczos import extreme_eigenvalues
from ssl_geometry._src.linalg.options import SolverOptions
from ssl_geometry._src.models.base import Model, as_function

__all__ = ["CERTIFICATE_CONCLUSIONS", "CollapseCertificate", "collapse_certificate"]

#: The conclusions :func:`collapse_certificate` can reach (the repaired Thm 4.1's vocabulary).
CERTIFICATE_CONCLUSIONS = (
    "unstable (M on null(G))",             # s* = 0: negative curvature at every residual scale s > 0
    "unstable (residual above critical)",  # 0 < s* < 1
    "stable (residual below critical)",    # s* > 1 (inf included) and no exact zero direction
    "degenerate",                          # s* > 1 with G = M = 0 on some direction, or s* = 1
    "premise violated (G not PSD)",        # lambda_min(G) < -tol: H_L is not PSD on range(J)
)


class CollapseCertificate(NamedTuple):
    """The repaired Thm 4.1 at one collapsed state (see the module docstring for the formulas).

    Attributes:
      conclusion: one of :data:`CERTIFICATE_CONCLUSIONS`.
      critical_scale: ``s* = min_i s*_i`` (``0.0``: unstable at every ``s > 0``; ``inf``: stable
        at every ``s >= 0``).
      critical_bounds: ``(lower, upper)`` with ``lower <= s* <= upper`` (module docstring, item 3).
      predicted_sign: the sign of ``lambda_min(H_eff)`` at ``s = 1``: ``-1`` (``s* < 1``), ``0``
        (degenerate: an exact zero direction, or ``s* = 1`` within ``critical_rtol``), ``+1``.
      null_dim: ``dim null(G) = sum_i dim null(G_i)``.
      block_null_dims: ``dim null(G_i)`` per block.
      null_curvature: ``max_i max|lambda(Q_i^T M_i Q_i)|``, the size of ``M`` on ``null(G)``.
      null_curvature_min: ``min_i lambda_min(Q_i^T M_i Q_i)`` (``0.0`` where ``null(G) = {0}``).
      null_coupling: ``max_i |M_i K_i|_2`` over the null directions ``K_i`` of ``B_i``
        (non-zero: ``M`` maps a direction of ``null(G)`` out of it, unstable at every ``s > 0``).
      zero_dim: ``sum_i dim K_i``: directions on which ``G`` and ``M`` both vanish.
      lambda_min_metric: ``min_i lambda_min(G_i)``.
      lambda_max_metric: ``max_i lambda_max(G_i)``.
      lambda_min_interaction: ``min_i lambda_min(M_i)``.
      lambda_max_interaction: ``max_i lambda_max(M_i)``.
      interaction_sum: ``|sum_i M_i|_2 / max_i sum_a |rho_ia| |hess h_a(c)|_F`` (round-off when
        ``sum_i rho_i`` is in the kernel of ``r -> sum_a r_a hess h_a``, e.g. at a head-stationary
        state; ``nan`` when ``rho = 0`` or when ``H_L`` couples the samples).
      blocks: the number of blocks (``n`` when ``H_L`` has no coupling blocks, else ``1``).
      block_dim: the size of each block.
      metric_tol: the largest tolerance used on ``G`` (:func:`ssl_geometry.geometry.sign_tolerance`
        of ``G_i``).
      interaction_tol: the largest tolerance used on ``M``: ``dim eps sum_a |rho_ia| |hess h_a(c)|_F``
        (the rounding of ``M_i``, whose terms may cancel) plus that scale times the error of the computed
        null space: ``t (2 + t)`` with ``t`` from Wedin's bound ``e_J / (sigma_r - sigma_{r+1} - e_J)`` on the
        SVD of ``J_i`` when ``dim null(J_i) = dim null(G_i)``, else ``dim eps 2 |G_i|_2 / gap_i`` (Davis-Kahan
        on ``G_i``; ``_null_basis``).
      method: ``"dense"`` or ``"lanczos"`` (then ``blocks = 1`` of ``n d`` dimensions, the null-space
        fields are ``0`` because ``G > 0`` was required, and ``interaction_sum`` is ``nan``).
      notes: how ``s*`` was found where it was not the direct eigensolve, and any refusal reason.
    """

    conclusion: str
    critical_scale: float
    critical_bounds: tuple
    predicted_sign: int
    null_dim: int
    block_null_dims: tuple
    null_curvature: float
    null_curvature_min: float
    null_coupling: float
    zero_dim: int
    lambda_min_metric: float
    lambda_max_metric: float
    lambda_min_interaction: float
    lambda_max_interaction: float
    interaction_sum: float
    blocks: int
    block_dim: int
    metric_tol: float
    interaction_tol: float
    method: str
    notes: tuple

    def as_dict(self) -> dict:
        """JSON-friendly dictionary (tuples as lists)."""
        d = self._asdict()
        for name in ("critical_bounds", "block_null_dims", "notes"):
            d[name] = list(d[name])
        return d


def _sym(a):
    return 0.5 * (a + a.T)


def _newton_root(G, M, tol, notes, max_iter=200):
    """The positive root of the concave ``f(s) = lambda_min(G + s M)`` (``f(0) = 0``, ``f > 0`` just after).

    Newton from an ``s`` with ``f(s) <= 0``: each tangent of a concave function lies above it,
    so the iterates decrease monotonically to the root. ``f'(s) = q^T M q`` (``q`` the bottom
    eigenvector; a supergradient where the eigenvalue is multiple).
    """
    eM, vM = np.linalg.eigh(M)
    if eM[0] >= -tol:
        return float("inf")
    w = vM[:, 0]
    s = float(w @ G @ w) / float(-(w @ M @ w))
    for _ in range(max_iter):
        e, v = np.linalg.eigh(_sym(G + s * M))
        f, fp = float(e[0]), float(v[:, 0] @ M @ v[:, 0])
        if f >= 0.0 or fp >= 0.0:
            return s
        s_new = s - f / fp
        if abs(s_new - s) <= 4 * np.finfo(np.float64).eps * s:
            return s_new
        s = s_new
    notes.append(f"Newton for s* did not settle in {max_iter} steps; last s = {s:.17g}.")
    return s


def _null_basis(eG, vG, null, J, m_scale, eps):
    """``(Q, m_tol)``: an orthonormal basis ``Q`` of ``null(G)`` (``null`` marks ``G``'s eigenvalues within
    tolerance) and the tolerance on ``Q^T M Q``: ``M``'s rounding ``dim eps m_scale`` plus the error of ``Q``.

    From ``J`` (its SVD; ``J = None``: the sample blocks are coupled) when ``J``'s numerical null space
    (singular values ``<= e_J = max(k, d) eps |J|_2``, NumPy's ``matrix_rank`` rule) has ``dim null(G)``
    dimensions: ``null(J) <= null(G)`` always, so equal dimensions give ``null(G) = null(J)`` (``H_L``
    definite on ``range(J)``). With ``|J~ - J|_2 <= e_J`` (forming and SVD), Wedin's theorem bounds the
    angle to the exact space, ``sin theta <= e_J / delta``, ``delta = sigma_r - sigma_{r+1} - e_J``
    (``r = rank``); the best rotation ``W`` gives ``|Q - Q* W|_2 = t = 2 sin(theta / 2)``, which moves
    ``Q^T M Q`` by at most ``(2 t + t^2) |M|_2``, ``|M|_2 <= m_scale``:
    ``m_tol = m_scale (dim eps + t (2 + t))``. ``sigma_r(J)`` is the square root of ``G``'s gap (up to
    ``H_L``), so this is the square root of the Davis-Kahan bound on ``G``'s eigenvectors used otherwise:
    ``m_tol = dim eps m_scale (1 + 2 |G|_2 / gap)`` (``|E_G| <= dim eps |G|``; ``gap`` the smallest
    eigenvalue of ``G`` above tolerance)."""
    dim, nd = eG.shape[0], int(np.sum(null))
    if nd and J is not None:
        _, sv, vt = np.linalg.svd(J)  # vt (d, d): its last d - rank rows span null(J)
        e_j = max(J.shape[0], dim) * eps * float(sv[0])
        rank = int(np.sum(sv > e_j))
        delta = (float(sv[rank - 1]) - (float(sv[rank]) if rank < sv.size else 0.0) - e_j) if rank else 0.0
        if dim - rank == nd and delta > 0.0:
            t = 2.0 * np.sin(0.5 * np.arcsin(min(1.0, e_j / delta)))
            return vt[rank:].T, float(m_scale * (dim * eps + t * (2.0 + t)))
    above = eG[~null]
    g_norm = float(np.max(np.abs(eG)))
    gap = float(above[0]) if above.size else g_norm
    m_tol = dim * eps * m_scale * (1.0 + 2.0 * g_norm / gap) if gap > 0 else dim * eps * m_scale
    return vG[:, null], float(m_tol)


def _block(G, M, eG, vG, eM, m_scale, dtype, notes, J=None, skip_s=False, eigh_M=None):
    """The per-block quantities of the module docstring, as a dict (``eG, vG``: ``eigh(G)``; ``eM``: ``M``'s
    eigenvalues; ``J``: the block's Jacobian ``(k, d)``, ``None`` for coupled blocks; ``eigh_M``: ``eigh(M)`` when
    called). ``skip_s``: stop after ``null(G)`` (``s*_i = 0`` when ``M`` acts on it, else ``inf`` as a placeholder)."""
    eps, g_tol = float(np.finfo(np.dtype(dtype)).eps), sign_tolerance(eG, dtype)
    out = {"lmin_G": float(eG[0]), "lmax_G": float(eG[-1]), "lmin_M": float(eM[0]), "lmax_M": float(eM[-1]),
           "g_tol": g_tol}
    if eG[0] < -g_tol:
        return {**out, "psd": False, "null_dim": 0, "null_curv": 0.0, "null_min": 0.0, "coupling": 0.0,
                "zero_dim": 0, "m_tol": 0.0, "s": float("nan"), "lower": float("nan"), "upper": float("nan")}
    # M's rounding: its entries are sums sum_a rho_a hess h_a that may cancel (M = 0 exactly at some
    # equilibria), so their error is eps times the size of the terms, m_scale = sum_a |rho_a| |hess h_a|_F
    # >= |M|_2; plus the error of the computed null space (_null_basis)
    Q, m_tol = _null_basis(eG, vG, eG <= g_tol, J, m_scale, eps)
    res = {**out, "psd": True, "null_dim": int(Q.shape[1]), "m_tol": float(m_tol)}
    if Q.shape[1]:
        eB, vB = np.linalg.eigh(_sym(Q.T @ M @ Q))
        K = Q @ vB[:, np.abs(eB) <= m_tol] if eB[0] >= -m_tol else Q[:, :0]
        coupling = float(np.linalg.norm(M @ K, 2)) if K.shape[1] else 0.0
        res.update(null_curv=float(np.max(np.abs(eB))), null_min=float(eB[0]), coupling=coupling,
                   zero_dim=int(K.shape[1]))
        if eB[0] < -m_tol or coupling > m_tol:
            return {**res, "zero_dim": 0, "s": 0.0, "lower": 0.0, "upper": 0.0}
    else:
        K = Q
        res.update(null_curv=0.0, null_min=0.0, coupling=0.0, zero_dim=0)
    if skip_s or K.shape[1] == G.shape[0]:  # K^perp = {0}: G' and M' are empty
        return {**res, "s": float("inf"), "lower": float("inf"), "upper": float("inf")}
    if K.shape[1]:
        V = np.linalg.svd(K, full_matrices=True)[0][:, K.shape[1]:]  # orthonormal basis of K^perp
        Gp, Mp = _sym(V.T @ G @ V), _sym(V.T @ M @ V)
        (eGp, vGp), (eMp, vMp) = np.linalg.eigh(Gp), np.linalg.eigh(Mp)
    else:  # G' = G and M' = M exactly: G's decomposition is the one given, M's is shared by the blocks equal to it
        Gp, Mp, eGp, vGp = G, M, eG, vG
        eMp, vMp = np.linalg.eigh(M) if eigh_M is None else eigh_M()
    m_neg = eMp[0] < -m_tol
    # bracket: Weyl below, Rayleigh quotients at q (bottom of G') and w (bottom of M') above
    q, w = vGp[:, 0], vMp[:, 0]
    qMq, wMw = float(q @ Mp @ q), float(w @ Mp @ w)
    lower = float(max(eGp[0], 0.0) / -eMp[0]) if m_neg else float("inf")
    upper = min(float(eGp[0] / -qMq) if qMq < -m_tol else float("inf"),
                float((w @ Gp @ w) / -wMw) if wMw < -m_tol else float("inf"))
    if not m_neg:
        s = float("inf")
    elif eGp[0] > g_tol:
        W = vGp / np.sqrt(eGp)[None, :]          # W^T G' W = I
        kappa = np.linalg.eigvalsh(_sym(-(W.T @ Mp @ W)))
        mu = float(kappa[-1])
        # M' is known to m_tol, so mu to m_tol / lambda_min(G'): a mu inside that is zero
        s = 1.0 / mu if mu > m_tol / eGp[0] else float("inf")
    else:
        notes.append("G is singular off the degenerate directions (M > 0 on part of null(G)): s* from Newton "
                     "on lambda_min(G + s M).")
        s = _newton_root(Gp, Mp, m_tol, notes)
    return {**res, "s": s, "lower": min(lower, s), "upper": max(upper, s) if np.isfinite(s) else upper}


def _blocks(head_fn, loss_fn, z, rounding_probes=None):
    """``(G blocks, M blocks, M rounding scales, J blocks)``: per-sample ``(n, d, d)`` blocks and Jacobians
    ``(n, k, d)``, or one block and ``J = None`` when ``H_L`` couples the samples; the scale of block ``i`` is
    ``sum_a |rho_ia| |hess h_a(c)|_F`` (``c = z_0``).

    ``G_ij`` and ``M_i`` are the effective Hessian's sample blocks
    (:func:`ssl_geometry._src.instrument.effective.sample_blocks`); all of it jitted with the arrays of
    ``head_fn`` and ``loss_fn`` as arguments (a fresh closure of the same code compiles nothing).

    Above ``n d =`` :data:`~ssl_geometry._src.instrument.diagonal_blocks.DENSE_METRIC_MAX` the ``(n, d, n, d)``
    metric is not formed: :func:`_chunked_blocks`."""
    n, d = z.shape
    if n * d > DENSE_METRIC_MAX:
        return _chunked_blocks(head_fn, loss_fn, z, rounding_probes)
    blocks = sample_blocks(head_fn, loss_fn, z)
    G, M, scales, J = _checked_blocks(blocks, head_fn, z, rounding_probes)                    # G: (n, d, n, d)
    i = np.arange(n)
    off = G.copy()
    off[i, :, i, :] = 0.0
    scale = float(np.max(np.abs(G))) if G.size else 0.0
    coupled = bool(np.max(np.abs(off)) > n * d * np.finfo(np.float64).eps * scale) if n > 1 else False
    if not coupled:
        return G[i, :, i, :], M, scales, J
    Mfull = np.zeros((n, d, n, d))
    Mfull[i, :, i, :] = M
    return G.reshape(1, n * d, n * d), Mfull.reshape(1, n * d, n * d), scales.max(keepdims=True), None


def _chunked_blocks(head_fn, loss_fn, z, rounding_probes=None):
    """:func:`_blocks` above ``n d =`` :data:`DENSE_METRIC_MAX`: the diagonal blocks ``G_ii = J_i^T H_L,ii J_i``
    in chunks and ``coupled`` from Gaussian probes of ``J^T H_L J`` against ``(G_ii v_i)_i``
    (:func:`ssl_geometry._src.instrument.diagonal_blocks.diagonal_sample_blocks`, whose docstring gives the
    formulas and the tolerance). When the samples are coupled, ``(None, None, None, None)``: the ``n d``-dimensional
    coupled block is above every dense limit, and :func:`_solve_blocks` goes matrix-free on the whole operators (as
    it does for a coupled block formed densely above its limit)."""
    blocks = diagonal_sample_blocks(head_fn, loss_fn, z)
    if blocks.coupled:
        check_finite(blocks.residual, "residual rho = grad_u L at the given `z`")
        return None, None, None, None
    return _checked_blocks(blocks, head_fn, z, rounding_probes)                                # G: (n, d, d)


def _checked_blocks(blocks, head_fn, z, rounding_probes):
    """``(G, M, M rounding scales, J)`` in float64 from the kernel's ``blocks`` (``metric``, ``interaction``,
    ``residual``, ``jacobian``: :func:`sample_blocks` or :func:`diagonal_sample_blocks`), each checked finite;
    the scales are :func:`_rounding_scales` at the blocks' residual."""
    check_finite(blocks.residual, "residual rho = grad_u L at the given `z`")
    head_c, head_consts, _ = closure_convert(head_fn, z)
    scales = np.asarray(_rounding_scales(head_c, head_consts, z, blocks.residual, rounding_probes), np.float64)
    G = np.asarray(blocks.metric, np.float64)
    M = np.asarray(blocks.interaction, np.float64)
    check_finite(G, "metric G = J^T H_L J at the given `z`")
    check_finite(M, "interaction M = sum rho_a hess h_a at the given `z`")
    return G, M, scales, np.asarray(blocks.jacobian, np.float64)


#: The most entries ``k d^2`` of ``hess h(c)`` that :func:`_rounding_scales` forms exactly; above it, the Frobenius norms
#: are estimated from :data:`ROUNDING_PROBES` Rademacher probes (at the paper's 512 -> 2048 -> 2048 head the exact
#: ``(k, d, d)`` tensor is 4.3 GB and costs ``k d`` second-order passes).
EXACT_SCALE_ENTRIES, ROUNDING_PROBES = 2**24, 16


def _rounding_scales(head_c, head_consts, z, rho, probes=None):
    """``sum_a |rho_ia| |hess h_a(z_0)|_F`` per sample: the size of the terms of ``M_i``, which may cancel.

    Exact (``jax.hessian``, ``(k, d, d)``) when ``probes`` is ``None`` and ``k d^2 <=``
    :data:`EXACT_SCALE_ENTRIES`; else Hutchinson's ``|H_a|_F^2 = E_v |H_a v|^2`` over ``probes`` (default
    :data:`ROUNDING_PROBES`) Rademacher ``v`` (key 0: the same state gives the same scale), with ``H_a v`` for every
    ``a`` at once as the forward derivative of ``J(x)`` along ``v``, one probe at a time (the memory of one
    ``(k, d)`` Jacobian). It sets a rounding tolerance (``dim eps`` times it), not a deciding number."""
    k, d = int(rho.shape[1]), int(z.shape[1])
    exact = probes is None and k * d * d <= EXACT_SCALE_ENTRIES
    return _rounding_scales_jit(head_c, exact, ROUNDING_PROBES if probes is None else int(probes), head_consts, z, rho)


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _rounding_scales_jit(head_c, exact, probes, head_consts, z, rho):
    def h1(x):
        return head_c(head_consts, x[None])[0]

    if exact:
        hess = jax.hessian(h1)(z[0])  # (k, d, d)
        return jnp.abs(rho) @ jnp.sqrt(jnp.sum(hess**2, axis=(1, 2)))
    vs = jax.random.rademacher(jax.random.PRNGKey(0), (probes, z.shape[1]), dtype=z.dtype)
    hv2 = jax.lax.map(lambda v: jnp.sum(jax.jvp(jax.jacfwd(h1), (z[0],), (v,))[1] ** 2, axis=1), vs)  # (p, k)
    return jnp.abs(rho) @ jnp.sqrt(jnp.mean(hv2, axis=0))


def _matrix_free(head_fn, loss_fn, z, lanczos_steps, key, notes):
    """``s*`` on the whole batch operator by Lanczos (:func:`ssl_geometry.curvature.extreme_eigenvalues`).

    Needs ``G > 0`` (full column rank): ``lambda_min(G)`` within its tolerance is refused, since
    the null space of ``G`` and ``M`` on it are not resolved matrix-free. ``s*`` is the root of the
    concave ``f(s) = lambda_min(G + s M)``, by Newton from the Rayleigh upper bound at the bottom
    Ritz vector ``w`` of ``M`` (monotone from the right), ``f'(s) = q^T M q`` at the bottom Ritz
    vector ``q``; each ``f(s)`` is a Lanczos run whose true residual enters the tolerances.
    """
    mv_g, args_g = effective_hvp_operator(head_fn, loss_fn, z, part="metric")
    mv_m, args_m = effective_hvp_operator(head_fn, loss_fn, z, part="interaction")
    n_g, dim, dtype = len(args_g), int(z.size), z.dtype

    def pencil(v, s, *args):
        return mv_g(v, *args[:n_g]) + s * mv_m(v, *args[n_g:])

    def lanczos(mv, args, i):
        r = extreme_eigenvalues(mv, dim, k=1, key=jax.random.fold_in(key, i), args=args, return_vectors=True,
                                dtype=dtype, options=SolverOptions(num_steps=min(lanczos_steps, dim)))
        lo, hi = float(np.asarray(r.smallest)[0]), float(np.asarray(r.largest)[0])
        if not (np.isfinite(lo) and np.isfinite(hi)):
            raise FloatingPointError(f"Lanczos returned non-finite extreme eigenvalues: {lo}, {hi}.")
        res = float(np.asarray(r.smallest_true_residuals)[0])
        if not r.converged:
            notes.append(f"Lanczos run {i} did not meet its tolerance in {r.num_steps} steps (true residual "
                         f"{res:.3e}).")
        return lo, hi, jnp.asarray(r.smallest_vectors)[0], res

    def quad(mv, args, v):
        return float(jnp.vdot(v, mv(v, *args)))

    lmin_g, lmax_g, q0, res_g = lanczos(mv_g, tuple(args_g), 0)
    lmin_m, lmax_m, w, res_m = lanczos(mv_m, tuple(args_m), 1)
    g_tol = sign_tolerance([lmin_g, lmax_g], dtype, dim=dim, residual=res_g)
    m_tol = sign_tolerance([lmin_m, lmax_m], dtype, dim=dim, residual=res_m)
    out = {"lmin_G": lmin_g, "lmax_G": lmax_g, "lmin_M": lmin_m, "lmax_M": lmax_m, "g_tol": g_tol, "m_tol": m_tol}
    if lmin_g < -g_tol:
        return {**out, "psd": False}
    if lmin_g <= g_tol:
        raise ValueError(f"lambda_min(G) = {lmin_g:.3e} is within its tolerance {g_tol:.3e}: null(G) is not trivial, "
                         f"and the matrix-free path of collapse_certificate needs G > 0 (the {dim}-dimensional "
                         "operator is above the dense limit, where null(G) and M on it would be resolved).")
    if lmin_m >= -m_tol:
        return {**out, "psd": True, "s": float("inf"), "lower": float("inf"), "upper": float("inf")}
    s = quad(mv_g, args_g, w) / -quad(mv_m, args_m, w)
    upper = s
    q0_m = quad(mv_m, args_m, q0)
    if q0_m < -m_tol:
        upper = min(upper, lmin_g / -q0_m)
    lower = lmin_g / -lmin_m
    for i in range(2, 52):
        f, _, q, res = lanczos(pencil, (jnp.asarray(s, dtype), *args_g, *args_m), i)
        fp = quad(mv_m, args_m, q)
        if f >= -res or fp >= 0.0:
            break
        s_new = s - f / fp
        if abs(s_new - s) <= 1e-12 * s:
            s = s_new
            break
        s = s_new
    else:
        notes.append(f"Newton for s* did not settle in 50 Lanczos runs; last s = {s:.17g}.")
    return {**out, "psd": True, "s": float(s), "lower": min(lower, s), "upper": max(upper, s)}


def _checked_arguments(head, variables, z, critical_rtol, max_dense_dim, lanczos_steps, collapse_tol):
    """``(head_fn, z)`` after :func:`collapse_certificate`'s argument checks (each error names its argument)."""
    if isinstance(head, Model):
        if not isinstance(variables, dict) or "params" not in variables:
            raise ValueError("`variables` must be the head's variables dict with a 'params' entry when `head` is a "
                             f"Model; got {type(variables).__name__}.")
        head_fn = as_function(head, variables, train=False)
    elif callable(head):
        if variables is not None:
            raise ValueError("`variables` must be None when `head` is a plain function z -> u.")
        head_fn = head
    else:
        raise TypeError(f"`head` must be a Model or a callable z -> u; got {type(head).__name__}.")
    z = jnp.asarray(z)
    check_rank(z, "z", 2)
    check_positive(critical_rtol, "critical_rtol")
    if not isinstance(max_dense_dim, int) or isinstance(max_dense_dim, bool) or max_dense_dim < 1:
        raise ValueError(f"`max_dense_dim` must be a positive int; got {max_dense_dim!r}.")
    if not isinstance(lanczos_steps, int) or isinstance(lanczos_steps, bool) or lanczos_steps < 2:
        raise ValueError(f"`lanczos_steps` must be an int >= 2; got {lanczos_steps!r}.")
    if z.shape[0] < 1 or z.shape[1] < 1:
        raise ValueError(f"`z` must be a non-empty batch (n, d); got shape {z.shape}.")
    if jnp.issubdtype(z.dtype, jnp.floating):
        zc = np.asarray(z, np.float64)
        check_finite(zc, "z")
        centre = zc.mean(axis=0)
        spread = float(np.max(np.linalg.norm(zc - centre, axis=1)))
        c_tol = 1e-6 * max(1.0, float(np.linalg.norm(centre))) if collapse_tol is None else float(collapse_tol)
        if spread > c_tol:
            raise ValueError(f"`z` must be a collapsed state (every row the same point c): max_i |z_i - mean z| = "
                             f"{spread:.3e} > collapse_tol = {c_tol:.3e}.")
    return head_fn, z


def _conclusion(s_star: float, zero_dim: int, critical_rtol: float) -> tuple[str, int]:
    """``(conclusion, sign of lambda_min(H_eff) at s = 1)`` from ``s*`` and the shared zero directions."""
    if s_star == 0.0:
        return CERTIFICATE_CONCLUSIONS[0], -1
    elif s_star < 1.0 - critical_rtol:
        return CERTIFICATE_CONCLUSIONS[1], -1
    elif s_star <= 1.0 + critical_rtol or zero_dim > 0:
        return CERTIFICATE_CONCLUSIONS[3], 0
    return CERTIFICATE_CONCLUSIONS[2], 1


def _distinct(X):
    """``(X_u, of)``: the bitwise distinct blocks of the stack ``X`` and ``X[b] = X_u[of[b]]``. A batched ``eigh``
    makes the same LAPACK call on each block as on one matrix, so one decomposition serves every copy of a block
    exactly (at a collapsed state every ``G_i = J^T H_L,ii J`` is often the same matrix)."""
    first, seen = np.arange(len(X)), {}
    for b in range(len(X)):
        bits = np.ascontiguousarray(X[b]).view(np.uint64)
        same = seen.setdefault(zlib.crc32(bits), [])  # candidates, compared bit by bit
        first[b] = next((a for a in same if np.array_equal(np.ascontiguousarray(X[a]).view(np.uint64), bits)), b)
        same += [b] if first[b] == b else []
    u = np.unique(first)
    return (X if u.size == len(X) else X[u]), np.searchsorted(u, first)


def _solve_blocks(head_fn, loss_fn, z, max_dense_dim, lanczos_steps, key, rounding_probes=None):
    """Each block's ``G``/``M`` spectra and ``s*_i`` (dense ``eigh``, or Lanczos above the dense limit):
    ``(per-block dicts, interaction_sum, blocks, block_dim, dense, notes)``."""
    limit = min(max_dense_dim, MATRIX_FREE_ABOVE)
    n, d = z.shape
    dense = d <= limit
    if dense:
        G, M, m_scales, Jb = _blocks(head_fn, loss_fn, z, rounding_probes)
        coupled, dense = Jb is None, G is not None and G.shape[1] <= limit
    notes = []
    if d <= limit and G is None:
        notes.append(f"H_L couples the samples (Gaussian probes of J^T H_L J) at n d = {n * d} > DENSE_METRIC_MAX = "
                     f"{DENSE_METRIC_MAX}: the metric's off-diagonal blocks are not formed.")
    if dense:
        if coupled:
            notes.append("H_L couples the samples: G is not block diagonal; one block of size n*d.")
        Gs, Ms = 0.5 * (G + np.swapaxes(G, 1, 2)), 0.5 * (M + np.swapaxes(M, 1, 2))
        (Gu, g_of), (Mu, m_of) = _distinct(Gs), _distinct(Ms)
        # each distinct block in one batched call (eigvalsh, not eigh's values: they differ in the last bits)
        (eG, vG), eM = np.linalg.eigh(Gu), np.linalg.eigvalsh(Mu)
        eigh_M = functools.lru_cache(maxsize=16)(lambda u: np.linalg.eigh(Mu[u]))  # shared by equal blocks M_i
        # what follows has sizes that depend on each block's null space: block by block, on the host
        args = [(Gs[b], Ms[b], eG[g_of[b]], vG[g_of[b]], eM[m_of[b]], float(m_scales[b]), z.dtype, notes,
                 None if coupled else Jb[b]) for b in range(G.shape[0])]
        # null(G) first: when M acts on it in one block (s* = 0) or G is not PSD, no other block's s*_i is needed
        per = [_block(*a, skip_s=True) for a in args]
        if all(p["psd"] and p["s"] > 0.0 for p in per):
            per = [_block(*a, eigh_M=functools.partial(eigh_M, int(m_of[b]))) for b, a in enumerate(args)]
        m_sum = np.linalg.norm(_sym(M.sum(axis=0)), 2) if not coupled else float("nan")
        m_max = float(np.max(m_scales))
        m_sum = float(m_sum / m_max) if m_max > 0 else float("nan")
        blocks, block_dim = int(G.shape[0]), int(G.shape[1])
    else:
        notes.append(f"above the dense limit min(max_dense_dim, MATRIX_FREE_ABOVE) = {limit}: Lanczos on the whole "
                     f"{n * d}-dimensional operators G and M (full column rank required).")
        key = jax.random.PRNGKey(0) if key is None else key
        per = [{**_matrix_free(head_fn, loss_fn, z, lanczos_steps, key, notes), "null_dim": 0, "null_curv": 0.0,
                "null_min": 0.0, "coupling": 0.0, "zero_dim": 0}]
        m_sum, blocks, block_dim = float("nan"), 1, n * d
    return per, m_sum, blocks, block_dim, dense, notes


def collapse_certificate(
    head: Model | Callable[[Array], Array],
    loss_fn: Callable[[Array], Array],
    z: Float[ArrayLike, "n d"],
    *,
    variables: dict | None = None,
    max_dense_dim: int = MATRIX_FREE_ABOVE,
    critical_rtol: float = 1e-8,
    collapse_tol: float | None = None,
    lanczos_steps: int = 200,
    key: Array | None = None,
    rounding_probes: int | None = None,
) -> CollapseCertificate:
    """The repaired Thm 4.1 at a collapsed state: ``s*``, the predicted sign, and why.

    With ``G_i = J^T H_L,ii J`` and ``M_i = sum_a rho_ia hess h_a(c)`` the sample blocks of
    ``H_eff = G + M`` at ``z_i = c`` (module docstring; docs/theory.md, section
    "Thm 4.1 repaired: when a collapsed equilibrium is unstable"):

    * ``s* = 0`` when ``M`` acts on ``null(G)`` (``lambda_min(Q_i^T M_i Q_i) < 0`` or
      ``M_i K_i != 0``): ``"unstable (M on null(G))"``, negative curvature at every residual scale;
    * else ``s* = min_i 1 / lambda_max(-G_i'^{-1/2} M_i' G_i'^{-1/2})`` on the complement of the
      directions where ``G_i = M_i = 0`` (``inf`` when that is ``<= 0``);
    * conclusion at the given state (``s = 1``): ``"unstable (residual above critical)"`` when
      ``s* < 1 - critical_rtol``, ``"degenerate"`` when ``|s* - 1| <= critical_rtol`` or when
      ``G`` and ``M`` both vanish on some direction, ``"stable (residual below critical)"``
      otherwise; ``"premise violated (G not PSD)"`` when ``lambda_min(G_i) < -tol`` (``H_L`` not
      PSD on ``range(J)``; the rest is then not computed).

    The state must be collapsed (rows of ``z`` equal up to ``collapse_tol``, default
    ``1e-6 max(1, |mean z|)``) and the head sample-wise (a :class:`~ssl_geometry.Model` is applied
    in eval mode). Whether the state is an *equilibrium* is not checked here
    (:func:`ssl_geometry.geometry.thm41_premises` does): the algebra of ``s*`` holds at any state,
    the sum rule ``sum_i M_i = 0`` (reported as ``interaction_sum``) needs head stationarity.

    Args:
      head: a head :class:`~ssl_geometry.Model` with ``variables``, or a plain batch function
        ``(n, d) -> (n, k)`` with ``variables=None``.
      loss_fn: ``u (n, k) -> scalar``.
      z: the collapsed state ``(n, d)``, float64 for the float64-exact result.
      max_dense_dim: the largest block solved densely (never above :data:`MATRIX_FREE_ABOVE`); larger
        ones go matrix-free (``max_dense_dim=1``: matrix-free at every size).
      critical_rtol: relative width of "``s* = 1``".
      lanczos_steps, key: the most Lanczos steps per run and the start-vector key (matrix-free path).
      rounding_probes: how the size of ``M``'s terms, ``sum_a |rho_ia| |hess h_a(c)|_F`` (which sets ``M``'s
        rounding tolerance ``interaction_tol``), is computed: ``None``, the exact ``(k, d, d)`` head Hessian up to
        ``k d^2 = 2^24`` entries and 16 Rademacher probes (Hutchinson) above, where that tensor would not fit
        (4.3 GB at 512 -> 2048 -> 2048); an int, that many probes at every size.

    Returns:
      :class:`CollapseCertificate`. Computed on the host with NumPy ``eigh`` or Lanczos (the conclusion is a
      word and the null spaces have data-dependent sizes, so the function is not traced under ``jit``;
      the derivative pieces are JAX).

    Raises:
      TypeError / ValueError: naming the argument (``head``, ``variables``, ``z`` not ``(n, d)`` or not
        collapsed, ``critical_rtol``, ``max_dense_dim``, ``lanczos_steps``; a non-trivial ``null(G)`` on the
        matrix-free path).
      FloatingPointError: a non-finite ``rho``, ``G`` or ``M`` at ``z``.
    """
    head_fn, z = _checked_arguments(head, variables, z, critical_rtol, max_dense_dim, lanczos_steps,
                                    collapse_tol)
    if rounding_probes is not None and not (isinstance(rounding_probes, int) and rounding_probes >= 1):
        raise ValueError(f"`rounding_probes` must be None or a positive int; got {rounding_probes!r}.")
    per, m_sum, blocks, block_dim, dense, notes = _solve_blocks(head_fn, loss_fn, z, max_dense_dim, lanczos_steps,
                                                               key, rounding_probes)
    common = dict(
        block_null_dims=tuple(p["null_dim"] for p in per), null_dim=int(sum(p["null_dim"] for p in per)),
        lambda_min_metric=min(p["lmin_G"] for p in per), lambda_max_metric=max(p["lmax_G"] for p in per),
        lambda_min_interaction=min(p["lmin_M"] for p in per), lambda_max_interaction=max(p["lmax_M"] for p in per),
        interaction_sum=m_sum, blocks=blocks, block_dim=block_dim, metric_tol=max(p["g_tol"] for p in per),
        interaction_tol=max(p["m_tol"] for p in per), method="dense" if dense else "lanczos")
    if not all(p["psd"] for p in per):
        notes.append(f"lambda_min(G) = {common['lambda_min_metric']:.3e} < -tol: H_L is not PSD on range(J), the "
                     "repaired theorem's premise; s* is not computed.")
        return CollapseCertificate(conclusion=CERTIFICATE_CONCLUSIONS[4], critical_scale=float("nan"),
                                   critical_bounds=(float("nan"), float("nan")), predicted_sign=-1,
                                   null_curvature=float("nan"), null_curvature_min=float("nan"),
                                   null_coupling=float("nan"), zero_dim=0, notes=tuple(notes), **common)
    s_star = min(p["s"] for p in per)
    lower, upper = min(p["lower"] for p in per), min(p["upper"] for p in per)
    zero_dim = int(sum(p["zero_dim"] for p in per))
    notes = list(dict.fromkeys(notes))  # one line per remark, not one per block
    conclusion, sign = _conclusion(s_star, zero_dim, critical_rtol)
    return CollapseCertificate(
        conclusion=conclusion, critical_scale=float(s_star), critical_bounds=(float(lower), float(upper)),
        predicted_sign=sign, null_curvature=max(p["null_curv"] for p in per),
        null_curvature_min=min(p["null_min"] for p in per), null_coupling=max(p["coupling"] for p in per),
        zero_dim=zero_dim, notes=tuple(notes), **common)
