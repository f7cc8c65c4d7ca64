"""thm4.1-rank-predicts-stability: the rank of J(c) predicted from the head and c, and the rule on hand-made rows.

experiments/collapse_hessians/widths.py; docs/theory.md, section
"Thm 4.1 repaired: when a collapsed equilibrium is unstable", parts (c) and (d).
"""

import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import claims
from experiments.collapse_hessians import width_report as WR
from experiments.collapse_hessians import widths as W
from experiments.configs import collapse_hessians as config_module

jax.config.update("jax_enable_x64", True)

ZERO_TOL = claims.claim(W.RANK_PREDICTS_STABILITY).thresholds["zero_tol"]


def test_zero_of_sigma_prime_per_activation():
    sw, ge = W.sigma_prime_zero("swish"), W.sigma_prime_zero("gelu")
    assert sw == pytest.approx(-1.2785, abs=1e-4)
    assert ge == pytest.approx(-0.7518, abs=1e-4)
    for act, x0 in (("swish", sw), ("gelu", ge)):
        assert abs(float(W._sigma_prime(act)(jnp.asarray([x0]))[0])) < 1e-14
    assert W.sigma_prime_zero("tanh") is None
    assert W.sigma_prime_zero("sigmoid") is None
    with pytest.raises(ValueError, match="lo < hi"):
        W.sigma_prime_zero("swish", lo=1.0, hi=0.0)


@pytest.mark.parametrize(
    "d, h, n0, cls, null, sign",
    [
        (4, 12, 0, "full", 0, 1),
        (4, 12, 8, "full", 0, 1),  # n0 = h - d: still d units with sigma' != 0
        (4, 12, 9, "rank-drop", 1, -1),  # one more: rank d - 1
        (4, 4, 1, "rank-drop", 1, -1),  # h = d: one unit drops the rank
        (4, 2, 0, "bottleneck", 2, 0),  # constant rank h < d
        (4, 2, 1, "rank-drop", 3, -1),  # a bottleneck with a unit at the zero on top
    ],
)
def test_prediction_from_widths_and_units_at_zero(d, h, n0, cls, null, sign):
    p = W.predict(d, h, n0)
    assert (p["predicted_class"], p["predicted_null_dim"], p["predicted_sign"]) == (cls, null, sign)
    assert p["predicted_rank"] == d - null


def test_prediction_refuses_bad_counts():
    with pytest.raises(ValueError, match="n_zero"):
        W.predict(4, 12, 13)
    with pytest.raises(ValueError, match="n_zero"):
        W.predict(0, 12, 0)


def test_place_at_zero_hits_the_zero_exactly_and_leaves_other_units():
    key = jax.random.PRNGKey(3)
    w1 = np.asarray(jax.random.normal(key, (5, 9), jnp.float64))
    c = np.asarray(jax.random.normal(jax.random.fold_in(key, 1), (5,), jnp.float64))
    x0 = W.sigma_prime_zero("swish")
    w2 = W.place_at_zero(w1, c, [0, 4, 7], x0)
    pre = c @ w2
    np.testing.assert_allclose(pre[[0, 4, 7]], x0, rtol=0, atol=1e-14)
    np.testing.assert_array_equal(w2[:, [1, 2, 3, 5, 6, 8]], w1[:, [1, 2, 3, 5, 6, 8]])
    assert W.units_at_zero(pre, "swish", ZERO_TOL) == 3
    assert W.units_at_zero(c @ w1, "swish", ZERO_TOL) == 0
    with pytest.raises(ValueError, match="`c` must be non-zero"):
        W.place_at_zero(w1, np.zeros(5), [0], x0)
    with pytest.raises(ValueError, match="zero_tol"):
        W.units_at_zero(pre, "swish", 0.0)


def _row(
    cls,
    lam,
    *,
    null=None,
    measured_null=None,
    s_star=50.0,
    m_on_null=True,
    certified=True,
    conclusion="stable (residual below critical)",
    label="4->12->8",
):
    null = {"full": 0, "rank-drop": 1, "bottleneck": 2}[cls] if null is None else null
    construction = {"full": "random", "rank-drop": "rank_drop", "bottleneck": "bottleneck"}[cls]
    return {
        "width": label,
        "d": 4,
        "activation": "swish",
        "construction": construction,
        "seed": 0,
        "residual_scale": 0.01,
        "zero_tol": ZERO_TOL,
        "predicted_class": cls,
        "predicted_null_dim": null,
        "certified": certified,
        "conclusion": conclusion,
        "critical_scale": 0.0 if cls == "rank-drop" else s_star,
        "critical_residual": 0.01 * (0.0 if cls == "rank-drop" else s_star),
        "block_null_dims": [null if measured_null is None else measured_null] * 4,
        "m_on_null": m_on_null,
        "lambda_min_H_eff": lam,
        "eig_tol": 1e-12,
        "seconds": 1.0,
    }


# one row per outcome of the rule, with the outcome it must get
ROWS = [
    (_row("full", 3e-3), "match"),
    (_row("rank-drop", -4e-4), "match"),
    (_row("bottleneck", 1e-17), "match"),
    (_row("full", -1e-4), "sign mismatch"),  # full rank, unstable below s*
    (_row("full", 0.0), "sign mismatch"),  # full rank, degenerate below s*
    (_row("rank-drop", 2e-3), "sign mismatch"),  # rank drop with M on null(G), stable
    (_row("bottleneck", -1e-3), "sign mismatch"),  # bottleneck unstable below s*
    (_row("full", 3e-3, measured_null=1), "rank mismatch"),  # predicted full rank, G singular
    (_row("full", -1e-4, s_star=0.5), "above critical"),  # residual above s*: no sign predicted
    (_row("full", -1e-4, s_star=1.0), "above critical"),
    (_row("rank-drop", 0.0, m_on_null=False), "M zero on null(G)"),
    (_row("full", -1.0, certified=False), "not certified"),
    (_row("full", -1.0, conclusion="premise violated (G not PSD)"), "no prediction"),
]


@pytest.mark.parametrize("row, expected", ROWS)
def test_outcome_of_every_kind_of_row(row, expected):
    assert W.outcome(row) == expected


def test_rule_supported_only_when_both_sides_match():
    good = [
        r for r, o in ROWS if o in ("match", "above critical", "M zero on null(G)", "not certified", "no prediction")
    ]
    item = W.decide_rank_predicts_stability(good, ZERO_TOL)
    assert item["verdict"] == "supported"
    assert item["deciding"]["match"] == 3
    assert item["deciding"]["matched_full"] == item["deciding"]["matched_rank_drop"] == 1
    assert item["deciding"]["above_critical"] == 2


@pytest.mark.parametrize("bad", [o for o in ("sign mismatch", "rank mismatch")])
def test_rule_not_supported_names_the_mismatch(bad):
    row = next(r for r, o in ROWS if o == bad)
    rows = [ROWS[0][0], ROWS[1][0], dict(row, width="16->48->32")]
    item = W.decide_rank_predicts_stability(rows, ZERO_TOL)
    assert item["verdict"] == "not supported"
    assert "16->48->32" in item["reason"] and bad in item["reason"]


def test_rule_inconclusive_without_a_matched_rank_drop_or_full_head():
    only_full = [ROWS[0][0], ROWS[2][0], ROWS[10][0]]
    item = W.decide_rank_predicts_stability(only_full, ZERO_TOL)
    assert item["verdict"] == "inconclusive"
    assert W.decide_rank_predicts_stability([ROWS[1][0]], ZERO_TOL)["verdict"] == "inconclusive"
    assert W.decide_item({"dry_run": {}})["verdict"] == "inconclusive"


def test_rule_refuses_rows_predicted_with_another_tolerance():
    with pytest.raises(ValueError, match="zero_tol"):
        W.decide_rank_predicts_stability([dict(ROWS[0][0], zero_tol=1e-3)], ZERO_TOL)


def test_summary_fractions_and_figure(tmp_path):
    rows = [ROWS[0][0], dict(ROWS[0][0], lambda_min_H_eff=-1.0), ROWS[11][0], dict(ROWS[0][0], d=16, width="16")]
    s = {(r["width"], r["construction"]): r for r in WR.summary(rows)}
    first = s[("4->12->8", "random")]
    assert (first["heads"], first["certified"]) == (3, 2)
    assert first["stable fraction"] == 0.5 and first["unstable fraction"] == 0.5
    assert first["median r s*"] == pytest.approx(0.5)
    neck = WR.summary([dict(ROWS[2][0], critical_scale=math.inf, critical_residual=math.inf)])[0]
    assert neck["median r s*"] == math.inf and neck["degenerate fraction"] == 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. an empty legend: nothing drawn
        WR.figure({"widths": {"rows": rows}}, tmp_path)
    assert (tmp_path / "widths.png").stat().st_size > 1000
    lines = WR.report_lines({"widths": {"rows": rows, "seconds_by_width": {"4->12->8": 1.0}, "seconds": 1.0}}, "fig")
    assert any("fig/widths.png" in line for line in lines)


def test_one_small_real_width_matches_its_prediction():
    """4 -> 12 -> 8 Swish: the initialiser's head is full rank and stable at a small residual; 9 = h - d + 1 units
    at swish' = 0 drop the rank by one and make it unstable; the bottleneck 4 -> 2 -> 8 is degenerate."""
    cfg = config_module.get_config("tiny")
    key = jax.random.PRNGKey(11)
    got = {
        con: W.head_row(cfg, 4, 12, 8, "swish", con, 0, 0.01, jax.random.fold_in(key, i))
        for i, con in enumerate(W.CONSTRUCTIONS)
    }
    full, drop, neck = got["random"], got["rank_drop"], got["bottleneck"]
    assert (full["units_at_zero"], full["predicted_class"], full["block_null_dims"]) == (0, "full", [0] * 4)
    assert full["lambda_min_H_eff"] > full["eig_tol"] and full["critical_scale"] > 1
    assert (drop["units_at_zero"], drop["predicted_class"], drop["block_null_dims"]) == (9, "rank-drop", [1] * 4)
    assert drop["lambda_min_H_eff"] < -drop["eig_tol"] and drop["m_on_null"]
    assert (neck["hidden"], neck["predicted_class"], neck["block_null_dims"]) == (2, "bottleneck", [2] * 4)
    assert abs(neck["lambda_min_H_eff"]) <= neck["eig_tol"]
    assert all(r["certified"] and W.outcome(r) == "match" for r in got.values())
    assert math.isfinite(full["critical_residual"])
    assert W.head_row(cfg, 4, 12, 8, "tanh", "rank_drop", 0, 0.01, key) is None  # tanh' has no zero
