"""Curvature engine: dense Hessians, HVPs, Lanczos, stochastic traces, certificates, the paper's power iteration.

Every tool takes *functions and pytrees*, never modules. A linear operator is a
``matvec(v, *args) -> A v`` callable on flat vectors ``(dim,)``; the arrays it
needs (parameters, a batch) are passed through ``args`` so that the jitted loops
receive them as arguments. A matvec is compiled once per *computation*: the solvers look it
up by the program it traces to, so a fresh ``lambda`` per call that computes the same thing
reuses the compiled product, and arrays it closes over are passed to the compiled code as
arguments rather than baked into it as constants (a matvec holding host callbacks of its own is
the exception: it is keyed by their identity).

What this namespace holds, by the implementation module it comes from:

* ``hessians`` -- :func:`hessian` (dense, ``jacfwd(grad f)``),
  :func:`hvp` / :func:`flat_hvp` (forward-over-reverse), :func:`linearized_hvp` with
  :func:`apply_linear` / :class:`LinearMatvec` (``jax.linearize`` once, then only the
  tangent map per product), :func:`block_diagonal_hessian`, :func:`block_coupling`.
* ``lanczos`` -- :func:`extreme_eigenvalues`,
  :func:`blockwise_extreme_eigenvalues`, :class:`LanczosResult` (full reorthogonalisation
  against the filled basis only, residual estimates, breakdown restarts, adaptive checks,
  matvec shape and symmetry checks).
* ``extremes`` -- :func:`hessian_extremes` (:class:`HessianExtremes`): from a loss, a point and its
  arguments to the extreme eigenvalues of the Hessian in one call; blockwise Lanczos where
  :func:`block_coupling` shows the Hessian block-diagonal, full Lanczos where not; compiled once
  per computation whatever closure the caller writes.
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
from ssl_geometry._src.linalg.extremes import HessianExtremes as HessianExtremes
from ssl_geometry._src.linalg.extremes import hessian_extremes as hessian_extremes
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
    "HessianExtremes", "hessian_extremes",
    "SpectralDensity", "slq_density", "hutchinson_trace", "hutchpp_trace", "CurvatureWitness",
    "negative_curvature_witness", "PSDCertificate", "psd_certificate", "PowerIterationResult",
    "paper_power_iteration",
]
