"""Experiment 9, head geometry: |J_h v| along tangents, pullback-metric spectrum, orbit statistics."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ssl_geometry import curvature, geometry, metrics
from ssl_geometry import as_function

__all__ = ["metric_spectrum", "orbit_geometry"]


# ----------------------------------------------------------------------------- head geometry


@functools.partial(jax.jit, static_argnames=("head",))
def head_measure(head, hv, Z, V, R):
    """``u = h(z)``, ``g_aug = |J v|/|v|`` and ``g_rand = sqrt(mean_r |J r|^2/|r|^2)`` per point."""
    hfn = as_function(head, hv)
    U = hfn(Z)
    g_aug = jax.vmap(lambda z, v: metrics.metric_degeneracy(hfn, z, v))(Z, V)
    g_r = jax.vmap(lambda z, rs: jax.vmap(lambda r: metrics.metric_degeneracy(hfn, z, r))(rs))(Z, R)
    return U, g_aug, jnp.sqrt(jnp.mean(g_r ** 2, axis=1))


@functools.lru_cache(maxsize=None)
def _metric_block_matvec(head):
    """``(V (n, d), hv, Z (n, d)) -> (J_i^T J_i V_i)_i``: matrix-free pullback metric, one block per point."""

    def mv(V, hv, Z):
        hfn = as_function(head, hv)

        def one(z, v):
            jv = jax.jvp(hfn, (z,), (v,))[1]
            return jax.vjp(hfn, z)[1](jv)[0]

        return jax.vmap(one)(Z, V)

    return mv


@functools.partial(jax.jit, static_argnames=("head",))
def _jacobians(head, hv, Z):
    """Per-point head Jacobians ``(n, k, d)`` (:func:`geometry.pullback_metric`)."""
    return geometry.pullback_metric(as_function(head, hv), Z).jacobian


def metric_spectrum(head, hv, Z, config, key) -> dict:
    """Extreme eigenvalues of ``G_i = J_h(z_i)^T J_h(z_i)`` at the rows of ``Z`` (float64)."""
    n, d = Z.shape
    k = min(int(config.analysis.lanczos_k), d)
    res = curvature.blockwise_extreme_eigenvalues(_metric_block_matvec(head), n, d, k=k,
                                                  num_steps=min(int(config.analysis.lanczos_steps), d), key=key,
                                                  args=(hv, Z), dtype=jnp.float64)
    largest = np.asarray(res.largest)  # (n, k) descending
    smallest = np.asarray(res.smallest)
    out = {
        "G_lambda_max_mean": float(np.mean(largest[:, 0])),
        "G_top_eigs_mean": np.mean(largest, axis=0).tolist(),
        "G_lambda_min_mean": float(np.mean(smallest[:, 0])),
        "G_cond_top1_topk": float(np.mean(largest[:, 0] / largest[:, -1])),
        "lanczos_steps": int(res.num_steps), "lanczos_converged": bool(res.converged),
        # the top-k end alone (the bottom end of a rank-deficient J^T J is a cluster at 0 followed by
        # small clustered eigenvalues, which converges slowly and matters less here)
        "lanczos_top_converged": bool(np.all(np.asarray(res.largest_residuals)
                                             <= res.tol * max(np.max(np.abs(np.asarray(res.ritz_values))), 1e-300))),
        "lanczos_max_residual": float(max(np.max(res.largest_residuals), np.max(res.smallest_residuals))),
        "lanczos_breakdowns": int(np.sum(res.num_breakdowns)),
        "dense_check": None,
    }
    if n * d * head.out_dim <= int(config.analysis.max_dense_jacobian):
        # Dense cross-check: eig(J^T J) = squared singular values of J (plus d - k zeros when k < d).
        J = _jacobians(head, hv, Z)  # (n, k, d)
        sv = np.asarray(jnp.linalg.svd(J, compute_uv=False))  # (n, min(k, d)) descending
        ev = np.concatenate([sv ** 2, np.zeros((n, max(d - sv.shape[1], 0)))], axis=1)  # (n, d) descending
        top = ev[:, :k]
        tol_rank = ev[:, :1] * max(d, head.out_dim) * np.finfo(np.float64).eps
        out["dense_check"] = {
            "rel_err_top_eigs": float(np.max(np.abs(top - largest) / np.maximum(np.abs(top), 1e-300))),
            "abs_err_min_eig": float(np.max(np.abs(ev[:, -1] - smallest[:, 0]))),
            "lambda_max_dense_mean": float(np.mean(ev[:, 0])),
            "numerical_rank_mean": float(np.mean(np.sum(ev > tol_rank, axis=1))),
        }
    return out


def _rms_scale(reps):
    """``sqrt(mean_p |r_p - mean r|^2)`` over all points of ``reps`` (..., dim)."""
    r = reps.reshape(-1, reps.shape[-1])
    return jnp.sqrt(jnp.mean(jnp.sum((r - r.mean(axis=0)) ** 2, axis=-1)))


_orbit_statistics = jax.jit(metrics.orbit_statistics)


def orbit_geometry(Z, U, n_classes: int, n_images: int, steps: int) -> dict:
    """Orbit statistics of backbone ``Z`` and head ``U`` (rows class-major, then image, then step)."""
    out = {}
    for tag, R in (("z", Z), ("u", U)):
        reps = jnp.asarray(R, jnp.float64).reshape(n_classes, n_images, steps, -1)
        st = _orbit_statistics(reps)
        scale = float(_rms_scale(reps))
        out.update({f"spread_{tag}": float(st.orbit_spread), f"intra_{tag}": float(st.intra_orbit_distance),
                    f"inter_class_{tag}": float(st.inter_class_distance),
                    f"class_orbit_ratio_{tag}": float(st.class_orbit_ratio), f"scale_{tag}": scale,
                    f"rel_spread_{tag}": float(st.orbit_spread) / scale})
    out["spread_ratio_raw"] = out["spread_u"] / out["spread_z"]
    out["spread_ratio_rel"] = out["rel_spread_u"] / out["rel_spread_z"]
    return out
