"""Experiment 9, head geometry: |J_h v| along tangents and the Sec. 5 controls, pullback-metric spectrum, orbits."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from experiments import rules
from ssl_geometry import as_function, curvature, geometry, metrics
from ssl_geometry import paper as P

__all__ = [
    "CONTROLS",
    "control_directions",
    "head_measure",
    "augmentation_geometry",
    "metric_spectrum",
    "orbit_geometry",
]

#: The Sec. 5 controls of the registry (``experiments/claims/``).
CONTROLS = rules.SEC5_RATIO_CONTROLS


# ----------------------------------------------------------------------------- head geometry


def control_directions(Z, n_images: int, steps: int, n_dirs: int, key) -> dict:
    """``{control: (N, K, d)}`` at the orbit points ``Z`` (``N = n_images * steps`` rows, image-major).

    ``random``: ``N(0, I)``; ``between``: ``z_(j, t) - z_(i, t)``, the same orbit step of another image
    ``j != i`` drawn uniformly; ``data``: ``sum_m g_m (z_m - zbar) / sqrt(N)``, ``g ~ N(0, I_N)``
    (Gaussian with the covariance of all points).
    """
    N, d = Z.shape
    k_r, k_b, k_d = jax.random.split(key, 3)
    img, step = np.arange(N) // steps, np.arange(N) % steps
    other = (img[:, None] + np.asarray(jax.random.randint(k_b, (N, n_dirs), 1, max(n_images, 2)))) % n_images
    return {
        "random": jax.random.normal(k_r, (N, n_dirs, d), Z.dtype),
        "between": Z[other * steps + step[:, None]] - Z[:, None],
        "data": jnp.einsum("nkm,md->nkd", jax.random.normal(k_d, (N, n_dirs, N), Z.dtype), Z - Z.mean(0)) / np.sqrt(N),
    }


@functools.partial(jax.jit, static_argnames=("head",))
def head_measure(head, hv, Z, V, dirs):
    """``u = h(z)``, ``g_aug = |J v|/|v|`` and, per control, ``g_c = sqrt(mean_r |J r|^2/|r|^2)`` per point."""
    hfn = as_function(head, hv)
    U = hfn(Z)
    g_aug = jax.vmap(lambda z, v: metrics.metric_degeneracy(hfn, z, v))(Z, V)
    rms = lambda R: jnp.sqrt(
        jnp.mean(
            jax.vmap(lambda z, rs: jax.vmap(lambda r: metrics.metric_degeneracy(hfn, z, r))(rs))(Z, R) ** 2, axis=1
        )
    )
    return U, g_aug, {c: rms(R) for c, R in dirs.items()}


def _per_image(g, ok, n_images: int, steps: int) -> np.ndarray:
    """Geometric mean over each image's valid orbit points (``ok``); images without one are dropped (NaN)."""
    lg = np.where(ok, np.log(np.where(ok, g, 1.0)), 0.0).reshape(n_images, steps)
    cnt = ok.reshape(n_images, steps).sum(1)
    return np.where(cnt > 0, np.exp(lg.sum(1) / np.maximum(cnt, 1)), np.nan)


def augmentation_geometry(head, heads: dict, Z, V, n_images: int, steps: int, n_dirs: int, key, seed: int) -> dict:
    """The Sec. 5 numbers of one augmentation's orbits for each head variables in ``heads`` (float64).

    Per image ``i``, the gains of its valid orbit points (non-zero tangent) are averaged geometrically
    (so ``D`` equals the pointwise ``exp(mean log(g_aug / g_c))`` when every point is valid) and
    :func:`experiments.rules.degeneracy_ratio` resamples images, not the correlated points of one
    orbit. The orbits' paper-way spreads (:func:`ssl_geometry.paper.orbit_spreads`, L2-normalised) of z
    and of each head's h(z), one orbit per image. Returns ``{"U": {head: U}, "valid": mask, head: {...}}``.
    """
    vnorm = np.asarray(jnp.linalg.norm(V, axis=-1))
    valid = vnorm > 0
    dirs = control_directions(Z, n_images, steps, n_dirs, key)
    V_safe = jnp.where(jnp.asarray(valid)[:, None], V, dirs["random"][:, 0])  # zero tangents are excluded below
    ids = np.repeat(np.arange(n_images), steps)
    out = {"valid": valid, "vnorm": vnorm, "U": {}, "orbit_spreads_z": P.orbit_spreads(np.asarray(Z), ids)}
    for name, hv in heads.items():
        U, g_aug, g_c = (jax.tree_util.tree_map(np.asarray, t) for t in head_measure(head, hv, Z, V_safe, dirs))
        if not (
            np.all(np.isfinite(U)) and np.all(np.isfinite(g_aug)) and all(np.all(np.isfinite(g)) for g in g_c.values())
        ):
            raise FloatingPointError(f"the {name} head produced non-finite outputs or metric gains.")
        ok = valid & (g_aug > 0) & np.all([g > 0 for g in g_c.values()], axis=0)
        per = {
            "tangent": _per_image(g_aug, ok, n_images, steps),
            **{c: _per_image(g, ok, n_images, steps) for c, g in g_c.items()},
        }
        keep = np.isfinite(per["tangent"])
        out["U"][name] = U
        out[name] = {
            "ok": ok,
            "g_aug": g_aug,
            "g_c": g_c,
            "per_image": {k: x.tolist() for k, x in per.items()},
            "ratios": (
                {c: rules.degeneracy_ratio(per["tangent"][keep], per[c][keep], seed=seed) for c in CONTROLS}
                if keep.sum() >= 2
                else None
            ),
            "orbit_spreads_u": P.orbit_spreads(U, ids),
        }
    return out


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
    res = curvature.blockwise_extreme_eigenvalues(
        _metric_block_matvec(head),
        n,
        d,
        k=k,
        key=key,
        args=(hv, Z),
        dtype=jnp.float64,
        options=curvature.SolverOptions(num_steps=min(int(config.analysis.lanczos_steps), d)),
    )
    largest = np.asarray(res.largest)  # (n, k) descending
    smallest = np.asarray(res.smallest)
    out = {
        "G_lambda_max_mean": float(np.mean(largest[:, 0])),
        "G_top_eigs_mean": np.mean(largest, axis=0).tolist(),
        "G_lambda_min_mean": float(np.mean(smallest[:, 0])),
        "G_cond_top1_topk": float(np.mean(largest[:, 0] / largest[:, -1])),
        "lanczos_steps": int(res.num_steps),
        "lanczos_converged": bool(res.converged),
        # the top-k end alone (the bottom end of a rank-deficient J^T J is a cluster at 0 followed by
        # small clustered eigenvalues, which converges slowly and matters less here)
        "lanczos_top_converged": bool(
            np.all(
                np.asarray(res.largest_residuals) <= res.tol * max(np.max(np.abs(np.asarray(res.ritz_values))), 1e-300)
            )
        ),
        "lanczos_max_residual": float(max(np.max(res.largest_residuals), np.max(res.smallest_residuals))),
        "lanczos_breakdowns": int(np.sum(res.num_breakdowns)),
        "dense_check": None,
    }
    if n * d * head.out_dim <= int(config.analysis.max_dense_jacobian):
        # Dense cross-check: eig(J^T J) = squared singular values of J (plus d - k zeros when k < d).
        J = _jacobians(head, hv, Z)  # (n, k, d)
        sv = np.asarray(jnp.linalg.svd(J, compute_uv=False))  # (n, min(k, d)) descending
        ev = np.concatenate([sv**2, np.zeros((n, max(d - sv.shape[1], 0)))], axis=1)  # (n, d) descending
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
        out.update(
            {
                f"spread_{tag}": float(st.orbit_spread),
                f"intra_{tag}": float(st.intra_orbit_distance),
                f"inter_class_{tag}": float(st.inter_class_distance),
                f"class_orbit_ratio_{tag}": float(st.class_orbit_ratio),
                f"scale_{tag}": scale,
                f"rel_spread_{tag}": float(st.orbit_spread) / scale,
            }
        )
    out["spread_ratio_raw"] = out["spread_u"] / out["spread_z"]
    out["spread_ratio_rel"] = out["rel_spread_u"] / out["rel_spread_z"]
    return out
