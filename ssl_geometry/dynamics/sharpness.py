"""Sharpness: the top eigenvalue of the loss Hessian, the edge-of-stability yardstick ``2 / lr``."""
from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

from ssl_geometry.dynamics.trajectory import PyTree, call_loss
from ssl_geometry.linalg import curvature as _curv

__all__ = ["dense_hessian", "sharpness"]


def dense_hessian(loss_fn: Callable, params: PyTree, args: Any = None) -> jax.Array:
    """Dense Hessian ``d^2 L / d theta^2`` over the ravelled parameter vector (small models).

    ``loss_fn(params, args)`` (``loss_fn(params)`` when ``args`` is None); ordering as
    :func:`jax.flatten_util.ravel_pytree`. The data-signature form of
    :func:`ssl_geometry.curvature.hessian`, which computes it.
    """
    return _curv.hessian(lambda p: call_loss(loss_fn, p, args, args is not None), params)


def sharpness(loss_fn: Callable, params: PyTree, args: Any = None) -> jax.Array:
    """Top Hessian eigenvalue ``lambda_max(d^2 L / d theta^2)`` by a dense eigendecomposition.

    The edge-of-stability literature (Cohen et al., ICLR 2021) compares it with ``2/lr``:
    GD with step ``lr`` is linearly unstable along directions with curvature above ``2/lr``.
    """
    return jnp.linalg.eigvalsh(dense_hessian(loss_fn, params, args))[-1]
