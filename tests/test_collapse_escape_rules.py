"""Experiment 4 (collapse_escape): the rate window of ``linearised-rate-prediction`` and the rules of
``linearised-rate-prediction`` and ``finite-step-escape`` on hand-made linear systems and run rows."""

import math

import numpy as np
import pytest

from experiments import claims
from experiments.collapse_escape import runs as R
from experiments.collapse_escape import verdict as V
from ssl_geometry import dynamics

RATES = claims.CLAIMS["linearised-rate-prediction"].thresholds
FINITE = claims.CLAIMS["finite-step-escape"].thresholds


def _two_mode_flow(ts, lam=(0.3, -0.2), a=(1e-6, 1e-4)):
    """``J = diag(lam)``, ``O = I``: the exact solution's spread and deviation, and its modal split."""
    J, O, d0 = np.diag(lam), np.eye(2), np.asarray(a)
    delta = np.exp(np.outer(ts, lam)) * d0
    spread = np.linalg.norm(delta, axis=1) / math.sqrt(2)
    return J, O, d0, spread, np.linalg.norm(delta, axis=1)


def test_rate_window_starts_where_the_subleading_mode_has_decayed_by_the_registered_factor():
    ts = np.linspace(0.0, 40.0, 401)
    J, O, d0, spread, dev = _two_mode_flow(ts)
    modes = R.linear_modes(J, O, d0, ts, lead_rtol=RATES["lead_rtol"])
    assert modes.ok and modes.rate == pytest.approx(0.3, abs=1e-15)
    # The split is exact: leading part a1 (normalised by exp(r t)), the rest a2 exp((lam2 - r) t).
    np.testing.assert_allclose(modes.lead, 1e-6 / math.sqrt(2), rtol=1e-12)
    np.testing.assert_allclose(modes.rest, 1e-4 * np.exp(-0.5 * ts) / math.sqrt(2), rtol=1e-12)
    np.testing.assert_allclose(modes.log_spread, np.log(spread), rtol=1e-12)
    k_a, k_b = R.rate_window(
        ts, modes.lead, modes.rest, spread, dev, dominance=RATES["dominance"], linear_factor=RATES["linear_factor"]
    )
    # Start: a2 exp(-0.5 t) <= dominance a1  <=>  t >= ln(a2 / (dominance a1)) / 0.5 = ln(1000) / 0.5 = 13.8155.
    t_dom = math.log(1e-4 / (RATES["dominance"] * 1e-6)) / 0.5
    assert ts[k_a] >= t_dom > ts[k_a - 1] and k_a == 139
    # End: the last save with spread <= linear_factor x spread(0) (the deviation grows alike here).
    assert spread[k_b - 1] <= RATES["linear_factor"] * spread[0] < spread[k_b]
    assert ts[k_b - 1] == pytest.approx(math.log(RATES["linear_factor"] * math.hypot(1e-6, 1e-4) / 1e-6) / 0.3, abs=0.1)
    rate, points = R.window_rate(ts, spread, (k_a, k_b), RATES["min_points"])
    assert points == k_b - k_a > 100 and rate == pytest.approx(0.3, rel=1e-3)
    # A subleading mode (0.2 against 0.3, a thousand times larger at the start) dominates until the run has left the
    # linear regime: no window (a failure to test), where the old rule's window (second half of the stretch below
    # 100 x) measured the mixture's slope, more than rate_rtol off the leading rate (and equal to the linear
    # system's own slope over that window, so the old rule counted it as agreeing).
    J2, O2, d2, s2, dev2 = _two_mode_flow(ts, lam=(0.3, 0.2), a=(1e-6, 1e-3))
    m2 = R.linear_modes(J2, O2, d2, ts, lead_rtol=RATES["lead_rtol"])
    k_a, k_b = R.rate_window(
        ts, m2.lead, m2.rest, s2, dev2, dominance=RATES["dominance"], linear_factor=RATES["linear_factor"]
    )
    assert k_a == k_b and m2.rate == pytest.approx(0.3)
    assert np.isnan(R.window_rate(ts, s2, (k_a, k_b), RATES["min_points"])[0])
    assert R.rate_run_saves(J2, O2, d2, 0.1) is None  # no window to wait for: the horizon run is measured as is
    old = R.fit_rate(ts, s2, s2[0], RATES["linear_factor"], dev=dev2)[0]
    assert old == pytest.approx(0.2, rel=0.02) and abs(old / 0.3 - 1) > RATES["rate_rtol"]
    # The leading group holds every mode within lead_rtol |r| of r: a mode at 0.29 is no "rest" to wait for.
    m3 = R.linear_modes(np.diag([0.3, 0.3 * (1 - RATES["lead_rtol"] / 2)]), O2, d2, ts, lead_rtol=RATES["lead_rtol"])
    assert np.all(m3.rest == 0.0)
    # A run whose horizon ends before that window (say at t = 5) is continued on its spacing for the rate alone:
    # to k_a + max(10 min_points, k_a // 2) = 139 + 69 saves, before the linear solution's own end (308).
    assert R.rate_run_saves(J, O, d0, 0.1) == 139 + max(10 * RATES["min_points"], 139 // 2)
    # A divergence (or a non-finite save) ends the window.
    assert R.rate_window(
        ts,
        modes.lead,
        modes.rest,
        spread,
        dev,
        dominance=RATES["dominance"],
        linear_factor=RATES["linear_factor"],
        stop=20.0,
    ) == (139, 200)
    assert R.rate_window(
        ts,
        modes.lead,
        modes.rest,
        np.where(ts < 15.0, spread, np.nan),
        dev,
        dominance=RATES["dominance"],
        linear_factor=RATES["linear_factor"],
    ) == (139, 150)
    with pytest.raises(ValueError, match="one length"):
        R.rate_window(ts[:-1], modes.lead, modes.rest, spread, dev, dominance=0.1, linear_factor=100.0)


def test_linear_modes_reproduce_the_linearised_solutions_and_the_claims_rates():
    rng = np.random.default_rng(0)
    A = rng.normal(size=(6, 6))
    J = -(A @ A.T) / 6 + 0.3 * np.eye(6)
    O, d0 = rng.normal(size=(4, 6)), 1e-3 * rng.normal(size=6)
    ts = np.linspace(0.0, 20.0, 41)
    m = R.linear_modes(J, O, d0, ts)
    np.testing.assert_allclose(m.log_spread, np.log(R.spread_rms(O, dynamics.predict_flow(J, d0, ts))), atol=1e-10)
    assert m.rate == pytest.approx(np.max(np.linalg.eigvals(J).real), abs=1e-12)
    for lr, mu in ((0.05, 0.9), (0.5, 0.9), (0.3, 0.0)):
        lr_eff = lr / (1 - mu)
        m = R.linear_modes(J, O, d0, lr_eff * np.arange(31), lr=lr, momentum=mu)
        ref = R.spread_rms(O, dynamics.predict_sgd(J, d0, lr, mu, 30))
        np.testing.assert_allclose(m.log_spread, np.log(ref), atol=1e-10)
        assert m.rate == pytest.approx(math.log(dynamics.sgd_growth(J, lr, mu, observable=O)) / lr_eff, rel=1e-12)
        assert m.rest[-1] < m.rest[0] * m.lead[-1] / m.lead[0]  # the non-leading part decays against the leading one


def test_sgd_at_110x_per_step_has_no_window_under_the_registered_linear_factor():
    # One mode at 110x per step (momentum 0.9): the spread passes linear_factor x its start within two steps of
    # the leading root's dominance, so the window holds fewer than min_points steps -- a failure to test.
    lr, mu = 0.5, 0.9
    lam = ((110 - 1) * (1 - mu / 110)) / lr  # root x = 110 of x^2 - (1 + mu + lr lam) x + mu = 0
    J, O, d0 = np.diag([lam, -0.1]), np.eye(2), np.array([1e-6, 1e-6])
    ts = lr / (1 - mu) * np.arange(8)
    m = R.linear_modes(J, O, d0, ts, lr=lr, momentum=mu)
    assert math.exp(m.rate * lr / (1 - mu)) == pytest.approx(110.0, rel=1e-9)
    spread = np.exp(m.log_spread)
    k_a, k_b = R.rate_window(
        ts, m.lead, m.rest, spread, spread * 3.0, dominance=RATES["dominance"], linear_factor=RATES["linear_factor"]
    )
    assert k_b - k_a < RATES["min_points"]
    row = _row("linear", "sgd", 4.0, "escaped", lr=lr, predicted=m.rate, measured=float("nan"), rate_points=k_b - k_a)
    assert V.rate_agreement(row, V.rate_scales([row])) == "no window"


def _row(kind, dyn, tau, outcome, *, growth=None, seed=0, lr=0.0, measured=0.2, predicted=0.2, **kw):
    base = {
        "representation": "free",
        "objective": "mse",
        "activation": kind,
        "seed": seed,
        "head_kind": kind,
        "dynamics": dyn,
        "tau": tau,
        "lr": lr,
        "certified": True,
        "state_premises": True,
        "outcome": outcome,
        "growth": growth if growth is not None else {"escaped": 100.0, "stayed": 1.0, "grew": 3.0}.get(outcome, 1.0),
        "measured_rate": measured,
        "predicted_rate": predicted,
        "rate_points": 50,
        "jacobian_scale": 2.0,
    }
    return {**base, **kw}


def _rates(rows):
    return V.decide_rates(rows)


def test_rates_rule_each_outcome_and_failures_to_test_count_against():
    agree = [_row("smooth", "flow", 4.0, "escaped", seed=s, measured=0.21, predicted=0.2) for s in range(4)]
    d = _rates(agree)
    assert d["verdict"] == "supported" and d["deciding"]["agree_fraction"] == 1.0
    assert d["deciding"]["ratio_min_above_floor"] == pytest.approx(1.05)
    # One run without a window among four that agree: 4/5 = 0.8 agree, still supported; with three, 3/4 = 0.75:
    # inconclusive -- the run without a window is counted, not dropped (dropped, 3/3 would be "supported").
    nowin = _row("linear", "sgd", 4.0, "escaped", lr=0.5, seed=9, measured=float("nan"), predicted=0.9, rate_points=2)
    d = _rates(agree + [nowin])
    assert d["verdict"] == "supported" and d["deciding"]["no_window"] == 1 and d["deciding"]["agree_fraction"] == 0.8
    d = _rates(agree[:3] + [nowin])
    assert d["verdict"] == "inconclusive" and d["deciding"]["agree_fraction"] == 0.75
    assert d["deciding"]["runs"] == 4 and d["deciding"]["no_window_sgd"] == 1
    # Fewer than half agree (two runs without a window, one off by 40%): not supported.
    off = _row("smooth", "flow", 1.0, "escaped", seed=5, measured=0.28, predicted=0.2)
    d = _rates(agree[:1] + [nowin, {**nowin, "seed": 8}, off])
    assert d["verdict"] == "not supported" and d["deciding"]["agree_fraction"] == 0.25
    assert d["deciding"]["misses_beyond_factor_2"] == 0
    # A factor-2 miss keeps 4 of 5 agreeing runs from "supported"; the rate is the claim's r, not a window slope.
    miss = _row("smooth", "flow", 100.0, "escaped", seed=6, measured=0.09, predicted=0.2, predicted_rate_window=0.09)
    d = _rates(agree + [miss])
    assert d["verdict"] == "inconclusive" and d["deciding"]["misses_beyond_factor_2"] == 1
    assert V.rate_ratio(miss) == pytest.approx(0.45)
    # Opposite sign (measured -0.035 against a leading +4.44): a miss.
    assert V.rate_agreement(_row("linear", "sgd", 4.0, "diverged", measured=-0.035, predicted=4.44), {}) == "miss"
    # Both below rate_floor x the state's largest |r|: agreement whatever the ratio.
    small = [
        _row("linear", "flow", 0.0, "stayed", measured=1e-5, predicted=-1e-5),
        _row("linear", "flow", 100.0, "escaped", predicted=0.2),
    ]
    assert V.rate_agreement(small[0], V.rate_scales(small)) == "agree"
    assert _rates([])["verdict"] == "inconclusive"


def _finite(rows):
    return V.decide_finite_step(rows)


def test_finite_step_rule_each_outcome_with_a_flow_that_must_stay():
    stays = _row("linear", "flow", 4.0, "stayed", growth=1.2, predicted=-0.01)
    esc = _row("linear", "sgd", 4.0, "escaped", lr=0.5, growth=50.0)
    d = _finite([stays, esc])
    assert d["verdict"] == "supported" and d["deciding"]["escaped"] == 1
    assert d["deciding"]["counted_at_controlled_states"] == 1
    # A flow that grows is no control, even below no_growth when its linearised rate is positive; SGD escape from
    # such a state is excluded (no controlled state: inconclusive).
    for flow in (
        {**stays, "outcome": "grew", "growth": 5.0, "predicted_rate": 0.2},
        {**stays, "predicted_rate": 0.05},
        {**stays, "predicted_rate": 1e-6},
    ):  # above control_rate_tol x max|lambda(J)| = 2e-8
        d = _finite([flow, esc])
        assert d["verdict"] == "inconclusive" and d["deciding"]["excluded_flow_not_staying"] == 1
        assert d["deciding"]["excluded_escaped"] == 1 and d["deciding"]["escaped"] == 0
    assert not V.flow_control({**stays, "growth": FINITE["no_growth"] + 0.01})
    assert V.flow_control({**stays, "predicted_rate": 0.5 * FINITE["control_rate_tol"] * stays["jacobian_scale"]})
    # A diverged SGD run at a controlled state is reported apart and is not support.
    div = {**esc, "outcome": "diverged", "growth": 1e9}
    d = _finite([stays, div])
    assert d["verdict"] == "inconclusive" and d["deciding"]["diverged"] == 1 and "diverged" in d["reason"]
    # Every SGD run at controlled states ends finite without escaping: not supported.
    d = _finite(
        [stays, {**esc, "outcome": "stayed", "growth": 0.9}, {**esc, "lr": 0.05, "outcome": "grew", "growth": 4.0}]
    )
    assert d["verdict"] == "not supported" and d["deciding"]["finite_without_escape"] == 2
    # Smooth heads and premise-violating states are not counted at all.
    assert _finite([{**stays, "head_kind": "smooth"}, {**esc, "head_kind": "smooth"}])["deciding"]["runs"] == 0
    assert _finite([])["verdict"] == "inconclusive"


def test_rate_window_of_a_decaying_spread_ends_at_the_registered_decay_floor():
    """A stable flow (J = diag(-0.5, -2)) decays for ever: its window closes where spread < decay_floor x spread(0),
    so a spread at float64 resolution (the roundoff floor of a 1e-5 |c| perturbation) is never read as a rate."""
    ts = np.linspace(0.0, 60.0, 601)
    J, O, d0, spread, dev = _two_mode_flow(ts, lam=(-0.5, -2.0), a=(1.0, 1.0))
    modes = R.linear_modes(J, O, d0, ts, lead_rtol=RATES["lead_rtol"])
    assert modes.ok and modes.rate == pytest.approx(-0.5, abs=1e-15)
    k_a, k_b = R.rate_window(
        ts,
        modes.lead,
        modes.rest,
        spread,
        dev,
        dominance=RATES["dominance"],
        linear_factor=RATES["linear_factor"],
        decay_floor=RATES["decay_floor"],
    )
    assert RATES["decay_floor"] == 1e-6
    assert spread[k_b - 1] >= 1e-6 * spread[0] > spread[k_b]
    # spread(t) / spread(0) -> exp(-0.5 t) / sqrt(2) once the -2 mode is gone: the floor at t = 2 ln(1e6 / sqrt 2).
    assert ts[k_b - 1] < 2 * math.log(1e6 / math.sqrt(2)) < ts[k_b]
    rate, points = R.window_rate(ts, spread, (k_a, k_b), int(RATES["min_points"]))
    assert rate == pytest.approx(-0.5, rel=1e-3) and points == k_b - k_a
    # Without the floor the window runs to the end of the saves, where a real run's spread is roundoff.
    assert R.rate_window(
        ts, modes.lead, modes.rest, spread, dev, dominance=RATES["dominance"], linear_factor=RATES["linear_factor"]
    )[1] == len(ts)
