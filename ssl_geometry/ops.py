"""Numerics shared by every layer: overflow-safe norms, dtype upcasting, checks inside ``jit``.

One definition each, used by the losses, the heads' converters and the text encoder:

* :func:`l2_normalize` — ``x / max(|x|, eps)`` along the last axis, computed on
  ``x / max_i |x_i|`` so that ``|x|^2`` never overflows (float32 inputs up to
  ``~3e38`` and float16 inputs give unit vectors, not ``0`` or NaN) and never
  underflows to a spurious zero norm.
* :func:`compute_dtype` / :func:`upcast` — half-precision inputs (float16,
  bfloat16) are computed in float32; float32 and float64 are kept.
* :func:`check_positive_traced`, :func:`check_unit_interval_traced`,
  :func:`check_finite_result` — checks on *traced* values (a temperature passed
  into ``jit``, a loss that overflowed) via :func:`equinox.error_if`. Under
  ``jit`` they raise a ``RuntimeError`` (``jax.errors.JaxRuntimeError``) at run
  time whose message names the argument. Outside ``jit`` (a value traced by ``grad`` or
  ``vmap`` alone) they raise what a concrete value raises -- ``ValueError`` for a
  hyper-parameter, ``FloatingPointError`` for a non-finite result -- with the message
  alone, no stack banner. Set the environment variable
  ``EQX_ON_ERROR=nan`` (before starting Python) to get NaN instead and let an
  outer loop report the non-finite step, or ``EQX_ON_ERROR=off`` to drop them. The library's
  own loops (``fit``, ``gradient_flow``) trace inside ``loop_reports_non_finite``: there a
  loss that overflows is reported as the run's first non-finite step, with its step and time.

Also: :func:`safe_scale` (the ``max |x|`` the norms divide by), and :data:`ArrayIn` (``jax.Array`` or
``np.ndarray``), the input array type of the shape annotations (``Float[ArrayIn, "n k"]``).

Example:
  >>> import jax.numpy as jnp
  >>> u = l2_normalize(jnp.array([[3e30, 4e30]], dtype=jnp.float32), 1e-8)
  >>> [round(float(v), 6) for v in u[0]]
  [0.6, 0.8]
"""

from ssl_geometry._src.ops import ArrayIn as ArrayIn
from ssl_geometry._src.ops import check_finite_result as check_finite_result
from ssl_geometry._src.ops import check_positive_traced as check_positive_traced
from ssl_geometry._src.ops import check_unit_interval_traced as check_unit_interval_traced
from ssl_geometry._src.ops import compute_dtype as compute_dtype
from ssl_geometry._src.ops import l2_normalize as l2_normalize
from ssl_geometry._src.ops import safe_scale as safe_scale
from ssl_geometry._src.ops import upcast as upcast

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
