"""Experiment 7: the same geometric measurements across SSL objectives.

Backbone-free setting: representations ``z ~ N(0, Sigma)`` in R^d (log-uniform
spectrum, random eigenbasis) and two views

    z_a = z + aug_scale * A xi_a + iso_noise * xi'_a,     a = 1, 2,

where ``A`` (``d x aug_dim``, orthonormal columns) spans the "augmentation"
directions. Per objective an MLP head (projector ``d -> hidden -> k``; plus a
predictor ``k -> pred_hidden -> k`` for SimSiam, BYOL and MoCo v3; an EMA target
projector for BYOL, MoCo v3 and DINO, with BYOL's cosine decay schedule, updated from the
parameters *before* each step) is trained with Adam on fresh batches through
:func:`ssl_geometry.fit`, in float64. Then, per objective:

* on the projector outputs of an evaluation batch: effective rank by both named
  definitions (``rankme``: singular values; ``squared``: squared singular values),
  covariance condition number, mean normalised std;
* Thm 4.1 (:func:`ssl_geometry.geometry.classify_collapse`, i.e. :func:`~ssl_geometry.geometry.thm41_premises`
  then :func:`~ssl_geometry.geometry.thm41_conclusion`) at the trained state and at a pseudo-collapsed
  state (every projector weight matrix, online and target, times ``pseudo_collapse_scale``). Neither
  is an equilibrium: the premises say so (``stationary_z``/``stationary_head`` and their ratios), and
  they are reported as non-stationary. As in experiment 3 the Hessian is ``hess_{z1} L`` of the first
  view's online outputs, everything from the second view (and the targets) held fixed;
* a collapsed state (both views at one point ``c``, the trained head): the residual rows are
  identical, and :func:`ssl_geometry.geometry.identical_rows_finding` says whether head stationarity
  forces ``rho = 0`` there (then Thm 4.1's premise cannot hold at an equilibrium of that objective);
* DINO only: a certified collapsed equilibrium of the trained projector against a fixed teacher
  (:func:`ssl_geometry.geometry.collapsed_equilibrium`), where Thm 4.1's premises hold;
* Sec. 5 metric degeneracy of the projector: mean ``|J_h v| / |v|`` along the view
  difference ``v = z1 - z2`` divided by the same mean along random directions.
"""
from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from experiments import common
from experiments.objectives.problem import (FAMILIES, PREDICTOR, TARGET, apply_heads, build_heads, scale_projector, step_time,  # noqa: F401
                                            first_view_problem, objective_loss, online_head, sample_views, train)
from ssl_geometry import geometry, metrics

NAME = "objectives"
TITLE = "Objectives"
#: The registry claims (experiments/claims.py) this experiment decides.
CLAIMS = ("thm4.1-smooth-unstable", "thm4.1-linear-psd", "stationarity-forces-rho-zero",
          "sec5-metric-degeneracy")
CLAIM = ("Across contrastive, decorrelation and distillation objectives, a smooth head makes the pseudo-collapsed "
         "state strictly unstable (lambda_min(H_eff) < 0) wherever Thm 4.1's premises hold, and the trained head's "
         "metric degenerates along augmentation directions (Sec. 5).")
RULE = ("(i) Thm 4.1 across objectives: only certified collapsed equilibria count (stationary in z and in the "
        "head, rho != 0, H_L PSD); every one must have lambda_min(H_eff) < -tol with the smooth head "
        "(tol = dim eps max|lambda|), one that does not -> not supported; no certified equilibrium -> premise "
        "violated (trained and pseudo-collapsed states are not equilibria and are reported only). (ii) Sec. 5: "
        "every trained head must contract the view-difference direction more than random directions "
        "(degeneracy ratio < {verdict[max_degeneracy_ratio]:g}); (i) holds but (ii) fails -> inconclusive; both "
        "hold -> supported.")
#: Honours ``config.dry_run``: the variant's widths and all objectives at small batches (:data:`DRY_RUN_SIZES`),
#: 2 training steps each, every analysis step; the timing record projects the full variant.
DRY_RUN = True


def representation_stats(proj, P, z):
    """Effective rank (both named definitions), covariance condition number and mean normalised std of ``h(z)``."""
    u = apply_heads(proj, P, z)
    return {"erank_rankme": float(metrics.effective_rank(u, "rankme")),
            "erank_squared": float(metrics.effective_rank(u, "squared")),
            "cond": float(metrics.covariance_condition_number(u)),
            "norm_std": float(metrics.normalized_std(u))}


def degeneracy_ratio(proj, P, z, v_view, v_rand) -> tuple[float, float, float]:
    """(mean |J v_view|/|v_view|, mean |J v_rand|/|v_rand|, their ratio) for the projector."""
    head = lambda x: apply_heads(proj, P, x)  # noqa: E731
    deg = jax.vmap(lambda zz, vv: metrics.metric_degeneracy(head, zz, vv))
    a, b = float(jnp.mean(deg(z, v_view))), float(jnp.mean(deg(z, v_rand)))
    return a, b, a / b


def _classified(res):
    p = res.premises
    return {"H_L_psd": p.loss_hessian_psd, "lambda_min_H_L": res.lambda_min["loss_hessian"],
            "rho_norm": p.residual_norm, "rho_nonzero": p.residual_nonzero,
            "stationary": bool(p.stationary_z and p.stationary_head), "grad_z_ratio": p.grad_z_ratio,
            "grad_head_ratio": p.grad_head_ratio, "holds": bool(p.holds_except_smoothness),
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


def collapse_rows(cfg, name, params, target, center, c, key):
    """The collapsed state (both views at ``c``) and, for DINO, a certified equilibrium of the trained projector."""
    n = cfg.data.n_geom
    zc = jnp.tile(c[None, :], (n, 1))
    model, variables, loss_fn = first_view_problem(cfg, name, params, target, center, zc, zc)
    f = geometry.identical_rows_finding(model, variables, loss_fn, zc)
    out = {"collapsed_rho_norm": f["residual_norm"], "collapsed_rows_identical": f["rows_identical"],
           "collapsed_forces_rho_0": f["forces_zero_residual"], "collapsed_sigma_min": f["sigma_min_head_jacobian"]}
    if name != "dino":
        return out
    proj, _ = build_heads(cfg, name)
    try:
        eq = geometry.collapsed_equilibrium(proj, {"params": params["proj"]}, "dino_fixed_teacher", c, n, key=key,
                                            residual_scale=cfg.analysis.dino_residual_scale,
                                            activation=cfg.model.activation)
    except ValueError as err:  # no null space: no equilibrium with rho != 0 for this head
        return {**out, "equilibrium_exists": False, "equilibrium_reason": str(err)}
    res = geometry.classify_collapse(proj, eq.loss_fn, eq.z, variables={"params": params["proj"]},
                                     activation=cfg.model.activation, max_dense_dim=cfg.analysis.max_dense_dim, key=key)
    return {**out, "equilibrium_exists": True, "equilibrium_certified": eq.certified,
            **{f"{k}_equilibrium": v for k, v in _classified(res).items()}}


def run_objective(cfg, name, key, sigma_sqrt, aug_basis, steps):
    """Train one objective, then measure it at initialisation, trained, pseudo-collapsed and collapsed (one row)."""
    k_train, k_eval, k_geo, k_rand, k_eig = jax.random.split(key, 5)
    t_train = time.perf_counter()
    models, (p0, t0, c0), (p, tgt, c), vals, step_loss = train(cfg, name, k_train, sigma_sqrt, aug_basis, steps)
    t_train = time.perf_counter() - t_train
    if cfg.dry_run:  # the compile-free time of one step, for the projection
        t_step = step_time(step_loss, p, (tgt, c), k_train)
    proj = models[0]
    z, z1, z2 = sample_views(cfg, k_eval, cfg.data.n_eval, sigma_sqrt, aug_basis)
    v_rand = jax.random.normal(k_rand, z.shape, jnp.float64)
    row = {"objective": name, "family": FAMILIES[name], "final_loss": float(vals[-1]), "initial_loss": float(vals[0]),
           "train_time_s": t_train, **({"step_time_s": t_step} if cfg.dry_run else {})}
    for tag, P in (("init", p0["proj"]), ("trained", p["proj"])):
        for key_, v in representation_stats(proj, P, z).items():
            row[f"{key_}_{tag}"] = v
        row[f"deg_view_{tag}"], row[f"deg_random_{tag}"], row[f"deg_ratio_{tag}"] = degeneracy_ratio(
            proj, P, z1, z1 - z2, v_rand)
    _, g1, g2 = sample_views(cfg, k_geo, cfg.data.n_geom, sigma_sqrt, aug_basis)
    geo = {"trained": geometry_row(cfg, name, p, tgt, c, g1, g2, k_eig)}
    ps, ts = scale_projector(p, tgt, cfg.analysis.pseudo_collapse_scale)
    geo["pseudo_collapsed"] = geometry_row(cfg, name, ps, ts, c, g1, g2, k_eig)
    for state, g in geo.items():
        for key_, v in g.items():
            row[f"{key_}_{state}"] = v
    row.update(collapse_rows(cfg, name, p, tgt, c, jnp.mean(z, axis=0), k_eig))
    return row, vals


def _certified(r):
    return bool(r.get("equilibrium_certified") and r.get("holds_equilibrium"))


#: Batches of a dry run: training ``n``, evaluation ``n_eval``, geometry ``n_geom`` (widths stay the variant's).
DRY_RUN_SIZES = {"n": 16, "n_eval": 32, "n_geom": 2}


def _dry_config(config):
    """The dry-run config: the variant's widths and objectives at the batches of :data:`DRY_RUN_SIZES`."""
    cfg = config.copy_and_resolve_references()
    cfg.unlock()
    for k, v in DRY_RUN_SIZES.items():
        cfg.data[k] = min(v, config.data[k])
    return cfg


def _projection(config, cfg, rows, total_s) -> dict:
    """Projected full wall time: mean compiled step time (:func:`step_time`) x ``n/n_dry`` x steps, plus the analysis x
    ``(n_geom/n_geom_dry)^3`` (dense ``eigh`` of the ``n_geom d``-dimensional ``H_eff``; an upper bound where
    compilation dominates)."""
    per = float(np.mean([r["step_time_s"] for r in rows])) * config.data.n / cfg.data.n
    train_all = sum(r["train_time_s"] for r in rows)  # compilation included
    analysis_s = (total_s - train_all) * (config.data.n_geom / cfg.data.n_geom) ** 3
    return common.dry_run_record(per, len(rows) * config.train.steps, analysis_s, analysis_dry_s=total_s - train_all,
                                 sizes_dry={k: int(cfg.data[k]) for k in DRY_RUN_SIZES})


def measure(config) -> dict:
    common.require_x64(NAME)
    cfg = _dry_config(config) if config.dry_run else config
    steps = 2 if config.dry_run else config.train.steps
    key = jax.random.PRNGKey(cfg.seed)
    k_s, k_a, k_o = jax.random.split(key, 3)
    lo, hi = cfg.data.spectrum
    d = cfg.data.d
    eig = np.exp(np.linspace(np.log(lo), np.log(hi), d))
    Q = np.linalg.qr(np.asarray(jax.random.normal(k_s, (d, d), jnp.float64)))[0]
    sigma_sqrt = jnp.asarray((Q * np.sqrt(eig)) @ Q.T)
    aug_basis = jnp.asarray(np.linalg.qr(np.asarray(jax.random.normal(k_a, (d, cfg.data.aug_dim), jnp.float64)))[0])
    rows, curves, t0 = [], {}, time.perf_counter()
    for i, name in enumerate(cfg.train.objectives):
        row, vals = run_objective(cfg, name, jax.random.fold_in(k_o, i), sigma_sqrt, aug_basis, steps)
        rows.append(row)
        curves[name] = [float(v) for v in vals]
    out = {"rows": rows, "curves": curves}
    if config.dry_run:
        out["dry_run"] = _projection(config, cfg, rows, time.perf_counter() - t0)
    return out


def decide(m, config) -> dict:
    rows = m["rows"]
    held = [r for r in rows if _certified(r)]
    unstable = [r for r in held if r["lambda_min_H_eff_equilibrium"] < -r["eig_tol_equilibrium"]]
    contract = [r for r in rows if r["deg_ratio_trained"] < config.verdict.max_degeneracy_ratio]
    fam_psd = {}
    for fam in sorted(set(FAMILIES[r["objective"]] for r in rows)):
        fr = [r for r in rows if r["family"] == fam]
        fam_psd[f"trained_H_L_psd_fraction_{fam}"] = sum(bool(r["H_L_psd_trained"]) for r in fr) / len(fr)
    headline = {
        "certified_equilibria": len(held),
        "certified_equilibria_unstable": len(unstable),
        "collapsed_states_where_stationarity_forces_rho_0": sum(bool(r["collapsed_forces_rho_0"]) for r in rows),
        "stationary_trained_states": sum(bool(r["stationary_trained"]) for r in rows),
        "pseudo_collapsed_unstable_all": sum(r["lambda_min_H_eff_pseudo_collapsed"] < -r["eig_tol_pseudo_collapsed"]
                                             for r in rows),
        "objectives": len(rows),
        "deg_ratio_max_trained": max(r["deg_ratio_trained"] for r in rows),
        "deg_ratio_mean_trained": float(np.mean([r["deg_ratio_trained"] for r in rows])),
        "deg_ratio_mean_init": float(np.mean([r["deg_ratio_init"] for r in rows])),
        **fam_psd,
    }
    if not held:
        verdict = "premise violated"
    elif len(unstable) < len(held):
        verdict = "not supported"
    elif len(contract) < len(rows):
        verdict = "inconclusive"
    else:
        verdict = "supported"
    return {"verdict": verdict, "headline": headline, "paper": {}}


def figures(results, out_dir) -> None:
    plt = common.pyplot()
    rows, curves = results["measurements"]["rows"], results["measurements"]["curves"]
    fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(13, 3.6))
    common.plot_normalised_curves(a1, curves, fontsize=6)
    names = [r["objective"] for r in rows]
    x = np.arange(len(rows))
    for state, off, c in (("trained", -0.15, "tab:blue"), ("pseudo_collapsed", 0.15, "tab:red")):
        y = [r[f"lambda_min_H_eff_{state}"] / max(abs(r[f"lambda_max_H_eff_{state}"]), 1e-300) for r in rows]
        mk = ["o" if r[f"H_L_psd_{state}"] else "x" for r in rows]
        for xi, yi, m in zip(x + off, y, mk):
            a2.scatter(xi, yi, c=c, marker=m, s=20)
    a2.axhline(0, color="k", lw=0.5)
    a2.set_xticks(x, names, rotation=35, ha="right", fontsize=7)
    a2.set_ylabel("lambda_min / |lambda_max| of H_eff")
    a2.set_title("blue trained, red pseudo-collapsed (neither stationary); o: H_L PSD", fontsize=8)
    a3.bar(x - 0.2, [r["deg_ratio_init"] for r in rows], 0.4, label="init")
    a3.bar(x + 0.2, [r["deg_ratio_trained"] for r in rows], 0.4, label="trained")
    a3.axhline(1, color="k", lw=0.5)
    a3.set_xticks(x, names, rotation=35, ha="right", fontsize=7)
    a3.set_ylabel("|J v_view| / |J v_random| (means)")
    a3.legend(fontsize=7)
    common.save_figure(fig, out_dir, "objectives")


def report(results, rel_dir) -> str:
    h = results["headline"]
    rows = results["measurements"]["rows"]
    rep_cols = ["objective", "family", "erank_rankme_trained", "erank_squared_trained", "cond_trained",
                "norm_std_trained", "deg_ratio_init", "deg_ratio_trained"]
    geo = []
    for r in rows:
        for state in ("trained", "pseudo_collapsed", "equilibrium"):
            if f"H_L_psd_{state}" not in r:
                continue
            geo.append({"objective": r["objective"], "state": state, "stationary": r[f"stationary_{state}"],
                        "|grad_z|/(|J||rho|)": r[f"grad_z_ratio_{state}"], "H_L PSD": r[f"H_L_psd_{state}"],
                        "|rho|": r[f"rho_norm_{state}"], "lambda_min(H_eff)": r[f"lambda_min_H_eff_{state}"],
                        "lambda_min(G)": r[f"lambda_min_G_{state}"], "lambda_min(M)": r[f"lambda_min_M_{state}"],
                        "conclusion": r[f"conclusion_{state}"]})
    fam = "; ".join(f"{k.rsplit('_', 1)[1]} {v:.2g}" for k, v in h.items() if k.startswith("trained_H_L_psd_fraction"))
    return "\n".join([
        f"Certified collapsed equilibria: {h['certified_equilibria']} (strictly unstable: "
        f"{h['certified_equilibria_unstable']}). At the collapsed state of the trained head (both views at one "
        f"point) the residual rows are identical, and in {h['collapsed_states_where_stationarity_forces_rho_0']} of "
        f"{h['objectives']} objectives head stationarity would force rho = 0: Thm 4.1's premise cannot hold at an "
        f"equilibrium of those. Trained states that are stationary: {h['stationary_trained_states']}; "
        f"pseudo-collapsed states strictly unstable (not equilibria, reported only): "
        f"{h['pseudo_collapsed_unstable_all']} of {h['objectives']}. Fraction of trained states with H_L PSD by "
        f"family: {fam}. Mean degeneracy ratio |J v_view|/|J v_random|: {h['deg_ratio_mean_init']:.3g} at init, "
        f"{h['deg_ratio_mean_trained']:.3g} trained (max trained {h['deg_ratio_max_trained']:.3g}).",
        "",
        common.markdown_table(rows, rep_cols),
        "",
        common.markdown_table(geo),
        "",
        f"![objectives]({rel_dir}/objectives.png)",
    ])
