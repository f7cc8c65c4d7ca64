"""Experiment 2's figure and report text, from the stored results (re-exported by :mod:`experiments.metric_adaptation`)."""

from __future__ import annotations

import numpy as np

from experiments import common
from experiments.metric_adaptation.barrier import FLAT_CONTROL

__all__ = ["figures", "report"]


def figures(results, out_dir) -> None:
    """``metric_adaptation.png``: |H_eff - I| along the helix per head (eps target drawn) and |S(g_L)| per point
    per loss (curved losses set the scale; exact zeros, the flat control, drawn apart at the axis floor)."""
    from experiments import plotting as pl

    m = results["measurements"]
    curv_rows, per_point = m["curvature"], m["scalar_curvature_per_point"]
    d = {k: v for c in results["claims"] for k, v in c["deciding"].items()}
    fig, axes = pl.figure(1, 2, height=3.6)
    a1, a2 = axes[0]
    for i, (label, c) in enumerate(m["eps_curves"].items()):
        a1.plot(
            c["t"],
            c["eps"],
            color=pl.COLOURS[i % 8],
            ls="--" if label.startswith(("affine", "identity")) else "-",
            label=label,
        )
    a1.set_yscale("log")
    if "eps_target" in d:
        pl.threshold(a1, d["eps_target"], f"eps target {d['eps_target']:g}", at=0.01)
    a1.set_xlabel("t (trajectory parameter)")
    a1.set_ylabel("$\\epsilon(t) = \\|H_{eff}(z(t)) - I\\|_2$")
    a1.set_title("Thm 3.2: isotropy along the helix")
    names = [r["loss"] for r in curv_rows]
    vals = {n: np.abs(np.asarray(per_point.get(n, []), float)) for n in names}
    pl.scale_from(a2, [v for n in names for v in vals[n] if v > 0] + [d.get("curvature_tol", 1.0)])
    for i, n in enumerate(names):
        pos = vals[n][vals[n] > 0]
        a2.scatter(np.full(pos.shape, i), pos, s=14, color=pl.COLOURS[0], label="|S| at a point" if i == 0 else None)
    zero = [(i, 0.0) for i, n in enumerate(names) for v in vals[n] if v == 0]
    pl.draw_apart(a2, [z[0] for z in zero], [z[1] for z in zero], label=f"S = 0 exactly ({len(zero)} points)")
    if "curvature_tol" in d:
        pl.threshold(a2, d["curvature_tol"], f"curvature tol {d['curvature_tol']:g}", at=0.01)
    a2.set_xticks(range(len(names)), [n.replace("_", " ") for n in names], rotation=25, ha="right")
    a2.set_xlabel("loss")
    a2.set_ylabel("|scalar curvature S(g_L)|")
    a2.set_title("Prop 3.3: curvature of the loss metric")
    handles = a1.get_legend_handles_labels()[0] + a2.get_legend_handles_labels()[0]
    pl.legend_outside(fig, loc="below", ncol=3, handles=handles)
    common.save_figure(fig, out_dir, "metric_adaptation")


def report(results, rel_dir) -> str:
    """The section's text: the Thm 3.2 fits at matched parameter counts, the Prop 3.3 curvature table, the sample
    variation of the pullback metrics, and the figure."""
    h, m = results["headline"], results["measurements"]
    fit_cols = ["activation", "depth", "width", "params", "matched", "eps_max", "eps_mean", "cv_JtJ_along_curve"]
    nonflat = [r for r in m["curvature"] if r["loss"] != FLAT_CONTROL and r["definite_points"] > 0]
    curv_cols = [
        "loss",
        "domain",
        "metric_dim",
        "definite_points",
        "points",
        "min_eig_ratio",
        "max_abs_scalar_curvature",
        "max_abs_sectional_curvature",
        "metric_cv",
        "constant_W_residual_init",
        "constant_W_residual",
        "constant_W_rms",
    ]
    return "\n".join(
        [
            f"Thm 3.2: heads fitted to H_eff(z(t)) = I along a helix at matched parameter counts ({h['reference_params']}, "
            "the depth-2 head's; a deeper head takes the width whose count is nearest it, and the affine head at that "
            "count is a product of two linear layers of the depth-2 width). The matched affine head reaches max_t "
            f"|H_eff - I|_2 = {h['eps_max_affine_matched']:.3g}, the best MLP head ({h['best_mlp']}) "
            f"{h['eps_max_best_mlp']:.3g} (gain {h['depth_gain']:.3g}x; eps on a grid 4x finer than the fitted points); "
            f"the plain affine head (d k + k parameters, not matched, reported) reaches {h['eps_max_affine_plain']:.3g}.",
            "",
            common.markdown_table(m["isotropy_fits"], fit_cols),
            "",
            f"Prop 3.3: the flat control (MSE) has |curvature| = {h['flat_control_max_abs_curvature']:.3g} and "
            f"constant-W residual {h['flat_control_constant_W_residual']:.3g}; {h['curved_losses']} of "
            f"{len(nonflat)} other losses have non-zero curvature, and the smallest constant-W residual "
            f"among them is {h['min_constant_W_residual_curved']:.3g}. Scale-invariant losses (negative cosine, BYOL, "
            "InfoNCE) are measured on the chart u0 + u0^perp (their g_L has u^T g_L u = 0); curvature only at points "
            "where the metric is positive definite (premise column `definite_points`).",
            "",
            common.markdown_table(m["curvature"], curv_cols),
            "",
            "Sample variation of the pullback metrics at initialisation (CV = relative Frobenius deviation from the "
            "mean metric; J^T H_L J with the dot-product softmax loss):",
            "",
            common.markdown_table(m["variation"]),
            "",
            f"![metric adaptation]({rel_dir}/metric_adaptation.png)",
        ]
    )
