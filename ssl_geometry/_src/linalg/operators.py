"""Shared pieces of the curvature tools: dtype and argument checks, the batched views of a matvec.

A *matvec* is ``matvec(v, *args) -> A v`` on flat vectors ``(dim,)``; the solvers run
a *batched* matvec ``(B, dim) -> (B, dim)`` internally. :class:`SingleAsBatch` and
:class:`Vmapped` make one from the other; both are frozen dataclasses, so they hash
by the wrapped function and can be static arguments of ``jax.jit``.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp

from ssl_geometry._src.linalg.canonical import closure_convert

__all__: list[str] = []


def default_float():
    return jnp.float64 if jax.config.read("jax_enable_x64") else jnp.float32


def as_dtype(dtype):
    dtype = default_float() if dtype is None else jnp.dtype(dtype)
    if dtype not in (jnp.dtype(jnp.float32), jnp.dtype(jnp.float64)):
        raise ValueError(f"`dtype` must be float32 or float64; got {dtype}.")
    if dtype == jnp.dtype(jnp.float64) and not jax.config.read("jax_enable_x64"):
        raise ValueError("`dtype=float64` needs `jax.config.update('jax_enable_x64', True)`.")
    return jnp.dtype(dtype)


def check_callable(fn, name: str) -> None:
    if not callable(fn):
        raise TypeError(f"`{name}` must be callable (a matvec `v, *args -> A v`); got {type(fn).__name__}.")


def default_key(key):
    return jax.random.PRNGKey(0) if key is None else key


def check_scalar_fn(f, *example_args) -> None:
    out = jax.eval_shape(f, *example_args)
    if not hasattr(out, "shape") or out.shape != ():
        shape = getattr(out, "shape", type(out).__name__)
        raise ValueError(f"`f` must return a scalar; got output of shape {shape}.")


@dataclasses.dataclass(frozen=True)
class SingleAsBatch:
    """``(1, n) -> (1, n)`` view of a single-vector matvec (hashable: jit-static)."""

    fn: Callable

    def __call__(self, V, *args):
        return self.fn(V[0], *args)[None]


@dataclasses.dataclass(frozen=True)
class Vmapped:
    """``(B, n) -> (B, n)``: a single-vector matvec vmapped over rows (hashable)."""

    fn: Callable

    def __call__(self, V, *args):
        return jax.vmap(lambda v: self.fn(v, *args))(V)


def prepare_matvec(batched_matvec, v_shape, dtype, args, *, name: str = "matvec", single: bool = False):
    """``(canon, args')``: the batched matvec closure-converted, and the arguments it takes.

    ``canon(V, *args') == batched_matvec(V, *args)``, where ``canon`` compares equal for every
    matvec of the same code (``linalg.canonical.closure_convert``) and ``args' = (consts, leaves)``
    holds the arrays the matvec closes over and the leaves of ``args``. Raises ``ValueError``
    unless the matvec returns ``V``'s shape as a float (traced abstractly: no FLOPs). ``single`` reports the shapes of the user's
    single-vector matvec (``(dim,)``) instead of the internal ``(1, dim)``.
    """
    spec = jax.ShapeDtypeStruct(tuple(v_shape), jnp.dtype(dtype))
    try:
        canon, consts, out = closure_convert(batched_matvec, spec, *args)
    except (TypeError, ValueError) as err:
        shown = v_shape[1:] if single else v_shape
        raise ValueError(
            f"`{name}` failed on an input of shape {shown} ({dtype}) with the given `args`: {err}"
        ) from err
    shape = getattr(out, "shape", None)
    if shape != tuple(v_shape):
        got, want = (shape, v_shape)
        if single and shape is not None and len(shape) >= 1:
            got, want = shape[1:], v_shape[1:]
        raise ValueError(
            f"`{name}` must return an array of the input's shape {tuple(want)}; got "
            f"{got if got is not None else type(out).__name__}."
        )
    out_dtype = getattr(out, "dtype", None)
    if out_dtype is None or not jnp.issubdtype(out_dtype, jnp.floating):
        raise ValueError(f"`{name}` must return floating-point values; got dtype {out_dtype}.")
    return _FlatCall(canon), (consts, tuple(jax.tree_util.tree_leaves(args)))


@dataclasses.dataclass(frozen=True)
class _FlatCall:
    """``(V, consts, leaves) -> canon(consts, V, *leaves)``: the solvers' convention ``matvec(V, *args)``.

    The arguments travel as flat leaves, so the compiled solver's cache key does not hold the
    tree structure of the caller's arguments (a ``Partial``'s Python function, for one).
    """

    canon: Callable

    def __call__(self, V, consts, leaves):
        return self.canon(consts, V, *leaves)
