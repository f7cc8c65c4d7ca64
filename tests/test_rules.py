"""The shared rules (experiments/rules.py) on hand-made inputs for which each verdict must come out."""

import numpy as np
import pytest

from experiments import rules


def _ratio(D, lo, hi):
    return {"D": D, "lo": lo, "hi": hi}


def _aug(trained, untrained=1.0, width=0.05):
    return {
        "trained": {c: _ratio(trained, trained - width, trained + width) for c in rules.SEC5_RATIO_CONTROLS},
        "untrained": {c: _ratio(untrained, untrained - width, untrained + width) for c in rules.SEC5_RATIO_CONTROLS},
    }


COMPRESS, EXPAND = {"S": 3.0, "lo": 2.0, "hi": 4.0}, {"S": 0.7, "lo": 0.6, "hi": 0.8}
# S / S_0 (rules.orbit_gain_over_untrained): beyond the untrained head's compression, or below it
BEATS_UNTRAINED, BELOW_UNTRAINED = {"S": 2.0, "lo": 1.5, "hi": 2.5}, {"S": 0.14, "lo": 0.1, "hi": 0.2}


@pytest.mark.parametrize(
    "augs, orbits, negative, premises, expected",
    [
        ({"rotation": _aug(0.5)}, COMPRESS, {"blur": _aug(1.2)}, {"loss_fell": True}, "supported"),
        (
            {"rotation": _aug(0.5)},
            COMPRESS,
            {"blur": _aug(0.5)},
            {"loss_fell": True},
            "inconclusive",
        ),  # negative passes
        (
            {"rotation": _aug(0.5, untrained=0.4)},
            COMPRESS,
            None,
            {"loss_fell": True},
            "inconclusive",
        ),  # untrained lower
        ({"rotation": _aug(0.5)}, EXPAND, None, {"loss_fell": True}, "not supported"),  # orbits expand
        ({"rotation": _aug(1.3)}, COMPRESS, None, {"loss_fell": True}, "not supported"),  # ratio >= 1 with confidence
        ({"rotation": _aug(0.5)}, None, None, {"loss_fell": True}, "inconclusive"),  # no orbits: cannot confirm
        ({"rotation": _aug(0.5)}, COMPRESS, None, {"loss_fell": False}, "premise violated"),
        ({}, COMPRESS, None, {"loss_fell": True}, "inconclusive"),
    ],
)
def test_sec5_rule_comes_out_each_way(augs, orbits, negative, premises, expected):
    item = rules.decide_sec5(augs, orbits, negative=negative, premises=premises, orbits_vs_untrained=BEATS_UNTRAINED)
    assert item["id"] == "sec5-metric-degeneracy" and item["verdict"] == expected, item["reason"]


@pytest.mark.parametrize(
    "orbits, vs_untrained, expected, why",
    [
        (COMPRESS, BEATS_UNTRAINED, "supported", "untrained head's compression"),
        # the guillotine's smoke numbers: the untrained head compresses 5.36x, the trained one 0.77 [0.61, 1.007]
        (
            {"S": 0.77, "lo": 0.61, "hi": 1.007},
            {"S": 0.144, "lo": 0.11, "hi": 0.19},
            "inconclusive",
            "do not compress more than through the untrained head",
        ),
        (COMPRESS, BELOW_UNTRAINED, "inconclusive", "do not compress more than through the untrained head"),
        (COMPRESS, {"S": 1.1, "lo": 0.95, "hi": 1.3}, "inconclusive", "do not compress more"),  # R's interval holds 1
        (COMPRESS, None, "inconclusive", "untrained head's orbits are not measured"),  # no S_0: cannot confirm
        (EXPAND, BEATS_UNTRAINED, "not supported", "orbits expand"),
    ],
)
def test_sec5_orbits_must_beat_the_untrained_head(orbits, vs_untrained, expected, why):
    item = rules.decide_sec5(
        {"rotation": _aug(0.5)}, orbits, negative={"blur": _aug(1.2)}, premises={}, orbits_vs_untrained=vs_untrained
    )
    assert item["verdict"] == expected and why in item["reason"], item["reason"]
    if vs_untrained is not None:
        assert item["deciding"]["orbit_compression_over_untrained"] == vs_untrained["S"]
        assert item["deciding"]["orbit_compression_over_untrained_ci"] == [vs_untrained["lo"], vs_untrained["hi"]]


def test_orbit_gain_over_untrained_is_the_ratio_of_the_two_compressions():
    rng = np.random.default_rng(1)
    sz, sh = rng.uniform(1.0, 2.0, 30), rng.uniform(0.1, 0.2, 30)
    sh0 = 2.0 * sh * np.exp(rng.normal(0, 0.05, 30))  # the untrained head: about twice the trained head's spread
    r = rules.orbit_gain_over_untrained(sh, sh0)
    s, s0 = rules.orbit_compression(sz, sh), rules.orbit_compression(sz, sh0)
    assert r["S"] == pytest.approx(s["S"] / s0["S"], rel=1e-12) and r["S"] == pytest.approx(2.0, rel=0.05)
    assert 1.0 < r["lo"] < r["S"] < r["hi"]


def test_one_control_failing_is_enough_to_refute():
    aug = _aug(0.5)
    aug["trained"]["between"] = _ratio(1.1, 1.02, 1.2)
    assert (
        rules.decide_sec5({"rotation": aug}, COMPRESS, premises={}, orbits_vs_untrained=BEATS_UNTRAINED).get("verdict")
        == "not supported"
    )


def test_degeneracy_ratio_and_orbit_compression_estimators():
    rng = np.random.default_rng(0)
    g_c = rng.uniform(1.0, 2.0, 400)
    r = rules.degeneracy_ratio(0.5 * g_c, g_c)  # every sample contracted by exactly 1/2
    assert r["D"] == pytest.approx(0.5) and r["lo"] == pytest.approx(0.5) and r["hi"] == pytest.approx(0.5)
    noisy = rules.degeneracy_ratio(g_c * np.exp(rng.normal(0, 0.3, 400)), g_c)
    assert noisy["lo"] < noisy["D"] < noisy["hi"] and noisy["lo"] < 1.0 < noisy["hi"]
    s = rules.orbit_compression(np.full(10, 4.0) + rng.normal(0, 0.1, 10), np.full(10, 2.0))
    assert s["S"] == pytest.approx(2.0, rel=0.05) and s["lo"] > 1.5
    with pytest.raises(ValueError, match="pair samples"):
        rules.degeneracy_ratio([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="positive"):
        rules.degeneracy_ratio([0.0, 1.0], [1.0, 1.0])


def test_thm41_rules_per_objective_and_the_meaning_of_generically():
    eq = lambda obj, lam, tol=1e-9, m=-1.0: {"objective": obj, "lambda_min": lam, "tol": tol, "lambda_min_M": m}
    items = {
        i["subject"]: i
        for i in rules.decide_smooth_unstable(
            [eq("mse", -0.1), eq("mse", -0.2), eq("dino", -0.1), eq("dino", 0.02), eq("x", -0.1), eq("x", 1e-12)]
        )
    }
    assert items["mse"]["verdict"] == "supported"
    assert items["dino"]["verdict"] == "not supported"  # one strictly stable state: an open set, not generic
    assert items["x"]["verdict"] == "inconclusive"  # a degenerate state: what a measure-zero exception looks like
    assert items["dino"]["deciding"]["max_margin_lambda_min_over_abs_lambda_min_M"] == pytest.approx(0.02)
    assert rules.decide_smooth_unstable([])[0]["verdict"] == "premise violated"
    assert rules.decide_linear_psd([{"lambda_min": 0.0, "tol": 1e-9}])["verdict"] == "supported"
    assert rules.decide_linear_psd([{"lambda_min": -1e-3, "tol": 1e-9}])["verdict"] == "not supported"
    assert rules.decide_linear_psd([])["verdict"] == "premise violated"


def _rho_state(rho, ref=1.0, stat=True, tol=1e-8, s_min=0.5, s_max=2.0, k=4, P=20, label="x"):
    """A hand-made collapsed state as decide_rho_zero reads it (dh(c)/dtheta: k x P, singular values s_min..s_max)."""
    return {
        "label": label,
        "family": "siamese",
        "stationary": stat,
        "rho": rho,
        "rho_ref": ref,
        "residual_tol": tol,
        "jac_sigma_min": s_min,
        "jac_sigma_max": s_max,
        "jac_rows": k,
        "jac_cols": P,
    }


def test_stationarity_rule_counts_stationary_heads_and_bounds_rho_by_the_perturbed_residual():
    st = _rho_state
    ok = rules.decide_rho_zero([st(1e-12), st(0.0, ref=0.0)])
    assert ok["verdict"] == "supported" and ok["deciding"]["head_stationary_full_rank"] == 2
    assert ok["deciding"]["min_sigma_min_over_sigma_max_counted"] == pytest.approx(0.25)
    # rho above max(rho_tol * rho_ref, residual_tol) at a stationary full-rank head refutes the finding
    bad = rules.decide_rho_zero([st(1e-12), st(1e-3, ref=1.0, label="bad")])
    assert bad["verdict"] == "not supported" and bad["deciding"]["with_rho_above_bound"] == 1 and "bad" in bad["reason"]
    # a head that never reached stationarity does not count, whatever its rho
    assert rules.decide_rho_zero([st(1.0, stat=False)])["verdict"] == "inconclusive"
    assert rules.decide_rho_zero([])["verdict"] == "inconclusive"
    assert rules.rho_zero_bound(st(0.0, ref=2.0, tol=1e-9)) == pytest.approx(2e-6)
    assert rules.rho_zero_bound(st(0.0, ref=1e-12, tol=1e-9)) == 1e-9


def test_stationarity_rule_excludes_heads_whose_jacobian_is_not_of_full_row_rank():
    st = _rho_state
    # the committed violator: a dead head (dh/dtheta = 0) is "stationary" (0 <= 0) with rho = 2e7
    dead = st(2e7, ref=2e7, s_min=0.0, s_max=0.0, label="simsiam/relu")
    d = rules.decide_rho_zero([dead])
    assert d["verdict"] == "premise violated" and d["deciding"]["premise_violated_not_full_row_rank"] == 1
    assert "simsiam/relu" in d["reason"]
    # beside a full-rank state with rho = 0 it is reported, not counted: the finding is supported
    d = rules.decide_rho_zero([dead, st(1e-12)])
    assert d["verdict"] == "supported" and d["deciding"]["head_stationary_full_rank"] == 1
    assert d["deciding"]["premise_violated_not_full_row_rank"] == 1 and "simsiam/relu" in d["reason"]
    # beside a full-rank state that is not stationary: nothing counted, inconclusive (not premise violated)
    assert rules.decide_rho_zero([dead, st(1.0, stat=False)])["verdict"] == "inconclusive"
    # the tolerance: sigma_min / sigma_max against sqrt(eps) max(k, P) = 1.49e-8 * 20 = 2.98e-7
    tol = np.sqrt(np.finfo(np.float64).eps) * 20
    assert rules.rho_zero_full_row_rank(st(0.0, s_min=2.0 * tol, s_max=1.0))
    assert not rules.rho_zero_full_row_rank(st(0.0, s_min=0.5 * tol, s_max=1.0))
    assert not rules.rho_zero_full_row_rank(st(0.0, k=30, P=20))  # k > P: rank <= P < k
    rank_deficient = st(1e-3, s_min=0.5 * tol, s_max=1.0, label="deficient")  # rho above the bound, not counted
    assert rules.decide_rho_zero([rank_deficient, st(1e-12)])["verdict"] == "supported"
    with pytest.raises(ValueError, match="jac_sigma_min"):
        rules.rho_zero_full_row_rank(st(0.0, s_min=float("nan")))
    with pytest.raises(ValueError, match="jac_rows"):
        rules.rho_zero_full_row_rank(st(0.0, k=0))
