"""Curvature engine: dense Hessians, HVPs, Lanczos, stochastic traces, certificates, the paper's power iteration.

Every tool takes *functions and pytrees*, never modules. A linear operator is a
``matvec(v, *args) -> A v`` callable on flat vectors ``(dim,)``; the arrays it
needs (parameters, a batch) are passed through ``args`` so that the jitted loops
receive them as arguments. The same keyword tuple carries a scalar function's extra
arguments, ``hessian(f, x, args=(a, b))`` for ``f(x, a, b)`` (docs/architecture.md, "Extra
arguments and solver options"). A matvec is compiled once per *code and shapes*: the solvers
closure-convert it (docs/architecture.md, "Compiled code: one caching policy"), so a fresh
``lambda`` per call of the same code reuses the compiled product, and JAX arrays it closes over
are passed to the compiled code as arguments rather than baked into it as constants (a new
non-array value in the closure, such as a host callback created afresh, compiles anew).

What this namespace holds, by the implementation module it comes from:

* ``hessians`` -- :func:`hessian` (dense, ``jacfwd(grad f)``),
  :func:`hvp` / :func:`flat_hvp` (forward-over-reverse), :func:`linearized_hvp` with
  :func:`apply_linear` / :class:`LinearMatvec` (``jax.linearize`` once, then only the
  tangent map per product), :func:`block_diagonal_hessian`, :func:`block_coupling`.
* ``lanczos`` -- :func:`extreme_eigenvalues`,
  :func:`blockwise_extreme_eigenvalues`, :class:`LanczosResult` (full reorthogonalisation
  against the filled basis only, residual estimates, breakdown restarts, adaptive checks,
  matvec shape and symmetry checks).
* ``options`` -- :class:`SolverOptions`: how a Lanczos run stops (tolerance, step budget, check interval,
  error bound, breakdown and symmetry guards, device loop) as one frozen, validated value, taken as ``options=`` by
  :func:`extreme_eigenvalues`, :func:`blockwise_extreme_eigenvalues`, :func:`hessian_extremes`,
  :func:`operator_norm` and :func:`ssl_geometry.geometry.collapse_spectrum`. A field left ``None`` is the
  function's own default, so ``SolverOptions(tol=1e-6)`` changes the tolerance alone wherever it is passed.
* ``extremes`` -- :func:`hessian_extremes` (:class:`HessianExtremes`): from a loss, a point and its
  arguments to the extreme eigenvalues of the Hessian in one call; blockwise Lanczos where
  :func:`block_coupling` shows the Hessian block-diagonal, full Lanczos where not; compiled once
  per computation whatever closure the caller writes.
* ``norms`` -- :func:`operator_norm`: the spectral norm ``|D fn(x)|_2`` of a Jacobian, dense when small and
  by Lanczos on the smaller Gram operator (``J J^T`` or ``J^T J``) when not, from below and certified to ``tol``
  (the scale of the gradients in the Thm 4.1 premises of :mod:`ssl_geometry.geometry`).
* ``traces`` -- :func:`slq_density` (:class:`SpectralDensity`),
  :func:`hutchinson_trace`, :func:`hutchpp_trace`.
* ``certificates`` -- :func:`negative_curvature_witness`
  (:class:`CurvatureWitness`), :func:`psd_certificate` (:class:`PSDCertificate`).
* ``power`` -- :func:`paper_power_iteration`
  (:class:`PowerIterationResult`), the paper's estimator kept as the baseline.
* ``canonical`` -- :func:`closure_convert`: a closure split into its program (hashable, equal for
  every closure of the same code) and the arrays it holds, the conversion the solvers apply; for
  a caller's own jitted loop over a user's closure (``jax.jit(run, static_argnums=0)(canon, consts,
  ...)``), so a fresh closure of the same code compiles once.
"""

from ssl_geometry._src.linalg.canonical import closure_convert as closure_convert
from ssl_geometry._src.linalg.certificates import CurvatureWitness as CurvatureWitness
from ssl_geometry._src.linalg.certificates import PSDCertificate as PSDCertificate
from ssl_geometry._src.linalg.certificates import negative_curvature_witness as negative_curvature_witness
from ssl_geometry._src.linalg.certificates import psd_certificate as psd_certificate
from ssl_geometry._src.linalg.extremes import HessianExtremes as HessianExtremes
from ssl_geometry._src.linalg.extremes import hessian_extremes as hessian_extremes
from ssl_geometry._src.linalg.hessians import LinearMatvec as LinearMatvec
from ssl_geometry._src.linalg.hessians import apply_linear as apply_linear
from ssl_geometry._src.linalg.hessians import block_coupling as block_coupling
from ssl_geometry._src.linalg.hessians import block_diagonal_hessian as block_diagonal_hessian
from ssl_geometry._src.linalg.hessians import flat_hvp as flat_hvp
from ssl_geometry._src.linalg.hessians import hessian as hessian
from ssl_geometry._src.linalg.hessians import hvp as hvp
from ssl_geometry._src.linalg.hessians import linearized_hvp as linearized_hvp
from ssl_geometry._src.linalg.lanczos import LanczosResult as LanczosResult
from ssl_geometry._src.linalg.lanczos import blockwise_extreme_eigenvalues as blockwise_extreme_eigenvalues
from ssl_geometry._src.linalg.lanczos import extreme_eigenvalues as extreme_eigenvalues
from ssl_geometry._src.linalg.norms import operator_norm as operator_norm
from ssl_geometry._src.linalg.options import SolverOptions as SolverOptions
from ssl_geometry._src.linalg.power import PowerIterationResult as PowerIterationResult
from ssl_geometry._src.linalg.power import paper_power_iteration as paper_power_iteration
from ssl_geometry._src.linalg.traces import SpectralDensity as SpectralDensity
from ssl_geometry._src.linalg.traces import hutchinson_trace as hutchinson_trace
from ssl_geometry._src.linalg.traces import hutchpp_trace as hutchpp_trace
from ssl_geometry._src.linalg.traces import slq_density as slq_density

__all__ = [
    "hessian",
    "hvp",
    "flat_hvp",
    "linearized_hvp",
    "LinearMatvec",
    "apply_linear",
    "block_diagonal_hessian",
    "block_coupling",
    "LanczosResult",
    "extreme_eigenvalues",
    "blockwise_extreme_eigenvalues",
    "SolverOptions",
    "HessianExtremes",
    "hessian_extremes",
    "operator_norm",
    "SpectralDensity",
    "slq_density",
    "hutchinson_trace",
    "hutchpp_trace",
    "CurvatureWitness",
    "negative_curvature_witness",
    "PSDCertificate",
    "psd_certificate",
    "PowerIterationResult",
    "paper_power_iteration",
    "closure_convert",
]
