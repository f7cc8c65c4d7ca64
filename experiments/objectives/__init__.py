"""Experiment 7: the same geometric measurements across SSL objectives, heads and seeds.

Backbone-free setting: representations ``z ~ N(0, Sigma)`` in R^d (log-uniform
spectrum, random eigenbasis) and two views

    z_a = z + aug_scale * A xi_a + iso_noise * xi'_a,     a = 1, 2,

where ``A`` (``d x aug_dim``, orthonormal columns) spans the "augmentation"
directions. Per objective, head activation and seed an MLP head (projector ``d -> hidden -> k``;
plus a predictor ``k -> pred_hidden -> k`` for SimSiam, BYOL and MoCo v3; an EMA target projector
for BYOL, MoCo v3 and DINO, with BYOL's cosine decay schedule, updated from the parameters
*before* each step) is trained with Adam on fresh batches through :func:`ssl_geometry.fit`, in
float64 (:mod:`.problem`). Every objective is trained with the config's head (``model.activation``)
for every seed; DINO also with each head of ``analysis.thm41_activations``. Then:

* **Thm 4.1** (registry claims ``thm4.1-smooth-unstable``, ``thm4.1-linear-psd``, experiment 3's
  rules): a certified collapsed equilibrium of each trained DINO projector against a fixed teacher
  (:func:`ssl_geometry.geometry.collapsed_equilibrium`, one per residual scale) -- DINO is the one
  objective here whose collapsed equilibria can have ``rho != 0``;
* **stationarity forces rho = 0** (``stationarity-forces-rho-zero``): at the collapsed state of every
  other objective's trained head (both views at one point ``c``) the head is driven to stationarity
  (:func:`experiments.stationary_heads.stationary_head_state`) and the residual read there, beside
  :func:`ssl_geometry.geometry.identical_rows_finding`'s bound;
* **Sec. 5** (``sec5-metric-degeneracy``, :mod:`.sec5`): degeneracy ratios along the augmentation
  subspace against random, between-sample and data directions, for the trained and the untrained
  head, an orthogonal subspace as the negative control, and the paper's orbit compression;
* reported, not counted: effective rank (both named definitions), covariance condition number and
  mean normalised std of the trained head's outputs; Thm 4.1's premises and spectrum at the trained
  and at a pseudo-collapsed state (every projector weight matrix times ``pseudo_collapse_scale``),
  neither of which is an equilibrium (the premises say so). As in experiment 3 the Hessian is
  ``hess_{z1} L`` of the first view's online outputs, the second view and the targets held fixed.
"""
from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from experiments import common, projection, rules, stationary_heads
from experiments.objectives import sec5
from experiments.objectives.problem import (FAMILIES, PREDICTOR, TARGET, apply_heads, build_heads, scale_projector, step_time,  # noqa: F401
                                            first_view_problem, objective_loss, online_head, sample_views, train)
from experiments.objectives.reporting import figures, report  # noqa: F401  (the reporting half)
from ssl_geometry import geometry, metrics

NAME = "objectives"
TITLE = "Objectives"
#: The registry claims (experiments/claims/) this experiment decides.
CLAIMS = ("thm4.1-smooth-unstable", "thm4.1-linear-psd", "stationarity-forces-rho-zero",
          "sec5-metric-degeneracy")
CLAIM = ("Across contrastive, decorrelation and distillation objectives: Thm 4.1 (a smooth head makes a collapsed "
         "equilibrium with rho != 0 and H_L PSD strictly unstable; a linear or ReLU head does not) on every head and "
         "seed; head stationarity forces rho = 0 at the Siamese, contrastive and decorrelation objectives' collapsed "
         "states; and the trained head's metric degenerates along the augmentation directions (Sec. 5).")
#: Honours ``config.dry_run``: the variant's widths and all objectives at small batches (:data:`DRY_RUN_SIZES`),
#: one seed, the config's head only, 2 training steps each, every analysis step; the record projects the full variant.
DRY_RUN = True


def representation_stats(proj, P, z):
    """Effective rank (both named definitions), covariance condition number and mean normalised std of ``h(z)``."""
    u = apply_heads(proj, P, z)
    return {"erank_rankme": float(metrics.effective_rank(u, "rankme")),
            "erank_squared": float(metrics.effective_rank(u, "squared")),
            "cond": float(metrics.covariance_condition_number(u)),
            "norm_std": float(metrics.normalized_std(u))}


def _classified(res):
    p = res.premises
    return {"H_L_psd": p.loss_hessian_psd, "lambda_min_H_L": res.lambda_min["loss_hessian"],
            "rho_norm": p.residual_norm, "rho_nonzero": p.residual_nonzero,
            "stationary": bool(p.stationary_z and p.stationary_head), "grad_z_ratio": p.grad_z_ratio,
            "grad_head_ratio": p.grad_head_ratio, "holds": bool(p.holds_except_smoothness),
            "head_kind": res.head_kind,
            "lambda_min_H_eff": res.lambda_min["full"], "lambda_max_H_eff": res.lambda_max["full"],
            "lambda_min_G": res.lambda_min["metric"], "lambda_max_G": res.lambda_max["metric"],
            "lambda_min_M": res.lambda_min["interaction"], "lambda_max_M": res.lambda_max["interaction"],
            "eig_tol": res.eig_tol, "conclusion": res.conclusion}


def geometry_row(cfg, name, params, target, center, z1, z2, key):
    """Premises (stationarity included) and extreme eigenvalues of ``H_eff``, ``G``, ``M``, ``H_L`` at one state."""
    model, variables, loss_fn = first_view_problem(cfg, name, params, target, center, z1, z2)
    res = geometry.classify_collapse(model, loss_fn, z1, variables=variables, activation=cfg.model.activation,
                                     per_sample=True, max_dense_dim=cfg.analysis.max_dense_dim, key=key)
    return _classified(res)


def collapsed_stationarity(cfg, name, params, target, center, c, key) -> dict:
    """The collapsed state (both views at ``c``): the identical-rows bound and the head driven to stationarity."""
    zc = jnp.tile(c[None, :], (cfg.data.n_geom, 1))
    model, variables, loss_fn = first_view_problem(cfg, name, params, target, center, zc, zc)
    f = geometry.identical_rows_finding(model, variables, loss_fn, zc)
    st = stationary_heads.stationary_head_state(model, variables, loss_fn, zc, key=key,
                                                max_iter=cfg.analysis.stationarity_max_iter)
    return {"collapsed_rows_identical": f["rows_identical"], "collapsed_forces_rho_0": f["forces_zero_residual"],
            **{f"st_{k}": v for k, v in st.items()}}


def dino_equilibria(cfg, params, c, key, activation, seed) -> list[dict]:
    """Certified collapsed equilibria of a trained DINO projector against a fixed teacher, one per residual scale."""
    proj, _ = build_heads(cfg, "dino")
    rows = []
    for j, scale in enumerate(cfg.analysis.dino_residual_scales):
        k = jax.random.fold_in(key, j)
        base = {"activation": activation, "seed": seed, "residual_scale": float(scale)}
        try:
            eq = geometry.collapsed_equilibrium(proj, {"params": params["proj"]}, "dino_fixed_teacher", c,
                                                cfg.data.n_geom, key=k, residual_scale=scale, activation=activation)
        except ValueError as err:  # no null space: no equilibrium with rho != 0 for this head
            rows.append({**base, "exists": False, "reason": str(err)})
            continue
        res = geometry.classify_collapse(proj, eq.loss_fn, eq.z, variables={"params": params["proj"]},
                                         activation=activation, max_dense_dim=cfg.analysis.max_dense_dim, key=k)
        rows.append({**base, "exists": True, "certified": eq.certified, **_classified(res)})
    return rows


def _loss_fell(vals) -> bool:
    """The Sec. 5 premise: the mean of the last 10% of the training losses is below the first 10%'s."""
    k = max(1, len(vals) // 10)
    return bool(np.mean(vals[-k:]) < np.mean(vals[:k]))


def _with_activation(cfg, activation):
    c = cfg.copy_and_resolve_references()
    c.model.activation = activation
    return c


def run_objective(cfg, name, key, data, steps, seed, full: bool):
    """Train one objective with ``cfg.model.activation`` (seed ``seed``) and measure it; ``full=False``: only the
    DINO equilibria (the other heads of ``analysis.thm41_activations``). Returns ``(row, equilibria, curve)``."""
    sigma_sqrt, aug_basis, neg_basis = data
    k_train, k_eval, k_geo, k_dir, k_eig = jax.random.split(key, 5)
    t0 = time.perf_counter()
    models, (p0, _, _), (p, tgt, c), vals, step_loss = train(cfg, name, k_train, sigma_sqrt, aug_basis, steps)
    row = {"objective": name, "family": FAMILIES[name], "activation": cfg.model.activation, "seed": seed,
           "final_loss": float(vals[-1]), "initial_loss": float(vals[0]), "loss_fell": _loss_fell(np.asarray(vals)),
           "train_time_s": time.perf_counter() - t0}
    if cfg.dry_run:  # the compile-free time of one step, for the projection
        row["step_time_s"] = step_time(step_loss, p, (tgt, c), k_train)
    z, _, _ = sample_views(cfg, k_eval, cfg.data.n_eval, sigma_sqrt, aug_basis)
    centre = jnp.mean(z, axis=0)
    eqs = dino_equilibria(cfg, p, centre, k_eig, cfg.model.activation, seed) if name == "dino" else []
    if not full:
        return row, eqs, vals
    proj = models[0]
    trained_fn, untrained_fn = (lambda x: apply_heads(proj, p["proj"], x)), (lambda x: apply_heads(proj, p0["proj"], x))
    dirs = sec5.directions(z, aug_basis, neg_basis, k_dir, cfg.analysis.directions_per_sample)
    a = cfg.analysis
    orbit_z = jnp.stack([sample_views(cfg, jax.random.fold_in(k_dir, 100 + j), a.orbit_size, sigma_sqrt, aug_basis,
                                      clean=z[j])[1] for j in range(a.n_orbits)])
    augs, neg, orbits, mean_gains = sec5.sec5_inputs(trained_fn, untrained_fn, z, dirs, orbit_z)
    row.update(sec5={"augmentations": augs, "negative": neg, "orbits": orbits, "mean_gains": mean_gains},
               z_full_rank=bool(np.linalg.matrix_rank(np.cov(np.asarray(z), rowvar=False)) == cfg.data.d))
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
    return row, eqs, vals


#: Batches of a dry run: training ``n``, evaluation ``n_eval``, geometry ``n_geom`` (widths stay the variant's).
DRY_RUN_SIZES = {"n": 16, "n_eval": 32, "n_geom": 2}


def _dry_config(config):
    """The dry-run config: the variant's widths and objectives at the batches of :data:`DRY_RUN_SIZES`, one seed,
    the config's head only, 5 iterations of the stationarity search."""
    cfg = config.copy_and_resolve_references()
    cfg.unlock()
    for k, v in DRY_RUN_SIZES.items():
        cfg.data[k] = min(v, config.data[k])
    cfg.seeds = 1
    cfg.analysis.thm41_activations = [config.model.activation]
    cfg.analysis.stationarity_max_iter = min(5, config.analysis.stationarity_max_iter)
    return cfg


def _projection(config, cfg, rows, total_s) -> dict:
    """Projected full wall time: mean compiled step time (:func:`step_time`) x ``n/n_dry`` x steps x trainings, plus
    the analysis x ``(n_geom/n_geom_dry)^3`` (dense ``eigh`` of the ``n_geom d``-dimensional ``H_eff``; an upper bound
    where compilation dominates) x seeds."""
    per = float(np.mean([r["step_time_s"] for r in rows])) * config.data.n / cfg.data.n
    trainings = config.seeds * (len(config.train.objectives) + len(
        [a for a in config.analysis.thm41_activations if a != config.model.activation]))
    train_all = sum(r["train_time_s"] for r in rows)  # compilation included
    analysis_s = (total_s - train_all) * (config.data.n_geom / cfg.data.n_geom) ** 3 * config.seeds
    return projection.dry_run_record(per, trainings * config.train.steps, analysis_s,
                                 analysis_dry_s=total_s - train_all, sizes_dry={k: int(cfg.data[k]) for k in DRY_RUN_SIZES})


def problem_data(cfg):
    """``(sigma_sqrt, A, B)``: the representation covariance's square root, the augmentation basis and the negative
    control's basis (orthogonal to ``A``), all from ``cfg.seed``."""
    k_s, k_a, k_n = jax.random.split(jax.random.PRNGKey(cfg.seed), 3)
    lo, hi = cfg.data.spectrum
    d = cfg.data.d
    eig = np.exp(np.linspace(np.log(lo), np.log(hi), d))
    Q = np.linalg.qr(np.asarray(jax.random.normal(k_s, (d, d), jnp.float64)))[0]
    sigma_sqrt = jnp.asarray((Q * np.sqrt(eig)) @ Q.T)
    A = jnp.asarray(np.linalg.qr(np.asarray(jax.random.normal(k_a, (d, cfg.data.aug_dim), jnp.float64)))[0])
    return sigma_sqrt, A, sec5.negative_basis(A, k_n)


def measure(config) -> dict:
    common.require_x64(NAME)
    cfg = _dry_config(config) if config.dry_run else config
    steps = 2 if config.dry_run else config.train.steps
    data = problem_data(cfg)
    k_o = jax.random.fold_in(jax.random.PRNGKey(cfg.seed), 3)
    rows, equilibria, curves, t0 = [], [], {}, time.perf_counter()
    for s in range(cfg.seeds):
        for i, name in enumerate(cfg.train.objectives):
            row, eqs, vals = run_objective(cfg, name, jax.random.fold_in(jax.random.fold_in(k_o, i), s), data, steps,
                                           s, full=True)
            rows.append(row)
            equilibria += eqs
            curves[f"{name}/{cfg.model.activation}/seed{s}"] = [float(v) for v in vals]
        i = list(cfg.train.objectives).index("dino") if "dino" in cfg.train.objectives else len(cfg.train.objectives)
        for act in cfg.analysis.thm41_activations:
            if act == cfg.model.activation:
                continue
            _, eqs, vals = run_objective(_with_activation(cfg, act), "dino",
                                         jax.random.fold_in(jax.random.fold_in(k_o, i), s), data, steps, s, full=False)
            equilibria += eqs
            curves[f"dino/{act}/seed{s}"] = [float(v) for v in vals]
    out = {"rows": rows, "equilibria": equilibria, "curves": curves}
    if config.dry_run:
        out["dry_run"] = _projection(config, cfg, rows, time.perf_counter() - t0)
    return out


def thm41_states(equilibria) -> tuple[list, list]:
    """``(smooth, linear/ReLU)`` certified equilibria as :func:`experiments.rules.decide_smooth_unstable` and
    :func:`~experiments.rules.decide_linear_psd` read them."""
    eq = [e for e in equilibria if e["exists"] and e["certified"] and e["holds"]]
    state = lambda e: {"objective": "dino_fixed_teacher", "lambda_min": e["lambda_min_H_eff"], "tol": e["eig_tol"],  # noqa: E731
                       "lambda_min_M": e["lambda_min_M"],
                       "label": f"dino/{e['activation']}/seed {e['seed']}/scale {e['residual_scale']:g}"}
    return ([state(e) for e in eq if e["head_kind"] == "smooth"],
            [state(e) for e in eq if e["head_kind"] in ("linear", "piecewise")])


def stationarity_states(rows) -> list[dict]:
    """The collapsed states as :func:`experiments.rules.decide_rho_zero` reads them."""
    return [{"label": f"{r['objective']}/{r['activation']}/seed {r['seed']}",
             "family": "siamese" if r["objective"] in ("simsiam", "byol") else r["family"],
             "stationary": r["st_stationary"], "rho": r["st_rho"], "rho_ref": r["st_rho_ref"],
             "residual_tol": r["st_residual_tol"]} for r in rows if "st_stationary" in r]


def decide(m, config) -> dict:
    rows = m["rows"]
    smooth, lin = thm41_states(m["equilibria"])
    items = [*rules.decide_smooth_unstable(smooth), rules.decide_linear_psd(lin),
             rules.decide_rho_zero(stationarity_states(rows))]
    for r in rows:
        s = r["sec5"]
        items.append(rules.decide_sec5(s["augmentations"], s["orbits"], negative=s["negative"],
                                       premises={"loss_fell": r["loss_fell"], "z_full_rank": r["z_full_rank"]},
                                       subject=f"{r['objective']} (seed {r['seed']})"))
    sec5_items = [i for i in items if i["id"] == rules.SEC5]
    headline = {"objectives": len({r["objective"] for r in rows}), "seeds": len({r["seed"] for r in rows}),
                "dino_equilibria_certified": len(smooth) + len(lin), "dino_smooth_equilibria": len(smooth),
                "dino_smooth_unstable": sum(s["lambda_min"] < -s["tol"] for s in smooth),
                "collapsed_states_head_stationary": sum(s["stationary"] for s in stationarity_states(rows)),
                **{f"sec5_{v.replace(' ', '_')}": sum(i["verdict"] == v for i in sec5_items)
                   for v in ("supported", "not supported", "inconclusive", "premise violated")},
                "orbit_compression_min": min(r["sec5"]["orbits"]["S"] for r in rows),
                "orbit_compression_max": max(r["sec5"]["orbits"]["S"] for r in rows)}
    return {"claims": items, "headline": headline}
