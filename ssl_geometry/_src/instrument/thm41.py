"""Thm 4.1 (instability of collapse): its premises, its conclusion, and their composition.

Theorem (paraphrased; docs/theory.md, section "Thm 4.1 (instability of collapse)"):
at a collapsed *equilibrium* with residual
``rho = grad_u L != 0``, ``H_L >= 0``, a C^2 loss and head, and the head adapting faster than
the backbone, a linear head gives ``H_eff = G >= 0`` (no second-order escape direction) while a
smooth MLP head generically gives ``lambda_min(H_eff) < 0`` (strict instability); ReLU heads
have ``M = 0`` away from kinks and behave like linear ones.

* :func:`thm41_premises` -- every premise as a boolean with the number behind it and the
  tolerance used (``residual_nonzero``, ``loss_hessian_psd``, ``stationary_z``,
  ``stationary_head``, ``c2_head``, ``timescale_separation``, ``holds``);
* :func:`collapse_spectrum` -- ``lambda_min``/``lambda_max`` of ``H_eff``, ``G``, ``M`` (dense or
  Lanczos with residual bounds);
* :func:`thm41_conclusion` -- the verdict words from a premises report and a spectrum;
* :func:`classify_collapse` -- ``thm41_conclusion(thm41_premises(...), collapse_spectrum(...))``.

Every sign decision uses :func:`ssl_geometry.geometry.sign_tolerance`.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, ArrayLike, Float

from ssl_geometry._src.checks import check_finite, check_positive, check_rank
from ssl_geometry._src.instrument.effective import effective_hessian, effective_hvp_operator, flat_problem
from ssl_geometry._src.instrument.premises import sign_tolerance
from ssl_geometry._src.linalg.hessians import apply_linear, linearize_gradient
from ssl_geometry._src.linalg.lanczos import checked_options, extreme_eigenvalues
from ssl_geometry._src.linalg.norms import operator_norm
from ssl_geometry._src.linalg.options import SPECTRUM_DEFAULTS, SolverOptions
from ssl_geometry._src.models import activations as _act
from ssl_geometry._src.models.base import Model, as_function

__all__ = [
    "CONCLUSIONS", "CollapseClassification", "CollapseSpectrum", "HEAD_KINDS", "MATRIX_FREE_ABOVE", "SPECTRUM_PARTS",
    "Thm41Premises",
    "classify_collapse", "collapse_spectrum", "head_smoothness",
    "thm41_conclusion", "thm41_premises",
]

#: The conclusions :func:`thm41_conclusion` can reach.
CONCLUSIONS = ("strict instability", "no second-order escape", "premise violated")
#: Head kind for Thm 4.1 of each smoothness class of :data:`ssl_geometry.activations.SMOOTHNESS`.
_KIND_OF_CLASS = {"affine": "linear", "piecewise_linear": "piecewise", "c1": "non_c2", "c2": "smooth",
                  _act.UNKNOWN: "unknown"}
#: What each head kind means for Thm 4.1 (the kinds :func:`head_smoothness` returns).
HEAD_KINDS = {
    "linear": "every layer affine: H_eff = G, no second-order escape",
    "piecewise": "piecewise-linear activations (ReLU): M = 0 away from kinks, Thm 4.1's ReLU statement",
    "smooth": "C^2 activations, at least one nonlinear: Thm 4.1's strict-instability statement",
    "non_c2": "not C^2 and not piecewise linear (ELU; or kinked and curved layers mixed): neither statement applies",
    "unknown": "an activation whose smoothness class was not stated",
}
#: Spectra of matrices larger than this go through Lanczos with true residuals, whatever ``max_dense_dim``
#: says: a dense eigensolve is cubic (a 4096-dimensional one costs 8 times a 2048-dimensional one).
MATRIX_FREE_ABOVE = 2048


def _dense_route(dim: int, max_dense_dim: int, what: str) -> tuple[bool, tuple]:
    """``(dense?, notes)``: dense ``eigh`` iff ``dim <= min(max_dense_dim, MATRIX_FREE_ABOVE)``.

    A ``max_dense_dim`` above :data:`MATRIX_FREE_ABOVE` does not buy a dense solve of a larger
    matrix; the note says so when it would have.
    """
    if dim <= min(max_dense_dim, MATRIX_FREE_ABOVE):
        return True, ()
    if dim <= max_dense_dim:
        return False, (f"{what} ({dim}-dimensional) goes through Lanczos with residuals: above "
                       f"MATRIX_FREE_ABOVE = {MATRIX_FREE_ABOVE} the library never solves densely "
                       f"(max_dense_dim = {max_dense_dim}).",)
    return False, ()


def _kind_of_classes(classes) -> str:
    """The head kind of a head whose layers have these smoothness classes (``()``: affine)."""
    kinds = {_KIND_OF_CLASS[c] for c in classes} - {"linear"}
    if not kinds:
        return "linear"
    if "unknown" in kinds:
        return "unknown"
    return kinds.pop() if len(kinds) == 1 else "non_c2"


def head_smoothness(activation: str | Callable | _act.Activation | Model | None = None,
                    smooth: bool | None = None) -> str:
    """Classify a head for Thm 4.1: a key of :data:`HEAD_KINDS`.

    ``activation``: a name, an :class:`~ssl_geometry.activations.Activation`, a callable (a
    registered function has its class, any other is ``"unknown"``), or a head
    :class:`~ssl_geometry.Model`, whose :attr:`~ssl_geometry.Model.activations` decide
    (``"unknown"`` when it declares none). The class of each activation is
    :func:`ssl_geometry.activations.smoothness`; a head mixing classes is ``"non_c2"`` unless
    the others are affine. ``smooth`` (bool) overrides: ``True`` -> ``"smooth"``, ``False`` ->
    ``"piecewise"``.
    """
    if smooth is not None:
        return "smooth" if smooth else "piecewise"
    if activation is None:
        return "unknown"
    if isinstance(activation, Model):
        if activation.activations is None:
            return "unknown"
        return _kind_of_classes([_act.smoothness(a) for a in activation.activations])
    return _kind_of_classes([_act.smoothness(activation)])


class Thm41Premises(NamedTuple):
    """Thm 4.1's premises at one state: booleans, the numbers behind them, the tolerances.

    Booleans (``None`` = not checkable from what was given):
      residual_nonzero: ``|rho| > residual_tol``.
      loss_hessian_psd: ``lambda_min(H_L) >= -psd_tol``.
      stationary_z: ``|grad_z L| <= stationary_tol * |J|_2 |rho|`` (``grad_z L = J^T rho``, so the
        ratio lies in ``[0, 1]``; 0 at an equilibrium in the representation).
      stationary_head: ``|grad_theta L| <= stationary_tol * |dh/dtheta|_2 |rho|`` (``None`` when
        the head was a plain function with no parameters to differentiate).
      c2_head: head activation C^2 (``None`` when unknown).
      timescale_separation: ``timescale_ratio > min_timescale_ratio`` (``None`` when no ratio given).
      holds: every premise that is not ``None`` is met.
      holds_except_smoothness: the same without ``c2_head`` (Thm 4.1's ReLU statement).
      collapsed: rows of ``z`` equal up to ``collapse_tol`` (informational; ``None`` for one sample).

    Numbers: ``residual_norm``, ``loss``, ``lambda_min_loss_hessian``, ``lambda_max_loss_hessian``,
    ``grad_z_norm``, ``grad_z_scale`` (``|J|_2 |rho|``), ``grad_z_ratio``, ``grad_head_norm``,
    ``grad_head_scale``, ``grad_head_ratio``, ``timescale_ratio``, ``collapse_spread``
    (``max_i |z_i - mean z|``), ``head_kind``. Tolerances: ``residual_tol``, ``psd_tol``,
    ``stationary_tol``, ``min_timescale_ratio``, ``collapse_tol``. ``notes``: why a premise failed.
    """

    residual_nonzero: bool
    loss_hessian_psd: bool
    stationary_z: bool
    stationary_head: bool | None
    c2_head: bool | None
    timescale_separation: bool | None
    holds: bool
    holds_except_smoothness: bool
    collapsed: bool | None
    head_kind: str
    residual_norm: float
    loss: float
    lambda_min_loss_hessian: float
    lambda_max_loss_hessian: float
    grad_z_norm: float
    grad_z_scale: float
    grad_z_ratio: float
    grad_head_norm: float | None
    grad_head_scale: float | None
    grad_head_ratio: float | None
    timescale_ratio: float | None
    collapse_spread: float | None
    residual_tol: float
    psd_tol: float
    stationary_tol: float
    min_timescale_ratio: float
    collapse_tol: float | None
    notes: tuple

    def violated(self) -> tuple:
        """Names of the premises that are checked and not met."""
        names = ("residual_nonzero", "loss_hessian_psd", "stationary_z", "stationary_head", "c2_head",
                 "timescale_separation")
        return tuple(n for n in names if getattr(self, n) is False)

    def as_dict(self) -> dict:
        """JSON-friendly dictionary (``notes`` as a list)."""
        d = self._asdict()
        d["notes"] = list(self.notes)
        return d


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 else (0.0 if num == 0 else float("inf"))


def _loss_hessian_extremes(loss_flat, uf, dtype, max_dense_dim, lanczos_steps, key):
    """``(lmin, lmax, sign_tol, notes)`` of ``H_L`` at ``uf``: dense, or Lanczos above the dense route."""
    dense, notes = _dense_route(int(uf.size), max_dense_dim, "the loss Hessian H_L")
    if dense:
        H_L = np.asarray(jax.hessian(loss_flat)(uf))
        check_finite(H_L, "loss Hessian H_L at the given `z`")
        eL = np.linalg.eigvalsh(0.5 * (H_L + H_L.T))
        return float(eL[0]), float(eL[-1]), sign_tolerance(eL, dtype), ()
    lin = linearize_gradient(loss_flat, uf)[1]
    lo, hi, res = lanczos_extremes(apply_linear, (lin,), int(uf.size), dtype, key=key, num_steps=lanczos_steps)
    if not res["converged"]:
        notes = notes + (f"Lanczos for H_L did not converge in {res['num_steps']} steps.",)
    return lo, hi, sign_tolerance([lo, hi], dtype, dim=int(uf.size), residual=res["min"]), notes


def _head_gradient(model, variables, loss_fn, z, rho, train):
    """``(|grad_theta L|, |dh/dtheta|_2 |rho|)`` for the head parameters ``variables["params"]``."""
    flat, unravel = ravel_pytree(variables["params"])

    def outputs(theta):
        return model.apply({**variables, "params": unravel(theta)}, z, train=train)[0]

    g = jax.grad(lambda theta: loss_fn(outputs(theta)))(flat)
    check_finite(g, "head-parameter gradient grad_theta L at the given `z`")
    return float(jnp.linalg.norm(g)), operator_norm(outputs, flat) * float(jnp.linalg.norm(rho))


def _resolve_head(model, variables, activation, smooth, train):
    """``(head_fn, head_kind)`` from a Model with its variables or a plain function."""
    if isinstance(model, Model):
        if not isinstance(variables, dict) or "params" not in variables:
            raise ValueError("`variables` must be the head's variables dict with a 'params' entry when "
                             f"`model` is a Model; got {type(variables).__name__}.")
        kind = head_smoothness(activation if (activation is not None or smooth is not None) else model, smooth)
        return as_function(model, variables, train=train), kind
    if callable(model):
        if variables is not None:
            raise ValueError("`variables` must be None when `model` is a plain function z -> u.")
        return model, head_smoothness(activation, smooth)
    raise TypeError(f"`model` must be a Model or a callable z -> u; got {type(model).__name__}.")


def _collapse_spread(z):
    """``(collapsed, max_i |z_i - mean z|, tolerance 1e-6 max(1, |mean z|))``; ``None``s for one sample."""
    if z.ndim != 2:
        return None, None, None
    zc = np.asarray(z, np.float64)
    centre = zc.mean(axis=0)
    spread = float(np.max(np.linalg.norm(zc - centre, axis=1)))
    c_tol = 1e-6 * max(1.0, float(np.linalg.norm(centre)))
    return bool(spread <= c_tol), spread, c_tol


def _premise_notes(p: "Thm41Premises", timescale_ratio) -> list:
    """Why each premise that is checked failed, plus what was not checked."""
    rules = {"residual_nonzero": f"|rho| = {p.residual_norm:.3e} <= {p.residual_tol:.3e}",
             "loss_hessian_psd": f"lambda_min(H_L) = {p.lambda_min_loss_hessian:.3e} < -{p.psd_tol:.3e}",
             "stationary_z": f"|grad_z L| / (|J| |rho|) = {p.grad_z_ratio:.3e} > {p.stationary_tol:.3e} "
                             "(not an equilibrium in z)",
             "stationary_head": f"|grad_theta L| / (|dh/dtheta| |rho|) = {p.grad_head_ratio} > "
                                f"{p.stationary_tol:.3e} (not an equilibrium of the head)",
             "c2_head": f"head kind {p.head_kind!r} is not C^2",
             "timescale_separation": f"timescale ratio {timescale_ratio} <= {p.min_timescale_ratio}"}
    notes = [f"premise {n} not met: {rules[n]}." for n in p.violated()]
    if p.head_kind == "unknown":
        notes.append("head smoothness unknown (an activation given as a bare callable, or a head that declares no "
                     "activations): the C^2 premise is not checked; pass `activation` (a name or an "
                     "activations.Activation with its class) or `smooth`.")
    if timescale_ratio is None:
        notes.append("timescale separation not checked (no `timescale_ratio`).")
    if p.grad_z_scale == 0.0:
        notes.append("the head Jacobian dh/dz is zero at z (a dead head): stationarity in z holds trivially.")
    if p.collapsed is False:
        notes.append("the batch is not collapsed (rows differ); Thm 4.1 speaks of collapsed states.")
    return notes


def _check_premise_args(z, timescale_ratio, min_timescale_ratio, max_dense_dim) -> Array:
    """Validate :func:`thm41_premises`'s arguments; returns ``z`` as an array."""
    z = jnp.asarray(z)
    check_rank(z, "z", (1, 2))
    if timescale_ratio is not None:
        check_positive(timescale_ratio, "timescale_ratio")
    check_positive(min_timescale_ratio, "min_timescale_ratio", strict=False)
    if not isinstance(max_dense_dim, int) or max_dense_dim < 1:
        raise ValueError(f"`max_dense_dim` must be a positive int; got {max_dense_dim!r}.")
    return z


def _gradient_ratios(model, variables, loss_fn, loss_flat, head_flat, z, rho, r_norm, train):
    """``((|g_z|, |J|_2 |rho|, ratio), (|g_theta|, |dh/dtheta|_2 |rho|, ratio))`` with ``g_z = J^T rho`` and
    ``g_theta = (dh/dtheta)^T rho``; the head triple is ``(None, None, None)`` for a plain function."""
    gz = jax.grad(lambda x: loss_flat(head_flat(x)))(z.reshape(-1))
    check_finite(gz, "representation gradient grad_z L at the given `z`")
    gz_norm = float(jnp.linalg.norm(gz))
    gz_scale = operator_norm(head_flat, z.reshape(-1)) * r_norm
    if not isinstance(model, Model):
        return (gz_norm, gz_scale, _ratio(gz_norm, gz_scale)), (None, None, None)
    gh_norm, gh_scale = _head_gradient(model, variables, loss_fn, z, rho, train)
    return (gz_norm, gz_scale, _ratio(gz_norm, gz_scale)), (gh_norm, gh_scale, _ratio(gh_norm, gh_scale))


def thm41_premises(
    model: Model | Callable[[Array], Array],
    variables: dict | None,
    loss_fn: Callable[[Array], Array],
    z: Float[ArrayLike, "*n d"],
    *,
    timescale_ratio: float | None = None,
    min_timescale_ratio: float = 1.0,
    activation: str | Callable | _act.Activation | None = None,
    smooth: bool | None = None,
    train: bool = False,
    residual_tol: float | None = None,
    psd_tol: float | None = None,
    stationary_tol: float | None = None,
    max_dense_dim: int = MATRIX_FREE_ABOVE,
    lanczos_steps: int = 100,
    key: Array | None = None,
) -> Thm41Premises:
    """Thm 4.1's premises at the state ``(theta, z)`` of a head ``model`` with ``variables``.

    With ``u = h_theta(z)``, ``rho = grad_u L``, ``J = dh/dz``:

    * ``residual_nonzero``: ``|rho| > residual_tol`` (default ``sqrt(eps) * max(1, |L|)``);
    * ``loss_hessian_psd``: ``lambda_min(H_L) >= -psd_tol`` (default :func:`sign_tolerance`,
      ``dim * eps * max|lambda(H_L)|``);
    * ``stationary_z``: ``|J^T rho| <= stationary_tol * |J|_2 |rho|``;
    * ``stationary_head``: ``|(dh/dtheta)^T rho| <= stationary_tol * |dh/dtheta|_2 |rho|``
      (``stationary_tol`` default ``sqrt(eps)``: at an exact equilibrium the computed gradient
      is ``O(eps)`` of its scale, anything above ``sqrt(eps)`` is a gradient the dynamics follow);
    * ``c2_head``: from ``activation`` / ``smooth`` (:func:`head_smoothness`), else from the
      Model's :attr:`~ssl_geometry.Model.activations` (``None`` when their class is unknown);
    * ``timescale_separation``: ``timescale_ratio > min_timescale_ratio``, the ratio being
      (head adaptation rate) / (backbone adaptation rate); ``None`` when not given.

    Args:
      model: a head :class:`~ssl_geometry.Model` (then ``variables`` are its variables), or
        a plain function ``z -> u`` with ``variables=None`` (then ``stationary_head`` is ``None``).
      variables: the head's variables (``{"params": ..., ["batch_stats": ...]}``) or ``None``.
      loss_fn: maps head outputs ``(n, k)`` (or ``(k,)``) to a scalar.
      z: the representation, ``(n, d)`` or ``(d,)``.
      train: apply the head in train mode (BatchNorm with batch statistics).
      max_dense_dim: ``H_L`` dense up to this size ``n*k`` (never above :data:`MATRIX_FREE_ABOVE`),
        Lanczos with residuals beyond.
    """
    z = _check_premise_args(z, timescale_ratio, min_timescale_ratio, max_dense_dim)
    head_fn, kind = _resolve_head(model, variables, activation, smooth, train)
    dtype, key = z.dtype, (jax.random.PRNGKey(0) if key is None else key)
    eps = float(np.finfo(np.dtype(dtype)).eps)
    _, head_flat, loss_flat, uf, _ = flat_problem(head_fn, loss_fn, z)
    rho = jax.grad(loss_flat)(uf)
    check_finite(rho, "residual rho = grad_u L at the given `z`")
    loss_val = float(loss_flat(uf))
    r_norm = float(jnp.linalg.norm(rho))
    r_tol = np.sqrt(eps) * max(1.0, abs(loss_val)) if residual_tol is None else float(residual_tol)
    lo, hi, p_tol_default, notes = _loss_hessian_extremes(loss_flat, uf, dtype, max_dense_dim, lanczos_steps,
                                                          jax.random.fold_in(key, 7))
    p_tol, s_tol = (p_tol_default if psd_tol is None else float(psd_tol)), (
        np.sqrt(eps) if stationary_tol is None else float(stationary_tol))

    (gz_norm, gz_scale, gz_ratio), (gh_norm, gh_scale, gh_ratio) = _gradient_ratios(
        model, variables, loss_fn, loss_flat, head_flat, z, rho, r_norm, train)
    stat_head = None if gh_ratio is None else bool(gh_ratio <= s_tol)
    notes = list(notes) + ([] if gh_ratio is not None else
                           ["head stationarity not checked: pass a Model and its variables."])
    c2 = {"linear": True, "smooth": True, "piecewise": False, "non_c2": False}.get(kind)
    ts = None if timescale_ratio is None else bool(float(timescale_ratio) > min_timescale_ratio)
    collapsed, spread, c_tol = _collapse_spread(z)
    checks: dict[str, Any] = {"residual_nonzero": bool(r_norm > r_tol), "loss_hessian_psd": bool(lo >= -p_tol),
              "stationary_z": bool(gz_ratio <= s_tol), "stationary_head": stat_head, "c2_head": c2,
              "timescale_separation": ts}
    rest = [v for n, v in checks.items() if n != "c2_head" and v is not None]
    out = Thm41Premises(
        **checks, holds=bool(all(rest) and c2 is not False), holds_except_smoothness=bool(all(rest)),
        collapsed=collapsed, head_kind=kind, residual_norm=r_norm, loss=loss_val,
        lambda_min_loss_hessian=lo, lambda_max_loss_hessian=hi, grad_z_norm=gz_norm, grad_z_scale=gz_scale,
        grad_z_ratio=gz_ratio, grad_head_norm=gh_norm, grad_head_scale=gh_scale, grad_head_ratio=gh_ratio,
        timescale_ratio=None if timescale_ratio is None else float(timescale_ratio), collapse_spread=spread,
        residual_tol=float(r_tol), psd_tol=float(p_tol), stationary_tol=float(s_tol),
        min_timescale_ratio=float(min_timescale_ratio), collapse_tol=c_tol, notes=(),
    )
    return out._replace(notes=tuple(notes + _premise_notes(out, timescale_ratio)))


class CollapseSpectrum(NamedTuple):
    """Extreme eigenvalues of ``H_eff`` (``"full"``), ``G`` (``"metric"``) and ``M`` (``"interaction"``).

    Attributes:
      lambda_min: ``{name: float}``, the smallest eigenvalue of each matrix.
      lambda_max: ``{name: float}``, the largest eigenvalue of each matrix.
      sign_tol: ``{name: float}`` from :func:`sign_tolerance` (plus the Lanczos residual).
      method: ``"dense"`` or ``"lanczos"``.
      residual_norms: Lanczos true residuals per matrix (``{}`` for dense).
      notes: convergence remarks.
    """

    lambda_min: dict
    lambda_max: dict
    sign_tol: dict
    method: str
    residual_norms: dict
    notes: tuple


def lanczos_extremes(raw_mv, args, dim, dtype, *, key, num_steps, options: SolverOptions = SolverOptions()):
    """(lmin, lmax, info) of a symmetric operator by :func:`ssl_geometry.curvature.extreme_eigenvalues`.

    ``num_steps`` (clamped to ``dim``; ``None``: the solver's default) replaces ``options.num_steps``.
    ``info`` holds the true residuals ``|A y - theta y|`` of the two Ritz vectors,
    the number of steps and the convergence flag.
    """
    budget = None if num_steps is None else min(num_steps, dim)
    res = extreme_eigenvalues(raw_mv, dim, k=1, key=key, args=args, return_vectors=True, dtype=dtype,
                              options=options.replace(num_steps=budget))
    info = {"min": float(np.asarray(res.smallest_true_residuals)[0]),
            "max": float(np.asarray(res.largest_true_residuals)[0]),
            "num_steps": int(res.num_steps), "converged": bool(res.converged)}
    lo, hi = float(np.asarray(res.smallest)[0]), float(np.asarray(res.largest)[0])
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise FloatingPointError(f"Lanczos returned non-finite extreme eigenvalues: {lo}, {hi}.")
    return lo, hi, info


#: The matrices :func:`collapse_spectrum` solves, in the order that fixes each one's Lanczos key: ``H_eff``, ``G``, ``M``.
SPECTRUM_PARTS = ("full", "metric", "interaction")


def _part_options(options, parts) -> tuple[tuple, dict]:
    """``(names, {name: SolverOptions})``: ``parts`` in :data:`SPECTRUM_PARTS` order (a non-empty subset, no repeats)
    and each part's options with :data:`SPECTRUM_DEFAULTS` filled in, from one ``SolverOptions`` or a mapping per
    part; anything else is refused naming ``parts`` or ``options``."""
    got = tuple(parts) if not isinstance(parts, str) else (parts,)
    if not got or len(set(got)) != len(got) or not set(got) <= set(SPECTRUM_PARTS):
        raise ValueError(f"`parts` must be a non-empty subset of {SPECTRUM_PARTS} without repeats; got {parts!r}.")
    names = tuple(n for n in SPECTRUM_PARTS if n in got)
    if not isinstance(options, Mapping):
        return names, dict.fromkeys(names, checked_options(options, SPECTRUM_DEFAULTS))
    if set(options) - set(names):
        raise ValueError(f"`options` names parts that are not solved: {sorted(set(options) - set(names))}.")
    return names, {n: checked_options(options.get(n, SolverOptions()), SPECTRUM_DEFAULTS) for n in names}


def collapse_spectrum(
    head_fn: Callable[[Array], Array],
    loss_fn: Callable[[Array], Array],
    z: Float[ArrayLike, "*n d"],
    *,
    per_sample: bool = False,
    max_dense_dim: int = MATRIX_FREE_ABOVE,
    key: Array | None = None,
    options: SolverOptions | Mapping[str, SolverOptions] = SolverOptions(),
    parts: Sequence[str] = SPECTRUM_PARTS,
) -> CollapseSpectrum:
    """``lambda_min``/``lambda_max`` of ``H_eff = G + M``, ``G`` and ``M`` at ``z``.

    Dense ``eigh`` of :func:`effective_hessian` when ``n*d <= min(max_dense_dim, MATRIX_FREE_ABOVE)``
    (exact and cheap there); otherwise Lanczos (:func:`ssl_geometry.curvature.extreme_eigenvalues`)
    on the linearised :func:`effective_hvp_operator` of each matrix, with the true residuals
    ``|A y - theta y|`` reported (``residual_norms``) and added to the sign tolerance. Above
    :data:`MATRIX_FREE_ABOVE` (2048) no matrix is ever solved densely, whatever ``max_dense_dim``
    says (``notes`` records where that overrode it); a smaller ``max_dense_dim`` moves the
    threshold down (``max_dense_dim=1``: Lanczos for every size). ``options`` (a
    :class:`~ssl_geometry.curvature.SolverOptions`; ``num_steps=None`` means a budget of 100 steps per matrix,
    clamped to ``n*d``, and the other ``None`` fields the solver's defaults) says how each Lanczos run stops;
    a mapping ``{part: SolverOptions}`` gives each part its own (a part it leaves out: ``SolverOptions()``), e.g.
    a larger budget for ``H_eff``, whose sign decides, than for ``G`` and ``M``. ``parts`` (a non-empty subset of
    :data:`SPECTRUM_PARTS`: ``"full"`` is ``H_eff``, ``"metric"`` ``G``, ``"interaction"`` ``M``) says which
    matrices are solved; the result's dictionaries hold those keys only. Part ``i`` of :data:`SPECTRUM_PARTS`
    starts its Lanczos run from ``fold_in(key, i)`` whichever others are solved, so a part gives the same
    numbers alone as beside the others.
    """
    z = jnp.asarray(z)
    names, per_part = _part_options(options, parts)
    _, _, _, _, _ = flat_problem(head_fn, loss_fn, z)  # shapes, finiteness, an empty batch: named before any work
    dim, dtype = int(z.size), z.dtype
    key = jax.random.PRNGKey(0) if key is None else key
    lmin, lmax, tols, res_norms = {}, {}, {}, {}
    dense, route_notes = _dense_route(dim, max_dense_dim, "H_eff, G and M")
    notes = list(route_notes)
    if dense:
        method = "dense"
        eh = effective_hessian(head_fn, loss_fn, z, per_sample=per_sample)
        for name in names:
            a = np.asarray(getattr(eh, name))
            e = np.linalg.eigvalsh(0.5 * (a + a.T))
            lmin[name], lmax[name], tols[name] = float(e[0]), float(e[-1]), sign_tolerance(e, dtype)
    else:
        method = "lanczos"
        for name in names:
            mv, args = effective_hvp_operator(head_fn, loss_fn, z, part=name)
            opts, k = per_part[name], jax.random.fold_in(key, SPECTRUM_PARTS.index(name))
            lo, hi, res = lanczos_extremes(mv, args, dim, dtype, key=k, num_steps=opts.num_steps, options=opts)
            lmin[name], lmax[name], res_norms[name] = lo, hi, res
            tols[name] = sign_tolerance([lo, hi], dtype, dim=dim, residual=res["min"])
            if not res["converged"]:
                notes.append(f"Lanczos for {name} did not meet its tolerance in {res['num_steps']} steps; "
                             f"true residuals min/max end: {res['min']:.3e} / {res['max']:.3e}.")
    return CollapseSpectrum(lambda_min=lmin, lambda_max=lmax, sign_tol=tols, method=method,
                            residual_norms=res_norms, notes=tuple(notes))


@dataclasses.dataclass(frozen=True)
class CollapseClassification:
    """Thm 4.1 at one state: premises, extreme eigenvalues and the conclusion.

    Attributes:
      conclusion: ``"strict instability"`` (``lambda_min(H_eff) < -eig_tol``: a second-order
        escape direction), ``"no second-order escape"`` (``lambda_min >= -eig_tol``) or
        ``"premise violated"`` (a checked premise is not met -- ``rho = 0``, ``H_L`` not PSD, not
        an equilibrium in ``z`` or in the head, or no timescale separation; the eigenvalues are
        still reported). A non-C^2 (ReLU) head alone does not give ``"premise violated"``:
        Thm 4.1's ReLU statement (``M = 0`` a.e.) is about exactly that case.
      premises: the :class:`Thm41Premises`.
      lambda_min: ``{"full" | "metric" | "interaction" | "loss_hessian": float}``, the smallest
        eigenvalue of each matrix.
      lambda_max: the same keys, the largest eigenvalue of each.
      eig_tol: the sign tolerance of ``lambda_min(H_eff)`` (:func:`sign_tolerance`).
      method: ``"dense"`` or ``"lanczos"``.
      head_kind: from :func:`head_smoothness`.
      predicted: what Thm 4.1 predicts for this head kind (``None`` if nothing).
      notes: why a premise failed, convergence remarks.
      residual_norms: Lanczos residual bounds per matrix (``{}`` for dense).
    """

    conclusion: str
    premises: Thm41Premises
    lambda_min: dict
    lambda_max: dict
    eig_tol: float
    method: str
    head_kind: str
    predicted: str | None
    notes: tuple
    residual_norms: dict

    def as_dict(self) -> dict:
        """JSON-friendly dictionary."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["premises"] = self.premises.as_dict()
        d["notes"] = list(self.notes)
        return d


def thm41_conclusion(premises: Thm41Premises, spectrum: CollapseSpectrum, *,
                     eig_tol: float | None = None) -> CollapseClassification:
    """Thm 4.1's conclusion from its premises and the spectrum at the same state.

    ``"premise violated"`` unless ``premises.holds_except_smoothness``; else ``"strict
    instability"`` when ``lambda_min(H_eff) < -eig_tol`` (default ``spectrum.sign_tol["full"]``),
    ``"no second-order escape"`` otherwise. ``predicted``: ``"no second-order escape"`` for linear
    and piecewise-linear heads, ``"strict instability"`` for smooth heads, ``None`` for the other
    kinds of :data:`HEAD_KINDS`.
    """
    if not isinstance(premises, Thm41Premises):
        raise TypeError(f"`premises` must be a Thm41Premises; got {type(premises).__name__}.")
    if not isinstance(spectrum, CollapseSpectrum):
        raise TypeError(f"`spectrum` must be a CollapseSpectrum; got {type(spectrum).__name__}.")
    tol = spectrum.sign_tol["full"] if eig_tol is None else float(eig_tol)
    if eig_tol is not None:
        check_positive(eig_tol, "eig_tol", strict=False)
    if not premises.holds_except_smoothness:
        conclusion = "premise violated"
    elif spectrum.lambda_min["full"] < -tol:
        conclusion = "strict instability"
    else:
        conclusion = "no second-order escape"
    kind = premises.head_kind
    notes = list(premises.notes) + list(spectrum.notes)
    if kind == "non_c2":
        notes.append("head is not C^2 and not piecewise linear: neither Thm 4.1's smooth statement nor its "
                     "ReLU statement applies (nothing is predicted).")
    if kind == "piecewise":
        notes.append("head is not C^2: the Hessian is exact only away from kinks; Thm 4.1's ReLU "
                     "statement (M = 0 a.e., behaves like a linear head) is what applies.")
    predicted = {"linear": "no second-order escape", "piecewise": "no second-order escape",
                 "smooth": "strict instability"}.get(kind)
    lmin = {**spectrum.lambda_min, "loss_hessian": premises.lambda_min_loss_hessian}
    lmax = {**spectrum.lambda_max, "loss_hessian": premises.lambda_max_loss_hessian}
    return CollapseClassification(conclusion=conclusion, premises=premises, lambda_min=lmin, lambda_max=lmax,
                                  eig_tol=float(tol), method=spectrum.method, head_kind=kind, predicted=predicted,
                                  notes=tuple(notes), residual_norms=dict(spectrum.residual_norms))


def classify_collapse(
    head: Model | Callable[[Array], Array],
    loss_fn: Callable[[Array], Array],
    z: Float[ArrayLike, "*n d"],
    *,
    variables: dict | None = None,
    eig_tol: float | None = None,
    per_sample: bool = False,
    train: bool = False,
    max_dense_dim: int = MATRIX_FREE_ABOVE,
    lanczos_steps: int = 100,
    key: Array | None = None,
    **premise_options: Any,
) -> CollapseClassification:
    """Thm 4.1 at the state ``z``: ``thm41_conclusion(thm41_premises(...), collapse_spectrum(...))``.

    ``head`` is a plain function ``z -> u`` (``variables=None``: head stationarity is then not
    checked) or a head :class:`~ssl_geometry.Model` with its ``variables``.
    ``premise_options`` go to :func:`thm41_premises` (``activation``, ``smooth``,
    ``timescale_ratio``, ``min_timescale_ratio``, ``residual_tol``, ``psd_tol``,
    ``stationary_tol``); the eigenvalue options to :func:`collapse_spectrum` (``lanczos_steps`` as its
    ``options.num_steps``, and as the premises' budget for ``H_L``).
    """
    key = jax.random.PRNGKey(0) if key is None else key
    prem = thm41_premises(head, variables, loss_fn, z, train=train, max_dense_dim=max_dense_dim,
                          lanczos_steps=lanczos_steps, key=key, **premise_options)
    # (a Model's variables were checked by thm41_premises: a dict with 'params', never None here)
    head_fn = head if not isinstance(head, Model) else as_function(head, variables or {}, train=train)
    spec = collapse_spectrum(head_fn, loss_fn, z, per_sample=per_sample, max_dense_dim=max_dense_dim, key=key,
                             options=SolverOptions(num_steps=lanczos_steps))
    return thm41_conclusion(prem, spec, eig_tol=eig_tol)
