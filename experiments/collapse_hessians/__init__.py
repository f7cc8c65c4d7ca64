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

from experiments import claims, common, rules, stored_parts
from experiments.collapse_hessians import certificates, repair_figure, width_report, widths
from experiments.collapse_hessians.cases import all_cases, margin, online_head, run_case, siamese_problem
from experiments.collapse_hessians.dry_run import dry_measure

NAME = "collapse_hessians"
TITLE = "Collapse Hessians (Thm 4.1)"
#: The registry claims (experiments/claims/) this experiment decides.
CLAIMS = (
    "thm4.1-smooth-unstable",
    "thm4.1-linear-psd",
    "stationarity-forces-rho-zero",
    certificates.REPAIRED_SIGN,
    certificates.CRITICAL_RESIDUAL,
    widths.RANK_PREDICTS_STABILITY,
)
CLAIM = (
    "Thm 4.1: at a collapsed equilibrium with non-zero residual and H_L PSD, a linear (or ReLU) head has "
    "H_eff = G >= 0 (no second-order escape), while a smooth head generically makes the state strictly "
    "unstable (lambda_min(H_eff) < 0). Decided per objective on certified equilibria, with the project's "
    "finding that head stationarity forces rho = 0 at the Siamese, contrastive and decorrelation objectives' "
    "collapsed states."
)
#: The family of each objective evaluated at collapsed states (the claim stationarity-forces-rho-zero).
FAMILIES = {
    "simsiam": "siamese",
    "byol": "siamese",
    "info_nce": "contrastive",
    "spectral_contrastive": "contrastive",
    "moco_v3": "contrastive",
    "vicreg": "decorrelation",
    "barlow_twins": "decorrelation",
}


#: Honours ``config.dry_run`` (:mod:`experiments.collapse_hessians.dry_run`).
DRY_RUN = True


def measure(config) -> dict:
    common.require_x64(NAME)
    if config.dry_run:
        return dry_measure(config)
    key = jax.random.PRNGKey(config.seed)
    # each case, certificate and sweep stored as it ends; a resumed run of the same code and config reuses them
    part = stored_parts.parts(config.get("checkpoint_dir"), NAME, config)
    cases, certs = certificates.cases_and_certificates(config, key, run_case, part)  # certificates.py
    span = claims.claim(certificates.CRITICAL_RESIDUAL).thresholds["span"]
    return {
        "cases": cases,
        "certificates": certs,  # the repaired Thm 4.1
        "critical_sweeps": certificates.sweep_states(config, key, span, cases, certs, part),
        "widths": part("widths", lambda: widths.sweep(config, key)),  # rank of J predicted before the state
    }


def measured_claims(config) -> tuple:
    """The claims a variant decides: those of the collapsed states (every claim but the width claim) where it builds
    any (``analysis.states``), and the width claim where it sweeps widths (``analysis.widths`` or
    ``analysis.widths_composed``): ``paper_widths`` the width claim alone, ``paper`` every other one."""
    sweeps = bool(config.analysis.widths or config.analysis.widths_composed)
    return tuple(
        c
        for c in CLAIMS
        if (c == widths.RANK_PREDICTS_STABILITY and sweeps)
        or (c != widths.RANK_PREDICTS_STABILITY and config.analysis.states)
    )


def _certified(rows):
    return [r for r in rows if r["state"] == "equilibrium" and r["certified"] and r["holds"] and not r["batch_norm"]]


def _label(r) -> str:
    return f"{r['objective']}/{r['activation']}/scale {r['residual_scale']:g}"


#: The measured ``dh(c)/dtheta`` singular values and shape the rule's full-row-rank premise reads.
_JAC_KEYS = ("jac_sigma_min", "jac_sigma_max", "jac_rows", "jac_cols")


def stationarity_states(rows) -> list[dict]:
    """The collapsed states as :func:`experiments.rules.decide_rho_zero` reads them."""
    return [
        {
            "label": f"{r['objective']}/{r['activation']}",
            "family": FAMILIES[r["objective"]],
            "stationary": r["st_stationary"],
            "rho": r["st_rho"],
            "rho_ref": r["st_rho_ref"],
            "residual_tol": r["st_residual_tol"],
            **{k: r[f"st_{k}"] for k in _JAC_KEYS},
        }
        for r in rows
        if r["state"] == "collapsed"
    ]


def _sign(r) -> str:
    if r["lambda_min_H_eff"] < -r["eig_tol"]:
        return "unstable"
    return "stable" if r["lambda_min_H_eff"] > r["eig_tol"] else "degenerate"


def decide(m, config) -> dict:
    """Thm 4.1's two halves on the certified equilibria (smooth: per objective), and the stationarity finding."""
    rows = m["cases"]
    eq = _certified(rows)
    state = lambda r: {
        "objective": r["objective"],
        "lambda_min": r["lambda_min_H_eff"],
        "tol": r["eig_tol"],
        "lambda_min_M": r["lambda_min_M"],
        "label": _label(r),
    }
    smooth = [state(r) for r in eq if r["head_kind"] == "smooth"]
    lin = [state(r) for r in eq if r["head_kind"] in ("linear", "piecewise")]
    items = [
        *rules.decide_smooth_unstable(smooth),
        rules.decide_linear_psd(lin),
        rules.decide_rho_zero(stationarity_states(rows)),
        *certificates.decide_items(m, claims.claim(certificates.CRITICAL_RESIDUAL).thresholds["crossing_rtol"]),
        widths.decide_item(m),
    ]
    items = [it for it in items if it["id"] in measured_claims(config)]  # paper_widths: the width claim alone
    coll = [r for r in rows if r["state"] == "collapsed"]
    headline = {
        "equilibria_constructed": sum(r["state"] == "equilibrium" for r in rows),
        "equilibria_certified": len(eq),
    }
    for obj in dict.fromkeys(r["objective"] for r in eq):
        sm = [r for r in eq if r["objective"] == obj and r["head_kind"] == "smooth"]
        for sign in ("unstable", "stable", "degenerate"):
            headline[f"smooth_{sign}_{obj}"] = sum(_sign(r) == sign for r in sm)
        headline[f"max_margin_smooth_{obj}"] = max((r["margin"] for r in sm), default=float("nan"))
    headline.update(
        {
            "min_lambda_min_H_eff_linear_relu": min(
                (r["lambda_min_H_eff"] for r in eq if r["head_kind"] != "smooth"), default=float("nan")
            ),
            "collapsed_states": len(coll),
            "collapsed_states_head_stationary": sum(r["st_stationary"] for r in coll),
            "collapsed_states_dh_dtheta_full_row_rank": sum(r["st_full_row_rank"] for r in coll),
            "collapsed_states_within_rho_bound": sum(r["st_stationary"] and r["st_within_bound"] for r in coll),
            "collapsed_states_counted_within_rho_bound": sum(
                r["st_full_row_rank"] and r["st_stationary"] and r["st_within_bound"] for r in coll
            ),
            "collapsed_states_where_stationarity_forces_rho_0": sum(bool(r.get("forces_zero_residual")) for r in coll),
            "simsiam_cases_H_L_indefinite": sum(not r["H_L_psd"] for r in rows if r["objective"] == "simsiam"),
            "simsiam_cases": sum(r["objective"] == "simsiam" for r in rows),
        }
    )
    return {"claims": items, "headline": headline}


_KINDS = ("linear", "piecewise", "smooth")
_APART = {
    "equilibrium": ("equilibrium, not certified", "o"),
    "collapsed": ("collapsed state", "s"),
    "pseudo_collapsed": ("pseudo-collapsed state", "D"),
}


def figures(results, out_dir) -> None:
    """``lambda_min_by_case.png``: lambda_min/|lambda_max| of H_eff per objective; certified equilibria (the
    Thm 4.1 cases) set a symlog scale, every other state is drawn apart, hollow grey, at the edge if beyond it."""
    from experiments import plotting as pl

    rows = results["measurements"]["cases"]
    if not rows:  # the width sweep alone (paper_widths)
        return width_report.figure(results["measurements"], out_dir)
    fig, axes = pl.figure(height=3.6)
    ax = axes[0, 0]
    objs = list(dict.fromkeys(r["objective"] for r in rows))
    ratio = lambda r: r["lambda_min_H_eff"] / max(abs(r["lambda_max_H_eff"]), 1e-300)
    cert = [r for r in rows if r["state"] == "equilibrium" and r["certified"]]
    pl.scale_from(ax, [ratio(r) for r in cert] + [0.0], linthresh=1e-3)
    for k, kind in enumerate(_KINDS):
        sel = [r for r in cert if r["head_kind"] == kind]
        xs = [objs.index(r["objective"]) + 0.22 * (k - 1) + 0.03 * (j % 3 - 1) for j, r in enumerate(sel)]
        ax.scatter(
            xs,
            [ratio(r) for r in sel],
            label=f"certified equilibrium, {kind} head ({len(sel)})",
            s=24,
            alpha=0.85,
            zorder=3,
            c=pl.series_style(k)["color"],
            marker=pl.series_style(k)["marker"],
        )
    for state, (text, mk) in _APART.items():
        sel = [r for r in rows if r["state"] == state and not (state == "equilibrium" and r["certified"])]
        xs = [objs.index(r["objective"]) + 0.3 * (list(_APART).index(state) - 1) for r in sel]
        pl.draw_apart(ax, xs, [ratio(r) for r in sel], label=f"{text} (not counted, {len(sel)})", marker=mk)
    pl.threshold(ax, 0.0, "0: unstable below, stable above")
    ax.set_xticks(range(len(objs)), [o.replace("_", " ") for o in objs], rotation=25, ha="right")
    ax.set_xlabel("objective")
    ax.set_ylabel("$\\lambda_{min}/|\\lambda_{max}|$ of $H_{eff}$\n(symlog, linear within 1e-3)")
    pl.legend_outside(ax, loc="below", ncol=2)
    ax.set_title("Thm 4.1: sign of the smallest effective-Hessian eigenvalue")
    common.save_figure(fig, out_dir, "lambda_min_by_case")
    width_report.figure(results["measurements"], out_dir)  # widths.png (width_report.py)
    rtol = claims.claim(certificates.CRITICAL_RESIDUAL).thresholds["crossing_rtol"]
    repair_figure.figure(results["measurements"], out_dir, rtol)  # repaired.png (repair_figure.py)


def _eigensolve(r) -> str:
    """``dense`` or ``Lanczos, N steps`` (the budget :func:`~experiments.collapse_hessians.cases.classify_resolved`
    ended with; a row stored before the budget was recorded says only ``lanczos``)."""
    if r["method"] != "lanczos" or "lanczos_steps" not in r:
        return r["method"]
    return f"Lanczos, {r['lanczos_steps']} steps"


def report(results, rel_dir) -> str:
    h = results["headline"]
    rows = results["measurements"]["cases"]
    if not rows:  # the width sweep alone (paper_widths)
        return "\n".join(
            [*claims.reason_lines(results["claims"]), "", *width_report.report_lines(results["measurements"], rel_dir)]
        )
    eq = [
        {
            "objective": r["objective"],
            "activation": r["activation"],
            "residual scale": r["residual_scale"],
            "certified": r["certified"],
            "|rho|": r["rho_norm"],
            "|grad_z|/(|J||rho|)": r["grad_z_ratio"],
            "|grad_head|/scale": r["grad_head_ratio"],
            "lambda_min(H_eff)": r["lambda_min_H_eff"],
            "lambda_min(G)": r["lambda_min_G"],
            "lambda_min(M)": r["lambda_min_M"],
            "margin lmin(H_eff)/|lmin(M)|": r["margin"],
            "sign": _sign(r),
            "tol": r["eig_tol"],
            "eigensolve": _eigensolve(r),
        }
        for r in rows
        if r["state"] == "equilibrium"
    ]
    coll = [
        {
            "objective": r["objective"],
            "activation": r["activation"],
            "|rho| given head": r["st_rho_start"],
            "|grad_theta L| given head": r["st_grad_norm_start"],
            "|rho| stationary head": r["st_rho"],
            "|grad_theta L| there": r["st_grad_norm"],
            "rho_ref (head perturbed)": r["st_rho_ref"],
            "bound": r["st_rho_bound"],
            "|dh/dtheta|": r["st_jac_norm"],
            "sigma_min/sigma_max of dh(c)/dtheta": (
                r["st_jac_sigma_min"] / r["st_jac_sigma_max"] if r["st_jac_sigma_max"] > 0 else 0.0
            ),
            "dh(c)/dtheta full row rank (premise)": r["st_full_row_rank"],
            "|grad|/(sqrt(n) sigma_min)": r["st_rho_implied_bound"],
            "head stationary": r["st_stationary"],
            "rho = 0": r["st_within_bound"],
            "BFGS / Newton steps": f"{r['st_iterations']} / {r['st_newton_steps']}",
            "rows identical, dh/dtheta full rank": r["forces_zero_residual"],
        }
        for r in rows
        if r["state"] == "collapsed"
    ]
    other = [
        {
            "objective": r["objective"],
            "activation": r["activation"],
            "BN": r["batch_norm"],
            "stationary": r["stationary"],
            "|rho|": r["rho_norm"],
            "H_L PSD": r["H_L_psd"],
            "|grad_z|/(|J||rho|)": r["grad_z_ratio"],
            "lambda_min(H_eff)": r["lambda_min_H_eff"],
        }
        for r in rows
        if r["state"] == "pseudo_collapsed"
    ]
    objs = list(dict.fromkeys(r["objective"] for r in rows if r["state"] == "equilibrium"))
    per_obj = "; ".join(
        f"{o}: {h.get(f'smooth_unstable_{o}', 0)} unstable, {h.get(f'smooth_stable_{o}', 0)} "
        f"strictly stable, {h.get(f'smooth_degenerate_{o}', 0)} degenerate (largest margin "
        f"{h.get(f'max_margin_smooth_{o}', float('nan')):.3g})"
        for o in objs
    )
    text = [
        f"{h['equilibria_certified']} of {h['equilibria_constructed']} constructed collapsed equilibria are certified "
        f"(stationary in z and head, rho != 0, H_L PSD). Smooth heads, per objective: {per_obj}. Smallest "
        f"lambda_min(H_eff) of a linear/ReLU head: {h['min_lambda_min_H_eff_linear_relu']:.3g}. Collapsed states "
        f"(both views at one point): {h['collapsed_states_head_stationary']} of {h['collapsed_states']} reached "
        f"head stationarity, {h['collapsed_states_within_rho_bound']} of those with rho = 0 within the rule's "
        f"bound; dh(c)/dtheta has full row rank (the rule's premise) at the stationary head in "
        f"{h['collapsed_states_dh_dtheta_full_row_rank']}, of which {h['collapsed_states_counted_within_rho_bound']} "
        f"are stationary with rho = 0; in {h['collapsed_states_where_stationarity_forces_rho_0']} the residual rows "
        "are identical and dh/dtheta has full row rank at the given head."
        + (
            f" SimSiam's H_L is indefinite in {h['simsiam_cases_H_L_indefinite']} of {h['simsiam_cases']} cases."
            if h["simsiam_cases"]
            else ""
        ),
        "",
        *claims.reason_lines(results["claims"]),
        "",
        "Collapsed equilibria (residual scale: the one the construction used; DINO's is below 2, where the "
        "teacher probabilities stay positive):",
        "",
        common.markdown_table(eq),
        "",
        "Collapsed states, the head driven to stationarity (stationarity-forces-rho-zero):",
        "",
        common.markdown_table(coll),
        "",
        "Pseudo-collapsed states (not equilibria; reported, not counted):",
        "",
        common.markdown_table(other),
        "",
        *certificates.report_lines(results["measurements"]),
        "",
        *(
            [f"![the repaired Thm 4.1: predicted against measured]({rel_dir}/repaired.png)", ""]
            if repair_figure.drawn(results["measurements"])
            else []
        ),
        *width_report.report_lines(results["measurements"], rel_dir),
        "",
        f"![lambda_min by case]({rel_dir}/lambda_min_by_case.png)",
    ]
    return "\n".join(text)
