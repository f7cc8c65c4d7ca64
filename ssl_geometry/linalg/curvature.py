"""Curvature engine: dense Hessians, Hessian-vector products, Krylov eigensolvers,
trace and spectral-density estimators, and floating-point certificates.

Every tool takes *functions and pytrees*, never modules. A linear operator is a
``matvec(v, *args) -> A v`` callable on flat vectors ``(dim,)``; the arrays it
needs (parameters, a batch) are passed through ``args`` so that the jitted loops
receive them as arguments instead of closing over them (closed-over arrays
become XLA constants; DESIGN.md s.5). ``matvec`` itself is a *static* argument
of the jitted loops: pass the same function object between calls to reuse the
compiled loop (a fresh ``lambda`` per call recompiles).

Contents
--------
* :func:`hessian` -- dense ``(P, P)`` Hessian of a scalar ``f(params)`` over a
  pytree, in :func:`jax.flatten_util.ravel_pytree` order (forward-over-reverse,
  ``jacfwd(grad(f))``).
* :func:`hvp` / :func:`flat_hvp` -- ``H v = d/dt grad f(params + t v)|_{t=0}``
  by ``jax.jvp`` of ``jax.grad`` (forward-over-reverse), on pytrees or as a flat
  matvec.
* :func:`block_diagonal_hessian` -- the ``(n, d, d)`` diagonal blocks of the
  Hessian of ``f(x)``, ``x`` of shape ``(n, d)``, by probing with ``e_j`` placed
  in every block at once (``d`` HVPs), plus :func:`block_coupling` to *verify*
  the block structure numerically.
* :func:`extreme_eigenvalues` / :func:`blockwise_extreme_eigenvalues` --
  Lanczos with full two-pass reorthogonalisation, residual estimates
  ``|beta_m s_m|`` and (with vectors) true residuals ``|A y - theta y|``,
  explicit breakdown handling, early stop on a residual tolerance.
* :func:`slq_density` -- stochastic Lanczos quadrature spectral density
  (Ubaru, Chen & Saad 2017; Ghorbani, Krishnan & Xiao 2019).
* :func:`hutchinson_trace`, :func:`hutchpp_trace` -- Hutchinson (1989) and
  Hutch++ (Meyer, Musco, Musco & Woodruff 2021) trace estimators.
* :func:`negative_curvature_witness`, :func:`psd_certificate` -- certificates in
  the spirit of computer-assisted proof: a Rayleigh quotient with a rigorous
  floating-point error bound, and a shifted float64 Cholesky (Rump 2006).
* :func:`paper_power_iteration` -- the paper's "20-step shifted power iteration"
  (float32), kept as the baseline whose weakness we measure (DESIGN.md s.4).

Lanczos in one paragraph: from ``q_1 = v_0/|v_0|``, ``w = A q_j - alpha_j q_j -
beta_{j-1} q_{j-1}`` with ``alpha_j = q_j^T A q_j``; ``w`` is then orthogonalised
twice against all previous ``q_i`` (classical Gram-Schmidt applied twice,
"twice is enough", Giraud et al. 2005), ``beta_j = |w|``, ``q_{j+1} = w/beta_j``.
After ``m`` steps ``A Q_m = Q_m T_m + beta_m q_{m+1} e_m^T`` with ``T_m``
tridiagonal; the eigenpairs ``(theta_i, s_i)`` of ``T_m`` give Ritz pairs
``(theta_i, y_i = Q_m s_i)`` with residual ``|A y_i - theta_i y_i| = |beta_m
s_i[m]|``. For symmetric ``A`` some eigenvalue lies within the residual norm of
``theta_i`` (and within ``res^2 / gap`` when the gap to the rest of the spectrum
is known). A small residual does **not** by itself prove that ``theta_i`` is the
*extreme* eigenvalue (an eigenvector orthogonal to ``v_0`` is invisible to
Krylov methods); random starting vectors make that event probability zero.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg
from jax import lax
from jax.flatten_util import ravel_pytree

from ssl_geometry._checks import check_finite, check_positive, check_rank

Array = jax.Array


# ----------------------------------------------------------------------------- helpers


def _default_float():
    return jnp.float64 if jax.config.read("jax_enable_x64") else jnp.float32


def _as_dtype(dtype):
    dtype = _default_float() if dtype is None else jnp.dtype(dtype)
    if dtype not in (jnp.dtype(jnp.float32), jnp.dtype(jnp.float64)):
        raise ValueError(f"`dtype` must be float32 or float64; got {dtype}.")
    if dtype == jnp.dtype(jnp.float64) and not jax.config.read("jax_enable_x64"):
        raise ValueError("`dtype=float64` needs `jax.config.update('jax_enable_x64', True)`.")
    return jnp.dtype(dtype)


def _check_int(value, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"`{name}` must be an int >= {minimum}; got {value!r}.")
    return int(value)


def _check_callable(fn, name: str) -> None:
    if not callable(fn):
        raise TypeError(f"`{name}` must be callable (a matvec `v, *args -> A v`); got {type(fn).__name__}.")


def _key(key):
    return jax.random.PRNGKey(0) if key is None else key


def _check_scalar_fn(f, *example_args) -> None:
    out = jax.eval_shape(f, *example_args)
    if not hasattr(out, "shape") or out.shape != ():
        shape = getattr(out, "shape", type(out).__name__)
        raise ValueError(f"`f` must return a scalar; got output of shape {shape}.")


@dataclasses.dataclass(frozen=True)
class _SingleAsBatch:
    """``(1, n) -> (1, n)`` view of a single-vector matvec (hashable: jit-static)."""

    fn: Callable

    def __call__(self, V, *args):
        return self.fn(V[0], *args)[None]


@dataclasses.dataclass(frozen=True)
class _Vmapped:
    """``(B, n) -> (B, n)``: a single-vector matvec vmapped over rows (hashable)."""

    fn: Callable

    def __call__(self, V, *args):
        return jax.vmap(lambda v: self.fn(v, *args))(V)


# ----------------------------------------------------------------------------- Hessians and HVPs


def hessian(f: Callable, params, *f_args) -> Array:
    """Dense Hessian ``H_ij = d^2 f / dx_i dx_j`` of a scalar ``f(params, *f_args)``.

    ``x`` is ``ravel_pytree(params)[0]`` (the order of
    :func:`jax.flatten_util.ravel_pytree`), so the result is ``(P, P)`` with
    ``P`` the number of scalars in ``params``. Computed forward-over-reverse,
    ``jax.jacfwd(jax.grad(f))``: ``P`` Hessian-vector products in one vmapped pass.

    Example:
      >>> import jax.numpy as jnp
      >>> f = lambda p: p["a"] ** 2 * p["b"] + 3.0 * p["b"]
      >>> hessian(f, {"a": jnp.array(2.0), "b": jnp.array(5.0)}).tolist()
      [[10.0, 4.0], [4.0, 0.0]]
    """
    flat, unravel = ravel_pytree(params)
    if flat.size == 0:
        raise ValueError("`params` holds no array leaves; the Hessian is empty.")

    def g(x):
        return f(unravel(x), *f_args)

    _check_scalar_fn(g, flat)
    return jax.jacfwd(jax.grad(g))(flat)


def hvp(f: Callable, params, v, *f_args):
    """Hessian-vector product over pytrees: ``H(params) v`` for scalar ``f(params, *f_args)``.

    ``H v = d/dt grad f(params + t v) |_{t=0}``, evaluated forward-over-reverse
    as ``jax.jvp(jax.grad(f), (params,), (v,))[1]`` (one gradient's cost times a
    small constant, no ``(P, P)`` matrix). ``v`` must have the tree structure and
    leaf shapes of ``params``; the result has them too.

    Example:
      >>> import jax.numpy as jnp
      >>> f = lambda p: 0.5 * jnp.sum(p["w"] ** 2) * 3.0
      >>> hvp(f, {"w": jnp.ones(2)}, {"w": jnp.array([1.0, -2.0])})["w"]
      Array([ 3., -6.], dtype=float64)
    """
    s_p, s_v = jax.tree_util.tree_structure(params), jax.tree_util.tree_structure(v)
    if s_p != s_v:
        raise ValueError(f"`v` must have the tree structure of `params`; got {s_v} and {s_p}.")
    for a, b in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(v)):
        if jnp.shape(a) != jnp.shape(b):
            raise ValueError(f"`v` leaf shape {jnp.shape(b)} differs from `params` leaf shape {jnp.shape(a)}.")
    _check_scalar_fn(lambda p: f(p, *f_args), params)
    return jax.jvp(lambda p: jax.grad(f)(p, *f_args), (params,), (v,))[1]


def flat_hvp(f: Callable, params) -> tuple[Callable, Array]:
    """Flat-vector HVP usable as a Lanczos matvec: returns ``(matvec, x0)``.

    ``x0, unravel = ravel_pytree(params)``; ``matvec(v, x, *f_args) = H(x) v``
    where ``H(x)`` is the Hessian of ``x -> f(unravel(x), *f_args)``. Pass the
    point and data as ``args`` so jitted solvers do not close over them::

        matvec, x0 = flat_hvp(loss, params)
        res = extreme_eigenvalues(matvec, x0.size, args=(x0, batch))

    The returned ``matvec`` is cached per ``(f, tree structure)`` so repeated
    calls reuse compiled solver loops.

    Example:
      >>> import jax.numpy as jnp
      >>> mv, x0 = flat_hvp(lambda p: jnp.sum(p["a"] ** 3), {"a": jnp.array([1.0, 2.0])})
      >>> mv(jnp.array([1.0, 1.0]), x0)   # 6 x elementwise
      Array([ 6., 12.], dtype=float64)
    """
    flat, unravel = ravel_pytree(params)
    return _flat_hvp_cached(f, jax.tree_util.tree_structure(params), unravel), flat


@functools.lru_cache(maxsize=64)
def _flat_hvp_cached(f, treedef, unravel):
    del treedef  # part of the cache key only

    def matvec(v, x, *f_args):
        g = lambda y: f(unravel(y), *f_args)
        return jax.jvp(jax.grad(g), (x,), (v.astype(x.dtype),))[1]

    return matvec


def block_diagonal_hessian(f: Callable, x: Array, *f_args, chunk_size: int | None = None) -> Array:
    """Diagonal blocks ``H_i = d^2 f / dx_i dx_i`` (``(n, d, d)``) of the Hessian of ``f(x)``.

    ``x`` is ``(n, d)``. Probing: the HVP with ``V = 1_n e_j^T`` (``e_j`` placed in
    every row) returns row ``i`` equal to ``sum_k H_{ik} e_j``; when the Hessian is
    block-diagonal (``H_{ik} = 0`` for ``i != k``, e.g. a mean of per-sample terms
    without batch coupling) this is column ``j`` of every block at once, so ``d``
    HVPs give all ``n`` blocks. **The result is the exact diagonal blocks only if
    the Hessian is block-diagonal**: check with :func:`block_coupling` first.
    ``chunk_size`` bounds how many probes run at once (``lax.map`` batch size).
    """
    check_rank(x, "x", 2)
    _check_scalar_fn(lambda y: f(y, *f_args), x)
    n, d = x.shape
    grad_f = jax.grad(lambda y: f(y, *f_args))

    def column(j):
        v = jnp.zeros((n, d), x.dtype).at[:, j].set(1)
        return jax.jvp(grad_f, (x,), (v,))[1]  # (n, d): column j of each block

    cols = lax.map(column, jnp.arange(d), batch_size=chunk_size)  # (d, n, d)
    blocks = jnp.transpose(cols, (1, 2, 0))  # blocks[i, :, j] = H_i e_j
    return 0.5 * (blocks + jnp.swapaxes(blocks, 1, 2))


def block_coupling(f: Callable, x: Array, *f_args, key=None, num_probes: int = 4) -> float:
    """Largest relative off-block response: ``max |(H v)_k| / max |H v|`` over ``k != i``.

    Each probe draws ``v`` supported on one random row ``i`` of ``x`` (shape
    ``(n, d)``) and measures the Hessian's response on the other rows. An exactly
    block-diagonal Hessian gives ``0`` (up to rounding); use this to *verify*
    block structure before :func:`block_diagonal_hessian` or
    :func:`blockwise_extreme_eigenvalues`.
    """
    check_rank(x, "x", 2)
    n_probes = _check_int(num_probes, "num_probes")
    n, d = x.shape
    if n < 2:
        raise ValueError(f"`x` needs at least 2 rows to test block coupling; got {n}.")
    key = _key(key)
    grad_f = jax.grad(lambda y: f(y, *f_args))
    worst = 0.0
    for p in range(n_probes):
        k1, k2 = jax.random.split(jax.random.fold_in(key, p))
        i = int(jax.random.randint(k1, (), 0, n))
        v = jnp.zeros((n, d), x.dtype).at[i].set(jax.random.normal(k2, (d,), x.dtype))
        hv = np.asarray(jax.jvp(grad_f, (x,), (v,))[1])
        scale = np.max(np.abs(hv))
        if not np.isfinite(scale):
            raise FloatingPointError("the Hessian-vector product in `block_coupling` is not finite.")
        if scale == 0:
            continue
        off = np.delete(hv, i, axis=0)
        worst = max(worst, float(np.max(np.abs(off)) / scale))
    return worst


# ----------------------------------------------------------------------------- Lanczos core


class _LanczosState(NamedTuple):
    Q: Array            # (m + 1, B, n) Lanczos vectors, unused rows zero
    alpha: Array        # (m, B) diagonal of T
    beta: Array         # (m, B) off-diagonal of T (0 where a breakdown restarted)
    resid: Array        # (m, B) |w_j| after reorthogonalisation (the true beta, kept at breakdowns)
    broke: Array        # (m, B) bool: breakdown at step j
    anorm: Array        # (B,) running estimate of |A| (max sqrt(alpha^2 + beta^2 + beta_prev^2))


def _orthogonalise(w, Q):
    """Two passes of classical Gram-Schmidt of rows of ``w`` (B, n) against ``Q`` (m, B, n)."""
    for _ in range(2):
        coef = jnp.einsum("mbn,bn->mb", Q, w)
        w = w - jnp.einsum("mb,mbn->bn", coef, Q)
    return w


@functools.partial(jax.jit, static_argnums=(0,))
def _lanczos_chunk(matvec, state: _LanczosState, start, stop, key, breakdown_tol, args):
    """Run Lanczos steps ``start <= j < stop`` on device (``lax.fori_loop``)."""
    dtype = state.Q.dtype

    def body(j, st: _LanczosState):
        q = st.Q[j]
        w = matvec(q, *args).astype(dtype)
        alpha = jnp.sum(q * w, axis=-1)
        beta_prev = jnp.where(j > 0, st.beta[jnp.maximum(j - 1, 0)], 0)
        q_prev = st.Q[jnp.maximum(j - 1, 0)]
        w = w - alpha[:, None] * q - beta_prev[:, None] * q_prev
        w = _orthogonalise(w, st.Q)
        b = jnp.linalg.norm(w, axis=-1)
        anorm = jnp.maximum(st.anorm, jnp.sqrt(alpha**2 + b**2 + beta_prev**2))
        broke = b <= breakdown_tol * anorm
        # breakdown: invariant subspace found; restart with a random vector
        # orthogonal to all previous Lanczos vectors (T gets a zero off-diagonal).
        r = jax.random.normal(jax.random.fold_in(key, j + 1), w.shape, dtype)
        r = _orthogonalise(r, st.Q)
        r = r / jnp.linalg.norm(r, axis=-1, keepdims=True)
        q_next = jnp.where(broke[:, None], r, w / jnp.where(broke, 1, b)[:, None])
        return _LanczosState(
            Q=st.Q.at[j + 1].set(q_next),
            alpha=st.alpha.at[j].set(alpha),
            beta=st.beta.at[j].set(jnp.where(broke, 0, b)),
            resid=st.resid.at[j].set(b),
            broke=st.broke.at[j].set(broke),
            anorm=anorm,
        )

    return lax.fori_loop(start, stop, body, state)


def _lanczos_init(v0, num_steps, dtype):
    B, n = v0.shape
    v0 = v0.astype(dtype)
    q0 = v0 / jnp.linalg.norm(v0, axis=-1, keepdims=True)
    Q = jnp.zeros((num_steps + 1, B, n), dtype).at[0].set(q0)
    zeros = jnp.zeros((num_steps, B), dtype)
    return _LanczosState(Q, zeros, zeros, zeros, jnp.zeros((num_steps, B), bool), jnp.zeros((B,), dtype))


def _ritz(alpha, beta, resid, broke):
    """Ritz values (ascending), eigenvectors of T and residual estimates, on host in float64.

    ``alpha, beta, resid, broke``: (m,) for one row. Residual of Ritz pair ``i``:
    ``|resid_m s_i[m]| + sum_{breakdowns b < m} |resid_b s_i[b]|`` (the discarded
    residual vectors at breakdowns enter by the triangle inequality).
    """
    m = alpha.shape[0]
    if m == 1:
        theta, S = alpha.copy(), np.ones((1, 1))
    else:
        theta, S = scipy.linalg.eigh_tridiagonal(alpha, beta[:-1])
    est = np.abs(resid[m - 1] * S[m - 1, :])
    inner = np.nonzero(broke[: m - 1])[0]
    if inner.size:
        est = est + np.abs(resid[inner, None] * S[inner, :]).sum(axis=0)
    return theta, S, est


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


def _run_lanczos(batched_matvec, v0, *, k, num_steps, tol, check_every, key, args, dtype,
                 breakdown_tol, return_vectors, early_stop):
    B, n = v0.shape
    state = _lanczos_init(v0, num_steps, dtype)
    check_finite(state.Q[0], "v0 (normalised)")
    eps = float(jnp.finfo(dtype).eps)
    btol = jnp.asarray(100 * eps if breakdown_tol is None else breakdown_tol, dtype)
    tol = (1e-8 if dtype == jnp.dtype(jnp.float64) else 1e-4) if tol is None else float(tol)
    check_positive(tol, "tol")
    args = tuple(args)
    j = 0
    converged = False
    while j < num_steps:
        stop = min(num_steps, j + check_every) if early_stop else num_steps
        state = _lanczos_chunk(batched_matvec, state, jnp.asarray(j), jnp.asarray(stop), key, btol, args)
        j = stop
        alpha, beta, resid, broke = (np.asarray(a[:j], np.float64).T for a in state[1:5])
        broke = broke.astype(bool)
        if not (np.all(np.isfinite(alpha)) and np.all(np.isfinite(resid))):
            raise FloatingPointError(
                f"Lanczos produced non-finite coefficients within the first {j} steps: the matvec "
                "returned NaN/inf (check `matvec`, its `args` and the dtype)."
            )
        kk = min(k, j)
        rows = [_ritz(alpha[b], beta[b], resid[b], broke[b]) for b in range(B)]
        scale = max(max(np.max(np.abs(r[0])) for r in rows), np.finfo(np.float64).tiny)
        converged = all(
            np.all(r[2][:kk] <= tol * scale) and np.all(r[2][-kk:] <= tol * scale) for r in rows
        ) and kk == k
        if converged and early_stop:
            break
    steps = j
    smallest = np.stack([r[0][:k] for r in rows])
    largest = np.stack([r[0][::-1][:k] for r in rows])
    s_res = np.stack([r[2][:k] for r in rows])
    l_res = np.stack([r[2][::-1][:k] for r in rows])
    ritz = np.stack([r[0] for r in rows])
    nbreak = broke.sum(axis=1)
    vecs = (None, None, None, None)
    if return_vectors:
        S_small = np.stack([r[1][:, :k] for r in rows])           # (B, m, k)
        S_large = np.stack([r[1][:, ::-1][:, :k] for r in rows])
        Qm = state.Q[:steps]                                      # (m, B, n)
        Ys = jnp.einsum("mbn,bmk->kbn", Qm, jnp.asarray(S_small, dtype))
        Yl = jnp.einsum("mbn,bmk->kbn", Qm, jnp.asarray(S_large, dtype))
        Ys = Ys / jnp.linalg.norm(Ys, axis=-1, keepdims=True)
        Yl = Yl / jnp.linalg.norm(Yl, axis=-1, keepdims=True)
        tr_s = _true_residuals(batched_matvec, Ys, jnp.asarray(smallest.T, dtype), args)
        tr_l = _true_residuals(batched_matvec, Yl, jnp.asarray(largest.T, dtype), args)
        vecs = (jnp.swapaxes(Ys, 0, 1), jnp.swapaxes(Yl, 0, 1), np.asarray(tr_s).T, np.asarray(tr_l).T)
    return LanczosResult(
        smallest=smallest, largest=largest, smallest_residuals=s_res, largest_residuals=l_res,
        smallest_vectors=vecs[0], largest_vectors=vecs[1],
        smallest_true_residuals=vecs[2], largest_true_residuals=vecs[3],
        ritz_values=ritz, num_steps=steps, converged=bool(converged),
        breakdown=bool(nbreak.sum() > 0), num_breakdowns=nbreak, tol=tol,
    )


@functools.partial(jax.jit, static_argnums=(0,))
def _true_residuals(batched_matvec, Y, theta, args):
    """``|A y - theta y|`` for ``Y`` (k, B, n), ``theta`` (k, B): one matvec per vector."""

    def one(y_t):
        y, t = y_t
        r = batched_matvec(y, *args).astype(y.dtype) - t[:, None] * y
        return jnp.linalg.norm(r, axis=-1)

    return lax.map(one, (Y, theta))


def _prepare(dim, k, num_steps, check_every, dtype, v0, key, batch):
    dim = _check_int(dim, "dim")
    k = _check_int(k, "k")
    dtype = _as_dtype(dtype)
    num_steps = min(dim, 200) if num_steps is None else _check_int(num_steps, "num_steps")
    if num_steps > dim:
        raise ValueError(f"`num_steps` must be <= dim = {dim} (the Krylov space is at most dim-dimensional); got {num_steps}.")
    if k > num_steps:
        raise ValueError(f"`k` must be <= num_steps = {num_steps}; got {k}.")
    check_every = _check_int(check_every, "check_every")
    key = _key(key)
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
    v0: Array | None = None,
    dtype=None,
    breakdown_tol: float | None = None,
) -> LanczosResult:
    """``k`` smallest and ``k`` largest eigenvalues of a symmetric operator by Lanczos.

    Lanczos with full two-pass reorthogonalisation (see the module docstring);
    the loop runs on device in chunks of ``check_every`` steps (``lax.fori_loop``
    under ``jit``, ``matvec`` static). After each chunk the tridiagonal ``T_j``
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
      check_every: steps per device chunk between convergence checks.
      early_stop: stop at the first check where the tolerance is met.
      return_vectors: also form Ritz vectors and their true residuals (``2k`` matvecs).
      v0: optional start vector ``(dim,)``.
      dtype: float32 or float64 (default: float64 when x64 is enabled).
      breakdown_tol: relative breakdown threshold (default ``100 * eps``).

    Returns:
      :class:`LanczosResult`.

    Example:
      >>> import jax.numpy as jnp
      >>> A = jnp.diag(jnp.arange(1.0, 51.0))
      >>> r = extreme_eigenvalues(lambda v, a: a @ v, 50, k=2, args=(A,))
      >>> r.smallest.round(8).tolist(), r.largest.round(8).tolist(), r.converged
      ([1.0, 2.0], [50.0, 49.0], True)
    """
    _check_callable(matvec, "matvec")
    dim, k, dtype, num_steps, check_every, v0, key = _prepare(dim, k, num_steps, check_every, dtype, v0, key, 1)
    res = _run_lanczos(_SingleAsBatch(matvec), v0, k=k, num_steps=num_steps, tol=tol, check_every=check_every,
                       key=key, args=args, dtype=dtype, breakdown_tol=breakdown_tol,
                       return_vectors=return_vectors, early_stop=early_stop)
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
    v0: Array | None = None,
    dtype=None,
    breakdown_tol: float | None = None,
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
    """
    _check_callable(block_matvec, "block_matvec")
    num_blocks = _check_int(num_blocks, "num_blocks")
    dim, k, dtype, num_steps, check_every, v0, key = _prepare(
        block_dim, k, num_steps, check_every, dtype, v0, key, num_blocks)
    return _run_lanczos(block_matvec, v0, k=k, num_steps=num_steps, tol=tol, check_every=check_every,
                        key=key, args=args, dtype=dtype, breakdown_tol=breakdown_tol,
                        return_vectors=return_vectors, early_stop=early_stop)


# ----------------------------------------------------------------------------- SLQ and traces


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
    grid: Array | None = None,
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
    _check_callable(matvec, "matvec")
    num_probes = _check_int(num_probes, "num_probes")
    dim, _, dtype, num_steps, check_every, _, key = _prepare(dim, 1, num_steps, 1, dtype, None, key, num_probes)
    k0, key = jax.random.split(key)
    v0 = jax.random.rademacher(k0, (num_probes, dim), dtype)
    btol = jnp.asarray(100 * float(jnp.finfo(dtype).eps), dtype)
    state = _lanczos_init(v0, num_steps, dtype)
    state = _lanczos_chunk(_Vmapped(matvec), state, jnp.asarray(0), jnp.asarray(num_steps), key, btol, tuple(args))
    alpha, beta, resid, broke = (np.asarray(a, np.float64).T for a in state[1:5])
    if not (np.all(np.isfinite(alpha)) and np.all(np.isfinite(beta))):
        raise FloatingPointError("SLQ: the matvec returned non-finite values.")
    nodes, weights = [], []
    for p in range(num_probes):
        theta, S, _ = _ritz(alpha[p], beta[p], resid[p], broke[p].astype(bool))
        nodes.append(theta)
        weights.append(S[0] ** 2)
    nodes, weights = np.stack(nodes), np.stack(weights)
    lo, hi = float(nodes.min()), float(nodes.max())
    if sigma is None:
        sigma = max(hi - lo, abs(hi), 1e-30) / 200.0
    check_positive(sigma, "sigma")
    if grid is None:
        grid = np.linspace(lo - 5 * sigma, hi + 5 * sigma, _check_int(num_grid, "num_grid"))
    grid = np.asarray(grid, np.float64)
    z = (grid[:, None, None] - nodes[None]) / sigma
    density = np.mean(np.sum(weights[None] * np.exp(-0.5 * z**2), axis=2), axis=1) / (sigma * math.sqrt(2 * math.pi))
    return SpectralDensity(nodes, weights, grid, density, float(sigma))


@functools.partial(jax.jit, static_argnums=(0,))
def _quad_forms(batched_matvec, Z, args):
    return jnp.sum(Z * batched_matvec(Z, *args).astype(Z.dtype), axis=-1)


def hutchinson_trace(matvec: Callable, dim: int, *, num_matvecs: int, key=None, args: Sequence = (),
                     dtype=None) -> Array:
    """Hutchinson's trace estimator ``tr(A) ~ (1/m) sum_i z_i^T A z_i``, Rademacher ``z_i``.

    Unbiased, variance ``2 (|A|_F^2 - sum_i A_ii^2) / m`` (Hutchinson 1989).
    Uses exactly ``num_matvecs`` matvecs (one vmapped batch).

    Example:
      >>> import jax.numpy as jnp
      >>> est = hutchinson_trace(lambda v, d: d * v, 10, num_matvecs=4, args=(jnp.arange(10.0),))
      >>> float(est)   # diagonal A: z_i^2 = 1, exact
      45.0
    """
    _check_callable(matvec, "matvec")
    dim, m = _check_int(dim, "dim"), _check_int(num_matvecs, "num_matvecs")
    dtype = _as_dtype(dtype)
    Z = jax.random.rademacher(_key(key), (m, dim), dtype)
    return jnp.mean(_quad_forms(_Vmapped(matvec), Z, tuple(args)))


@functools.partial(jax.jit, static_argnums=(0,))
def _hutchpp(batched_matvec, S, G, args):
    AS = batched_matvec(S, *args).astype(S.dtype)          # (s, n): m/3 matvecs
    Q, _ = jnp.linalg.qr(AS.T)                             # (n, s) orthonormal basis of range(A S)
    AQ = batched_matvec(Q.T, *args).astype(S.dtype)        # m/3 matvecs
    t_low = jnp.sum(Q.T * AQ)                              # tr(Q^T A Q)
    Gp = G - (G @ Q) @ Q.T                                 # (I - Q Q^T) G, rows
    AGp = batched_matvec(Gp, *args).astype(S.dtype)        # m/3 matvecs
    t_rest = jnp.sum(Gp * AGp) / G.shape[0]
    return t_low + t_rest


def hutchpp_trace(matvec: Callable, dim: int, *, num_matvecs: int, key=None, args: Sequence = (),
                  dtype=None) -> Array:
    """Hutch++ trace estimator (Meyer, Musco, Musco & Woodruff, SOSA 2021, Alg. 1).

    With ``s = num_matvecs // 3``: ``Q = orth(A S)`` for a Rademacher ``S`` (n x s),
    ``tr(A) ~ tr(Q^T A Q) + (1/s) tr(G^T (I - QQ^T) A (I - QQ^T) G)`` with a fresh
    Rademacher ``G`` (n x s). The low-rank part is captured exactly, so the
    variance only sees the tail of the spectrum: error ``O(1/m)`` instead of
    Hutchinson's ``O(1/sqrt(m))`` for PSD ``A``. Uses ``3 s`` matvecs.
    """
    _check_callable(matvec, "matvec")
    dim, m = _check_int(dim, "dim"), _check_int(num_matvecs, "num_matvecs", 3)
    dtype = _as_dtype(dtype)
    s = m // 3
    if s > dim:
        raise ValueError(f"`num_matvecs // 3` must be <= dim = {dim}; got {s}.")
    k1, k2 = jax.random.split(_key(key))
    S = jax.random.rademacher(k1, (s, dim), dtype)
    G = jax.random.rademacher(k2, (s, dim), dtype)
    return _hutchpp(_Vmapped(matvec), S, G, tuple(args))


# ----------------------------------------------------------------------------- certificates

_U64 = 2.0**-53  # unit roundoff of IEEE binary64, round to nearest


def _gamma(n: int) -> float:
    """Higham's ``gamma_n = n u / (1 - n u)`` for binary64."""
    nu = n * _U64
    if nu >= 0.5:
        raise ValueError(f"dimension {n} too large for the gamma_n error bound.")
    return nu / (1 - nu)


class CurvatureWitness(NamedTuple):
    """A Rayleigh quotient with a floating-point error bound.

    Attributes:
      quotient: computed ``q = v^T H v / v^T v`` (float64).
      error_bound: bound on ``|q_computed - q_exact|`` (see :func:`negative_curvature_witness`).
      proves_instability: ``q + error_bound < 0`` and the bound is rigorous: then
        ``lambda_min(H) <= q_exact < 0`` is proved (Rayleigh quotient bound).
      rigorous: whether ``error_bound`` is a proved bound (explicit matrix, or a
        callable with a supplied ``matvec_error``) rather than a heuristic.
      bound_used: the formula, in words.
    """

    quotient: float
    error_bound: float
    proves_instability: bool
    rigorous: bool
    bound_used: str


def negative_curvature_witness(matvec_or_matrix, v, *, matvec_error: float | None = None) -> CurvatureWitness:
    """Certify ``lambda_min(H) < 0`` by a Rayleigh quotient with a rounding-error bound.

    ``lambda_min(H) <= q = v^T H v / v^T v`` for any ``v != 0`` (Rayleigh), so a
    computed ``q_hat`` with ``q_hat + B < 0``, where ``B >= |q_hat - q|``, proves a
    negative eigenvalue (an escape direction of a saddle).

    Bound used (explicit matrix ``H``, entries and ``v`` converted exactly to
    float64; IEEE binary64, round to nearest, no underflow/overflow; any summation
    order, FMA allowed; Higham, *Accuracy and Stability of Numerical Algorithms*,
    2nd ed., s.3.1, Lemma 3.1 and (3.4)-(3.5)): with ``u = 2^-53``,
    ``gamma_n = n u / (1 - n u)`` and ``E = gamma_{2n} |v|^T |H| |v|`` bounding the error
    of ``num_hat = fl(v^T fl(H v))``, and ``|den_hat - v^T v| <= gamma_n v^T v``,

        ``|q_hat - q| <= (E + gamma_n (|num_hat| + E)) / (den_hat (1 - 2 gamma_n)) + u |q_hat|``;

    the returned ``error_bound`` is twice this value, which absorbs the rounding
    in evaluating the bound itself (an ``O(n u)`` relative effect).

    For a callable ``matvec(v) -> H v``: the dot-product part is bounded the same
    way with ``|H||v|`` replaced by ``|fl(H v)|`` and a supplied
    ``matvec_error >= |fl(H v) - H v|_2`` enters as ``|v|_2 matvec_error``;
    without ``matvec_error`` a heuristic ``sqrt(dim) * 1e3 u |H v|_2 |v|_2`` is used,
    ``rigorous=False`` and ``proves_instability`` is ``False``.

    Example:
      >>> import numpy as np
      >>> w = negative_curvature_witness(np.array([[1.0, 2.0], [2.0, 1.0]]), np.array([1.0, -1.0]))
      >>> w.quotient, w.proves_instability
      (-1.0, True)
    """
    v = np.asarray(v, dtype=np.float64)
    check_rank(v, "v", 1)
    n = v.shape[0]
    if not np.all(np.isfinite(v)) or not np.any(v):
        raise ValueError("`v` must be a finite, non-zero vector.")
    g_n, g_2n = _gamma(n), _gamma(2 * n)
    den = float(v @ v)
    if callable(matvec_or_matrix):
        hv = np.asarray(matvec_or_matrix(v), dtype=np.float64).reshape(-1)
        if hv.shape != (n,):
            raise ValueError(f"`matvec(v)` must return shape ({n},); got {hv.shape}.")
        check_finite(hv, "matvec(v)")
        num = float(v @ hv)
        abs_term = float(np.abs(v) @ np.abs(hv))
        rigorous = matvec_error is not None
        if rigorous:
            check_positive(matvec_error, "matvec_error", strict=False)
            mv_err = float(matvec_error)
        else:
            mv_err = math.sqrt(n) * 1e3 * _U64 * float(np.linalg.norm(hv))
        E = g_n * abs_term + math.sqrt(den) * mv_err * (1 + g_n)
        used = ("gamma_n |v|^T|fl(Hv)| + |v|_2 * matvec_error (dot product, Higham Lemma 3.1)"
                if rigorous else "heuristic: gamma_n |v|^T|fl(Hv)| + |v| sqrt(n) 1e3 u |Hv| (matvec error unknown)")
    else:
        H = np.asarray(matvec_or_matrix, dtype=np.float64)
        check_rank(H, "matvec_or_matrix", 2)
        if H.shape != (n, n):
            raise ValueError(f"`matvec_or_matrix` must be ({n}, {n}) to match `v`; got {H.shape}.")
        check_finite(H, "matvec_or_matrix")
        num = float(v @ (H @ v))
        E = g_2n * float(np.abs(v) @ (np.abs(H) @ np.abs(v)))
        rigorous = True
        used = "gamma_2n |v|^T |H| |v| for fl(v^T fl(Hv)) (Higham (3.4)-(3.5)), gamma_n for v^T v"
    q = num / den
    bound = 2.0 * ((E + g_n * (abs(num) + E)) / (den * (1 - 2 * g_n)) + _U64 * abs(q))
    proves = bool(rigorous and q + bound < 0)
    return CurvatureWitness(q, bound, proves, rigorous, used)


class PSDCertificate(NamedTuple):
    """Outcome of :func:`psd_certificate`.

    Attributes:
      certified: ``True`` proves ``lambda_min(H) >= -margin`` (in fact ``> -margin``).
      margin: the margin asked for.
      shift: the extra shift ``c`` subtracted before factorising (rounding allowance).
      lower_bound: ``-margin`` when certified, else ``None``.
      message: what was proved, or why the certificate failed.
    """

    certified: bool
    margin: float
    shift: float
    lower_bound: float | None
    message: str


def psd_certificate(H, margin: float = 0.0) -> PSDCertificate:
    """Prove ``lambda_min(H) >= -margin`` by a float64 Cholesky of ``H + margin I - c I``.

    Following Rump, "Verification of positive definiteness", BIT Numer. Math. 46
    (2006) 433-452: if floating-point Cholesky (binary64, round to nearest) of
    ``A - c I`` runs to completion, with ``A`` symmetric with non-negative diagonal and
    ``c >= gamma_{n+1} / (1 - gamma_{n+1}) * tr(A) + 4 n (2 n + max A_ii) eta`` (``eta = 2^-1074``,
    the underflow unit; the constant as we read the paper's main theorem), then
    ``A`` is positive definite. Here ``A = H + margin I``
    (its rounding ``fl(A) - A`` and the symmetrisation ``(H + H^T)/2`` of a Hessian
    that is symmetric only up to rounding are covered by adding ``u |A|_F`` each)
    and ``c`` is taken twice that threshold (a safety factor against misreading
    lower-order terms of the published constant). Success proves ``H + margin I > 0``,
    i.e. ``lambda_min(H) > -margin``; failure (a non-positive pivot) proves
    nothing and is reported with ``certified=False``, never as an exception. A PSD
    matrix that is singular or nearly so is therefore refused at ``margin=0``.

    Example:
      >>> import numpy as np
      >>> psd_certificate(np.array([[2.0, 1.0], [1.0, 2.0]])).certified
      True
      >>> psd_certificate(np.array([[1.0, 1.0], [1.0, 1.0]])).certified   # singular PSD
      False
    """
    H = np.asarray(H, dtype=np.float64)
    check_rank(H, "H", 2)
    n = H.shape[0]
    if H.shape != (n, n) or n == 0:
        raise ValueError(f"`H` must be a non-empty square matrix; got shape {H.shape}.")
    check_finite(H, "H")
    check_positive(margin, "margin", strict=False)
    scale = max(float(np.max(np.abs(H))), 1e-300)
    asym = float(np.max(np.abs(H - H.T))) / scale
    if asym > 1e-8:
        raise ValueError(f"`H` must be symmetric; relative asymmetry max|H - H^T|/max|H| = {asym:.3g}.")
    A = 0.5 * (H + H.T) + margin * np.eye(n)
    d = np.diag(A)
    if np.any(d < 0):
        return PSDCertificate(False, float(margin), 0.0, None,
                              f"H + margin I has a negative diagonal entry ({d.min():.3g}): not PSD.")
    g = _gamma(n + 1)
    eta = 2.0**-1074
    fro = float(np.linalg.norm(A))
    c = 2.0 * (g / (1 - g) * float(np.sum(d)) + 4 * n * (2 * n + float(d.max())) * eta + 2 * _U64 * fro)
    try:
        np.linalg.cholesky(A - c * np.eye(n))
    except np.linalg.LinAlgError:
        return PSDCertificate(False, float(margin), c, None,
                              f"Cholesky of H + ({margin:.3g} - {c:.3g}) I failed: lambda_min(H) >= -{margin:.3g} "
                              "is NOT certified (H may be indefinite, singular or too close to singular).")
    return PSDCertificate(True, float(margin), c, -float(margin),
                          f"Cholesky of H + ({margin:.3g} - {c:.3g}) I succeeded: lambda_min(H) > -{margin:.3g} (Rump 2006).")


# ----------------------------------------------------------------------------- paper baseline


class PowerIterationResult(NamedTuple):
    """The paper's shifted power iteration estimates.

    Attributes:
      lambda_max: Rayleigh quotient after ``steps`` power steps on ``H`` (this is the
        eigenvalue of largest *magnitude*, which may be negative).
      lambda_min: ``lambda_max - mu`` with ``mu`` from ``steps`` power steps on
        ``lambda_max I - H``.
      mu: the shifted operator's estimate.
      num_matvecs: ``2 * steps``.
    """

    lambda_min: float
    lambda_max: float
    mu: float
    num_matvecs: int


@functools.partial(jax.jit, static_argnums=(0, 1))
def _power_pair(matvec, steps, v0, u0, args):
    def power(op, v):
        def body(_, carry):
            v, _ = carry
            w = op(v)
            lam = jnp.vdot(v, w)
            return w / jnp.linalg.norm(w), lam

        return lax.fori_loop(0, steps, body, (v, jnp.zeros((), v.dtype)))[1]

    dtype = v0.dtype
    A = lambda v: matvec(v, *args).astype(dtype)
    lam_max = power(A, v0)
    mu = power(lambda v: lam_max * v - A(v), u0)
    return lam_max, mu


def paper_power_iteration(matvec: Callable, dim: int, *, steps: int = 20, key=None, args: Sequence = (),
                          dtype=jnp.float32) -> PowerIterationResult:
    """The paper's "20-step shifted power iteration" for ``lambda_min`` (the baseline).

    As in the paper's Hessian tracker: ``steps`` iterations ``v <- H v / |H v|`` from
    a random normal unit vector with Rayleigh quotient ``lambda_max = v^T H v``; then
    ``steps`` iterations on ``lambda_max I - H`` from a fresh random vector giving
    ``mu``, and ``lambda_min = lambda_max - mu``. Float32 by default, no
    convergence test, no residual. Its known failure modes (kept on purpose):
    power iteration finds the eigenvalue of largest *magnitude* (so
    ``lambda_max`` comes out negative when ``|lambda_min| > lambda_max``), and 20
    steps do not converge when the top eigenvalues are close, underestimating
    ``|lambda_min|`` (DESIGN.md s.4). Uses ``2 * steps`` matvecs.
    """
    _check_callable(matvec, "matvec")
    dim, steps = _check_int(dim, "dim"), _check_int(steps, "steps")
    dtype = jnp.dtype(dtype)
    k1, k2 = jax.random.split(_key(key))
    v0 = jax.random.normal(k1, (dim,), dtype)
    u0 = jax.random.normal(k2, (dim,), dtype)
    lam_max, mu = _power_pair(matvec, steps, v0 / jnp.linalg.norm(v0), u0 / jnp.linalg.norm(u0), tuple(args))
    lam_max, mu = float(lam_max), float(mu)
    if not (math.isfinite(lam_max) and math.isfinite(mu)):
        raise FloatingPointError("paper_power_iteration: non-finite estimate (matvec returned NaN/inf?).")
    return PowerIterationResult(lam_max - mu, lam_max, mu, 2 * steps)
