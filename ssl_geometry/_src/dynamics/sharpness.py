"""Sharpness: the top eigenvalue of the loss Hessian, the edge-of-stability yardstick ``2 / lr``."""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

from ssl_geometry._src.dynamics.trajectory import PyTree
from ssl_geometry._src.linalg.hessians import hessian

__all__ = ["sharpness"]


def sharpness(loss_fn: Callable, params: PyTree, args: Any = None, *, batch: Any = None) -> jax.Array:
    """Top Hessian eigenvalue ``lambda_max(d^2 L / d theta^2)`` by a dense eigendecomposition.

    The edge-of-stability literature (Cohen et al., ICLR 2021) compares it with ``2/lr``:
    GD with step ``lr`` is linearly unstable along directions with curvature above ``2/lr``.
    ``L = loss_fn(params, batch, args)``, the signature of :func:`ssl_geometry.fit` and the
    dynamics (``batch=None``: the full-batch loss whose data is in ``args``); the dense Hessian over
    the ravelled parameters is :func:`ssl_geometry.curvature.hessian`.
    """
    return jnp.linalg.eigvalsh(hessian(lambda p: loss_fn(p, batch, args), params))[-1]
