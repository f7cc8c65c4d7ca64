"""Experiment 6, reporting: figures and the markdown section, from stored results only."""

from __future__ import annotations

import numpy as np

from experiments import common, projection

__all__ = ["figures", "report"]

_AUGS = ("rotation", "hue", "blur")
_CONTROLS = ("random", "between", "data")


def figures(results, out_dir) -> None:
    """Probes and depth ablation, curvature per angle and FD convergence, orbits (PCA) and degeneracy ratios."""
    from experiments import plotting as pl

    m = results["measurements"]
    pr, depth_rows, curv, losses = m["probes"], m["depth_ablation"], m["curvature"], m["loss_curve"]
    ratios = m["degeneracy"]["ratios"]
    conv_angle = results["config"]["analysis"]["convergence_angle_deg"]
    rep_colour = {"backbone": pl.COLOURS[0], "head": pl.COLOURS[1]}

    # Probes + depth ablation + loss.
    fig, ax = pl.figure(
        height=5.4, mosaic=[["bars", "depth"], ["loss", "loss"]], gridspec_kw={"height_ratios": [1.2, 1]}
    )
    x = np.arange(4)
    for off, w, name in ((-0.2, "backbone", "backbone z"), (0.2, "head", "head h(z)")):
        ax["bars"].bar(
            x + off,
            [pr["rotation"][w]["linear"], pr["rotation"][w]["mlp"], pr["class"][w]["linear"], pr["class"][w]["mlp"]],
            0.4,
            color=rep_colour[w],
            label=name,
        )
    ax["bars"].set_xticks(x, ["rotation\nlinear", "rotation\nMLP", "class\nlinear", "class\nMLP"])
    ax["bars"].set_xlabel("probe")
    ax["bars"].set_ylabel("test accuracy")
    dd = [r["head_depth"] for r in depth_rows]
    for w, mk in (("backbone", "o"), ("head", "s")):
        ax["depth"].plot(dd, [r[f"rot_lin_{w}"] for r in depth_rows], marker=mk, color=rep_colour[w])
    for a in (ax["bars"], ax["depth"]):
        pl.threshold(a, 0.25, "rotation chance 1/4", at=0.01)
    ax["depth"].set_xticks(dd)
    ax["depth"].set_xlabel("head depth (affine layers)")
    ax["depth"].set_ylabel("rotation probe accuracy (linear)")
    ax["loss"].plot(np.arange(1, len(losses) + 1), losses, color="k", lw=1.0)
    ax["loss"].set_xlabel("training step")
    ax["loss"].set_ylabel("NT-Xent loss (main run)")
    pl.legend_outside(ax["bars"], loc="below", ncol=2)
    common.save_figure(fig, out_dir, "probes")

    # Curvature per angle + convergence.
    fig, axes = pl.figure(1, 2, height=3.4)
    a1, a2 = axes[0]
    ang = curv["angles_deg"]
    for w, c in rep_colour.items():
        a1.plot(ang, curv["per_angle"][w]["exact"], "o-", color=c, label=f"{w}, exact")
        a1.plot(ang, curv["per_angle"][w]["fd"], "x--", color=c, label=f"{w}, finite difference (5 deg)")
        rows = [r for r in curv["convergence"] if r["rep"] == w]
        a2.loglog(
            [r["h_deg"] for r in rows],
            [max(r["median_rel_err"], 1e-17) for r in rows],
            "o-",
            color=c,
            label=f"{w}, median over images",
        )
        a2.loglog(
            [r["h_deg"] for r in rows],
            [max(r["max_rel_err"], 1e-17) for r in rows],
            ":",
            color=c,
            label=f"{w}, max over images",
        )
    pl.scale_from(a1, [v for w in rep_colour for k in ("exact", "fd") for v in curv["per_angle"][w][k]])
    a1.set_xlabel("rotation angle [deg]")
    a1.set_ylabel("$|\\partial^2 r/\\partial\\theta^2|\\,/\\,s_r$ (image mean)")
    a2.set_xlabel("finite-difference spacing h [deg]")
    a2.set_ylabel("|FD - exact| / exact")
    a2.set_title(f"convergence at {conv_angle:g} deg")
    handles = a1.get_legend_handles_labels()[0] + a2.get_legend_handles_labels()[0]
    pl.legend_outside(fig, loc="below", ncol=2, handles=handles)
    common.save_figure(fig, out_dir, "curvature")

    # Orbits (PCA of scale-normalised representations) + degeneracy ratios.
    fig, ax = pl.figure(height=6.0, mosaic=[["backbone", "head"], ["D", "D"]], gridspec_kw={"height_ratios": [1, 1.1]})
    for w in ("backbone", "head"):
        p = np.asarray(m["orbits"]["pca"][w])
        C, I = p.shape[:2]
        for c in range(C):
            for i in range(I):
                ax[w].plot(p[c, i, :, 0], p[c, i, :, 1], "-", color=pl.COLOURS[c % 8], lw=0.8)
                ax[w].plot(p[c, i, 0, 0], p[c, i, 0, 1], "o", color=pl.COLOURS[c % 8], ms=3)
        ax[w].set_title(f"{w}: rotation orbits (PCA)")
        ax[w].set_xlabel("PC 1 (scale-normalised)")
        ax[w].set_ylabel("PC 2")
    xa = np.arange(len(_AUGS))
    for j, c in enumerate(_CONTROLS):
        for hs in ("trained", "untrained"):
            r = [ratios[a][hs][c] for a in _AUGS]
            xs = xa + 0.12 * (j - 1) + (0.04 if hs == "untrained" else 0.0)
            kw = (
                {"color": pl.COLOURS[j], "fmt": pl.MARKERS[j], "label": f"trained head vs {c}"}
                if hs == "trained"
                else {
                    "color": pl.APART_COLOUR,
                    "fmt": pl.MARKERS[j],
                    "mfc": "none",
                    "label": f"untrained head vs {c} (control)",
                }
            )
            ax["D"].errorbar(
                xs,
                [q["D"] for q in r],
                yerr=[[q["D"] - q["lo"] for q in r], [q["hi"] - q["D"] for q in r]],
                ms=4,
                capsize=1.5,
                **kw,
            )
    pl.threshold(ax["D"], 1.0, "D = 1: no degeneracy", at=0.01)
    ax["D"].set_xticks(xa, _AUGS)
    ax["D"].set_xlabel("augmentation")
    ax["D"].set_ylabel("degeneracy ratio D (95% CI)")
    pl.legend_outside(ax["D"], loc="right")
    common.save_figure(fig, out_dir, "orbits_degeneracy")


def _fmt(v):
    if isinstance(v, dict):
        return ", ".join(f"{k} {_fmt(x)}" for k, x in v.items())
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _probe_rows(pr):
    rows = []
    for task in ("rotation", "class"):
        for kind in ("linear", "mlp"):
            row = {
                "probe": f"{task} {kind}",
                "backbone z": pr[task]["backbone"][kind],
                "head h(z)": pr[task]["head"][kind],
                "gap (z - h)": pr[task]["backbone"][kind] - pr[task]["head"][kind],
            }
            if "head_untrained" in pr[task]:
                u = pr[task]["head_untrained"][kind]
                row.update({"untrained head h_0(z)": u, "gap (z - h_0)": pr[task]["backbone"][kind] - u})
            rows.append(row)
    return rows


def _gap_seed_lines(pr) -> list:
    """The rotation gap difference (trained minus untrained head, mean of linear and MLP) at every training seed of
    the probe gap (the main run's first), or nothing when there is one seed."""
    extra = pr.get("gap_seeds", [])
    if not extra:
        return []
    diff = lambda rot: 0.5 * sum(rot["head_untrained"][k] - rot["head"][k] for k in ("linear", "mlp"))
    per = [(pr.get("seed", "main"), diff(pr["rotation"]))] + [(e["seed"], diff(e["rotation"])) for e in extra]
    line = (
        "Rotation gap difference (z - h) - (z - h_0) per training seed (the main run first; the further seeds "
        "retrain the main run for the rotation probes only, and the interval of `guillotine-probe-gap` resamples "
        "them): " + ", ".join(f"seed {sd}: {d:.3g}" for sd, d in per) + "."
    )
    return [line, ""]


def _ci(r) -> str:
    return f"{r['D']:.3g} [{r['lo']:.3g}, {r['hi']:.3g}]"


def _sec5_text(m) -> list:
    """The Sec. 5 table: D against every control with its interval, trained and untrained head; the orbits."""
    s, ratios = m["setting"], m["degeneracy"]["ratios"]
    rows = []
    for a in ratios:
        role = (
            "training"
            if s["trained_augmentations"][a]
            else "negative control"
            if a in s["negative_augmentations"]
            else "reported only"
        )
        for hs in ("trained", "untrained"):
            rows.append(
                {"augmentation": a, "role": role, "head": hs, **{f"D vs {c}": _ci(ratios[a][hs][c]) for c in _CONTROLS}}
            )
    comp = m["orbits"]["compression"]
    orbit_rows = [
        {
            "head": {"head": "trained", "head_untrained": "untrained"}[h],
            "S = spread(z) / spread(h)": f"{r['S']:.3g} [{r['lo']:.3g}, {r['hi']:.3g}]",
        }
        for h, r in comp.items()
    ]
    if "orbits_vs_untrained" in m["sec5"]:
        r = m["sec5"]["orbits_vs_untrained"]
        orbit_rows.append(
            {
                "head": "trained over untrained (S / S_0; the rule needs its lower end > 1)",
                "S = spread(z) / spread(h)": f"{r['S']:.3g} [{r['lo']:.3g}, {r['hi']:.3g}]",
            }
        )
    return [
        "**Metric degeneracy** (Sec. 5, the registry's rule `sec5-metric-degeneracy`): per test image, the gain "
        "g = |J_h v|/|v| along the augmentation tangent v = dz/dt and the RMS gain over the control's directions "
        "(random N(0, I); between z_j - z_i; data: Gaussian with the covariance of z); D = exp(mean log(g_aug / "
        "g_control)) with its bootstrap 95% interval over images. 'untrained' is the same head at initialisation "
        "on the same z. A training augmentation passes if every interval lies below 1 and the trained head's D "
        "is below the untrained head's for every control; the negative control must not pass.",
        "",
        common.markdown_table(rows),
        "",
        "**Orbit compression, the paper's way** (12 rotations 0..330 deg, L2-normalised, head on z/|z|, squared "
        "spread per orbit; bootstrap 95% interval over orbits; the paper: 21.9):",
        "",
        common.markdown_table(orbit_rows),
    ]


def _curvature_text(m, paper) -> list:
    cs, cb = m["curvature"]["summary"], m["curvature"]["by_rep"]
    rows = [
        {
            "rep": w,
            "paper's kappa (normalised, undivided FD)": cs[f"paper_kappa_{w}"],
            "exact mean |r''|": cb[w]["exact_mean"],
            "FD / h^2 mean": cb[w]["fd_mean"],
            "FD / exact": cb[w]["fd_over_exact"],
            "spread s_r": cb[w]["scale"],
        }
        for w in ("backbone", "head")
    ]
    return [
        f"**Trajectory curvature** along rotation (10 angles in [0, 45 deg], spacing {cs['fd_spacing_deg']:.3g} deg). "
        f"Head/backbone ratio, the paper's way (L2-normalised, undivided second differences, ratio of means): "
        f"**{cs['ratio_paper']:.4g}** (paper: {paper.get('curvature_ratio_paper', 'n/a')}). The project's: exact "
        f"|r''| {cs['ratio_exact_raw']:.4g} raw, {cs['ratio_exact_normalised']:.4g} scale-free; FD/h^2 "
        f"{cs['ratio_fd_raw']:.4g} raw.",
        "",
        common.markdown_table(rows),
        "",
        "FD convergence at one angle (|FD - exact|/exact over images as the spacing shrinks; the trajectory is "
        "piecewise smooth, so FD at the paper's spacing is a kink-averaged curvature):",
        "",
        common.markdown_table(m["curvature"]["convergence"]),
    ]


def _orbit_text(m, paper) -> list:
    o = m["orbits"]
    rows = [
        {
            "rep": w,
            "paper: spread (sq.)": o["paper"][w]["spread"],
            "paper: intra": o["paper"][w]["intra"],
            "paper: inter": o["paper"][w]["inter"],
            "paper: class/orbit": o["paper"][w]["ratio"],
        }
        for w in o["paper"]
    ]
    s, comp = o["summary"], o["compression"]["head"]
    return [
        f"**Orbit geometry.** The paper's way (12 rotations 0..330 deg, L2-normalised, head applied to z/|z|, "
        f"spread = mean squared distance to the orbit centroid): spread shrink backbone/head "
        f"**{comp['S']:.4g}** (paper: {paper.get('spread_shrink_paper', 'n/a')}), class/orbit ratio "
        f"{s['class_orbit_ratio_backbone_paper']:.3g} -> {s['class_orbit_ratio_head_paper']:.3g}. The project's "
        f"(`metrics.orbit_statistics`, distances, rotations in [0, 45 deg]): shrink {s['spread_shrink_raw']:.4g} raw, "
        f"{s['spread_shrink_normalised']:.4g} scale-free.",
        "",
        common.markdown_table(rows),
        "",
        common.markdown_table(o["rows"]),
    ]


def _dry_line(dry: dict) -> str:
    """The dry run's line: training and each analysis part projected apart, with exponents and measured points."""
    part = lambda name, r, what: (
        f"{name} {r['projected_s'] / 3600:.3g} h (p = {r['exponent']:.3g}; {what} "
        f"{projection.points_text(r)}; full {r['full_size']:.0f})"
    )
    tr, parts = dry["training"], dry["analysis"]["parts"]
    return (
        "**DRY RUN** (a few steps per training phase, a few images per analysis step): the numbers below test the "
        f"code path, not the claim. Projected full run {dry['projected_wall_time_s'] / 3600:.3g} h on "
        f"{dry['device']}: {part('training', tr, 'mean update at batch')}, "
        f"{part('probes', parts['probes'], 'at probe images')}, "
        f"{part('fits', parts['fits'], 'at probe images')}, "
        f"{part('geometry', parts['geometry'], 'at degeneracy images')}.\n"
    )


def report(results, rel_dir) -> str:
    m, p = results["measurements"], results["paper"]
    s = m["setting"]
    pv = m["premise_values"]
    dry = m.get("dry_run")
    reasons = [f"- `{r['id']}`: {r['verdict']} ({r['scale']}) -- {r['reason']}" for r in results["claims"]]
    ablation = m["depth_ablation"][0] if m["depth_ablation"] else {}
    lines = [
        _dry_line(dry) if dry else "",
        "Reading:",
        *reasons,
        "",
        f"Setting: {s['dataset']} at {s['image_size']}px, backbone `{s['backbone']}`, head `{s['head']}`, loss "
        f"`{s['objective']}`; trained augmentations {s['trained_augmentations']}; negative control "
        f"{s['negative_augmentations']}; analysis in {s['analysis_dtype']}. Rotation probes on "
        f"{s['rotation_probe_train_images']}/{s['rotation_probe_test_images']} train/test images, one random "
        f"90-degree rotation each. Premise values: loss {pv['loss_first_10pct']:.4g} (first 10% of steps) -> "
        f"{pv['loss_last_10pct']:.4g} (last 10%); backbone rotation accuracy {pv['backbone_rotation_acc']:.3g} "
        f"(chance 0.25); RankMe of z {pv['erank_rankme_backbone']:.4g}. "
        + (
            "Paper numbers: this paper setting's."
            if s["paper_setting"]
            else "Paper numbers: CIFAR-10 ResNet-18 (a different setting, for scale only)."
        )
        + " Accuracies as fractions.",
        "",
        common.markdown_table(_probe_rows(m["probes"])),
        "",
        *_gap_seed_lines(m["probes"]),
        *_sec5_text(m),
        "",
        *_curvature_text(m, p),
        "",
        *_orbit_text(m, p),
        "",
        f"**Head-depth ablation** (batch {ablation.get('batch_size', '-')}, {ablation.get('steps', '-')} steps; "
        "paper, linear rotation probe backbone/head: depth 1 47.5/47.4, depth 2 52.8/39.7, depth 3 52.4/35.6 %):",
        "",
        common.markdown_table(m["depth_ablation"]),
        "",
        f"![probes]({rel_dir}/probes.png)",
        f"![curvature]({rel_dir}/curvature.png)",
        f"![orbits and degeneracy]({rel_dir}/orbits_degeneracy.png)",
    ]
    return "\n".join(lines)
