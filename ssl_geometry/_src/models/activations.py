"""Named activation functions with their smoothness class: the one table.

Implementation of :mod:`ssl_geometry.activations`; the conventions and formulas are in its docstring.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from ssl_geometry._src.checks import check_choice
from ssl_geometry._src.ops import ArrayIn

__all__ = [
    "ACTIVATIONS",
    "AFFINE_ACTIVATIONS",
    "Activation",
    "C2_ACTIVATIONS",
    "NON_C2_ACTIVATIONS",
    "PIECEWISE_LINEAR",
    "SMOOTHNESS",
    "UNKNOWN",
    "get",
    "lookup",
    "smoothness",
]

#: The smoothness classes, each with what it means for a head built from it (``M`` is the
#: interaction term of ``H_eff = G + M``, ``sigma''`` the activation's second derivative).
SMOOTHNESS: dict[str, str] = {
    "affine": "sigma'' = 0 everywhere: an affine head, M = 0 exactly (H_eff = G)",
    "piecewise_linear": "sigma'' = 0 away from finitely many kinks, where sigma' jumps: not C^1 there, "
    "M = 0 almost everywhere",
    "c1": "sigma' continuous, sigma'' jumps at finitely many points: C^1 but not C^2, M != 0",
    "c2": "twice continuously differentiable and not affine: M != 0 generically",
}
#: The class of a callable whose smoothness was not stated (never that of a registered activation).
UNKNOWN = "unknown"


@dataclasses.dataclass(frozen=True)
class Activation:
    """One activation: its name, the function and its smoothness class.

    Attributes:
      name: the name it is registered (or reported) under.
      fn: the elementwise function.
      smoothness: a key of :data:`SMOOTHNESS`, or :data:`UNKNOWN` for a callable given without
        its class.
      kinks: the points where ``sigma'`` (``"piecewise_linear"``) or ``sigma''`` (``"c1"``) jumps;
        empty for the other classes.
    """

    name: str
    fn: Callable
    smoothness: str
    kinks: tuple = ()

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"`name` must be a non-empty string; got {self.name!r}.")
        if not callable(self.fn):
            raise TypeError(f"`fn` of activation {self.name!r} must be callable; got {type(self.fn).__name__}.")
        check_choice(self.smoothness, f"smoothness of activation {self.name!r}", [*SMOOTHNESS, UNKNOWN])
        kinked = self.smoothness in ("piecewise_linear", "c1")
        if kinked != bool(self.kinks):
            raise ValueError(
                f"activation {self.name!r} of class {self.smoothness!r} "
                + (
                    "needs the points where it is not smooth (`kinks`)."
                    if kinked
                    else f"has no kinks; got kinks={self.kinks!r}."
                )
            )


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


def _table(*rows) -> dict[str, Activation]:
    return {row[0]: Activation(*row) for row in rows}


#: Every named activation, with its class (the tests check each class numerically).
ACTIVATIONS: dict[str, Activation] = _table(
    ("identity", _identity, "affine"),
    ("linear", _identity, "affine"),
    ("relu", jax.nn.relu, "piecewise_linear", (0.0,)),
    ("leaky_relu", _leaky_relu, "piecewise_linear", (0.0,)),
    ("elu", jax.nn.elu, "c1", (0.0,)),  # alpha = 1: sigma'' is e^x below 0 and 0 above
    ("gelu", _gelu, "c2"),
    ("gelu_tanh", _gelu_tanh, "c2"),
    ("swish", jax.nn.silu, "c2"),
    ("silu", jax.nn.silu, "c2"),
    ("tanh", jnp.tanh, "c2"),
    ("softplus", jax.nn.softplus, "c2"),
    ("sigmoid", jax.nn.sigmoid, "c2"),
)


def _names(*classes) -> frozenset:
    return frozenset(n for n, a in ACTIVATIONS.items() if a.smoothness in classes)


#: Affine activations: a head built from them has ``H_eff = G`` exactly.
AFFINE_ACTIVATIONS = _names("affine")
#: Activations with ``sigma'' = 0`` almost everywhere (the affine ones included): the head's interaction
#: term M vanishes away from kinks (docs/theory.md, section "Linear, ReLU and smooth heads").
PIECEWISE_LINEAR = _names("affine", "piecewise_linear")
#: C^2 nonlinear activations (smooth heads: Thm 4.1 predicts strict instability).
C2_ACTIVATIONS = _names("c2")
#: Activations that are not C^2 (kinks: relu, leaky_relu; a jump in sigma'': elu).
NON_C2_ACTIVATIONS = _names("piecewise_linear", "c1")


def lookup(activation: str | Callable | Activation) -> Activation:
    """The :class:`Activation` record of a name (case-insensitive), a record, or a callable.

    A registered function (``jax.nn.relu``) gives its record; any other callable gives a record
    of class :data:`UNKNOWN` named after the function, so that what is not known is said
    (wrap it as ``Activation(name, fn, smoothness)`` to state its class).
    """
    if isinstance(activation, Activation):
        return activation
    if isinstance(activation, str):
        check_choice(activation.lower(), "activation", ACTIVATIONS)
        return ACTIVATIONS[activation.lower()]
    if callable(activation):
        for record in ACTIVATIONS.values():
            if record.fn is activation:
                return record
        return Activation(getattr(activation, "__name__", None) or "custom", activation, UNKNOWN)
    raise TypeError(f"`activation` must be a name, an Activation or a callable; got {type(activation).__name__}.")


def get(activation: str | Callable | Activation) -> Callable:
    """The activation function for a name in :data:`ACTIVATIONS`, an :class:`Activation`, or a callable."""
    return lookup(activation).fn


def smoothness(activation: str | Callable | Activation) -> str:
    """The smoothness class of an activation: a key of :data:`SMOOTHNESS`, or :data:`UNKNOWN`.

    Example:
      >>> smoothness("relu"), smoothness("GELU"), smoothness(lambda x: x)
      ('piecewise_linear', 'c2', 'unknown')
    """
    return lookup(activation).smoothness
