"""The effective Hessian of a projection head and the theorems built on it.

For a head ``h: z -> u`` and a loss ``L: u -> R``::

    H_eff(z) = J^T H_L J  +  sum_i rho_i hess_z h_i(z)  =  G(z) + M(z)

(``docs/theory.md``). What this namespace holds, by the implementation module it comes from:

* :mod:`.effective` -- :func:`effective_hessian` (dense ``H_eff``, ``G``, ``M``, ``H_L``, ``rho``,
  ``J``), :func:`pullback_metric`, matrix-free :func:`effective_hvp` / :func:`effective_hvp_operator`;
* :mod:`.premises` -- :func:`premises` (``H_L`` PSD?, rank, ``|rho|``, signs), :func:`sign_structure`
  and :func:`sign_tolerance`, the one sign tolerance of the instrument;
* :mod:`.whitening` -- Thm 3.1: :func:`whitening_head`, :func:`check_whitening`;
* :mod:`.thm41` -- Thm 4.1: :func:`thm41_premises`, :func:`collapse_spectrum`,
  :func:`thm41_conclusion` and their composition :func:`classify_collapse` (the matrices a spectrum
  solves, :data:`SPECTRUM_PARTS`, each with its own solver options); :func:`head_smoothness`
  (the head kinds :data:`HEAD_KINDS`, from the smoothness classes of :mod:`ssl_geometry.activations`);
  spectra of matrices above :data:`MATRIX_FREE_ABOVE` (2048) dimensions go through Lanczos with true
  residuals, never a dense eigensolve;
* :mod:`.equilibria` -- collapsed equilibria constructed and certified (:func:`collapsed_equilibrium`);
* :mod:`.certificate` -- Thm 4.1 repaired: :func:`collapse_certificate` predicts from one collapsed state
  ``dim null(G)``, the size of ``M`` on ``null(G)``, the critical residual scale ``s*`` and the sign of
  ``lambda_min(H_eff)`` (:class:`CollapseCertificate`, the words :data:`CERTIFICATE_CONCLUSIONS`).

The records: :class:`EffectiveHessian`, :class:`PullbackMetric`, :class:`Premises`, :class:`WhiteningHead`,
:class:`WhiteningCheck`, :class:`Thm41Premises`, :class:`CollapseSpectrum`, :class:`CollapseClassification`
(its words :data:`CONCLUSIONS`) and :class:`CollapsedEquilibrium` (for the objectives
:data:`EQUILIBRIUM_OBJECTIVES`); at a collapsed state, :func:`identical_rows_finding` (whether stationarity
forces ``rho = 0``) and :func:`null_space_residuals` (residual rows in the null space of ``J^T``). The
operator norm of a Jacobian is :func:`ssl_geometry.curvature.operator_norm`, with the linear algebra.

Source: "The Geometry of Projection Heads: Conditioning, Invariance, and Collapse"
(arXiv 2605.17180, ICML 2026), Thm 3.1 and Thm 4.1.
"""

from ssl_geometry._src.instrument.certificate import CERTIFICATE_CONCLUSIONS as CERTIFICATE_CONCLUSIONS
from ssl_geometry._src.instrument.certificate import CollapseCertificate as CollapseCertificate
from ssl_geometry._src.instrument.certificate import collapse_certificate as collapse_certificate
from ssl_geometry._src.instrument.effective import EffectiveHessian as EffectiveHessian
from ssl_geometry._src.instrument.effective import PullbackMetric as PullbackMetric
from ssl_geometry._src.instrument.effective import effective_hessian as effective_hessian
from ssl_geometry._src.instrument.effective import effective_hvp as effective_hvp
from ssl_geometry._src.instrument.effective import effective_hvp_operator as effective_hvp_operator
from ssl_geometry._src.instrument.effective import pullback_metric as pullback_metric
from ssl_geometry._src.instrument.equilibria import EQUILIBRIUM_OBJECTIVES as EQUILIBRIUM_OBJECTIVES
from ssl_geometry._src.instrument.equilibria import CollapsedEquilibrium as CollapsedEquilibrium
from ssl_geometry._src.instrument.equilibria import collapsed_equilibrium as collapsed_equilibrium
from ssl_geometry._src.instrument.equilibria import identical_rows_finding as identical_rows_finding
from ssl_geometry._src.instrument.equilibria import null_space_residuals as null_space_residuals
from ssl_geometry._src.instrument.premises import Premises as Premises
from ssl_geometry._src.instrument.premises import premises as premises
from ssl_geometry._src.instrument.premises import sign_structure as sign_structure
from ssl_geometry._src.instrument.premises import sign_tolerance as sign_tolerance
from ssl_geometry._src.instrument.thm41 import CONCLUSIONS as CONCLUSIONS
from ssl_geometry._src.instrument.thm41 import HEAD_KINDS as HEAD_KINDS
from ssl_geometry._src.instrument.thm41 import MATRIX_FREE_ABOVE as MATRIX_FREE_ABOVE
from ssl_geometry._src.instrument.thm41 import SPECTRUM_PARTS as SPECTRUM_PARTS
from ssl_geometry._src.instrument.thm41 import CollapseClassification as CollapseClassification
from ssl_geometry._src.instrument.thm41 import CollapseSpectrum as CollapseSpectrum
from ssl_geometry._src.instrument.thm41 import Thm41Premises as Thm41Premises
from ssl_geometry._src.instrument.thm41 import classify_collapse as classify_collapse
from ssl_geometry._src.instrument.thm41 import collapse_spectrum as collapse_spectrum
from ssl_geometry._src.instrument.thm41 import head_smoothness as head_smoothness
from ssl_geometry._src.instrument.thm41 import thm41_conclusion as thm41_conclusion
from ssl_geometry._src.instrument.thm41 import thm41_premises as thm41_premises
from ssl_geometry._src.instrument.whitening import WhiteningCheck as WhiteningCheck
from ssl_geometry._src.instrument.whitening import WhiteningHead as WhiteningHead
from ssl_geometry._src.instrument.whitening import check_whitening as check_whitening
from ssl_geometry._src.instrument.whitening import whitening_head as whitening_head

__all__ = [
    "EffectiveHessian",
    "PullbackMetric",
    "effective_hessian",
    "pullback_metric",
    "effective_hvp",
    "effective_hvp_operator",
    "Premises",
    "premises",
    "sign_structure",
    "sign_tolerance",
    "WhiteningHead",
    "WhiteningCheck",
    "whitening_head",
    "check_whitening",
    "CONCLUSIONS",
    "MATRIX_FREE_ABOVE",
    "SPECTRUM_PARTS",
    "CollapseClassification",
    "CollapseSpectrum",
    "HEAD_KINDS",
    "Thm41Premises",
    "classify_collapse",
    "collapse_spectrum",
    "head_smoothness",
    "thm41_conclusion",
    "thm41_premises",
    "EQUILIBRIUM_OBJECTIVES",
    "CollapsedEquilibrium",
    "collapsed_equilibrium",
    "identical_rows_finding",
    "null_space_residuals",
    "CERTIFICATE_CONCLUSIONS",
    "CollapseCertificate",
    "collapse_certificate",
]
