"""``repaired.png``: the repaired Thm 4.1's two registered comparisons, each with the tolerance that decides it.

* Top, ``thm4.1-repaired-sign``: per certified equilibrium, the measured ``lambda_min(H_eff) / tol`` (symlog,
  linear within 1) against the certificate's predicted sign (-1 unstable, 0 degenerate, +1 stable). The band
  ``|lambda_min| <= tol`` is the measured sign 0; a state whose measured sign differs from its prediction is a cross.
  States whose certificate makes no prediction are drawn apart, hollow.
* Bottom, ``thm4.1-critical-residual``: per swept state, the measured crossing over the predicted one ``r0 s*``,
  with the band ``1 +- crossing_rtol``; a sweep with no sign change is drawn at the edge (a triangle pointing to the
  side of its range the crossing lies on), and a state its construction cannot build is counted in the title.

Drawn from the stored measurements only (:func:`experiments.collapse_hessians.certificates.sign_states` and the
sweep rows), so the figure decides nothing.
"""

from __future__ import annotations

import math

import numpy as np

from experiments.collapse_hessians.certificates import NO_PREDICTION, measured_sign, sign_states

#: The x position of each predicted sign in the top panel.
_SIGNS = (-1, 0, 1)


def _signs_panel(ax, states, pl) -> None:
    """The top panel (see the module docstring)."""
    counted = [s for s in states if s["conclusion"] != NO_PREDICTION]
    ratio = lambda s: s["lambda_min"] / s["tol"]
    for s in states:
        if not s["tol"] > 0:
            raise ValueError(f"state {s['label']}: the sign tolerance `tol` must be > 0; got {s['tol']!r}.")
    ax.set_yscale("symlog", linthresh=1.0)  # linear within the band |lambda_min| <= tol, logarithmic beyond
    top = max([abs(ratio(s)) for s in counted if math.isfinite(ratio(s))] + [2.0])
    ax.set_ylim(-3.0 * top, 3.0 * top)
    ax.axhspan(-1.0, 1.0, color="0.88", zorder=0, label="measured sign 0: $|\\lambda_{min}| \\leq$ tol")
    for match, (text, marker, colour) in {True: ("prediction matched", "o", 0), False: ("mismatch", "X", 3)}.items():
        sel = [s for s in counted if (measured_sign(s["lambda_min"], s["tol"]) == s["predicted_sign"]) == match]
        xs = [_SIGNS.index(s["predicted_sign"]) + 0.25 * (j % 5 - 2) / 2 for j, s in enumerate(sel)]
        ax.scatter(
            xs,
            [ratio(s) for s in sel],
            marker=marker,
            s=28 if match else 48,
            zorder=3,
            c=pl.series_style(colour)["color"],
            label=f"{text} ({len(sel)})",
        )
    apart = [s for s in states if s["conclusion"] == NO_PREDICTION]
    pl.draw_apart(
        ax,
        [_SIGNS.index(s["predicted_sign"]) for s in apart],
        [ratio(s) for s in apart],
        label=f"no prediction (G not PSD; not counted, {len(apart)})",
    )
    ax.set_xticks(range(3), ["-1 (unstable)", "0 (degenerate)", "+1 (stable)"])
    ax.set_xlim(-0.6, 2.6)
    ax.set_xlabel("sign the certificate predicts")
    ax.set_ylabel("measured $\\lambda_{min}(H_{eff})$ / tol\n(symlog, linear within 1)")
    ax.set_title(f"thm4.1-repaired-sign: {len(counted)} certified equilibria with a prediction")


def _sweeps_panel(ax, sweeps, rtol: float, pl) -> None:
    """The bottom panel (see the module docstring)."""
    swept = [s for s in sweeps if s["sweep"] is not None]
    unbuilt = [
        s
        for s in sweeps
        if s["sweep"] is None and math.isfinite(s["predicted_crossing"]) and s["predicted_crossing"] > 0
    ]
    measured = [s for s in swept if s["crossing"] is not None]
    ys = [s["crossing"] / s["predicted_crossing"] for s in measured]
    lo, hi = 1 - 4 * rtol, 1 + 4 * rtol
    ax.set_ylim(min([lo, *ys]) - rtol, max([hi, *ys]) + rtol)
    ax.axhspan(1 - rtol, 1 + rtol, color="0.88", zorder=0, label=f"agreement: 1 $\\pm$ {rtol:g}")
    ax.scatter(
        [swept.index(s) for s in measured],
        ys,
        marker="o",
        s=32,
        zorder=3,
        c=pl.series_style(0)["color"],
        label=f"measured crossing ({len(measured)})",
    )
    none = [s for s in swept if s["crossing"] is None]
    # no sign change: the crossing lies above the range (stable throughout) or below it (unstable from its start)
    pl.draw_apart(
        ax,
        [swept.index(s) for s in none],
        [np.inf if s["first_sign"] > 0 else -np.inf for s in none],
        label=f"no sign change on the sweep ({len(none)})",
    )
    ax.set_xticks(range(len(swept)), [s["label"].replace("_", " ") for s in swept], rotation=15, ha="right")
    ax.set_xlim(-0.6, max(len(swept), 1) - 0.4)
    ax.set_xlabel("swept state (head and c fixed, the residual scaled)")
    ax.set_ylabel("measured / predicted crossing $r_0 s^*$")
    ax.set_title(
        f"thm4.1-critical-residual: {len(swept)} swept"
        + (f", {len(unbuilt)} not buildable (DINO r < 2)" if unbuilt else "")
    )


def drawn(measurements) -> bool:
    """Whether :func:`figure` draws for these measurements: certificates measured, with a certified equilibrium."""
    if "certificates" not in measurements or not measurements["cases"]:
        return False
    return bool(sign_states(measurements["cases"], measurements["certificates"]))


def figure(measurements, out_dir, crossing_rtol: float):
    """Write ``out_dir/repaired.png`` (the module docstring says what it shows); ``None`` and nothing written where the
    run measured no certificate (a dry run, the width sweep alone) or no certified equilibrium."""
    from experiments import plotting as pl

    if not crossing_rtol > 0:
        raise ValueError(f"`crossing_rtol` must be > 0; got {crossing_rtol!r}.")
    if not drawn(measurements):
        return None
    states = sign_states(measurements["cases"], measurements["certificates"])
    sweeps = measurements["critical_sweeps"]
    fig, axes = pl.figure(2, 1, height=6.6 if sweeps else 3.6) if sweeps else pl.figure(height=3.6)
    _signs_panel(axes[0, 0], states, pl)
    pl.legend_outside(axes[0, 0], loc="right")
    if sweeps:
        _sweeps_panel(axes[1, 0], sweeps, crossing_rtol, pl)
        pl.legend_outside(axes[1, 0], loc="right")
    return pl.save_figure(fig, out_dir, "repaired")
