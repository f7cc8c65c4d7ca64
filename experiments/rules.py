"""The rules of the claims that several experiments decide, applied once.

:mod:`experiments.claims` states each rule in words with its thresholds; a claim decided by more
than one experiment is applied here, by one function, so that it is the same rule wherever it is
decided: Sec. 5's degeneracy (guillotine, objectives, MiniLM, released checkpoints), Thm 4.1's
two halves and the finding that head stationarity forces rho = 0 at the Siamese, contrastive and
decorrelation families' collapsed states (collapse Hessians, objectives). The estimators the Sec. 5 rule reads
(:func:`degeneracy_ratio`, :func:`orbit_compression`) are here too, so that every experiment
measures them the same way.

Each ``decide_*`` function returns claim items ``{"id", "verdict", "deciding", "reason"[, "subject"]}``
as :func:`experiments.common.run_experiment` expects them from an experiment's ``decide``.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from experiments import claims

SEC5 = "sec5-metric-degeneracy"
LINEAR_PSD = "thm4.1-linear-psd"
SMOOTH_UNSTABLE = "thm4.1-smooth-unstable"
RHO_ZERO = "stationarity-forces-rho-zero"
#: The controls every Sec. 5 degeneracy ratio is computed against (the registry's order).
SEC5_RATIO_CONTROLS = ("random", "between", "data")


def _bootstrap_mean(x: np.ndarray, reps: int, seed: int) -> tuple[float, float, float]:
    """``(mean, 2.5% quantile, 97.5% quantile)`` of the mean of ``x`` over ``reps`` bootstrap resamples."""
    x = np.asarray(x, np.float64)
    if x.ndim != 1 or x.size < 2 or not np.all(np.isfinite(x)):
        raise ValueError(f"bootstrap needs a finite 1-D sample of at least 2 values; got shape {x.shape}")
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, (reps, x.size))].mean(axis=1)
    lo, hi = np.quantile(means, [0.025, 0.975])
    return float(x.mean()), float(lo), float(hi)


def degeneracy_ratio(g_aug: Sequence[float], g_control: Sequence[float], *, seed: int = 0) -> dict:
    """``D = exp(mean_i log(g_aug,i / g_control,i))`` with a bootstrap 95% interval over samples ``i``.

    ``g = |J_h v| / |v|`` per sample ``i``, along the augmentation's tangent (``g_aug``) and along the
    control direction of the same sample (``g_control``; average several control directions per sample
    before calling). ``D < 1``: the head contracts the augmentation more than the control. The number
    of resamples is the registry's ``bootstrap`` threshold of the Sec. 5 claim.
    """
    ga, gc = np.asarray(g_aug, np.float64), np.asarray(g_control, np.float64)
    if ga.shape != gc.shape:
        raise ValueError(f"g_aug and g_control must pair samples; got shapes {ga.shape} and {gc.shape}")
    if np.any(ga <= 0) or np.any(gc <= 0):
        raise ValueError("degeneracy gains must be positive (|J_h v| / |v| of a non-zero v)")
    reps = int(claims.CLAIMS[SEC5].thresholds["bootstrap"])
    m, lo, hi = _bootstrap_mean(np.log(ga / gc), reps, seed)
    return {"D": float(np.exp(m)), "lo": float(np.exp(lo)), "hi": float(np.exp(hi))}


def orbit_compression(spread_backbone: Sequence[float], spread_head: Sequence[float], *, seed: int = 0) -> dict:
    """``S = mean_o spread_z(o) / mean_o spread_h(o)`` over orbits ``o``, with a bootstrap 95% interval.

    ``spread`` is the paper's orbit spread: the mean squared distance of an orbit's L2-normalised points
    to their centroid (:func:`ssl_geometry.paper.orbit_metrics`), for the backbone's z and the head's h(z)
    of the same orbits. ``S > 1``: the orbits compress through the head (the paper reports 21.9x).
    Resampled over orbits, the ratio of the two means recomputed per resample.
    """
    sz, sh = np.asarray(spread_backbone, np.float64), np.asarray(spread_head, np.float64)
    if sz.shape != sh.shape or sz.ndim != 1 or sz.size < 2:
        raise ValueError(f"orbit spreads must be paired 1-D samples of >= 2 orbits; got {sz.shape} and {sh.shape}")
    if not (np.all(np.isfinite(sz)) and np.all(np.isfinite(sh))) or np.any(sh <= 0):
        raise ValueError("orbit spreads must be finite and the head's positive")
    reps = int(claims.CLAIMS[SEC5].thresholds["bootstrap"])
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, sz.size, (reps, sz.size))
    ratios = sz[idx].mean(axis=1) / sh[idx].mean(axis=1)
    lo, hi = np.quantile(ratios, [0.025, 0.975])
    return {"S": float(sz.mean() / sh.mean()), "lo": float(lo), "hi": float(hi)}


def orbit_gain_over_untrained(spread_trained: Sequence[float], spread_untrained: Sequence[float], *,
                              seed: int = 0) -> dict:
    """``R = S_trained / S_untrained = mean_o spread_h0(o) / mean_o spread_h(o)``, with a bootstrap 95% interval.

    The orbit compression of the trained head over that of the same head at its initialisation, on the same
    orbits of the same z (so ``spread_z`` cancels): :func:`orbit_compression` of the untrained head's spreads
    over the trained head's, resampled over orbits. ``R > 1``: the trained head compresses the orbits more
    than its initialisation does (the Sec. 5 rule's orbit comparison with the untrained head).
    """
    return orbit_compression(spread_untrained, spread_trained, seed=seed)


def _passes(aug: Mapping) -> bool:
    """Every control's interval below 1 and the trained head below the untrained one (see the rule)."""
    return all(aug["trained"][c]["hi"] < 1.0 and aug["trained"][c]["D"] < aug["untrained"][c]["D"]
               for c in SEC5_RATIO_CONTROLS)


def _fails(aug: Mapping) -> bool:
    return any(aug["trained"][c]["lo"] >= 1.0 for c in SEC5_RATIO_CONTROLS)


def decide_sec5(augmentations: Mapping[str, Mapping], orbits: Mapping | None, *, negative: Mapping | None = None,
                premises: Mapping[str, bool], subject: str | None = None,
                orbits_vs_untrained: Mapping | None = None) -> dict:
    """Apply the Sec. 5 rule (:data:`experiments.claims.CLAIMS` ``["sec5-metric-degeneracy"]``).

    Args:
      augmentations: ``{augmentation: {"trained": {control: degeneracy_ratio(...)}, "untrained":
        {control: degeneracy_ratio(...)}}}`` for the augmentations **of the training views**, controls
        :data:`SEC5_RATIO_CONTROLS`.
      orbits: :func:`orbit_compression` of the analysed orbits, or ``None`` where no orbit is defined
        (then the orbit half cannot confirm: at best inconclusive).
      orbits_vs_untrained: :func:`orbit_gain_over_untrained` of the same orbits (trained head over the head at
        initialisation), or ``None`` where the untrained head's orbits are not measured (then the orbits cannot
        count as compressed: at best inconclusive).
      negative: ``{augmentation: {...same form...}}`` of analysed augmentations the head was **not**
        trained on (the negative control), or ``None``.
      premises: ``{name: met}``; any unmet premise gives ``premise violated``.
      subject: what the verdict is about (a checkpoint, a data set) when an experiment decides several.
    """
    deciding = {}
    for a, r in augmentations.items():
        for c in SEC5_RATIO_CONTROLS:
            t, u = r["trained"][c], r["untrained"][c]
            deciding[f"D_{a}_vs_{c}"] = t["D"]
            deciding[f"D_{a}_vs_{c}_ci"] = [t["lo"], t["hi"]]
            deciding[f"D_{a}_vs_{c}_untrained"] = u["D"]
    for a, r in (negative or {}).items():
        for c in SEC5_RATIO_CONTROLS:
            deciding[f"negative_D_{a}_vs_{c}"] = r["trained"][c]["D"]
            deciding[f"negative_D_{a}_vs_{c}_ci"] = [r["trained"][c]["lo"], r["trained"][c]["hi"]]
    if orbits is not None:
        deciding.update(orbit_compression=orbits["S"], orbit_compression_ci=[orbits["lo"], orbits["hi"]])
    if orbits_vs_untrained is not None:
        deciding.update(orbit_compression_over_untrained=orbits_vs_untrained["S"],
                        orbit_compression_over_untrained_ci=[orbits_vs_untrained["lo"], orbits_vs_untrained["hi"]])
    item = {"id": SEC5, "deciding": deciding, **({"subject": subject} if subject else {})}
    unmet = sorted(k for k, met in premises.items() if not met)
    if unmet:
        return {**item, "verdict": "premise violated", "reason": "premises not met: " + ", ".join(unmet)}
    if not augmentations:
        return {**item, "verdict": "inconclusive", "reason": "no analysed augmentation is a training augmentation"}
    failed = sorted(a for a, r in augmentations.items() if _fails(r))
    passed = sorted(a for a, r in augmentations.items() if _passes(r))
    neg_passed = sorted(a for a, r in (negative or {}).items() if _passes(r))
    expands = orbits is not None and orbits["hi"] < 1.0
    beats_untrained = orbits_vs_untrained is not None and orbits_vs_untrained["lo"] > 1.0
    compresses = orbits is not None and orbits["lo"] > 1.0 and beats_untrained
    if failed or expands:
        why = []
        if failed:
            why.append(f"degeneracy ratio >= 1 with confidence against a control for {failed}")
        if expands:
            why.append(f"orbits expand through the head (S = {orbits['S']:.3g}, 95% interval "
                       f"[{orbits['lo']:.3g}, {orbits['hi']:.3g}])")
        return {**item, "verdict": "not supported", "reason": "; ".join(why)}
    if len(passed) == len(augmentations) and compresses and not neg_passed:
        return {**item, "verdict": "supported",
                "reason": f"{passed} pass every control and the untrained head; orbits compress (S = {orbits['S']:.3g}), "
                          f"{orbits_vs_untrained['S']:.3g}x the untrained head's compression"
                          + ("" if negative else "; no negative control analysed")}
    why = []
    if len(passed) < len(augmentations):
        why.append(f"not every training augmentation passes every control ({passed} of {sorted(augmentations)})")
    if orbits is None:
        why.append("no orbits analysed")
    elif orbits["lo"] <= 1.0:
        why.append("orbit compression not established")
    if orbits is not None and not beats_untrained:
        why.append("the untrained head's orbits are not measured" if orbits_vs_untrained is None else
                   f"the orbits do not compress more than through the untrained head (S_trained / S_untrained = "
                   f"{orbits_vs_untrained['S']:.3g}, 95% interval [{orbits_vs_untrained['lo']:.3g}, "
                   f"{orbits_vs_untrained['hi']:.3g}])")
    if neg_passed:
        why.append(f"the negative control {neg_passed} passes too: the test does not separate trained invariances")
    return {**item, "verdict": "inconclusive", "reason": "; ".join(why)}


def decide_linear_psd(states: Sequence[Mapping]) -> dict:
    """Apply Thm 4.1's linear/ReLU rule to certified equilibria ``[{"lambda_min", "tol", "label"}]``.

    ``states`` are the certified collapsed equilibria with a linear or ReLU head (premises checked by
    the caller: stationary, rho != 0, H_L PSD, no BatchNorm).
    """
    bad = [s for s in states if s["lambda_min"] < -s["tol"]]
    deciding = {"equilibria": len(states), "with_negative_curvature": len(bad),
                "min_lambda_min": min((s["lambda_min"] for s in states), default=float("nan"))}
    item = {"id": LINEAR_PSD, "deciding": deciding}
    if not states:
        return {**item, "verdict": "premise violated", "reason": "no certified linear/ReLU collapsed equilibrium"}
    if bad:
        return {**item, "verdict": "not supported",
                "reason": f"{len(bad)} linear/ReLU equilibria with lambda_min(H_eff) < -tol: "
                          + ", ".join(s.get("label", "?") for s in bad[:5])}
    return {**item, "verdict": "supported", "reason": f"all {len(states)} have lambda_min(H_eff) >= -tol"}


def decide_smooth_unstable(states: Sequence[Mapping]) -> list[dict]:
    """Apply Thm 4.1's smooth rule per objective: one claim item per objective (``subject``).

    ``states``: certified smooth-head collapsed equilibria ``[{"objective", "lambda_min", "tol",
    "lambda_min_M", "label"}]``. A state is unstable if ``lambda_min < -tol``, strictly stable (a
    counterexample to 'generically') if ``lambda_min > +tol``, degenerate otherwise.
    """
    items = []
    for obj in sorted({s["objective"] for s in states}):
        rows = [s for s in states if s["objective"] == obj]
        unstable = [s for s in rows if s["lambda_min"] < -s["tol"]]
        stable = [s for s in rows if s["lambda_min"] > s["tol"]]
        margins = [s["lambda_min"] / abs(s["lambda_min_M"]) for s in rows
                   if np.isfinite(s.get("lambda_min_M", np.nan)) and s.get("lambda_min_M", 0.0) != 0.0]
        deciding = {"equilibria": len(rows), "unstable": len(unstable), "strictly_stable": len(stable),
                    "degenerate": len(rows) - len(unstable) - len(stable),
                    "max_margin_lambda_min_over_abs_lambda_min_M": max(margins, default=float("nan"))}
        item = {"id": SMOOTH_UNSTABLE, "subject": obj, "deciding": deciding}
        if stable:
            items.append({**item, "verdict": "not supported",
                          "reason": f"{len(stable)} of {len(rows)} strictly stable (an open set of states): "
                                    + ", ".join(s.get("label", "?") for s in stable[:5])})
        elif len(unstable) == len(rows):
            items.append({**item, "verdict": "supported", "reason": f"all {len(rows)} strictly unstable"})
        else:
            items.append({**item, "verdict": "inconclusive",
                          "reason": f"{len(rows) - len(unstable)} of {len(rows)} degenerate (|lambda_min| <= tol)"})
    if not items:
        items.append({"id": SMOOTH_UNSTABLE, "deciding": {"equilibria": 0}, "verdict": "premise violated",
                      "reason": "no certified smooth-head collapsed equilibrium"})
    return items


def rho_zero_bound(state: Mapping) -> float:
    """The bound of the stationarity rule: ``max(rho_tol * rho_ref, sqrt(eps) max(1, |L|))``."""
    rho_tol = float(claims.CLAIMS[RHO_ZERO].thresholds["rho_tol"])
    return max(rho_tol * state["rho_ref"], state["residual_tol"])


def rho_zero_full_row_rank(state: Mapping) -> bool:
    """The stationarity rule's premise: ``dh(c)/dtheta`` (``k x P``) has full row rank,
    ``sigma_min > sqrt(eps) max(k, P) sigma_max`` (``eps`` the float64 epsilon; ``k > P`` never holds it).

    ``state``: ``{"jac_sigma_min", "jac_sigma_max", "jac_rows": k, "jac_cols": P}``
    (:func:`experiments.stationary_heads.head_jacobian_singular_values`). A dead head (``dh/dtheta = 0``,
    ``sigma_max = 0``) fails it.

    Raises:
      ValueError: a singular value not finite or negative, or ``k``/``P`` not positive (named).
    """
    s_min, s_max = float(state["jac_sigma_min"]), float(state["jac_sigma_max"])
    k, P = int(state["jac_rows"]), int(state["jac_cols"])
    if not (np.isfinite(s_min) and np.isfinite(s_max) and 0.0 <= s_min <= s_max):
        raise ValueError(f"jac_sigma_min and jac_sigma_max must be finite with 0 <= min <= max; got {s_min!r}, "
                         f"{s_max!r} ({state.get('label', '?')}).")
    if k < 1 or P < 1:
        raise ValueError(f"jac_rows and jac_cols must be positive; got k = {k}, P = {P} ({state.get('label', '?')}).")
    eps = float(np.finfo(np.float64).eps)
    return bool(k <= P and s_min > np.sqrt(eps) * max(k, P) * s_max)


def decide_rho_zero(states: Sequence[Mapping]) -> dict:
    """Apply the stationarity rule (:data:`experiments.claims.CLAIMS` ``["stationarity-forces-rho-zero"]``).

    ``states``: ``[{"label", "family", "stationary", "rho", "rho_ref", "residual_tol", "jac_sigma_min",
    "jac_sigma_max", "jac_rows", "jac_cols"}]``, one per collapsed state after the head was driven to
    stationarity: ``stationary`` is the rule's ``|grad_theta L| <= sqrt(eps) |dh/dtheta|_2 rho_ref``, ``rho``
    the residual norm there, ``rho_ref`` the residual norm with the head perturbed, ``residual_tol`` the
    certificate's ``sqrt(eps) max(1, |L|)``, the ``jac_*`` the extreme singular values and shape of
    ``dh(c)/dtheta`` at that head. A state whose ``dh(c)/dtheta`` is not of full row rank
    (:func:`rho_zero_full_row_rank`) is premise violated for that state: reported, never counted. Counted:
    premise held and stationary. ``premise violated`` when no state holds the premise, ``inconclusive`` when
    some do but none is counted, else ``not supported`` if a counted state has ``rho`` above
    :func:`rho_zero_bound`, ``supported`` if none has.
    """
    full = [s for s in states if rho_zero_full_row_rank(s)]
    violated = [s for s in states if not rho_zero_full_row_rank(s)]
    counted = [s for s in full if s["stationary"]]
    bad = [s for s in counted if s["rho"] > rho_zero_bound(s)]
    ratios = [s["rho"] / s["rho_ref"] for s in counted if s["rho_ref"] > s["residual_tol"]]  # rho_ref not round-off
    rank_ratios = [s["jac_sigma_min"] / s["jac_sigma_max"] for s in counted]
    deciding = {"collapsed_states": len(states), "premise_violated_not_full_row_rank": len(violated),
                "head_stationary_full_rank": len(counted), "with_rho_above_bound": len(bad),
                "max_rho_over_rho_ref": max(ratios, default=float("nan")),
                "min_sigma_min_over_sigma_max_counted": min(rank_ratios, default=float("nan")),
                **{f"head_stationary_full_rank_{f}": sum(s["family"] == f for s in counted)
                   for f in sorted({s["family"] for s in states})}}
    item = {"id": RHO_ZERO, "deciding": deciding}
    excluded = ("" if not violated else f"; premise violated (dh/dtheta not of full row rank) at {len(violated)}, "
                "not counted: " + ", ".join(s.get("label", "?") for s in violated[:5]))
    if states and not full:
        return {**item, "verdict": "premise violated",
                "reason": f"dh/dtheta is not of full row rank at any of the {len(states)} collapsed states{excluded}"}
    if not counted:
        return {**item, "verdict": "inconclusive",
                "reason": f"none of {len(full)} collapsed states with full-row-rank dh/dtheta (of {len(states)}) "
                          f"reached head stationarity{excluded}"}
    if bad:
        return {**item, "verdict": "not supported",
                "reason": f"{len(bad)} head-stationary collapsed states with full-row-rank dh/dtheta and |rho| above "
                          "the bound: " + ", ".join(s.get("label", "?") for s in bad[:5]) + excluded}
    return {**item, "verdict": "supported",
            "reason": f"all {len(counted)} head-stationary collapsed states with full-row-rank dh/dtheta (of "
                      f"{len(states)}) have rho = 0 (max |rho| / rho_ref {deciding['max_rho_over_rho_ref']:.3g})"
                      + excluded}
