"""Input validation shared by the library.

Every public function checks its arguments *outside* ``jit`` where it can (shapes
and ranks are static, so these checks also work on tracers) and raises a
:class:`ValueError` / :class:`TypeError` that names the argument and says what
was expected. Value checks (finiteness) only run on concrete arrays.
"""

from __future__ import annotations

import importlib
import inspect
from types import ModuleType
from typing import Collection, Sequence

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "check_arity",
    "check_choice",
    "check_int",
    "check_finite",
    "check_last_dim",
    "check_min_batch",
    "check_positive",
    "check_rank",
    "check_same_shape",
    "is_concrete",
    "optional_import",
]

#: The extra that installs each optional package the library imports on use (pyproject.toml).
EXTRA_OF = {
    "tensorflow": "data",
    "tensorflow_datasets": "data",
    "orbax": "data",
    "ml_collections": "data",
    "tqdm": "data",
    "sklearn": "data",
    "safetensors": "data",
    "tokenizers": "data",
}


class _OnUse:
    """A module imported by :func:`optional_import` at its first attribute access."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr):
        return getattr(optional_import(self._name), attr)

    def __repr__(self):
        return f"<{self._name}, imported on first use>"


def optional_import(name: str, *, on_use: bool = False) -> ModuleType:
    """Import ``name`` (e.g. ``"tensorflow_datasets"``, ``"safetensors.numpy"``), a package outside the core.

    ``pip install ssl_geometry`` brings the pure library only; training data, checkpoints and pretrained
    weights need the ``data`` extra (:data:`EXTRA_OF`). A module that needs such a package imports it with
    this, where it is used, so that ``import ssl_geometry`` works without it. With ``on_use=True`` the
    result is a stand-in that imports the package at its first attribute access (a module-level
    ``ocp = optional_import("orbax.checkpoint", on_use=True)``).

    Raises:
      ImportError: the package is not installed; the message names it and the extra that installs it.
      ValueError: ``name`` is not a package of :data:`EXTRA_OF`.

    Example:
      >>> optional_import("tensorflow_datasets", on_use=True)
      <tensorflow_datasets, imported on first use>
      >>> optional_import("numpy")  # doctest: +ELLIPSIS
      Traceback (most recent call last):
      ...
      ValueError: `name` must be a package of one of the extras (ml_collections, orbax, ..., tqdm); got 'numpy'.
    """
    top = name.split(".")[0]
    if top not in EXTRA_OF:
        raise ValueError(
            f"`name` must be a package of one of the extras ({', '.join(sorted(EXTRA_OF))}); got {name!r}."
        )
    if on_use:
        return _OnUse(name)  # type: ignore[return-value]
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name is None or err.name.split(".")[0] != top:
            raise  # the package is there but one of its own imports failed: its message says which
        extra = EXTRA_OF[top]
        raise ImportError(
            f"`{top}` is not installed: it comes with ssl_geometry's `{extra}` extra "
            f"(pip install 'ssl_geometry[{extra}]', or pip install -e '.[{extra}]' from a "
            "clone); the core install has the pure library only."
        ) from err


def is_concrete(x) -> bool:
    """True when ``x`` holds values (not a tracer inside jit/grad/vmap).

    The library's one test for a tracer (``jax.core.Tracer``, public in JAX 0.10 and not among the
    ``jax.core`` names that JAX moves to ``jax.extend.core``, which has no ``Tracer``): value checks
    call this instead of repeating it.
    """
    return not isinstance(x, jax.core.Tracer)


def check_rank(x, name: str, ranks: int | Sequence[int]) -> None:
    """Raise ``ValueError`` unless ``x.ndim`` is one of ``ranks``."""
    ranks = (ranks,) if isinstance(ranks, int) else tuple(ranks)
    ndim = jnp.ndim(x)
    if ndim not in ranks:
        want = " or ".join(str(r) for r in ranks)
        raise ValueError(f"`{name}` must have rank {want}; got shape {tuple(jnp.shape(x))} (rank {ndim}).")


def check_last_dim(x, name: str, dim: int) -> None:
    """Raise ``ValueError`` unless the trailing dimension of ``x`` equals ``dim``."""
    shape = tuple(jnp.shape(x))
    if not shape or shape[-1] != dim:
        raise ValueError(f"`{name}` must have trailing dimension {dim}; got shape {shape}.")


def check_same_shape(a, b, name_a: str, name_b: str) -> None:
    """Raise ``ValueError`` unless ``a`` and ``b`` have identical shapes."""
    if jnp.shape(a) != jnp.shape(b):
        raise ValueError(
            f"`{name_a}` and `{name_b}` must have the same shape; got {tuple(jnp.shape(a))} and {tuple(jnp.shape(b))}."
        )


def check_min_batch(x, name: str, minimum: int, why: str = "") -> None:
    """Raise ``ValueError`` when the leading (batch) axis of ``x`` is below ``minimum``."""
    n = jnp.shape(x)[0] if jnp.ndim(x) else 0
    if n < minimum:
        extra = f" ({why})" if why else ""
        raise ValueError(f"`{name}` needs a batch of at least {minimum} samples{extra}; got {n}.")


def check_finite(x, name: str) -> None:
    """Raise ``FloatingPointError`` if a concrete ``x`` holds NaN or inf (no-op under tracing)."""
    for leaf in jax.tree_util.tree_leaves(x):
        if is_concrete(leaf) and jnp.issubdtype(jnp.result_type(leaf), jnp.inexact):
            arr = np.asarray(leaf)
            if not np.all(np.isfinite(arr)):
                bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
                raise FloatingPointError(f"`{name}` contains {bad} non-finite value(s) (NaN or inf).")


def check_positive(value, name: str, *, strict: bool = True) -> None:
    """Raise ``ValueError`` unless a Python/concrete scalar is > 0 (or >= 0)."""
    if not is_concrete(value):
        return
    v = float(value)
    ok = v > 0 if strict else v >= 0
    if not ok or not np.isfinite(v):
        rel = "> 0" if strict else ">= 0"
        raise ValueError(f"`{name}` must be finite and {rel}; got {value!r}.")


def check_choice(value: str, name: str, choices: Collection[str]) -> None:
    """Raise ``ValueError`` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"Unknown {name} {value!r}; expected one of {sorted(choices)}.")


def check_int(value, name: str, minimum: int = 1) -> int:
    """``int(value)`` when ``value`` is an integer (not a bool) ``>= minimum``; else ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"`{name}` must be an integer >= {minimum}; got {value!r}.")
    return int(value)


def check_arity(fn, name: str, n: int, expected: str) -> None:
    """Raise ``TypeError`` naming ``expected`` unless ``fn`` accepts ``n`` positional arguments.

    Read from ``inspect.signature(fn)`` (bound to ``n`` placeholders, nothing is called), so a function
    written for another convention -- ``lambda p: ...`` where ``loss_fn(params, batch, args)`` is
    expected -- is refused before JAX traces it. A callable whose signature cannot be read (some
    builtins and C extensions) passes: it is called as it is, and a wrong arity fails there.

    Example:
      >>> check_arity(lambda p, batch, args: 0.0, "f", 3, "f(params, batch, args)")
      >>> check_arity(lambda p: 0.0, "f", 3, "f(params, batch, args)")
      Traceback (most recent call last):
      ...
      TypeError: `f` must be f(params, batch, args) (called with 3 positional arguments); got <lambda>(p): too many positional arguments.
    """
    if not callable(fn):
        raise TypeError(f"`{name}` must be a function {expected}; got {type(fn).__name__}.")
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # no readable signature: leave it to the call
        return
    try:
        sig.bind(*range(n))
    except TypeError as err:
        label = getattr(fn, "__name__", type(fn).__name__)
        raise TypeError(
            f"`{name}` must be {expected} (called with {n} positional arguments); got {label}{sig}: {err}."
        ) from None
