"""Floating-point certificates for curvature claims (computer-assisted-proof style).

* :func:`negative_curvature_witness` -- a Rayleigh quotient with a rigorous rounding-error
  bound (Higham 2002, s.3.1): ``q + bound < 0`` proves ``lambda_min(H) < 0``.
* :func:`psd_certificate` -- a shifted float64 Cholesky (Rump 2006) proving
  ``lambda_min(H) > -margin``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ssl_geometry._src.checks import check_finite, check_positive, check_rank

__all__ = ["CurvatureWitness", "negative_curvature_witness", "PSDCertificate", "psd_certificate"]

_U64 = 2.0**-53  # unit roundoff of IEEE binary64, round to nearest


def _gamma(n: int) -> float:
    """Higham's ``gamma_n = n u / (1 - n u)`` for binary64."""
    nu = n * _U64
    if nu >= 0.5:
        raise ValueError(f"dimension {n} too large for the gamma_n error bound.")
    return nu / (1 - nu)


class CurvatureWitness(NamedTuple):
    """A Rayleigh quotient with a floating-point error bound.

    Attributes:
      quotient: computed ``q = v^T H v / v^T v`` (float64).
      error_bound: bound on ``|q_computed - q_exact|`` (see :func:`negative_curvature_witness`).
      proves_instability: ``q + error_bound < 0`` and the bound is rigorous: then
        ``lambda_min(H) <= q_exact < 0`` is proved (Rayleigh quotient bound).
      rigorous: whether ``error_bound`` is a proved bound (explicit matrix, or a
        callable with a supplied ``matvec_error``) rather than a heuristic.
      bound_used: the formula, in words.
    """

    quotient: float
    error_bound: float
    proves_instability: bool
    rigorous: bool
    bound_used: str


def negative_curvature_witness(matvec_or_matrix, v, *, matvec_error: float | None = None) -> CurvatureWitness:
    """Certify ``lambda_min(H) < 0`` by a Rayleigh quotient with a rounding-error bound.

    ``lambda_min(H) <= q = v^T H v / v^T v`` for any ``v != 0`` (Rayleigh), so a
    computed ``q_hat`` with ``q_hat + B < 0``, where ``B >= |q_hat - q|``, proves a
    negative eigenvalue (an escape direction of a saddle).

    Bound used (explicit matrix ``H``, entries and ``v`` converted exactly to
    float64; IEEE binary64, round to nearest, no underflow/overflow; any summation
    order, FMA allowed; Higham, *Accuracy and Stability of Numerical Algorithms*,
    2nd ed., s.3.1, Lemma 3.1 and (3.4)-(3.5)): with ``u = 2^-53``,
    ``gamma_n = n u / (1 - n u)`` and ``E = gamma_{2n} |v|^T |H| |v|`` bounding the error
    of ``num_hat = fl(v^T fl(H v))``, and ``|den_hat - v^T v| <= gamma_n v^T v``,

        ``|q_hat - q| <= (E + gamma_n (|num_hat| + E)) / (den_hat (1 - 2 gamma_n)) + u |q_hat|``;

    the returned ``error_bound`` is twice this value, which absorbs the rounding
    in evaluating the bound itself (an ``O(n u)`` relative effect).

    For a callable ``matvec(v) -> H v``: the dot-product part is bounded the same
    way with ``|H||v|`` replaced by ``|fl(H v)|`` and a supplied
    ``matvec_error >= |fl(H v) - H v|_2`` enters as ``|v|_2 matvec_error``;
    without ``matvec_error`` a heuristic ``sqrt(dim) * 1e3 u |H v|_2 |v|_2`` is used,
    ``rigorous=False`` and ``proves_instability`` is ``False``.

    Example:
      >>> import numpy as np
      >>> w = negative_curvature_witness(np.array([[1.0, 2.0], [2.0, 1.0]]), np.array([1.0, -1.0]))
      >>> w.quotient, w.proves_instability
      (-1.0, True)
    """
    v = np.asarray(v, dtype=np.float64)
    check_rank(v, "v", 1)
    n = v.shape[0]
    if not np.all(np.isfinite(v)) or not np.any(v):
        raise ValueError("`v` must be a finite, non-zero vector.")
    g_n, g_2n = _gamma(n), _gamma(2 * n)
    den = float(v @ v)
    if callable(matvec_or_matrix):
        hv = np.asarray(matvec_or_matrix(v), dtype=np.float64).reshape(-1)
        if hv.shape != (n,):
            raise ValueError(f"`matvec(v)` must return shape ({n},); got {hv.shape}.")
        check_finite(hv, "matvec(v)")
        num = float(v @ hv)
        abs_term = float(np.abs(v) @ np.abs(hv))
        rigorous = matvec_error is not None
        if matvec_error is not None:
            check_positive(matvec_error, "matvec_error", strict=False)
            mv_err = float(matvec_error)
        else:
            mv_err = math.sqrt(n) * 1e3 * _U64 * float(np.linalg.norm(hv))
        E = g_n * abs_term + math.sqrt(den) * mv_err * (1 + g_n)
        used = (
            "gamma_n |v|^T|fl(Hv)| + |v|_2 * matvec_error (dot product, Higham Lemma 3.1)"
            if rigorous
            else "heuristic: gamma_n |v|^T|fl(Hv)| + |v| sqrt(n) 1e3 u |Hv| (matvec error unknown)"
        )
    else:
        H = np.asarray(matvec_or_matrix, dtype=np.float64)
        check_rank(H, "matvec_or_matrix", 2)
        if H.shape != (n, n):
            raise ValueError(f"`matvec_or_matrix` must be ({n}, {n}) to match `v`; got {H.shape}.")
        check_finite(H, "matvec_or_matrix")
        num = float(v @ (H @ v))
        E = g_2n * float(np.abs(v) @ (np.abs(H) @ np.abs(v)))
        rigorous = True
        used = "gamma_2n |v|^T |H| |v| for fl(v^T fl(Hv)) (Higham (3.4)-(3.5)), gamma_n for v^T v"
    q = num / den
    bound = 2.0 * ((E + g_n * (abs(num) + E)) / (den * (1 - 2 * g_n)) + _U64 * abs(q))
    proves = bool(rigorous and q + bound < 0)
    return CurvatureWitness(q, bound, proves, rigorous, used)


class PSDCertificate(NamedTuple):
    """Outcome of :func:`psd_certificate`.

    Attributes:
      certified: ``True`` proves ``lambda_min(H) >= -margin`` (in fact ``> -margin``).
      margin: the margin asked for.
      shift: the extra shift ``c`` subtracted before factorising (rounding allowance).
      lower_bound: ``-margin`` when certified, else ``None``.
      message: what was proved, or why the certificate failed.
    """

    certified: bool
    margin: float
    shift: float
    lower_bound: float | None
    message: str


def psd_certificate(H, margin: float = 0.0) -> PSDCertificate:
    """Prove ``lambda_min(H) >= -margin`` by a float64 Cholesky of ``H + margin I - c I``.

    Following Rump, "Verification of positive definiteness", BIT Numer. Math. 46
    (2006) 433-452: if floating-point Cholesky (binary64, round to nearest) of
    ``A - c I`` runs to completion, with ``A`` symmetric with non-negative diagonal and
    ``c >= gamma_{n+1} / (1 - gamma_{n+1}) * tr(A) + 4 n (2 n + max A_ii) eta`` (``eta = 2^-1074``,
    the underflow unit; the constant as we read the paper's main theorem), then
    ``A`` is positive definite. Here ``A = H + margin I``
    (its rounding ``fl(A) - A`` and the symmetrisation ``(H + H^T)/2`` of a Hessian
    that is symmetric only up to rounding are covered by adding ``u |A|_F`` each)
    and ``c`` is taken twice that threshold (a safety factor against misreading
    lower-order terms of the published constant). Success proves ``H + margin I > 0``,
    i.e. ``lambda_min(H) > -margin``; failure (a non-positive pivot) proves
    nothing and is reported with ``certified=False``, never as an exception. A PSD
    matrix that is singular or nearly so is therefore refused at ``margin=0``.

    Example:
      >>> import numpy as np
      >>> psd_certificate(np.array([[2.0, 1.0], [1.0, 2.0]])).certified
      True
      >>> psd_certificate(np.array([[1.0, 1.0], [1.0, 1.0]])).certified   # singular PSD
      False
    """
    H = np.asarray(H, dtype=np.float64)
    check_rank(H, "H", 2)
    n = H.shape[0]
    if H.shape != (n, n) or n == 0:
        raise ValueError(f"`H` must be a non-empty square matrix; got shape {H.shape}.")
    check_finite(H, "H")
    check_positive(margin, "margin", strict=False)
    scale = max(float(np.max(np.abs(H))), 1e-300)
    asym = float(np.max(np.abs(H - H.T))) / scale
    if asym > 1e-8:
        raise ValueError(f"`H` must be symmetric; relative asymmetry max|H - H^T|/max|H| = {asym:.3g}.")
    A = 0.5 * (H + H.T) + margin * np.eye(n)
    d = np.diag(A)
    if np.any(d < 0):
        return PSDCertificate(
            False, float(margin), 0.0, None, f"H + margin I has a negative diagonal entry ({d.min():.3g}): not PSD."
        )
    g = _gamma(n + 1)
    eta = 2.0**-1074
    fro = float(np.linalg.norm(A))
    c = 2.0 * (g / (1 - g) * float(np.sum(d)) + 4 * n * (2 * n + float(d.max())) * eta + 2 * _U64 * fro)
    try:
        np.linalg.cholesky(A - c * np.eye(n))
    except np.linalg.LinAlgError:
        return PSDCertificate(
            False,
            float(margin),
            c,
            None,
            f"Cholesky of H + ({margin:.3g} - {c:.3g}) I failed: lambda_min(H) >= -{margin:.3g} "
            "is NOT certified (H may be indefinite, singular or too close to singular).",
        )
    return PSDCertificate(
        True,
        float(margin),
        c,
        -float(margin),
        f"Cholesky of H + ({margin:.3g} - {c:.3g}) I succeeded: lambda_min(H) > -{margin:.3g} (Rump 2006).",
    )
