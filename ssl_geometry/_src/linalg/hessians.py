"""Dense Hessians and Hessian-vector products of scalar functions of pytrees or arrays.

* :func:`hessian` -- dense ``(P, P)`` Hessian (``jacfwd(grad f)``).
* :func:`hvp` / :func:`flat_hvp` -- ``H v = d/dt grad f(x + t v)|_{t=0}`` by ``jax.jvp`` of
  ``jax.grad`` (forward-over-reverse), on pytrees or as a flat matvec.
* :func:`linearized_hvp` -- the same linear map with the point fixed: ``jax.linearize`` of
  ``grad f`` at ``x`` is computed once (one forward and one backward pass), after which each
  product evaluates only the tangent map; use it with :class:`LinearMatvec` as a Lanczos
  matvec when many products are taken at one point.
* :func:`block_diagonal_hessian` / :func:`block_coupling` -- the diagonal blocks of the
  Hessian of ``f(x)``, ``x`` of shape ``(n, d)``, by probing, and a numerical check that
  the off-diagonal blocks vanish.

Extra arguments follow the one convention of ``curvature`` and ``geometry`` (docs/architecture.md, "Extra
arguments"): a keyword tuple ``args=()``, passed on as ``f(x, *args)``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, Float

from ssl_geometry._src.checks import check_int, check_rank
from ssl_geometry._src.linalg.canonical import closure_convert
from ssl_geometry._src.linalg.operators import check_scalar_fn, default_key
from ssl_geometry._src.linalg.options import as_args

__all__ = [
    "hessian",
    "hvp",
    "flat_hvp",
    "linearized_hvp",
    "LinearMatvec",
    "apply_linear",
    "block_diagonal_hessian",
    "block_coupling",
]


def hessian(f: Callable, params, *, args=()) -> Float[Array, "P P"]:
    """Dense Hessian ``H_ij = d^2 f / dx_i dx_j`` of a scalar ``f(params, *args)`` (``args`` a tuple).

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
    f_args = as_args(args)
    flat, unravel = ravel_pytree(params)
    if flat.size == 0:
        raise ValueError("`params` holds no array leaves; the Hessian is empty.")

    def g(x):
        return f(unravel(x), *f_args)

    check_scalar_fn(g, flat)
    return jax.jacfwd(jax.grad(g))(flat)


def hvp(f: Callable, params, v, *, args=()):
    """Hessian-vector product over pytrees: ``H(params) v`` for scalar ``f(params, *args)`` (``args`` a tuple).

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
    f_args = as_args(args)
    s_p, s_v = jax.tree_util.tree_structure(params), jax.tree_util.tree_structure(v)
    if s_p != s_v:  # type: ignore[operator]  # jax's PyTreeDef is an unresolved name in its stubs (no __eq__/__ne__ to mypy)
        raise ValueError(f"`v` must have the tree structure of `params`; got {s_v} and {s_p}.")
    for a, b in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(v)):
        if jnp.shape(a) != jnp.shape(b):
            raise ValueError(f"`v` leaf shape {jnp.shape(b)} differs from `params` leaf shape {jnp.shape(a)}.")
    check_scalar_fn(lambda p: f(p, *f_args), params)
    return jax.jvp(lambda p: jax.grad(f)(p, *f_args), (params,), (v,))[1]


def flat_hvp(f: Callable, params) -> tuple[Callable, Float[Array, " P"]]:
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


def linearized_hvp(f: Callable, x: Float[Array | np.ndarray, "..."], *, args=()) -> jax.tree_util.Partial:
    """The Hessian at a fixed point as a linear map: ``lin(v) = H(x) v`` for ``f(x, *args)`` (``args`` a tuple).

    ``lin`` is the second output of ``jax.linearize(lambda y: grad f(y, *args), x)``,
    computed once under ``jit`` (one forward and one backward pass of ``f``); each
    ``lin(v)`` then evaluates only the tangent (linear) part of ``grad f`` -- the
    primal forward/backward pass that ``jax.jvp(jax.grad(f), ...)`` repeats on every
    product is not redone. ``v`` must have ``x``'s shape and dtype.

    Compiled once per *computation*: ``grad f`` is closure-converted
    (``linalg.canonical.closure_convert``), so ``f`` written as a fresh closure
    on every call (``lambda z: loss(z, params, batch)``) does not recompile, and arrays it closes
    over are arguments of the compiled code, not constants.

    ``lin`` is a :class:`jax.tree_util.Partial` (a pytree whose leaves are the stored
    linearisation), so it can be passed to jitted solvers through ``args``: with
    :class:`LinearMatvec` (``matvec(v, lin)``) the solvers compile once and reuse the
    compiled loop for every new point of the same shapes::

        lin = linearized_hvp(loss, z1, args=(params, z2))
        res = blockwise_extreme_eigenvalues(apply_linear, n, d, args=(lin,))
        res = extreme_eigenvalues(LinearMatvec(z1.shape), z1.size, args=(lin,))

    :func:`ssl_geometry.curvature.hessian_extremes` does all of this from ``(f, x, args=...)``.

    Example:
      >>> import jax.numpy as jnp
      >>> lin = linearized_hvp(lambda x, a: jnp.sum(a * x ** 3), jnp.array([1.0, 2.0]), args=(jnp.array([1.0, 0.5]),))
      >>> lin(jnp.array([1.0, 1.0]))   # 6 a x elementwise
      Array([6., 6.], dtype=float64)
    """
    return linearize_gradient(f, x, args=args)[1]


@dataclasses.dataclass(frozen=True)
class _GradOf:
    """``x, *args -> grad_x f(x, *args)`` (hashable by ``f``)."""

    f: Callable

    def __call__(self, x, *args):
        return jax.grad(self.f)(x, *args)


def linearize_gradient(f: Callable, x, *, args=()) -> tuple:
    """``(grad f(x, *args), lin)`` with ``lin(v) = H(x) v``, compiled once per computation (see :func:`linearized_hvp`).

    Raises ``ValueError`` unless ``f`` returns a scalar, naming ``f``.
    """
    f_args = as_args(args)
    x = jnp.asarray(x)
    try:
        return linearize(_GradOf(f), x, f_args)
    except TypeError as err:
        if "scalar" not in str(err):
            raise
        check_scalar_fn(lambda y: f(y, *f_args), x)  # names the output shape
        raise


def linearize(fn: Callable, x, args=()) -> tuple:
    """``(fn(x, *args), lin)`` with ``lin(v)`` the derivative of ``fn`` at ``x`` applied to ``v``.

    ``jax.linearize`` under ``jit`` of ``fn`` closure-converted
    (``linalg.canonical.closure_convert``): one compilation per computation and shapes,
    whatever closure ``fn`` is; ``lin`` is a :class:`jax.tree_util.Partial` to pass to solvers.
    """
    fn_c, consts, _ = closure_convert(fn, x, *args)
    return _linearize_jit(fn_c)(consts, x, tuple(jax.tree_util.tree_leaves(args)))


@functools.lru_cache(maxsize=64)
def _linearize_jit(fn_c):
    def prepare(consts, x, leaves):
        return jax.linearize(lambda y: fn_c(consts, y, *leaves), x)

    return jax.jit(prepare)


def apply_linear(v: Float[Array, "..."], lin: Callable) -> Float[Array, "..."]:
    """``lin(v)``: a matvec for the Krylov solvers from a :func:`linearized_hvp` map.

    For :func:`~ssl_geometry.curvature.blockwise_extreme_eigenvalues` when ``x`` is
    ``(num_blocks, block_dim)``; a module-level function, so it is one static argument.
    """
    return lin(v)


@dataclasses.dataclass(frozen=True)
class LinearMatvec:
    """Flat matvec ``v (P,) -> lin(v.reshape(shape)).reshape(P)`` for :func:`linearized_hvp` maps.

    Hashable (a jit-static argument): equal shapes give equal matvecs and reuse compiled loops.
    """

    shape: tuple

    def __call__(self, v, lin):
        return lin(v.reshape(self.shape)).reshape(-1)


def block_diagonal_hessian(
    f: Callable, x: Float[Array | np.ndarray, "n d"], *, args=(), chunk_size: int | None = None
) -> Float[Array, "n d d"]:
    """Diagonal blocks ``H_i = d^2 f / dx_i dx_i`` (``(n, d, d)``) of the Hessian of ``f(x, *args)``.

    ``x`` is ``(n, d)``. Probing: the HVP with ``V = 1_n e_j^T`` (``e_j`` placed in
    every row) returns row ``i`` equal to ``sum_k H_{ik} e_j``; when the Hessian is
    block-diagonal (``H_{ik} = 0`` for ``i != k``, e.g. a mean of per-sample terms
    without batch coupling) this is column ``j`` of every block at once, so ``d``
    HVPs give all ``n`` blocks. **The result is the exact diagonal blocks only if
    the Hessian is block-diagonal**: check with :func:`block_coupling` first.
    ``chunk_size`` bounds how many probes run at once (``lax.map`` batch size).
    """
    f_args = as_args(args)
    check_rank(x, "x", 2)
    check_scalar_fn(lambda y: f(y, *f_args), x)
    n, d = x.shape
    grad_f = jax.grad(lambda y: f(y, *f_args))

    def column(j):
        v = jnp.zeros((n, d), x.dtype).at[:, j].set(1)
        return jax.jvp(grad_f, (x,), (v,))[1]  # (n, d): column j of each block

    cols = lax.map(column, jnp.arange(d), batch_size=chunk_size)  # (d, n, d)
    blocks = jnp.transpose(cols, (1, 2, 0))  # blocks[i, :, j] = H_i e_j
    return 0.5 * (blocks + jnp.swapaxes(blocks, 1, 2))


def block_coupling(
    f: Callable, x: Float[Array | np.ndarray, "n d"], *, args=(), key=None, num_probes: int = 4
) -> float:
    """Largest relative off-block response of the Hessian of ``f(x, *args)``, ``x`` of shape ``(n, d)``.

    Each probe splits the rows of ``x`` at random into halves ``S`` and ``S^c``, draws ``v``
    supported on ``S`` and measures ``max_{k in S^c} |(H v)_k| / max |H v|``; the result is the
    largest over ``num_probes`` probes. An exactly block-diagonal Hessian (a mean of per-sample
    terms) gives ``0`` (the off-block products are exact zeros); batch coupling (train-mode
    BatchNorm, in-batch negatives, covariance terms) gives a value of order one. A coupling
    between any two rows falls across the split with probability 1/2 per probe, so it escapes
    detection with probability at most ``2^-num_probes``. Use it to *verify* block structure
    before :func:`block_diagonal_hessian` or :func:`blockwise_extreme_eigenvalues`. The products
    are taken on the linearised gradient (:func:`linearized_hvp`), in one batch.
    """
    check_rank(x, "x", 2)
    n_probes = check_int(num_probes, "num_probes")
    if jnp.shape(x)[0] < 2:
        raise ValueError(f"`x` needs at least 2 rows to test block coupling; got {jnp.shape(x)[0]}.")
    return off_block_response(
        linearized_hvp(f, x, args=args), jnp.shape(x), jnp.result_type(x), default_key(key), n_probes
    )[0]


def off_block_response(lin, shape, dtype, key, num_probes: int, stop_above: float | None = None) -> tuple[float, int]:
    """:func:`block_coupling`'s measure for a linear map ``lin`` on arrays of ``shape`` ``(n, d)``: ``(coupling, probes)``.

    The probes run one at a time (one product each; on the CPU two products batched with ``vmap``
    cost more than two in turn). With ``stop_above``, the probing stops at the first probe whose
    response exceeds it: the answer to "is the coupling above ``stop_above``?" is then settled, and
    the value returned is that probe's (a lower bound on the maximum over all ``num_probes``).
    ``probes`` is the number of products taken.
    """
    best, used = 0.0, 0
    for k in jax.random.split(key, num_probes):
        response, scale = (float(a) for a in jax.device_get(_split_probe(lin, k, tuple(shape), jnp.dtype(dtype))))
        used += 1
        if not (math.isfinite(response) and math.isfinite(scale)):
            raise FloatingPointError("the Hessian-vector products of the block-coupling probes are not finite.")
        best = max(best, response / scale if scale > 0 else 0.0)
        if stop_above is not None and best > stop_above:
            break
    return best, used


@functools.partial(jax.jit, static_argnums=(2, 3))
def _split_probe(lin, key, shape, dtype):
    """``(max_{rows not in S} |(H v)_i|, max |H v|)`` for ``v`` random on a random half ``S`` of the rows."""
    n, d = shape
    k1, k2 = jax.random.split(key)
    inside = jax.random.permutation(k1, n) < n // 2  # a random half of the rows (n >= 2: both halves)
    v = jnp.where(inside[:, None], jax.random.normal(k2, (n, d), dtype), 0)
    hv = lin(v)
    return jnp.max(jnp.where(inside[:, None], 0, jnp.abs(hv))), jnp.max(jnp.abs(hv))
