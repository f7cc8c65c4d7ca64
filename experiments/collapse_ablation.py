"""The rule of ``paper-collapse-ablation`` (experiment 4b, :mod:`experiments.collapse_escape_paper`): a run's
outcome from its per-epoch std series, the minimum horizon read from the authors' released arrays, and the
verdict on a set of runs (:func:`apply_rule`), each as the registry words it (:mod:`experiments.claims`).
"""

from __future__ import annotations

import math

import ml_collections
import numpy as np

from experiments import claims
from experiments.paper_data import analysis as released

ABLATION = "paper-collapse-ablation"


def escape_threshold(k: int) -> float:
    """The rule's threshold ``escape_fraction / sqrt(k)`` (the registry's ``escape_fraction``)."""
    return float(claims.CLAIMS[ABLATION].thresholds["escape_fraction"]) / math.sqrt(k)


def escaped(series, threshold) -> bool:
    """Whether some epoch's mean std of the L2-normalised projector outputs exceeds ``threshold`` (an escape only
    for a run collapsed at the start: :func:`run_outcome`)."""
    return bool(np.any(np.asarray(series, float) > threshold))


#: A run's outcomes under the rule (:func:`run_outcome`); only ``escaped`` and ``stayed`` are counted in its groups.
OUTCOMES = ("escaped", "stayed", "not collapsed at start", "diverged")


def run_outcome(series, threshold, diverged: bool = False) -> str:
    """The rule's outcome of one run from its per-epoch std series ``s`` (epoch 0 first) and threshold ``t``.

    ``diverged`` (the loss became non-finite) wins; else ``not collapsed at start`` if ``s[0] > t`` (the run never
    was collapsed, so it cannot escape); else ``escaped`` if ``max_e s[e] > t``, ``stayed`` otherwise. A
    non-diverged run needs at least one epoch and finite values (``ValueError`` otherwise)."""
    if diverged:
        return "diverged"
    s = np.asarray(series, float)
    if s.ndim != 1 or s.size == 0:
        raise ValueError(f"`series`: expected a non-empty 1-d per-epoch series, got shape {s.shape}.")
    if not np.all(np.isfinite(s)):
        raise ValueError(f"`series`: a non-diverged run's series must be finite, got {s.tolist()}.")
    if s[0] > threshold:
        return "not collapsed at start"
    return "escaped" if escaped(s, threshold) else "stayed"


def peak_epoch(series) -> int:
    """The epoch (0-based) of a series' largest value (the first, on ties): ``argmax_e s[e]``."""
    s = np.asarray(series, float)
    if s.ndim != 1 or s.size == 0 or not np.all(np.isfinite(s)):
        raise ValueError(f"`series`: expected a non-empty finite 1-d series, got {s.tolist()}.")
    return int(np.argmax(s))


def horizon_epochs(smooth_series) -> int:
    """The rule's minimum horizon ``H = 1 + min_r argmax_e s_r(e)`` over the released smooth runs ``r`` (each row of
    ``smooth_series`` one run's per-epoch std): the epochs the earliest-peaking run needed to reach its peak.

    The authors' escape epoch of a run is its peak (no released smooth run crosses the escape threshold, so there
    is no crossing epoch to read); a run shorter than ``H`` stops before any of the authors' runs had escaped."""
    rows = [np.asarray(r, float) for r in smooth_series]
    if not rows:
        raise ValueError("`smooth_series`: expected at least one run's series, got none.")
    return 1 + min(peak_epoch(r) for r in rows)


def released_collapse_arrays() -> dict:
    """The authors' released cifar10/resnet18 collapse arrays (``{key: array}``, e.g. ``swish_bn_False_lr_base/raw``
    = seeds x epochs of the per-epoch std of the L2-normalised projector outputs)."""
    root = released.data_root(ml_collections.ConfigDict({"data": {"root": ""}}))  # the vendored released results
    return released.npz(root / "cifar10" / "resnet18" / "collapse_results" / "arrays.npz")


#: The released runs the horizon is read from: the rule's smooth group (Swish and GELU, no BN, lr 0.05).
HORIZON_KEYS = ("swish_bn_False_lr_base/raw", "gelu_bn_False_lr_base/raw")


def released_horizon(arrays) -> int:
    """:func:`horizon_epochs` of every seed of the released smooth runs (:data:`HORIZON_KEYS`) in ``arrays``."""
    missing = [k for k in HORIZON_KEYS if k not in arrays]
    if missing:
        raise KeyError(f"`arrays`: the released smooth runs {missing} are missing; keys: {sorted(arrays)}")
    return horizon_epochs([row for k in HORIZON_KEYS for row in np.asarray(arrays[k], float)])


#: The rule's four groups of runs: (name, predicate on a run).
GROUPS = (
    ("smooth", lambda r: r["activation"] in ("swish", "gelu") and not r["batch_norm"] and r["lr_name"] == "base"),
    ("linear", lambda r: r["activation"] == "linear"),
    ("relu_small_lr_no_bn", lambda r: r["activation"] == "relu" and not r["batch_norm"] and r["lr_name"] == "small"),
    ("relu_bn_or_large_lr", lambda r: r["activation"] == "relu" and (r["batch_norm"] or r["lr_name"] == "large")),
)


def group_counts(runs) -> dict:
    """``{group: (escaped, counted runs)}`` of :data:`GROUPS`; counted: outcome ``escaped`` or ``stayed`` (a diverged
    run and one not collapsed at start are their own outcomes, :func:`run_outcome`)."""
    bad = [r.get("outcome") for r in runs if r.get("outcome") not in OUTCOMES]
    if bad:
        raise ValueError(f"`runs`: every run needs an `outcome` in {OUTCOMES}, got {bad}.")
    ok = [r for r in runs if r["outcome"] in ("escaped", "stayed")]
    return {
        name: (sum(r["outcome"] == "escaped" for r in ok if pred(r)), sum(1 for r in ok if pred(r)))
        for name, pred in GROUPS
    }


def apply_rule(runs) -> tuple[str, str, dict]:
    """``(verdict, reason, deciding)`` of the registry's ``paper-collapse-ablation`` rule on ``runs`` (each with its
    ``outcome``, :func:`run_outcome`, and ``epochs_run``), in the registry's order: an escape the claim forbids
    (linear; ReLU without BN at lr 0.005) refutes at any horizon; else fewer epochs than the registered horizon
    ``H`` in a counted run is ``inconclusive`` (reason ``horizon: ...``); else ``E_smooth = 0`` refutes; a group
    without a counted run is inconclusive; supported if ``E_smooth >= min_smooth_escape`` and a ReLU run with BN
    or at lr 0.5 escapes; inconclusive otherwise."""
    th = claims.CLAIMS[ABLATION].thresholds
    horizon = int(th["horizon_epochs"])
    g = group_counts(runs)
    counted = [r for r in runs if r["outcome"] in ("escaped", "stayed")]
    epochs = min((int(r["epochs_run"]) for r in counted), default=0)
    e_smooth = g["smooth"][0] / g["smooth"][1] if g["smooth"][1] else float("nan")
    deciding = {
        "E_smooth": e_smooth,
        **{f"{k}_escaped": v[0] for k, v in g.items()},
        **{f"{k}_runs": v[1] for k, v in g.items()},
        "diverged_runs": sum(r["outcome"] == "diverged" for r in runs),
        "not_collapsed_at_start_runs": sum(r["outcome"] == "not collapsed at start" for r in runs),
        "epochs_run": epochs,
        "horizon_epochs": horizon,
    }
    why = ", ".join(f"{k} {v[0]}/{v[1]} escaped" for k, v in g.items())
    if deciding["not_collapsed_at_start_runs"]:
        why += f"; {deciding['not_collapsed_at_start_runs']} not collapsed at start"
    if deciding["diverged_runs"]:
        why += f"; {deciding['diverged_runs']} diverged"
    refuted = [
        msg
        for cond, msg in (
            (g["linear"][0] > 0, "a linear run escapes"),
            (g["relu_small_lr_no_bn"][0] > 0, "a ReLU run at lr 0.005 without BN escapes"),
        )
        if cond
    ]
    if refuted:
        return "not supported", "; ".join(refuted) + f" ({why})", deciding
    if counted and epochs < horizon:
        return (
            "inconclusive",
            (
                f"horizon: the runs have {epochs} epochs, fewer than the {horizon} the earliest "
                f"released smooth run needed to reach its escape peak ({why})"
            ),
            deciding,
        )
    if g["smooth"][1] and e_smooth == 0:
        return "not supported", f"no smooth run escapes ({why})", deciding
    missing = [k for k, v in g.items() if v[1] == 0]
    if missing:
        return "inconclusive", f"no run that started collapsed and did not diverge in {missing} ({why})", deciding
    if e_smooth >= float(th["min_smooth_escape"]) and g["relu_bn_or_large_lr"][0] > 0:
        return "supported", why, deciding
    return "inconclusive", why, deciding
