"""Functions keyed by the program they compute, so that a fresh closure does not recompile.

``jax.jit`` caches compiled code by the *identity* of the Python function. A matvec or a loss
written as a new closure on every call (``lambda v: A @ v`` inside a loop) is a new function each
time, so a solver that takes it as a static argument retraces and recompiles on every call.
:func:`canonical` traces ``fn`` once (``jax.jit(fn).trace``; JAX caches that trace for the same
function object) and looks the traced program up by its *structure*:

* the printed jaxpr (primitives, their parameters, shapes and dtypes, scalar literals),
* the abstract values of the flattened inputs (weak types included) and the output tree structure,
* the shapes and dtypes of the arrays ``fn`` closes over, and
* the identity of every parameter whose printed form does not identify it (a Python callable in a
  callback primitive, an object printed with its address).

Two functions with the same structure get the same *canonical function* ``canon(consts, *args)``,
which evaluates the first jaxpr of that structure with the caller's own closed-over arrays
``consts`` and arguments. Closed-over arrays thus become arguments of the compiled code, never
constants baked into it, and jitted code keyed on ``canon`` compiles once per structure.

The trace runs with the library's in-jit finiteness checks off
(:func:`ssl_geometry._src.ops.loop_reports_non_finite`): the solvers that call :func:`canonical`
report a non-finite product themselves, and an ``equinox.error_if`` callback created afresh on
every trace would otherwise make every closure a new structure. A function that contains host
callbacks of its own is keyed by their identity: a fresh closure of it recompiles, correctly.
The trace is taken through a wrapper, so a later ``jax.jit`` of the same function by the caller
is traced anew, with its checks.
"""
from __future__ import annotations

import collections
import dataclasses
import functools
from typing import Callable

import jax
import jax.extend.core as jex
import jax.numpy as jnp
import numpy as np

from ssl_geometry._src.ops import loop_reports_non_finite

__all__: list[str] = []

_MAX_ENTRIES = 128
_MAX_FUNCTIONS = 32  # the caller's functions kept (with what they close over) so a repeated one skips its trace
_STRUCTURES: collections.OrderedDict = collections.OrderedDict()   # structure key -> canonical function
_BY_JAXPR: collections.OrderedDict = collections.OrderedDict()     # id(traced jaxpr) -> (closed jaxpr, key)


@dataclasses.dataclass(frozen=True)
class _Unchecked:
    """``fn`` traced with the library's in-jit finiteness checks off (a function of our own for JAX's cache)."""

    fn: Callable

    def __call__(self, *args):
        with loop_reports_non_finite():
            return self.fn(*args)


@functools.lru_cache(maxsize=_MAX_FUNCTIONS)
def _jitted_cached(fn):
    return jax.jit(_Unchecked(fn))


def _jitted(fn, remember: bool):
    if remember:
        try:
            return _jitted_cached(fn)
        except TypeError:  # an unhashable callable: traced on every call
            pass
    return jax.jit(_Unchecked(fn))


def _opaque(value, out: list) -> None:
    """Collect the parameter values whose printed form hides their identity."""
    if isinstance(value, (jex.Jaxpr, jex.ClosedJaxpr)):
        return  # sub-jaxprs are walked through their equations
    if isinstance(value, (tuple, list)):
        for v in value:
            _opaque(v, out)
    elif isinstance(value, dict):
        for v in value.values():
            _opaque(v, out)
    elif (callable(value) and not isinstance(value, type)) or type(value).__repr__ is object.__repr__:
        out.append(value)


def _walk(jaxpr, out: list) -> None:
    for eqn in jaxpr.eqns:
        for value in eqn.params.values():
            _opaque(value, out)
        for sub in jex.jaxprs_in_params(eqn.params):
            _walk(sub, out)


class _Canonical:
    """``canon(consts, *args)``: the first jaxpr of one structure, evaluated on the caller's arrays."""

    def __init__(self, jaxpr, out_tree):
        # the jaxpr holds its parameters, so the identities in the structure key stay valid
        self.jaxpr, self.out_tree = jaxpr, out_tree

    def __call__(self, consts, *args):
        out = jex.jaxpr_as_fun(jex.ClosedJaxpr(self.jaxpr, list(consts)))(*jax.tree_util.tree_leaves(args))
        return jax.tree_util.tree_unflatten(self.out_tree, out)


def _remember(cache, key, value, size=_MAX_ENTRIES):
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > size:
        cache.popitem(last=False)


def canonical(fn: Callable, *args, remember: bool = True):
    """``(canon, consts, out_info)`` for ``fn(*args)``: ``canon(consts, *args)`` computes ``fn(*args)``.

    ``canon`` is the same object for every function of the same structure (see the module
    docstring); ``consts`` are the arrays ``fn`` closes over; ``out_info`` is the output's
    ``jax.ShapeDtypeStruct`` tree. ``args`` may be arrays, abstract ``jax.ShapeDtypeStruct``s or
    pytrees of them; the shapes and dtypes of their leaves (not their values, nor the tree
    structure: ``canon`` reads the leaves in order) are part of the structure, so two
    ``jax.tree_util.Partial`` maps that differ only in their Python function but trace to the
    same program share one ``canon``.

    ``remember``: keep ``fn`` (and what it closes over) among the last 32 functions traced, so that
    calling again with the same function object skips even the trace. Pass ``False`` for a closure
    made afresh on every call, which would only be held for nothing.

    Example:
      >>> import jax.numpy as jnp
      >>> fns = [(lambda v, A=A: A @ v) for A in (jnp.eye(2), 2 * jnp.eye(2))]
      >>> (c0, k0, _), (c1, k1, _) = (canonical(f, jnp.ones(2)) for f in fns)
      >>> c0 is c1, c1(k1, jnp.ones(2)).tolist()
      (True, [2.0, 2.0])
    """
    traced = _jitted(fn, remember).trace(*args)
    closed = traced.jaxpr
    out_tree = jax.tree_util.tree_structure(traced.out_info)
    hit = _BY_JAXPR.get(id(closed))
    if hit is not None and hit[0] is closed:
        key = hit[1]
    else:
        opaque: list = []
        _walk(closed.jaxpr, opaque)
        consts = tuple((np.shape(c), str(jnp.result_type(c))) for c in closed.consts)
        key = (str(closed.jaxpr), tuple(closed.in_avals), out_tree, consts, tuple(id(o) for o in opaque))
        if remember:  # the trace holds the closed-over arrays: kept only for a function worth remembering
            _remember(_BY_JAXPR, id(closed), (closed, key), _MAX_FUNCTIONS)
    canon = _STRUCTURES.get(key)
    if canon is None:  # the first program of this structure (or one evicted since)
        canon = _Canonical(closed.jaxpr, out_tree)
    _remember(_STRUCTURES, key, canon)
    return canon, tuple(closed.consts), traced.out_info
