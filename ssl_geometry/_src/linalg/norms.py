"""The spectral norm of a Jacobian, ``|D fn(x)|_2``, dense when small and by Lanczos on a Gram operator when not.

The Thm 4.1 premises (:mod:`ssl_geometry._src.instrument.thm41`) scale the gradients of the loss by it: the
head's Jacobian in the representation and in its parameters (millions of them at the paper's widths).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from ssl_geometry._src.checks import check_finite
from ssl_geometry._src.linalg.hessians import linearize
from ssl_geometry._src.linalg.lanczos import checked_options, extreme_eigenvalues
from ssl_geometry._src.linalg.options import NORM_DEFAULTS, SolverOptions

__all__ = ["operator_norm"]


@dataclasses.dataclass(frozen=True)
class _GramMatvec:
    """``v -> J J^T v`` (``side="out"``) or ``J^T J v`` (``side="in"``), flat ``v``, from ``lin = J`` (the
    linearised ``fn``, :func:`ssl_geometry._src.linalg.hessians.linearize`: the primal pass is done once, not on
    every product) and its transpose. Hashable by shapes, so one compiled Lanczos loop serves every ``lin``."""

    in_shape: tuple
    out_shape: tuple
    side: str

    def __call__(self, v, lin):
        lin_t = jax.linear_transpose(lin, jax.ShapeDtypeStruct(self.in_shape, v.dtype))
        if self.side == "out":  # J (J^T v)
            return lin(lin_t(v.reshape(self.out_shape))[0]).reshape(-1)
        return lin_t(lin(v.reshape(self.in_shape)))[0].reshape(-1)  # J^T (J v)


def operator_norm(
    fn: Callable,
    x: Array,
    *,
    max_dense_entries: int = 1 << 22,
    key: Array | None = None,
    options: SolverOptions = SolverOptions(),
) -> float:
    """Spectral norm ``|D fn(x)|_2 = sqrt(lambda_max(J^T J))`` of the Jacobian ``J`` of ``fn`` at ``x``.

    Dense (``jax.jacfwd`` then the largest singular value) when ``J`` has at most ``max_dense_entries``
    entries. Otherwise Lanczos (:func:`ssl_geometry.curvature.extreme_eigenvalues`, ``k=1``) on the Gram
    operator of the smaller side, ``J J^T`` (``v -> jvp(vjp(v))``) when ``fn``'s output is smaller than
    ``x``, else ``J^T J``: both have ``lambda_max = |J|_2^2``. With ``options`` left at its defaults
    (a :class:`~ssl_geometry.curvature.SolverOptions` whose ``None`` fields mean ``tol=1e-6``, ``num_steps=200``,
    ``check_every=4``, ``error_bound="gap"``) it stops when the error bound of the top Ritz value is at most ``tol * lambda_max``,
    so the result is within a relative ``tol / 2`` of ``|J|_2``, and from below (a Ritz value never exceeds
    ``lambda_max``; a ratio ``|g| / (|J| |rho|)`` built on it errs towards *non*-stationary). The budget
    ``options.num_steps`` is clamped to the Gram operator's dimension; ``SolverOptions(tol=1e-4)`` changes the
    tolerance alone. The matvec is keyed by the program ``fn`` computes, so a fresh
    closure of the same computation reuses the compiled loop.

    Raises:
      ValueError: ``options.tol`` not in ``(0, 1)``.
      TypeError: ``options`` not a :class:`~ssl_geometry.curvature.SolverOptions`.
      FloatingPointError: a non-finite Jacobian entry or product.
      RuntimeError: Lanczos did not meet ``tol`` in ``options.num_steps`` steps (the bound it reached is named).
    """
    x = jnp.asarray(x)
    options = checked_options(options, NORM_DEFAULTS)
    tol, num_steps = options.tol, options.num_steps
    assert tol is not None and num_steps is not None  # NORM_DEFAULTS sets both
    if not tol < 1:
        raise ValueError(f"`options.tol` must lie in (0, 1) for operator_norm; got {options.tol!r}.")
    out_info = jax.eval_shape(fn, x)
    out_size = int(np.prod(out_info.shape))
    if out_size * x.size <= max_dense_entries:
        J = np.asarray(jax.jacfwd(lambda v: jnp.ravel(fn(v.reshape(x.shape))))(x.reshape(-1)))
        check_finite(J, "Jacobian in operator_norm")
        return float(np.linalg.norm(J, 2)) if J.size else 0.0
    _, lin = linearize(fn, x)
    side, dim = ("out", out_size) if out_size < x.size else ("in", int(x.size))
    mv = _GramMatvec(tuple(x.shape), tuple(out_info.shape), side)
    budget = min(num_steps, dim)
    res = extreme_eigenvalues(
        mv,
        dim,
        k=1,
        key=jax.random.PRNGKey(0) if key is None else key,
        args=(lin,),
        dtype=x.dtype,
        which="largest",
        options=options.replace(num_steps=budget),
    )
    lam = float(np.asarray(res.largest)[0])
    if not np.isfinite(lam):
        raise FloatingPointError(f"operator_norm: Lanczos returned a non-finite lambda_max(J^T J) = {lam}.")
    if not res.converged:
        bound = float(np.asarray(res.largest_error_bounds)[0])
        raise RuntimeError(
            f"operator_norm: Lanczos on the {dim}-dimensional Gram operator did not meet `options.tol` = "
            f"{res.tol:.1e} in {int(res.num_steps)} steps (`options.num_steps`): error bound {bound:.3e} against "
            f"lambda_max {lam:.6e}."
        )
    return float(np.sqrt(max(lam, 0.0)))
