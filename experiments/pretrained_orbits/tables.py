"""Experiment 9, reporting: the figure and the markdown section, from stored results only."""

from __future__ import annotations

from experiments import common

from .pipeline import AUGMENTATIONS, STATUS_ABSENT, STATUS_CONTROL, STATUS_PRESENT

__all__ = ["figures", "report"]


def figures(results, out_dir) -> None:
    """Degeneracy ratio D (95% CI, vs random tangents) and relative orbit spread per augmentation: released
    checkpoints filled (they set the scale), pipeline controls on random initialisations hollow, drawn apart."""
    from experiments import plotting as pl

    rows, aug_rows = results["measurements"]["checkpoints"], results["measurements"]["augmentations"]
    measured = [r for r in rows if r["status"] != STATUS_ABSENT]
    fig, axes = pl.figure(1, 2, height=3.3)
    names = list(dict.fromkeys(r["checkpoint"] for r in measured))
    counted = [a for a in aug_rows if a["status"] != STATUS_CONTROL and a["status"] != STATUS_ABSENT]
    for ax, key in ((axes[0, 0], "D"), (axes[0, 1], "spread_ratio_rel")):
        basis = counted or [a for a in aug_rows if a["status"] == STATUS_CONTROL]
        pl.scale_from(ax, [a[key] for a in basis] + [1.0], decades=1.0)
        for r in measured:
            rs = [a for a in aug_rows if a["checkpoint"] == r["checkpoint"] and a["status"] == r["status"]]
            j, control = names.index(r["checkpoint"]), r["status"] == STATUS_CONTROL
            xs = [AUGMENTATIONS.index(a["augmentation"]) + 0.12 * (j - (len(names) - 1) / 2) for a in rs]
            ci = (
                [
                    [a[key] - a["ratios"]["trained"]["random"]["lo"] for a in rs],
                    [a["ratios"]["trained"]["random"]["hi"] - a[key] for a in rs],
                ]
                if key == "D"
                else None
            )
            st = pl.series_style(j)
            ax.errorbar(
                xs,
                [a[key] for a in rs],
                yerr=ci,
                fmt=st["marker"],
                color=st["color"],
                ms=5,
                capsize=1.5,
                mfc="none" if control else st["color"],
                label=r["checkpoint"] + (" (control: random init)" if control else " (released)"),
            )
        pl.threshold(ax, 1.0, "1: no compression", at=0.01)
        ax.set_xticks(range(len(AUGMENTATIONS)), AUGMENTATIONS)
        ax.set_xlabel("augmentation")
    axes[0, 0].set_ylabel("degeneracy ratio D (vs random)")
    axes[0, 1].set_ylabel("orbit spread ratio, head / backbone")
    if not measured:
        axes[0, 0].text(0.5, 0.5, "no checkpoint present, no control run", ha="center", transform=axes[0, 0].transAxes)
    else:
        pl.legend_outside(axes[0, 0], loc="below", ncol=2)
    fig.suptitle(
        "filled: released checkpoints" + ("" if counted else " (none present)") + "; hollow: controls, random init"
    )
    common.save_figure(fig, out_dir, "degeneracy_and_spread")


def _fmt_spec(r):
    return ", ".join(f"{v:.3g}" for v in r["G_top_eigs_mean"])


def _ci(r) -> str:
    if not r:
        return "-"
    return f"{r['D'] if 'D' in r else r['S']:.3g} [{r['lo']:.3g}, {r['hi']:.3g}]"


def _summary(rs) -> str:
    return common.markdown_table(
        [
            {
                "checkpoint": r["checkpoint"],
                "status": r["status"],
                "data": r["data"].split(" (")[0],
                "images": f"{r['classes']}x{r['images_per_class']} @ {r['image_size']} px, {r['orbit_steps']} steps",
                "d -> k": f"{r['d']} -> {r['k']}",
                "erank z (rankme/sq)": f"{r['erank_rankme_z']:.3g} / {r['erank_squared_z']:.3g}",
                "erank u (rankme/sq)": f"{r['erank_rankme_u']:.3g} / {r['erank_squared_u']:.3g}",
                "top eig(J^T J)": _fmt_spec(r),
                "Lanczos conv. (top / both ends)": f"{r.get('lanczos_top_converged', '?')} / {r['lanczos_converged']}",
                "orbit compression S (training augs)": _ci(r["orbit_compression"].get("trained")),
                **(
                    {"S, untrained head": _ci(r["orbit_compression"].get("untrained"))}
                    if r["status"] == STATUS_PRESENT
                    else {}
                ),
            }
            for r in rs
        ]
    )


def _per_aug(aug_rows, status) -> str:
    rows = []
    for a in aug_rows:
        if a["status"] != status:
            continue
        role = "training" if a["in_training_augmentations"] else "negative" if a["negative_control"] else "reported"
        for h, ratios in a["ratios"].items():
            rows.append(
                {
                    "checkpoint": a["checkpoint"],
                    "augmentation": a["augmentation"],
                    "role": role,
                    "head": h,
                    **{f"D vs {c}": _ci((ratios or {}).get(c)) for c in ("random", "between", "data")},
                    "rel. spread z": a["rel_spread_z"],
                    "rel. spread u": a["rel_spread_u"],
                    "zero tangents": a["zero_tangent_points"],
                }
            )
    return common.markdown_table(rows)


def report(results, rel_dir) -> str:
    m = results["measurements"]
    rows = m["checkpoints"]
    present = [r for r in rows if r["status"] == STATUS_PRESENT]
    absent = [r for r in rows if r["status"] == STATUS_ABSENT]
    controls = [r for r in rows if r["status"] == STATUS_CONTROL]
    text = [
        "Reading:",
        *[
            f"- `{r['id']}`{' [' + r['subject'] + ']' if r.get('subject') else ''}: {r['verdict']} "
            f"({r['scale']}) -- {r['reason']}"
            for r in results["claims"]
        ],
        "",
        f"Checkpoint directory searched: `{m.get('checkpoint_dir')}`.",
        "",
    ]
    if absent:
        text += [
            "**Absent checkpoints** (place the official file in the directory, or in `<dir>/<name>/`, or our "
            "converted `<dir>/<name>.safetensors`):",
            "",
            common.markdown_table(
                [
                    {"checkpoint": r["checkpoint"], "expected file": f"`{r['expected_file']}`", "source": r["url"]}
                    for r in absent
                ]
            ),
            "",
        ]
    if present:
        text += [
            "**Released checkpoints** (the evidence; 'untrained' is a random initialisation of the release's own "
            "head on the checkpoint's z):",
            "",
            _summary(present),
            "",
            _per_aug(m["augmentations"], STATUS_PRESENT),
            "",
        ]
    else:
        text += ["No released checkpoint was present, so there is no evidence for or against the claim here.", ""]
    if controls:
        text += [
            "**Pipeline controls: randomly initialised architecture + head, NOT checkpoint results** "
            "(they show the pipeline runs end to end; an untrained head can already have D < 1, e.g. through "
            "the L2 normalisation of the DINO head, which removes the radial part of a tangent, which is why the "
            "rule compares a checkpoint with its untrained head):",
            "",
            _summary(controls),
            "",
            _per_aug(m["augmentations"], STATUS_CONTROL),
            "",
        ]
    text += [
        f"Premises: {m['premises']['note']}",
        "",
        "D_c = exp(mean_i log(g_aug,i / g_c,i)) over images i, with g the geometric mean over the image's orbit "
        "points of |J_h v| / |v| (v = dz/dtheta, the forward-mode tangent of the augmentation through the "
        "backbone) and of the control's RMS gain (random N(0, I); between: the same orbit step of another image; "
        "data: Gaussian with the covariance of the points), with bootstrap 95% intervals over images. The orbit "
        "compression S = mean spread(z) / mean spread(h(z)) over the training augmentations' orbits "
        "(L2-normalised, mean squared distance to the orbit centroid, as the paper's). The relative spread is "
        "the orbit spread divided by the RMS distance of all orbit points to their mean (the project's, "
        "scale-free). The paper gives no numbers for this experiment (its orbit compression 21.9x is for a "
        "CIFAR-trained ResNet-18, a different setting).",
        "",
        f"![degeneracy and spread]({rel_dir}/degeneracy_and_spread.png)",
        "",
        "To run the paper configuration once the files are placed (official `.pth` names above, on a GPU):",
        "",
        "```",
        "SSL_GEOMETRY_CHECKPOINTS=/path/to/checkpoints \\",
        "  python -m experiments.reproduce --only pretrained_orbits --variant paper --force",
        "```",
    ]
    return "\n".join(text)
