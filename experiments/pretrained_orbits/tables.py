"""Experiment 9, reporting: the figure and the markdown section, from stored results only."""
from __future__ import annotations

import numpy as np

from experiments import common

from .pipeline import AUGMENTATIONS, STATUS_ABSENT, STATUS_CONTROL, STATUS_PRESENT

__all__ = ["figures", "report"]


def figures(results, out_dir) -> None:
    """Degeneracy ratio and relative orbit spread per augmentation (checkpoints solid, controls hatched)."""
    plt = common.pyplot()
    rows, aug_rows = results["measurements"]["checkpoints"], results["measurements"]["augmentations"]

    measured = [r for r in rows if r["status"] != STATUS_ABSENT]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    width = 0.8 / max(len(measured), 1)
    for j, r in enumerate(measured):
        rs = [a for a in aug_rows if a["checkpoint"] == r["checkpoint"] and a["status"] == r["status"]]
        xs = np.arange(len(rs)) + j * width
        label = r["checkpoint"] + (" [CONTROL: random init]" if r["status"] == STATUS_CONTROL else "")
        hatch = "//" if r["status"] == STATUS_CONTROL else None
        axes[0].bar(xs, [a["D"] for a in rs], width, label=label, hatch=hatch, alpha=0.8)
        axes[1].bar(xs, [a["spread_ratio_rel"] for a in rs], width, label=label, hatch=hatch, alpha=0.8)
    for ax, title in ((axes[0], "degeneracy ratio D = |J_h v_aug| / |J_h v_rand| (geo. mean)"),
                      (axes[1], "relative orbit spread, head / backbone")):
        ax.axhline(1.0, color="k", lw=0.7)
        ax.set_yscale("log")
        ax.set_xticks(np.arange(len(AUGMENTATIONS)) + 0.4 - width / 2, AUGMENTATIONS)
        ax.set_title(title, fontsize=9)
    if not measured:
        axes[0].text(0.5, 0.5, "no checkpoint present, no control run", ha="center", transform=axes[0].transAxes)
    else:
        axes[1].legend(fontsize=7)
    fig.suptitle("Released checkpoints (solid) and pipeline controls on random initialisations (hatched)", fontsize=9)
    common.save_figure(fig, out_dir, "degeneracy_and_spread")


def _fmt_spec(r):
    return ", ".join(f"{v:.3g}" for v in r["G_top_eigs_mean"])


def report(results, rel_dir) -> str:
    m = results["measurements"]
    rows = m["checkpoints"]
    present = [r for r in rows if r["status"] == STATUS_PRESENT]
    absent = [r for r in rows if r["status"] == STATUS_ABSENT]
    controls = [r for r in rows if r["status"] == STATUS_CONTROL]
    text = [f"Verdict reason: {results.get('verdict_reason', '')}. Checkpoint directory searched: "
            f"`{m.get('checkpoint_dir')}`.", ""]
    if absent:
        text += ["**Absent checkpoints** (place the official file in the directory, or in `<dir>/<name>/`, or our "
                 "converted `<dir>/<name>.safetensors`):", "",
                 common.markdown_table([{"checkpoint": r["checkpoint"], "expected file": f"`{r['expected_file']}`",
                                         "source": r["url"]} for r in absent]), ""]

    ctrl = {r["checkpoint"]: r for r in controls}

    def summary(rs):
        return common.markdown_table([{
            "checkpoint": r["checkpoint"], "status": r["status"], "data": r["data"].split(" (")[0],
            "images": f"{r['classes']}x{r['images_per_class']} @ {r['image_size']} px, {r['orbit_steps']} steps",
            "d -> k": f"{r['d']} -> {r['k']}",
            "erank z (rankme/sq)": f"{r['erank_rankme_z']:.3g} / {r['erank_squared_z']:.3g}",
            "erank u (rankme/sq)": f"{r['erank_rankme_u']:.3g} / {r['erank_squared_u']:.3g}",
            "top eig(J^T J)": _fmt_spec(r),
            "Lanczos conv. (top / both ends)": f"{r.get('lanczos_top_converged', '?')} / {r['lanczos_converged']}",
            "D (trained augs)": r["D_trained"], "spread ratio (trained augs)": r["spread_ratio_trained"],
            **({"D of control (same arch.)": ctrl[r["checkpoint"]]["D_trained"] if r["checkpoint"] in ctrl else "-"}
               if r["status"] == STATUS_PRESENT else {}),
            "outcome": r["outcome"] if r["status"] == STATUS_PRESENT else "control (not evidence)",
        } for r in rs])

    def per_aug(status):
        return common.markdown_table([{
            "checkpoint": a["checkpoint"], "augmentation": a["augmentation"],
            "trained aug": a["in_training_augmentations"], "D": a["D"],
            "frac g_aug < g_rand": a["frac_points_g_aug_below_g_rand"],
            "rel. spread z": a["rel_spread_z"], "rel. spread u": a["rel_spread_u"],
            "spread ratio (rel)": a["spread_ratio_rel"], "spread ratio (raw)": a["spread_ratio_raw"],
            "class/orbit z": a["class_orbit_ratio_z"], "class/orbit u": a["class_orbit_ratio_u"],
            "zero tangents": a["zero_tangent_points"],
        } for a in m["augmentations"] if a["status"] == status])

    if present:
        text += ["**Released checkpoints** (the evidence):", "", summary(present), "", per_aug(STATUS_PRESENT), ""]
    else:
        text += ["No released checkpoint was present, so there is no evidence for or against the claim here.", ""]
    if controls:
        text += ["**Pipeline controls: randomly initialised architecture + head, NOT checkpoint results** "
                 "(they show the pipeline runs end to end and give the untrained baseline; note that an untrained "
                 "head can already have D < 1, e.g. through the L2 normalisation of the DINO head, which removes "
                 "the radial part of a tangent, so a checkpoint's D is best read next to its control's):", "",
                 summary(controls), "", per_aug(STATUS_CONTROL), ""]
    text += [f"Premises: {m['premises']['note']}", "",
             "D = exp(mean_i log(|J_h v_i| / g_rand,i)) with v_i = dz/dtheta (forward-mode tangent of the augmentation "
             "through the backbone) and g_rand,i the RMS gain over isotropic random directions; the relative spread "
             "is the orbit spread divided by the RMS distance of all orbit points to their mean (scale-free, so "
             "backbone and head compare). The paper gives no numbers for this experiment (its orbit-geometry "
             "shrink factor 21.9x is for a CIFAR-trained ResNet-18, a different setting).", "",
             f"![degeneracy and spread]({rel_dir}/degeneracy_and_spread.png)", "",
             "To run the paper configuration once the files are placed (official `.pth` names above, on a GPU):", "",
             "```", "SSL_GEOMETRY_CHECKPOINTS=/path/to/checkpoints \\",
             "  python -m experiments.reproduce --only pretrained_orbits --variant paper --force", "```"]
    return "\n".join(text)
