"""Premises of the effective-Hessian theorems and the one sign tolerance of the instrument.

Every definiteness decision of :mod:`ssl_geometry.geometry` (``H_L`` PSD?, the sign of
``lambda_min(H_eff)``, ranks) uses :func:`sign_tolerance`.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ssl_geometry._src.checks import check_finite, check_positive
from ssl_geometry._src.instrument.effective import EffectiveHessian

__all__ = ["Premises", "premises", "sign_structure", "sign_tolerance"]

# ------------------------------------------------------------------------ premises


def sign_tolerance(eigenvalues, dtype, *, dim: int | None = None, residual: float = 0.0) -> float:
    """The one tolerance for the sign of an eigenvalue: ``dim * eps(dtype) * max|lambda| + residual``.

    Why this bound: the matrices of the instrument (``H_L``, ``H_eff``, ``G``, ``M``) are
    computed by automatic differentiation, so each entry carries a rounding error of order
    ``eps * max|A_ij| <= eps * |A|_2``. By Weyl's inequality the computed eigenvalues move by at
    most ``|E|_2 <= |E|_F <= dim * max|E_ij| ~ dim * eps * |A|_2`` (``|A|_2 = max|lambda|``);
    a backward-stable symmetric eigensolver adds ``O(eps |A|_2)``. So an eigenvalue with
    ``|lambda| <= dim * eps * max|lambda|`` has a sign that rounding can flip, and one beyond it
    does not. This is also NumPy's ``matrix_rank`` convention. (The old ``10 sqrt(dim) eps``
    of ``classify_collapse`` is not a bound on ``|E|_2`` for ``dim > 100``, and is replaced.)
    For a Ritz value from Lanczos add its true residual ``|A y - theta y|`` (``residual``):
    for a symmetric ``A`` some eigenvalue lies within it.

    Args:
      eigenvalues: the eigenvalues (or just the extreme ones) of the matrix; their largest
        magnitude is ``|A|_2``.
      dtype: floating dtype the matrix was computed in.
      dim: the matrix size (default ``len(eigenvalues)``: pass it when only extremes are given).
      residual: Lanczos residual bound to add (``0`` for a dense eigensolver).

    Example:
      >>> import numpy as np
      >>> bool(sign_tolerance(np.array([-1.0, 2.0]), np.float64) == 2 * np.finfo(np.float64).eps * 2.0)
      True
    """
    e = np.asarray(eigenvalues, dtype=np.float64).reshape(-1)
    if e.size and not np.all(np.isfinite(e)):
        raise FloatingPointError(f"`eigenvalues` must be finite to set a sign tolerance; got {e}.")
    eps = float(np.finfo(np.dtype(dtype)).eps)
    size = int(e.size) if dim is None else int(dim)
    scale = float(np.max(np.abs(e))) if e.size else 0.0
    return max(size, 1) * eps * scale + float(residual)


def sign_structure(lmin: float, lmax: float, tol: float) -> str:
    """Name the definiteness of a symmetric matrix from its extreme eigenvalues.

    ``"zero"`` if ``max(|lmin|, |lmax|) <= tol``; ``"PSD"`` if ``lmin >= -tol``;
    ``"NSD"`` if ``lmax <= tol``; ``"indefinite"`` otherwise.
    """
    if max(abs(lmin), abs(lmax)) <= tol:
        return "zero"
    if lmin >= -tol:
        return "PSD"
    if lmax <= tol:
        return "NSD"
    return "indefinite"


@dataclasses.dataclass(frozen=True)
class Premises:
    """Premises report for the effective-Hessian theorems at one point.

    Attributes:
      loss_hessian_eigenvalues: all eigenvalues of ``H_L`` (ascending).
      loss_hessian_psd: ``lambda_min(H_L) >= -psd_tolerance``.
      psd_tolerance: the tolerance used for PSD (default
        :func:`sign_tolerance`, ``dim * eps * max|lambda(H_L)|``).
      loss_hessian_rank: number of eigenvalues with ``|lambda| > rank_tolerance``.
      rank_tolerance: tolerance used for the rank (same default).
      residual_norm: ``|rho|_2``.
      extremes: ``{"loss_hessian" | "metric" | "interaction" | "full": (lmin, lmax)}``.
      signs: ``{name: "PSD" | "NSD" | "indefinite" | "zero"}`` from :func:`sign_structure`,
        each with its own tolerance ``dim * eps * max|lambda|``.
      tolerances: the per-matrix tolerances used for ``signs``.
    """

    loss_hessian_eigenvalues: np.ndarray
    loss_hessian_psd: bool
    psd_tolerance: float
    loss_hessian_rank: int
    rank_tolerance: float
    residual_norm: float
    extremes: dict
    signs: dict
    tolerances: dict

    def as_dict(self) -> dict:
        """JSON-friendly dictionary (eigenvalues as a list)."""
        d = dataclasses.asdict(self)
        d["loss_hessian_eigenvalues"] = [float(x) for x in self.loss_hessian_eigenvalues]
        return d


def premises(result: EffectiveHessian, *, psd_tol: float | None = None, rank_tol: float | None = None) -> Premises:
    """Premises report of an :func:`effective_hessian` result (concrete arrays only).

    Eigenvalues come from ``numpy.linalg.eigvalsh`` of the symmetrised matrices.
    Default tolerances follow NumPy's ``matrix_rank``: ``dim * eps(dtype) *
    max|lambda|``; pass ``psd_tol`` / ``rank_tol`` to override.

    Example:
      >>> import jax.numpy as jnp
      >>> from ssl_geometry.geometry import effective_hessian
      >>> eh = effective_hessian(lambda z: jnp.tanh(z), lambda u: 0.5 * jnp.sum((u - 1.0)**2),
      ...                        jnp.zeros(2))
      >>> p = premises(eh)
      >>> p.loss_hessian_psd, p.loss_hessian_rank, round(p.residual_norm, 6)
      (True, 2, 1.414214)
    """
    if not isinstance(result, EffectiveHessian):
        raise TypeError(f"`result` must be an EffectiveHessian; got {type(result).__name__}.")
    check_finite(result, "result")
    mats = {
        "loss_hessian": result.loss_hessian,
        "metric": result.metric,
        "interaction": result.interaction,
        "full": result.full,
    }
    eigs = {}
    for name, m in mats.items():
        a = np.asarray(m)
        eigs[name] = np.linalg.eigvalsh(0.5 * (a + a.T))
    dtype = np.asarray(result.full).dtype
    tols = {name: sign_tolerance(e, dtype) for name, e in eigs.items()}
    e_l = eigs["loss_hessian"]
    p_tol = tols["loss_hessian"] if psd_tol is None else float(psd_tol)
    r_tol = tols["loss_hessian"] if rank_tol is None else float(rank_tol)
    if psd_tol is not None:
        check_positive(psd_tol, "psd_tol", strict=False)
    if rank_tol is not None:
        check_positive(rank_tol, "rank_tol", strict=False)
    extremes = {name: (float(e[0]), float(e[-1])) for name, e in eigs.items()}
    signs = {name: sign_structure(*extremes[name], tols[name]) for name in eigs}
    return Premises(
        loss_hessian_eigenvalues=e_l,
        loss_hessian_psd=bool(e_l[0] >= -p_tol),
        psd_tolerance=p_tol,
        loss_hessian_rank=int(np.sum(np.abs(e_l) > r_tol)),
        rank_tolerance=r_tol,
        residual_norm=float(np.linalg.norm(np.asarray(result.residual))),
        extremes=extremes,
        signs=signs,
        tolerances=tols,
    )
