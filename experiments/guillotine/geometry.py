"""Experiment 6, geometry: trajectory curvature, orbits and metric degeneracy of a trained backbone/head pair.

Each quantity the paper reports is computed twice, named apart: the paper's way
(:mod:`ssl_geometry.paper`: L2-normalised representations, undivided second differences, full
rotation orbits with the head on ``z/|z|``) and the project's (exact ``|r''|`` by nested jvp,
scale-free ratios, orbits over a small arc). The trajectory curvature is in :mod:`.curvature`.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from experiments import rules
from ssl_geometry import augment, metrics
from ssl_geometry import paper as P

__all__ = [
    "AUGMENTATIONS",
    "CONTROLS",
    "analysis_variables",
    "augmentation_fn",
    "Geometry",
    "spread_scale",
    "orbit_images",
    "orbit_analysis",
    "degeneracy_analysis",
]

AUGMENTATIONS = ("rotation", "hue", "blur")
#: The Sec. 5 controls of the registry (``experiments/claims/``), in its order.
CONTROLS = rules.SEC5_RATIO_CONTROLS


def _unit(x):
    return x / jnp.maximum(jnp.linalg.norm(x), 1e-12)


def _cast(tree, dtype):
    return jax.tree_util.tree_map(lambda a: a.astype(dtype) if jnp.issubdtype(a.dtype, jnp.floating) else a, tree)


def analysis_variables(run, dtype, *, initial_head: bool = False) -> dict:
    """``{"backbone": variables, "head": variables}`` of a run (trained; head at init if ``initial_head``), cast."""
    p, s = run["params"], run["state"]
    hp, hs = (run["init_params"], run["init_state"]) if initial_head else (p, s)
    return _cast(
        {
            "backbone": {"params": p["backbone"], **s["backbone"]},
            "head": {"params": hp["projector"], **hs["projector"]},
        },
        dtype,
    )


def augmentation_fn(cfg, name: str):
    """``(image, t) -> image``: rotation by ``t`` radians, hue shift by ``t`` turns, blur with sigma ``t``."""
    if name == "rotation":
        return augment.rotate
    if name == "hue":
        return augment.adjust_hue
    if name == "blur":
        return lambda x, t: augment.gaussian_blur(x, t, radius=cfg.analysis.tangent_blur_radius)
    raise ValueError(f"augmentation must be one of {AUGMENTATIONS}; got {name!r}.")


class Geometry:
    """Jitted measurements of ``r(t) = f(g_t x)`` and ``h(f(g_t x))`` for one backbone/head architecture.

    The models are code (closed over); every array -- variables, images, parameters -- is an argument.
    """

    def __init__(self, backbone, head, aug):
        self.backbone, self.head, self.aug = backbone, head, aug

        def z_of(v, x):
            return backbone.apply(v["backbone"], x[None])[0][0]

        def h_of(v, z):
            return head.apply(v["head"], z[None])[0][0]

        def rep(v, x, t, which):
            z = z_of(v, aug(x, t))
            return z if which == "backbone" else h_of(v, z)

        self.rep = rep

        def grid(v, xs, ts, which):  # (N, T, d)
            return jax.vmap(lambda x: jax.vmap(lambda t: rep(v, x, t, which))(ts))(xs)

        def exact(v, xs, ts, which):  # (N, T)
            one = lambda x, t: metrics.trajectory_curvature(lambda a: rep(v, x, a, which), t)
            return jax.vmap(lambda x: jax.vmap(lambda t: one(x, t))(ts))(xs)

        def z_at(v, xs, t0):  # (N, d): z of the augmented images
            return jax.vmap(lambda x: z_of(v, aug(x, t0)))(xs)

        def degeneracy(v, xs, t0, dirs):  # (N,) along the tangent; (N,) RMS over the K directions (N, K, d)
            head_fn = lambda z: h_of(v, z)
            along = jax.vmap(
                lambda x: metrics.augmentation_metric_degeneracy(head_fn, lambda a: z_of(v, aug(x, a)), t0)
            )(xs)
            gains = jax.vmap(lambda z, rs: jax.vmap(lambda r: metrics.metric_degeneracy(head_fn, z, r))(rs))(
                z_at(v, xs, t0), dirs
            )
            return along, jnp.sqrt(jnp.mean(gains**2, axis=1))

        def paper_grid(v, xs, ts):  # the paper's orbit reps: z/|z| and h(z/|z|)/|h(z/|z|)|, (N, T, d) each
            def one(x, t):
                z = _unit(z_of(v, aug(x, t)))
                return z, _unit(h_of(v, z))

            return jax.vmap(lambda x: jax.vmap(lambda t: one(x, t))(ts))(xs)

        self.grid = jax.jit(grid, static_argnames="which")
        self.paper_grid = jax.jit(paper_grid)
        self.exact = jax.jit(exact, static_argnames="which")
        self.z_at = jax.jit(z_at)
        self.degeneracy = jax.jit(degeneracy)


def spread_scale(r) -> float:
    """``s_r = sqrt(mean_i |r_i - mean r|^2)``: the overall spread used to make comparisons scale-free."""
    r = np.asarray(r, np.float64)
    return float(np.sqrt(np.mean(np.sum((r - r.mean(0)) ** 2, axis=1))))


# -------------------------------------------------------------------------------------------- orbits


def orbit_images(cfg, ds, classes: int, per_class: int):
    """``(classes, per_class, H, W, 3)`` uint8 test images, chosen as the authors'
    ``run_orbit_visualization_experiment`` does: ``classes`` evenly spaced class indices
    ``linspace(0, num_classes - 1, classes)`` and ``per_class`` images of each drawn without
    replacement (here from ``default_rng(seed)``, in index order). Under ``cfg.dry_run`` (a few mock
    images, not every class present) the classes are spaced the same way over the classes present."""
    chosen = np.linspace(0, ds.num_classes - 1, classes).astype(int)
    if cfg.get("dry_run", False):
        present = np.unique(ds.labels)
        chosen = present[np.linspace(0, present.size - 1, min(classes, present.size)).astype(int)]
        classes = len(chosen)
    if len(set(chosen.tolist())) < classes:
        raise ValueError(f"`analysis.orbit_classes` = {classes} exceeds the {ds.num_classes} classes of the data set.")
    rng = np.random.default_rng(cfg.seed)
    out = []
    for c in chosen:
        idx = np.flatnonzero(ds.labels == c)
        if idx.size < per_class:
            raise ValueError(f"class {c} has {idx.size} test images, fewer than `analysis.orbit_images` = {per_class}.")
        out.append(ds.images[np.sort(rng.choice(idx, per_class, replace=False))])
    return np.stack(out)


def orbit_analysis(cfg, geo: Geometry, v, images, scales, v_init=None) -> dict:
    """Rotation orbits: the paper's (full circle, L2-normalised, per-orbit spreads and their compression
    :func:`experiments.rules.orbit_compression`, for the trained head and, with ``v_init``, the head at
    initialisation on the same z) and the project's (:func:`ssl_geometry.metrics.orbit_statistics` over
    ``[0, orbit_max_angle_deg]``, raw and divided by ``s_r``)."""
    C, I = images.shape[:2]
    ts = jnp.linspace(0.0, math.radians(cfg.analysis.orbit_max_angle_deg), cfg.analysis.orbit_steps, dtype=images.dtype)
    rows, reps_out = [], {}
    flat = images.reshape((C * I,) + images.shape[2:])
    for which in ("backbone", "head"):
        reps = np.asarray(geo.grid(v, flat, ts, which=which)).reshape(C, I, cfg.analysis.orbit_steps, -1)
        reps_out[which] = reps
        for norm in ("raw", "normalised"):
            r = reps if norm == "raw" else reps / scales[which]
            st = metrics.orbit_statistics(jnp.asarray(r))
            rows.append(
                {
                    "rep": which,
                    "scale": norm,
                    "orbit_spread": float(st.orbit_spread),
                    "intra_orbit_distance": float(st.intra_orbit_distance),
                    "inter_class_distance": float(st.inter_class_distance),
                    "class_orbit_ratio": float(st.class_orbit_ratio),
                }
            )
    # The paper's full orbit: paper_orbit_steps rotations over [0, 360) deg, L2-normalised, head on z/|z|.
    T = cfg.analysis.paper_orbit_steps
    ts_p = jnp.asarray(np.radians(np.linspace(0.0, 360.0, T, endpoint=False)), images.dtype)
    zp, hp = (np.asarray(a) for a in geo.paper_grid(v, flat, ts_p))
    ids, labels = np.repeat(np.arange(C * I), T), np.repeat(np.arange(C), I * T)
    reps_p = {"backbone": zp, "head": hp}
    if v_init is not None:
        reps_p["head_untrained"] = np.asarray(geo.paper_grid(v_init, flat, ts_p)[1])
    paper = {w: P.orbit_metrics(r.reshape(C * I * T, -1), ids, labels) for w, r in reps_p.items()}
    spreads = {w: P.orbit_spreads(r.reshape(C * I * T, -1), ids) for w, r in reps_p.items()}
    compression = {
        h: rules.orbit_compression(spreads["backbone"], spreads[h], seed=cfg.seed) for h in reps_p if h != "backbone"
    }
    get = lambda w, n, k: next(r[k] for r in rows if r["rep"] == w and r["scale"] == n)
    summary = {
        f"spread_shrink_{n}": get("backbone", n, "orbit_spread") / get("head", n, "orbit_spread")
        for n in ("raw", "normalised")
    }
    summary["class_orbit_ratio_backbone"] = get("backbone", "raw", "class_orbit_ratio")
    summary["class_orbit_ratio_head"] = get("head", "raw", "class_orbit_ratio")
    summary["class_orbit_ratio_backbone_paper"] = paper["backbone"]["ratio"]
    summary["class_orbit_ratio_head_paper"] = paper["head"]["ratio"]
    return {
        "rows": rows,
        "summary": summary,
        "paper": paper,
        "paper_spreads": {w: x.tolist() for w, x in spreads.items()},
        "compression": compression,
        "pca": {w: _pca2(r).tolist() for w, r in reps_out.items()},
    }


def _pca2(r):
    """``(C, I, T, d)`` orbits -> ``(C, I, T, 2)``: the top-2 principal coordinates, spread-normalised (figure)."""
    C, I, T, d = r.shape
    flat = r.reshape(-1, d)
    flat = (flat - flat.mean(0)) / max(spread_scale(flat), 1e-300)
    _, _, vt = np.linalg.svd(flat, full_matrices=False)
    return (flat @ vt[:2].T).reshape(C, I, T, -1)


# -------------------------------------------------------------------------------------- degeneracy


def _control_directions(zs, n_dirs: int, key) -> dict:
    """``{control: (n, K, d)}`` directions at the rows of ``zs`` (see :func:`degeneracy_analysis`)."""
    n, d = zs.shape
    k_rand, k_perm, k_data = jax.random.split(key, 3)
    others = (jnp.arange(n)[:, None] + jax.random.randint(k_perm, (n, n_dirs), 1, n)) % n  # never the sample itself
    return {
        "random": jax.random.normal(k_rand, (n, n_dirs, d), zs.dtype),
        "between": zs[others] - zs[:, None],
        "data": jnp.einsum("nkm,md->nkd", jax.random.normal(k_data, (n, n_dirs, n), zs.dtype), zs - zs.mean(0))
        / math.sqrt(n),
    }


def degeneracy_analysis(cfg, geos: dict, heads: dict, images, key, trained: dict) -> dict:
    """Per-image gains ``g = |J_h v| / |v|`` along each augmentation tangent and along the Sec. 5 controls.

    ``heads``: ``{"trained": variables, "untrained": variables}`` (the same backbone; the head at
    initialisation for ``untrained``). At each image ``i`` (augmented to the parameter ``t0`` of
    ``analysis.tangent_*``), ``g_aug,i`` along ``v = dz/dt`` (exact, by jvp) and, per control,
    ``g_c,i = sqrt(mean_k |J_h r_k|^2 / |r_k|^2)`` over ``K = analysis.control_directions`` directions:
    ``random`` ``r ~ N(0, I)``; ``between`` ``r = z_j - z_i`` for ``j != i`` drawn uniformly; ``data``
    ``r = sum_m g_m (z_m - zbar) / sqrt(n)``, ``g ~ N(0, I_n)`` (Gaussian with the covariance of the
    batch's z). The same directions for both heads. ``D_c`` = :func:`experiments.rules.degeneracy_ratio`
    (geometric mean of ``g_aug,i / g_c,i`` with its bootstrap 95% interval); ``D < 1``: the head's
    metric is more degenerate along the augmentation than along the control.

    Returns ``{"rows": [...], "ratios": {aug: {head: {control: {"D", "lo", "hi"}}}}, "gains": {aug: {head:
    {"tangent": [...], control: [...]}}}}``.
    """
    a = cfg.analysis
    t0s = {"rotation": math.radians(a.tangent_rotation_deg), "hue": a.tangent_hue, "blur": a.tangent_blur_sigma}
    rows, ratios, gains = [], {}, {}
    for aug in AUGMENTATIONS:
        geo, t0 = geos[aug], jnp.asarray(t0s[aug], images.dtype)
        ratios[aug], gains[aug] = {}, {}
        for head_state, v in heads.items():
            dirs = _control_directions(geo.z_at(v, images, t0), a.control_directions, key)
            vals = {}
            for name in CONTROLS:
                along, other = geo.degeneracy(v, images, t0, dirs[name])
                vals["tangent"], vals[name] = np.asarray(along), np.asarray(other)
            for name, arr in vals.items():
                if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
                    raise FloatingPointError(f"non-finite or zero metric gain ({aug}, {head_state} head, {name}).")
            r = {c: rules.degeneracy_ratio(vals["tangent"], vals[c], seed=cfg.seed) for c in CONTROLS}
            ratios[aug][head_state] = r
            gains[aug][head_state] = {k: x.tolist() for k, x in vals.items()}
            rows.append(
                {
                    "augmentation": aug,
                    "head": head_state,
                    "at": float(t0s[aug]),
                    "in_training": trained[aug],
                    **{f"gain_{k}": float(x.mean()) for k, x in vals.items()},
                    **{f"D_vs_{c}": r[c]["D"] for c in CONTROLS},
                    **{f"D_vs_{c}_ci": [r[c]["lo"], r[c]["hi"]] for c in CONTROLS},
                }
            )
    return {"rows": rows, "ratios": ratios, "gains": gains}
