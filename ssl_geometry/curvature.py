"""Curvature engine: dense Hessians, HVPs, Lanczos, stochastic traces, certificates, the paper's power iteration.

Every tool takes *functions and pytrees*, never modules. A linear operator is a
``matvec(v, *args) -> A v`` callable on flat vectors ``(dim,)``; the arrays it
needs (parameters, a batch) are passed through ``args`` so that the jitted loops
receive them as arguments instead of closing over them (closed-over arrays
become XLA constants). ``matvec`` itself is a *static* argument
of the jitted loops: pass the same function object between calls to reuse the
compiled loop (a fresh ``lambda`` per call recompiles).

What this namespace holds, by the implementation module it comes from:

* ``hessians`` -- :func:`hessian` (dense, ``jacfwd(grad f)``),
  :func:`hvp` / :func:`flat_hvp` (forward-over-reverse), :func:`linearized_hvp` with
  :func:`apply_linear` / :class:`LinearMatvec` (``jax.linearize`` once, then only the
  tangent map per product), :func:`block_diagonal_hessian`, :func:`block_coupling`.
* ``lanczos`` -- :func:`extreme_eigenvalues`,
  :func:`blockwise_extreme_eigenvalues`, :class:`LanczosResult` (full reorthogonalisation
  against the filled basis only, residual estimates, breakdown restarts, adaptive checks,
  matvec shape and symmetry checks).
* ``traces`` -- :func:`slq_density` (:class:`SpectralDensity`),
  :func:`hutchinson_trace`, :func:`hutchpp_trace`.
* ``certificates`` -- :func:`negative_curvature_witness`
  (:class:`CurvatureWitness`), :func:`psd_certificate` (:class:`PSDCertificate`).
* ``power`` -- :func:`paper_power_iteration`
  (:class:`PowerIterationResult`), the paper's estimator kept as the baseline.
"""
from ssl_geometry._src.linalg.hessians import hessian as hessian
from ssl_geometry._src.linalg.hessians import hvp as hvp
from ssl_geometry._src.linalg.hessians import flat_hvp as flat_hvp
from ssl_geometry._src.linalg.hessians import linearized_hvp as linearized_hvp
from ssl_geometry._src.linalg.hessians import LinearMatvec as LinearMatvec
from ssl_geometry._src.linalg.hessians import apply_linear as apply_linear
from ssl_geometry._src.linalg.hessians import block_diagonal_hessian as block_diagonal_hessian
from ssl_geometry._src.linalg.hessians import block_coupling as block_coupling
from ssl_geometry._src.linalg.lanczos import LanczosResult as LanczosResult
from ssl_geometry._src.linalg.lanczos import extreme_eigenvalues as extreme_eigenvalues
from ssl_geometry._src.linalg.lanczos import blockwise_extreme_eigenvalues as blockwise_extreme_eigenvalues
from ssl_geometry._src.linalg.traces import SpectralDensity as SpectralDensity
from ssl_geometry._src.linalg.traces import slq_density as slq_density
from ssl_geometry._src.linalg.traces import hutchinson_trace as hutchinson_trace
from ssl_geometry._src.linalg.traces import hutchpp_trace as hutchpp_trace
from ssl_geometry._src.linalg.certificates import CurvatureWitness as CurvatureWitness
from ssl_geometry._src.linalg.certificates import negative_curvature_witness as negative_curvature_witness
from ssl_geometry._src.linalg.certificates import PSDCertificate as PSDCertificate
from ssl_geometry._src.linalg.certificates import psd_certificate as psd_certificate
from ssl_geometry._src.linalg.power import PowerIterationResult as PowerIterationResult
from ssl_geometry._src.linalg.power import paper_power_iteration as paper_power_iteration

__all__ = [
    "hessian", "hvp", "flat_hvp", "linearized_hvp", "LinearMatvec", "apply_linear", "block_diagonal_hessian",
    "block_coupling", "LanczosResult", "extreme_eigenvalues", "blockwise_extreme_eigenvalues",
    "SpectralDensity", "slq_density", "hutchinson_trace", "hutchpp_trace", "CurvatureWitness",
    "negative_curvature_witness", "PSDCertificate", "psd_certificate", "PowerIterationResult",
    "paper_power_iteration",
]
