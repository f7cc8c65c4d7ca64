"""Numerics shared by every layer: overflow-safe norms, dtype upcasting, checks inside ``jit``.

Implementation of :mod:`ssl_geometry.ops`; the conventions and formulas are in its docstring.
"""

import contextlib
import contextvars
from typing import Union

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Float, Inexact, ScalarLike

from ssl_geometry._src.checks import is_concrete

__all__ = [
    "ArrayIn",
    "check_finite_result",
    "check_positive_traced",
    "check_unit_interval_traced",
    "compute_dtype",
    "l2_normalize",
    "safe_scale",
    "upcast",
]

_HALF = (jnp.float16, jnp.bfloat16)

#: What array arguments accept: a JAX array (or tracer) or a NumPy array. Use as
#: ``Float[ArrayIn, "n k"]`` in the annotations that the test-time type checker reads.
ArrayIn = Union[jax.Array, np.ndarray]


def compute_dtype(*xs) -> jnp.dtype:
    """The dtype a loss computes in: ``result_type(*xs)`` promoted to at least float32.

    ``float16``/``bfloat16`` (and integer) inputs give ``float32``; ``float32``
    stays ``float32``; ``float64`` stays ``float64``.

    Example:
      >>> import jax.numpy as jnp
      >>> compute_dtype(jnp.ones(2, jnp.float16)), compute_dtype(jnp.ones(2, jnp.float64))
      (dtype('float32'), dtype('float64'))
    """
    dt = jnp.result_type(*xs)
    if not jnp.issubdtype(dt, jnp.floating) or dt in _HALF:
        return jnp.dtype(jnp.float32)
    return jnp.promote_types(dt, jnp.float32)


def upcast(*xs):
    """Cast every array of ``xs`` to :func:`compute_dtype` of all of them (a tuple).

    Gradients flow back through the cast, so a float16 input gets a float16 gradient.
    """
    dt = compute_dtype(*xs)
    return tuple(jnp.asarray(x).astype(dt) for x in xs)


def safe_scale(x: Inexact[ArrayIn, "..."], axis=-1) -> Inexact[ArrayIn, "..."]:
    """``s = sg(max |x|)`` over ``axis`` (keepdims), with ``s = 1`` where it is 0 or not finite.

    Dividing by ``s`` brings every entry into ``[-1, 1]``, so sums of squares of
    ``x / s`` cannot overflow; the stop-gradient is exact for any function that
    is homogeneous in the rescaling it undoes (see :func:`l2_normalize`).
    """
    s = jax.lax.stop_gradient(jnp.max(jnp.abs(x), axis=axis, keepdims=True))
    return jnp.where((s > 0) & jnp.isfinite(s), s, jnp.ones_like(s))


def l2_normalize(x: Float[ArrayIn, "*batch k"], eps: ScalarLike = 1e-12) -> Float[ArrayIn, "*batch k"]:
    """``x / max(|x|, eps)`` along the last axis, without overflow or underflow.

    With ``s = max_i |x_i|`` (stop-gradient, :func:`safe_scale`) and ``y = x / s``,

        x / max(|x|, eps) = x / (s * max(|y|, eps / s)),

    an identity for every fixed ``s > 0``, so value *and* gradient are exact (one
    division of ``x`` itself, so the rounding is that of ``x / |x|``). The
    ``max`` form has a finite gradient (``I / eps``) at ``x = 0``, where
    ``x / |x|`` gives NaN; this is PyTorch's ``F.normalize`` (``eps = 1e-12``),
    ``F.cosine_similarity`` (``1e-8``) or ``tf.math.l2_normalize`` (``1e-6``)
    depending on ``eps``. Since ``1 <= |y| <= sqrt(k)`` for any non-zero row, ``|y|^2``
    neither overflows nor underflows in any float dtype, and ``eps / s`` is never squared.

    Args:
      x: array ``(..., k)`` of any float dtype (half precision is computed in float32
        and returned in the input dtype).
      eps: norm floor ``> 0``.
    """
    out_dtype = jnp.result_type(x)
    (xc,) = upcast(x)
    s = safe_scale(xc)
    y = xc / s
    sq = jnp.sum(y * y, axis=-1, keepdims=True)
    floor = jnp.asarray(eps, xc.dtype) / s  # compared with |y|, never squared: eps / s may be huge
    pos = sq > 0
    norm_y = jnp.where(pos, jnp.sqrt(jnp.where(pos, sq, 1.0)), 0.0)  # |y|, with a zero (not NaN) gradient at 0
    return (xc / (s * jnp.maximum(norm_y, floor))).astype(out_dtype)


def _error_if(value, bad, msg: str, eager_error: type, inside: str = " (checked inside jit)"):
    """:func:`equinox.error_if` with ``msg`` (plus ``inside``) under ``jit``; outside it, ``eager_error(msg)``.

    Outside ``jit`` (a value traced by ``grad`` or ``vmap`` only) equinox runs the check at once and
    raises its ``EquinoxRuntimeError``, whose text opens with a stack banner and debugging advice;
    here the caller gets the exception a concrete value would have raised, the message alone.
    """
    try:
        return eqx.error_if(value, bad, msg + inside)
    except RuntimeError as err:  # equinox's run-time or trace-time error carrying our message
        if msg not in str(err):
            raise
        raise eager_error(msg if msg.endswith(".") else msg + ".") from None


def check_positive_traced(value, name: str, *, strict: bool = True):
    """Return ``value``; if it is traced, with an :func:`equinox.error_if` that it is finite and > 0.

    Concrete values are checked eagerly by ``check_positive`` of ``ssl_geometry/_src/checks.py``
    (which raises ``ValueError``); this covers a hyper-parameter passed *into* ``jit``.
    The returned value must be used for the check to run.
    """
    if is_concrete(value):
        return value
    v = jnp.asarray(value)
    bad = ~jnp.isfinite(v) | ((v <= 0) if strict else (v < 0))
    rel = "> 0" if strict else ">= 0"
    return _error_if(v, bad, f"`{name}` must be finite and {rel}", ValueError)


def check_unit_interval_traced(value, name: str):
    """Return ``value``; if it is traced, with an :func:`equinox.error_if` that it lies in ``[0, 1]``."""
    if is_concrete(value):
        return value
    v = jnp.asarray(value)
    bad = ~jnp.isfinite(v) | (v < 0) | (v > 1)
    return _error_if(v, bad, f"`{name}` must lie in [0, 1]", ValueError)


_LOOP_REPORTS = contextvars.ContextVar("ssl_geometry_loop_reports_non_finite", default=False)


@contextlib.contextmanager
def loop_reports_non_finite():
    """While active, *traced* non-finite results pass through :func:`check_finite_result` unchecked.

    For loops that report the first non-finite step themselves (:func:`ssl_geometry.fit`,
    :func:`ssl_geometry.dynamics.gradient_flow`): a run that diverges (its loss overflows from finite
    inputs) is then a reported, flagged run with its step and time, not an exception from inside
    ``jit`` that loses them. Concrete results are still checked. Read at trace time.
    """
    token = _LOOP_REPORTS.set(True)
    try:
        yield
    finally:
        _LOOP_REPORTS.reset(token)


def check_finite_result(result, name: str, inputs=(), why: str = ""):
    """Fail loudly when ``result`` is non-finite although every array in ``inputs`` is finite.

    A non-finite result from finite inputs is a numerical failure of the function
    itself (an overflow of a value that does not fit the dtype, a failed
    factorisation): concrete results raise ``FloatingPointError``; traced ones get an
    :func:`equinox.error_if`. Non-finite *inputs* are let through (NaN in, NaN out),
    so a diverging training run is reported by its loop, not here.

    Returns:
      ``result`` (use it: under ``jit`` the check runs only if its output is used).
    """
    leaves = [jnp.asarray(a) for a in jax.tree_util.tree_leaves(inputs)]
    bad = ~jnp.all(jnp.isfinite(jnp.asarray(result)))
    for a in leaves:
        if jnp.issubdtype(a.dtype, jnp.inexact):
            bad = bad & jnp.all(jnp.isfinite(a))
    extra = f" {why}" if why else ""
    msg = f"{name} is not finite although its inputs are finite.{extra}"
    if is_concrete(bad) and all(is_concrete(a) for a in leaves) and is_concrete(result):
        if bool(bad):
            raise FloatingPointError(msg)
        return result
    if _LOOP_REPORTS.get():  # an enclosing loop reports the non-finite step (see loop_reports_non_finite)
        return result
    return _error_if(result, bad, msg, FloatingPointError, inside="")
