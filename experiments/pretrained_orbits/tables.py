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


def _ci(r) -> str:
    if not r:
        return "-"
    return f"{r['D'] if 'D' in r else r['S']:.3g} [{r['lo']:.3g}, {r['hi']:.3g}]"


def _summary(rs) -> str:
    return common.markdown_table([{
        "checkpoint": r["checkpoint"], "status": r["status"], "data": r["data"].split(" (")[0],
        "images": f"{r['classes']}x{r['images_per_class']} @ {r['image_size']} px, {r['orbit_steps']} steps",
        "d -> k": f"{r['d']} -> {r['k']}",
        "erank z (rankme/sq)": f"{r['erank_rankme_z']:.3g} / {r['erank_squared_z']:.3g}",
        "erank u (rankme/sq)": f"{r['erank_rankme_u']:.3g} / {r['erank_squared_u']:.3g}",
        "top eig(J^T J)": _fmt_spec(r),
        "Lanczos conv. (top / both ends)": f"{r.get('lanczos_top_converged', '?')} / {r['lanczos_converged']}",
        "orbit compression S (training augs)": _ci(r["orbit_compression"].get("trained")),
        **({"S, untrained head": _ci(r["orbit_compression"].get("untrained"))} if r["status"] == STATUS_PRESENT else {}),
    } for r in rs])


def _per_aug(aug_rows, status) -> str:
    rows = []
    for a in aug_rows:
        if a["status"] != status:
            continue
        role = "training" if a["in_training_augmentations"] else "negative" if a["negative_control"] else "reported"
        for h, ratios in a["ratios"].items():
            rows.append({"checkpoint": a["checkpoint"], "augmentation": a["augmentation"], "role": role, "head": h,
                         **{f"D vs {c}": _ci((ratios or {}).get(c)) for c in ("random", "between", "data")},
                         "rel. spread z": a["rel_spread_z"], "rel. spread u": a["rel_spread_u"],
                         "zero tangents": a["zero_tangent_points"]})
    return common.markdown_table(rows)


def report(results, rel_dir) -> str:
    m = results["measurements"]
    rows = m["checkpoints"]
    present = [r for r in rows if r["status"] == STATUS_PRESENT]
    absent = [r for r in rows if r["status"] == STATUS_ABSENT]
    controls = [r for r in rows if r["status"] == STATUS_CONTROL]
    text = ["Reading:", *[f"- `{r['id']}`{' [' + r['subject'] + ']' if r.get('subject') else ''}: {r['verdict']} "
                          f"({r['scale']}) -- {r['reason']}" for r in results["claims"]],
            "", f"Checkpoint directory searched: `{m.get('checkpoint_dir')}`.", ""]
    if absent:
        text += ["**Absent checkpoints** (place the official file in the directory, or in `<dir>/<name>/`, or our "
                 "converted `<dir>/<name>.safetensors`):", "",
                 common.markdown_table([{"checkpoint": r["checkpoint"], "expected file": f"`{r['expected_file']}`",
                                         "source": r["url"]} for r in absent]), ""]
    if present:
        text += ["**Released checkpoints** (the evidence; 'untrained' is a random initialisation of the release's own "
                 "head on the checkpoint's z):", "", _summary(present), "", _per_aug(m["augmentations"], STATUS_PRESENT),
                 ""]
    else:
        text += ["No released checkpoint was present, so there is no evidence for or against the claim here.", ""]
    if controls:
        text += ["**Pipeline controls: randomly initialised architecture + head, NOT checkpoint results** "
                 "(they show the pipeline runs end to end; an untrained head can already have D < 1, e.g. through "
                 "the L2 normalisation of the DINO head, which removes the radial part of a tangent, which is why the "
                 "rule compares a checkpoint with its untrained head):", "",
                 _summary(controls), "", _per_aug(m["augmentations"], STATUS_CONTROL), ""]
    text += [f"Premises: {m['premises']['note']}", "",
             "D_c = exp(mean_i log(g_aug,i / g_c,i)) over images i, with g the geometric mean over the image's orbit "
             "points of |J_h v| / |v| (v = dz/dtheta, the forward-mode tangent of the augmentation through the "
             "backbone) and of the control's RMS gain (random N(0, I); between: the same orbit step of another image; "
             "data: Gaussian with the covariance of the points), with bootstrap 95% intervals over images. The orbit "
             "compression S = mean spread(z) / mean spread(h(z)) over the training augmentations' orbits "
             "(L2-normalised, mean squared distance to the orbit centroid, as the paper's). The relative spread is "
             "the orbit spread divided by the RMS distance of all orbit points to their mean (the project's, "
             "scale-free). The paper gives no numbers for this experiment (its orbit compression 21.9x is for a "
             "CIFAR-trained ResNet-18, a different setting).", "",
             f"![degeneracy and spread]({rel_dir}/degeneracy_and_spread.png)", "",
             "To run the paper configuration once the files are placed (official `.pth` names above, on a GPU):", "",
             "```", "SSL_GEOMETRY_CHECKPOINTS=/path/to/checkpoints \\",
             "  python -m experiments.reproduce --only pretrained_orbits --variant paper --force", "```"]
    return "\n".join(text)
