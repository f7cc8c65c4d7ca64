"""Named activation functions (selectable by string or passed as a callable).

Implementation of :mod:`ssl_geometry.activations`; the conventions and formulas are in its docstring.
"""
from typing import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from ssl_geometry._src.ops import ArrayIn

from ssl_geometry._src.checks import check_choice

__all__ = ["ACTIVATIONS", "PIECEWISE_LINEAR", "get"]


def _identity(x: Float[ArrayIn, "..."]) -> Float[ArrayIn, "..."]:
    """``x``."""
    return x


def _gelu(x: Float[ArrayIn, "..."]) -> Float[Array, "..."]:
    """Exact GELU ``x Phi(x)`` (PyTorch ``nn.GELU()``)."""
    return jax.nn.gelu(x, approximate=False)


def _gelu_tanh(x: Float[ArrayIn, "..."]) -> Float[Array, "..."]:
    """Tanh-approximated GELU (PyTorch ``nn.GELU(approximate="tanh")``)."""
    return jax.nn.gelu(x, approximate=True)


def _leaky_relu(x: Float[ArrayIn, "..."]) -> Float[Array, "..."]:
    """``max(x, 0.01 x)`` (PyTorch default slope)."""
    return jax.nn.leaky_relu(x, negative_slope=0.01)


ACTIVATIONS: dict[str, Callable] = {
    "identity": _identity,
    "linear": _identity,
    "relu": jax.nn.relu,
    "gelu": _gelu,
    "gelu_tanh": _gelu_tanh,
    "swish": jax.nn.silu,
    "silu": jax.nn.silu,
    "tanh": jnp.tanh,
    "softplus": jax.nn.softplus,
    "elu": jax.nn.elu,
    "leaky_relu": _leaky_relu,
    "sigmoid": jax.nn.sigmoid,
}

#: Activations whose second derivative is zero almost everywhere (the head's
#: interaction term M vanishes away from kinks; docs/theory.md, section "Linear, ReLU and smooth heads").
PIECEWISE_LINEAR = frozenset({"identity", "linear", "relu", "leaky_relu"})


def get(activation: str | Callable) -> Callable:
    """Return the activation callable for a name in :data:`ACTIVATIONS` or a callable."""
    if callable(activation):
        return activation
    if not isinstance(activation, str):
        raise TypeError(f"`activation` must be a name or a callable; got {type(activation).__name__}.")
    check_choice(activation.lower(), "activation", ACTIVATIONS)
    return ACTIVATIONS[activation.lower()]
