"""Experiment 4's report (markdown) and figures, from the stored results only; every sentence from the numbers."""

from __future__ import annotations

import numpy as np

from experiments import claims, common
from experiments.collapse_escape import verdict as V

_ABBREV = {"escaped": "esc", "stayed": "stay", "grew": "grew", "diverged": "div", "censored": "cens"}


def _state(r) -> dict:
    return {"rep": r["representation"], "objective": r["objective"], "head": r["activation"], "seed": r["seed"]}


def states_table(cases) -> list[dict]:
    return [
        {
            **_state(c),
            "premises": "hold" if c.get("state_premises") else c.get("premises_violated", "uncertified"),
            "|rho|": c.get("rho_norm", float("nan")),
            "lmin H_eff": c.get("lambda_min_H_eff", float("nan")),
            "lmin G": c.get("lambda_min_G", float("nan")),
            "lmin M": c.get("lambda_min_M", float("nan")),
            "lmin H_L": c.get("lambda_min_H_L", float("nan")),
        }
        for c in cases
    ]


def frozen_table(rows) -> list[dict]:
    out = []
    for r in rows:
        if r["dynamics"] != "flow" or r["tau"] != 0:
            continue
        target = -r["lambda_min_H_eff"]
        counted = r["representation"] == "free" and r["state_premises"]
        out.append(
            {
                **_state(r),
                "kind": r["head_kind"],
                "T": r["horizon"],
                "growth G": r["growth"],
                "rate (spread window)": r["frozen_rate"],
                "linearised slope": r["frozen_predicted_rate"],
                "rate / linearised": V.frozen_ratio(r),
                "-lmin(H_eff)": target,
                "rate / -lmin": r["frozen_rate"] / target if target else float("nan"),
                "counted": counted,
                "check": V.frozen_check(r) if counted else "-",
            }
        )
    return out


def sweep_table(rows) -> list[dict]:
    groups = {}
    for r in rows:
        if r["dynamics"] == "flow":
            g = groups.setdefault(V.state_key(r), {**_state(r), "premises": r["state_premises"]})
            g[f"tau={r['tau']:g}: r_pred"] = r["predicted_rate"]
            g[f"tau={r['tau']:g}: G"] = f"{r['growth']:.3g} ({_ABBREV[r['outcome']]})"
    return list(groups.values())


def sgd_table(rows) -> list[dict]:
    flows = {(V.state_key(r), r["tau"]): r for r in rows if r["dynamics"] == "flow"}
    return [
        {
            **_state(r),
            "lr": r["lr"],
            "steps": r["n_steps"],
            "T": r["horizon"],
            "growth G": r["growth"],
            "outcome": r["outcome"],
            "t_diverged": r["t_diverged"],
            "flow at same tau": flows[(V.state_key(r), r["tau"])]["outcome"],
            "flow G": flows[(V.state_key(r), r["tau"])]["growth"],
            "flow r_pred": flows[(V.state_key(r), r["tau"])]["predicted_rate"],
            "control": "stays" if V.flow_control(flows[(V.state_key(r), r["tau"])]) else "not a control",
        }
        for r in rows
        if r["dynamics"] == "sgd"
    ]


def rates_table(rows) -> list[dict]:
    scales = V.rate_scales(rows)
    return [
        {
            "run": V.label(r),
            "predicted r": r["predicted_rate"],
            "measured rate": r["measured_rate"],
            "measured/r": V.rate_ratio(r),
            "window t": f"{r['rate_window'][0]:.4g}-{r['rate_window'][1]:.4g}",
            "linear regime ends": r["linear_end_t"],
            "points": r["rate_points"],
            "agreement": V.rate_agreement(r, scales),
        }
        for r in rows
    ]


def _mechanism(rows) -> str:
    """What the joint flows of linear/ReLU heads did against their linearised rates (numbers only)."""
    lin = [
        r
        for r in rows
        if r["dynamics"] == "flow" and r["head_kind"] in V.LINEAR_KINDS and r["tau"] > 0 and r["state_premises"]
    ]
    if not lin:
        return ""
    pos = [r for r in lin if r["predicted_rate"] > 0]
    esc = [r for r in pos if r["outcome"] == "escaped"]
    frozen = [
        r
        for r in rows
        if r["dynamics"] == "flow" and r["head_kind"] in V.LINEAR_KINDS and r["tau"] == 0 and r["state_premises"]
    ]
    return (
        f"Linear/ReLU heads: with the head frozen the linearised rate in z is -lambda_min(G); it is positive in "
        f"{sum(r['predicted_rate'] > 0 for r in frozen)} of {len(frozen)} frozen runs. With head and "
        f"representation moving together (tau > 0) the linearised field has a positive rate in {len(pos)} of "
        f"{len(lin)} runs (the joint Hessian's cross term d^2 L / dz dtheta is proportional to rho), and "
        f"{len(esc)} of those {len(pos)} escaped by their horizon."
    )


def _batchnorm(cases) -> str:
    bn = [c for c in cases if "bn_amplification" in c]
    if not bn:
        return ""
    return (
        "BatchNorm (same heads with BN on the hidden layer, train mode): the batch statistics amplify the "
        f"perturbation of z by a median factor {np.median([c['bn_amplification'] for c in bn]):.4g} over the "
        f"head without BN, and the BN head's outputs start at a normalised std of "
        f"{np.median([c['bn_std_u_init'] for c in bn]):.3g} before any dynamics (the 'escape at t = 0' "
        "artefact); escape is read on z, which BN does not touch."
    )


def report(results, rel_dir) -> str:
    h, m = results["headline"], results["measurements"]
    rows, cases = m["rows"], m["cases"]
    text = [
        f"{h['states']} states ({h['states_certified']} certified collapsed equilibria, {h['states_premises_hold']} "
        f"with H_L PSD), {h['runs']} runs from one perturbation per state. Growth G = spread(T) / spread(0), spread "
        "= RMS of z - mean z; outcomes: esc (G >= 10), stay (G <= 1.5), grew (between), div (non-finite), cens "
        "(stopped before T).",
        "",
        *claims.reason_lines(results["claims"]),
        "",
        _mechanism(rows),
        "",
        "States (each seed its own row):",
        "",
        common.markdown_table(states_table(cases)),
        "",
        "Head frozen (thm4.1-frozen-head-flow; counted: z itself, premises holding):",
        "",
        common.markdown_table(frozen_table(rows)),
        "",
        "Timescale sweep (flow-linear-relu-no-escape, flow-smooth-escape): per head rate tau the linearised rate "
        "r_pred and the growth G (outcome):",
        "",
        common.markdown_table(sweep_table(rows)),
        "",
        "SGD with momentum (finite-step-escape; t in flow time, step k at k lr / (1 - momentum)):",
        "",
        common.markdown_table(sgd_table(rows)),
        "",
        "Rates (linearised-rate-prediction): the claim's prediction r (leading eigenvalue of J, or ln of the "
        "spectral radius of the SGD map per unit flow time, among the modes the spread sees) against the measured "
        "slope of log spread over the window in which the linearised solution's leading modes dominate (the rest "
        "<= dominance x the leading part) and the run is still linear; a run with too few saves there has 'no "
        "window' and counts against:",
        "",
        common.markdown_table(rates_table(rows)),
        "",
        _batchnorm(cases),
        "",
        f"![log spread of z against t]({rel_dir}/escape_rates.png)",
        f"![predicted against measured rates]({rel_dir}/predicted_vs_measured.png)",
    ]
    return "\n".join(text)


def figures(results, out_dir) -> None:
    """``escape_rates.png`` (spread growth per state, seed 0, z free, with the escape/no-growth thresholds)
    and ``predicted_vs_measured.png`` (runs without a rate window drawn apart, in a strip above)."""
    from experiments import plotting as pl

    curves = [c for c in results["measurements"]["curves"] if c["representation"] == "free" and c["seed"] == 0]
    if not curves:
        return
    objs = list(dict.fromkeys(c["objective"] for c in curves))
    acts = list(dict.fromkeys(c["activation"] for c in curves))
    fig, axes = pl.figure(len(objs), len(acts), height=1.9 * len(objs) + 1.0, sharex=True, sharey=True)
    runs = list(dict.fromkeys((c["dynamics"], c["tau"], c["lr"]) for c in curves))
    lab = lambda d, tau, lr: f"flow, tau = {tau:g}" if d == "flow" else f"SGD, lr = {lr:g}"
    grow, still = (claims.CLAIMS[V.SMOOTH].thresholds[k] for k in ("escape_growth", "no_growth"))
    for i, obj in enumerate(objs):
        for j, act in enumerate(acts):
            ax = axes[i, j]
            for c in (c for c in curves if c["objective"] == obj and c["activation"] == act):
                t, sp = np.asarray(c["t"], float), np.asarray(c["spread_z"], float)
                k = runs.index((c["dynamics"], c["tau"], c["lr"]))
                ax.plot(
                    t / max(t[-1], 1e-300),
                    sp / sp[0],
                    color=pl.COLOURS[k % 8],
                    ls="-" if c["dynamics"] == "flow" else "--",
                    lw=1.0,
                    label=lab(*runs[k]),
                )
            ax.axhline(grow, color="k", ls=":", lw=1.0, label=f"escape: growth {grow:g}")
            ax.axhline(still, color="0.5", ls=":", lw=1.0, label=f"stayed: growth <= {still:g}")
            ax.set_yscale("log")
            ax.set_title(f"{obj}, {act} head")
            ax.set_xlabel("t / horizon" if i == len(objs) - 1 else "")
        axes[i, 0].set_ylabel("spread(t) / spread(0)")
    handles = {h.get_label(): h for ax in axes.flat for h in ax.get_legend_handles_labels()[0]}
    pl.legend_outside(fig, loc="below", ncol=3, handles=list(handles.values()))
    common.save_figure(fig, out_dir, "escape_rates")

    rows = [r for r in results["measurements"]["rows"] if np.isfinite(r["predicted_rate"])]
    t = claims.CLAIMS["linearised-rate-prediction"].thresholds
    fig, ax = pl.figure(
        height=4.4, width=6.0, mosaic=[["none"], ["main"]], sharex=True, gridspec_kw={"height_ratios": [0.14, 1]}
    )
    tested = [r for r in rows if np.isfinite(r["measured_rate"])]
    pl.scale_from(ax["main"], [r["predicted_rate"] for r in rows], axis="x", linthresh=t["rate_floor"])
    pl.scale_from(ax["main"], [r["measured_rate"] for r in tested], linthresh=t["rate_floor"])
    for prem, dyn, mk in ((True, "flow", "o"), (True, "sgd", "^")):
        sel = [r for r in tested if bool(r["state_premises"]) == prem and r["dynamics"] == dyn]
        ax["main"].scatter(
            [r["predicted_rate"] for r in sel],
            [r["measured_rate"] for r in sel],
            marker=mk,
            s=18,
            color=pl.COLOURS[0 if dyn == "flow" else 1],
            label=f"{dyn}, premises hold ({len(sel)})",
        )
    apart = [r for r in tested if not r["state_premises"]]
    pl.draw_apart(
        ax["main"],
        [r["predicted_rate"] for r in apart],
        [r["measured_rate"] for r in apart],
        label=f"premises fail (not counted, {len(apart)})",
    )
    lim = np.asarray(ax["main"].get_xlim())
    ax["main"].plot(lim, lim, "k-", lw=0.8, label="measured = predicted")
    ax["main"].fill_between(
        lim,
        lim * (1 - t["rate_rtol"]),
        lim * (1 + t["rate_rtol"]),
        color="0.85",
        zorder=0,
        label=f"agreement band +-{t['rate_rtol']:.0%}",
    )
    for sgn in (-1, 1):
        ax["main"].axvline(
            sgn * t["rate_floor"],
            color="0.5",
            ls=":",
            lw=0.8,
            label=f"|r| = rate floor {t['rate_floor']:g}" if sgn > 0 else None,
        )
    untested = [r for r in rows if not np.isfinite(r["measured_rate"])]
    for k, dyn in enumerate(("flow", "sgd")):
        x = [r["predicted_rate"] for r in untested if r["dynamics"] == dyn]
        ax["none"].scatter(
            x,
            np.full(len(x), k),
            marker="|",
            s=60,
            color=pl.APART_COLOUR,
            label=f"no rate window: {dyn} ({len(x)})" if x else None,
        )
    ax["none"].set_ylim(-0.8, 1.8)
    ax["none"].set_yticks([0, 1], ["flow", "SGD"])
    ax["none"].set_ylabel("no\nwindow", rotation=0, ha="right", va="center")
    ax["main"].set_xlabel("predicted rate r (leading eigenvalue / ln spectral radius) [1/t]")
    ax["main"].set_ylabel("measured rate (slope of log spread) [1/t]")
    handles = ax["main"].get_legend_handles_labels()[0] + ax["none"].get_legend_handles_labels()[0]
    pl.legend_outside(fig, loc="below", ncol=2, handles=handles)
    common.save_figure(fig, out_dir, "predicted_vs_measured")
