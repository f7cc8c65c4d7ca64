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
from experiments.collapse_hessians import constructions as K
from experiments.collapse_hessians import width_report as WR
from experiments.collapse_hessians import widths as W
from experiments.configs import collapse_hessians as config_module
from ssl_geometry import as_function, geometry

jax.config.update("jax_enable_x64", True)

ZERO_TOL = claims.claim(W.RANK_PREDICTS_STABILITY).thresholds["zero_tol"]


def test_zero_of_sigma_prime_per_activation():
    sw, ge = K.sigma_prime_zero("swish"), K.sigma_prime_zero("gelu")
    assert sw == pytest.approx(-1.2785, abs=1e-4)
    assert ge == pytest.approx(-0.7518, abs=1e-4)
    for act, x0 in (("swish", sw), ("gelu", ge)):
        assert abs(float(K._sigma_prime(act)(jnp.asarray([x0]))[0])) < 1e-14
    assert K.sigma_prime_zero("tanh") is None
    assert K.sigma_prime_zero("sigmoid") is None
    with pytest.raises(ValueError, match="lo < hi"):
        K.sigma_prime_zero("swish", lo=1.0, hi=0.0)


@pytest.mark.parametrize(
    "d, h, n0, cls, null, sign",
    [
        (4, 12, 0, "full", 0, 1),
        (4, 12, 8, "full", 0, 1),  # n0 = h - d: still d units with sigma' != 0
        (4, 12, 9, "rank-drop", 1, -1),  # one more: rank d - 1
        (4, 4, 1, "rank-drop", 1, -1),  # h = d: one unit drops the rank
        (4, 2, 0, "bottleneck", 2, 0),  # constant rank h < d
        (4, 2, 1, "rank-drop", 3, -1),  # a bottleneck with a unit at the zero on top
        # the composed head d -> h -> k -> p -> k: hidden widths (h, p), units at the zero per layer
        (4, (12, 4), (0, 0), "full", 0, 1),
        (4, (12, 4), (0, 1), "rank-drop", 1, -1),  # p = d: one predictor unit drops the rank
        (4, (12, 6), (0, 2), "full", 0, 1),  # p - d = 2 units: still d units with sigma' != 0
        (4, (12, 6), (0, 3), "rank-drop", 1, -1),
        (4, (12, 4), (9, 0), "rank-drop", 1, -1),  # h - d + 1 projector units
        (4, (12, 4), (9, 2), "rank-drop", 2, -1),  # the narrower layer sets the rank: min(12 - 9, 4 - 2)
        (4, (2, 4), (0, 0), "bottleneck", 2, 0),  # a projector bottleneck: h = g(A z), constant rank
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
    with pytest.raises(ValueError, match="n_zero"):
        W.predict(4, (12, 4), (0,))  # one count for two layers
    with pytest.raises(ValueError, match="narrower than d"):
        W.predict(4, (12, 3), (0, 0))  # a later layer narrower than d: its null space moves with c


def test_place_at_zero_hits_the_zero_exactly_and_leaves_other_units():
    key = jax.random.PRNGKey(3)
    w1 = np.asarray(jax.random.normal(key, (5, 9), jnp.float64))
    c = np.asarray(jax.random.normal(jax.random.fold_in(key, 1), (5,), jnp.float64))
    x0 = K.sigma_prime_zero("swish")
    w2 = K.place_at_zero(w1, c, [0, 4, 7], x0)
    pre = c @ w2
    np.testing.assert_allclose(pre[[0, 4, 7]], x0, rtol=0, atol=1e-14)
    np.testing.assert_array_equal(w2[:, [1, 2, 3, 5, 6, 8]], w1[:, [1, 2, 3, 5, 6, 8]])
    assert K.units_at_zero(pre, "swish", ZERO_TOL) == 3
    assert K.units_at_zero(c @ w1, "swish", ZERO_TOL) == 0
    with pytest.raises(ValueError, match="`c` must be non-zero"):
        K.place_at_zero(w1, np.zeros(5), [0], x0)
    with pytest.raises(ValueError, match="zero_tol"):
        K.units_at_zero(pre, "swish", 0.0)


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
        con: W.head_row(cfg, (4, 12, 8), "swish", con, 0, 0.01, jax.random.fold_in(key, i))
        for i, con in enumerate(K.ONE_LAYER)
    }
    full, drop, neck = got["random"], got["rank_drop"], got["bottleneck"]
    assert (full["units_at_zero"], full["predicted_class"], full["block_null_dims"]) == ([0], "full", [0] * 4)
    assert full["lambda_min_H_eff"] > full["eig_tol"] and full["critical_scale"] > 1
    assert (drop["units_at_zero"], drop["predicted_class"], drop["block_null_dims"]) == ([9], "rank-drop", [1] * 4)
    assert drop["lambda_min_H_eff"] < -drop["eig_tol"] and drop["m_on_null"]
    assert (neck["hidden"], neck["predicted_class"], neck["block_null_dims"]) == ([2], "bottleneck", [2] * 4)
    assert abs(neck["lambda_min_H_eff"]) <= neck["eig_tol"]
    assert all(r["certified"] and W.outcome(r) == "match" for r in got.values())
    assert math.isfinite(full["critical_residual"])
    assert W.head_row(cfg, (4, 12, 8), "tanh", "rank_drop", 0, 0.01, key) is None  # tanh' has no zero


# ----------------------------------------------------------------------------- the composed SimSiam head, part (d)

_logistic = lambda x: 1 / (1 + np.exp(-x))
_Phi = lambda x: 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
_phi = lambda x: np.exp(-0.5 * x**2) / math.sqrt(2 * math.pi)
# independent of the library: each activation and its derivative written out (GELU: the erf form)
_SIGMA = {"swish": lambda x: x * _logistic(x), "gelu": lambda x: x * _Phi(x), "tanh": np.tanh}
_SIGMA_PRIME = {
    "swish": lambda x: _logistic(x) * (1 + x * (1 - _logistic(x))),
    "gelu": lambda x: _Phi(x) + x * _phi(x),
    "tanh": lambda x: 1 - np.tanh(x) ** 2,
}


def _numpy_jacobian(variables, c, act):
    """``J(c) = V2^T diag(sigma'(b)) V1^T W2^T diag(sigma'(a)) W1^T`` in numpy, from the weights (rows: outputs)."""
    (w1, w2), (v1, v2) = [[np.asarray(layer["w"]) for layer in variables["params"][i]["layers"]] for i in ("0", "1")]
    c = np.asarray(c)
    a = c @ w1
    y = _SIGMA[act](a) @ w2
    b = y @ v1
    jac = v2.T @ np.diag(_SIGMA_PRIME[act](b)) @ v1.T @ w2.T @ np.diag(_SIGMA_PRIME[act](a)) @ w1.T
    return jac, a, b


@pytest.mark.parametrize("act", ["swish", "gelu"])
def test_the_composed_rank_drop_places_one_predictor_unit_and_drops_the_rank_by_one(act):
    """4 -> 12 -> 8 then 8 -> 4 -> 8 (p = d): the construction moves exactly one column of V1 (the projector is
    untouched), that unit's pre-activation is the zero of sigma', and the numpy SVD of J has rank d - 1 = 3; the
    initialiser's composed head has full column rank 4. The numpy J is the library's jacfwd of the head."""
    key = jax.random.PRNGKey(5)
    model, drop, c = K.draw_head((4, 12, 8, 4), act, "composed_rank_drop", key)
    _, gen, c0 = K.draw_head((4, 12, 8, 4), act, "composed", key)
    np.testing.assert_array_equal(c, c0)
    for part in ("0",):  # the projector is the same head
        for lg, ld in zip(gen["params"][part]["layers"], drop["params"][part]["layers"]):
            np.testing.assert_array_equal(lg["w"], ld["w"])
    moved = np.nonzero(np.any(gen["params"]["1"]["layers"][0]["w"] != drop["params"]["1"]["layers"][0]["w"], axis=0))
    assert moved[0].size == 1  # p - d + 1 = 1 predictor unit
    j = int(moved[0][0])
    for variables, rank in ((gen, 4), (drop, 3)):
        jac, a, b = _numpy_jacobian(variables, c, act)
        auto = np.asarray(jax.jacfwd(lambda z: model.apply(variables, z)[0])(c))
        np.testing.assert_allclose(jac, auto, rtol=1e-10, atol=1e-12)
        sv = np.linalg.svd(jac, compute_uv=False)
        assert int(np.sum(sv > 1e-9 * sv[0])) == rank, sv
        pre = K.hidden_pre_activations(variables, c, act)
        np.testing.assert_allclose(pre[0], a, rtol=1e-12)
        np.testing.assert_allclose(pre[1], b, rtol=1e-12, atol=1e-14)
    _, _, b = _numpy_jacobian(drop, c, act)
    assert b[j] == pytest.approx(K.sigma_prime_zero(act), abs=1e-12)
    assert abs(_SIGMA_PRIME[act](b[j])) < 1e-12
    assert K.draw_head((4, 12, 8, 4), "tanh", "composed_rank_drop", key) is None  # tanh' has no zero


def test_at_p_equal_d_the_residual_reaches_only_the_predictor_unit_at_the_zero():
    """The composed head with p = d: rho_i in null(J^T) forces V1 D2 V2 rho_i into null(J_proj^T), and range(V1) meets
    it only in 0, so D2 V2 rho_i = 0. The initialiser's head (D2 invertible): V2 rho_i = 0, M = 0 exactly, s* = inf.
    The rank drop: V2 rho_i vanishes but at the placed unit j, so M_i = (V2 rho_i)_j sigma''(b_j) g g^T (rank one,
    non-zero on null(J))."""
    for con in ("composed", "composed_rank_drop"):
        model, v, c = K.draw_head((4, 12, 8, 4), "swish", con, jax.random.PRNGKey(3))
        eq = geometry.collapsed_equilibrium(
            model, v, "mse_target", c, 4, key=jax.random.PRNGKey(4), residual_scale=0.01
        )
        u = model.apply(v, eq.z)[0]
        rho = np.asarray(jax.grad(eq.loss_fn)(u))
        through = np.abs(rho @ np.asarray(v["params"]["1"]["layers"][1]["w"]).T).max(axis=0) / np.abs(rho).max()
        at_zero = np.abs(K.hidden_pre_activations(v, c, "swish")[1] - K.sigma_prime_zero("swish")) < 1e-12
        assert at_zero.sum() == (con == "composed_rank_drop")
        assert np.all(through[~at_zero] < 1e-12) and np.all(through[at_zero] > 1e-3)
        fn = as_function(model, v, train=False)
        m0 = np.asarray(jax.hessian(lambda z: jnp.dot(rho[0], fn(z)))(c))
        sv = np.linalg.svd(m0, compute_uv=False)
        assert int(np.sum(sv > 1e-10 * np.abs(rho).max())) == (con == "composed_rank_drop")  # M_0: zero / rank one


def test_the_composed_heads_match_their_prediction():
    """The real composed heads at 4 -> 12 -> 8 -> 4 -> 8, Swish: the initialiser's draw is full rank and stable at a
    small residual; one predictor unit at swish' = 0 drops the rank by one: dim null(G) = 1 in every block, M on it,
    lambda_min(H_eff) < 0. Both are matches of the rule."""
    cfg = config_module.get_config("tiny")
    key = jax.random.PRNGKey(2)
    full = W.head_row(cfg, (4, 12, 8, 4), "swish", "composed", 0, 0.01, key)
    drop = W.head_row(cfg, (4, 12, 8, 4), "swish", "composed_rank_drop", 0, 0.01, key)
    assert full["width"] == drop["width"] == "4->12->8->4->8" and full["p"] == 4
    assert (full["hidden"], full["units_at_zero"], full["predicted_class"]) == ([12, 4], [0, 0], "full")
    assert (drop["hidden"], drop["units_at_zero"], drop["predicted_class"]) == ([12, 4], [0, 1], "rank-drop")
    assert full["block_null_dims"] == [0] * 4 and full["lambda_min_H_eff"] > full["eig_tol"]
    assert full["critical_scale"] > 1
    assert drop["block_null_dims"] == [1] * 4 and drop["m_on_null"]
    assert drop["lambda_min_H_eff"] < -drop["eig_tol"]
    assert all(r["certified"] and W.outcome(r) == "match" for r in (full, drop))


def test_a_rung_takes_only_its_own_constructions():
    key = jax.random.PRNGKey(0)
    with pytest.raises(ValueError, match="does not fit the rung"):
        K.draw_head((4, 12, 8), "swish", "composed", key)
    with pytest.raises(ValueError, match="does not fit the rung"):
        K.draw_head((4, 12, 8, 4), "swish", "rank_drop", key)
    with pytest.raises(ValueError, match="d <= h, k, p"):
        K.draw_head((4, 12, 8, 3), "swish", "composed", key)


def test_heads_of_enumerates_every_head_once_and_skips_rank_drops_without_a_zero():
    """The tiny ladder: 4 -> 12 -> 8 (swish: 3 constructions, tanh: 2) and 4 -> 12 -> 8 -> 4 -> 8 (swish: 2, tanh: 1),
    each seed and scale once; the one-hidden-layer keys are the fold_in chain (rung, activation, construction, seed,
    scale) the sweep has always used."""
    cfg = config_module.get_config("tiny")
    key = jax.random.PRNGKey(0)
    specs = list(W.heads_of(cfg, key))
    got = [(W.rung_label(s.dims), s.activation, s.construction) for s in specs]
    seeds = cfg.analysis.widths_composed_seeds
    assert got == [
        ("4->12->8", "swish", "random"),
        ("4->12->8", "swish", "rank_drop"),
        ("4->12->8", "swish", "bottleneck"),
        ("4->12->8", "tanh", "random"),
        ("4->12->8", "tanh", "bottleneck"),
        *[("4->12->8->4->8", "swish", c) for c in ("composed", "composed_rank_drop") for _ in range(seeds)],
        *[("4->12->8->4->8", "tanh", "composed")] * seeds,
    ]
    kk = key
    for i in (0, 1, 2, 0, 0):  # rung 0, tanh, bottleneck, seed 0, scale 0
        kk = jax.random.fold_in(kk, i)
    np.testing.assert_array_equal(specs[4].key, kk)
    assert len({tuple(np.asarray(jax.random.key_data(s.key)).ravel()) for s in specs}) == len(specs)


def test_a_variant_that_sweeps_no_width_draws_no_figure_and_says_so(tmp_path):
    """The paper variant (its width sweep is paper_widths): no empty ``widths.png``, no empty table."""
    none = {"widths": {"rows": [], "seconds_by_width": {}, "seconds": 0.0}}
    WR.figure(none, tmp_path)
    assert not (tmp_path / "widths.png").exists()
    assert WR.report_lines(none, "fig") == ["Widths (thm4.1-rank-predicts-stability): no width swept in this variant."]
