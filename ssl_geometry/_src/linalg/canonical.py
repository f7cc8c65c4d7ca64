"""Closure conversion: a function split into its program (static, hashable) and the arrays it holds.

The library has one caching policy (docs/architecture.md, "Compiled code"): compiled code is cached
by ``jax.jit`` alone, by the identity of the jitted function and the ``==``/``hash`` of its static
arguments; the arrays an operator needs are arguments of that code (``matvec(v, *args)``). A
function the caller hands in as a closure (``lambda v: A @ v``, new on every call) is therefore
*closure-converted* before it reaches a jitted solver: :func:`closure_convert` splits it into

* ``canon``, a hashable callable that holds what decides the program: the code objects of ``fn``
  and of every function reached through closure cells, defaults, ``functools.partial`` /
  ``jax.tree_util.Partial`` arguments, bound methods, frozen dataclass fields, the attributes of
  instances of plain classes (no ``__eq__``, ``__hash__`` or ``__new__`` of their own) and pytree
  containers; every other value found there (Python scalars, NumPy arrays, modules, objects),
  compared by ``==`` (by identity when it has no hash); and the tree structure of the arguments;
* ``consts``, the JAX arrays found there, in order.

A list or dict that holds no JAX array is compared by its contents (what it holds when the function
is converted is part of the program: a configuration list made afresh with each head, ``**kwargs``)
and passed on as the caller's own object; one that holds arrays is rebuilt around ``consts``. A
function that appends to a list it closes over while it is traced is thus a new program the next
time (count traces through a module's global instead).

``canon(consts, *args)`` rebuilds ``fn`` around ``consts`` and calls it. Two closures of the same
code over new arrays (of any values) give equal ``canon`` objects, so code jitted with ``canon``
static and ``consts`` as arguments compiles once per shape; the arrays are arguments, never
constants baked into the program. A value that is not a JAX array is part of the program: a new
Python scalar, NumPy array or host callback in the closure compiles anew, correctly (code may use
such values statically, as shapes or indices). A function reached through a module's globals is
part of the program by name, as Python resolves it.

A run-time type checker's wrapper (jaxtyping's ``jaxtyped``, beartype's generated code, which the
tests' import hook puts afresh on every function defined inside another) is converted as the
function it wraps: the caller's own eager call is checked, the compiled code is not checked again.

``canon`` runs ``fn`` with the library's in-jit finiteness checks off
(:func:`ssl_geometry._src.ops.loop_reports_non_finite`): the solvers that call it report a
non-finite product themselves.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import types
from typing import Callable

import jax
import numpy as np

from ssl_geometry._src.ops import loop_reports_non_finite

__all__ = ["closure_convert"]


class _Id:
    """A value compared by identity (it has no hash, or it is a module's globals)."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __eq__(self, other):
        return type(other) is _Id and other.obj is self.obj

    def __hash__(self):
        return id(self.obj)


class _NumpyValue:
    """A NumPy array as a static value: equal when dtype, shape and bytes are."""

    __slots__ = ("array", "_key")

    def __init__(self, array):
        self.array = array
        self._key = (array.dtype.str, array.shape, array.tobytes())

    def __eq__(self, other):
        return type(other) is _NumpyValue and other._key == self._key

    def __hash__(self):
        return hash(self._key)


class _Held:
    """The caller's own object, carried along but left out of comparisons (its contents are compared)."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __eq__(self, other):
        return type(other) is _Held

    def __hash__(self):
        return 0


def _static(value):
    if isinstance(value, np.ndarray):
        return ("value", _NumpyValue(value))
    try:
        hash(value)
    except TypeError:
        return ("value", _Id(value))
    return ("value", type(value), value)


def _is_leaf(treedef) -> bool:
    return treedef.num_nodes == 1 and treedef.num_leaves == 1


def _skeleton(obj, consts: list, active: set):
    """The hashable description of ``obj``; its JAX arrays appended to ``consts`` in order."""
    if isinstance(obj, jax.Array):
        consts.append(obj)
        return ("array",)
    if id(obj) in active:  # a function that reaches itself: kept as it is
        return ("value", _Id(obj))
    active.add(id(obj))
    try:
        return _compound(obj, consts, active)
    finally:
        active.discard(id(obj))


def _compound(obj, consts, active):
    def sub(value):
        return _skeleton(value, consts, active)

    if isinstance(obj, functools.partial):  # jax.tree_util.Partial included
        return (
            "partial",
            type(obj),
            sub(obj.func),
            tuple(sub(a) for a in obj.args),
            tuple((k, sub(v)) for k, v in sorted(obj.keywords.items())),
        )
    if isinstance(obj, types.FunctionType):
        while _checker_wrapper(obj):
            obj = obj.__wrapped__
        cells = []
        for cell in obj.__closure__ or ():
            try:
                cells.append(sub(cell.cell_contents))
            except ValueError:  # an empty cell (a name assigned later in the enclosing scope)
                cells.append(("empty",))
        kwdefaults = tuple((k, sub(v)) for k, v in sorted((obj.__kwdefaults__ or {}).items()))
        defaults = None if obj.__defaults__ is None else tuple(sub(v) for v in obj.__defaults__)
        return ("function", obj.__code__, _Id(obj.__globals__), obj.__name__, defaults, kwdefaults, tuple(cells))
    if isinstance(obj, types.MethodType):
        return ("method", sub(obj.__func__), sub(obj.__self__))
    leaves, treedef = jax.tree_util.tree_flatten(obj)
    if not _is_leaf(treedef):
        before = len(consts)
        node = ("tree", treedef, tuple(sub(leaf) for leaf in leaves))
        if len(consts) == before and isinstance(obj, (list, dict)):
            return ("same", node, _Held(obj))  # no arrays: compared by its contents, passed on as itself
        return node
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type) and obj.__dataclass_params__.frozen:
        fields = tuple(f.name for f in dataclasses.fields(obj))
        return ("dataclass", type(obj), fields, tuple(sub(getattr(obj, f)) for f in fields))
    if _plain_instance(obj):
        names = tuple(sorted(vars(obj)))
        return ("object", type(obj), names, tuple(sub(vars(obj)[f]) for f in names))
    return _static(obj)


def _checker_wrapper(fn) -> bool:
    """A run-time type checker's wrapper around ``fn.__wrapped__`` (jaxtyping's ``jaxtyped``, beartype's generated
    code; the tests' import hook puts them on functions defined inside other functions, afresh on every call)."""
    filename = fn.__code__.co_filename
    return isinstance(getattr(fn, "__wrapped__", None), types.FunctionType) and (
        filename.startswith("<@beartype(") or f"{os.sep}jaxtyping{os.sep}" in filename
    )


def _plain_instance(obj) -> bool:
    """An instance of a plain Python class compared by identity: converted attribute by attribute."""
    cls = type(obj)
    return (
        type(cls) is type
        and cls.__eq__ is object.__eq__
        and cls.__hash__ is object.__hash__
        and cls.__new__ is object.__new__
        and isinstance(getattr(obj, "__dict__", None), dict)
        and not hasattr(cls, "__slots__")
    )


def _rebuild(node, consts):
    """``obj`` from its skeleton, with the next arrays of the iterator ``consts`` in place of its own."""
    kind = node[0]
    if kind == "array":
        return next(consts)
    if kind == "value":
        value = node[-1]
        return value.obj if isinstance(value, _Id) else value.array if isinstance(value, _NumpyValue) else value
    if kind == "same":
        return node[2].obj
    if kind == "partial":
        _, cls, func, args, keywords = node
        return cls(
            _rebuild(func, consts),
            *(_rebuild(a, consts) for a in args),
            **{k: _rebuild(v, consts) for k, v in keywords},
        )
    if kind == "function":
        _, code, globs, name, defaults, kwdefaults, cells = node
        defaults = None if defaults is None else tuple(_rebuild(v, consts) for v in defaults)
        closure = tuple(types.CellType() if c == ("empty",) else types.CellType(_rebuild(c, consts)) for c in cells)
        fn = types.FunctionType(code, globs.obj, name, defaults, closure or None)
        if kwdefaults:
            fn.__kwdefaults__ = {k: _rebuild(v, consts) for k, v in kwdefaults}
        return fn
    if kind == "method":
        func = _rebuild(node[1], consts)
        return types.MethodType(func, _rebuild(node[2], consts))
    if kind == "tree":
        return jax.tree_util.tree_unflatten(node[1], [_rebuild(c, consts) for c in node[2]])
    _, cls, fields, values = node  # "dataclass" (its fields) or "object" (its __dict__)
    out = object.__new__(cls)
    if kind == "object":
        out.__dict__.update({f: _rebuild(v, consts) for f, v in zip(fields, values)})
        return out
    for f, v in zip(fields, values):
        object.__setattr__(out, f, _rebuild(v, consts))
    return out


class _Converted:
    """``canon(consts, *args)``: the converted function, equal for equal programs (see the module docstring).

    ``args`` may be given as a pytree or as its flat leaves: they are read leaf by leaf and put back
    into the tree structure recorded by :func:`closure_convert`.
    """

    __slots__ = ("skeleton", "in_tree", "_hash", "__weakref__")

    def __init__(self, skeleton, in_tree):
        self.skeleton, self.in_tree = skeleton, in_tree
        self._hash = hash((skeleton, in_tree))

    def __eq__(self, other):
        return (
            type(other) is _Converted
            and other._hash == self._hash
            and other.in_tree == self.in_tree
            and other.skeleton == self.skeleton
        )

    def __hash__(self):
        return self._hash

    def __call__(self, consts, *args):
        fn = _rebuild(self.skeleton, iter(consts))
        args = jax.tree_util.tree_unflatten(self.in_tree, jax.tree_util.tree_leaves(args))
        with loop_reports_non_finite():
            return fn(*args)


def closure_convert(fn: Callable, *args) -> tuple[Callable, tuple, object]:
    """``(canon, consts, out_info)`` with ``canon(consts, *args) == fn(*args)``: ``fn`` closure-converted.

    ``canon`` compares equal for every function of the same code and the same non-array values
    (module docstring), whatever arrays it holds; ``consts`` are those arrays; ``out_info`` is the
    output's ``jax.ShapeDtypeStruct`` tree (``jax.eval_shape``: one abstract trace, no FLOPs). ``args``
    are example arguments (arrays, ``jax.ShapeDtypeStruct``s or pytrees of them); their tree
    structure is recorded, so ``canon`` may later be called with their flat leaves.

    Example:
      >>> import jax.numpy as jnp
      >>> fns = [(lambda v, A=A: A @ v) for A in (jnp.eye(2), 2 * jnp.eye(2))]
      >>> (c0, k0, _), (c1, k1, _) = (closure_convert(f, jnp.ones(2)) for f in fns)
      >>> c0 == c1, c1(k1, jnp.ones(2)).tolist()
      (True, [2.0, 2.0])
    """
    consts: list = []
    in_tree = jax.tree_util.tree_structure(args)
    canon = _Converted(_skeleton(fn, consts, set()), in_tree)
    return canon, tuple(consts), jax.eval_shape(canon, tuple(consts), *args)
