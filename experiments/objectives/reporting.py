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
        out.append({**row, "certified": e["certified"] and e["holds"], "|rho|": e["rho_norm"],
                    "lambda_min(H_eff)": e["lambda_min_H_eff"], "lambda_min(G)": e["lambda_min_G"],
                    "lambda_min(M)": m, "margin lmin(H_eff)/|lmin(M)|": e["lambda_min_H_eff"] / abs(m) if m else
                    float("nan"), "sign": _sign(e["lambda_min_H_eff"], e["eig_tol"]), "tol": e["eig_tol"]})
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
        row["negative D vs random/between/data"] = " / ".join(f"{neg['trained'][c]['D']:.3g}"
                                                            for c in rules.SEC5_RATIO_CONTROLS)
        o = s["orbits"]
        row["orbit compression S [95%]"] = f"{o['S']:.3g} [{o['lo']:.3g}, {o['hi']:.3g}]"
        row["verdict"] = verdict.get(f"{r['objective']} (seed {r['seed']})", "-")
        out.append(row)
    return out


def report(results, rel_dir) -> str:
    h, m = results["headline"], results["measurements"]
    rows = m["rows"]
    coll = [{"objective": r["objective"], "seed": r["seed"], "|rho| trained head": r["st_rho_start"],
             "|rho| stationary head": r["st_rho"], "|grad_theta L| there": r["st_grad_norm"],
             "rho_ref (head perturbed)": r["st_rho_ref"],
             "sigma_min/sigma_max of dh(c)/dtheta": (r["st_jac_sigma_min"] / r["st_jac_sigma_max"]
                                                     if r["st_jac_sigma_max"] > 0 else 0.0),
             "dh(c)/dtheta full row rank (premise)": r["st_full_row_rank"], "head stationary": r["st_stationary"],
             "rho = 0": r["st_within_bound"], "identical rows, full rank": r["collapsed_forces_rho_0"]}
            for r in rows if "st_rho" in r]
    geo = []
    for r in rows:
        for state in ("trained", "pseudo_collapsed"):
            geo.append({"objective": r["objective"], "seed": r["seed"], "state": state,
                        "stationary": r[f"stationary_{state}"], "H_L PSD": r[f"H_L_psd_{state}"],
                        "|rho|": r[f"rho_norm_{state}"], "lambda_min(H_eff)": r[f"lambda_min_H_eff_{state}"],
                        "conclusion": r[f"conclusion_{state}"]})
    rep = ["objective", "family", "seed", "erank_rankme_trained", "erank_squared_trained", "cond_trained",
           "norm_std_trained"]
    sec5 = {k[5:]: v for k, v in h.items() if k.startswith("sec5_")}
    return "\n".join([
        f"{h['objectives']} objectives, {h['seeds']} seeds. Certified DINO equilibria: "
        f"{h['dino_equilibria_certified']} ({h['dino_smooth_equilibria']} with a smooth head, "
        f"{h['dino_smooth_unstable']} of them strictly unstable). Collapsed states of the other objectives that "
        f"reached head stationarity: {h['collapsed_states_head_stationary']} of {len(coll)}; dh(c)/dtheta of full "
        f"row rank there (the rule's premise): {h['collapsed_states_dh_dtheta_full_row_rank']}. Sec. 5 verdicts per "
        f"(objective, seed): " + ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in sec5.items() if v) +
        f"; orbit compression S from {h['orbit_compression_min']:.3g} to {h['orbit_compression_max']:.3g}.", "",
        *claims.reason_lines(results["claims"]), "",
        "Certified collapsed equilibria of the trained DINO projectors (Thm 4.1):", "",
        common.markdown_table(equilibria_table(m["equilibria"])), "",
        "Collapsed states (both views at one point), the head driven to stationarity:", "",
        common.markdown_table(coll), "",
        "Sec. 5: degeneracy ratios D of the augmentation subspace against each control (trained head, 95% "
        "bootstrap interval; the untrained head beside it), the negative control (an orthogonal subspace the views "
        "never contain) and the paper's orbit compression:", "",
        common.markdown_table(sec5_table(rows, results["claims"])), "",
        "Trained heads' outputs (reported):", "", common.markdown_table(rows, rep), "",
        "Trained and pseudo-collapsed states (not equilibria; reported, not counted):", "",
        common.markdown_table(geo), "",
        f"![objectives]({rel_dir}/objectives.png)",
    ])


def figures(results, out_dir) -> None:
    plt = common.pyplot()
    m = results["measurements"]
    rows, curves = m["rows"], m["curves"]
    fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(13, 3.6))
    common.plot_normalised_curves(a1, curves, fontsize=5)
    eq = [e for e in m["equilibria"] if e["exists"]]
    acts = list(dict.fromkeys(e["activation"] for e in eq))
    for e in eq:
        y = e["lambda_min_H_eff"] / max(abs(e["lambda_max_H_eff"]), 1e-300)
        a2.scatter(acts.index(e["activation"]) + 0.1 * e["seed"], y, c="tab:blue" if e["certified"] else "tab:gray",
                   s=16)
    a2.axhline(0, color="k", lw=0.5)
    a2.set_xticks(range(len(acts)), acts, fontsize=7)
    a2.set_ylabel("lambda_min / |lambda_max| of H_eff")
    a2.set_title("certified DINO equilibria (blue), per head and seed", fontsize=8)
    x = np.arange(len(rows))
    for j, c in enumerate(rules.SEC5_RATIO_CONTROLS):
        a3.bar(x + 0.25 * (j - 1), [r["sec5"]["augmentations"]["subspace"]["trained"][c]["D"] for r in rows], 0.25,
               label=f"vs {c}")
    a3.axhline(1, color="k", lw=0.5)
    a3.set_xticks(x, [f"{r['objective']}/{r['seed']}" for r in rows], rotation=60, ha="right", fontsize=6)
    a3.set_ylabel("degeneracy ratio D (trained head)")
    a3.legend(fontsize=6)
    common.save_figure(fig, out_dir, "objectives")
