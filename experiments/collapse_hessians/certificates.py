"""The repaired Thm 4.1 in experiment 3: the certificate's prediction against the measured ``lambda_min(H_eff)``.

Two registered claims (experiments/claims/sec4.py; docs/theory.md, section
"Thm 4.1 repaired: when a collapsed equilibrium is unstable"):

* ``thm4.1-repaired-sign`` -- at every certified collapsed equilibrium the experiment builds, the sign
  :func:`ssl_geometry.geometry.collapse_certificate` predicts for ``lambda_min(H_eff)`` is the sign the
  experiment measures (its row's ``lambda_min_H_eff`` with tolerance ``eig_tol``: ``-1`` below ``-tol``,
  ``+1`` above ``+tol``, ``0`` -- matched by the prediction "degenerate" -- in between).
* ``thm4.1-critical-residual`` -- along the residual sweep of a listed state (the same head and ``c``,
  the equilibrium rebuilt by :func:`ssl_geometry.geometry.collapsed_equilibrium` at residual scale
  ``r``), the measured sign change of ``lambda_min(H_eff)`` sits at ``r = s* r0`` (``r0`` the stored
  state's scale, ``s*`` its certificate's critical scale) within a relative tolerance. The
  construction keeps the head fixed and scales the residual linearly in ``r`` (``H_L`` is the same for
  every ``r`` at the fixed-target objectives), so ``H_eff(r) = G + (r / r0) M`` exactly: the sweep
  tests the code, not the theory.

The measurement functions rebuild the equilibria from the same keys as
:func:`experiments.collapse_hessians.cases.run_case`; the decision functions are pure and read rows.
"""
from __future__ import annotations

import functools
import itertools
import math

import jax

from experiments import common
from experiments.collapse_hessians.cases import all_cases, equilibrium_state, spectrum
from ssl_geometry import geometry

REPAIRED_SIGN = "thm4.1-repaired-sign"
CRITICAL_RESIDUAL = "thm4.1-critical-residual"
#: The certificate's conclusion that makes no prediction (the premise H_L >= 0 on range(J) fails).
NO_PREDICTION = "premise violated (G not PSD)"
#: The largest residual scale the DINO construction builds: the teacher probabilities ``q*(1 - (r/2) V_i / max|V|)``
#: stay positive only for ``r < 2``.
DINO_MAX_SCALE = 1.99


def measured_sign(lambda_min: float, tol: float) -> int:
    """``-1`` if ``lambda_min < -tol``, ``+1`` if ``lambda_min > tol``, ``0`` otherwise (a zero eigenvalue)."""
    if not (math.isfinite(lambda_min) and math.isfinite(tol)):
        raise ValueError(f"`lambda_min` and `tol` must be finite; got {lambda_min!r}, {tol!r}.")
    return -1 if lambda_min < -tol else (1 if lambda_min > tol else 0)


def certificate(cfg, model, variables, eq):
    """The certificate of equilibrium ``eq`` (:func:`ssl_geometry.geometry.collapse_certificate`, the variant's dense
    threshold)."""
    return geometry.collapse_certificate(model, eq.loss_fn, eq.z, variables=variables,
                                         max_dense_dim=cfg.analysis.max_dense_dim)


def measured_lambda_min(cfg, model, variables, eq, key):
    """The experiment's measurement of ``lambda_min(H_eff)`` alone (:func:`~experiments.collapse_hessians.cases.spectrum`,
    Lanczos budget ``analysis.equilibrium_lanczos_steps``, never refined: a sweep reads the raw sign): ``(lambda_min,
    tol)``."""
    spec = spectrum(cfg, model, variables, eq, key, int(cfg.analysis.equilibrium_lanczos_steps), parts=("full",))
    return float(spec.lambda_min["full"]), float(spec.sign_tol["full"])


def certificate_row(cfg, i, objective, act, s, state) -> dict:
    """The certificate row of equilibrium case ``i`` (``state``: its ``(model, variables, eq)``)."""
    model, variables, eq = state
    cert = certificate(cfg, model, variables, eq)
    return {"case": i, "objective": objective, "activation": act, "residual_scale": s,
            "conclusion": cert.conclusion, "critical_scale": cert.critical_scale,
            "critical_bounds": list(cert.critical_bounds), "predicted_sign": int(cert.predicted_sign),
            "null_dim": int(cert.null_dim), "method": cert.method, "notes": list(cert.notes),
            "rho_norm": float(eq.premises.residual_norm)}


def _whole(tag, fn):
    """The default ``part``: ``fn()``, nothing stored."""
    return fn()


def cases_and_certificates(cfg, key, run_case, part=_whole) -> tuple[list, list]:
    """``(rows, certificates)``: per case ``i`` of :func:`~experiments.collapse_hessians.cases.all_cases` (key
    ``fold_in(key, i)``) its row, ``part("case<i>", run_case(...))``, and for an equilibrium case right after it
    its certificate, ``part("certificate<i>", ...)`` (:func:`experiments.stored_parts.parts`: each stored as it
    ends). The two share one build of the equilibrium, made when the first of them is computed (a stored part
    needs none)."""
    rows, certs = [], []
    for i, (o, a, bn, st, s) in enumerate(all_cases(cfg)):
        k = jax.random.fold_in(key, i)
        built = functools.cache(lambda o=o, a=a, k=k, s=s: equilibrium_state(cfg, o, a, k, s))
        rows.append(part(f"case{i:03d}", lambda o=o, a=a, bn=bn, st=st, k=k, s=s, b=built: run_case(
            cfg, o, a, bn, st, k, s, built=b)))
        if st == "equilibrium" and not bn:
            certs.append(part(f"certificate{i:03d}", lambda i=i, o=o, a=a, s=s, b=built: certificate_row(
                cfg, i, o, a, s, b())))
    return rows, certs


def sign_states(rows, certs) -> list[dict]:
    """The states :func:`decide_repaired_sign` reads: each certificate joined with its experiment row (the
    certified equilibria only: ``state == "equilibrium"``, ``certified``, ``holds``, no BatchNorm); a
    certificate whose rebuilt ``|rho|`` differs from its row's is refused (the states would not be the same)."""
    by_case = {c["case"]: c for c in certs}
    out = []
    for i, r in enumerate(rows):
        if not (r["state"] == "equilibrium" and r["certified"] and r["holds"] and not r["batch_norm"]):
            continue
        if i not in by_case:
            raise ValueError(f"certified equilibrium row {i} ({r['objective']}/{r['activation']}) has no certificate.")
        c = by_case[i]
        if not math.isclose(c["rho_norm"], r["rho_norm"], rel_tol=1e-9, abs_tol=1e-300):
            raise ValueError(f"row {i}: the certificate's rebuilt equilibrium has |rho| = {c['rho_norm']:.17g}, the "
                             f"experiment's {r['rho_norm']:.17g}: equilibrium_state no longer rebuilds run_case's "
                             "state.")
        out.append({"label": f"{r['objective']}/{r['activation']}/scale {r['residual_scale']:g}",
                    "head_kind": r["head_kind"], "conclusion": c["conclusion"],
                    "critical_scale": c["critical_scale"], "critical_bounds": c["critical_bounds"],
                    "predicted_sign": c["predicted_sign"], "lambda_min": r["lambda_min_H_eff"], "tol": r["eig_tol"]})
    return out


def decide_repaired_sign(states) -> dict:
    """The rule of ``thm4.1-repaired-sign`` on ``[{"label", "conclusion", "predicted_sign", "lambda_min", "tol"}]``.

    A state's measured sign is :func:`measured_sign`; it matches when it equals ``predicted_sign``
    (``0`` is the prediction "degenerate"). States whose certificate concludes "premise violated (G not
    PSD)" make no prediction and are not counted. Not supported if one counted state mismatches (named);
    inconclusive if none is counted; supported otherwise.
    """
    counted = [s for s in states if s["conclusion"] != NO_PREDICTION]
    bad = [s for s in counted if measured_sign(s["lambda_min"], s["tol"]) != s["predicted_sign"]]
    deciding = {"certified_equilibria": len(states), "predicted": len(counted), "mismatched": len(bad),
                "predicted_unstable": sum(s["predicted_sign"] < 0 for s in counted),
                "predicted_stable": sum(s["predicted_sign"] > 0 for s in counted),
                "predicted_degenerate": sum(s["predicted_sign"] == 0 for s in counted)}
    item = {"id": REPAIRED_SIGN, "deciding": deciding}
    if not counted:
        return {**item, "verdict": "inconclusive",
                "reason": f"no certified collapsed equilibrium with a certificate prediction ({len(states)} certified)"}
    if bad:
        return {**item, "verdict": "not supported",
                "reason": f"{len(bad)} of {len(counted)} predictions wrong: " + ", ".join(
                    f"{s['label']} (predicted {s['predicted_sign']:+d}, lambda_min(H_eff) = {s['lambda_min']:.3g}, "
                    f"tol {s['tol']:.2g})" for s in bad[:5])}
    return {**item, "verdict": "supported",
            "reason": f"the predicted sign of lambda_min(H_eff) matches the measured one at all {len(counted)} "
                      f"certified equilibria ({deciding['predicted_unstable']} unstable, "
                      f"{deciding['predicted_stable']} stable, {deciding['predicted_degenerate']} degenerate)"}


# ----------------------------------------------------------------------------- the residual sweep


def locate_crossing(sign_at, lo: float, hi: float, *, factor: float = 2.0, rtol: float = 1e-4,
                    max_evals: int = 60) -> dict:
    """The first crossing of ``sign_at`` from ``+1`` to ``-1`` on the grid ``lo factor^j < hi``, ``hi``; bisected.

    ``sign_at(r)`` is the sign of the raw ``lambda_min`` (``> 0``: ``+1``). The grid starts at ``lo``;
    the first grid interval ``[r_j, r_{j+1}]`` with ``+1`` then ``-1`` is bisected until its width is
    ``<= rtol r``. Returns ``{"crossing": r or None, "bracket": [a, b] or None, "evaluations",
    "first_sign"}`` (``crossing`` ``None``: ``lambda_min`` does not change sign from ``+`` to ``-`` on
    the grid; ``first_sign = -1`` then says it is negative from ``lo`` on).
    """
    if not (0 < lo < hi) or factor <= 1 or rtol <= 0:
        raise ValueError(f"need 0 < lo < hi, factor > 1, rtol > 0; got lo={lo}, hi={hi}, factor={factor}, rtol={rtol}.")
    grid = [lo]
    while grid[-1] * factor < hi:
        grid.append(grid[-1] * factor)
    grid.append(hi)
    signs, evals = [sign_at(grid[0])], 1
    bracket = None
    for a, b in itertools.pairwise(grid):
        if signs[-1] < 0:
            break
        signs.append(sign_at(b))
        evals += 1
        if signs[-2] > 0 and signs[-1] < 0:
            bracket = [a, b]
            break
    if bracket is None:
        return {"crossing": None, "bracket": None, "evaluations": evals, "first_sign": signs[0]}
    a, b = bracket
    while b - a > rtol * b:
        if evals >= max_evals:
            raise RuntimeError(f"bisection did not reach rtol {rtol} in {max_evals} evaluations: [{a}, {b}].")
        mid = 0.5 * (a + b)
        a, b = (mid, b) if sign_at(mid) > 0 else (a, mid)
        evals += 1
    return {"crossing": 0.5 * (a + b), "bracket": [a, b], "evaluations": evals, "first_sign": signs[0]}


def sweep_range(objective: str, predicted: float, span: float) -> tuple[float, float] | None:
    """The residual scales swept around the predicted crossing ``p = r0 s*``: ``[p / span, span p]``, the top capped at
    :data:`DINO_MAX_SCALE` for DINO (whose construction builds only ``r < 2``).

    ``None`` when there is nothing to sweep: ``p`` is ``0``, NaN or infinite (the certificate predicts no crossing),
    or, for DINO, ``p / span >= DINO_MAX_SCALE`` (no scale of the range can be built). A true crossing farther than
    ``span`` from ``p`` leaves the sweep of one sign throughout, on the side of ``p`` that refutes it.
    """
    if not span > 1:
        raise ValueError(f"`span` must be > 1; got {span!r}.")
    if predicted < 0:
        raise ValueError(f"`predicted` (the crossing r0 s*) must be >= 0; got {predicted!r}.")
    if not (math.isfinite(predicted) and predicted > 0):
        return None
    lo, hi = predicted / span, predicted * span
    if objective == "dino_fixed_teacher":
        if lo >= DINO_MAX_SCALE:
            return None
        hi = min(hi, DINO_MAX_SCALE)
    return lo, hi


def sweep_states(cfg, key, span: float, rows, certs, part=_whole) -> list[dict]:
    """The residual sweeps of ``cfg.analysis.critical_sweep`` (``[objective, activation, residual_scale]``
    each, a state the experiment builds): from the base state's row and certificate (``rows`` and ``certs`` of
    :func:`cases_and_certificates`), the measured crossing on :func:`sweep_range` ``(objective, r0 s*, span)``;
    sweep ``j`` through ``part("sweep<j>", fn)`` (:func:`experiments.stored_parts.parts`)."""
    a = cfg.analysis
    cases = list(all_cases(cfg))
    return [part(f"sweep{j}", lambda w=w: _sweep(cfg, key, span, cases, rows, certs, *w))
            for j, w in enumerate(a.critical_sweep)]


def _sweep(cfg, key, span, cases, rows, certs, objective, act, base) -> dict:
    """One sweep of :func:`sweep_states` (``sweep`` ``None``, no evaluation, where :func:`sweep_range` is)."""
    idx = [i for i, (o, ac, bn, st, s) in enumerate(cases)
           if (o, ac, st, bn, s) == (objective, act, "equilibrium", False, base)]
    if not idx:
        raise ValueError(f"analysis.critical_sweep lists {objective}/{act}/{base}, which the experiment does "
                         "not build (no such equilibrium case).")
    k = jax.random.fold_in(key, idx[0])
    cert = next(c for c in certs if c["case"] == idx[0])
    predicted = base * cert["critical_scale"]
    row = {"label": f"{objective}/{act}/scale {base:g}", "objective": objective, "base_scale": base,
           "certified": bool(rows[idx[0]]["certified"]), "conclusion": cert["conclusion"],
           "null_dim": int(cert["null_dim"]), "critical_scale": cert["critical_scale"],
           "critical_bounds": list(cert["critical_bounds"]), "predicted_crossing": predicted}
    swept = sweep_range(objective, predicted, span)
    if swept is None:
        return {**row, "sweep": None, "crossing": None, "bracket": None, "evaluations": 0, "first_sign": 0}

    def sign_at(r, objective=objective, act=act, k=k):
        m, v, e = equilibrium_state(cfg, objective, act, k, r)
        if not e.certified:
            raise RuntimeError(f"the sweep's equilibrium {objective}/{act} at residual scale {r:g} is not "
                               "certified.")
        lmin, _ = measured_lambda_min(cfg, m, v, e, k)
        return 1 if lmin > 0 else -1

    return {**row, "sweep": list(swept), **locate_crossing(sign_at, *swept, rtol=cfg.analysis.critical_sweep_rtol)}


def decide_critical_residual(states, rtol: float) -> dict:
    """The rule of ``thm4.1-critical-residual`` on the sweep rows of :func:`sweep_states`.

    Eligible: certified base states with ``null_dim = 0`` (full rank: ``0 < s* <= inf``) and a certificate
    prediction. Of those, a state with no finite crossing ``p = r0 s* > 0`` predicts none to locate, and a DINO state
    whose sweep :func:`sweep_range` cannot build (``p / span`` at or above the construction's cap) is named in
    ``not_buildable``; neither is counted. Per counted state, with the sweep ``[lo, hi]`` around ``p``: agrees if a
    crossing ``m`` was measured and ``|m - p| <= rtol p``, or if none was measured and the sweep is stable
    throughout with ``p > hi`` (only where DINO's cap cut the sweep below ``span p``); disagrees otherwise (a true
    crossing farther than the span from ``p`` leaves the sweep of one sign on the wrong side). Not supported if one
    disagrees (named); inconclusive if none is counted; supported otherwise.
    """
    if not (rtol > 0):
        raise ValueError(f"`rtol` must be positive; got {rtol!r}.")
    eligible = [s for s in states if s["certified"] and s["null_dim"] == 0 and s["conclusion"] != NO_PREDICTION]
    predicts = [s for s in eligible if math.isfinite(s["predicted_crossing"]) and s["predicted_crossing"] > 0]
    counted = [s for s in predicts if s["sweep"] is not None]
    not_buildable = [s["label"] for s in predicts if s["sweep"] is None]
    bad, compared = [], []
    for s in counted:
        p, hi, m = s["predicted_crossing"], s["sweep"][1], s["crossing"]
        if m is not None:
            compared.append(s)
            ok = abs(m - p) <= rtol * p
        else:  # no sign change on the sweep: only a prediction above a capped sweep that is stable throughout agrees
            ok = s["first_sign"] > 0 and p > hi
        if not ok:
            bad.append(s)
    errs = [abs(s["crossing"] - s["predicted_crossing"]) / s["predicted_crossing"] for s in compared]
    deciding = {"listed": len(states), "eligible": len(eligible), "no_crossing_predicted": len(eligible) - len(predicts),
                "not_buildable": not_buildable, "counted": len(counted), "with_measured_crossing": len(compared),
                "disagreeing": len(bad), "max_relative_error": max(errs, default=float("nan"))}
    item = {"id": CRITICAL_RESIDUAL, "deciding": deciding}
    unbuilt = f"; not buildable (DINO r < 2): {', '.join(not_buildable)}" if not_buildable else ""
    if bad:
        return {**item, "verdict": "not supported",
                "reason": f"{len(bad)} of {len(counted)} sweeps disagree with the predicted crossing: " + ", ".join(
                    f"{s['label']} (predicted r = {s['predicted_crossing']:.4g}, measured "
                    f"{'none' if s['crossing'] is None else format(s['crossing'], '.4g')} on "
                    f"[{s['sweep'][0]:.3g}, {s['sweep'][1]:.3g}])" for s in bad[:5]) + unbuilt}
    if not counted:
        return {**item, "verdict": "inconclusive",
                "reason": f"no listed state could be swept around its predicted crossing ({len(states)} listed, "
                          f"{len(eligible)} eligible){unbuilt}"}
    return {**item, "verdict": "supported",
            "reason": f"the measured crossing matches r0 s* within {rtol:g} in all {len(counted)} counted sweeps "
                      f"({len(compared)} with a crossing; largest relative error "
                      f"{deciding['max_relative_error']:.2g}){unbuilt}; fixed-head family: tests the code, not the "
                      "theory"}


def decide_items(measurements, crossing_rtol: float) -> list[dict]:
    """Both claims' items from the experiment's measurements. A dry run (``"dry_run"`` in ``measurements``)
    measures neither the certificates nor the sweeps: both are then inconclusive, saying so."""
    if "certificates" not in measurements and "dry_run" in measurements:
        why = "dry run: the certificates and residual sweeps are not measured"
        return [{"id": cid, "verdict": "inconclusive", "reason": why, "deciding": {}}
                for cid in (REPAIRED_SIGN, CRITICAL_RESIDUAL)]
    return [decide_repaired_sign(sign_states(measurements["cases"], measurements["certificates"])),
            decide_critical_residual(measurements["critical_sweeps"], crossing_rtol)]


def _swept(s) -> str:
    """The report's ``swept r`` of one sweep row: its range, or why there is none."""
    if s["sweep"] is not None:
        return f"[{s['sweep'][0]:.3g}, {s['sweep'][1]:.3g}]"
    p = s["predicted_crossing"]
    return "none: not buildable (DINO r < 2)" if math.isfinite(p) and p > 0 else "none: no crossing predicted"


def report_lines(measurements) -> list[str]:
    """The report's tables: the certificate's prediction against the measured ``lambda_min(H_eff)`` per certified
    equilibrium, and each residual sweep's predicted against measured crossing (none in a dry run)."""
    if "certificates" not in measurements:
        return ["Repaired Thm 4.1: no certificates measured (dry run)."]
    rows, certs = measurements["cases"], measurements["certificates"]
    states = sign_states(rows, certs)
    sign = [{"state": s["label"], "head": s["head_kind"], "conclusion": s["conclusion"],
             "predicted s*": s["critical_scale"],
             "bracket": f"[{s['critical_bounds'][0]:.4g}, {s['critical_bounds'][1]:.4g}]",
             "predicted sign": s["predicted_sign"], "lambda_min(H_eff)": s["lambda_min"], "tol": s["tol"],
             "measured sign": measured_sign(s["lambda_min"], s["tol"]),
             "match": (s["conclusion"] == NO_PREDICTION
                       or measured_sign(s["lambda_min"], s["tol"]) == s["predicted_sign"])}
            for s in states]
    sweeps = [{"state": s["label"], "s*": s["critical_scale"], "predicted crossing r0 s*": s["predicted_crossing"],
               "measured crossing": "none" if s["crossing"] is None else s["crossing"],
               "swept r": _swept(s),
               "evaluations": s["evaluations"]}
              for s in measurements["critical_sweeps"]]
    return [("Repaired Thm 4.1 (thm4.1-repaired-sign): the certificate's prediction against the measured "
             "lambda_min(H_eff) at each certified equilibrium (sign -1 unstable, 0 degenerate, +1 stable):"), "",
            common.markdown_table(sign), "",
            ("Residual sweeps (thm4.1-critical-residual; head and c fixed, the residual scaled: tests the code, not "
             "the theory):"), "", common.markdown_table(sweeps)]
