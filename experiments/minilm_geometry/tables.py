"""Experiment 8, reporting: the figure and the markdown section, from stored results only."""

from __future__ import annotations

import numpy as np

from experiments import common

__all__ = ["figures", "report"]

_CONTROLS = ("random", "between", "data")


def figures(results, out_dir) -> None:
    """Pullback-metric spectra, training losses, and per-sentence log ratios (training views and negative, vs
    random) per setting; ``init`` (untrained head) is the control, drawn grey."""
    from experiments import plotting as pl

    m = results["measurements"]
    names = list(m["settings"])
    fig, ax = pl.figure(
        height=5.6, mosaic=[["spec"] * len(names) + ["loss"] * len(names), [n for n in names for _ in "ab"]]
    )
    for i, (name, s) in enumerate(m["settings"].items()):
        g = np.asarray(s["G_spectrum_mean"], float)
        floor = 1e-12 * g.max()
        ax["spec"].semilogy(
            np.where(g > floor, g, np.nan),
            color=pl.APART_COLOUR if name == "init" else pl.COLOURS[i],
            label=f"{name} ({int(np.sum(g <= floor))} eigenvalues < 1e-12 max not drawn)",
        )
        gains = s["gains"]
        for which, colour, hs in (("views", pl.COLOURS[0], "stepfilled"), ("negative", "k", "step")):
            lr = np.log(np.asarray(gains[which]) / np.asarray(gains["random"]))
            ax[name].hist(
                lr[np.isfinite(lr)],
                bins=20,
                histtype=hs,
                alpha=0.6 if hs == "stepfilled" else 1.0,
                color=pl.APART_COLOUR if name == "init" else colour,
                lw=1.2,
                label=f"{which} vs random" if name == names[-1] else None,
            )
        pl.threshold(ax[name], 0.0, "0: D = 1", axis="x", ls="-")
        ax[name].set_title(f"{name}{' (control)' if name == 'init' else ''}: D = {s['views']['random']['D']:.3g}")
        ax[name].set_xlabel("log(g / random gain)")
    ax[names[0]].set_ylabel("sentences")
    ax["spec"].set(title="pullback metric J^T J: mean eigenvalues", xlabel="eigenvalue index", ylabel="eigenvalue")
    for i, (name, c) in enumerate(m["loss_curves"].items()):
        if len(c):
            ax["loss"].semilogy(
                np.maximum(np.asarray(c), 1e-12),
                color=pl.COLOURS[names.index(name) if name in names else i],
                marker="o" if len(c) < 20 else None,
                label=f"{name} training loss",
            )
    ax["loss"].set(title="two-view InfoNCE training loss", xlabel="step", ylabel="loss")
    handles = [h for k in ("spec", "loss", names[-1]) for h in ax[k].get_legend_handles_labels()[0]]
    pl.legend_outside(fig, loc="below", ncol=2, handles=handles)
    common.save_figure(fig, out_dir, "minilm_geometry")


def _ci(r) -> str:
    return f"{r['D'] if 'D' in r else r['S']:.3g} [{r['lo']:.3g}, {r['hi']:.3g}]"


def report(results, rel_dir) -> str:
    m, h = results["measurements"], results["headline"]
    easy_steps = results["config"]["analysis"]["easy_steps"]
    rows, geo = [], []
    for name, s in m["settings"].items():
        for which in ("views", "negative"):
            rows.append(
                {
                    "head": name,
                    "directions": "training views"
                    if which == "views"
                    else f"negative control ({s['negative_sentences_used']} sentences)",
                    **{f"D vs {c}": _ci(s[which][c]) for c in _CONTROLS},
                    **({"orbit compression S": _ci(s["orbit_compression"])} if which == "views" else {}),
                }
            )
        he = m["effective_hessian"][name]
        geo.append(
            {
                "head": name,
                "erank rankme u": s["erank_rankme_u"],
                "erank squared u": s["erank_squared_u"],
                "G participation ratio": s["G_participation_ratio"],
                "lambda_min H_eff": he["H_eff_min"],
                "lambda_max H_eff": he["H_eff_max"],
                "H_L PSD": he["H_L_psd"],
                "|rho|": he["residual_norm"],
                "H_eff solver": he.get("method", "dense"),
            }
        )
    label = (
        "**What this run can and cannot show.** The frozen head's loss is "
        f"{h['frozen_loss_at_easy_step']:.2g} after {easy_steps} steps"
        + (
            ": the two-view task is solved almost at once (the sentences are distinct, and dropout plus light "
            "token deletion leaves each view close to its sentence), so the head is barely pushed towards "
            "invariance. The run measures the geometry of such a head; it cannot show degeneracy *caused* by "
            "invariance pressure, and a D near 1 says nothing against the claim."
            if h["task_solved_early"]
            else ": the task is not solved at once, so training exerts invariance pressure along the views."
        )
    )
    neg = ", ".join(f"{k} {v:g}" for k, v in m["negative"].items() if v != (1.0 if k == "crop" else 0.0))
    reasons = [f"- `{r['id']}`: {r['verdict']} ({r['scale']}) -- {r['reason']}" for r in results["claims"]]
    return "\n".join(
        [
            "Reading:",
            *reasons,
            "",
            f"Backbone: {m['model']['name']}; head: {m['model']['head']}. Corpus: Python documentation "
            f"(pydoc_data.topics), {m['corpus']['n_sentences']} sentences (fingerprint {m['corpus']['fingerprint']}). "
            f"Embedding z: effective rank {h['erank_rankme_z']:.4g} (RankMe).",
            "",
            label,
            "",
            "D_c = exp(mean_i log(g_i / g_c,i)) over evaluation sentences with bootstrap 95% intervals, for the "
            "training views (dropout + token augmentations; g_i the RMS gain over the sentence's view directions) and "
            f"for the negative control (token augmentation {neg}, eval mode), against the registry's controls: exact "
            "isotropic tangent directions of the unit sphere (random), directions to other sentences (between) and "
            "Gaussian directions with the embeddings' covariance (data). 'init' is the untrained head (same z). The "
            "orbit compression S = mean spread(z) / mean spread(h(z)) over sentences, each sentence's orbit being its "
            "training views (L2-normalised, mean squared distance to the centroid, as the paper's orbits). The claim "
            "is decided on the frozen head; the fine-tuned one (its own backbone) is reported.",
            "",
            common.markdown_table(rows),
            "",
            common.markdown_table(geo),
            "",
            f"Frozen-head loss: {h['frozen_loss_first']:.4g} (first 10% of steps) -> {h['frozen_loss_last']:.4g} (last 10%). "
            "H_eff is taken w.r.t. the view-1 batch with view 2 fixed; negative eigenvalues come from the interaction "
            "term M and the indefinite H_L of InfoNCE on normalised outputs (Thm 4.1's premise in the H_L PSD column).",
            "",
            f"![MiniLM geometry]({rel_dir}/minilm_geometry.png)",
        ]
    )
