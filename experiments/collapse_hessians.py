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

import time

import jax
import jax.numpy as jnp
import numpy as np

from experiments import common
from ssl_geometry import geometry, heads, losses
from ssl_geometry import as_function

NAME = "collapse_hessians"
TITLE = "Collapse Hessians (Thm 4.1)"
#: The registry claims (experiments/claims.py) this experiment decides.
CLAIMS = ("thm4.1-smooth-unstable", "thm4.1-linear-psd", "stationarity-forces-rho-zero")
CLAIM = ("At a collapsed equilibrium with non-zero residual and H_L PSD, a linear (or ReLU) head has "
         "H_eff = G >= 0 (no second-order escape), while a smooth head makes the state strictly unstable "
         "(lambda_min(H_eff) < 0).")
RULE = ("Only certified collapsed equilibria count (stationary in z and in the head, rho != 0, H_L PSD; no "
        "BatchNorm). Supported if every linear/ReLU equilibrium has lambda_min(H_eff) >= -tol and at least "
        "{verdict[min_unstable_fraction]:g} of the smooth-head equilibria have lambda_min(H_eff) < -tol "
        "(tol = dim eps max|lambda|); not supported if a linear/ReLU equilibrium has a negative eigenvalue or "
        "no smooth-head equilibrium is strictly unstable; inconclusive otherwise; premise violated if no "
        "equilibrium could be certified. Non-stationary collapsed states are reported, never counted.")


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
            "lambda_max_M": res.lambda_max["interaction"], "violated": list(p.violated())}


def run_case(cfg, objective, activation, batch_norm, state, key, residual_scale=float("nan")):
    """One row: the state, its Thm 4.1 premises and conclusion."""
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
                    scales = a.residual_scales if state == "equilibrium" else [float("nan")]
                    for s in scales:
                        yield objective, act, bn, state, s


#: Honours ``config.dry_run``: the paper's widths at batch 2, one case per code path (:func:`_dry_cases`), every
#: operator through Lanczos (at the paper's sizes every one exceeds ``max_dense_dim``); the projection scales the
#: mean per-case time to all of the variant's cases at its batch ``n``.
DRY_RUN = True
#: Batch of a dry run (the widths stay the paper's).
DRY_RUN_N = 2


def _dry_config(config):
    """The dry-run config: batch :data:`DRY_RUN_N` and ``max_dense_dim = 1`` (Lanczos for every operator, the
    paper's path)."""
    cfg = config.copy_and_resolve_references()
    cfg.unlock()
    cfg.data.n = min(DRY_RUN_N, config.data.n)
    cfg.analysis.max_dense_dim = 1
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
    s0, nan = a.residual_scales[0], float("nan")
    cases = []
    if "equilibrium" in a.states:
        eq = list(a.equilibrium_objectives)
        cases += [(eq[0], acts[k], False, "equilibrium", s0) for k in ("linear", "piecewise", "smooth") if k in acts]
        cases += [(o, smooth, False, "equilibrium", s0) for o in eq[1:]]
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
    cfg = _dry_config(config) if config.dry_run else config
    key = jax.random.PRNGKey(cfg.seed)
    rows, t0 = [], time.perf_counter()
    for i, (objective, act, bn, state, s) in enumerate(_dry_cases(cfg) if config.dry_run else _cases(cfg)):
        rows.append(run_case(cfg, objective, act, bn, state, jax.random.fold_in(key, i), s))
    out = {"cases": rows}
    if config.dry_run:
        # Lanczos at a fixed step count: a case's cost grows like the batch n (HVPs linear in n, compilation
        # not at all), so n_full / n_dry over-projects where compilation dominates.
        per = (time.perf_counter() - t0) / max(len(rows), 1)
        n_full = sum(1 for _ in _cases(config))
        out["dry_run"] = common.dry_run_record(per * config.data.n / cfg.data.n, n_full, cases_run=len(rows),
                                               cases_full=n_full, batch_dry=cfg.data.n, batch_full=config.data.n)
    return out


def _certified(rows):
    return [r for r in rows if r["state"] == "equilibrium" and r["certified"] and r["holds"] and not r["batch_norm"]]


def decide(m, config) -> dict:
    rows = m["cases"]
    eq = _certified(rows)
    lin = [r for r in eq if r["head_kind"] in ("linear", "piecewise")]
    smooth = [r for r in eq if r["head_kind"] == "smooth"]
    lin_bad = [r for r in lin if r["lambda_min_H_eff"] < -r["eig_tol"]]
    unstable = [r for r in smooth if r["lambda_min_H_eff"] < -r["eig_tol"]]
    frac = len(unstable) / len(smooth) if smooth else float("nan")
    coll = [r for r in rows if r["state"] == "collapsed"]
    headline = {
        "equilibria_constructed": sum(r["state"] == "equilibrium" for r in rows), "equilibria_certified": len(eq),
        "linear_relu_equilibria_with_negative_curvature": len(lin_bad),
        "smooth_equilibria_unstable_fraction": frac,
        **{f"smooth_equilibria_unstable_fraction_{o}": (
            sum(r["lambda_min_H_eff"] < -r["eig_tol"] for r in smooth if r["objective"] == o)
            / max(1, sum(r["objective"] == o for r in smooth))) for o in config.analysis.equilibrium_objectives},
        "median_rho_norm_smooth_equilibria": float(np.median([r["rho_norm"] for r in smooth])) if smooth
        else float("nan"),
        "min_lambda_min_H_eff_linear_relu": min((r["lambda_min_H_eff"] for r in lin), default=float("nan")),
        "max_lambda_min_H_eff_smooth": max((r["lambda_min_H_eff"] for r in smooth), default=float("nan")),
        "collapsed_states_stationary": sum(r["stationary"] for r in coll), "collapsed_states": len(coll),
        "collapsed_states_where_stationarity_forces_rho_0": sum(bool(r.get("forces_zero_residual")) for r in coll),
        "collapsed_states_with_rho_0": sum(not r["rho_nonzero"] for r in coll),
        "simsiam_cases_H_L_indefinite": sum(not r["H_L_psd"] for r in rows if r["objective"] == "simsiam"),
        "simsiam_cases": sum(r["objective"] == "simsiam" for r in rows),
        "byol_cases_rho_nonzero": sum(r["rho_nonzero"] for r in rows if r["objective"] == "byol"),
        "byol_cases": sum(r["objective"] == "byol" for r in rows),
    }
    if not eq:
        verdict = "premise violated"
    elif lin_bad or (smooth and not unstable):
        verdict = "not supported"
    elif smooth and frac >= config.verdict.min_unstable_fraction:
        verdict = "supported"
    else:
        verdict = "inconclusive"
    return {"verdict": verdict, "headline": headline, "paper": {}}


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
    eq = [{"objective": r["objective"], "activation": r["activation"], "scale": r["residual_scale"],
           "certified": r["certified"],
           "|rho|": r["rho_norm"], "|grad_z|/(|J||rho|)": r["grad_z_ratio"],
           "|grad_head|/scale": r["grad_head_ratio"], "lambda_min(H_eff)": r["lambda_min_H_eff"],
           "lambda_min(G)": r["lambda_min_G"], "lambda_min(M)": r["lambda_min_M"], "conclusion": r["conclusion"]}
          for r in rows if r["state"] == "equilibrium"]
    other = [{"objective": r["objective"], "activation": r["activation"], "state": r["state"], "BN": r["batch_norm"],
              "stationary": r["stationary"], "|rho|": r["rho_norm"], "H_L PSD": r["H_L_psd"],
              "|grad_z|/(|J||rho|)": r["grad_z_ratio"], "stationarity forces rho=0": r.get("forces_zero_residual", ""),
              "lambda_min(H_eff)": r["lambda_min_H_eff"]}
             for r in rows if r["state"] != "equilibrium"]
    return "\n".join([
        f"{h['equilibria_certified']} of {h['equilibria_constructed']} constructed collapsed equilibria are certified "
        f"(stationary in z and head, rho != 0, H_L PSD). Among them: linear/ReLU heads with a negative H_eff "
        f"eigenvalue: {h['linear_relu_equilibria_with_negative_curvature']}; fraction of smooth-head equilibria "
        f"that are strictly unstable: {h['smooth_equilibria_unstable_fraction']:.3g}. "
        f"Siamese objectives with both views collapsed: {h['collapsed_states_stationary']} of "
        f"{h['collapsed_states']} states are stationary; in {h['collapsed_states_where_stationarity_forces_rho_0']} "
        "the residual rows are identical and dh/dtheta has full row rank, so a head-stationary state would have "
        f"rho = 0 (Thm 4.1's premise cannot hold at an equilibrium of those objectives); rho = 0 already at "
        f"{h['collapsed_states_with_rho_0']}. SimSiam's H_L is indefinite in {h['simsiam_cases_H_L_indefinite']} of "
        f"{h['simsiam_cases']} cases; BYOL has rho != 0 in {h['byol_cases_rho_nonzero']} of {h['byol_cases']}.",
        "", "Certified equilibria (the verdict's cases):", "", common.markdown_table(eq),
        "", "Collapsed and pseudo-collapsed states (not equilibria; reported, not counted):", "",
        common.markdown_table(other), "", f"![lambda_min by case]({rel_dir}/lambda_min_by_case.png)",
    ])
