"""Experiment 4 on the authors' runs, reporting: the markdown section and the figure, from the stored results only.

Re-exported by :mod:`experiments.collapse_escape_paper` (the measuring half).
"""

from __future__ import annotations

import numpy as np

from experiments import claims, common, projection
from experiments.collapse_ablation import ABLATION, GROUPS

__all__ = ["figures", "report"]


def figures(results, out_dir) -> None:
    """``escape_std_paper.png``: per-epoch std of L2-normalised projector outputs / backbone features of every
    run, the escape threshold and the registered horizon (runs not collapsed at start drawn apart, hollow grey)."""
    from experiments import plotting as pl

    rows = results["measurements"]["rows"]
    d = next((c["deciding"] for c in results["claims"] if c["id"] == ABLATION), {})
    fig, axes = pl.figure(1, 2, height=3.6, sharex=True)
    for k, r in enumerate(rows):
        lab = f"{r['activation']}, {'BN' if r['batch_norm'] else 'no BN'}, lr {r['lr_name']}"
        apart = r["outcome"] == "not collapsed at start"
        st = {"color": pl.APART_COLOUR, "marker": "o", "mfc": "none", "ls": ":"} if apart else pl.series_style(k)
        for ax, key in zip(axes[0], ("std_head", "std_backbone")):
            v = r["epochs"].get(key, [])
            ax.plot(np.arange(1, len(v) + 1), v, ms=4, **st, label=lab + (" (not collapsed at start)" if apart else ""))
    for ax, what in zip(axes[0], ("projector outputs", "backbone features")):
        ax.set_yscale("log")
        ax.set_xlabel("epoch")
        ax.set_ylabel(f"std of L2-normalised {what}")
    if rows:
        pl.threshold(
            axes[0, 0], rows[0]["escape_threshold"], f"escape threshold {rows[0]['escape_threshold']:g}", at=0.01
        )
    if "horizon_epochs" in d:
        for ax in axes[0]:
            pl.threshold(ax, d["horizon_epochs"], f"horizon: {d['horizon_epochs']:g} epochs", axis="x", color="tab:red")
        axes[0, 0].set_xlim(0.5, max(d["horizon_epochs"], d.get("epochs_run", 0)) + 1)
    pl.legend_outside(axes[0, 0], loc="below", ncol=2)
    common.save_figure(fig, out_dir, "escape_std_paper")


def report(results, rel_dir) -> str:
    """The markdown section: the rule's groups ours against the released runs, every run with its curvature."""
    from experiments.collapse_escape_paper import PAPER_OUT_DIM  # the experiment's constant (it imports this module)

    m = results["measurements"]
    rows = []
    for r in m["rows"]:
        cs, ce = r["curvature_start"], r["curvature_end"]
        rows.append(
            {
                "activation": r["activation"],
                "BN": r["batch_norm"],
                "lr": r["lr"],
                "seed": r["seed"],
                "std first / final": f"{r['std_first']:.3g} / {r['std_final']:.3g}",
                "outcome": r["outcome"],
                "epochs": r["epochs_run"],
                "escape epoch": r["escape_epoch"],
                "diverged at step": r["diverged_at_step"],
                "std backbone final": r["std_backbone_final"],
                "timescale ratio": r["timescale_ratio_median"],
                "lmin start / end": f"{cs['lambda_min']:.3g} / {ce['lambda_min']:.3g}",
                "lmax start / end": f"{cs['lambda_max']:.3g} / {ce['lambda_max']:.3g}",
                "solver": cs["solver"],
                "block coupling": cs["block_coupling"],
                "max residual bound": max(cs["residual"], ce["residual"]),
            }
        )
    p = m["paper"]
    d = results["claims"][0]["deciding"]
    groups = [
        {
            "runs": f"{g}: escaped / counted",
            "ours": f"{d[f'{g}_escaped']} / {d[f'{g}_runs']}",
            "released": f"{p[f'{g}_escaped']} / {p[f'{g}_runs']}",
        }
        for g, _ in GROUPS
    ]
    groups += [
        {"runs": f"{what} (not counted)", "ours": d[k], "released": p[k]}
        for what, k in (("not collapsed at start", "not_collapsed_at_start_runs"), ("diverged", "diverged_runs"))
    ]
    text = [
        *claims.reason_lines(results["claims"]),
        "",
        f"Horizon: our runs have {d['epochs_run']} epochs; the registered minimum is {d['horizon_epochs']} "
        f"(recomputed from the released arrays: {p['horizon_from_released']}). The same rule on the authors' "
        f"released runs ({p['source']}; escape threshold {claims.CLAIMS[ABLATION].thresholds['escape_fraction']}"
        f" / sqrt({PAPER_OUT_DIM})): {p['rule_outcome']} ({p['rule_reason']}).",
        "",
        common.markdown_table(groups),
        "",
        common.markdown_table(rows),
        "",
        "timescale ratio: median over epochs of the projector's lr|grad|/|theta| over the backbone's (the "
        "authors' relative update sizes). lmin / lmax: extreme eigenvalues of hess_{z1} L on the first batch "
        "before the first and after the last update; solver 'coupled' (Lanczos on the whole n d operator) "
        "wherever the block coupling is above the config's tolerance (BatchNorm), 'blockwise' only where it "
        "is not.",
        "",
        f"![std of normalised outputs]({rel_dir}/escape_std_paper.png)",
    ]
    if "dry_run" in m:
        dr = m["dry_run"]
        tr, an = dr["training"], dr["analysis"]
        text.insert(
            0,
            f"**Dry run** ({dr['steps_run']} steps, mock data, head paths {', '.join(dr['paths_run'])}; the {dr['timed_path']} "
            f"path timed at batches {dr['batches']}): training {tr['projected_s'] / 3600:.3g} h (p = "
            f"{tr['exponent']:.3g}; a step at {projection.points_text(tr)}; {dr['steps_full']} steps "
            f"at batch {dr['batch_full']}), "
            f"analysis {an['projected_s'] / 3600:.3g} h (p = {an['exponent']:.3g}; a curvature at {projection.points_text(an)}; "
            f"{dr['curvatures_full']} of them); projected full variant "
            f"{dr['projected_wall_time_s'] / 3600:.3g} h on {dr['device']}.\n",
        )
    return "\n".join(text)
