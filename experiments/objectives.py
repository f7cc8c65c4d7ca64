"""Experiment 7: the same geometric measurements across SSL objectives.

Backbone-free setting: representations ``z ~ N(0, Sigma)`` in R^d (log-uniform
spectrum, random eigenbasis) and two views

    z_a = z + aug_scale * A xi_a + iso_noise * xi'_a,     a = 1, 2,

where ``A`` (``d x aug_dim``, orthonormal columns) spans the "augmentation"
directions. Per objective an MLP head (projector ``d -> hidden -> k``; plus a
predictor ``k -> pred_hidden -> k`` for SimSiam, BYOL and MoCo v3; an EMA target
projector for BYOL, MoCo v3 and DINO, with BYOL's cosine decay schedule, updated from the
parameters *before* each step) is trained with Adam on fresh batches through
:func:`ssl_geometry.training.loop.fit`, in float64. Then, per objective:

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

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from experiments import common
from ssl_geometry import geometry, heads, losses, metrics
from ssl_geometry.training.loop import fit

NAME = "objectives"
TITLE = "Objectives"
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

FAMILIES = {
    "info_nce": "contrastive", "moco_v3": "contrastive", "spectral_contrastive": "contrastive",
    "barlow_twins": "decorrelation", "vicreg": "decorrelation",
    "byol": "distillation", "simsiam": "distillation", "dino": "distillation",
}
PREDICTOR = ("simsiam", "byol", "moco_v3")
TARGET = ("byol", "moco_v3", "dino")


def _models(cfg, name):
    m = cfg.model
    proj = heads.mlp(cfg.data.d, (m.hidden,), m.k, activation=m.activation, bias=True, dtype=jnp.float64)
    pred = (heads.mlp(m.k, (m.pred_hidden,), m.k, activation=m.activation, bias=True, dtype=jnp.float64)
            if name in PREDICTOR else None)
    return proj, pred


def online_head(cfg, name, params):
    """``(model, variables)`` of the online branch (projector, then predictor where there is one)."""
    proj, pred = _models(cfg, name)
    if pred is None:
        return proj, {"params": params["proj"]}
    return heads.compose(proj, pred), {"params": {"0": params["proj"], "1": params["pred"]}}


def _apply(model, params, x):
    return model.apply({"params": params}, x)[0]


def objective_loss(cfg, name, proj, pred):
    """``loss(params, target, center, z1, z2) -> (L, new_center)`` for objective ``name``."""
    temp = cfg.train.temperature

    def loss(params, target, center, z1, z2):
        u1, u2 = _apply(proj, params["proj"], z1), _apply(proj, params["proj"], z2)
        if pred is not None:
            p1, p2 = _apply(pred, params["pred"], u1), _apply(pred, params["pred"], u2)
        if name in TARGET:
            t1 = jax.lax.stop_gradient(_apply(proj, target, z1))
            t2 = jax.lax.stop_gradient(_apply(proj, target, z2))
        if name == "simsiam":
            return losses.simsiam(p1, p2, u1, u2), center
        if name == "byol":
            return losses.byol(p1, p2, t1, t2), center
        if name == "moco_v3":
            return losses.moco_v3(p1, p2, t1, t2, temperature=temp), center
        if name == "dino":
            return losses.dino(jnp.stack([u1, u2]), jnp.stack([t1, t2]), center)
        if name == "info_nce":
            return losses.info_nce(u1, u2, temperature=temp), center
        return losses.get(name)(u1, u2), center

    return loss


@functools.lru_cache(maxsize=None)
def _first_view_loss(name, temperature):
    """Jitted ``loss(u, fixed)``: the part of the objective that depends on the first view's online outputs
    (compiled once per objective and shape; every state passes its arrays as arguments)."""

    @jax.jit
    def loss(u, f):
        if name == "simsiam":  # only D(p1, sg z2)/2 depends on z1 (z1's projection enters through sg)
            return 0.5 * losses.negative_cosine(u, f["u2"])
        if name == "byol":
            return losses.byol(u, f["p2"], f["t1"], f["t2"])
        if name == "moco_v3":
            return losses.moco_v3(u, f["p2"], f["t1"], f["t2"], temperature=temperature)
        if name == "dino":
            return losses.dino(jnp.stack([u, f["u2"]]), jnp.stack([f["t1"], f["t2"]]), f["center"])[0]
        if name == "info_nce":
            return losses.info_nce(u, f["u2"], temperature=temperature)
        return losses.get(name)(u, f["u2"])

    return loss


def first_view_problem(cfg, name, params, target, center, z1, z2):
    """``(model, variables, loss_fn)`` with ``loss_fn(model(z1))`` = the part of L that depends on ``z1``.

    The model is the online branch (projector, then predictor where there is one); the second
    view's outputs, the targets and the DINO centre are fixed arrays (the stop-gradient branches of
    the objective, and the other view's online branch as in experiment 3).
    """
    loss = _first_view_loss(name, cfg.train.temperature)
    proj, _ = _models(cfg, name)
    model, variables = online_head(cfg, name, params)
    fixed = {"u2": _apply(proj, params["proj"], z2), "p2": model.apply(variables, z2)[0], "center": center}
    if name in TARGET:
        fixed["t1"], fixed["t2"] = _apply(proj, target, z1), _apply(proj, target, z2)
    return model, variables, (lambda u: loss(u, fixed))


def sample_views(cfg, key, n, sigma_sqrt, aug_basis):
    """``(z, z1, z2)``: clean representations and two views (module docstring)."""
    kz, k1, k2, k3, k4 = jax.random.split(key, 5)
    d = cfg.data
    z = jax.random.normal(kz, (n, d.d), jnp.float64) @ sigma_sqrt
    a = aug_basis.shape[1]

    def view(ka, ki):
        return (z + d.aug_scale * jax.random.normal(ka, (n, a), jnp.float64) @ aug_basis.T
                + d.iso_noise * jax.random.normal(ki, (n, d.d), jnp.float64))

    return z, view(k1, k2), view(k3, k4)


def train(cfg, name, key, sigma_sqrt, aug_basis, steps):
    """Adam on the head (and predictor) by :func:`fit`; the EMA target (BYOL's schedule) and the DINO
    centre are the loss state, updated from the parameters before each step. Returns the state and
    loss curve."""
    proj, pred = _models(cfg, name)
    k_p, k_q, k_d = jax.random.split(key, 3)
    params = {"proj": proj.init(k_p)["params"]}
    if pred is not None:
        params["pred"] = pred.init(k_q)["params"]
    target = params["proj"]
    center = jnp.zeros((cfg.model.k,), jnp.float64)
    loss = objective_loss(cfg, name, proj, pred)
    tau = losses.byol_decay_schedule(steps, cfg.train.ema)
    n = cfg.data.n

    def step_loss(p, state, batch):
        tgt, c = state
        _, z1, z2 = sample_views(cfg, batch["key"], n, sigma_sqrt, aug_basis)
        val, c_new = loss(p, tgt, c, z1, z2)
        if name in TARGET:
            tgt = losses.ema_update(tgt, jax.lax.stop_gradient(p["proj"]), tau(batch["i"]))
        return val, (tgt, jax.lax.stop_gradient(c_new))

    batches = {"i": jnp.arange(steps), "key": jax.random.split(k_d, steps)}
    res = fit(step_loss, params, optax.adam(cfg.train.lr), steps=steps, batches=batches, state=(target, center))
    tgt, c = res.state
    return (proj, pred), (params, target, center), (res.params, tgt, c), np.asarray(res.losses)


def _scale_proj(params, target, alpha):
    """Pseudo-collapse: every projector weight matrix (online and target) times ``alpha``; biases and the
    predictor unchanged."""
    p = dict(params)
    p["proj"] = heads.scale_weights({"params": params["proj"]}, alpha)["params"]
    return p, heads.scale_weights({"params": target}, alpha)["params"]


def representation_stats(proj, P, z):
    """Effective rank (both named definitions), covariance condition number and mean normalised std of ``h(z)``."""
    u = _apply(proj, P, z)
    return {"erank_rankme": float(metrics.effective_rank(u, "rankme")),
            "erank_squared": float(metrics.effective_rank(u, "squared")),
            "cond": float(metrics.covariance_condition_number(u)),
            "norm_std": float(metrics.normalized_std(u))}


def degeneracy_ratio(proj, P, z, v_view, v_rand) -> tuple[float, float, float]:
    """(mean |J v_view|/|v_view|, mean |J v_rand|/|v_rand|, their ratio) for the projector."""
    head = lambda x: _apply(proj, P, x)  # noqa: E731
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
    proj, _ = _models(cfg, name)
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
    models, (p0, t0, c0), (p, tgt, c), vals = train(cfg, name, k_train, sigma_sqrt, aug_basis, steps)
    proj = models[0]
    z, z1, z2 = sample_views(cfg, k_eval, cfg.data.n_eval, sigma_sqrt, aug_basis)
    v_rand = jax.random.normal(k_rand, z.shape, jnp.float64)
    row = {"objective": name, "family": FAMILIES[name], "final_loss": float(vals[-1]), "initial_loss": float(vals[0])}
    for tag, P in (("init", p0["proj"]), ("trained", p["proj"])):
        for key_, v in representation_stats(proj, P, z).items():
            row[f"{key_}_{tag}"] = v
        row[f"deg_view_{tag}"], row[f"deg_random_{tag}"], row[f"deg_ratio_{tag}"] = degeneracy_ratio(
            proj, P, z1, z1 - z2, v_rand)
    _, g1, g2 = sample_views(cfg, k_geo, cfg.data.n_geom, sigma_sqrt, aug_basis)
    geo = {"trained": geometry_row(cfg, name, p, tgt, c, g1, g2, k_eig)}
    ps, ts = _scale_proj(p, tgt, cfg.analysis.pseudo_collapse_scale)
    geo["pseudo_collapsed"] = geometry_row(cfg, name, ps, ts, c, g1, g2, k_eig)
    for state, g in geo.items():
        for key_, v in g.items():
            row[f"{key_}_{state}"] = v
    row.update(collapse_rows(cfg, name, p, tgt, c, jnp.mean(z, axis=0), k_eig))
    return row, vals


def _certified(r):
    return bool(r.get("equilibrium_certified") and r.get("holds_equilibrium"))


def measure(config) -> dict:
    common.require_x64(NAME)
    cfg = config
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
        per = (time.perf_counter() - t0) / max(len(rows) * steps, 1)
        out["dry_run"] = {"step_time_s": per, "projected_wall_time_s": per * len(rows) * config.train.steps,
                          "device": jax.devices()[0].device_kind}
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


def run(config, out_dir) -> dict:
    """The old entry point, for the transition: :func:`experiments.common.run_experiment` on this module."""
    import sys

    return common.run_experiment(sys.modules[__name__], config, out_dir)
