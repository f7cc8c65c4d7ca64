"""Experiment 4's verdicts: the registry's five rules (experiments/claims/) applied to the stored runs.

Thresholds come from :data:`experiments.claims.CLAIMS`; the one measured/predicted ratio
(:func:`rate_ratio`) and the one agreement test (:func:`rate_agreement`) are shared with the report.
"""

from __future__ import annotations

import collections

import numpy as np

from experiments import claims

FROZEN, NO_ESCAPE, SMOOTH = "thm4.1-frozen-head-flow", "flow-linear-relu-no-escape", "flow-smooth-escape"
FINITE, RATES = "finite-step-escape", "linearised-rate-prediction"
LINEAR_KINDS = ("linear", "piecewise")


def _t(claim_id: str, name: str) -> float:
    return float(claims.CLAIMS[claim_id].thresholds[name])


def state_key(r) -> tuple:
    return r["representation"], r["objective"], r["activation"], r["seed"]


def label(r) -> str:
    run = f"tau {r['tau']:g}" if r["dynamics"] == "flow" else f"SGD lr {r['lr']:g}"
    return f"{r['representation']}/{r['objective']}/{r['activation']}/seed {r['seed']}/{run}"


def rate_ratio(r) -> float:
    """``measured / r``: the run's measured window rate over the claim's prediction ``r`` (``predicted_rate``;
    NaN where either is not finite or ``r = 0``)."""
    m, p = r["measured_rate"], r["predicted_rate"]
    return m / p if np.isfinite(m) and np.isfinite(p) and p != 0 else float("nan")


def rate_scales(rows) -> dict:
    """``{(state, kind): max |predicted rate|}`` over the runs of one state and kind (``flow`` or ``sgd``)."""
    out = collections.defaultdict(float)
    for r in rows:
        p = abs(r["predicted_rate"])
        if np.isfinite(p):
            k = (state_key(r), r["dynamics"])
            out[k] = max(out[k], p)
    return dict(out)


def rate_agreement(r, scales) -> str:
    """``agree``, ``miss`` (no agreement, ratio outside [1/2, 2]), ``off`` (neither) or ``no window`` (fewer than
    ``min_points`` saves in the rate window: a failure to test, which does not agree): the rule of
    ``linearised-rate-prediction``."""
    if r["rate_points"] < _t(RATES, "min_points"):
        return "no window"
    floor = _t(RATES, "rate_floor") * scales.get((state_key(r), r["dynamics"]), 0.0)
    m, p, ratio = r["measured_rate"], r["predicted_rate"], rate_ratio(r)
    if np.isfinite(m) and np.isfinite(p) and abs(m) <= floor and abs(p) <= floor:
        return "agree"
    if np.isfinite(ratio) and abs(ratio - 1.0) <= _t(RATES, "rate_rtol"):
        return "agree"
    return "off" if np.isfinite(ratio) and 0.5 <= ratio <= 2.0 else "miss"


def _flows(rows, kinds, tau=None):
    return [
        r
        for r in rows
        if r["dynamics"] == "flow"
        and r["state_premises"]
        and r["head_kind"] in kinds
        and (tau is None or r["tau"] == tau)
    ]


def _outcomes(rows) -> dict:
    """``{"tau=<t>": {outcome: count}}`` (flows) or ``{"lr=<lr>": ...}`` (SGD)."""
    out = {}
    for r in rows:
        k = f"tau={r['tau']:g}" if r["dynamics"] == "flow" else f"lr={r['lr']:g}"
        out.setdefault(k, collections.Counter())[r["outcome"]] += 1
    return {k: dict(v) for k, v in out.items()}


def frozen_ratio(r) -> float:
    """``frozen_rate / frozen_predicted_rate``: measured against the linearised system's slope, same window."""
    m, p = r["frozen_rate"], r["frozen_predicted_rate"]
    return m / p if np.isfinite(m) and np.isfinite(p) and p != 0 else float("nan")


def frozen_check(r) -> str:
    """``agree``, ``refute`` or ``open`` for one counted frozen-head run (rule of ``thm4.1-frozen-head-flow``).

    Smooth head: agrees if ``G >= escape_growth`` and ``|rate / linearised slope - 1| <= rate_rtol``;
    refutes if ``G < no_growth`` or the slope misses by more than ``rate_rtol``. Linear/ReLU head: agrees
    if ``G <= no_growth``, refutes if ``G > escape_growth``. A diverged or censored run stays open.
    """
    if r["outcome"] in ("diverged", "censored"):
        return "open"
    g = r["growth"]
    if r["head_kind"] == "smooth":
        ratio = frozen_ratio(r)
        if g < _t(FROZEN, "no_growth") or (np.isfinite(ratio) and abs(ratio - 1.0) > _t(FROZEN, "rate_rtol")):
            return "refute"
        return "agree" if g >= _t(FROZEN, "escape_growth") and np.isfinite(ratio) else "open"
    if g <= _t(FROZEN, "no_growth"):
        return "agree"
    return "refute" if g > _t(FROZEN, "escape_growth") else "open"


def decide_frozen(rows) -> dict:
    counted = [r for r in _flows(rows, ("smooth", *LINEAR_KINDS), tau=0.0) if r["representation"] == "free"]
    checks = [(r, frozen_check(r)) for r in counted]
    smooth = [r for r in counted if r["head_kind"] == "smooth"]
    ratios = [frozen_ratio(r) for r in smooth]
    ratios = [x for x in ratios if np.isfinite(x)]
    vs_lmin = [r["frozen_rate"] / -r["lambda_min_H_eff"] for r in smooth if r["lambda_min_H_eff"] != 0]
    deciding = {
        "runs": len(counted),
        "agree": sum(c == "agree" for _, c in checks),
        "refute": sum(c == "refute" for _, c in checks),
        "smooth_rate_over_linearised_min": min(ratios, default=float("nan")),
        "smooth_rate_over_linearised_max": max(ratios, default=float("nan")),
        "smooth_min_growth": min((r["growth"] for r in smooth), default=float("nan")),
        "linear_relu_max_growth": max(
            (r["growth"] for r in counted if r["head_kind"] != "smooth"), default=float("nan")
        ),
        # reported beside the rule: the statement's -lambda_min(H_eff), which the slope tends to
        "smooth_rate_over_minus_lambda_min_min": min(vs_lmin, default=float("nan")),
        "smooth_rate_over_minus_lambda_min_max": max(vs_lmin, default=float("nan")),
    }
    item = {"id": FROZEN, "deciding": deciding}
    bad = [
        f"{label(r)} (G = {r['growth']:.3g}, rate / linearised slope = {frozen_ratio(r):.3g})"
        for r, c in checks
        if c == "refute"
    ]
    if not counted:
        return {
            **item,
            "verdict": "inconclusive",
            "reason": "no frozen-head run of z itself at a premise-holding state",
        }
    if bad:
        return {**item, "verdict": "not supported", "reason": f"{len(bad)} runs refute it: " + ", ".join(bad[:4])}
    if deciding["agree"] == len(counted):
        return {
            **item,
            "verdict": "supported",
            "reason": f"all {len(counted)} frozen-head runs agree (smooth: growth "
            f">= {deciding['smooth_min_growth']:.3g}, rate / linearised slope in "
            f"[{deciding['smooth_rate_over_linearised_min']:.3g}, "
            f"{deciding['smooth_rate_over_linearised_max']:.3g}]; linear/ReLU growth <= "
            f"{deciding['linear_relu_max_growth']:.3g})",
        }
    return {
        **item,
        "verdict": "inconclusive",
        "reason": f"{len(counted) - deciding['agree']} of {len(counted)} runs neither agree nor refute",
    }


def decide_no_escape(rows) -> dict:
    counted = _flows(rows, LINEAR_KINDS)
    escaped = [r for r in counted if r["outcome"] == "escaped"]
    item = {
        "id": NO_ESCAPE,
        "deciding": {"runs": len(counted), "escaped": len(escaped), "outcomes": _outcomes(counted)},
    }
    if not counted:
        return {**item, "verdict": "inconclusive", "reason": "no premise-holding linear/ReLU flow"}
    if escaped:
        taus = sorted({r["tau"] for r in escaped})
        return {
            **item,
            "verdict": "not supported",
            "reason": f"{len(escaped)} of {len(counted)} linear/ReLU flows escape (growth >= "
            f"{_t(NO_ESCAPE, 'escape_growth'):g}) at tau = {', '.join(f'{t:g}' for t in taus)}",
        }
    failed = [r for r in counted if r["outcome"] in ("diverged", "censored")]
    if failed:
        return {
            **item,
            "verdict": "inconclusive",
            "reason": f"none escapes, but {len(failed)} diverged or were censored",
        }
    return {**item, "verdict": "supported", "reason": f"none of {len(counted)} linear/ReLU flows escapes at any tau"}


def decide_smooth_escape(rows) -> dict:
    counted = _flows(rows, ("smooth",))
    high = [r for r in counted if r["tau"] >= 1.0]
    stayed = [r for r in high if r["outcome"] == "stayed"]
    item = {
        "id": SMOOTH,
        "deciding": {
            "runs_tau_ge_1": len(high),
            "escaped_tau_ge_1": sum(r["outcome"] == "escaped" for r in high),
            "stayed_tau_ge_1": len(stayed),
            "outcomes": _outcomes(counted),
        },
    }
    if not high:
        return {**item, "verdict": "inconclusive", "reason": "no premise-holding smooth-head flow at tau >= 1"}
    if stayed:
        return {
            **item,
            "verdict": "not supported",
            "reason": f"{len(stayed)} smooth-head flows at tau >= 1 stay "
            f"(growth <= {_t(SMOOTH, 'no_growth'):g}): " + ", ".join(label(r) for r in stayed[:4]),
        }
    if all(r["outcome"] == "escaped" for r in high):
        return {**item, "verdict": "supported", "reason": f"all {len(high)} smooth-head flows at tau >= 1 escape"}
    return {
        **item,
        "verdict": "inconclusive",
        "reason": f"{sum(r['outcome'] != 'escaped' for r in high)} of "
        f"{len(high)} smooth-head flows at tau >= 1 neither escape nor stay",
    }


def flow_control(r) -> bool:
    """Whether a flow row is a control of ``finite-step-escape``: it stays (``G <= no_growth``) and is predicted to
    (its linearised rate ``<= control_rate_tol x max|lambda(J)|``); a diverged or censored flow is not."""
    return bool(
        r["outcome"] == "stayed"
        and r["growth"] <= _t(FINITE, "no_growth")
        and r["predicted_rate"] <= _t(FINITE, "control_rate_tol") * r["jacobian_scale"]
    )


def decide_finite_step(rows) -> dict:
    flows = {(state_key(r), r["tau"]): r for r in rows if r["dynamics"] == "flow"}
    runs = [r for r in rows if r["dynamics"] == "sgd" and r["state_premises"] and r["head_kind"] in LINEAR_KINDS]
    counted = [r for r in runs if flow_control(flows[(state_key(r), r["tau"])])]
    excluded = [r for r in runs if not flow_control(flows[(state_key(r), r["tau"])])]
    escaped = [r for r in counted if r["outcome"] == "escaped"]
    diverged = [r for r in counted if r["outcome"] == "diverged"]
    finite = [r for r in counted if r["outcome"] in ("stayed", "grew")]
    control = [flows[(state_key(r), r["tau"])] for r in excluded]
    item = {
        "id": FINITE,
        "deciding": {
            "runs": len(runs),
            "counted_at_controlled_states": len(counted),
            "escaped": len(escaped),
            "diverged": len(diverged),
            "finite_without_escape": len(finite),
            "excluded_flow_not_staying": len(excluded),
            "excluded_escaped": sum(r["outcome"] == "escaped" for r in excluded),
            "excluded_diverged": sum(r["outcome"] == "diverged" for r in excluded),
            "excluded_flow_growth_min": min((f["growth"] for f in control), default=float("nan")),
            "excluded_flow_rate_min": min((f["predicted_rate"] for f in control), default=float("nan")),
            "outcomes": _outcomes(runs),
        },
    }
    if escaped:
        return {
            **item,
            "verdict": "supported",
            "reason": f"{len(escaped)} linear/ReLU SGD runs escape from states "
            "whose gradient flow stays (growth <= no_growth, linearised rate <= 0): "
            + ", ".join(label(r) for r in escaped[:4]),
        }
    if counted and len(finite) == len(counted):
        return {
            **item,
            "verdict": "not supported",
            "reason": f"all {len(counted)} linear/ReLU SGD runs from states "
            "whose gradient flow stays end finite without escaping",
        }
    if not counted:
        why = (
            f"no linear/ReLU state has a gradient flow that stays: all {len(runs)} SGD runs sit at states whose "
            "flow at the same tau grows past no_growth or has a positive linearised rate (over those flows: "
            f"growth >= {item['deciding']['excluded_flow_growth_min']:.3g}, linearised rate >= "
            f"{item['deciding']['excluded_flow_rate_min']:.3g})"
            if runs
            else "no premise-holding linear/ReLU SGD run"
        )
        return {**item, "verdict": "inconclusive", "reason": why}
    return {
        **item,
        "verdict": "inconclusive",
        "reason": f"none of {len(counted)} SGD runs at controlled states "
        f"escapes, but {len(diverged)} diverged (divergence is not escape): "
        + ", ".join(label(r) for r in diverged[:4]),
    }


def decide_rates(rows) -> dict:
    counted = [r for r in rows if r["certified"]]
    scales = rate_scales(rows)
    checks = [(r, rate_agreement(r, scales)) for r in counted]
    agree = sum(c == "agree" for _, c in checks)
    misses = [label(r) for r, c in checks if c == "miss"]
    untested = [label(r) for r, c in checks if c == "no window"]
    frac = agree / len(counted) if counted else float("nan")
    # the ratio of the runs compared relatively (not those both below the floor, whose ratio means nothing)
    ratios = [
        rate_ratio(r)
        for r, c in checks
        if c != "no window"
        and np.isfinite(rate_ratio(r))
        and abs(r["predicted_rate"]) > _t(RATES, "rate_floor") * scales.get((state_key(r), r["dynamics"]), 0.0)
    ]
    item = {
        "id": RATES,
        "deciding": {
            "runs": len(counted),
            "agree": agree,
            "agree_fraction": frac,
            "misses_beyond_factor_2": len(misses),
            "no_window": len(untested),
            "no_window_sgd": sum(r["dynamics"] == "sgd" for r, c in checks if c == "no window"),
            "ratio_min_above_floor": min(ratios, default=float("nan")),
            "ratio_max_above_floor": max(ratios, default=float("nan")),
        },
    }
    why = (
        f"{agree} of {len(counted)} runs agree with the leading rate, {len(misses)} miss by more than a factor 2, "
        f"{len(untested)} have no rate window (fewer than {_t(RATES, 'min_points'):g} saves: counted against)"
    )
    if not counted:
        return {**item, "verdict": "inconclusive", "reason": "no run from a certified equilibrium"}
    if frac >= _t(RATES, "agree_fraction") and not misses:
        return {**item, "verdict": "supported", "reason": why}
    if frac < 0.5:
        return {**item, "verdict": "not supported", "reason": why}
    return {**item, "verdict": "inconclusive", "reason": why + (": " + ", ".join(misses[:4]) if misses else "")}


def decide(measurements: dict, config) -> dict:
    """The five claims of :data:`experiments.collapse_escape.CLAIMS` on ``measurements["rows"]``."""
    rows = measurements["rows"]
    items = [
        decide_frozen(rows),
        decide_no_escape(rows),
        decide_smooth_escape(rows),
        decide_finite_step(rows),
        decide_rates(rows),
    ]
    cases = measurements["cases"]
    headline = {
        "states": len(cases),
        "states_certified": sum(c["certified"] for c in cases),
        "states_premises_hold": sum(bool(c.get("state_premises")) for c in cases),
        "runs": len(rows),
        **{f"{i['id']}:{k}": v for i in items for k, v in i["deciding"].items() if not isinstance(v, dict)},
    }
    return {"claims": items, "headline": headline}
