"""Experiment 7's measurement of one objective: its head trained (:mod:`.problem`), then measured (Thm 4.1's
premises and spectra, the collapsed state driven to stationarity, DINO's certified equilibria, Sec. 5)."""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from experiments import stationary_heads
from experiments.objectives import sec5
from experiments.objectives.problem import (
    FAMILIES,
    apply_heads,
    build_heads,
    first_view_problem,
    sample_views,
    scale_projector,
    train,
)
from ssl_geometry import geometry, metrics

__all__ = [
    "analyse_objective",
    "collapsed_stationarity",
    "dino_equilibria",
    "geometry_row",
    "representation_stats",
    "run_objective",
    "train_objective",
    "with_activation",
]


def representation_stats(proj, P, z):
    """Effective rank (both named definitions), covariance condition number and mean normalised std of ``h(z)``."""
    u = apply_heads(proj, P, z)
    return {
        "erank_rankme": float(metrics.effective_rank(u, "rankme")),
        "erank_squared": float(metrics.effective_rank(u, "squared")),
        "cond": float(metrics.covariance_condition_number(u)),
        "norm_std": float(metrics.normalized_std(u)),
    }


def _classified(res):
    p = res.premises
    return {
        "H_L_psd": p.loss_hessian_psd,
        "lambda_min_H_L": res.lambda_min["loss_hessian"],
        "rho_norm": p.residual_norm,
        "rho_nonzero": p.residual_nonzero,
        "stationary": bool(p.stationary_z and p.stationary_head),
        "grad_z_ratio": p.grad_z_ratio,
        "grad_head_ratio": p.grad_head_ratio,
        "holds": bool(p.holds_except_smoothness),
        "head_kind": res.head_kind,
        "lambda_min_H_eff": res.lambda_min["full"],
        "lambda_max_H_eff": res.lambda_max["full"],
        "lambda_min_G": res.lambda_min["metric"],
        "lambda_max_G": res.lambda_max["metric"],
        "lambda_min_M": res.lambda_min["interaction"],
        "lambda_max_M": res.lambda_max["interaction"],
        "eig_tol": res.eig_tol,
        "conclusion": res.conclusion,
    }


def geometry_row(cfg, name, params, target, center, z1, z2, key):
    """Premises (stationarity included) and extreme eigenvalues of ``H_eff``, ``G``, ``M``, ``H_L`` at one state."""
    model, variables, loss_fn = first_view_problem(cfg, name, params, target, center, z1, z2)
    res = geometry.classify_collapse(
        model,
        loss_fn,
        z1,
        variables=variables,
        activation=cfg.model.activation,
        per_sample=True,
        max_dense_dim=cfg.analysis.max_dense_dim,
        key=key,
    )
    return _classified(res)


def collapsed_stationarity(cfg, name, params, target, center, c, key) -> dict:
    """The collapsed state (both views at ``c``): the identical-rows bound and the head driven to stationarity."""
    zc = jnp.tile(c[None, :], (cfg.data.n_geom, 1))
    model, variables, loss_fn = first_view_problem(cfg, name, params, target, center, zc, zc)
    f = geometry.identical_rows_finding(model, variables, loss_fn, zc)
    st = stationary_heads.stationary_head_state(
        model, variables, loss_fn, zc, key=key, max_iter=cfg.analysis.stationarity_max_iter
    )
    return {
        "collapsed_rows_identical": f["rows_identical"],
        "collapsed_forces_rho_0": f["forces_zero_residual"],
        **{f"st_{k}": v for k, v in st.items()},
    }


def dino_equilibria(cfg, params, c, key, activation, seed) -> list[dict]:
    """Certified collapsed equilibria of a trained DINO projector against a fixed teacher, one per residual scale."""
    proj, _ = build_heads(cfg, "dino")
    rows = []
    for j, scale in enumerate(cfg.analysis.dino_residual_scales):
        k = jax.random.fold_in(key, j)
        base = {"activation": activation, "seed": seed, "residual_scale": float(scale)}
        try:
            eq = geometry.collapsed_equilibrium(
                proj,
                {"params": params["proj"]},
                "dino_fixed_teacher",
                c,
                cfg.data.n_geom,
                key=k,
                residual_scale=scale,
                activation=activation,
            )
        except ValueError as err:  # no null space: no equilibrium with rho != 0 for this head
            rows.append({**base, "exists": False, "reason": str(err)})
            continue
        res = geometry.classify_collapse(
            proj,
            eq.loss_fn,
            eq.z,
            variables={"params": params["proj"]},
            activation=activation,
            max_dense_dim=cfg.analysis.max_dense_dim,
            key=k,
        )
        rows.append({**base, "exists": True, "certified": eq.certified, **_classified(res)})
    return rows


def _loss_fell(vals) -> bool:
    """The Sec. 5 premise: the mean of the last 10% of the training losses is below the first 10%'s."""
    k = max(1, len(vals) // 10)
    return bool(np.mean(vals[-k:]) < np.mean(vals[:k]))


def with_activation(cfg, activation):
    """A copy of ``cfg`` whose heads use ``activation``."""
    c = cfg.copy_and_resolve_references()
    c.model.activation = activation
    return c


def train_objective(cfg, name, key, data, steps, seed):
    """Train one objective with ``cfg.model.activation`` (seed ``seed``): ``(row, trained, curve)`` with
    ``trained = (models, initial params, params, target, centre)`` for :func:`analyse_objective`."""
    sigma_sqrt, aug_basis, _ = data
    k_train = jax.random.split(key, 5)[0]
    t0 = time.perf_counter()
    models, (p0, _, _), (p, tgt, c), vals, _ = train(cfg, name, k_train, sigma_sqrt, aug_basis, steps)
    row = {
        "objective": name,
        "family": FAMILIES[name],
        "activation": cfg.model.activation,
        "seed": seed,
        "final_loss": float(vals[-1]),
        "initial_loss": float(vals[0]),
        "loss_fell": _loss_fell(np.asarray(vals)),
        "train_time_s": time.perf_counter() - t0,
    }
    return row, (models, p0, p, tgt, c), vals


def analyse_objective(cfg, name, key, data, row, trained, full: bool):
    """Measure a head trained by :func:`train_objective` (``key`` the same): ``(row, equilibria)``, ``row`` extended by
    Sec. 5, the representation statistics, the geometry of the trained and pseudo-collapsed states and (all but
    DINO) the collapsed state driven to stationarity; DINO's certified equilibria. ``full=False``: only the DINO
    equilibria (the other heads of ``analysis.thm41_activations``)."""
    sigma_sqrt, aug_basis, neg_basis = data
    (proj, _), p0, p, tgt, c = trained
    _, k_eval, k_geo, k_dir, k_eig = jax.random.split(key, 5)
    row, seed = dict(row), row["seed"]
    z, _, _ = sample_views(cfg, k_eval, cfg.data.n_eval, sigma_sqrt, aug_basis)
    centre = jnp.mean(z, axis=0)
    eqs = dino_equilibria(cfg, p, centre, k_eig, cfg.model.activation, seed) if name == "dino" else []
    if not full:
        return row, eqs
    trained_fn, untrained_fn = (lambda x: apply_heads(proj, p["proj"], x)), (lambda x: apply_heads(proj, p0["proj"], x))
    dirs = sec5.directions(z, aug_basis, neg_basis, k_dir, cfg.analysis.directions_per_sample)
    a = cfg.analysis
    orbit_z = jnp.stack(
        [
            sample_views(cfg, jax.random.fold_in(k_dir, 100 + j), a.orbit_size, sigma_sqrt, aug_basis, clean=z[j])[1]
            for j in range(a.n_orbits)
        ]
    )
    augs, neg, orbits, mean_gains = sec5.sec5_inputs(trained_fn, untrained_fn, z, dirs, orbit_z)
    row.update(
        sec5={"augmentations": augs, "negative": neg, "orbits": orbits, "mean_gains": mean_gains},
        z_full_rank=bool(np.linalg.matrix_rank(np.cov(np.asarray(z), rowvar=False)) == cfg.data.d),
    )
    for key_, v in representation_stats(proj, p["proj"], z).items():
        row[f"{key_}_trained"] = v
    _, g1, g2 = sample_views(cfg, k_geo, cfg.data.n_geom, sigma_sqrt, aug_basis)
    geo = {"trained": geometry_row(cfg, name, p, tgt, c, g1, g2, k_eig)}
    ps, ts = scale_projector(p, tgt, cfg.analysis.pseudo_collapse_scale)
    geo["pseudo_collapsed"] = geometry_row(cfg, name, ps, ts, c, g1, g2, k_eig)
    for state, g in geo.items():
        row.update({f"{key_}_{state}": v for key_, v in g.items()})
    if name != "dino":
        row.update(collapsed_stationarity(cfg, name, p, tgt, c, centre, jax.random.fold_in(k_eig, 7)))
    return row, eqs


def run_objective(cfg, name, key, data, steps, seed, full: bool):
    """:func:`train_objective` then :func:`analyse_objective`: ``(row, equilibria, curve)``."""
    row, trained, vals = train_objective(cfg, name, key, data, steps, seed)
    row, eqs = analyse_objective(cfg, name, key, data, row, trained, full)
    return row, eqs, vals
