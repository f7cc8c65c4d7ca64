"""The paper's estimator: the 20-step shifted power iteration of its Hessian tracker (the baseline).

Kept as the baseline whose weakness the project measures (docs/theory.md, section
"The smallest eigenvalue: power iteration against Lanczos"): power iteration
finds the eigenvalue of largest magnitude and does not converge in 20 steps when the top
eigenvalues are close. :func:`paper_power_iteration` is ``get_min_eigenvalue_hvp`` of the
authors' ``hessian_tracker.py`` (commit 117231d) step for step, float32 by default.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, Float

from ssl_geometry._src.checks import check_finite, check_int
from ssl_geometry._src.linalg.operators import SingleAsBatch, check_callable, default_key, prepare_matvec

__all__ = ["PowerIterationResult", "paper_power_iteration"]

#: The authors' normalisation floor: ``v / (|v| + 1e-8)``.
NORM_FLOOR = 1e-8


class PowerIterationResult(NamedTuple):
    """The paper's shifted power iteration estimates.

    Attributes:
      lambda_max: ``v^T H v`` after ``steps`` power steps ``v <- H v / (|H v| + 1e-8)`` (the
        eigenvalue of largest *magnitude*, which may be negative).
      lambda_min: ``u^T H u`` after ``steps`` steps ``u <- (H u - lambda_max u) / (|.| + 1e-8)``.
      mu: ``lambda_max - lambda_min``, the estimate of the top eigenvalue of ``lambda_max I - H``.
      num_matvecs: ``2 * (steps + 1)``: ``steps`` products per phase and one for its Rayleigh quotient.
    """

    lambda_min: float
    lambda_max: float
    mu: float
    num_matvecs: int


@functools.partial(jax.jit, static_argnums=(0, 1))
def _power_pair(matvec, steps, v0, u0, args):
    dtype = v0.dtype
    floor = jnp.asarray(NORM_FLOOR, dtype)
    A = lambda v: matvec(v[None], *args)[0].astype(dtype)
    unit = lambda v: v / (jnp.linalg.norm(v) + floor)  # (torch.norm(v) + 1e-8)

    def power(op, v):
        return lax.fori_loop(0, steps, lambda _, v: unit(op(v)), unit(v))

    v = power(A, v0)
    lam_max = jnp.sum(v * A(v))
    u = power(lambda u: A(u) - lam_max * u, u0)
    return lam_max, jnp.sum(u * A(u))


def paper_power_iteration(
    matvec: Callable,
    dim: int,
    *,
    steps: int = 20,
    key=None,
    args: Sequence = (),
    dtype=jnp.float32,
    v0: Float[Array | np.ndarray, " dim"] | None = None,
    u0: Float[Array | np.ndarray, " dim"] | None = None,
) -> PowerIterationResult:
    """The paper's "20-step shifted power iteration" for ``lambda_min`` (the baseline), as the authors run it.

    ``get_min_eigenvalue_hvp`` in the authors' ``hessian_tracker.py``, step for step, with
    ``H v = matvec(v, *args)`` and ``|.|`` the Euclidean norm:

    1. ``v = v0 / (|v0| + 1e-8)``; ``steps`` times ``v <- H v / (|H v| + 1e-8)``;
       ``lambda_max = v^T H v`` (one more product);
    2. ``u = u0 / (|u0| + 1e-8)``; ``steps`` times ``s = H u - lambda_max u``,
       ``u <- s / (|s| + 1e-8)``; ``lambda_min = u^T H u`` (one more product).

    The Rayleigh quotients are taken *after* the ``steps``-th update, ``2 * (steps + 1)``
    products in all (42 for the paper's 20). ``v0`` and ``u0`` default to standard normal
    vectors drawn from ``key`` (``jax.random.split(key)``). Float32 by default, no convergence
    test, no residual. Its known failure modes (kept on purpose): power iteration finds the
    eigenvalue of largest *magnitude*, so ``lambda_max`` comes out negative when
    ``|lambda_min| > lambda_max``; 20 steps do not converge when the top eigenvalues are close;
    and the floor ``1e-8`` leaves ``|v| = |H v| / (|H v| + 1e-8) < 1``, which shrinks both
    quotients by ``(1 + 1e-8 / |H v|)^{-2}`` (0.2% at ``|H v| = 1e-5``).
    """
    check_callable(matvec, "matvec")
    dim, steps = check_int(dim, "dim"), check_int(steps, "steps")
    dtype = jnp.dtype(dtype)
    mv, margs = prepare_matvec(SingleAsBatch(matvec), (1, dim), dtype, tuple(args), single=True)
    k1, k2 = jax.random.split(default_key(key))
    starts = []
    for name, given, k in (("v0", v0, k1), ("u0", u0, k2)):
        if given is None:
            starts.append(jax.random.normal(k, (dim,), dtype))
            continue
        given = jnp.asarray(given, dtype)
        if given.shape != (dim,):
            raise ValueError(f"`{name}` must have shape ({dim},); got {given.shape}.")
        check_finite(given, name)
        starts.append(given)
    lam_max, lam_min = (float(x) for x in _power_pair(mv, steps, starts[0], starts[1], margs))
    if not (math.isfinite(lam_max) and math.isfinite(lam_min)):
        raise FloatingPointError("paper_power_iteration: non-finite estimate (matvec returned NaN/inf?).")
    return PowerIterationResult(lam_min, lam_max, lam_max - lam_min, 2 * (steps + 1))
