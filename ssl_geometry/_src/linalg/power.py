"""The paper's estimator: the "20-step shifted power iteration" for ``lambda_min`` (the baseline).

Kept as the baseline whose weakness the project measures (docs/theory.md, section
"The smallest eigenvalue: power iteration against Lanczos"): power iteration
finds the eigenvalue of largest magnitude and does not converge in 20 steps when the top
eigenvalues are close.
"""
from __future__ import annotations

import functools
import math
from typing import Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
from jax import lax

from ssl_geometry._src.checks import check_int
from ssl_geometry._src.linalg.operators import SingleAsBatch, check_callable, check_matvec_output, default_key

__all__ = ["PowerIterationResult", "paper_power_iteration"]


class PowerIterationResult(NamedTuple):
    """The paper's shifted power iteration estimates.

    Attributes:
      lambda_max: Rayleigh quotient after ``steps`` power steps on ``H`` (this is the
        eigenvalue of largest *magnitude*, which may be negative).
      lambda_min: ``lambda_max - mu`` with ``mu`` from ``steps`` power steps on
        ``lambda_max I - H``.
      mu: the shifted operator's estimate.
      num_matvecs: ``2 * steps``.
    """

    lambda_min: float
    lambda_max: float
    mu: float
    num_matvecs: int


@functools.partial(jax.jit, static_argnums=(0, 1))
def _power_pair(matvec, steps, v0, u0, args):
    def power(op, v):
        def body(_, carry):
            v, _ = carry
            w = op(v)
            lam = jnp.vdot(v, w)
            return w / jnp.linalg.norm(w), lam

        return lax.fori_loop(0, steps, body, (v, jnp.zeros((), v.dtype)))[1]

    dtype = v0.dtype
    A = lambda v: matvec(v, *args).astype(dtype)
    lam_max = power(A, v0)
    mu = power(lambda v: lam_max * v - A(v), u0)
    return lam_max, mu


def paper_power_iteration(matvec: Callable, dim: int, *, steps: int = 20, key=None, args: Sequence = (),
                          dtype=jnp.float32) -> PowerIterationResult:
    """The paper's "20-step shifted power iteration" for ``lambda_min`` (the baseline).

    As in the paper's Hessian tracker: ``steps`` iterations ``v <- H v / |H v|`` from
    a random normal unit vector with Rayleigh quotient ``lambda_max = v^T H v``; then
    ``steps`` iterations on ``lambda_max I - H`` from a fresh random vector giving
    ``mu``, and ``lambda_min = lambda_max - mu``. Float32 by default, no
    convergence test, no residual. Its known failure modes (kept on purpose):
    power iteration finds the eigenvalue of largest *magnitude* (so
    ``lambda_max`` comes out negative when ``|lambda_min| > lambda_max``), and 20
    steps do not converge when the top eigenvalues are close, underestimating
    ``|lambda_min|``. Uses ``2 * steps`` matvecs.
    """
    check_callable(matvec, "matvec")
    dim, steps = check_int(dim, "dim"), check_int(steps, "steps")
    dtype = jnp.dtype(dtype)
    check_matvec_output(SingleAsBatch(matvec), (1, dim), dtype, tuple(args), single=True)
    k1, k2 = jax.random.split(default_key(key))
    v0 = jax.random.normal(k1, (dim,), dtype)
    u0 = jax.random.normal(k2, (dim,), dtype)
    lam_max, mu = _power_pair(matvec, steps, v0 / jnp.linalg.norm(v0), u0 / jnp.linalg.norm(u0), tuple(args))
    lam_max, mu = float(lam_max), float(mu)
    if not (math.isfinite(lam_max) and math.isfinite(mu)):
        raise FloatingPointError("paper_power_iteration: non-finite estimate (matvec returned NaN/inf?).")
    return PowerIterationResult(lam_max - mu, lam_max, mu, 2 * steps)
