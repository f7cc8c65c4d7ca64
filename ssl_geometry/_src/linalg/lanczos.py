"""Extreme eigenpairs of a symmetric operator by Lanczos with full reorthogonalisation.

The recurrence and its costs are in :mod:`ssl_geometry._src.linalg.lanczos_core`. This module
drives it: after a number of steps the tridiagonal ``T_j`` is diagonalised on the host in float64
(a batched dense ``eigh`` of the small ``T_j`` for all blocks at once) and the run stops once every
requested Ritz pair meets the tolerance. The checks are adaptive: the first comes after
``min(check_every, max(4, 2k))`` steps, the second 2 steps later, later ones after half the number
of steps the observed decay of the worst residual predicts (at least 1, at most ``check_every``),
so the run stops within a step or so of meeting ``tol``; between checks the host does not wait for
the device.

Symmetry is checked on the fly, at no extra matvec: for symmetric ``A`` the cross term
``q_{j-1}^T A q_j`` equals ``beta_{j-1}`` up to rounding; the largest
``|q_{j-1}^T A q_j - beta_{j-1}| / |A|_est`` over the run is reported as ``asymmetry`` and
a value above ``SolverOptions.symmetry_tol`` (default ``sqrt(eps)``) raises ``ValueError``. A small
residual does not by itself prove that ``theta_i`` is the *extreme* eigenvalue (an
eigenvector orthogonal to ``v_0`` is invisible to Krylov methods); random starting vectors
make that event probability zero.

A matvec is compiled once per code and shapes, not once per Python function: it is
closure-converted (:func:`ssl_geometry._src.linalg.operators.prepare_matvec`), so a matvec
written as a fresh closure on every call (``lambda v: A @ v`` in a loop) reuses the compiled
product, and the JAX arrays it closes over are passed to the compiled code as arguments, not baked
into it. A new non-array value in the closure (a Python scalar, a NumPy array, a host callback
created afresh) is a new program and compiles.

Breakdown (``beta_j <= breakdown_tol * |A|_est``): the Krylov space is an invariant subspace, so
its Ritz values are exact eigenvalues. The solver records it (``breakdown``, ``num_breakdowns``),
sets the off-diagonal of ``T`` to zero and continues from a fresh random vector orthogonal to all
previous Lanczos vectors, so the remaining spectrum can still be found; no division by ~0 takes
place, so no NaN can arise from it.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ssl_geometry._src.checks import check_choice, check_finite, check_int, check_positive
from ssl_geometry._src.linalg.lanczos_core import (
    LanczosState,
    advance,
    capacity,
    coefficients,
    ensure_capacity,
    gap_error_bounds,
    lanczos_init,
    ritz_batch,
    round_rows,
    scaled_norm,
    to_host,
)
from ssl_geometry._src.linalg.operators import SingleAsBatch, as_dtype, check_callable, default_key, prepare_matvec
from ssl_geometry._src.linalg.options import LANCZOS_DEFAULTS, SolverOptions, as_args

__all__ = ["LanczosResult", "extreme_eigenvalues", "blockwise_extreme_eigenvalues"]

_PREALLOCATE_BYTES = 64 * 2**20  # a basis up to this size is allocated whole (one compilation of the update)


class LanczosResult(NamedTuple):
    """Extreme eigenpairs from Lanczos with full reorthogonalisation.

    For :func:`extreme_eigenvalues` the arrays below are as written; for
    :func:`blockwise_extreme_eigenvalues` each has an extra leading block axis
    ``(num_blocks, ...)``.

    Attributes:
      smallest: ``(k,)`` smallest Ritz values, ascending.
      largest: ``(k,)`` largest Ritz values, descending.
      smallest_residuals: ``(k,)`` residual-norm estimates ``|A y - theta y|`` of
        ``smallest`` from the recurrence (``|beta_m s[m]|``, plus breakdown terms); an
        eigenvalue of ``A`` lies within this distance.
      largest_residuals: the same for ``largest``.
      smallest_vectors: ``(k, dim)`` unit Ritz vectors (rows) of ``smallest``, or
        ``None`` unless ``return_vectors=True``.
      largest_vectors: the same for ``largest``.
      smallest_true_residuals: ``(k,)`` residuals of ``smallest`` recomputed as
        ``|A y - theta y|`` with one matvec per vector, or ``None``.
      largest_true_residuals: the same for ``largest``.
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
      num_checks: host-side convergence checks made.
      second_passes: steps whose reorthogonalisation needed the second Gram-Schmidt pass.
      smallest_error_bounds: ``(k,)`` bounds on the distance from each Ritz value of ``smallest``
        to its eigenvalue, ``min(r, r^2 / delta)`` (Kato-Temple, ``lanczos_core.gap_error_bounds``;
        ``delta`` the distance to the other Ritz values' residual intervals).
      largest_error_bounds: the same for ``largest``.
      error_bound: what ``converged`` and ``tol`` were measured on: ``"residual"`` (the residual
        ``r``, an eigenvalue within ``r`` whatever the rest of the spectrum) or ``"gap"`` (the
        error bounds above).
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
    second_passes: int = 0
    smallest_error_bounds: Any = None
    largest_error_bounds: Any = None
    error_bound: str = "residual"


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


def _convergence(theta, est, k, tol, target, which="both"):
    """``(converged, ratio)`` after a check; ``ratio <= 1`` is convergence (used to predict the next check).

    ``target="blocks"``: every block's ``k`` smallest and largest Ritz pairs (only the smallest or only
    the largest for ``which="smallest"`` / ``"largest"``) have residual
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
        ends = {"both": np.concatenate([est[:, :k], est[:, -k:]], axis=1), "smallest": est[:, :k],
                "largest": est[:, -k:]}[which]
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


def _check_coefficients(state: LanczosState, alpha, resid, j, name):
    """Raise ``FloatingPointError`` naming the culprit when the recurrence produced NaN/inf."""
    if np.all(np.isfinite(alpha)) and np.all(np.isfinite(resid)):
        return
    if bool(np.any(np.asarray(state.bad_product))):
        raise FloatingPointError(
            f"`{name}` returned non-finite values (NaN/inf) within the first {j} Lanczos steps (check `{name}`, its `args` "
            "and the dtype).")
    raise FloatingPointError(  # not reached for finite products: the norms are scaled (see lanczos_core)
        f"Lanczos coefficients became non-finite within the first {j} steps although every product of "
        f"`{name}` was finite; please report this.")


class AsymmetryError(ValueError):
    """The operator failed the on-the-fly symmetry check; ``steps`` products had been taken."""

    def __init__(self, message: str, steps: int):
        super().__init__(message)
        self.steps = steps


def _check_symmetry(state: LanczosState, sym_tol, j, name) -> float:
    asym = float(np.max(np.asarray(state.asym)))
    if not asym <= sym_tol:
        raise AsymmetryError(
            f"`{name}` is not symmetric: |q_(j-1)^T A q_j - beta_(j-1)| / |A| reached {asym:.3g} > "
            f"symmetry_tol = {sym_tol:.3g} within {j} Lanczos steps (Lanczos needs a symmetric operator; "
            "pass a larger `SolverOptions.symmetry_tol` only if the asymmetry is rounding).",
            j,
        )
    return asym


def _ritz_vectors(mv, state, S, smallest, largest, k, args, dtype):
    """Unit Ritz vectors ``(B, k, n)`` of both ends and their true residuals ``(B, k)`` (``2k`` products)."""
    rows, m = state.Q.shape[0], S.shape[1]
    pad = lambda C: np.pad(C, ((0, 0), (0, rows - m), (0, 0)))  # rows >= m: basis rows past the run get 0
    Ys, Yl = _combine(state.Q, jnp.asarray(pad(S[:, :, :k]), dtype), jnp.asarray(pad(S[:, :, ::-1][:, :, :k]), dtype))
    tr_s = _true_residuals(mv, Ys, jnp.asarray(smallest.T, dtype), args)
    tr_l = _true_residuals(mv, Yl, jnp.asarray(largest.T, dtype), args)
    return jnp.swapaxes(Ys, 0, 1), jnp.swapaxes(Yl, 0, 1), np.asarray(tr_s).T, np.asarray(tr_l).T


@jax.jit
def _combine(Q, C_small, C_large):
    """``Y = Q^T C`` for both ends, unit rows: ``(k, B, n)`` each (``C`` zero past the steps taken)."""
    out = []
    for C in (C_small, C_large):
        Y = jnp.einsum("mbn,bmk->kbn", Q, C, precision=jax.lax.Precision.HIGHEST)
        out.append(Y / scaled_norm(Y)[..., None])
    return tuple(out)


def _run_lanczos(batched_matvec, v0, *, k, num_steps, options, key, args, dtype, return_vectors,
                 name, single, target="blocks", which="both"):
    B, n = v0.shape
    check_choice(which, "which", ("both", "smallest", "largest"))
    tol, check_every, error_bound, early_stop = options.tol, options.check_every, options.error_bound, options.early_stop
    breakdown_tol, symmetry_tol, device_loop = options.breakdown_tol, options.symmetry_tol, options.device_loop
    mv, args = prepare_matvec(batched_matvec, (B, n), dtype, as_args(args), name=name, single=single)
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
    state, q = lanczos_init(v0, num_steps, dtype, capacity(start_rows, 0, num_steps))
    while j < num_steps:
        stop = min(num_steps, j + chunk) if early_stop else num_steps
        state = ensure_capacity(state, capacity(stop + 1, state.Q.shape[0], num_steps))
        state, q = advance(mv, state, q, j, stop, key, btol, args, device_loop=device_loop)
        j, checks = stop, checks + 1
        host = to_host(state)
        alpha, beta, resid, broke = coefficients(host, j)
        _check_coefficients(host, alpha, resid, j, name)
        asym = _check_symmetry(host, sym_tol, j, name)
        kk = min(k, j)
        theta, S, est = ritz_batch(alpha, beta, resid, broke)
        err = gap_error_bounds(theta, est)
        converged, ratio = _convergence(theta, err if error_bound == "gap" else est, kk, tol, target, which)
        converged = converged and kk == k
        if converged and early_stop:
            break
        chunk = (_next_chunk(history, ratio, j, check_every) if history else min(2, check_every)) if kk == k \
            else check_every
        history.append((j, ratio))
    steps = j
    smallest, largest = theta[:, :k], theta[:, ::-1][:, :k]
    nbreak = broke.sum(axis=1)
    vecs = _ritz_vectors(mv, state, S, smallest, largest, k, args, dtype) if return_vectors else (None,) * 4
    return LanczosResult(
        smallest=smallest, largest=largest, smallest_residuals=est[:, :k], largest_residuals=est[:, ::-1][:, :k],
        smallest_vectors=vecs[0], largest_vectors=vecs[1],
        smallest_true_residuals=vecs[2], largest_true_residuals=vecs[3],
        ritz_values=theta, num_steps=steps, converged=bool(converged),
        breakdown=bool(nbreak.sum() > 0), num_breakdowns=nbreak, tol=tol,
        asymmetry=asym, num_checks=checks, second_passes=int(host.second_passes),
        smallest_error_bounds=err[:, :k], largest_error_bounds=err[:, ::-1][:, :k], error_bound=error_bound,
    )


@functools.partial(jax.jit, static_argnums=(0,))
def _true_residuals(batched_matvec, Y, theta, args):
    """``|A y - theta y|`` for ``Y`` (k, B, n), ``theta`` (k, B): one matvec per vector."""

    def one(y_t):
        y, t = y_t
        return scaled_norm(batched_matvec(y, *args).astype(y.dtype) - t[:, None] * y)

    return jax.lax.map(one, (Y, theta))


def checked_options(options, defaults: SolverOptions) -> SolverOptions:
    """``options`` with its ``None`` fields taken from ``defaults``; ``TypeError`` naming ``options`` unless it is a
    :class:`SolverOptions`."""
    if not isinstance(options, SolverOptions):
        raise TypeError(f"`options` must be a SolverOptions (ssl_geometry.curvature.SolverOptions); "
                        f"got {type(options).__name__}.")
    return options.with_defaults(defaults)


def prepare_lanczos(dim, k, num_steps, dtype, v0, key, batch):
    """``(dim, k, dtype, num_steps, v0, key)`` checked and resolved (``num_steps=None``: ``min(dim, 200)``)."""
    dim = check_int(dim, "dim")
    k = check_int(k, "k")
    dtype = as_dtype(dtype)
    num_steps = min(dim, 200) if num_steps is None else check_int(num_steps, "num_steps")
    if num_steps > dim:
        raise ValueError(f"`num_steps` must be <= dim = {dim} (the Krylov space is at most dim-dimensional); got {num_steps}.")
    if k > num_steps:
        raise ValueError(f"`k` must be <= num_steps = {num_steps}; got {k}.")
    key = default_key(key)
    k0, key = jax.random.split(key)
    shape = (batch, dim)
    if v0 is None:
        v0 = jax.random.normal(k0, shape, dtype)
    else:
        if jnp.size(v0) != batch * dim:
            raise ValueError(f"`v0` must have {batch * dim} entries (shape {shape}); got shape {jnp.shape(v0)}.")
        v0 = jnp.asarray(v0, dtype).reshape(shape)
        check_finite(v0, "v0")
        if not bool(jnp.all(jnp.max(jnp.abs(v0), axis=-1) > 0)):
            raise ValueError("`v0` must be non-zero (in every block).")
    return dim, k, dtype, num_steps, v0, key


def extreme_eigenvalues(
    matvec: Callable,
    dim: int,
    *,
    k: int = 1,
    key=None,
    args: Sequence = (),
    return_vectors: bool = False,
    v0: Float[Array | np.ndarray, " dim"] | None = None,
    dtype=None,
    which: str = "both",
    options: SolverOptions = SolverOptions(),
) -> LanczosResult:
    """``k`` smallest and ``k`` largest eigenvalues of a symmetric operator by Lanczos.

    Lanczos with full reorthogonalisation (see the module docstring). At each check (at
    most ``options.check_every`` steps apart) the tridiagonal ``T_j`` is diagonalised on the host
    (float64) and the run stops once every requested Ritz pair has residual estimate
    ``|beta_j s_i[j]| <= tol * max|theta|`` (``converged=True``), or after ``options.num_steps``
    steps (``converged`` then says whether the tolerance was met). ``tol`` is relative to the
    spectral radius ``max|theta|``: an eigenvalue lies within ``tol * max|theta|`` of each
    converged Ritz value.

    Compilation (once per computation of ``matvec`` and shapes of ``args``) and breakdown
    (recorded, then restarted orthogonally) are described in the module docstring. For a
    Hessian, :func:`ssl_geometry.curvature.hessian_extremes` needs no matvec at all.

    Args:
      matvec: ``matvec(v, *args) -> A v`` for ``v`` of shape ``(dim,)``; ``A`` must be
        symmetric. Traced once per call, compiled once per computation (see above).
      dim: dimension of ``A``.
      k: number of extreme eigenvalues wanted at each end.
      key: PRNG key for the start vector and restarts (default ``PRNGKey(0)``).
      args: extra arrays passed to ``matvec`` as ``matvec(v, *args)`` (pass parameters and data here).
      return_vectors: also form Ritz vectors and their true residuals (``2k`` matvecs).
      v0: optional start vector ``(dim,)``.
      dtype: float32 or float64 (default: float64 when x64 is enabled).
      which: the end(s) that ``tol`` and ``converged`` speak of: ``"both"``, ``"smallest"`` or ``"largest"``
        (``lambda_max`` of a Gram matrix ``J^T J``: its bulk near 0 only slows the run); both are returned.
      options: how the run stops, a :class:`~ssl_geometry.curvature.SolverOptions` (a ``None`` field: the
        default named here): ``tol`` (relative, default ``1e-8`` float64, ``1e-4`` float32), ``num_steps``
        (default ``min(dim, 200)``; at most ``dim``), ``check_every`` (default 20), ``early_stop`` (default
        ``True``), ``error_bound`` (``"residual"``: stop when each residual ``r <= tol * max|theta|``, so
        an eigenvalue lies within ``r``; ``"gap"``: stop on the Kato-Temple bound ``min(r, r^2 / delta)``,
        quadratic in the residual, so several steps earlier for the same accuracy of the values, not of the
        vectors; see :class:`LanczosResult`), ``breakdown_tol``, ``symmetry_tol`` and ``device_loop``
        (``lanczos_core.advance`` says why the loop runs on the device on accelerators only).

    Returns:
      :class:`LanczosResult`.

    Raises:
      ValueError: ``matvec`` returns a shape other than ``(dim,)``, an unknown ``which``, or the operator is not
        symmetric (``asymmetry > options.symmetry_tol``).
      TypeError: ``options`` is not a :class:`~ssl_geometry.curvature.SolverOptions`.
      FloatingPointError: ``matvec`` returned NaN/inf (named as such), or the coefficients left
        the dtype's range although every product was finite; ``v0`` holds NaN/inf.

    Example:
      >>> import jax.numpy as jnp
      >>> A = jnp.diag(jnp.arange(1.0, 51.0))
      >>> r = extreme_eigenvalues(lambda v, a: a @ v, 50, k=2, args=(A,))
      >>> r.smallest.round(8).tolist(), r.largest.round(8).tolist(), r.converged
      ([1.0, 2.0], [50.0, 49.0], True)
    """
    check_callable(matvec, "matvec")
    options = checked_options(options, LANCZOS_DEFAULTS)
    dim, k, dtype, num_steps, v0, key = prepare_lanczos(dim, k, options.num_steps, dtype, v0, key, 1)
    res = _run_lanczos(SingleAsBatch(matvec), v0, k=k, num_steps=num_steps, options=options, key=key, args=args,
                       dtype=dtype, return_vectors=return_vectors, name="matvec", single=True, which=which)
    squeeze = lambda a: None if a is None else a[0]  # the one block of a single operator
    fields = ("smallest", "largest", "smallest_residuals", "largest_residuals", "smallest_vectors", "largest_vectors",
              "smallest_true_residuals", "largest_true_residuals", "smallest_error_bounds", "largest_error_bounds",
              "ritz_values")
    return res._replace(**{f: squeeze(getattr(res, f)) for f in fields}, num_breakdowns=int(res.num_breakdowns[0]))


def blockwise_extreme_eigenvalues(
    block_matvec: Callable,
    num_blocks: int,
    block_dim: int,
    *,
    k: int = 1,
    key=None,
    args: Sequence = (),
    return_vectors: bool = False,
    v0: Float[Array | np.ndarray, "num_blocks block_dim"] | None = None,
    dtype=None,
    target: str = "blocks",
    options: SolverOptions = SolverOptions(),
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
    Arguments (``options`` included) are as in :func:`extreme_eigenvalues`; ``converged`` uses the
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
    options = checked_options(options, LANCZOS_DEFAULTS)
    dim, k, dtype, num_steps, v0, key = prepare_lanczos(block_dim, k, options.num_steps, dtype, v0, key, num_blocks)
    return _run_lanczos(block_matvec, v0, k=k, num_steps=num_steps, options=options, key=key, args=args,
                        dtype=dtype, return_vectors=return_vectors, name="block_matvec", single=False,
                        target=target)
