"""The model interface: a pair of pure functions over pytrees.

Every head and backbone in :mod:`ssl_geometry` is a :class:`Model`::

    variables = model.init(key)                       # {"params": ..., ["batch_stats": ...]}
    y, new_state = model.apply(variables, x, train=False)

``variables`` is a plain dict pytree. Trainable parameters live under
``"params"``; BatchNorm running statistics (if any) under ``"batch_stats"``.
``new_state`` is a dict holding every non-``"params"`` collection of
``variables`` (updated when ``train=True``, returned unchanged otherwise), so a
training step writes ``variables = {**variables, **new_state}``. Models without
state return ``{}``.

Because both functions are pure, ``jax.jit``, ``jax.vmap``, ``jax.grad``,
``jax.hessian`` and ``jax.jvp`` compose with them directly, in float32 or
float64 (the dtype of the inputs and parameters decides).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax

__all__ = ["Model", "Variables", "as_function", "merge_state", "param_count"]

Variables = dict
Array = jax.Array


class Model(NamedTuple):
    """A model as ``(init, apply)`` pure functions plus descriptive metadata.

    Attributes:
      init: ``init(key) -> variables``.
      apply: ``apply(variables, x, *, train=False, **kwargs) -> (y, new_state)``.
      in_shape: shape of one input sample (without batch axis), e.g. ``(512,)`` or
        ``(32, 32, 3)``.
      out_dim: size of the output vector.
      name: human-readable description (for people; nothing parses it).
      activations: the nonlinearities of its layers in order, as
        :class:`ssl_geometry.activations.Activation` records (each with its smoothness class);
        ``()`` for an affine model; ``None`` when the model does not declare them (then its
        smoothness is unknown). BatchNorm is not listed: it is affine in eval mode and a
        batch-coupled smooth map in train mode.
    """

    init: Callable[[jax.Array], Variables]
    apply: Callable[..., tuple[Array, dict]]
    in_shape: tuple
    out_dim: int
    name: str = "model"
    activations: tuple | None = None


def as_function(model: Model, variables: Variables, *, train: bool = False, **kwargs) -> Callable[[Array], Array]:
    """Return ``x -> y`` for fixed ``variables`` (state updates are discarded).

    This is the form the geometry tools take (``head_fn: z -> u``). In eval mode
    (``train=False``) BatchNorm uses its running statistics, so the function acts
    sample-wise and accepts a single sample ``(d,)`` as well as a batch ``(n, d)``.
    """

    def fn(x):
        y, _ = model.apply(variables, x, train=train, **kwargs)
        return y

    return fn


def param_count(variables: Variables, collection: str = "params") -> int:
    """Number of scalars in ``variables[collection]`` (default: trainable parameters)."""
    leaves = jax.tree_util.tree_leaves(variables.get(collection, {}))
    return int(sum(leaf.size for leaf in leaves))


def merge_state(variables: Variables, new_state: dict) -> Variables:
    """``{**variables, **new_state}``: write updated collections back into ``variables``."""
    return {**variables, **new_state}
