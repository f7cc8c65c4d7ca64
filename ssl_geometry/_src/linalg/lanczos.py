"""Lanczos with full reorthogonalisation for the extreme eigenpairs of a symmetric operator.

From ``q_1 = v_0/|v_0|``: ``w = A q_j - alpha_j q_j - beta_{j-1} q_{j-1}``, ``alpha_j = q_j^T A q_j``;
``w`` is orthogonalised twice against the Lanczos vectors computed so far (classical
Gram-Schmidt applied twice, "twice is enough", Giraud et al. 2005), ``beta_j = |w|``,
``q_{j+1} = w / beta_j``. After ``m`` steps ``A Q_m = Q_m T_m + beta_m q_{m+1} e_m^T``; the
eigenpairs ``(theta_i, s_i)`` of the tridiagonal ``T_m`` give Ritz pairs with residual
``|A y_i - theta_i y_i| = |beta_m s_i[m]|``, and for symmetric ``A`` an eigenvalue lies within
that distance of ``theta_i``.

Cost per step (``B`` blocks of dimension ``n``, step ``j``): one batched matvec, plus
``4 (j + 1) B n`` multiply-adds of reorthogonalisation against only the *filled* part of the
basis (a large buffer grows geometrically on demand; it is visited in blocks of ``_BLOCK`` rows
up to row ``j``),
and a restart draw only at a breakdown (``lax.cond``). The loop runs on device in chunks
between host-side convergence checks; the tridiagonal is diagonalised on the host in
float64 (a batched dense ``eigh`` of the small ``T_j`` for all blocks at once). The chunk
length adapts: the first check comes after ``min(check_every, max(4, 2k))`` steps, the
second 2 steps later, later ones after half the number of steps the observed decay of the
worst residual predicts (at least 1, at most ``check_every``), so the run stops within a
step or so of meeting ``tol``.

Symmetry is checked on the fly, at no extra matvec: for symmetric ``A`` the cross term
``q_{j-1}^T A q_j`` equals ``beta_{j-1}`` up to rounding; the largest
``|q_{j-1}^T A q_j - beta_{j-1}| / |A|_est`` over the run is reported as ``asymmetry`` and
a value above ``symmetry_tol`` (default ``sqrt(eps)``) raises ``ValueError``. A small
residual does not by itself prove that ``theta_i`` is the *extreme* eigenvalue (an
eigenvector orthogonal to ``v_0`` is invisible to Krylov methods); random starting vectors
make that event probability zero.
"""
from __future__ import annotations

import functools
import math
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg
from jax import lax
from jaxtyping import Array, Float

from ssl_geometry._src.checks import check_finite, check_int, check_positive
from ssl_geometry._src.linalg.operators import (SingleAsBatch, as_dtype, check_callable,
                                            check_matvec_output, default_key)

__all__ = ["LanczosResult", "extreme_eigenvalues", "blockwise_extreme_eigenvalues"]

_BLOCK = 8          # rows of the basis visited per reorthogonalisation block
_DENSE_RITZ_MAX = 48  # up to this many steps the Ritz problem is one batched dense eigh
_HI = lax.Precision.HIGHEST  # reorthogonalisation must not run in TF32/bf16 on accelerators
_PREALLOCATE_BYTES = 64 * 2**20  # a basis up to this size is allocated whole (one compilation of the loop)


class _LanczosState(NamedTuple):
    Q: Array            # (rows, B, n) Lanczos vectors (rows a multiple of _BLOCK, grown on demand); unused rows zero
    alpha: Array        # (m, B) diagonal of T
    beta: Array         # (m, B) off-diagonal of T (0 where a breakdown restarted)
    resid: Array        # (m, B) |w_j| after reorthogonalisation (the true beta, kept at breakdowns)
    broke: Array        # (m, B) bool: breakdown at step j
    anorm: Array        # (B,) running estimate of |A| (max sqrt(alpha^2 + beta^2 + beta_prev^2))
    asym: Array         # (B,) max_j |q_{j-1}^T A q_j - beta_{j-1}| / anorm (symmetry defect)


def _orthogonalise(w, Q, j):
    """Two passes of classical Gram-Schmidt of rows of ``w`` (B, n) against rows ``0..j`` of ``Q``.

    ``Q`` is (mq, B, n) with rows beyond ``j`` zero; it is visited in blocks of ``_BLOCK``
    rows, only up to the block holding row ``j`` (a dynamic trip count), so the cost grows
    with the filled part, not with the preallocated size.
    """
    nblk = j // _BLOCK + 1

    def cgs(w):
        def body(c, acc):
            Qc = lax.dynamic_slice_in_dim(Q, c * _BLOCK, _BLOCK, axis=0)
            coef = jnp.einsum("mbn,bn->mb", Qc, w, precision=_HI)
            return acc + jnp.einsum("mb,mbn->bn", coef, Qc, precision=_HI)

        return w - lax.fori_loop(0, nblk, body, jnp.zeros_like(w))

    return cgs(cgs(w))


@functools.partial(jax.jit, static_argnums=(0,), donate_argnums=(1,))
def lanczos_chunk(matvec, state: _LanczosState, start, stop, key, breakdown_tol, args):
    """Run Lanczos steps ``start <= j < stop`` on device (``lax.fori_loop``); ``state`` is donated."""
    dtype = state.Q.dtype

    def body(j, st: _LanczosState):
        q = st.Q[j]
        w = matvec(q, *args).astype(dtype)
        alpha = jnp.sum(q * w, axis=-1)
        jp = jnp.maximum(j - 1, 0)
        beta_prev = jnp.where(j > 0, st.beta[jp], 0)
        q_prev = st.Q[jp]
        cross = jnp.where(j > 0, jnp.sum(q_prev * w, axis=-1), 0)  # = beta_prev when A is symmetric
        w = w - alpha[:, None] * q - beta_prev[:, None] * q_prev
        w = _orthogonalise(w, st.Q, j)
        b = jnp.linalg.norm(w, axis=-1)
        anorm = jnp.maximum(st.anorm, jnp.sqrt(alpha**2 + b**2 + beta_prev**2))
        asym = jnp.maximum(st.asym, jnp.abs(cross - beta_prev) / jnp.where(anorm > 0, anorm, 1))
        broke = b <= breakdown_tol * anorm

        def restart(_):
            # breakdown: invariant subspace found; continue from a random vector orthogonal
            # to all previous Lanczos vectors (T gets a zero off-diagonal). Drawn only here.
            r = jax.random.normal(jax.random.fold_in(key, j + 1), w.shape, dtype)
            r = _orthogonalise(r, st.Q, j)
            r = r / jnp.linalg.norm(r, axis=-1, keepdims=True)
            return jnp.where(broke[:, None], r, w / jnp.where(broke, 1, b)[:, None])

        q_next = lax.cond(jnp.any(broke), restart, lambda _: w / b[:, None], None)
        return _LanczosState(
            Q=st.Q.at[j + 1].set(q_next),
            alpha=st.alpha.at[j].set(alpha),
            beta=st.beta.at[j].set(jnp.where(broke, 0, b)),
            resid=st.resid.at[j].set(b),
            broke=st.broke.at[j].set(broke),
            anorm=anorm,
            asym=asym,
        )

    return lax.fori_loop(start, stop, body, state)


def round_rows(rows: int) -> int:
    return -(-rows // _BLOCK) * _BLOCK


def _capacity(needed: int, current: int, num_steps: int) -> int:
    """Rows of the basis buffer for ``needed`` rows: at least double ``current``, at most ``num_steps + 1``.

    A basis of at most ``_PREALLOCATE_BYTES`` is allocated whole (one compilation of the chunk
    loop); a larger one starts at 32 rows and grows geometrically, so a run that stops after 8
    steps of a 512-step budget of 256 x 512 blocks holds 32 rows (16 MB), not 513 (269 MB);
    each capacity compiles the chunk loop once.

    At least double, rounded to the row block, never beyond ``num_steps + 1`` rounded up:

    >>> _capacity(20, 32, 500), _capacity(33, 32, 500), _capacity(200, 32, 500), _capacity(400, 256, 300)
    (32, 64, 200, 304)
    """
    if needed <= current:
        return current
    return min(round_rows(num_steps + 1), max(round_rows(needed), 2 * current))


@jax.jit
def _grow(Q, extra):
    return jnp.concatenate([Q, extra], axis=0)


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def lanczos_init(v0, num_steps, dtype, rows):
    B, n = v0.shape
    v0 = v0.astype(dtype)
    q0 = v0 / jnp.linalg.norm(v0, axis=-1, keepdims=True)
    Q = jnp.zeros((rows, B, n), dtype).at[0].set(q0)
    zeros = jnp.zeros((num_steps, B), dtype)
    return _LanczosState(Q, zeros, zeros, zeros, jnp.zeros((num_steps, B), bool), jnp.zeros((B,), dtype),
                         jnp.zeros((B,), dtype))


def ritz_batch(alpha, beta, resid, broke):
    """Ritz values (ascending), eigenvectors of ``T`` and residual estimates for ``B`` rows, float64.

    ``alpha, beta, resid, broke``: ``(B, m)``. Returns ``theta (B, m)``, ``S (B, m, m)``
    (columns are eigenvectors of ``T``) and ``est (B, m)``: the residual of Ritz pair ``i`` is
    ``|resid_m s_i[m]| + sum_{breakdowns b < m} |resid_b s_i[b]|`` (the discarded residual
    vectors at breakdowns enter by the triangle inequality). Up to ``_DENSE_RITZ_MAX`` steps
    one batched dense ``eigh`` serves all rows; beyond, ``eigh_tridiagonal`` per row.
    """
    B, m = alpha.shape
    if m == 1:
        theta, S = alpha.copy(), np.ones((B, 1, 1))
    elif m <= _DENSE_RITZ_MAX:
        T = np.zeros((B, m, m))
        idx = np.arange(m)
        T[:, idx, idx] = alpha
        T[:, idx[:-1], idx[1:]] = beta[:, :-1]
        T[:, idx[1:], idx[:-1]] = beta[:, :-1]
        theta, S = np.linalg.eigh(T)
    else:
        pairs = [scipy.linalg.eigh_tridiagonal(alpha[b], beta[b, :-1]) for b in range(B)]
        theta, S = np.stack([p[0] for p in pairs]), np.stack([p[1] for p in pairs])
    est = np.abs(resid[:, m - 1, None] * S[:, m - 1, :])
    inner = broke[:, : m - 1]
    if inner.any():
        est = est + np.einsum("bi,bik->bk", inner * np.abs(resid[:, : m - 1]), np.abs(S[:, : m - 1, :]))
    return theta, S, est


def _ritz(alpha, beta, resid, broke):
    """:func:`ritz_batch` for one row: ``(theta (m,), S (m, m), est (m,))``."""
    theta, S, est = ritz_batch(alpha[None], beta[None], resid[None], broke[None])
    return theta[0], S[0], est[0]


class LanczosResult(NamedTuple):
    """Extreme eigenpairs from Lanczos with full reorthogonalisation.

    For :func:`extreme_eigenvalues` the arrays below are as written; for
    :func:`blockwise_extreme_eigenvalues` each has an extra leading block axis
    ``(num_blocks, ...)``.

    Attributes:
      smallest: ``(k,)`` smallest Ritz values, ascending.
      largest: ``(k,)`` largest Ritz values, descending.
      smallest_residuals, largest_residuals: ``(k,)`` residual-norm estimates
        ``|A y - theta y|`` from the recurrence (``|beta_m s[m]|``, plus
        breakdown terms); an eigenvalue of ``A`` lies within this distance.
      smallest_vectors, largest_vectors: ``(k, dim)`` unit Ritz vectors (rows), or
        ``None`` unless ``return_vectors=True``.
      smallest_true_residuals, largest_true_residuals: ``(k,)`` residuals
        recomputed as ``|A y - theta y|`` with one matvec per vector, or ``None``.
      ritz_values: all Ritz values of the final ``T_m``, ascending ``(m,)``.
      num_steps: Lanczos steps taken (matvecs used, not counting true residuals).
      converged: every requested residual estimate is ``<= tol * scale`` with
        ``scale = max |theta|`` (the largest over all blocks for the blockwise solver).
      breakdown: an invariant subspace was found (``beta_j <= breakdown_tol |A|``)
        at least once; the run restarted with a random orthogonal vector.
      num_breakdowns: how many breakdowns occurred (``int``, per block when blockwise).
      tol: the relative residual tolerance used for ``converged``.
      asymmetry: largest ``|q_{j-1}^T A q_j - beta_{j-1}| / |A|_est`` seen (0 for an exactly
        symmetric operator in exact arithmetic; rounding level otherwise).
      num_checks: host-side convergence checks made (device chunks run).
    """

    smallest: np.ndarray
    largest: np.ndarray
    smallest_residuals: np.ndarray
    largest_residuals: np.ndarray
    smallest_vectors: Any
    largest_vectors: Any
    smallest_true_residuals: Any
    largest_true_residuals: Any
    ritz_values: np.ndarray
    num_steps: int
    converged: bool
    breakdown: bool
    num_breakdowns: Any
    tol: float
    asymmetry: float = 0.0
    num_checks: int = 0


def _next_chunk(history, ratio, j, check_every):
    """Steps until the next check: the observed log-decay of the worst residual ratio, extrapolated.

    ``history``: ``[(step, ratio), ...]`` of earlier checks, ``ratio = residual / (tol scale)``
    (converged at ``<= 1``). Linear extrapolation of ``log ratio`` in the step count from the
    last two checks, halved (Lanczos convergence is superlinear, so the linear prediction errs
    late); ``check_every`` when the ratio did not decrease; capped at ``check_every``.

    No history, or no progress: the longest chunk. A ratio of 100 -> 10 over 2 steps is 0.5
    decades per step; one more decade needs 2 steps, half of it is 1. One decade per step with 6
    to go: 6 steps, half is 3 (capped at ``check_every``):

    >>> _next_chunk([], 10.0, 4, 20), _next_chunk([(4, 10.0)], 20.0, 6, 20)
    (20, 20)
    >>> _next_chunk([(4, 100.0)], 10.0, 6, 20), _next_chunk([(4, 1e8)], 1e6, 6, 20), _next_chunk([(4, 1e8)], 1e6, 6, 2)
    (1, 3, 2)
    """
    if not history or not (math.isfinite(ratio) and ratio > 0):
        return check_every
    j0, r0 = history[-1]
    if not (r0 > ratio > 0) or j <= j0:
        return check_every
    rate = (math.log(r0) - math.log(ratio)) / (j - j0)
    # half the predicted distance (at least 1 step): convergence accelerates, so the linear
    # prediction from the slower past overshoots; halving approaches the stopping step from below
    return int(min(check_every, max(1, math.ceil(0.5 * math.log(ratio) / rate))))


def _convergence(theta, est, k, tol, target):
    """``(converged, ratio)`` after a check; ``ratio <= 1`` is convergence (used to predict the next check).

    ``target="blocks"``: every block's ``k`` smallest and largest Ritz pairs have residual
    estimate ``<= tol * scale`` (``scale = max |theta|`` over all blocks). ``target="union"``
    (``k = 1``): only the extremes of the union of the blocks' spectra are wanted; converged when
    the block holding the smallest (largest) Ritz value meets the tolerance and every other block
    is excluded by its interval, ``theta_b - est_b >= theta_min - tol * scale`` (``theta_b + est_b <=
    theta_max + tol * scale``). The exclusion reads a block's residual as the distance to its own
    extreme eigenvalue, which holds once its extreme Ritz value is the one converging (the usual
    case; the same caveat as every Krylov estimate, see the module docstring).
    """
    scale = max(float(np.max(np.abs(theta))), np.finfo(np.float64).tiny)
    thr = tol * scale
    if target == "blocks":
        ends = np.concatenate([est[:, :k], est[:, -k:]], axis=1)
        ratio = float(np.max(ends)) / thr
        return bool(ratio <= 1), ratio
    lo_b, hi_b = int(np.argmin(theta[:, 0])), int(np.argmax(theta[:, -1]))
    lo, hi = theta[lo_b, 0], theta[hi_b, -1]
    open_lo = theta[:, 0] - est[:, 0] < lo - thr      # blocks that might still hold a smaller eigenvalue
    open_hi = theta[:, -1] + est[:, -1] > hi + thr
    open_lo[lo_b] = open_hi[hi_b] = False
    worst = max(est[lo_b, 0], est[hi_b, -1], float(np.max(est[open_lo, 0], initial=0.0)),
                float(np.max(est[open_hi, -1], initial=0.0)))
    ok = est[lo_b, 0] <= thr and est[hi_b, -1] <= thr and not open_lo.any() and not open_hi.any()
    return bool(ok), worst / thr


def _run_lanczos(batched_matvec, v0, *, k, num_steps, tol, check_every, key, args, dtype,
                 breakdown_tol, return_vectors, early_stop, symmetry_tol, name, single, target="blocks"):
    B, n = v0.shape
    args = tuple(args)
    check_matvec_output(batched_matvec, (B, n), dtype, args, name=name, single=single)
    check_finite(v0, "v0")
    eps = float(jnp.finfo(dtype).eps)
    btol = jnp.asarray(100 * eps if breakdown_tol is None else breakdown_tol, dtype)
    tol = (1e-8 if dtype == jnp.dtype(jnp.float64) else 1e-4) if tol is None else float(tol)
    check_positive(tol, "tol")
    sym_tol = math.sqrt(eps) if symmetry_tol is None else float(symmetry_tol)
    check_positive(sym_tol, "symmetry_tol")
    j, checks, converged, history = 0, 0, False, []
    chunk = min(check_every, max(4, 2 * k))
    full_bytes = round_rows(num_steps + 1) * B * n * jnp.dtype(dtype).itemsize
    start_rows = num_steps + 1 if (full_bytes <= _PREALLOCATE_BYTES or not early_stop) else max(32, chunk + 1)
    rows = _capacity(start_rows, 0, num_steps)
    state = lanczos_init(v0, num_steps, dtype, rows)
    while j < num_steps:
        stop = min(num_steps, j + chunk) if early_stop else num_steps
        rows = _capacity(stop + 1, state.Q.shape[0], num_steps)
        if rows > state.Q.shape[0]:
            state = state._replace(Q=_grow(state.Q, jnp.zeros((rows - state.Q.shape[0],) + state.Q.shape[1:], dtype)))
        state = lanczos_chunk(batched_matvec, state, jnp.asarray(j), jnp.asarray(stop), key, btol, args)
        j, checks = stop, checks + 1
        alpha, beta, resid, broke = (np.asarray(a, np.float64).T[:, :j] for a in state[1:5])
        broke = broke.astype(bool)
        if not (np.all(np.isfinite(alpha)) and np.all(np.isfinite(resid))):
            raise FloatingPointError(
                f"Lanczos produced non-finite coefficients within the first {j} steps: the matvec "
                "returned NaN/inf (check `matvec`, its `args` and the dtype)."
            )
        asym = float(np.max(np.asarray(state.asym)))
        if not asym <= sym_tol:
            raise ValueError(
                f"`{name}` is not symmetric: |q_(j-1)^T A q_j - beta_(j-1)| / |A| reached {asym:.3g} > "
                f"symmetry_tol = {sym_tol:.3g} within {j} Lanczos steps (Lanczos needs a symmetric operator; "
                "pass a larger `symmetry_tol` only if the asymmetry is rounding)."
            )
        kk = min(k, j)
        theta, S, est = ritz_batch(alpha, beta, resid, broke)
        converged, ratio = _convergence(theta, est, kk, tol, target)
        converged = converged and kk == k
        if converged and early_stop:
            break
        chunk = (_next_chunk(history, ratio, j, check_every) if history else min(2, check_every)) if kk == k \
            else check_every
        history.append((j, ratio))
    steps = j
    smallest, largest = theta[:, :k], theta[:, ::-1][:, :k]
    s_res, l_res = est[:, :k], est[:, ::-1][:, :k]
    nbreak = broke.sum(axis=1)
    vecs = (None, None, None, None)
    if return_vectors:
        S_small, S_large = S[:, :, :k], S[:, :, ::-1][:, :, :k]       # (B, m, k)
        Qm = state.Q[:steps]                                          # (m, B, n)
        Ys = jnp.einsum("mbn,bmk->kbn", Qm, jnp.asarray(S_small, dtype), precision=_HI)
        Yl = jnp.einsum("mbn,bmk->kbn", Qm, jnp.asarray(S_large, dtype), precision=_HI)
        Ys = Ys / jnp.linalg.norm(Ys, axis=-1, keepdims=True)
        Yl = Yl / jnp.linalg.norm(Yl, axis=-1, keepdims=True)
        tr_s = _true_residuals(batched_matvec, Ys, jnp.asarray(smallest.T, dtype), args)
        tr_l = _true_residuals(batched_matvec, Yl, jnp.asarray(largest.T, dtype), args)
        vecs = (jnp.swapaxes(Ys, 0, 1), jnp.swapaxes(Yl, 0, 1), np.asarray(tr_s).T, np.asarray(tr_l).T)
    return LanczosResult(
        smallest=smallest, largest=largest, smallest_residuals=s_res, largest_residuals=l_res,
        smallest_vectors=vecs[0], largest_vectors=vecs[1],
        smallest_true_residuals=vecs[2], largest_true_residuals=vecs[3],
        ritz_values=theta, num_steps=steps, converged=bool(converged),
        breakdown=bool(nbreak.sum() > 0), num_breakdowns=nbreak, tol=tol,
        asymmetry=asym, num_checks=checks,
    )


@functools.partial(jax.jit, static_argnums=(0,))
def _true_residuals(batched_matvec, Y, theta, args):
    """``|A y - theta y|`` for ``Y`` (k, B, n), ``theta`` (k, B): one matvec per vector."""

    def one(y_t):
        y, t = y_t
        r = batched_matvec(y, *args).astype(y.dtype) - t[:, None] * y
        return jnp.linalg.norm(r, axis=-1)

    return lax.map(one, (Y, theta))


def prepare_lanczos(dim, k, num_steps, check_every, dtype, v0, key, batch):
    dim = check_int(dim, "dim")
    k = check_int(k, "k")
    dtype = as_dtype(dtype)
    num_steps = min(dim, 200) if num_steps is None else check_int(num_steps, "num_steps")
    if num_steps > dim:
        raise ValueError(f"`num_steps` must be <= dim = {dim} (the Krylov space is at most dim-dimensional); got {num_steps}.")
    if k > num_steps:
        raise ValueError(f"`k` must be <= num_steps = {num_steps}; got {k}.")
    check_every = check_int(check_every, "check_every")
    key = default_key(key)
    k0, key = jax.random.split(key)
    shape = (batch, dim)
    if v0 is None:
        v0 = jax.random.normal(k0, shape, dtype)
    else:
        v0 = jnp.asarray(v0, dtype).reshape(shape) if jnp.size(v0) == batch * dim else None
        if v0 is None:
            raise ValueError(f"`v0` must have {batch * dim} entries (shape {shape}).")
        if not bool(jnp.all(jnp.linalg.norm(v0, axis=-1) > 0)):
            raise ValueError("`v0` must be non-zero (in every block).")
    return dim, k, dtype, num_steps, check_every, v0, key


def extreme_eigenvalues(
    matvec: Callable,
    dim: int,
    *,
    k: int = 1,
    num_steps: int | None = None,
    key=None,
    args: Sequence = (),
    tol: float | None = None,
    check_every: int = 20,
    early_stop: bool = True,
    return_vectors: bool = False,
    v0: Float[Array | np.ndarray, " dim"] | None = None,
    dtype=None,
    breakdown_tol: float | None = None,
    symmetry_tol: float | None = None,
) -> LanczosResult:
    """``k`` smallest and ``k`` largest eigenvalues of a symmetric operator by Lanczos.

    Lanczos with full two-pass reorthogonalisation (see the module docstring);
    the loop runs on device in chunks (``lax.fori_loop`` under ``jit``, ``matvec``
    static) of at most ``check_every`` steps. After each chunk the tridiagonal ``T_j``
    is diagonalised on the host (float64) and the run stops once every requested
    Ritz pair has residual estimate ``|beta_j s_i[j]| <= tol * max|theta|``
    (``converged=True``), or after ``num_steps`` steps (``converged`` then says
    whether the tolerance was met).

    Breakdown (``beta_j <= breakdown_tol * |A|_est``): the Krylov space is an
    invariant subspace, so its Ritz values are exact eigenvalues. The solver
    records it (``breakdown``, ``num_breakdowns``), sets the off-diagonal of ``T``
    to zero and continues from a fresh random vector orthogonal to all previous
    Lanczos vectors, so the remaining spectrum can still be found; no division
    by ~0 takes place, so no NaN can arise from it.

    Args:
      matvec: ``matvec(v, *args) -> A v`` for ``v`` of shape ``(dim,)``; ``A`` must be
        symmetric. Static for ``jit``: reuse the same function object.
      dim: dimension of ``A``.
      k: number of extreme eigenvalues wanted at each end.
      num_steps: maximum Lanczos steps (default ``min(dim, 200)``; at most ``dim``).
      key: PRNG key for the start vector and restarts (default ``PRNGKey(0)``).
      args: extra arrays passed to ``matvec`` (pass parameters and data here).
      tol: relative residual tolerance (default ``1e-8`` float64, ``1e-4`` float32).
      check_every: the most steps between two convergence checks.
      early_stop: stop at the first check where the tolerance is met.
      return_vectors: also form Ritz vectors and their true residuals (``2k`` matvecs).
      v0: optional start vector ``(dim,)``.
      dtype: float32 or float64 (default: float64 when x64 is enabled).
      breakdown_tol: relative breakdown threshold (default ``100 * eps``).
      symmetry_tol: largest tolerated ``asymmetry`` (default ``sqrt(eps)`` of ``dtype``).

    Returns:
      :class:`LanczosResult`.

    Raises:
      ValueError: ``matvec`` returns a shape other than ``(dim,)``, or the operator is not
        symmetric (``asymmetry > symmetry_tol``).
      FloatingPointError: ``matvec`` returned NaN/inf.

    Example:
      >>> import jax.numpy as jnp
      >>> A = jnp.diag(jnp.arange(1.0, 51.0))
      >>> r = extreme_eigenvalues(lambda v, a: a @ v, 50, k=2, args=(A,))
      >>> r.smallest.round(8).tolist(), r.largest.round(8).tolist(), r.converged
      ([1.0, 2.0], [50.0, 49.0], True)
    """
    check_callable(matvec, "matvec")
    dim, k, dtype, num_steps, check_every, v0, key = prepare_lanczos(dim, k, num_steps, check_every, dtype, v0, key, 1)
    res = _run_lanczos(SingleAsBatch(matvec), v0, k=k, num_steps=num_steps, tol=tol, check_every=check_every,
                       key=key, args=args, dtype=dtype, breakdown_tol=breakdown_tol,
                       return_vectors=return_vectors, early_stop=early_stop, symmetry_tol=symmetry_tol,
                       name="matvec", single=True)
    squeeze = lambda a: None if a is None else a[0]
    return res._replace(
        smallest=res.smallest[0], largest=res.largest[0],
        smallest_residuals=res.smallest_residuals[0], largest_residuals=res.largest_residuals[0],
        smallest_vectors=squeeze(res.smallest_vectors), largest_vectors=squeeze(res.largest_vectors),
        smallest_true_residuals=squeeze(res.smallest_true_residuals),
        largest_true_residuals=squeeze(res.largest_true_residuals),
        ritz_values=res.ritz_values[0], num_breakdowns=int(res.num_breakdowns[0]),
    )


def blockwise_extreme_eigenvalues(
    block_matvec: Callable,
    num_blocks: int,
    block_dim: int,
    *,
    k: int = 1,
    num_steps: int | None = None,
    key=None,
    args: Sequence = (),
    tol: float | None = None,
    check_every: int = 20,
    early_stop: bool = True,
    return_vectors: bool = False,
    v0: Float[Array | np.ndarray, "num_blocks block_dim"] | None = None,
    dtype=None,
    breakdown_tol: float | None = None,
    symmetry_tol: float | None = None,
    target: str = "blocks",
) -> LanczosResult:
    """Extreme eigenvalues of every block of a block-diagonal operator, all at once.

    ``block_matvec(V, *args)`` maps ``V`` of shape ``(num_blocks, block_dim)`` to
    ``(A_1 V_1, ..., A_B V_B)`` (row ``b`` only sees block ``b``). The Hessian of a
    mean of per-sample terms (no BatchNorm, no in-batch negatives) with respect
    to an ``(n, d)`` batch is of this form, and its ordinary HVP *is* such a
    ``block_matvec`` -- verify the structure with :func:`block_coupling`.
    One call advances ``num_blocks`` independent Lanczos runs (each with full
    reorthogonalisation within its block) for the price of one full HVP, so
    each ``block_dim``-dimensional block gets its own Krylov space.

    The eigenvalues of the whole operator are the union over blocks:
    ``lambda_min = result.smallest[:, 0].min()``, ``lambda_max = result.largest[:, 0].max()``.
    Arguments are as in :func:`extreme_eigenvalues`; ``converged`` uses the
    global scale ``max_b max|theta_b|``, so tiny blocks are not over-resolved.
    Results carry a leading block axis.

    ``target``: ``"blocks"`` (default) converges every block's extremes; ``"union"`` (``k=1``)
    stops once the union's ``lambda_min`` and ``lambda_max`` are resolved -- the extreme
    blocks meet ``tol`` and every other block's interval ``theta_b -/+ residual_b`` lies
    beyond them (see ``_convergence``); the other blocks' values are then less accurate.
    """
    check_callable(block_matvec, "block_matvec")
    num_blocks = check_int(num_blocks, "num_blocks")
    if target not in ("blocks", "union"):
        raise ValueError(f"`target` must be 'blocks' or 'union'; got {target!r}.")
    if target == "union" and k != 1:
        raise ValueError(f"`target='union'` resolves the union's extreme eigenvalues only: `k` must be 1; got {k}.")
    dim, k, dtype, num_steps, check_every, v0, key = prepare_lanczos(
        block_dim, k, num_steps, check_every, dtype, v0, key, num_blocks)
    return _run_lanczos(block_matvec, v0, k=k, num_steps=num_steps, tol=tol, check_every=check_every,
                        key=key, args=args, dtype=dtype, breakdown_tol=breakdown_tol,
                        return_vectors=return_vectors, early_stop=early_stop, symmetry_tol=symmetry_tol,
                        name="block_matvec", single=False, target=target)
