"""Experiment 3: Thm 4.1 at certified collapsed equilibria; other collapsed states labelled as such.

States, per activation (and BatchNorm where it is defined):

* ``equilibrium`` -- fixed-target objectives (MSE to targets, DINO's cross-entropy against a fixed
  teacher): :func:`ssl_geometry.geometry.collapsed_equilibrium` puts every sample at one point ``c``
  and chooses the targets so that ``rho_i in null(J^T)`` and ``sum_i rho_i = 0``: stationary in ``z``
  and in the head with ``rho != 0``, certified by :func:`ssl_geometry.geometry.thm41_premises`.
* ``collapsed`` -- the Siamese objectives with both views at ``c`` (``z1 = z2 = c`` rows). The
  samples are exchangeable, so every residual row is equal and head stationarity would force
  ``rho = 0`` (:func:`ssl_geometry.geometry.identical_rows_finding` measures it): these states are
  not equilibria and are labelled so.
* ``pseudo_collapsed`` -- ``z1 ~ N(0, I)``, ``z2 = z1 + view_noise xi``, projector weights x 0.1 (the
  paper's state); not an equilibrium either, labelled.

The Hessian is ``hess_{z1} L``: the loss as a function of the first view's online outputs, the
second view and the targets held fixed (the paper's tracker). Online branch: projector, then the
predictor for SimSiam/BYOL. BYOL's target is ``l(p1, sg t2)`` with ``t2`` from a target projector
(an independent draw: an EMA target that lags the online weights), so ``rho != 0`` (the old wiring
``byol(u, u2, u2, u)`` made each prediction its own target and ``rho = 0``).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from experiments import claims, common, rules, stationary_heads
from ssl_geometry import geometry, heads, losses
from ssl_geometry import as_function

NAME = "collapse_hessians"
TITLE = "Collapse Hessians (Thm 4.1)"
#: The registry claims (experiments/claims.py) this experiment decides.
CLAIMS = ("thm4.1-smooth-unstable", "thm4.1-linear-psd", "stationarity-forces-rho-zero")
CLAIM = ("Thm 4.1: at a collapsed equilibrium with non-zero residual and H_L PSD, a linear (or ReLU) head has "
         "H_eff = G >= 0 (no second-order escape), while a smooth head generically makes the state strictly "
         "unstable (lambda_min(H_eff) < 0). Decided per objective on certified equilibria, with the project's "
         "finding that head stationarity forces rho = 0 at the Siamese, contrastive and decorrelation objectives' "
         "collapsed states.")
#: The family of each objective evaluated at collapsed states (the claim stationarity-forces-rho-zero).
FAMILIES = {"simsiam": "siamese", "byol": "siamese", "info_nce": "contrastive", "spectral_contrastive": "contrastive",
            "moco_v3": "contrastive", "vicreg": "decorrelation", "barlow_twins": "decorrelation"}


def _online(cfg, activation, batch_norm, scale, predictor):
    proj = heads.mlp(cfg.data.d, (cfg.model.hidden,), cfg.model.k, activation=activation, batch_norm=batch_norm,
                     bias=False, scale=scale, dtype=jnp.float64)
    if not predictor:
        return proj
    pred = heads.mlp(cfg.model.k, (cfg.model.pred_hidden,), cfg.model.k, activation=activation,
                     batch_norm=batch_norm, bias=False, dtype=jnp.float64)
    return heads.compose(proj, pred)


def siamese_problem(cfg, objective, activation, batch_norm, state, key):
    """``(model, variables, loss_fn, z1, train, fixed)`` for a Siamese objective at a collapsed/pseudo-collapsed
    state; ``fixed`` holds the held-fixed arrays (``u2``: second view's projection, BYOL's ``t2``)."""
    k_head, k_c, k_z, k_v, k_t = jax.random.split(key, 5)
    scale = cfg.model.pseudo_collapse_scale if state == "pseudo_collapsed" else 1.0
    predictor = objective in cfg.analysis.predictor_objectives
    model = _online(cfg, activation, batch_norm, 1.0, predictor)
    variables = model.init(k_head)
    if scale != 1.0:  # pseudo-collapse: the projector's weights x 0.1, the predictor unchanged
        if predictor:
            p = dict(variables["params"])
            p["0"] = heads.scale_weights({"params": p["0"]}, scale)["params"]
            variables = {**variables, "params": p}
        else:
            variables = heads.scale_weights(variables, scale)
    n, d = cfg.data.n, cfg.data.d
    if state == "collapsed":
        z1 = jnp.tile(jax.random.normal(k_c, (1, d), jnp.float64), (n, 1))
        z2 = z1
    else:
        z1 = jax.random.normal(k_z, (n, d), jnp.float64)
        z2 = z1 + cfg.data.view_noise * jax.random.normal(k_v, z1.shape, jnp.float64)
    train = bool(batch_norm)
    online = as_function(model, variables, train=train)
    proj_model = _online(cfg, activation, batch_norm, 1.0, False)
    proj_vars = variables
    if predictor:  # the projector's part of the composed variables
        proj_vars = {"params": variables["params"]["0"],
                     **({"batch_stats": variables["batch_stats"]["0"]} if "batch_stats" in variables else {})}
    u2 = as_function(proj_model, proj_vars, train=train)(z2)  # the second view's projection (stop-gradient)
    if objective == "simsiam":  # L = D(p1, sg z2)/2 + D(p2, sg z1)/2: only the first term depends on z1
        loss_fn = lambda p: 0.5 * losses.negative_cosine(p, u2)  # noqa: E731
    elif objective == "byol":  # L = l(p1, sg t2) + l(p2, sg t1): only l(p1, sg t2) depends on p1
        target = proj_model.init(k_t)  # the target projector: an independent draw (a lagging EMA)
        t_fn = as_function(proj_model, target, train=train)
        t1, t2, p2 = t_fn(z1), t_fn(z2), online(z2)
        loss_fn = lambda p: losses.byol(p, p2, t1, t2)  # noqa: E731
    else:
        fn = losses.get(objective)
        loss_fn = lambda u: fn(u, u2)  # noqa: E731
    fixed = {"u2": u2, **({"t2": t2} if objective == "byol" else {})}
    return model, variables, loss_fn, z1, train, fixed


def margin(lambda_min_h_eff: float, lambda_min_m: float) -> float:
    """``lambda_min(H_eff) / |lambda_min(M)|``: how far ``G`` holds off ``M``'s negative curvature (NaN when
    ``lambda_min(M) = 0``, e.g. a linear head). Below 0: unstable; above 0: stable with that margin."""
    return lambda_min_h_eff / abs(lambda_min_m) if lambda_min_m != 0 else float("nan")


def _row(cfg, res, key_info):
    p = res.premises
    return {**key_info, "head_kind": ("batchnorm/" + res.head_kind) if key_info["batch_norm"] else res.head_kind,
            "conclusion": res.conclusion, "predicted": res.predicted, "method": res.method, "eig_tol": res.eig_tol,
            "holds": bool(p.holds_except_smoothness), "stationary": bool(p.stationary_z and p.stationary_head),
            "grad_z_ratio": p.grad_z_ratio, "grad_head_ratio": p.grad_head_ratio,
            "H_L_psd": p.loss_hessian_psd, "lambda_min_H_L": res.lambda_min["loss_hessian"],
            "rho_norm": p.residual_norm, "rho_nonzero": p.residual_nonzero,
            "lambda_min_H_eff": res.lambda_min["full"], "lambda_max_H_eff": res.lambda_max["full"],
            "lambda_min_G": res.lambda_min["metric"], "lambda_min_M": res.lambda_min["interaction"],
            "lambda_max_M": res.lambda_max["interaction"], "violated": list(p.violated()),
            "margin": margin(res.lambda_min["full"], res.lambda_min["interaction"])}


def run_case(cfg, objective, activation, batch_norm, state, key, residual_scale=float("nan")):
    """One row: the state, its Thm 4.1 premises and conclusion (a collapsed state: also the head driven to
    stationarity there, :func:`experiments.stationary_heads.stationary_head_state`)."""
    info = {"objective": objective, "activation": activation, "batch_norm": bool(batch_norm), "state": state,
            "residual_scale": residual_scale}
    opts = dict(activation=activation, max_dense_dim=cfg.analysis.max_dense_dim, key=key)
    if state == "equilibrium":
        model = _online(cfg, activation, False, 1.0, False)
        variables = model.init(key)
        c = jax.random.normal(jax.random.fold_in(key, 1), (cfg.data.d,), jnp.float64)
        eq = geometry.collapsed_equilibrium(model, variables, objective, c, cfg.data.n, key=jax.random.fold_in(key, 2),
                                            residual_scale=residual_scale, activation=activation)
        res = geometry.classify_collapse(model, eq.loss_fn, eq.z, variables=variables, **opts)
        return {**_row(cfg, res, info), "certified": eq.certified, "null_dim": eq.null_dim,
                "construction_error": eq.residual_error}
    model, variables, loss_fn, z1, train, _ = siamese_problem(cfg, objective, activation, batch_norm, state, key)
    res = geometry.classify_collapse(model, loss_fn, z1, variables=variables, train=train, **opts)
    row = {**_row(cfg, res, info), "certified": False, "null_dim": -1, "construction_error": float("nan")}
    if state == "collapsed":
        f = geometry.identical_rows_finding(model, variables, loss_fn, z1, train=train)
        row.update(rows_identical=f["rows_identical"], forces_zero_residual=f["forces_zero_residual"],
                   sigma_min_head_jacobian=f["sigma_min_head_jacobian"], rho_bound=f["rho_bound"])
        st = stationary_heads.stationary_head_state(model, variables, loss_fn, z1, key=jax.random.fold_in(key, 3),
                                                    train=train, max_iter=cfg.analysis.stationarity_max_iter)
        row.update({f"st_{k}": v for k, v in st.items()})
    return row


def _cases(cfg):
    a = cfg.analysis
    for state in a.states:
        objectives = a.equilibrium_objectives if state == "equilibrium" else a.siamese_objectives
        for bn in cfg.model.batch_norm:
            if bn and state != "pseudo_collapsed":
                continue  # train-mode BN at exact collapse maps every row to beta: no state to evaluate
            for objective in objectives:
                for act in cfg.model.activations:
                    scales = a.residual_scales[objective] if state == "equilibrium" else [float("nan")]
                    for s in scales:
                        yield objective, act, bn, state, s


#: Honours ``config.dry_run``: the paper's widths at batch 2, one case per code path (:func:`_dry_cases`), every
#: operator through Lanczos (at the paper's sizes every one exceeds ``max_dense_dim``); the projection fits the
#: mean per-case time at two batches and projects all of the variant's cases at its batch ``n`` (:func:`_dry_measure`).
DRY_RUN = True
#: Batch of a dry run (the widths stay the paper's), and its L-BFGS iterations driving a collapsed head to stationarity.
DRY_RUN_N, DRY_RUN_STATIONARITY_ITERS = 2, 5


def _dry_config(config, n: int = DRY_RUN_N):
    """The dry-run config: batch ``n`` (at most the variant's), ``max_dense_dim = 1`` (Lanczos for every
    operator, the paper's path) and :data:`DRY_RUN_STATIONARITY_ITERS` iterations of the stationarity search."""
    cfg = config.copy_and_resolve_references()
    cfg.unlock()
    cfg.data.n = min(n, config.data.n)
    cfg.analysis.max_dense_dim = 1
    cfg.analysis.stationarity_max_iter = min(DRY_RUN_STATIONARITY_ITERS, config.analysis.stationarity_max_iter)
    return cfg


def _dry_cases(config) -> list:
    """One case per code path of :func:`run_case` (each case costs about half a minute at the paper's widths on a
    2-core CPU, compilation included): the first equilibrium objective with a linear, a piecewise and a smooth
    head, the others smooth; each loss wiring of the Siamese objectives (SimSiam, BYOL, the first objective
    without a predictor) at the collapsed state, and pseudo-collapsed with BatchNorm alternating on and off."""
    a, acts = config.analysis, {}
    for act in config.model.activations:  # first activation of each head kind
        acts.setdefault(geometry.head_smoothness(act), act)
    smooth = acts.get("smooth", config.model.activations[0])
    nan, cases = float("nan"), []
    if "equilibrium" in a.states:
        eq = list(a.equilibrium_objectives)
        s0 = a.residual_scales[eq[0]][0]
        cases += [(eq[0], acts[k], False, "equilibrium", s0) for k in ("linear", "piecewise", "smooth") if k in acts]
        cases += [(o, smooth, False, "equilibrium", a.residual_scales[o][0]) for o in eq[1:]]
    siam = list(a.siamese_objectives)
    branches = [o for o in siam if o in a.predictor_objectives] + [o for o in siam if o not in a.predictor_objectives][:1]
    if "collapsed" in a.states:
        cases += [(o, smooth, False, "collapsed", nan) for o in branches]
    if "pseudo_collapsed" in a.states:
        bns = list(config.model.batch_norm)
        cases += [(o, smooth, bns[i % len(bns)], "pseudo_collapsed", nan) for i, o in enumerate(branches)]
    return cases


def measure(config) -> dict:
    common.require_x64(NAME)
    if config.dry_run:
        return _dry_measure(config)
    key = jax.random.PRNGKey(config.seed)
    return {"cases": [run_case(config, objective, act, bn, state, jax.random.fold_in(key, i), s)
                      for i, (objective, act, bn, state, s) in enumerate(_cases(config))]}


def _dry_measure(config) -> dict:
    """The dry run: the cases of :func:`_dry_cases` timed at batches :data:`DRY_RUN_N` and twice that (each
    once untimed first, so compilation is excluded); the mean time per case, fitted as ``a n^p``, projects
    every case of the variant at its batch (:func:`experiments.common.power_law_projection`). Nothing is
    trained: the whole projection is analysis. The rows are those of the smaller batch."""
    key, rows = jax.random.PRNGKey(config.seed), []

    def make_step(n):
        cfg = _dry_config(config, n)
        cases = _dry_cases(cfg)

        def step():
            out = [run_case(cfg, o, a, bn, st, jax.random.fold_in(key, i), s)
                   for i, (o, a, bn, st, s) in enumerate(cases)]
            if not rows:
                rows.extend(out)
            return out
        return step

    sizes = sorted({min(DRY_RUN_N, config.data.n), min(2 * DRY_RUN_N, config.data.n)})
    if len(sizes) < 2:
        raise ValueError(f"{NAME}: a dry run needs `data.n` >= {2 * DRY_RUN_N} (two batch sizes to fit); "
                         f"got {config.data.n}.")
    n_cases = len(_dry_cases(_dry_config(config)))
    points = [[n, t / n_cases] for n, t in common.time_at_sizes(make_step, sizes, repeats=1)]
    n_full = sum(1 for _ in _cases(config))
    analysis = common.power_law_projection(points, config.data.n, n_full)
    return {"cases": rows, "dry_run": common.dry_run_record(
        points[-1][1], analysis=analysis, cases_run=len(rows), cases_full=n_full, batch_full=config.data.n)}


def _certified(rows):
    return [r for r in rows if r["state"] == "equilibrium" and r["certified"] and r["holds"] and not r["batch_norm"]]


def _label(r) -> str:
    return f"{r['objective']}/{r['activation']}/scale {r['residual_scale']:g}"


def stationarity_states(rows) -> list[dict]:
    """The collapsed states as :func:`experiments.rules.decide_rho_zero` reads them."""
    return [{"label": f"{r['objective']}/{r['activation']}", "family": FAMILIES[r["objective"]],
             "stationary": r["st_stationary"], "rho": r["st_rho"], "rho_ref": r["st_rho_ref"],
             "residual_tol": r["st_residual_tol"]} for r in rows if r["state"] == "collapsed"]


def _sign(r) -> str:
    if r["lambda_min_H_eff"] < -r["eig_tol"]:
        return "unstable"
    return "stable" if r["lambda_min_H_eff"] > r["eig_tol"] else "degenerate"


def decide(m, config) -> dict:
    """Thm 4.1's two halves on the certified equilibria (smooth: per objective), and the stationarity finding."""
    rows = m["cases"]
    eq = _certified(rows)
    state = lambda r: {"objective": r["objective"], "lambda_min": r["lambda_min_H_eff"], "tol": r["eig_tol"],  # noqa: E731
                       "lambda_min_M": r["lambda_min_M"], "label": _label(r)}
    smooth = [state(r) for r in eq if r["head_kind"] == "smooth"]
    lin = [state(r) for r in eq if r["head_kind"] in ("linear", "piecewise")]
    items = [*rules.decide_smooth_unstable(smooth), rules.decide_linear_psd(lin),
             rules.decide_rho_zero(stationarity_states(rows))]
    coll = [r for r in rows if r["state"] == "collapsed"]
    headline = {"equilibria_constructed": sum(r["state"] == "equilibrium" for r in rows),
                "equilibria_certified": len(eq)}
    for obj in dict.fromkeys(r["objective"] for r in eq):
        sm = [r for r in eq if r["objective"] == obj and r["head_kind"] == "smooth"]
        for sign in ("unstable", "stable", "degenerate"):
            headline[f"smooth_{sign}_{obj}"] = sum(_sign(r) == sign for r in sm)
        headline[f"max_margin_smooth_{obj}"] = max((r["margin"] for r in sm), default=float("nan"))
    headline.update({
        "min_lambda_min_H_eff_linear_relu": min((r["lambda_min_H_eff"] for r in eq if r["head_kind"] != "smooth"),
                                                default=float("nan")),
        "collapsed_states": len(coll), "collapsed_states_head_stationary": sum(r["st_stationary"] for r in coll),
        "collapsed_states_within_rho_bound": sum(r["st_stationary"] and r["st_within_bound"] for r in coll),
        "collapsed_states_where_stationarity_forces_rho_0": sum(bool(r.get("forces_zero_residual")) for r in coll),
        "simsiam_cases_H_L_indefinite": sum(not r["H_L_psd"] for r in rows if r["objective"] == "simsiam"),
        "simsiam_cases": sum(r["objective"] == "simsiam" for r in rows)})
    return {"claims": items, "headline": headline}


_COLOURS = {"linear": "tab:blue", "piecewise": "tab:orange", "smooth": "tab:red"}


def figures(results, out_dir) -> None:
    plt = common.pyplot()
    rows = results["measurements"]["cases"]
    fig, ax = plt.subplots(figsize=(8, 3.6))
    objs = list(dict.fromkeys(r["objective"] for r in rows))
    offs = {"equilibrium": -0.25, "collapsed": 0.0, "pseudo_collapsed": 0.25}
    for r in rows:
        x = objs.index(r["objective"]) + offs[r["state"]]
        y = r["lambda_min_H_eff"] / max(abs(r["lambda_max_H_eff"]), 1e-300)
        marker = "o" if r["state"] == "equilibrium" and r["certified"] else "x"
        ax.scatter(x, y, c=_COLOURS.get(r["head_kind"].split("/")[-1], "k"), marker=marker, s=18,
                   alpha=0.5 if r["batch_norm"] else 1.0)
    ax.axhline(0, color="k", lw=0.5)
    ax.set_xticks(range(len(objs)), objs, rotation=30, ha="right")
    ax.set_ylabel("lambda_min(H_eff) / |lambda_max(H_eff)|")
    ax.set_title("o: certified equilibrium, x: not stationary (left/centre/right: equilibrium, collapsed, "
                 "pseudo-collapsed); blue linear, orange ReLU, red smooth", fontsize=7)
    common.save_figure(fig, out_dir, "lambda_min_by_case")


def report(results, rel_dir) -> str:
    h = results["headline"]
    rows = results["measurements"]["cases"]
    eq = [{"objective": r["objective"], "activation": r["activation"], "residual scale": r["residual_scale"],
           "certified": r["certified"], "|rho|": r["rho_norm"], "|grad_z|/(|J||rho|)": r["grad_z_ratio"],
           "|grad_head|/scale": r["grad_head_ratio"], "lambda_min(H_eff)": r["lambda_min_H_eff"],
           "lambda_min(G)": r["lambda_min_G"], "lambda_min(M)": r["lambda_min_M"],
           "margin lmin(H_eff)/|lmin(M)|": r["margin"], "sign": _sign(r), "tol": r["eig_tol"]}
          for r in rows if r["state"] == "equilibrium"]
    coll = [{"objective": r["objective"], "activation": r["activation"], "|rho| given head": r["st_rho_start"],
             "|grad_theta L| given head": r["st_grad_norm_start"], "|rho| stationary head": r["st_rho"],
             "|grad_theta L| there": r["st_grad_norm"], "rho_ref (head perturbed)": r["st_rho_ref"],
             "bound": r["st_rho_bound"], "|dh/dtheta|": r["st_jac_norm"], "head stationary": r["st_stationary"],
             "rho = 0": r["st_within_bound"],
             "BFGS / Newton steps": f"{r['st_iterations']} / {r['st_newton_steps']}",
             "rows identical, dh/dtheta full rank": r["forces_zero_residual"]}
            for r in rows if r["state"] == "collapsed"]
    other = [{"objective": r["objective"], "activation": r["activation"], "BN": r["batch_norm"],
              "stationary": r["stationary"], "|rho|": r["rho_norm"], "H_L PSD": r["H_L_psd"],
              "|grad_z|/(|J||rho|)": r["grad_z_ratio"], "lambda_min(H_eff)": r["lambda_min_H_eff"]}
             for r in rows if r["state"] == "pseudo_collapsed"]
    objs = list(dict.fromkeys(r["objective"] for r in rows if r["state"] == "equilibrium"))
    per_obj = "; ".join(f"{o}: {h.get(f'smooth_unstable_{o}', 0)} unstable, {h.get(f'smooth_stable_{o}', 0)} "
                        f"strictly stable, {h.get(f'smooth_degenerate_{o}', 0)} degenerate (largest margin "
                        f"{h.get(f'max_margin_smooth_{o}', float('nan')):.3g})" for o in objs)
    text = [
        f"{h['equilibria_certified']} of {h['equilibria_constructed']} constructed collapsed equilibria are certified "
        f"(stationary in z and head, rho != 0, H_L PSD). Smooth heads, per objective: {per_obj}. Smallest "
        f"lambda_min(H_eff) of a linear/ReLU head: {h['min_lambda_min_H_eff_linear_relu']:.3g}. Collapsed states "
        f"(both views at one point): {h['collapsed_states_head_stationary']} of {h['collapsed_states']} reached "
        f"head stationarity, {h['collapsed_states_within_rho_bound']} of those with rho = 0 within the rule's "
        f"bound; in {h['collapsed_states_where_stationarity_forces_rho_0']} the residual rows are identical and "
        "dh/dtheta has full row rank at the given head." + (
            f" SimSiam's H_L is indefinite in {h['simsiam_cases_H_L_indefinite']} of {h['simsiam_cases']} cases."
            if h["simsiam_cases"] else ""), "", *claims.reason_lines(results["claims"]), "",
        "Collapsed equilibria (residual scale: the one the construction used; DINO's is below 2, where the "
        "teacher probabilities stay positive):", "", common.markdown_table(eq), "",
        "Collapsed states, the head driven to stationarity (stationarity-forces-rho-zero):", "",
        common.markdown_table(coll), "",
        "Pseudo-collapsed states (not equilibria; reported, not counted):", "", common.markdown_table(other), "",
        f"![lambda_min by case]({rel_dir}/lambda_min_by_case.png)"]
    return "\n".join(text)

