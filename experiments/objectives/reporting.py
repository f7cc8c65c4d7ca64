"""Experiment 7's report (markdown) and figures, from the stored results only."""

from __future__ import annotations

import numpy as np

from experiments import claims, common, rules


def _sign(lmin, tol) -> str:
    return "unstable" if lmin < -tol else ("stable" if lmin > tol else "degenerate")


def equilibria_table(equilibria) -> list[dict]:
    out = []
    for e in equilibria:
        row = {"head": e["activation"], "seed": e["seed"], "residual scale": e["residual_scale"]}
        if not e["exists"]:
            out.append({**row, "certified": False, "note": e["reason"][:60]})
            continue
        m = e["lambda_min_M"]
        out.append(
            {
                **row,
                "certified": e["certified"] and e["holds"],
                "|rho|": e["rho_norm"],
                "lambda_min(H_eff)": e["lambda_min_H_eff"],
                "lambda_min(G)": e["lambda_min_G"],
                "lambda_min(M)": m,
                "margin lmin(H_eff)/|lmin(M)|": e["lambda_min_H_eff"] / abs(m) if m else float("nan"),
                "sign": _sign(e["lambda_min_H_eff"], e["eig_tol"]),
                "tol": e["eig_tol"],
            }
        )
    return out


def sec5_table(rows, records) -> list[dict]:
    verdict = {r["subject"]: r["verdict"] for r in records if r["id"] == rules.SEC5}
    out = []
    for r in rows:
        s = r["sec5"]
        aug, neg = s["augmentations"]["subspace"], s["negative"]["orthogonal"]
        row = {"objective": r["objective"], "seed": r["seed"], "loss fell": r["loss_fell"]}
        for c in rules.SEC5_RATIO_CONTROLS:
            t = aug["trained"][c]
            row[f"D vs {c} [95%]"] = f"{t['D']:.3g} [{t['lo']:.3g}, {t['hi']:.3g}]"
            row[f"untrained vs {c}"] = aug["untrained"][c]["D"]
        row["negative D vs random/between/data"] = " / ".join(
            f"{neg['trained'][c]['D']:.3g}" for c in rules.SEC5_RATIO_CONTROLS
        )
        o = s["orbits"]
        row["orbit compression S [95%]"] = f"{o['S']:.3g} [{o['lo']:.3g}, {o['hi']:.3g}]"
        row["verdict"] = verdict.get(f"{r['objective']} (seed {r['seed']})", "-")
        out.append(row)
    return out


def report(results, rel_dir) -> str:
    h, m = results["headline"], results["measurements"]
    rows = m["rows"]
    coll = [
        {
            "objective": r["objective"],
            "seed": r["seed"],
            "|rho| trained head": r["st_rho_start"],
            "|rho| stationary head": r["st_rho"],
            "|grad_theta L| there": r["st_grad_norm"],
            "rho_ref (head perturbed)": r["st_rho_ref"],
            "sigma_min/sigma_max of dh(c)/dtheta": (
                r["st_jac_sigma_min"] / r["st_jac_sigma_max"] if r["st_jac_sigma_max"] > 0 else 0.0
            ),
            "dh(c)/dtheta full row rank (premise)": r["st_full_row_rank"],
            "head stationary": r["st_stationary"],
            "rho = 0": r["st_within_bound"],
            "identical rows, full rank": r["collapsed_forces_rho_0"],
        }
        for r in rows
        if "st_rho" in r
    ]
    geo = []
    for r in rows:
        for state in ("trained", "pseudo_collapsed"):
            geo.append(
                {
                    "objective": r["objective"],
                    "seed": r["seed"],
                    "state": state,
                    "stationary": r[f"stationary_{state}"],
                    "H_L PSD": r[f"H_L_psd_{state}"],
                    "|rho|": r[f"rho_norm_{state}"],
                    "lambda_min(H_eff)": r[f"lambda_min_H_eff_{state}"],
                    "conclusion": r[f"conclusion_{state}"],
                }
            )
    rep = [
        "objective",
        "family",
        "seed",
        "erank_rankme_trained",
        "erank_squared_trained",
        "cond_trained",
        "norm_std_trained",
    ]
    sec5 = {k[5:]: v for k, v in h.items() if k.startswith("sec5_")}
    return "\n".join(
        [
            f"{h['objectives']} objectives, {h['seeds']} seeds. Certified DINO equilibria: "
            f"{h['dino_equilibria_certified']} ({h['dino_smooth_equilibria']} with a smooth head, "
            f"{h['dino_smooth_unstable']} of them strictly unstable). Collapsed states of the other objectives that "
            f"reached head stationarity: {h['collapsed_states_head_stationary']} of {len(coll)}; dh(c)/dtheta of full "
            f"row rank there (the rule's premise): {h['collapsed_states_dh_dtheta_full_row_rank']}. Sec. 5 verdicts per "
            f"(objective, seed): "
            + ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in sec5.items() if v)
            + f"; orbit compression S from {h['orbit_compression_min']:.3g} to {h['orbit_compression_max']:.3g}.",
            "",
            *claims.reason_lines(results["claims"]),
            "",
            "Certified collapsed equilibria of the trained DINO projectors (Thm 4.1):",
            "",
            common.markdown_table(equilibria_table(m["equilibria"])),
            "",
            "Collapsed states (both views at one point), the head driven to stationarity:",
            "",
            common.markdown_table(coll),
            "",
            "Sec. 5: degeneracy ratios D of the augmentation subspace against each control (trained head, 95% "
            "bootstrap interval; the untrained head beside it), the negative control (an orthogonal subspace the views "
            "never contain) and the paper's orbit compression:",
            "",
            common.markdown_table(sec5_table(rows, results["claims"])),
            "",
            "Trained heads' outputs (reported):",
            "",
            common.markdown_table(rows, rep),
            "",
            "Trained and pseudo-collapsed states (not equilibria; reported, not counted):",
            "",
            common.markdown_table(geo),
            "",
            f"![objectives]({rel_dir}/objectives.png)",
        ]
    )


def figures(results, out_dir) -> None:
    """``objectives.png``: loss curves (objectives; DINO head activations; seed 0 solid, 1 dashed), the
    certified DINO equilibria's lambda_min/|lambda_max|, and Sec. 5's degeneracy ratio D per run (95% CI)."""
    from experiments import plotting as pl

    m = results["measurements"]
    rows, curves = m["rows"], m["curves"]
    fig, ax = pl.figure(
        height=8.4, mosaic=[["obj", "dino"], ["eq", "eq"], ["D", "D"]], gridspec_kw={"height_ratios": [1, 0.9, 1.1]}
    )
    for key, sel in (("obj", lambda k: k.split("/")[1] == "swish"), ("dino", lambda k: k.startswith("dino/"))):
        names = list(dict.fromkeys(k.rsplit("/", 1)[0] for k in curves if sel(k)))
        for i, name in enumerate(names):
            for k in (k for k in curves if k.rsplit("/", 1)[0] == name):
                ax[key].plot(
                    *pl.loss_shape(curves[k]),
                    color=pl.COLOURS[i % 8],
                    ls="-" if k.endswith("seed0") else "--",
                    lw=1.0,
                    label=name.split("/")[key == "dino"] if k.endswith("seed0") else None,
                )
        ax[key].set_yscale("log")
        ax[key].set_xlabel("training step")
        ax[key].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7.5, handlelength=1.2)
    ax["obj"].set_ylabel("loss, (mean25 - min) / range")
    ax["obj"].set_title("objectives, swish head (seed 1 dashed)")
    ax["dino"].set_title("DINO, head activation")
    eq = [e for e in m["equilibria"] if e["exists"]]
    acts = list(dict.fromkeys(e["activation"] for e in eq))
    ratio = lambda e: e["lambda_min_H_eff"] / max(abs(e["lambda_max_H_eff"]), 1e-300)
    cert = [e for e in eq if e["certified"]]
    pl.scale_from(ax["eq"], [ratio(e) for e in cert] + [0.0], linthresh=1e-6)
    ax["eq"].scatter(
        [acts.index(e["activation"]) + 0.08 * (e["seed"] - 0.5) for e in cert],
        [ratio(e) for e in cert],
        color=pl.COLOURS[0],
        s=24,
        zorder=3,
        label=f"certified equilibrium ({len(cert)})",
    )
    un = [e for e in eq if not e["certified"]]
    pl.draw_apart(
        ax["eq"],
        [acts.index(e["activation"]) for e in un],
        [ratio(e) for e in un],
        label=f"not certified (not counted, {len(un)})",
    )
    pl.threshold(ax["eq"], 0.0, "0: unstable below", at=0.01)
    ax["eq"].set_xticks(range(len(acts)), acts)
    ax["eq"].set_xlabel("DINO head activation (fixed teacher)")
    ax["eq"].set_ylabel("$\\lambda_{min}/|\\lambda_{max}|$ of $H_{eff}$")
    ax["eq"].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    x = np.arange(len(rows))
    for j, c in enumerate(rules.SEC5_RATIO_CONTROLS):
        aug = [r["sec5"]["augmentations"]["subspace"] for r in rows]
        tr = [a["trained"][c] for a in aug]
        ax["D"].errorbar(
            x + 0.22 * (j - 1),
            [q["D"] for q in tr],
            yerr=[[q["D"] - q["lo"] for q in tr], [q["hi"] - q["D"] for q in tr]],
            fmt=pl.MARKERS[j],
            color=pl.COLOURS[j],
            ms=4,
            capsize=1.5,
            label=f"trained, vs {c}",
        )
    pl.scale_from(
        ax["D"],
        [
            q
            for r in rows
            for c in rules.SEC5_RATIO_CONTROLS
            for q in (r["sec5"]["augmentations"]["subspace"]["trained"][c]["D"],)
        ]
        + [1.0],
        decades=0.5,
    )
    pl.draw_apart(
        ax["D"],
        x,
        [r["sec5"]["augmentations"]["subspace"]["untrained"]["random"]["D"] for r in rows],
        label="untrained head, vs random (control)",
    )
    pl.threshold(ax["D"], 1.0, "D = 1: no degeneracy (pass: CI < 1)", at=0.01)
    ax["D"].set_xticks(x, [f"{r['objective']}/{r['seed']}" for r in rows], rotation=55, ha="right", fontsize=7.5)
    ax["D"].set_xlabel("objective / seed (subspace augmentation)")
    ax["D"].set_ylabel("degeneracy ratio D")
    ax["D"].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    common.save_figure(fig, out_dir, "objectives")
