"""Thm 3.1 (local subspace whitening): the linear head that whitens ``H_eff`` on a subspace, and its check."""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from ssl_geometry._src.checks import check_finite, check_rank
from ssl_geometry._src.instrument.effective import EffectiveHessian
from ssl_geometry._src.instrument.premises import sign_tolerance

__all__ = ["WhiteningHead", "WhiteningCheck", "whitening_head", "check_whitening"]

# --------------------------------------------------------------- Thm 3.1 whitening


class WhiteningHead(NamedTuple):
    """Thm 3.1's linear head ``W = U_r Lambda_r^{-1/2} B^T``.

    Attributes:
      paper: the paper's ``(k, d)`` matrix, ``h(z) = W z``.
      weight: our layout ``(d, k)`` = ``paper.T``, ``h(z) = z @ weight``
        (usable as ``{"params": {"layers": [{"w": weight}]}}`` of ``heads.linear``).
      eigenvalues: ``Lambda_r`` (the top-r eigenvalues of ``H_L``, descending).
      eigenvectors: ``U_r``, ``(k, r)``.
      loss_hessian_rank: rank of ``H_L`` at the tolerance used.
    """

    paper: Array
    weight: Array
    eigenvalues: Array
    eigenvectors: Array
    loss_hessian_rank: int


def _orthonormal_check(B: np.ndarray, name: str) -> None:
    eps = float(np.finfo(B.dtype).eps)
    err = float(np.max(np.abs(B.T @ B - np.eye(B.shape[1])))) if B.size else 0.0
    if err > 1e3 * eps * max(B.shape):
        raise ValueError(
            f"`{name}` must have orthonormal columns (B^T B = I); max |B^T B - I| = {err:.3e}. "
            "Orthonormalise it first, e.g. with numpy.linalg.qr."
        )


def whitening_head(
    loss_hessian: Float[ArrayLike, "k k"], subspace_basis: Float[ArrayLike, "d r"], *, tol: float | None = None
) -> WhiteningHead:
    """Thm 3.1 (local subspace whitening): a linear head that whitens ``H_eff`` on S.

    With ``H_L = U Lambda U^T`` (``k x k``), ``U_r, Lambda_r`` its top-r eigenpairs
    and ``B`` (``d x r``) an orthonormal basis of the subspace S, the head
    ``h(z) = W z`` with ``W = U_r Lambda_r^{-1/2} B^T`` gives
    ``H_eff = W^T H_L W = B B^T``: ``v^T H_eff v = |v|^2`` on S and ``H_eff = 0``
    on S-perp. (``H_eff`` involves ``H_L`` at ``u = W z``; for a non-quadratic loss
    the statement is local: use ``H_L`` at the point the head maps to, e.g.
    ``z = 0 -> u = 0`` for a bias-free head.)

    Args:
      loss_hessian: symmetric ``H_L``, ``(k, k)``.
      subspace_basis: ``B``, ``(d, r)`` with orthonormal columns; ``r`` must not
        exceed the number of eigenvalues of ``H_L`` above ``tol``.
      tol: eigenvalue threshold for the rank (default ``k * eps * max|lambda|``).

    Example:
      >>> import jax.numpy as jnp
      >>> H = jnp.diag(jnp.array([4.0, 1.0, 0.0]))
      >>> B = jnp.eye(4)[:, :2]
      >>> wh = whitening_head(H, B)
      >>> wh.paper.shape, wh.weight.shape, wh.loss_hessian_rank
      ((3, 4), (4, 3), 2)
      >>> bool(jnp.allclose(wh.paper.T @ H @ wh.paper, B @ B.T))
      True
    """
    H = np.asarray(loss_hessian)
    B = np.asarray(subspace_basis)
    if H.ndim != 2 or H.shape[0] != H.shape[1]:
        raise ValueError(f"`loss_hessian` must be a square (k, k) matrix; got shape {H.shape}.")
    check_rank(B, "subspace_basis", 2)
    check_finite(H, "loss_hessian")
    check_finite(B, "subspace_basis")
    asym = float(np.max(np.abs(H - H.T))) if H.size else 0.0
    if asym > 1e3 * np.finfo(H.dtype).eps * max(float(np.max(np.abs(H))), 1e-300):
        raise ValueError(f"`loss_hessian` must be symmetric; max |H - H^T| = {asym:.3e}.")
    _orthonormal_check(B, "subspace_basis")
    evals, evecs = np.linalg.eigh(0.5 * (H + H.T))
    order = np.argsort(evals)[::-1]
    evals, evecs = evals[order], evecs[:, order]
    t = sign_tolerance(evals, H.dtype) if tol is None else float(tol)
    rank = int(np.sum(evals > t))
    r = B.shape[1]
    if r > rank:
        raise ValueError(
            f"`subspace_basis` spans r = {r} dimensions but H_L has only {rank} eigenvalues > {t:.3e}; "
            "Thm 3.1 whitens a subspace of dimension at most rank(H_L) (positive part)."
        )
    lam = evals[:r]
    U = evecs[:, :r]
    W = (U / np.sqrt(lam)) @ B.T  # (k, d)
    dt = H.dtype
    return WhiteningHead(
        paper=jnp.asarray(W, dt),
        weight=jnp.asarray(W.T, dt),
        eigenvalues=jnp.asarray(lam, dt),
        eigenvectors=jnp.asarray(U, dt),
        loss_hessian_rank=rank,
    )


class WhiteningCheck(NamedTuple):
    """How well ``H_eff`` is whitened on S and what it does off S.

    Attributes:
      max_rel_error: ``max_{v in S} |v^T H v - |v|^2| / |v|^2`` (exact: spectral
        radius of ``B^T H B - I``).
      subspace_eigenvalues: eigenvalues of ``B^T H B`` (all 1 when whitened).
      complement_eigenvalues: eigenvalues of ``P^T H P`` with ``P`` an orthonormal
        basis of S-perp (empty when S = R^d).
      cross_norm: ``|B^T H P|_2`` (coupling between S and S-perp).
    """

    max_rel_error: float
    subspace_eigenvalues: np.ndarray
    complement_eigenvalues: np.ndarray
    cross_norm: float


def check_whitening(
    h_eff: Float[ArrayLike, "D D"] | EffectiveHessian, subspace_basis: Float[ArrayLike, "D r"]
) -> WhiteningCheck:
    """Measure Thm 3.1's claim ``v^T H_eff v = |v|^2`` for ``v`` in ``S = span(B)``.

    For ``v = B c``: ``v^T H v - |v|^2 = c^T (B^T H B - I) c`` and ``|v| = |c|``, so the
    maximum relative error over S is the spectral radius of ``B^T H B - I``.

    Args:
      h_eff: ``(D, D)`` symmetric matrix or an :class:`EffectiveHessian` (its ``full``).
      subspace_basis: ``B``, ``(D, r)``, orthonormal columns.
    """
    H = np.asarray(h_eff.full if isinstance(h_eff, EffectiveHessian) else h_eff)
    B = np.asarray(subspace_basis)
    if H.ndim != 2 or H.shape[0] != H.shape[1]:
        raise ValueError(f"`h_eff` must be square; got shape {H.shape}.")
    check_rank(B, "subspace_basis", 2)
    if B.shape[0] != H.shape[0]:
        raise ValueError(f"`subspace_basis` must have {H.shape[0]} rows (the size of `h_eff`); got {B.shape}.")
    _orthonormal_check(B, "subspace_basis")
    H = 0.5 * (H + H.T)
    r = B.shape[1]
    A = B.T @ H @ B
    sub_eigs = np.linalg.eigvalsh(A)
    max_err = float(np.max(np.abs(sub_eigs - 1.0))) if r else 0.0
    Ufull = np.linalg.svd(B, full_matrices=True)[0]
    P = Ufull[:, r:]
    comp = np.linalg.eigvalsh(P.T @ H @ P) if P.shape[1] else np.zeros((0,), H.dtype)
    cross = float(np.linalg.norm(B.T @ H @ P, 2)) if (P.shape[1] and r) else 0.0
    return WhiteningCheck(
        max_rel_error=max_err, subspace_eigenvalues=sub_eigs, complement_eigenvalues=comp, cross_norm=cross
    )
