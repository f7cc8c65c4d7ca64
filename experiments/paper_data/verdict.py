"""Experiment 0's verdict: our value of every printed number, and the registry's rule ``released-arrays`` on them."""

from __future__ import annotations

import numpy as np

from experiments import claims

from .analysis import PRINTED, READ_BACK, RECOMPUTED, RUNS, TRACKER_RUNS

__all__ = ["our_values", "matches", "decide"]


def our_values(m: dict) -> dict:
    """Our value of every :data:`PRINTED` key: recomputed (:data:`RECOMPUTED`) or read back (:data:`READ_BACK`)."""
    g = m["geometry"]
    out = {f"spearman_{r}": m["tracker"][r]["spearman_paper"] for r in TRACKER_RUNS}
    out["orbit_spread_ratio_cifar10_resnet18"] = g["cifar10_resnet18"]["orbits"]["compression_paper"]
    out["orbit_spread_ratio_cifar10_vit_tiny"] = g["cifar10_vit_tiny"]["orbits"]["compression_paper"]
    for ds, arch in RUNS:
        out[f"curvature_ratio_{ds}_{arch}"] = g[f"{ds}_{arch}"]["curvature_ratio_paper"]
        for k, v in g[f"{ds}_{arch}"]["probes"].items():
            out[f"probe_{ds}_{arch}_{k}"] = v
    for depth in (1, 2, 3):
        out[f"probe_depth_{depth}_backbone"] = g[f"depth_{depth}"]["probe_backbone"]
        out[f"probe_depth_{depth}_head"] = g[f"depth_{depth}"]["probe_head"]
    return out


def matches(value: float, key: str, tol_units: float) -> bool:
    """``|value - printed| <= tol_units * 10^-decimals`` (plus 1e-12 for float storage) for :data:`PRINTED` ``key``."""
    printed, decimals = PRINTED[key]
    return bool(abs(value - printed) <= tol_units * 10.0**-decimals + 1e-12)


def decide(m: dict, config) -> dict:
    """``released-arrays``: only the recomputed values decide; the read-back ones are counted apart."""
    ours, tol = our_values(m), claims.CLAIMS["released-arrays"].thresholds["tol_units"]
    present = [k for k in RECOMPUTED if np.isfinite(ours.get(k, float("nan")))]
    bad = [k for k in present if not matches(ours[k], k, tol)]
    read_back_ok = sum(matches(ours[k], k, tol) for k in READ_BACK)
    if not present:
        verdict, reason = "inconclusive", "no printed value could be recomputed from the released arrays"
    elif bad:
        verdict = "not supported"
        reason = "recomputed values differ from the printed ones: " + ", ".join(
            f"{k} ({ours[k]:.5g} vs {PRINTED[k][0]})" for k in bad
        )
    else:
        verdict = "supported"
        reason = (
            f"all {len(present)} recomputed values equal the printed ones to {tol:g} units of the last printed "
            f"digit; {len(READ_BACK)} more (every probe accuracy) are read back, not recomputed, and decide "
            "nothing"
        )
    deciding = {
        **{k: ours[k] for k in present},
        "tol_units": tol,
        "recomputed": len(present),
        "recomputed_matching": len(present) - len(bad),
    }
    headline = {
        "recomputed": len(present),
        "recomputed_matching": len(present) - len(bad),
        "read_back": len(READ_BACK),
        "read_back_matching": int(read_back_ok),
        **{
            k: ours[k]
            for k in (
                "spearman_normal_swish",
                "spearman_collapsed_swish",
                "spearman_collapsed_relu",
                "orbit_spread_ratio_cifar10_resnet18",
                "orbit_spread_ratio_cifar10_vit_tiny",
                "curvature_ratio_cifar10_resnet18",
                "curvature_ratio_cifar10_vit_tiny",
                "curvature_ratio_cifar100_resnet18",
            )
        },
        "collapsed_relu_dead_head": m["tracker"]["collapsed_relu"]["dead_head"],
    }
    lin = [
        r
        for r in m["collapse"]
        if r["run"].startswith("linear") and r["dataset"] == "cifar10" and r["arch"] == "resnet18"
    ]
    if lin:
        headline["linear_head_growth_fold_cifar10_resnet18"] = lin[0]["growth_fold"]
    return {
        "claims": [{"id": "released-arrays", "verdict": verdict, "deciding": deciding, "reason": reason}],
        "headline": headline,
    }
