"""The Lanczos-family solvers' options as one frozen value, :class:`SolverOptions`.

:func:`ssl_geometry.curvature.extreme_eigenvalues`, :func:`~ssl_geometry.curvature.blockwise_extreme_eigenvalues`,
:func:`~ssl_geometry.curvature.hessian_extremes`, :func:`~ssl_geometry.curvature.operator_norm` and
:func:`ssl_geometry.geometry.collapse_spectrum` each take ``options=`` (as lineax passes its solvers) instead of
repeating the stopping keywords; the keywords are written once, here. What the problem is (``k``, ``key``,
``args``, ``v0``, ``dtype``, ``return_vectors``, which end or which blocks converge) stays with each call.

A field left ``None`` means *the function's own default*, so ``SolverOptions(tol=1e-6)`` changes the tolerance
and nothing else wherever it is passed, and ``options=SolverOptions()`` (every function's default) is what each
function always did. The defaults, resolved by :meth:`SolverOptions.with_defaults`: :data:`LANCZOS_DEFAULTS` for
the bare solvers; :data:`HESSIAN_DEFAULTS` (a check every 4 steps: a Hessian-vector product costs a forward and a
backward pass) for ``hessian_extremes``; :data:`NORM_DEFAULTS` (``tol = 1e-6`` on the Kato-Temple bound, a budget
of 200 steps, a check every 4) for ``operator_norm``; :data:`SPECTRUM_DEFAULTS` (a budget of 100 steps) for
``collapse_spectrum``. Fields still ``None`` after that (``tol``, ``num_steps``, ``breakdown_tol``,
``symmetry_tol``, ``device_loop``) are resolved by the solver from the dtype and dimension, as documented below.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

__all__ = ["HESSIAN_DEFAULTS", "LANCZOS_DEFAULTS", "NORM_DEFAULTS", "SPECTRUM_DEFAULTS", "SolverOptions", "as_args"]

ERROR_BOUNDS = ("residual", "gap")


@dataclasses.dataclass(frozen=True)
class SolverOptions:
    """How a Lanczos run stops: tolerance, step budget, check interval, error bound and the guards.

    Frozen and hashable (a valid ``static_argnums`` value and a dictionary key); every field is checked when
    the value is made, and a bad one raises ``ValueError`` naming ``SolverOptions.<field>`` and what was
    expected. ``None`` (every field's default) means the default of the function it is passed to (see the
    module docstring); the defaults below are those of the bare solvers.

    Attributes:
      tol: relative tolerance: a run converges when every requested Ritz pair's residual (``error_bound=
        "residual"``) or eigenvalue error bound (``"gap"``) is ``<= tol * max|theta|``. ``None``: ``1e-8``
        in float64, ``1e-4`` in float32.
      num_steps: the step budget (Lanczos steps, one operator product each). ``None``: ``min(dim, 200)``.
        ``hessian_extremes`` and ``operator_norm`` clamp it to the dimension; the bare solvers refuse a
        budget above it.
      check_every: the most steps between two convergence checks (the checks are adaptive; see
        :func:`ssl_geometry.curvature.extreme_eigenvalues`). ``None``: 20 (4 for ``hessian_extremes`` and ``operator_norm``).
      error_bound: ``"residual"`` (stop on the residual ``r``: an eigenvalue lies within ``r``) or ``"gap"``
        (stop on the Kato-Temple bound ``min(r, r^2 / delta)``, the eigenvalue's own error: fewer steps for
        the values, not the vectors). ``None``: ``"residual"`` (``"gap"`` for ``operator_norm``).
      early_stop: stop at the first check that meets ``tol`` (``False``: run the whole budget). ``None``: ``True``.
      breakdown_tol: relative breakdown threshold ``beta_j <= breakdown_tol |A|``. ``None``: ``100 eps``.
      symmetry_tol: the largest tolerated asymmetry ``|q_(j-1)^T A q_j - beta_(j-1)| / |A|``. ``None``:
        ``sqrt(eps)`` of the dtype.
      device_loop: the steps between two checks as one device loop (``True``) or two host calls a step
        (``False``). ``None``: the loop on accelerators only. The same recurrence either way.

    Example:
      >>> SolverOptions(tol=1e-6, check_every=4).replace(error_bound="gap").error_bound
      'gap'
      >>> SolverOptions(check_every=0)
      Traceback (most recent call last):
      ...
      ValueError: `SolverOptions.check_every` must be an integer >= 1; got 0.
    """

    tol: float | None = None
    num_steps: int | None = None
    check_every: int | None = None
    error_bound: str | None = None
    early_stop: bool | None = None
    breakdown_tol: float | None = None
    symmetry_tol: float | None = None
    device_loop: bool | None = None

    def __post_init__(self) -> None:
        for name in ("tol", "breakdown_tol", "symmetry_tol"):
            object.__setattr__(self, name, _positive_or_none(getattr(self, name), name))
        if self.num_steps is not None:
            object.__setattr__(self, "num_steps", _integer(self.num_steps, "num_steps"))
        if self.check_every is not None:
            object.__setattr__(self, "check_every", _integer(self.check_every, "check_every"))
        if self.error_bound is not None and self.error_bound not in ERROR_BOUNDS:
            raise ValueError(
                f"`SolverOptions.error_bound` must be None or one of {list(ERROR_BOUNDS)}; got {self.error_bound!r}."
            )
        for name in ("early_stop", "device_loop"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, bool):
                raise ValueError(f"`SolverOptions.{name}` must be None or a bool; got {value!r}.")

    def replace(self, **changes) -> SolverOptions:
        """A copy with ``changes`` (checked like a new value); an unknown field raises ``TypeError``."""
        return dataclasses.replace(self, **changes)

    def with_defaults(self, defaults: SolverOptions) -> SolverOptions:
        """Each field of ``self``, or of ``defaults`` where ``self``'s is ``None``.

        >>> o = SolverOptions(tol=1e-3).with_defaults(SolverOptions(tol=1e-6, check_every=4))
        >>> o.tol, o.check_every, o.num_steps
        (0.001, 4, None)
        """
        mine = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return dataclasses.replace(defaults, **{k: v for k, v in mine.items() if v is not None})


def _positive_or_none(value, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"`SolverOptions.{name}` must be None or a finite float > 0; got {value!r}.")
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"`SolverOptions.{name}` must be None or a finite float > 0; got {value!r}.")
    return v


def _integer(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"`SolverOptions.{name}` must be an integer >= 1; got {value!r}.")
    return int(value)


#: The bare solvers' defaults (:func:`ssl_geometry.curvature.extreme_eigenvalues`,
#: :func:`ssl_geometry.curvature.blockwise_extreme_eigenvalues`).
LANCZOS_DEFAULTS = SolverOptions(check_every=20, error_bound="residual", early_stop=True)
#: :func:`ssl_geometry.curvature.hessian_extremes`: a check at most every 4 steps (a product is a forward and a
#: backward pass of the loss, far dearer than a check, so the run stops within a step or so of meeting ``tol``).
HESSIAN_DEFAULTS = LANCZOS_DEFAULTS.replace(check_every=4)
#: :func:`ssl_geometry.curvature.operator_norm`: the Kato-Temple bound of ``lambda_max(J^T J)`` within ``1e-6``
#: (relative), at most 200 steps, a check every 4.
NORM_DEFAULTS = LANCZOS_DEFAULTS.replace(tol=1e-6, num_steps=200, check_every=4, error_bound="gap")
#: :func:`ssl_geometry.geometry.collapse_spectrum`: at most 100 steps per matrix, the solver's other defaults.
SPECTRUM_DEFAULTS = LANCZOS_DEFAULTS.replace(num_steps=100)


def as_args(args, name: str = "args") -> tuple:
    """``args`` as a tuple: the extra arguments of the one convention, ``f(x, *args)`` / ``matvec(v, *args)``.

    A tuple or a list; anything else (a single array, ``None``) raises ``TypeError`` naming ``name`` -- a lone
    array would otherwise be split into its rows.

    Example:
      >>> as_args([1.0, 2.0]), as_args(())
      ((1.0, 2.0), ())
    """
    if not isinstance(args, (tuple, list)):
        raise TypeError(
            f"`{name}` must be a tuple of the extra arguments, passed as f(x, *{name}); got {type(args).__name__} "
            f"(wrap a single argument as {name}=(a,))."
        )
    return tuple(args)
