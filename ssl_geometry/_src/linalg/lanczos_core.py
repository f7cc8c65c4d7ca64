"""The Lanczos recurrence with full reorthogonalisation: the steps on device, the Ritz problem on the host.

From ``q_1 = v_0/|v_0|``: ``w = A q_j - alpha_j q_j - beta_{j-1} q_{j-1}``, ``alpha_j = q_j^T A q_j``;
``w`` is orthogonalised against the Lanczos vectors computed so far by classical Gram-Schmidt,
once, and a second time only when the first pass cancelled more than ``1 - 1/sqrt(2)`` of its
norm (the Daniel-Gragg-Kaufman-Stewart criterion: a pass that keeps most of ``w`` leaves it
orthogonal to working precision; "twice is enough", Giraud et al. 2005), ``beta_j = |w|``,
``q_{j+1} = w / beta_j``. After ``m`` steps ``A Q_m = Q_m T_m + beta_m q_{m+1} e_m^T``; the
eigenpairs ``(theta_i, s_i)`` of the tridiagonal ``T_m`` give Ritz pairs with residual
``|A y_i - theta_i y_i| = |beta_m s_i[m]|``, and for symmetric ``A`` an eigenvalue lies within
that distance of ``theta_i``.

The steps between two host checks are dispatched without waiting (:func:`advance`: on an
accelerator one device loop over the product ``A q_j``, the recurrence and the write of ``q_{j+1}``
into the basis; on the CPU two calls a step), so the device never waits for the host between
products, and a run costs its products plus ``4 (j + 1) B n`` multiply-adds of reorthogonalisation at step
``j`` (``B`` blocks of dimension ``n``; only the filled rows of the basis are visited, in blocks of
:data:`BLOCK` rows), doubled at the steps that need the second pass.

Norms are taken of ``w / max|w|`` (:func:`scaled_norm`), so a finite operator of any norm the
dtype holds (``|A| = 1e30`` in float32) cannot overflow them.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg
from jax import lax
from jaxtyping import Array

__all__: list[str] = []

BLOCK = 8  # rows of the basis visited per reorthogonalisation block
_DENSE_RITZ_MAX = 48  # up to this many steps the Ritz problem is one batched dense eigh
_HI = lax.Precision.HIGHEST  # reorthogonalisation must not run in TF32/bf16 on accelerators
_DGKS = 2**-0.5  # a second Gram-Schmidt pass when the first keeps less than this fraction of |w|


class LanczosState(NamedTuple):
    Q: Array  # (rows, B, n) Lanczos vectors (rows a multiple of BLOCK, grown on demand); unused rows zero
    alpha: Array  # (m, B) diagonal of T
    beta: Array  # (m, B) off-diagonal of T (0 where a breakdown restarted)
    resid: Array  # (m, B) |w_j| after reorthogonalisation (the true beta, kept at breakdowns)
    broke: Array  # (m, B) bool: breakdown at step j
    anorm: Array  # (B,) running estimate of |A| (max sqrt(alpha^2 + beta^2 + beta_prev^2))
    asym: Array  # (B,) max_j |q_{j-1}^T A q_j - beta_{j-1}| / anorm (symmetry defect)
    bad_product: Array  # (B,) bool: the matvec returned a non-finite value at some step
    second_passes: Array  # () int: steps that needed the second Gram-Schmidt pass


def scaled_norm(w, axis=-1):
    """``|w|`` along ``axis`` computed as ``s |w / s|`` with ``s = max|w|``: no overflow, no underflow.

    >>> x = jnp.array([3e30, 4e30], jnp.float32)
    >>> float(jnp.linalg.norm(x)), round(float(scaled_norm(x)) / 1e30, 5)
    (inf, 5.0)
    """
    s = jnp.max(jnp.abs(w), axis=axis, keepdims=True)
    s_safe = jnp.where((s > 0) & jnp.isfinite(s), s, 1)
    return jnp.squeeze(s_safe, axis) * jnp.linalg.norm(w / s_safe, axis=axis)


def _hypot3(a, b, c):
    m = jnp.maximum(jnp.maximum(jnp.abs(a), jnp.abs(b)), jnp.abs(c))
    m_safe = jnp.where(m > 0, m, 1)
    return m * jnp.sqrt((a / m_safe) ** 2 + (b / m_safe) ** 2 + (c / m_safe) ** 2)


def _gram_schmidt(w, Q, j):
    """One pass of classical Gram-Schmidt of rows of ``w`` (B, n) against rows ``0..j`` of ``Q``.

    ``Q`` is (mq, B, n) with rows beyond ``j`` zero; it is visited in blocks of ``BLOCK`` rows,
    only up to the block holding row ``j`` (a dynamic trip count), so the cost grows with the
    filled part, not with the capacity. Each block is contracted batch-first (``(B, BLOCK, n)``),
    the layout the CPU and GPU matrix-vector kernels take without a transposed copy.
    """

    def body(c, acc):
        Qc = jnp.swapaxes(lax.dynamic_slice_in_dim(Q, c * BLOCK, BLOCK, axis=0), 0, 1)
        coef = jnp.einsum("bmn,bn->bm", Qc, w, precision=_HI)
        return acc + jnp.einsum("bm,bmn->bn", coef, Qc, precision=_HI)

    return w - lax.fori_loop(0, j // BLOCK + 1, body, jnp.zeros_like(w))


def _gram_schmidt_all(w, Q, j):
    """One pass of classical Gram-Schmidt of ``w`` (B, n) against every row of ``Q`` (rows past ``j`` are zero and
    contribute nothing): two contractions, whatever ``j``. On an accelerator, where reading the whole basis
    costs microseconds and each kernel of :func:`_gram_schmidt`'s loop a launch, this is the cheaper pass."""
    del j
    coef = jnp.einsum("mbn,bn->bm", Q, w, precision=_HI)
    return w - jnp.einsum("bm,mbn->bn", coef, Q, precision=_HI)


def _recurrence(Q, st: LanczosState, w, j, key, breakdown_tol, gram_schmidt=_gram_schmidt):
    """The recurrence of step ``j`` from the product ``w = A q_j``: ``(st with T's column j, q_{j+1})``.

    ``st`` comes without its basis ``Q``, which is only read here (the caller writes ``q_{j+1}`` into it
    afterwards). ``gram_schmidt`` is the reorthogonalisation pass (:func:`_gram_schmidt` or
    :func:`_gram_schmidt_all`).
    """
    dtype = Q.dtype
    q = Q[j]
    bad = ~jnp.all(jnp.isfinite(w), axis=-1)
    alpha = jnp.sum(q * w, axis=-1)
    jp = jnp.maximum(j - 1, 0)
    beta_prev = jnp.where(j > 0, st.beta[jp], 0)
    q_prev = Q[jp]
    cross = jnp.where(j > 0, jnp.sum(q_prev * w, axis=-1), 0)  # = beta_prev when A is symmetric
    w = w - alpha[:, None] * q - beta_prev[:, None] * q_prev
    n0 = scaled_norm(w)
    w = gram_schmidt(w, Q, j)
    again = jnp.any(scaled_norm(w) < _DGKS * n0)
    w = lax.cond(again, lambda u: gram_schmidt(u, Q, j), lambda u: u, w)
    b = scaled_norm(w)
    anorm = jnp.maximum(st.anorm, _hypot3(alpha, b, beta_prev))
    asym = jnp.maximum(st.asym, jnp.abs(cross - beta_prev) / jnp.where(anorm > 0, anorm, 1))
    broke = b <= breakdown_tol * anorm

    def restart(_):
        # breakdown: invariant subspace found; continue from a random vector orthogonal
        # to all previous Lanczos vectors (T gets a zero off-diagonal). Drawn only here.
        r = jax.random.normal(jax.random.fold_in(key, j + 1), w.shape, dtype)
        r = gram_schmidt(gram_schmidt(r, Q, j), Q, j)
        r = r / scaled_norm(r)[:, None]
        return jnp.where(broke[:, None], r, w / jnp.where(broke, 1, b)[:, None])

    q_next = lax.cond(jnp.any(broke), restart, lambda _: w / b[:, None], None)
    new = LanczosState(
        Q=None,  # type: ignore[arg-type]  # the state without its basis (Q travels beside it)
        alpha=st.alpha.at[j].set(alpha),
        beta=st.beta.at[j].set(jnp.where(broke, 0, b)),
        resid=st.resid.at[j].set(b),
        broke=st.broke.at[j].set(broke),
        anorm=anorm,
        asym=asym,
        bad_product=st.bad_product | bad,
        second_passes=st.second_passes + again.astype(st.second_passes.dtype),
    )
    return new, q_next


@functools.partial(jax.jit, static_argnums=(0,), donate_argnums=(1,))
def _steps(batched_matvec, state: LanczosState, q, start, stop, key, breakdown_tol, args):
    """Steps ``start <= j < stop`` as one device loop: the product ``A q_j``, the recurrence, ``q_{j+1}`` into the
    (donated) basis. Compiled once per matvec, shapes and basis capacity; ``start`` and ``stop`` are traced."""

    def body(j, carry):
        st, qj = carry
        w = batched_matvec(qj, *args).astype(qj.dtype)
        small, q_next = _recurrence(st.Q, st._replace(Q=None), w, j, key, breakdown_tol, _gram_schmidt_all)
        return small._replace(Q=lax.dynamic_update_index_in_dim(st.Q, q_next, j + 1, 0)), q_next

    return lax.fori_loop(start, stop, body, (state, q))


def advance(
    batched_matvec,
    state: LanczosState,
    q,
    start: int,
    stop: int,
    key,
    breakdown_tol,
    args,
    *,
    device_loop: bool | None = None,
):
    """Lanczos steps ``start <= j < stop``: ``(state, q_stop)``. Dispatches only; nothing waits here.

    On an accelerator the steps run as one device loop (:func:`_steps`): a per-step dispatch from the
    host costs there about as much as a small network's Hessian-vector product, so the device would
    otherwise wait on the host between products. On the CPU the host and the "device" share the cores
    and a dispatch costs microseconds, while XLA:CPU copies a basis that is read and written in the same
    loop iteration (two copies of the whole basis per step, measured); there each step is two calls, the
    product (:func:`_product`, compiled once per matvec and shapes) and the update (:func:`_update`,
    compiled per basis capacity), which reads the basis and writes ``q_{j+1}`` into it in place. Both run
    the same recurrence (:func:`_recurrence`). ``device_loop`` forces one or the other (``None``: by platform).
    """
    if stop <= start:
        return state, q
    if device_loop is None:
        device_loop = next(iter(state.Q.devices())).platform != "cpu"
    if device_loop:
        return _steps(
            batched_matvec,
            state,
            q,
            jnp.asarray(start, jnp.int32),
            jnp.asarray(stop, jnp.int32),
            key,
            breakdown_tol,
            args,
        )
    for j in range(start, stop):
        w = _product(batched_matvec, q, args)
        small, q = _recurrence_call(state.Q, state._replace(Q=None), w, jnp.asarray(j), key, breakdown_tol)  # type: ignore[arg-type]  # the state without its basis (Q travels beside it)
        state = small._replace(Q=_set_row(state.Q, j + 1, q))
    return state, q


@functools.partial(jax.jit, static_argnums=(0,))
def _product(batched_matvec, V, args):
    """``A V`` for the ``(B, n)`` block of current Lanczos vectors, in their dtype."""
    return batched_matvec(V, *args).astype(V.dtype)


_recurrence_call = jax.jit(_recurrence)


@functools.partial(jax.jit, donate_argnums=(0,))
def _set_row(Q, i, q):
    return Q.at[i].set(q)


def round_rows(rows: int) -> int:
    return -(-rows // BLOCK) * BLOCK


def capacity(needed: int, current: int, num_steps: int) -> int:
    """Rows of the basis buffer for ``needed`` rows: at least double ``current``, at most ``num_steps + 1``.

    The basis starts small and grows geometrically, so a run that stops after 8 steps of a
    512-step budget of 256 x 512 blocks holds 32 rows (16 MB), not 513 (269 MB); each capacity
    compiles the update step once (the product is compiled once whatever the capacity).

    At least double, rounded to the row block, never beyond ``num_steps + 1`` rounded up:

    >>> capacity(20, 32, 500), capacity(33, 32, 500), capacity(200, 32, 500), capacity(400, 256, 300)
    (32, 64, 200, 304)
    """
    if needed <= current:
        return current
    return min(round_rows(num_steps + 1), max(round_rows(needed), 2 * current))


@jax.jit
def _grow(Q, extra):
    return jnp.concatenate([Q, extra], axis=0)


def ensure_capacity(state: LanczosState, rows: int) -> LanczosState:
    have = state.Q.shape[0]
    if rows <= have:
        return state
    extra = jnp.zeros((rows - have,) + state.Q.shape[1:], state.Q.dtype)
    return state._replace(Q=_grow(state.Q, extra))


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def lanczos_init(v0, num_steps, dtype, rows):
    """``(state, q_0)`` with ``q_0 = v_0 / |v_0|`` row by row (scaled norms) in a basis of ``rows`` rows."""
    B, n = v0.shape
    v0 = v0.astype(dtype)
    q0 = v0 / scaled_norm(v0)[:, None]
    Q = jnp.zeros((rows, B, n), dtype).at[0].set(q0)
    zeros = jnp.zeros((num_steps, B), dtype)
    state = LanczosState(
        Q,
        zeros,
        zeros,
        zeros,
        jnp.zeros((num_steps, B), bool),
        jnp.zeros((B,), dtype),
        jnp.zeros((B,), dtype),
        jnp.zeros((B,), bool),
        jnp.zeros((), jnp.int32),
    )
    return state, q0


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


def to_host(state: LanczosState) -> LanczosState:
    """The state without its basis, every array on the host, fetched in one transfer (a check reads them all)."""
    return jax.device_get(state._replace(Q=None))  # type: ignore[arg-type]  # the state without its basis (Q travels beside it)


def coefficients(state: LanczosState, j: int):
    """``(alpha, beta, resid, broke)`` of the first ``j`` steps on the host, ``(B, j)`` float64 (``broke`` bool)."""
    alpha, beta, resid, broke = (np.asarray(a, np.float64)[:j].T for a in state[1:5])  # sliced on the host
    return alpha, beta, resid, broke.astype(bool)


def gap_error_bounds(theta, est):
    """Eigenvalue error bounds ``min(r_i, r_i^2 / delta_i)`` of Ritz values ``theta (B, m)`` (ascending).

    ``est (B, m)`` are the residual norms ``r_i = |A y_i - theta_i y_i|`` (:func:`ritz_batch`). The
    other Ritz values' intervals ``[theta_j - r_j, theta_j + r_j]`` each hold an eigenvalue; ``delta_i``
    is the distance from ``theta_i`` to the nearest of them,
    ``delta_i = min(min_{j > i} (theta_j - r_j) - theta_i, theta_i - max_{j < i} (theta_j + r_j))``
    (``+inf`` past the ends; a lone Ritz value, ``m = 1``, has no neighbour to measure a gap to, so its
    bound is ``r``). When no other eigenvalue lies within ``delta_i`` of ``theta_i`` and
    ``r_i < delta_i``, the Kato-Temple inequality bounds the distance from ``theta_i`` (a Rayleigh
    quotient) to its eigenvalue by ``r_i^2 / delta_i``; ``r_i`` bounds it always. So the bound is
    ``r_i`` wherever ``delta_i <= r_i``. Like every Krylov estimate it relies on the other
    intervals holding the neighbouring eigenvalues (an eigenvalue no Ritz value has approached
    is invisible).

    >>> import numpy as np
    >>> gap_error_bounds(np.array([[0.0, 1.0, 3.0]]), np.array([[0.1, 0.5, 0.2]])).round(6).tolist()
    [[0.02, 0.277778, 0.026667]]
    >>> gap_error_bounds(np.array([[0.0, 1.0, 3.0]]), np.array([[0.1, 0.5, 2.5]])).round(6).tolist()  # 3's interval covers 1
    [[0.02, 0.5, 2.5]]
    >>> gap_error_bounds(np.array([[1.0]]), np.array([[0.3]])).tolist()  # one step: no gap known
    [[0.3]]
    """
    theta, est = np.asarray(theta, np.float64), np.asarray(est, np.float64)
    lower, upper = theta - est, theta + est
    inf = np.full(theta.shape[:-1] + (1,), np.inf)
    above = np.concatenate([np.minimum.accumulate(lower[..., :0:-1], axis=-1)[..., ::-1], inf], axis=-1)
    below = np.concatenate([-inf, np.maximum.accumulate(upper[..., :-1], axis=-1)], axis=-1)
    delta = np.minimum(above - theta, theta - below)
    with np.errstate(divide="ignore", invalid="ignore"):
        quad = np.where(np.isfinite(delta) & (delta > est), est**2 / np.where(delta > 0, delta, 1.0), np.inf)
    return np.minimum(est, quad)
