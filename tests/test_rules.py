"""The shared rules (experiments/rules.py) on hand-made inputs for which each verdict must come out."""
import numpy as np
import pytest

from experiments import rules


def _ratio(D, lo, hi):
    return {"D": D, "lo": lo, "hi": hi}


def _aug(trained, untrained=1.0, width=0.05):
    return {"trained": {c: _ratio(trained, trained - width, trained + width) for c in rules.SEC5_RATIO_CONTROLS},
            "untrained": {c: _ratio(untrained, untrained - width, untrained + width) for c in rules.SEC5_RATIO_CONTROLS}}


COMPRESS, EXPAND = {"S": 3.0, "lo": 2.0, "hi": 4.0}, {"S": 0.7, "lo": 0.6, "hi": 0.8}


@pytest.mark.parametrize("augs, orbits, negative, premises, expected", [
    ({"rotation": _aug(0.5)}, COMPRESS, {"blur": _aug(1.2)}, {"loss_fell": True}, "supported"),
    ({"rotation": _aug(0.5)}, COMPRESS, {"blur": _aug(0.5)}, {"loss_fell": True}, "inconclusive"),  # negative passes
    ({"rotation": _aug(0.5, untrained=0.4)}, COMPRESS, None, {"loss_fell": True}, "inconclusive"),  # untrained lower
    ({"rotation": _aug(0.5)}, EXPAND, None, {"loss_fell": True}, "not supported"),  # orbits expand
    ({"rotation": _aug(1.3)}, COMPRESS, None, {"loss_fell": True}, "not supported"),  # ratio >= 1 with confidence
    ({"rotation": _aug(0.5)}, None, None, {"loss_fell": True}, "inconclusive"),  # no orbits: cannot confirm
    ({"rotation": _aug(0.5)}, COMPRESS, None, {"loss_fell": False}, "premise violated"),
    ({}, COMPRESS, None, {"loss_fell": True}, "inconclusive"),
])
def test_sec5_rule_comes_out_each_way(augs, orbits, negative, premises, expected):
    item = rules.decide_sec5(augs, orbits, negative=negative, premises=premises)
    assert item["id"] == "sec5-metric-degeneracy" and item["verdict"] == expected, item["reason"]


def test_one_control_failing_is_enough_to_refute():
    aug = _aug(0.5)
    aug["trained"]["between"] = _ratio(1.1, 1.02, 1.2)
    assert rules.decide_sec5({"rotation": aug}, COMPRESS, premises={}).get("verdict") == "not supported"


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
    items = {i["subject"]: i for i in rules.decide_smooth_unstable(
        [eq("mse", -0.1), eq("mse", -0.2), eq("dino", -0.1), eq("dino", 0.02), eq("x", -0.1), eq("x", 1e-12)])}
    assert items["mse"]["verdict"] == "supported"
    assert items["dino"]["verdict"] == "not supported"  # one strictly stable state: an open set, not generic
    assert items["x"]["verdict"] == "inconclusive"  # a degenerate state: what a measure-zero exception looks like
    assert items["dino"]["deciding"]["max_margin_lambda_min_over_abs_lambda_min_M"] == pytest.approx(0.02)
    assert rules.decide_smooth_unstable([])[0]["verdict"] == "premise violated"
    assert rules.decide_linear_psd([{"lambda_min": 0.0, "tol": 1e-9}])["verdict"] == "supported"
    assert rules.decide_linear_psd([{"lambda_min": -1e-3, "tol": 1e-9}])["verdict"] == "not supported"
    assert rules.decide_linear_psd([])["verdict"] == "premise violated"


def test_stationarity_rule_counts_stationary_heads_and_bounds_rho_by_the_perturbed_residual():
    st = lambda rho, ref=1.0, stat=True, tol=1e-8: {"label": "x", "family": "siamese", "stationary": stat,  # noqa: E731
                                                    "rho": rho, "rho_ref": ref, "residual_tol": tol}
    assert rules.decide_rho_zero([st(1e-12), st(0.0, ref=0.0)])["verdict"] == "supported"
    # rho above max(rho_tol * rho_ref, residual_tol) at a stationary head refutes the finding
    bad = rules.decide_rho_zero([st(1e-12), st(1e-3, ref=1.0)])
    assert bad["verdict"] == "not supported" and bad["deciding"]["with_rho_above_bound"] == 1
    # a head that never reached stationarity does not count, whatever its rho
    assert rules.decide_rho_zero([st(1.0, stat=False)])["verdict"] == "inconclusive"
    assert rules.rho_zero_bound(st(0.0, ref=2.0, tol=1e-9)) == pytest.approx(2e-6)
    assert rules.rho_zero_bound(st(0.0, ref=1e-12, tol=1e-9)) == 1e-9
