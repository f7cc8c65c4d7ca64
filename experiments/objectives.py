"""Experiment 7: the same geometric measurements across SSL objectives.

Backbone-free setting: representations ``z ~ N(0, Sigma)`` in R^d (log-uniform
spectrum, random eigenbasis) and two views

    z_a = z + aug_scale * A xi_a + iso_noise * xi'_a,     a = 1, 2,

where ``A`` (``d x aug_dim``, orthonormal columns) spans the "augmentation"
directions. Per objective an MLP head (projector ``d -> hidden -> k``; plus a
predictor ``k -> pred_hidden -> k`` for SimSiam, BYOL and MoCo v3; an EMA target
projector for BYOL, MoCo v3 and DINO, with BYOL's cosine decay schedule) is trained
with optax Adam on fresh batches (``lax.scan``), in float64. Then, per objective:

* on the projector outputs of an evaluation batch: effective rank by both named
  definitions (``rankme``: singular values; ``squared``: squared singular values),
  covariance condition number, mean normalised std;
* Thm 4.1 quantities (:func:`ssl_geometry.geometry.classify_collapse`) at the
  trained state and at a pseudo-collapsed state (every projector weight matrix, online
  and target, times ``pseudo_collapse_scale``): premises (``H_L`` PSD?, ``|rho|``) and
  ``lambda_min``/``lambda_max`` of ``H_eff``, ``G`` and ``M``. As in experiment 3 the
  Hessian is ``hess_{z1} L``: the loss as a function of the first view's online
  outputs, with everything computed from the second view (and the targets) held fixed;
  the "head" is the online branch (projector, then predictor where there is one);
* Sec. 5 metric degeneracy of the projector: mean ``|J_h v| / |v|`` along the view
  difference ``v = z1 - z2`` divided by the same mean along random directions.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from experiments import common
from ssl_geometry import geometry, heads, losses, metrics

NAME = "objectives"
TITLE = "Objectives"
CLAIM = ("Across contrastive, decorrelation and distillation objectives, a smooth head makes the pseudo-collapsed "
         "state strictly unstable (lambda_min(H_eff) < 0) wherever Thm 4.1's premises hold, and the trained head's "
         "metric degenerates along augmentation directions (Sec. 5).")

FAMILIES = {
    "info_nce": "contrastive", "moco_v3": "contrastive", "spectral_contrastive": "contrastive",
    "barlow_twins": "decorrelation", "vicreg": "decorrelation",
    "byol": "distillation", "simsiam": "distillation", "dino": "distillation",
}
PREDICTOR = ("simsiam", "byol", "moco_v3")
TARGET = ("byol", "moco_v3", "dino")


def _models(cfg, name):
    proj = heads.mlp(cfg.d, (cfg.hidden,), cfg.k, activation=cfg.activation, bias=True, dtype=jnp.float64)
    pred = (heads.mlp(cfg.k, (cfg.pred_hidden,), cfg.k, activation=cfg.activation, bias=True, dtype=jnp.float64)
            if name in PREDICTOR else None)
    return proj, pred


def _apply(model, params, x):
    return model.apply({"params": params}, x)[0]


def objective_loss(cfg, name, proj, pred):
    """``loss(params, target, center, z1, z2) -> (L, new_center)`` for objective ``name``."""

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
            return losses.moco_v3(p1, p2, t1, t2, temperature=cfg.temperature), center
        if name == "dino":
            return losses.dino(jnp.stack([u1, u2]), jnp.stack([t1, t2]), center)
        if name == "info_nce":
            return losses.info_nce(u1, u2, temperature=cfg.temperature), center
        return losses.get(name)(u1, u2), center

    return loss


@functools.lru_cache(maxsize=None)
def _first_view_program(name, d, hidden, k, pred_hidden, activation, temperature):
    """Jitted ``head(params, z)`` and ``loss(u, fixed)`` for :func:`first_view_problem` (compiled once per
    objective and shape; every state passes its arrays as arguments)."""
    proj = heads.mlp(d, (hidden,), k, activation=activation, bias=True, dtype=jnp.float64)
    pred = (heads.mlp(k, (pred_hidden,), k, activation=activation, bias=True, dtype=jnp.float64)
            if name in PREDICTOR else None)

    @jax.jit
    def head(params, z):
        u = _apply(proj, params["proj"], z)
        return u if pred is None else _apply(pred, params["pred"], u)

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

    return head, loss


def first_view_problem(cfg, name, params, target, center, z1, z2):
    """``(head_fn, loss_fn)`` with ``loss_fn(head_fn(z1))`` = the part of L that depends on ``z1``.

    ``head_fn`` is the online branch (projector, then predictor where there is one);
    the second view's outputs, the targets and the DINO centre are fixed arrays (the
    stop-gradient branches of the objective, and the other view's online branch as
    in experiment 3).
    """
    head, loss = _first_view_program(name, cfg.d, cfg.hidden, cfg.k, cfg.pred_hidden, cfg.activation,
                                     cfg.temperature)
    proj = heads.mlp(cfg.d, (cfg.hidden,), cfg.k, activation=cfg.activation, bias=True, dtype=jnp.float64)
    fixed = {"u2": _apply(proj, params["proj"], z2), "p2": head(params, z2), "center": center}
    if name in TARGET:
        fixed["t1"], fixed["t2"] = _apply(proj, target, z1), _apply(proj, target, z2)
    return (lambda z: head(params, z)), (lambda u: loss(u, fixed))


def sample_views(cfg, key, n, sigma_sqrt, aug_basis):
    """``(z, z1, z2)``: clean representations and two views (module docstring)."""
    kz, k1, k2, k3, k4 = jax.random.split(key, 5)
    z = jax.random.normal(kz, (n, cfg.d), jnp.float64) @ sigma_sqrt
    a = aug_basis.shape[1]

    def view(ka, ki):
        return (z + cfg.aug_scale * jax.random.normal(ka, (n, a), jnp.float64) @ aug_basis.T
                + cfg.iso_noise * jax.random.normal(ki, (n, cfg.d), jnp.float64))

    return z, view(k1, k2), view(k3, k4)


def train(cfg, name, key, sigma_sqrt, aug_basis):
    """Adam on the head (and predictor); EMA target with BYOL's schedule. Returns the state and loss curve."""
    proj, pred = _models(cfg, name)
    k_p, k_q, k_d = jax.random.split(key, 3)
    params = {"proj": proj.init(k_p)["params"]}
    if pred is not None:
        params["pred"] = pred.init(k_q)["params"]
    target = params["proj"]
    center = jnp.zeros((cfg.k,), jnp.float64)
    loss = objective_loss(cfg, name, proj, pred)
    opt = optax.adam(cfg.lr)
    tau = losses.byol_decay_schedule(cfg.steps, cfg.ema)

    @jax.jit
    def run_steps(p, tgt, c, sig, basis, keys):
        # sig / basis are arguments (not closed over), so XLA does not constant-fold them.
        def step(carry, xs):
            p, s, tgt, c = carry
            i, k = xs
            _, z1, z2 = sample_views(cfg, k, cfg.n, sig, basis)
            (val, c_new), g = jax.value_and_grad(loss, has_aux=True)(p, tgt, c, z1, z2)
            upd, s = opt.update(g, s, p)
            p = optax.apply_updates(p, upd)
            tgt = losses.ema_update(tgt, p["proj"], tau(i)) if name in TARGET else tgt
            return (p, s, tgt, c_new), val

        (p, _, tgt, c), vals = jax.lax.scan(step, (p, opt.init(p), tgt, c), (jnp.arange(cfg.steps), keys))
        return p, tgt, c, vals

    keys = jax.random.split(k_d, cfg.steps)
    init = (params, target, center)
    p, tgt, c, vals = run_steps(params, target, center, sigma_sqrt, aug_basis, keys)
    vals = np.asarray(vals)
    if not np.all(np.isfinite(vals)):
        raise FloatingPointError(f"{name}: non-finite loss at step {int(np.argmin(np.isfinite(vals)))}.")
    return (proj, pred), init, (p, tgt, c), vals


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
    head = lambda x: _apply(proj, P, x)
    deg = jax.vmap(lambda zz, vv: metrics.metric_degeneracy(head, zz, vv))
    a, b = float(jnp.mean(deg(z, v_view))), float(jnp.mean(deg(z, v_rand)))
    return a, b, a / b


def geometry_row(cfg, name, params, target, center, z1, z2, key):
    """Premises and extreme eigenvalues of ``H_eff``, ``G``, ``M``, ``H_L`` at one state (dense, float64)."""
    head_fn, loss_fn = first_view_problem(cfg, name, params, target, center, z1, z2)
    res = geometry.classify_collapse(head_fn, loss_fn, z1, activation=cfg.activation, per_sample=True,
                                     max_dense_dim=cfg.max_dense_dim, key=key)
    p = res.premises
    return {"H_L_psd": p["loss_hessian_psd"]["met"], "lambda_min_H_L": res.lambda_min["loss_hessian"],
            "rho_norm": p["residual_nonzero"]["value"], "rho_nonzero": p["residual_nonzero"]["met"],
            "lambda_min_H_eff": res.lambda_min["full"], "lambda_max_H_eff": res.lambda_max["full"],
            "lambda_min_G": res.lambda_min["metric"], "lambda_max_G": res.lambda_max["metric"],
            "lambda_min_M": res.lambda_min["interaction"], "lambda_max_M": res.lambda_max["interaction"],
            "eig_tol": res.eig_tol, "conclusion": res.conclusion}


def run_objective(cfg, name, key, sigma_sqrt, aug_basis):
    """Train one objective, then measure it at initialisation, trained and pseudo-collapsed (one row)."""
    k_train, k_eval, k_geo, k_rand, k_eig = jax.random.split(key, 5)
    models, (p0, t0, c0), (p, tgt, c), vals = train(cfg, name, k_train, sigma_sqrt, aug_basis)
    proj = models[0]
    z, z1, z2 = sample_views(cfg, k_eval, cfg.n_eval, sigma_sqrt, aug_basis)
    v_rand = jax.random.normal(k_rand, z.shape, jnp.float64)
    row = {"objective": name, "family": FAMILIES[name], "final_loss": float(vals[-1]), "initial_loss": float(vals[0])}
    for tag, P in (("init", p0["proj"]), ("trained", p["proj"])):
        for key_, v in representation_stats(proj, P, z).items():
            row[f"{key_}_{tag}"] = v
        row[f"deg_view_{tag}"], row[f"deg_random_{tag}"], row[f"deg_ratio_{tag}"] = degeneracy_ratio(
            proj, P, z1, z1 - z2, v_rand)
    _, g1, g2 = sample_views(cfg, k_geo, cfg.n_geom, sigma_sqrt, aug_basis)
    geo = {"trained": geometry_row(cfg, name, p, tgt, c, g1, g2, k_eig)}
    ps, ts = _scale_proj(p, tgt, cfg.pseudo_collapse_scale)
    geo["pseudo_collapsed"] = geometry_row(cfg, name, ps, ts, c, g1, g2, k_eig)
    for state, g in geo.items():
        for key_, v in g.items():
            row[f"{key_}_{state}"] = v
    return row, vals


def _premises_hold(row, state="pseudo_collapsed"):
    return bool(row[f"H_L_psd_{state}"] and row[f"rho_nonzero_{state}"])


def verdict(rows):
    """Rule: (i) Thm 4.1 across objectives: among objectives whose pseudo-collapsed state meets the premises
    (H_L PSD and rho != 0), every one must have lambda_min(H_eff) < -eig_tol with the smooth head; one that
    does not -> not supported; no objective meeting the premises -> premise violated. (ii) Sec. 5: every trained
    head must contract the view-difference direction more than random directions (degeneracy ratio < 1);
    (i) holds but (ii) fails -> inconclusive; both hold -> supported."""
    held = [r for r in rows if _premises_hold(r)]
    unstable = [r for r in held if r["lambda_min_H_eff_pseudo_collapsed"] < -r["eig_tol_pseudo_collapsed"]]
    contract = [r for r in rows if r["deg_ratio_trained"] < 1.0]
    fam_psd = {}
    for fam in sorted(set(FAMILIES[r["objective"]] for r in rows)):
        fr = [r for r in rows if r["family"] == fam]
        fam_psd[f"trained_H_L_psd_fraction_{fam}"] = sum(bool(r["H_L_psd_trained"]) for r in fr) / len(fr)
    stats = {
        "collapse_premise_holding": len(held),
        "collapse_unstable_among_premise_holding": len(unstable),
        "deg_ratio_max_trained": max(r["deg_ratio_trained"] for r in rows),
        "deg_ratio_mean_trained": float(np.mean([r["deg_ratio_trained"] for r in rows])),
        "objectives": len(rows),
        "collapse_unstable_all": sum(r["lambda_min_H_eff_pseudo_collapsed"] < -r["eig_tol_pseudo_collapsed"]
                                             for r in rows),
        "deg_ratio_mean_init": float(np.mean([r["deg_ratio_init"] for r in rows])),
        **fam_psd,
    }
    if not held:
        return "premise violated", stats
    if len(unstable) < len(held):
        return "not supported", stats
    if len(contract) < len(rows):
        return "inconclusive", stats
    return "supported", stats


def run(config, out_dir) -> dict:
    common.require_x64(NAME)
    key = jax.random.PRNGKey(config.seed)
    k_s, k_a, k_o = jax.random.split(key, 3)
    lo, hi = config.spectrum
    eig = np.exp(np.linspace(np.log(lo), np.log(hi), config.d))
    Q = np.linalg.qr(np.asarray(jax.random.normal(k_s, (config.d, config.d), jnp.float64)))[0]
    sigma_sqrt = jnp.asarray((Q * np.sqrt(eig)) @ Q.T)
    aug_basis = jnp.asarray(np.linalg.qr(np.asarray(jax.random.normal(k_a, (config.d, config.aug_dim),
                                                                       jnp.float64)))[0])
    rows, curves = [], {}
    for i, name in enumerate(config.objectives):
        row, vals = run_objective(config, name, jax.random.fold_in(k_o, i), sigma_sqrt, aug_basis)
        rows.append(row)
        curves[name] = vals
    v, stats = verdict(rows)
    _figure(rows, curves, out_dir)
    return {"verdict": v, "verdict_rule": verdict.__doc__.split("Rule: ")[1].replace("\n    ", " "),
            "headline": stats, "paper": {}, "rows": rows}


def _figure(rows, curves, out_dir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
    a2.set_title("blue trained, red pseudo-collapsed; o: H_L PSD", fontsize=8)
    a3.bar(x - 0.2, [r["deg_ratio_init"] for r in rows], 0.4, label="init")
    a3.bar(x + 0.2, [r["deg_ratio_trained"] for r in rows], 0.4, label="trained")
    a3.axhline(1, color="k", lw=0.5)
    a3.set_xticks(x, names, rotation=35, ha="right", fontsize=7)
    a3.set_ylabel("|J v_view| / |J v_random| (means)")
    a3.legend(fontsize=7)
    common.save_figure(fig, out_dir, "objectives")


def report(results, rel_dir) -> str:
    h = results["headline"]
    rows = results["rows"]
    rep_cols = ["objective", "family", "erank_rankme_trained", "erank_squared_trained", "cond_trained",
                "norm_std_trained", "deg_ratio_init", "deg_ratio_trained"]
    geo = []
    for r in rows:
        for state in ("trained", "pseudo_collapsed"):
            geo.append({"objective": r["objective"], "state": state, "H_L PSD": r[f"H_L_psd_{state}"],
                        "lambda_min(H_L)": r[f"lambda_min_H_L_{state}"], "|rho|": r[f"rho_norm_{state}"],
                        "lambda_min(H_eff)": r[f"lambda_min_H_eff_{state}"],
                        "lambda_max(H_eff)": r[f"lambda_max_H_eff_{state}"],
                        "lambda_min(G)": r[f"lambda_min_G_{state}"], "lambda_max(G)": r[f"lambda_max_G_{state}"],
                        "lambda_min(M)": r[f"lambda_min_M_{state}"], "lambda_max(M)": r[f"lambda_max_M_{state}"]})
    fam = "; ".join(f"{k.rsplit('_', 1)[1]} {v:.2g}" for k, v in h.items() if k.startswith("trained_H_L_psd_fraction"))
    return "\n".join([
        f"{h['collapse_premise_holding']} of {h['objectives']} objectives meet Thm 4.1's premises at the "
        f"pseudo-collapsed state; {h['collapse_unstable_among_premise_holding']} of those are strictly unstable "
        f"({h['collapse_unstable_all']} of all {h['objectives']}, premises or not). Fraction of trained "
        f"states with H_L PSD by family: {fam}. Mean degeneracy ratio |J v_view|/|J v_random|: "
        f"{h['deg_ratio_mean_init']:.3g} at init, {h['deg_ratio_mean_trained']:.3g} trained "
        f"(max trained {h['deg_ratio_max_trained']:.3g}).",
        "",
        common.markdown_table(rows, rep_cols),
        "",
        common.markdown_table(geo),
        "",
        f"![objectives]({rel_dir}/objectives.png)",
    ])
