"""Experiment 8, H_eff: the effective Hessian of the two-view loss w.r.t. the backbone embeddings, dense or
matrix-free, with its premises (re-exported by :mod:`.core`)."""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

from ssl_geometry import as_function, curvature, geometry

from .objective import loss_fn

__all__ = ["effective_hessian_at_data"]


@functools.partial(jax.jit, static_argnames=("head", "loss", "per_sample"))
def _heff_core(head, loss, hv, z1, z2, *, per_sample):
    hfn = as_function(head, hv)
    u2 = jax.lax.stop_gradient(hfn(z2))
    return geometry.effective_hessian(hfn, lambda u: loss(u, u2), z1, per_sample=per_sample)


def effective_hessian_at_data(head, head_vars, z1, z2, cfg, *, max_dense_dim: int = geometry.MATRIX_FREE_ABOVE):
    """Float64 ``H_eff = G + M`` of ``L(h(z1), sg(h(z2)))`` w.r.t. the view-1 batch ``z1``, with ``H_L``.

    Dense (:func:`ssl_geometry.geometry.effective_hessian` and :func:`~ssl_geometry.geometry.premises`,
    exact) when ``dim = z1.size <= min(max_dense_dim, MATRIX_FREE_ABOVE)``; above it (the paper
    variant's 8 x 384 = 3072) matrix-free (:func:`_matrix_free`): no dense eigensolve of a matrix over
    the threshold. Both report the extremes of ``H_eff``, ``G``, ``M`` and ``H_L``, ``H_L``'s PSD
    premise, ``|rho|`` and the chain-rule check ``|H_eff - G - M| / |H_eff|`` (dense: max entry;
    matrix-free: on random vectors), and ``method``.
    """
    with jax.enable_x64(True):
        hv = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64), head_vars)
        z1 = jnp.asarray(z1, jnp.float64)
        z2 = jnp.asarray(z2, jnp.float64)
        t0 = time.perf_counter()
        if z1.size > min(int(max_dense_dim), geometry.MATRIX_FREE_ABOVE):
            out = _matrix_free(head, hv, z1, z2, cfg)
        else:
            eh = _heff_core(head, loss_fn(cfg), hv, z1, z2, per_sample=not cfg.model.head_batch_norm)
            eh = jax.tree_util.tree_map(np.asarray, eh)
            p = geometry.premises(eh)
            out = {
                "method": "dense",
                "H_L_rank": p.loss_hessian_rank,
                "residual_norm": p.residual_norm,
                "signs": p.signs,
                "H_L_psd": p.loss_hessian_psd,
                "chain_rule_rel_err": float(
                    np.max(np.abs(eh.full - eh.metric - eh.interaction)) / np.max(np.abs(eh.full))
                ),
            }
            for key, name in (("H_eff", "full"), ("G", "metric"), ("M", "interaction"), ("H_L", "loss_hessian")):
                out[f"{key}_min"], out[f"{key}_max"] = p.extremes[name]
    return {"dim": int(z1.size), **out, "seconds": time.perf_counter() - t0}


def _matrix_free(head, hv, z1, z2, cfg, probes: int = 2) -> dict:
    """The matrix-free half of :func:`effective_hessian_at_data` (float64, inside its x64 context).

    ``H_eff``, ``G``, ``M``: :func:`ssl_geometry.geometry.collapse_spectrum` (Lanczos, every size a
    Lanczos size: ``max_dense_dim=1``); ``H_L`` at ``u = h(z1)``: :func:`ssl_geometry.curvature.hessian_extremes`
    (tol 1e-8), PSD iff ``lambda_min >= -sign_tolerance`` with the Lanczos residual added; ``rank``
    is not computed (``None``). Signs use the same tolerances. Chain rule: ``max_v |H v - G v - M v| / |H v|``
    over ``probes`` random unit ``v``. Raises ``FloatingPointError`` when a solve misses its
    tolerance (a truncated spectrum is not reported as a premise).
    """
    hfn, loss = as_function(head, hv), loss_fn(cfg)
    u2 = jax.lax.stop_gradient(hfn(z2))
    lfn = lambda u: loss(u, u2)
    spec = geometry.collapse_spectrum(
        hfn,
        lfn,
        z1,
        max_dense_dim=1,
        key=jax.random.PRNGKey(0),
        options=curvature.SolverOptions(num_steps=int(min(z1.size, 400))),
    )
    unconverged = [n for n, r in spec.residual_norms.items() if not r["converged"]]
    u1 = hfn(z1)
    hl = curvature.hessian_extremes(
        lfn,
        u1,
        method="full",
        key=jax.random.PRNGKey(1),
        options=curvature.SolverOptions(tol=1e-8, num_steps=int(min(u1.size, 400))),
    )
    if unconverged or not bool(hl.converged):
        raise FloatingPointError(
            "effective_hessian_at_data: matrix-free Lanczos did not converge: "
            + "; ".join(unconverged + ([] if hl.converged else ["H_L"]))
        )
    lo, hi = float(hl.smallest[0]), float(hl.largest[0])
    tol_l = geometry.sign_tolerance(
        [lo, hi], np.float64, dim=int(u1.size), residual=float(max(hl.smallest_residuals[0], hl.largest_residuals[0]))
    )
    names = {"H_eff": "full", "G": "metric", "M": "interaction"}
    out = {
        "method": "lanczos",
        "H_L_rank": None,
        "H_L_min": lo,
        "H_L_max": hi,
        "H_L_psd": bool(lo >= -tol_l),
        "residual_norm": float(jnp.linalg.norm(jax.grad(lfn)(u1))),
        "signs": {
            **{
                n: geometry.sign_structure(spec.lambda_min[n], spec.lambda_max[n], spec.sign_tol[n])
                for n in names.values()
            },
            "loss_hessian": geometry.sign_structure(lo, hi, tol_l),
        },
        "lanczos_residuals": {
            **{k: spec.residual_norms[n] for k, n in names.items()},
            "H_L": [float(hl.smallest_residuals[0]), float(hl.largest_residuals[0])],
        },
    }
    for k, n in names.items():
        out[f"{k}_min"], out[f"{k}_max"] = spec.lambda_min[n], spec.lambda_max[n]
    ops = {n: geometry.effective_hvp_operator(hfn, lfn, z1, part=n) for n in names.values()}
    err = 0.0
    for i in range(probes):
        v = jax.random.normal(jax.random.PRNGKey(100 + i), (z1.size,), z1.dtype)
        hv_ = {n: np.asarray(mv(v / jnp.linalg.norm(v), *a)) for n, (mv, a) in ops.items()}
        err = max(
            err, float(np.linalg.norm(hv_["full"] - hv_["metric"] - hv_["interaction"]) / np.linalg.norm(hv_["full"]))
        )
    out["chain_rule_rel_err"] = err
    return out
