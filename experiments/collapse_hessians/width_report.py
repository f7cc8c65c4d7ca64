"""The width sweep's table and figure (:mod:`experiments.collapse_hessians.widths` holds the sweep and its rule)."""

from __future__ import annotations

import math

import numpy as np

from experiments import common, plotting
from experiments.collapse_hessians.certificates import measured_sign
from experiments.collapse_hessians.widths import CONSTRUCTIONS, outcome


def _median(xs) -> float:
    """The median of the non-NaN values (``inf`` kept: ``s* = inf`` where ``M >= 0``); NaN if none."""
    xs = [x for x in xs if not math.isnan(x)]
    return float(np.median(xs)) if xs else float("nan")


def summary(rows) -> list[dict]:
    """Per width, activation and construction: heads, certified, the stable / unstable / degenerate fractions
    of the certified (measured sign), the median critical residual ``r s*`` and the rule's matches."""
    out = []
    keys = list(dict.fromkeys((r["width"], r["d"], r["activation"], r["construction"]) for r in rows))
    for width, d, act, con in keys:
        rs = [r for r in rows if (r["width"], r["activation"], r["construction"]) == (width, act, con)]
        cert = [r for r in rs if r["certified"]]
        signs = [measured_sign(r["lambda_min_H_eff"], r["eig_tol"]) for r in cert]
        frac = lambda s: sum(x == s for x in signs) / len(signs) if signs else float("nan")
        out.append(
            {
                "width": width,
                "d": d,
                "activation": act,
                "construction": con,
                "predicted": "/".join(sorted({r["predicted_class"] for r in rs})),
                "heads": len(rs),
                "certified": len(cert),
                "stable fraction": frac(1),
                "unstable fraction": frac(-1),
                "degenerate fraction": frac(0),
                "median r s*": _median([r["critical_residual"] for r in cert]),
                "matches": sum(outcome(r) == "match" for r in rs),
                "median seconds per head": _median([r["seconds"] for r in rs]),
            }
        )
    return out


def report_lines(measurements, rel_dir) -> list[str]:
    """The report's width table and figure link (``rel_dir``: the figures' directory; none in a dry run)."""
    if "widths" not in measurements:
        return ["Widths (thm4.1-rank-predicts-stability): not measured (dry run)."]
    w = measurements["widths"]
    if not w["rows"]:  # the paper variant: its width sweep is the sibling variant paper_widths
        return ["Widths (thm4.1-rank-predicts-stability): no width swept in this variant."]
    cost = ", ".join(f"{k}: {v:.1f} s" for k, v in w["seconds_by_width"].items())
    return [
        (
            "Widths (thm4.1-rank-predicts-stability): per width d -> h -> k, smooth activation and construction "
            "(random: the initialiser's head; rank_drop: h - d + 1 hidden units placed at the zero of sigma'; "
            "bottleneck: d -> d/2 -> k; composed: the SimSiam projector d -> h -> k then predictor k -> p -> k, "
            "width d -> h -> k -> p -> k; composed_rank_drop: p - d + 1 predictor hidden units placed at the zero "
            "of sigma'), the rank class predicted from the head and c before the equilibrium is "
            "built, the measured sign of lambda_min(H_eff) at the certified equilibria (stable/unstable/degenerate "
            "fractions) and the median critical residual r s* (residual_scale units of collapsed_equilibrium; "
            "inf: M >= 0 on the complement). A fresh head per residual scale:"
        ),
        "",
        common.markdown_table(summary(w["rows"])),
        "",
        f"Sweep wall time {w['seconds']:.1f} s ({cost}).",
        "",
        f"![stable fraction and critical residual against width]({rel_dir}/widths.png)",
    ]


#: Marker, line style, marker size and fill per construction in ``widths.png``; the constructions predicted at the
#: same stable fraction (rank drops and bottleneck at 0, the full-rank heads at 1) get nested markers (larger hollow
#: behind smaller filled) and distinct dashes, besides the vertical offsets of :data:`CONSTRUCTION_DY`.
STYLES = {
    "random": ("o", "-", 5, True),
    "rank_drop": ("v", "--", 5, True),
    "bottleneck": ("s", ":", 9, False),
    "composed": ("D", (0, (5, 1.5)), 9, False),
    "composed_rank_drop": ("^", (0, (1, 1.5, 4, 1.5)), 11, False),
}
#: The vertical offset of each construction's stable fraction in ``widths.png``'s left panel (the axis label says so).
CONSTRUCTION_DY = {c: 0.02 * (i - (len(CONSTRUCTIONS) - 1) / 2) for i, c in enumerate(CONSTRUCTIONS)}


def figure(measurements, out_dir) -> None:
    """``widths.png``: the stable fraction of the certified equilibria against ``d`` (colour: activation, marker and
    line style: construction, :data:`STYLES`) and the median critical residual ``r s*`` of the initialiser's
    full-rank heads (one hidden layer and composed), log x; the activations are offset slightly in ``x`` and the
    constructions by :data:`CONSTRUCTION_DY` in ``y``, so that equal values stay visible. Nothing in a dry run or
    where no width was swept."""
    if "widths" not in measurements or not measurements["widths"]["rows"]:
        return
    rows = summary(measurements["widths"]["rows"])
    fig, axes = plotting.figure(1, 2, height=3.0)
    ax_f, ax_s = axes[0]
    acts = list(dict.fromkeys(r["activation"] for r in rows))
    finite = []
    for ia, act in enumerate(acts):
        colour = plotting.series_style(ia)["color"]
        off = 1.0 + 0.06 * (ia - (len(acts) - 1) / 2)
        for con in CONSTRUCTIONS:
            rs = sorted((r for r in rows if (r["activation"], r["construction"]) == (act, con)), key=lambda r: r["d"])
            if not rs:
                continue
            mk, ls, size, filled = STYLES[con]
            style = dict(
                color=colour, marker=mk, ls=ls, ms=size, mfc=colour if filled else "none", zorder=3 - size / 10
            )
            ax_f.plot(
                [r["d"] * off for r in rs],
                [r["stable fraction"] + CONSTRUCTION_DY[con] for r in rs],
                label=f"{act}, {con.replace('_', ' ')}",
                **style,
            )
            pts = [
                (r["d"] * off, r["median r s*"])
                for r in rs
                if con in ("random", "composed") and math.isfinite(r["median r s*"]) and r["median r s*"] > 0
            ]
            finite += [p[1] for p in pts]
            if pts:
                ax_s.plot(*zip(*pts), **style)
    ds = sorted({r["d"] for r in rows})
    for ax in (ax_f, ax_s):
        ax.set_xscale("log")
        ax.set_xticks(ds, [str(d) for d in ds])
        ax.minorticks_off()
        ax.set_xlabel(plotting.label("input width d", "dims"))
    ax_f.set_ylim(-0.1, 1.1)
    ax_f.set_ylabel(plotting.label("stable fraction of certified\n(constructions offset by 0.02)"))
    ax_s.set_ylabel(plotting.label("median critical residual r s*"))  # r: collapsed_equilibrium's residual_scale
    ax_f.set_title("certified equilibria at residual r")
    ax_s.set_title("initialiser's (full-rank) heads")
    if finite:
        plotting.scale_from(ax_s, finite)
    plotting.legend_outside(fig, title="activation, head")
    plotting.save_figure(fig, out_dir, "widths")
