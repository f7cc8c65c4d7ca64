"""Experiment 6, trajectory curvature: exact ``|r''|`` of a rotation trajectory against the paper's finite differences.

The backbone's and the head's representations along a rotation of each image (:class:`.geometry.Geometry`), with
the FD estimate's convergence as its spacing shrinks.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from ssl_geometry import metrics
from ssl_geometry import paper as P

from .geometry import Geometry

__all__ = ["curvature_analysis", "fd_convergence"]


def curvature_analysis(cfg, geo: Geometry, v, images, scales, *, convergence_images: int) -> dict:
    """Exact ``|r''|`` and the paper's FD on ``cfg.analysis.curvature_angles`` angles in ``[0, max]``, plus FD convergence.

    ``scales``: ``{"backbone": s_z, "head": s_h}`` (see :func:`spread_scale`). Returns summary numbers,
    the per-angle means (figure) and the convergence rows.
    """
    T = cfg.analysis.curvature_angles
    if T < 3:
        raise ValueError(f"`curvature_angles` must be >= 3 for second differences; got {T}.")
    dt = images.dtype
    thetas = jnp.linspace(0.0, math.radians(cfg.analysis.curvature_max_angle_deg), T, dtype=dt)
    h = float(thetas[1] - thetas[0])
    out, per_angle = {}, {}
    paper_kappa = {}
    for which in ("backbone", "head"):
        reps = geo.grid(v, images, thetas, which=which)
        paper_kappa[which] = np.asarray(P.fd_curvature(reps))  # (N,): normalised, undivided, mean over angles
        fd = np.asarray(metrics.fd_trajectory_curvature(reps, h))  # (N, T-2) at thetas[1:-1]
        ex = np.asarray(geo.exact(v, images, thetas[1:-1], which=which))
        for name, arr in (("fd", fd), ("exact", ex)):
            if not np.all(np.isfinite(arr)):
                raise FloatingPointError(f"non-finite {name} curvature of the {which} trajectory.")
        out[which] = {
            "exact_mean": float(ex.mean()),
            "fd_mean": float(fd.mean()),
            "fd_over_exact": float(fd.mean() / ex.mean()),
            "median_pointwise_rel_diff": float(np.median(np.abs(fd - ex) / np.maximum(ex, 1e-300))),
            "scale": scales[which],
        }
        per_angle[which] = {"exact": ex.mean(0) / scales[which], "fd": fd.mean(0) / scales[which]}
    ratio = lambda k: out["head"][k] / out["backbone"][k]
    norm = scales["backbone"] / scales["head"]
    summary = {
        "ratio_exact_raw": ratio("exact_mean"),
        "ratio_fd_raw": ratio("fd_mean"),
        "ratio_exact_normalised": ratio("exact_mean") * norm,
        "ratio_fd_normalised": ratio("fd_mean") * norm,
        "fd_spacing_deg": math.degrees(h),
        "ratio_paper": float(P.curvature_ratio(paper_kappa["backbone"], paper_kappa["head"])),
        "paper_kappa_backbone": float(paper_kappa["backbone"].mean()),
        "paper_kappa_head": float(paper_kappa["head"].mean()),
    }
    conv = fd_convergence(cfg, geo, v, images[:convergence_images])
    return {
        "summary": summary,
        "by_rep": out,
        "angles_deg": np.degrees(np.asarray(thetas[1:-1])).tolist(),
        "per_angle": {k: {kk: vv.tolist() for kk, vv in d.items()} for k, d in per_angle.items()},
        "convergence": conv,
    }


def fd_convergence(cfg, geo: Geometry, v, images) -> list[dict]:
    """At ``theta_c``: central second difference ``|r(t+h) - 2 r(t) + r(t-h)| / h^2`` for shrinking ``h`` vs exact.

    Rows: ``{"rep", "h_deg", "median_rel_err", "max_rel_err"}`` with ``rel_err = |FD - exact| / exact`` over
    images. With ``r`` smooth near ``theta_c`` the error is ``O(h^2)`` until rounding (``~eps |r| / h^2``)
    takes over; a kink of ``r'`` inside ``[t-h, t+h]`` adds an ``O(|jump| / h)`` term.
    """
    dt = images.dtype
    tc = math.radians(cfg.analysis.convergence_angle_deg)
    rows = []
    for which in ("backbone", "head"):
        ex = np.asarray(geo.exact(v, images, jnp.asarray([tc], dt), which=which))[:, 0]
        for hd in cfg.analysis.convergence_spacings_deg:
            hr = math.radians(hd)
            reps = geo.grid(v, images, jnp.asarray([tc - hr, tc, tc + hr], dt), which=which)
            fd = np.asarray(metrics.fd_trajectory_curvature(reps, hr))[:, 0]
            rel = np.abs(fd - ex) / np.maximum(ex, 1e-300)
            rows.append(
                {
                    "rep": which,
                    "h_deg": float(hd),
                    "median_rel_err": float(np.median(rel)),
                    "max_rel_err": float(np.max(rel)),
                    "exact_median": float(np.median(ex)),
                }
            )
    return rows
