"""Experiment 4's rule and its application (the rule text and ``decide`` sit together)."""
from __future__ import annotations

import numpy as np

RULE = """Counted runs: gradient-flow (head rate tau = {dynamics[head_rate]}) and SGD runs from a certified
collapsed equilibrium (stationary in z and in the head, rho != 0) whose Thm 4.1 premises ALL hold at the
start (H_L PSD, rho != 0, stationarity, timescale ratio (head/representation relative update rate) > 1; C^2 head,
except that ReLU heads are counted under the theorem's ReLU statement); failed flows are excluded and counted
(censored). Prediction: a run agrees with the linearised dynamics if its measured rate (slope of log spread(z)
in the linear regime, spread <= {dynamics[linear_factor]:g} x its start) is within a relative
{verdict[rate_rtol]:g} of the linearised system's own slope over the same window, or both are <=
{dynamics[rate_floor]:g}. Escape: normalised std of z > {dynamics[escape_fraction]:g}/sqrt(d) by the horizon.
E_smooth = fraction of counted smooth-head flow runs that escape; E_lin = the same for linear/ReLU heads;
E_fin = fraction of counted linear/ReLU SGD runs that escape or diverge. Verdict: 'premise violated' if no run is
counted; 'inconclusive' if the counted flows lack a smooth or a linear/ReLU head; 'not supported' if E_lin > 0 (a
linear/ReLU head leaves a premise-holding collapsed equilibrium under gradient flow, which the theorem excludes)
or E_smooth = 0; 'supported' if E_smooth >= 0.5, E_lin = 0 and at least {verdict[agree_fraction]:g} of the
counted runs agree with their prediction; 'inconclusive' otherwise."""


def agrees(row, cfg) -> bool:
    """The prediction check of one run (see :data:`RULE`)."""
    pred, meas = row["predicted_rate_window"], row["measured_rate"]
    floor = cfg.dynamics.rate_floor
    if not (np.isfinite(pred) and np.isfinite(meas)):
        return False
    if pred <= floor and meas <= floor:
        return True
    return bool(pred > 0 and abs(meas / pred - 1.0) <= cfg.verdict.rate_rtol)


def _frac(xs):
    return float(np.mean(xs)) if len(xs) else float("nan")


def decide(measurements: dict, config) -> dict:
    """Apply :data:`RULE` to ``measurements["rows"]``."""
    rows = measurements["rows"]
    runs = [r for r in rows if r["dynamics"] in ("flow", "sgd")]
    failed = [r for r in runs if r["dynamics"] == "flow" and not r["ok"]]
    counted = [r for r in runs if r["premises_hold"] and not (r["dynamics"] == "flow" and r["censored"])]
    flow = [r for r in counted if r["dynamics"] == "flow"]
    smooth = [r for r in flow if r["head_kind"] == "smooth"]
    lin = [r for r in flow if r["head_kind"] in ("linear", "piecewise")]
    fin = [r for r in counted if r["dynamics"] == "sgd" and r["head_kind"] in ("linear", "piecewise")]
    e_s = _frac([r["escaped"] for r in smooth])
    e_l = _frac([r["escaped"] for r in lin])
    e_f = _frac([r["escaped"] or not r["ok"] for r in fin])
    agree = _frac([agrees(r, config) for r in counted])
    ratios = [r["measured_rate"] / r["predicted_rate_window"] for r in counted
              if np.isfinite(r["measured_rate"]) and np.isfinite(r["predicted_rate_window"])
              and r["predicted_rate_window"] > config.dynamics.rate_floor]
    premise_fail = sorted({r["objective"] for r in runs if not r["premises_hold"]})
    headline = {
        "runs_counted": len(counted), "runs_total": len(runs), "failed_flow_runs": len(failed),
        "censored_flow_runs": sum(r["censored"] for r in runs if r["dynamics"] == "flow"),
        "E_smooth_flow": e_s, "E_linear_relu_flow": e_l, "E_linear_relu_sgd": e_f,
        "prediction_agreement": agree,
        "median_measured_over_predicted": float(np.median(ratios)) if ratios else float("nan"),
        "objectives_premise_violated": ", ".join(premise_fail) or "-",
    }
    if not counted:
        verdict, reason = "premise violated", "no run had all of Thm 4.1's premises at the start"
    elif not smooth or not lin:
        verdict, reason = "inconclusive", "the counted flows lack a smooth or a linear/ReLU head"
    elif e_l > 0 or e_s == 0:
        verdict = "not supported"
        reason = (f"linear/ReLU heads escaped under gradient flow in a fraction {e_l:.3g} of premise-holding runs"
                  if e_l > 0 else "no smooth head escaped")
    elif e_s >= 0.5 and agree >= config.verdict.agree_fraction:
        verdict, reason = "supported", "smooth heads escape, linear/ReLU heads do not, at the predicted rates"
    else:
        verdict, reason = "inconclusive", f"E_smooth = {e_s:.3g}, prediction agreement {agree:.3g}"
    return {"verdict": verdict, "headline": headline, "paper": {}, "verdict_reason": reason}
