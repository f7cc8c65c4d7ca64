"""From a loss to the extreme eigenvalues of its Hessian in one call: blockwise where it may be, full where not.

:func:`hessian_extremes` linearises ``grad_x loss`` once at the point (:func:`linearize_gradient`:
one forward and one backward pass, compiled once per computation whatever closure the caller
writes), measures the coupling between the rows of ``x`` on that linearisation
(:func:`ssl_geometry.curvature.block_coupling`'s split probes), and runs

* blockwise Lanczos (:func:`ssl_geometry.curvature.blockwise_extreme_eigenvalues`) when the Hessian
  is block-diagonal over the rows (coupling at rounding level: a mean of per-sample terms, no
  train-mode BatchNorm, no in-batch negatives): one product advances ``n`` independent
  ``d``-dimensional Krylov spaces;
* Lanczos on the full ``n d``-dimensional operator (:func:`ssl_geometry.curvature.extreme_eigenvalues`)
  otherwise.

Both stop when every requested Ritz pair's residual is ``<= tol * max|theta|``; an eigenvalue of
the Hessian lies within that distance of each reported value (the residual certificate of
:mod:`ssl_geometry._src.linalg.lanczos`). With ``SolverOptions.error_bound="gap"`` they stop on the Kato-Temple
bound ``min(r, r^2 / delta)`` instead (``delta`` the distance to the other Ritz values' residual
intervals): the eigenvalues' own error, quadratic in the residual, so fewer steps for the values. The
linearisation is returned, so further products at the same point (a witness, more eigenvectors) cost only the tangent map.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ssl_geometry._src.checks import check_choice, check_finite, check_int, check_positive
from ssl_geometry._src.linalg.hessians import LinearMatvec, apply_linear, linearize_gradient, off_block_response
from ssl_geometry._src.linalg.lanczos import (
    AsymmetryError,
    LanczosResult,
    blockwise_extreme_eigenvalues,
    checked_options,
    extreme_eigenvalues,
)
from ssl_geometry._src.linalg.operators import as_dtype, default_key
from ssl_geometry._src.linalg.options import HESSIAN_DEFAULTS, SolverOptions, as_args

__all__ = ["HessianExtremes", "hessian_extremes"]


class HessianExtremes(NamedTuple):
    """The extreme eigenvalues of ``hess_x loss`` at one point, with their certificate.

    Attributes:
      smallest: ``(k,)`` smallest eigenvalue estimates, ascending (``smallest[0] = lambda_min``).
      largest: ``(k,)`` largest, descending (``largest[0] = lambda_max``).
      smallest_residuals: ``(k,)`` residual bounds ``|H y - theta y|`` of ``smallest``: an
        eigenvalue lies within this distance of each value.
      largest_residuals: the same for ``largest``.
      smallest_error_bounds: ``(k,)`` bounds on the distance from each value of ``smallest`` to its
        eigenvalue, ``min(r, r^2 / delta)`` (Kato-Temple; see :class:`~ssl_geometry.curvature.LanczosResult`).
      largest_error_bounds: the same for ``largest``.
      smallest_vectors: ``(k, *x.shape)`` unit eigenvector estimates of ``smallest``, or ``None``
        unless ``return_vectors``.
      largest_vectors: the same for ``largest``.
      converged: every requested residual (``error_bound="gap"``: error bound) is ``<= tol * max|theta|``.
      tol: the relative tolerance.
      method: ``"blockwise"`` or ``"full"``.
      coupling: the measured off-block response (:func:`ssl_geometry.curvature.block_coupling`): the
        largest over the probes taken, which stop at the first above ``coupling_tol`` (so for a coupled
        Hessian a lower bound on the maximum over ``num_probes`` probes); ``None`` when it was not
        measured (``x`` not ``(n, d)`` with ``n >= 2``, or ``method`` forced).
      num_hvps: Hessian-vector products used: Lanczos steps, coupling probes, the steps of a
        blockwise attempt abandoned for the full operator, and the products for the vectors' true
        residuals.
      num_steps: Lanczos steps.
      lanczos: the solver's :class:`~ssl_geometry.curvature.LanczosResult` (a leading block axis
        when blockwise).
      linearization: ``lin`` with ``lin(v) = H v`` for ``v`` shaped like ``x``
        (:func:`ssl_geometry.curvature.linearized_hvp`), for more products at this point.
      gradient: ``grad_x loss`` at the point.
    """

    smallest: np.ndarray
    largest: np.ndarray
    smallest_residuals: np.ndarray
    largest_residuals: np.ndarray
    smallest_error_bounds: np.ndarray
    largest_error_bounds: np.ndarray
    smallest_vectors: Any
    largest_vectors: Any
    converged: bool
    tol: float
    method: str
    coupling: float | None
    num_hvps: int
    num_steps: int
    lanczos: LanczosResult
    linearization: Any
    gradient: Any


def _union_ends(res: LanczosResult, k: int, x_shape, vectors: bool):
    """The ``k`` smallest and largest of the union of the blocks' Ritz values, with residuals and vectors."""
    n, d = x_shape
    out = []
    for vals, resid, err, vecs, sign in (
            (res.smallest, res.smallest_residuals, res.smallest_error_bounds, res.smallest_vectors, 1),
            (res.largest, res.largest_residuals, res.largest_error_bounds, res.largest_vectors, -1)):
        flat = np.asarray(vals).reshape(-1)
        order = np.argsort(sign * flat, kind="stable")[:k]
        blocks, which = np.divmod(order, vals.shape[1])
        v = None
        if vectors:
            v = jnp.zeros((k, n, d), vecs.dtype).at[jnp.arange(k), blocks].set(vecs[blocks, which])
        out.append((flat[order], np.asarray(resid).reshape(-1)[order], np.asarray(err).reshape(-1)[order], v))
    return out


def hessian_extremes(loss, x, *, args=(), k: int = 1, key=None, method: str = "auto",
                     coupling_tol: float | None = None, num_probes: int = 2, return_vectors: bool = False,
                     options: SolverOptions = SolverOptions()) -> HessianExtremes:
    """Extreme eigenvalues of ``H = hess_x loss(x, *args)``, blockwise when ``H`` is block-diagonal.

    ``x`` is the point (any shape; ``(n, d)`` for a batch of ``n`` samples), ``args`` the other
    arguments of ``loss`` (parameters, the other view): they are arguments of the compiled code,
    so new values of the same shapes, or a fresh closure ``lambda z: loss(z, params)`` on every
    call, reuse one compilation. The computation runs in ``x``'s dtype (float32 or float64).

    ``method``: ``"auto"`` measures the coupling of the rows of an ``(n, d)`` point with up to
    ``num_probes`` split probes (one product each, in turn, stopping at the first that exceeds
    ``coupling_tol``: one probe settles a coupled Hessian; see
    :func:`ssl_geometry.curvature.block_coupling`) and runs blockwise Lanczos (``target="union"``
    for ``k = 1``: stops when the union's extremes are resolved) when it is
    ``<= coupling_tol`` (default ``100 eps`` of the dtype: exact zeros up to rounding), full
    Lanczos otherwise, and also when the diagonal blocks alone fail the symmetry check (a block
    whose own scale is far below the measured coupling); ``"blockwise"`` and ``"full"`` skip the
    measurement (``"blockwise"`` then raises on that check). Any other shape of ``x`` runs full Lanczos.

    Args:
      loss: scalar ``loss(x, *args)``.
      x: the point; float32 or float64.
      args: the other arguments of ``loss``, a tuple (``loss(x, *args)``).
      k: eigenvalues wanted at each end.
      key: PRNG key (start vectors, probes).
      return_vectors: also return eigenvector estimates shaped like ``x`` (``2 k`` more products).
      options: how the Lanczos run stops, a :class:`~ssl_geometry.curvature.SolverOptions` (a ``None`` field:
        the default named here): ``tol`` (relative, default ``1e-4`` float32,
        ``1e-8`` float64: each value is within ``tol * max|theta|`` of an eigenvalue of ``H``); ``num_steps``
        (the budget, clamped to ``dim``, the size of a block or of ``x``; default ``min(dim, 200)``);
        ``check_every`` (default 4 here, against 20 for the bare solvers: a Hessian-vector product costs a
        forward and a backward pass of the loss, far more than a check -- a host sync and the eigenvalues of
        the small tridiagonal ``T_j`` -- so the run checks often and stops within a step or so of meeting
        ``tol``); ``error_bound`` (``"residual"``: an eigenvalue within ``r``; ``"gap"``: stop on
        ``min(r, r^2 / delta)``, the eigenvalue's error, several steps fewer for the values, the recommended
        setting when only the eigenvalues are wanted). See :func:`ssl_geometry.curvature.extreme_eigenvalues`.

    Returns:
      :class:`HessianExtremes` (``method``, ``coupling`` and ``num_hvps`` say what was done).

    Raises:
      FloatingPointError: ``x``, ``loss(x, *args)`` or its gradient at ``x`` holds NaN or inf (named).
      TypeError: ``args`` is not a tuple (or list), or ``options`` not a ``SolverOptions``.

    Example:
      >>> import jax.numpy as jnp
      >>> W = jnp.array([[2.0, 0.0], [0.0, -1.0]])
      >>> r = hessian_extremes(lambda z, W: 0.5 * jnp.sum((z @ W) * z), jnp.ones((3, 2)), args=(W,))
      >>> r.method, r.coupling, round(float(r.smallest[0]), 8), round(float(r.largest[0]), 8)
      ('blockwise', 0.0, -1.0, 2.0)
    """
    x, dtype, k, num_probes = _checked_arguments(x, method, k, num_probes)
    args, options = as_args(args), checked_options(options, HESSIAN_DEFAULTS)
    k_probe, k_solve = jax.random.split(default_key(key))
    grad, lin = linearize_gradient(loss, x, args=args)
    check_finite(grad, "gradient of `loss` at `x`")
    check_finite(loss(x, *args), "loss(x, *args)")  # a NaN loss can have a finite gradient (e.g. log of a constant)
    requested = method
    method, coupling, probes = _choose_method(method, lin, x.shape, dtype, k_probe, num_probes, coupling_tol)
    num_steps = options.num_steps
    opts = dict(k=k, key=k_solve, return_vectors=return_vectors, dtype=dtype, options=options)
    spent = 0  # products of a blockwise attempt abandoned for the full operator
    if method == "blockwise":
        try:
            res, ends = _blockwise(lin, x.shape, num_steps, opts)
        except AsymmetryError as err:
            if requested == "blockwise":
                raise ValueError("`method='blockwise'`: the Hessian is not block-diagonal over the rows of `x` (its "
                                 "diagonal blocks alone do not act as a symmetric operator); use method='auto' or "
                                 "'full'.") from err
            # auto: the probes measured a coupling below tolerance, but the diagonal blocks alone are not symmetric
            # at their own scale (a block far smaller than the coupling): the full operator decides
            method, spent = "full", err.steps
    if method == "full":
        res, ends = _full(lin, x.shape, num_steps, opts)
    (lo, lo_r, lo_e, lo_v), (hi, hi_r, hi_e, hi_v) = ends
    return HessianExtremes(
        smallest=np.asarray(lo), largest=np.asarray(hi), smallest_residuals=np.asarray(lo_r),
        largest_residuals=np.asarray(hi_r), smallest_error_bounds=np.asarray(lo_e),
        largest_error_bounds=np.asarray(hi_e), smallest_vectors=lo_v, largest_vectors=hi_v,
        converged=bool(res.converged), tol=float(res.tol), method=method, coupling=coupling,
        num_hvps=int(res.num_steps + probes + spent + (2 * k if return_vectors else 0)), num_steps=int(res.num_steps),
        lanczos=res, linearization=lin, gradient=grad)


def _checked_arguments(x, method, k, num_probes):
    """``(x, dtype, k, num_probes)`` after :func:`hessian_extremes`' argument checks (each error names its argument)."""
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(f"`x` must be a floating-point array; got dtype {x.dtype}.")
    dtype = as_dtype(x.dtype)
    check_finite(x, "x")
    check_choice(method, "method", ("auto", "blockwise", "full"))
    return x, dtype, check_int(k, "k"), check_int(num_probes, "num_probes")


def _choose_method(method, lin, shape, dtype, key, num_probes, coupling_tol):
    """``(method, coupling, probes used)``: ``"auto"`` resolved by the measured block coupling of an ``(n, d)``
    point (:func:`off_block_response`, up to ``num_probes`` probes, stopping at the first above ``coupling_tol``)."""
    batched = len(shape) == 2 and shape[0] >= 2
    if method == "blockwise" and not batched:
        raise ValueError(f"`method='blockwise'` needs `x` of shape (n, d) with n >= 2; got {shape}.")
    if method != "auto":
        return method, None, 0
    if not batched:
        return "full", None, 0
    c_tol = 100 * float(jnp.finfo(dtype).eps) if coupling_tol is None else float(coupling_tol)
    check_positive(c_tol, "coupling_tol", strict=False)
    coupling, used = off_block_response(lin, shape, dtype, key, num_probes, stop_above=c_tol)
    return ("blockwise" if coupling <= c_tol else "full"), coupling, used


def _budget(num_steps, dim: int):
    """The Lanczos budget on a ``dim``-dimensional operator: ``num_steps`` clamped to ``dim`` (the Krylov space is at
    most ``dim``-dimensional, so a larger budget cannot take more steps); ``None`` keeps the default."""
    return None if num_steps is None else min(check_int(num_steps, "num_steps"), dim)


def _blockwise(lin, shape, num_steps, opts):
    """Blockwise Lanczos over the rows of an ``(n, d)`` point: ``(result, (smallest, largest) ends)``."""
    n, d = shape
    opts = dict(opts, options=opts["options"].replace(num_steps=_budget(num_steps, d)))
    res = blockwise_extreme_eigenvalues(apply_linear, n, d, args=(lin,),
                                        target="union" if opts["k"] == 1 else "blocks", **opts)
    return res, _union_ends(res, opts["k"], shape, opts["return_vectors"])


def _full(lin, shape, num_steps, opts):
    """Lanczos on the whole operator: ``(result, ((values, residuals, vectors) at each end))``."""
    size = int(np.prod(shape))
    opts = dict(opts, options=opts["options"].replace(num_steps=_budget(num_steps, size)))
    res = extreme_eigenvalues(LinearMatvec(shape), size, args=(lin,), **opts)
    vshape = (opts["k"],) + tuple(shape)
    vec = lambda v: None if v is None else v.reshape(vshape)
    return res, ((res.smallest, res.smallest_residuals, res.smallest_error_bounds, vec(res.smallest_vectors)),
                 (res.largest, res.largest_residuals, res.largest_error_bounds, vec(res.largest_vectors)))
