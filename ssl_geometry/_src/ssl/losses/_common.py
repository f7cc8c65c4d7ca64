"""Shared pieces of the loss families: argument checks, norm floors, the finiteness guard."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ssl_geometry._src import ops as _ops
from ssl_geometry._src.checks import (
    check_finite,
    check_min_batch,
    check_positive,
    check_rank,
    check_same_shape,
    is_concrete,
)

__all__ = [
    "EPS_TF_L2_NORMALIZE",
    "EPS_TORCH_COSINE",
    "EPS_TORCH_NORMALIZE",
    "check_pair",
    "finite_loss",
    "off_diagonal_mask",
    "positive",
    "sg",
    "unit_interval",
]

sg = jax.lax.stop_gradient

# Norm floors of the reference implementations (see each loss's docstring).
EPS_TORCH_COSINE = 1e-8  # torch.nn.functional.cosine_similarity
EPS_TORCH_NORMALIZE = 1e-12  # torch.nn.functional.normalize
EPS_TF_L2_NORMALIZE = 1e-6  # tf.math.l2_normalize: rsqrt(max(|x|^2, 1e-12))


def check_pair(a, b, name_a: str, name_b: str, min_batch: int = 1, why: str = "") -> None:
    """Both ``(n, k)``, same shape, ``n >= min_batch``, ``k >= 1``, finite when concrete."""
    check_rank(a, name_a, 2)
    check_rank(b, name_b, 2)
    check_same_shape(a, b, name_a, name_b)
    check_min_batch(a, name_a, max(min_batch, 1), why)
    if jnp.shape(a)[1] < 1:
        raise ValueError(f"`{name_a}` must have at least one feature; got shape {tuple(jnp.shape(a))}.")
    check_finite(a, name_a)  # concrete inputs only: a no-op under jit/grad/vmap tracing
    check_finite(b, name_b)


def positive(value, name: str, *, strict: bool = True):
    """Check a hyper-parameter ``> 0`` (``>= 0``): eagerly if concrete, by ``error_if`` if traced."""
    check_positive(value, name, strict=strict)
    return _ops.check_positive_traced(value, name, strict=strict)


def unit_interval(value, name: str):
    """Check a hyper-parameter in ``[0, 1]``: eagerly if concrete, by ``error_if`` if traced."""
    check_positive(value, name, strict=False)
    if is_concrete(value) and float(value) > 1.0:
        raise ValueError(f"`{name}` must lie in [0, 1]; got {value!r}.")
    return _ops.check_unit_interval_traced(value, name)


def off_diagonal_mask(k: int, dtype):
    """``1 - I_k``."""
    return 1.0 - jnp.eye(k, dtype=dtype)


def finite_loss(loss, name: str, inputs, degree: int | None = None):
    """:func:`ssl_geometry.ops.check_finite_result` with a message saying what overflowed.

    ``degree`` is the loss's degree of homogeneity in the input scale (``None`` for
    scale-invariant losses): a degree-``p`` loss of inputs of size ``s`` is ``~ s^p``
    and overflows the dtype once ``s^p`` exceeds its largest finite value.
    """
    if degree is None:
        why = "This is a numerical failure of the loss; please report it."
    else:
        why = (
            f"The loss grows as (input scale)^{degree} and exceeded the largest finite value "
            f"of {jnp.result_type(loss)} (a documented limit): rescale the inputs or use float64."
        )
    return _ops.check_finite_result(loss, f"`{name}` loss", inputs, why)
