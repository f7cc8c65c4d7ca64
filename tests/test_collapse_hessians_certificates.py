"""The rules of thm4.1-repaired-sign and thm4.1-critical-residual (experiments/collapse_hessians/certificates.py):
hand-made states for every outcome, and one real equilibrium from the certificate's tests."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import claims
from experiments.collapse_hessians import certificates as K
from ssl_geometry import as_function, geometry, heads

jax.config.update("jax_enable_x64", True)


def _s(label, sign, lmin, tol=1e-10, conclusion=None):
    conclusion = (
        conclusion
        or {-1: "unstable (residual above critical)", 0: "degenerate", 1: "stable (residual below critical)"}[sign]
    )
    return {
        "label": label,
        "conclusion": conclusion,
        "predicted_sign": sign,
        "lambda_min": lmin,
        "tol": tol,
        "critical_scale": 2.0,
        "critical_bounds": [1.0, 3.0],
        "head_kind": "smooth",
    }


def test_measured_sign_uses_the_tolerance_both_ways():
    assert [K.measured_sign(x, 1e-3) for x in (-2e-3, -1e-3, 0.0, 1e-3, 2e-3)] == [-1, 0, 0, 0, 1]
    with pytest.raises(ValueError, match="lambda_min"):
        K.measured_sign(float("nan"), 1e-3)


def test_repaired_sign_supported_when_every_prediction_matches_degenerate_included():
    out = K.decide_repaired_sign([_s("a", -1, -0.5), _s("b", 1, 0.2), _s("c", 0, 5e-11)])
    assert out["verdict"] == "supported" and out["id"] == "thm4.1-repaired-sign"
    assert out["deciding"] == {
        "certified_equilibria": 3,
        "predicted": 3,
        "mismatched": 0,
        "predicted_unstable": 1,
        "predicted_stable": 1,
        "predicted_degenerate": 1,
    }


@pytest.mark.parametrize("bad", [_s("bad", 1, -0.01), _s("bad", -1, 0.3), _s("bad", 0, 1e-6), _s("bad", 1, 1e-11)])
def test_repaired_sign_not_supported_names_the_mismatch(bad):
    out = K.decide_repaired_sign([_s("a", -1, -0.5), bad])
    assert out["verdict"] == "not supported" and out["deciding"]["mismatched"] == 1
    assert "bad" in out["reason"] and "a (" not in out["reason"]


def test_repaired_sign_inconclusive_without_a_counted_prediction():
    assert K.decide_repaired_sign([])["verdict"] == "inconclusive"
    only = K.decide_repaired_sign([_s("p", 1, -3.0, conclusion="premise violated (G not PSD)")])
    assert only["verdict"] == "inconclusive" and only["deciding"]["certified_equilibria"] == 1


def test_sign_states_joins_rows_and_certificates_and_refuses_a_different_state():
    row = {
        "state": "equilibrium",
        "certified": True,
        "holds": True,
        "batch_norm": False,
        "objective": "mse_target",
        "activation": "tanh",
        "residual_scale": 0.3,
        "head_kind": "smooth",
        "lambda_min_H_eff": 0.1,
        "eig_tol": 1e-9,
        "rho_norm": 0.25,
    }
    other = {**row, "state": "collapsed"}
    cert = {
        "case": 1,
        "conclusion": "stable (residual below critical)",
        "critical_scale": 4.0,
        "critical_bounds": [2.0, 5.0],
        "predicted_sign": 1,
        "rho_norm": 0.25,
    }
    st = K.sign_states([other, row], [cert])
    assert len(st) == 1 and st[0]["label"] == "mse_target/tanh/scale 0.3" and st[0]["lambda_min"] == 0.1
    with pytest.raises(ValueError, match="no certificate"):
        K.sign_states([row], [cert])
    with pytest.raises(ValueError, match="no longer rebuilds"):
        K.sign_states([other, row], [{**cert, "rho_norm": 0.26}])


# ----------------------------------------------------------------------------- the crossing


@pytest.mark.parametrize("root,lo,hi", [(2.5, 0.1, 100.0), (1.5, 1.0, 1.9), (0.1003, 0.1, 10.0)])
def test_locate_crossing_finds_a_known_root_to_its_tolerance(root, lo, hi):
    out = K.locate_crossing(lambda r: 1 if r < root else -1, lo, hi, rtol=1e-6)
    assert out["crossing"] == pytest.approx(root, rel=1e-6) and out["first_sign"] == 1
    a, b = out["bracket"]
    assert a <= root <= b and b - a <= 1e-6 * b


def test_locate_crossing_without_a_sign_change():
    up = K.locate_crossing(lambda r: 1, 0.1, 10.0)
    down = K.locate_crossing(lambda r: -1, 0.1, 10.0)
    assert up["crossing"] is None and up["first_sign"] == 1 and up["evaluations"] == 8  # 0.1 ... 6.4, then 10
    assert down["crossing"] is None and down["first_sign"] == -1 and down["evaluations"] == 1
    with pytest.raises(ValueError, match="lo < hi"):
        K.locate_crossing(lambda r: 1, 1.0, 0.5)


def _w(label, p, m, first=1, sweep="around", null_dim=0, certified=True):
    """A sweep row; ``sweep="around"``: ``[p / 4, 4 p]``, the registered span around the prediction."""
    return {
        "label": label,
        "predicted_crossing": p,
        "crossing": m,
        "first_sign": first,
        "sweep": [p / 4, 4 * p] if sweep == "around" else (None if sweep is None else list(sweep)),
        "null_dim": null_dim,
        "certified": certified,
        "conclusion": "stable (residual below critical)",
    }


def test_sweep_range_is_centred_on_the_prediction_and_capped_for_dino():
    assert K.sweep_range("mse_target", 7.29, 4) == pytest.approx((7.29 / 4, 29.16))
    assert K.sweep_range("dino_fixed_teacher", 1.2, 4) == pytest.approx((0.3, K.DINO_MAX_SCALE))  # top capped
    assert K.sweep_range("dino_fixed_teacher", 0.4, 4) == pytest.approx((0.1, 1.6))  # below the cap: untouched
    assert K.sweep_range("dino_fixed_teacher", 10.6, 4) is None  # p / 4 = 2.65: nothing of it can be built
    assert K.sweep_range("dino_fixed_teacher", 4 * K.DINO_MAX_SCALE, 4) is None  # p / 4 at the cap exactly
    for p in (0.0, float("inf"), float("nan")):  # no crossing predicted: nothing to sweep
        assert K.sweep_range("mse_target", p, 4) is None
    with pytest.raises(ValueError, match="span"):
        K.sweep_range("mse_target", 1.0, 1.0)
    with pytest.raises(ValueError, match="predicted"):
        K.sweep_range("mse_target", -1.0, 4)


def test_critical_residual_supported():
    capped = _w("b", 3.0, None, sweep=(0.75, 1.99))  # DINO's cap below p: stable throughout agrees
    out = K.decide_critical_residual([_w("a", 1.0, 1.005), capped], 0.01)
    assert out["verdict"] == "supported" and out["deciding"]["with_measured_crossing"] == 1
    assert out["deciding"]["counted"] == 2 and out["deciding"]["not_buildable"] == []
    assert out["deciding"]["max_relative_error"] == pytest.approx(0.005)


@pytest.mark.parametrize(
    "bad",
    [
        _w("bad", 1.0, 1.02),  # crossing too far from the prediction
        _w("bad", 5.0, None),  # stable throughout [p/4, 4p]: the true crossing is above 4p
        _w("bad", 5.0, None, first=-1),  # unstable from p/4 on: the true crossing is below p/4
        _w("bad", 3.0, None, first=-1, sweep=(0.75, 1.99)),  # capped, but unstable throughout
    ],
)
def test_critical_residual_not_supported_names_the_sweep(bad):
    out = K.decide_critical_residual([_w("a", 1.0, 1.0), bad], 0.01)
    assert out["verdict"] == "not supported" and out["deciding"]["disagreeing"] == 1 and "bad" in out["reason"]


def test_critical_residual_names_what_it_cannot_build_and_counts_only_swept_states():
    unbuilt = _w("dino", 10.6, None, sweep=None)
    out = K.decide_critical_residual([_w("a", 1.0, 1.0), unbuilt], 0.01)
    assert out["verdict"] == "supported" and out["deciding"]["not_buildable"] == ["dino"]
    assert out["deciding"]["counted"] == 1 and "not buildable (DINO r < 2): dino" in out["reason"]
    only = K.decide_critical_residual([unbuilt], 0.01)
    assert only["verdict"] == "inconclusive" and "dino" in only["reason"]
    # no crossing predicted (s* = inf): not swept, not counted, and not "not buildable"
    never = K.decide_critical_residual([_w("inf", float("inf"), None, sweep=None)], 0.01)
    assert never["verdict"] == "inconclusive" and never["deciding"]["no_crossing_predicted"] == 1
    assert never["deciding"]["not_buildable"] == []


def test_critical_residual_inconclusive_without_a_counted_sweep():
    # not counted: a non-trivial null(G), an uncertified base state
    out = K.decide_critical_residual([_w("x", 1.0, 3.0, null_dim=2), _w("y", 1.0, 3.0, certified=False)], 0.01)
    assert out["verdict"] == "inconclusive" and out["deciding"]["counted"] == 0
    with pytest.raises(ValueError, match="rtol"):
        K.decide_critical_residual([], 0.0)


def test_the_registered_thresholds_are_the_ones_measure_and_decide_read():
    assert claims.claim(K.CRITICAL_RESIDUAL).thresholds == {"crossing_rtol": 0.01, "span": 4}
    assert claims.claim(K.REPAIRED_SIGN).combine == claims.claim(K.CRITICAL_RESIDUAL).combine == "theorem"
    text = claims.rule_text(K.CRITICAL_RESIDUAL)
    assert "[p / 4, 4 p]" in text and "more than 4x from p" in text and "0.01 p" in text


# ----------------------------------------------------------------------------- a real state


def test_a_real_tanh_equilibrium_prediction_matches_and_its_sweep_crosses_at_s_star():
    """tests/test_thm41_certificate.py's mse_target/tanh/0.3 state (s* = 4.4067597548, stable at s = 1)."""
    d, n, s_star = 4, 6, 4.4067597548
    head = heads.mlp(d, (16,), 12, activation="tanh", bias=False, scale=0.1, dtype=jnp.float64)
    v = head.init(jax.random.PRNGKey(0))
    c = jax.random.normal(jax.random.PRNGKey(1), (d,), jnp.float64)

    def build(r):
        return geometry.collapsed_equilibrium(
            head, v, "mse_target", c, n, key=jax.random.PRNGKey(2), residual_scale=r, activation="tanh"
        )

    eq = build(0.3)
    cert = geometry.collapse_certificate(head, eq.loss_fn, eq.z, variables=v)
    res = geometry.classify_collapse(head, eq.loss_fn, eq.z, variables=v, activation="tanh")
    state = {
        "label": "tanh",
        "conclusion": cert.conclusion,
        "predicted_sign": cert.predicted_sign,
        "lambda_min": float(res.lambda_min["full"]),
        "tol": float(res.eig_tol),
    }
    out = K.decide_repaired_sign([state])
    assert cert.critical_scale == pytest.approx(s_star, rel=1e-9) and cert.predicted_sign == 1
    assert out["verdict"] == "supported" and state["lambda_min"] > state["tol"]
    h = as_function(head, v)

    def sign_at(r):
        e = build(r)
        lmin = float(np.linalg.eigvalsh(np.asarray(geometry.effective_hessian(h, e.loss_fn, e.z).full))[0])
        return 1 if lmin > 0 else -1

    found = K.locate_crossing(sign_at, 0.3, 4.8, rtol=1e-3)
    sweep = {**_w("tanh", 0.3 * cert.critical_scale, found["crossing"], found["first_sign"], (0.3, 4.8))}
    assert K.sweep_range("mse_target", 0.3 * cert.critical_scale, 4) == pytest.approx((0.3 * s_star / 4, 1.2 * s_star))
    assert found["crossing"] == pytest.approx(0.3 * s_star, rel=1e-3)
    assert K.decide_critical_residual([sweep], 0.01)["verdict"] == "supported"


def test_a_dry_run_decides_both_claims_inconclusive_and_a_real_run_needs_its_certificates():
    items = K.decide_items({"cases": [], "dry_run": {}}, 0.01)
    assert [(i["id"], i["verdict"]) for i in items] == [
        (K.REPAIRED_SIGN, "inconclusive"),
        (K.CRITICAL_RESIDUAL, "inconclusive"),
    ]
    assert "dry run" in items[0]["reason"] and "dry run" in K.report_lines({"cases": []})[0]
    with pytest.raises(KeyError):
        K.decide_items({"cases": []}, 0.01)
    sweep = [_w("a", 1.0, 1.0)]
    items = K.decide_items({"cases": [], "certificates": [], "critical_sweeps": sweep}, 0.01)
    assert [i["verdict"] for i in items] == ["inconclusive", "supported"]
