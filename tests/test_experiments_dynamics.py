"""Experiments 4 (collapse escape) and 5 (Hessian tracker parity) end to end on their tiny configs."""
import math

import numpy as np
import pytest
import scipy.stats

import jax

from experiments import collapse_escape, common, hessian_tracker, reproduce
from experiments.collapse_escape import problem as ce_problem
from experiments.collapse_escape import runs as ce_runs
from experiments.configs import collapse_escape as ce_config
from experiments.configs import hessian_tracker as tracker_config
from ssl_geometry import geometry
from ssl_geometry import dynamics


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("dynamics")
    res = {name: reproduce.run_one(name, "tiny", out) for name in ("collapse_escape", "hessian_tracker")}
    return out, res


def _finite(x):
    return isinstance(x, (int, float)) and math.isfinite(x)


def test_collapse_escape_tiny_rows_bookkeeping_and_rule(tiny_runs):
    out, res = tiny_runs
    r = res["collapse_escape"]
    common.check_verdict(r)
    cfg = ce_config.get_config("tiny")
    rows = r["measurements"]["rows"]
    assert {x["objective"] for x in rows} == set(cfg.model.objectives)
    assert {x["representation"] for x in rows} == {"free", "mlp"}
    # One flow + one SGD run per lr for every (representation, head, seed); every case certified.
    assert all(c["certified"] for c in r["measurements"]["cases"])
    n_cases = 2 * len(cfg.model.activations) * cfg.seeds
    assert len(rows) == n_cases * (1 + len(cfg.dynamics.lrs))
    for x in rows:
        # A certified equilibrium: every gradient is rounding, the residual is not.
        assert x["grad_norm_eq"] < 1e-12 and x["rho_norm"] > 1e-3
        assert x["field_norm_eq"] < 1e-12 if x["dynamics"] != "sgd" else True
        # Every run ends at its horizon: flows exactly, SGD within one step.
        if x["dynamics"] == "sgd":
            assert abs(x["t_final"] - x["horizon"]) <= x["lr_eff"] and x["n_steps"] == round(x["horizon"] / x["lr_eff"])
        else:
            assert x["ok"] and x["t_final"] == pytest.approx(x["horizon"], rel=1e-12)
        # Escape is read on z, which starts collapsed (the BN head's outputs do not: the t = 0 artefact).
        assert x["std_z_init"] < x["threshold"] and x["bn_std_u_init"] > x["threshold"] and x["bn_amplification"] > 10
        # The linearised dynamics predict the measured rate (same window) within the rule's tolerance.
        assert collapse_escape.verdict.agrees(x, cfg), (x["objective"], x["activation"], x["dynamics"])
        # Premises as constructed: MSE's H_L = (2/n) I is PSD, the head moves faster than z.
        assert x["H_L_psd"] and x["premises_hold"] and x["timescale_ratio"] > 1
        if x["activation"] == "identity":
            assert x["lambda_min_M"] == 0.0
    h = r["headline"]
    assert h["failed_flow_runs"] == 0 and h["runs_counted"] > 0 and r["verdict"] != "premise violated"
    # The rule, recomputed from the stored rows.
    d = collapse_escape.decide(r["measurements"], cfg)
    assert d["verdict"] == r["verdict"] and d["headline"]["E_smooth_flow"] == h["E_smooth_flow"]
    for name in ("escape_rates.png", "predicted_vs_measured.png"):
        assert (out / "collapse_escape" / name).exists()
    text = collapse_escape.report(r, "fig")
    assert "| rep | objective | head | dynamics |" in text and "measured/pred" in text
    assert "(fig/escape_rates.png)" in text


def test_collapse_escape_frozen_head_rate_is_minus_lambda_min_h_eff():
    # With the head frozen the flow in z is dz/dt = -grad_z L: its Jacobian is -H_eff, computed
    # independently by geometry.effective_hessian (dense) -- for a linear head -lambda_min(G).
    cfg = ce_config.get_config("tiny")
    for act in ("identity", "swish"):
        prob = ce_problem.make_problem(cfg, "mse", act, "free")
        eq = ce_problem.equilibrium(prob, cfg, jax.random.PRNGKey(3))
        assert eq.certified
        lin, O, _, _ = ce_runs.predictions(prob, eq, 0.0)
        spec = collapse_escape._spectra(prob, eq)
        assert dynamics.visible_rate(lin, O) == pytest.approx(-spec["lambda_min_H_eff"], abs=1e-10)
        if act == "identity":
            assert spec["lambda_min_H_eff"] == pytest.approx(spec["lambda_min_G"], abs=1e-12)
            # G is PSD, so the frozen linear head cannot escape; moving head and z together it does, for any
            # head rate: J = -D H with D > 0 has the inertia of -H (Sylvester), and the joint Hessian H is
            # indefinite through the cross term d^2 L / dz dtheta, proportional to rho.
            assert dynamics.visible_rate(lin, O) < 0
            rates = [ce_runs.predictions(prob, eq, tau)[0].rate for tau in (0.25, 4.0, 100.0)]
            assert 0 < rates[0] < rates[1] < rates[2]


def test_collapse_escape_equilibria_residuals_match_their_formulas():
    # Each objective's residual at the constructed state against its closed form; SimSiam's cosine has an
    # indefinite H_L (the paper's own case: premise violated), MSE's H_L = (2/n) I and DINO's are PSD.
    cfg = ce_config.get_config("tiny")
    n, ts = cfg.model.n, cfg.model.dino_student_temp
    for obj in ("mse", "dino", "simsiam"):
        prob = ce_problem.make_problem(cfg, obj, "swish", "free")
        eq = ce_problem.equilibrium(prob, cfg, jax.random.PRNGKey(5))
        assert eq.certified and eq.grad_norm < 1e-12 and eq.rho_norm > 1e-3, obj
        z, U = prob.outputs(eq.y, eq.data["x"])
        tg = eq.data["targets"]
        rho = np.asarray(jax.grad(lambda u: prob.loss(u, tg))(U))
        U, t = np.asarray(U), np.asarray(tg["t"])
        if obj == "mse":
            expect = 2.0 / n * (U - t)
        elif obj == "dino":
            P = np.asarray(jax.nn.softmax(t / cfg.model.dino_teacher_temp, axis=-1))
            expect = (np.asarray(jax.nn.softmax(U / ts, axis=-1)) - P) / (n * ts)
        else:
            un, tn = U / np.linalg.norm(U, axis=1, keepdims=True), t / np.linalg.norm(t, axis=1, keepdims=True)
            expect = -(tn - np.sum(un * tn, axis=1, keepdims=True) * un) / (n * np.linalg.norm(U, axis=1, keepdims=True))
        np.testing.assert_allclose(rho, expect, atol=1e-12)
        prem = geometry.thm41_premises(prob.head, {"params": eq.y["head"]}, lambda u: prob.loss(u, tg), z)
        assert prem.loss_hessian_psd == (obj != "simsiam"), obj


def test_collapse_escape_fit_rate_and_horizon():
    t = np.linspace(0.0, 40.0, 401)
    s = 1e-6 * (np.exp(0.3 * t) + 5 * np.exp(-0.5 * t))  # leading mode 0.3 plus a decaying transient
    rate, ta, tb = ce_runs.fit_rate(t, s, s[0], 1e3)
    assert rate == pytest.approx(0.3, rel=1e-3) and tb <= 40 and s[t <= tb].max() <= 1e3 * s[0]
    assert ce_runs.fit_on(t, s, (ta, tb)) == pytest.approx(rate)
    cfg = ce_config.get_config("tiny")
    T = ce_runs.case_horizon(cfg, 0.1, 1e-5, [0.2, 0.5])
    assert T == pytest.approx(cfg.dynamics.horizon_margin * np.log(1e4) / 0.2)
    # A dynamics predicted not to grow: watched long enough for any rate above the floor to cross.
    assert ce_runs.case_horizon(cfg, 0.1, 1e-5, [0.5, -1.0]) == min(
        cfg.dynamics.horizon_max, cfg.dynamics.horizon_margin * np.log(1e4) / cfg.dynamics.rate_floor)


def test_collapse_escape_rule_cases():
    cfg = ce_config.get_config("tiny")
    base = dict(premises_hold=True, ok=True, censored=False, objective="mse", measured_rate=0.2,
                predicted_rate_window=0.2)

    def row(kind, dyn, escaped, **kw):
        return {**base, "head_kind": kind, "dynamics": dyn, "escaped": escaped, **kw}

    good = [row("smooth", "flow", True), row("linear", "flow", False, measured_rate=0.0, predicted_rate_window=0.0),
            row("piecewise", "flow", False, measured_rate=0.001, predicted_rate_window=-0.01),
            row("linear", "sgd", True)]
    assert collapse_escape.decide({"rows": good}, cfg)["verdict"] == "supported"
    # A premise-holding linear head that escapes under the flow refutes the claim.
    bad = good[:1] + [row("linear", "flow", True)] + good[2:]
    assert collapse_escape.decide({"rows": bad}, cfg)["verdict"] == "not supported"
    # Predictions off by more than the tolerance: the runs cannot be read against the theory.
    off = [{**x, "measured_rate": 0.5} if x["dynamics"] == "flow" and x["escaped"] else x for x in good]
    off += [row("smooth", "flow", True, measured_rate=0.5)] * 2
    assert collapse_escape.decide({"rows": off}, cfg)["verdict"] == "inconclusive"
    indef = [{**x, "premises_hold": False} for x in good]
    assert collapse_escape.decide({"rows": indef}, cfg)["verdict"] == "premise violated"
    # A failed flow is excluded and counted, not read as "did not escape".
    failed = good + [row("linear", "flow", False, ok=False, censored=True)]
    d = collapse_escape.decide({"rows": failed}, cfg)
    assert d["verdict"] == "supported" and d["headline"]["failed_flow_runs"] == 1


def test_hessian_tracker_schema_rule_and_exact_parity(tiny_runs):
    out, res = tiny_runs
    r = res["hessian_tracker"]
    common.check_verdict(r)
    m = r["measurements"]
    rows = m["rows"]
    cfg = tracker_config.get_config("tiny")
    assert len(rows) == len(cfg.runs) * cfg.train.epochs * cfg.analysis.tracker_batches
    for row in rows:
        for key in ("lambda_min_exact", "lambda_max_exact", "lambda_min_lanczos", "lambda_min_power",
                    "lambda_max_power", "lanczos_true_residual_min"):
            assert _finite(row[key]), (key, row[key])
        assert row["reference"] == "exact" and row["lambda_min_ref"] == row["lambda_min_exact"]
        scale = max(abs(row["lambda_min_exact"]), abs(row["lambda_max_exact"]))
        # Converged Lanczos agrees with the exact (block) eigenvalues to rounding.
        assert row["lanczos_valid"]
        assert abs(row["lambda_min_lanczos"] - row["lambda_min_exact"]) <= 1e-9 * scale
        assert abs(row["lambda_max_lanczos"] - row["lambda_max_exact"]) <= 1e-9 * scale
        assert row["lanczos_true_residual_min"] <= 1e-6 * scale
        # So does the blockwise Lanczos (one Krylov space per sample block), the reference at paper size.
        assert row["block_lanczos_valid"]
        assert abs(row["lambda_min_block_lanczos"] - row["lambda_min_exact"]) <= 1e-9 * scale
        assert abs(row["lambda_max_block_lanczos"] - row["lambda_max_exact"]) <= 1e-9 * scale
        # Stored derived numbers match their definitions.
        assert row["underestimate_ratio"] == pytest.approx(abs(row["lambda_min_exact"]) / abs(row["lambda_min_power"]))
        if np.isfinite(row["rel_error_min_power"]):
            assert row["rel_error_min_power"] == pytest.approx(
                abs(row["lambda_min_power"] - row["lambda_min_exact"]) / abs(row["lambda_min_exact"]))
        assert row["sign_error_min"] == bool(abs(row["lambda_min_exact"]) > row["sign_tol"]
                                             and np.sign(row["lambda_min_power"]) != np.sign(row["lambda_min_exact"]))
        # The power iteration's lambda_min is a Rayleigh-type estimate: never below the true minimum by more
        # than float32 rounding of its matvecs.
        assert row["lambda_min_power"] >= row["lambda_min_exact"] - 1e-3 * scale
    # No BatchNorm: the Hessian is exactly block-diagonal per sample.
    assert r["headline"]["max_block_coupling"] == 0.0
    # The paper's Spearman, recomputed from the stored per-epoch backbone statistics.
    for t in m["training"]:
        e = t["epochs"]
        key = f"spearman_{t['init']}_{t['activation']}"
        assert len(e["std_backbone"]) == cfg.train.epochs
        assert r["headline"][key] == pytest.approx(scipy.stats.spearmanr(e["std_backbone"], e["cond_backbone"])[0],
                                                   nan_ok=True)
    # The rule, recomputed from the stored rows; the claim is the paper's (the tracker resolves lambda_min).
    again = hessian_tracker.decide({**m, "summary": hessian_tracker.summary(rows)}, cfg)
    (rec,) = r["claims"]
    assert again["claims"][0]["verdict"] == rec["verdict"] and "resolves lambda_min" in hessian_tracker.CLAIM
    assert rec["id"] == "tracker-power-iteration" and rec["deciding"]["valid_checkpoints"] == len(rows)
    assert r["paper"] == hessian_tracker.PAPER_SPEARMAN and "verdict" not in cfg
    for name in ("lambda_min_tracker.png", "underestimate_ratio.png"):
        assert (out / "hessian_tracker" / name).exists()
    text = hessian_tracker.report(r, "fig")
    assert "| head | init | checkpoints |" in text and "(fig/lambda_min_tracker.png)" in text


def _summary_of(rel, sign=False, valid=True, n=5):
    row = {"valid": valid, "dead_head": False, "rel_error_min_power": rel, "sign_error_min": sign,
           "sign_error_max": False, "underestimate_ratio": 1.0 / (1.0 - min(rel, 0.5)), "lambda_min_ref": -1.0,
           "sign_tol": 1e-12, "lanczos_abs_error": float("nan")}
    return {"summary": hessian_tracker.summary([row] * n), "max_block_coupling": 0.0, "spearman": {}}


def test_hessian_tracker_verdict_rule_thresholds():
    cfg = tracker_config.get_config("tiny")
    decide = lambda m: hessian_tracker.decide(m, cfg)["claims"][0]["verdict"]
    t = hessian_tracker.THRESHOLDS  # the registry's
    assert decide(_summary_of(0.01)) == "supported"           # the tracker resolves lambda_min
    assert decide(_summary_of(t["rel_error"])) == "supported"  # at the threshold
    assert decide(_summary_of(0.5)) == "not supported"        # 50% relative error
    assert decide(_summary_of(0.01, sign=True)) == "not supported"  # right size, wrong sign
    assert decide(_summary_of(0.01, valid=False)) == "inconclusive"
    assert decide(_summary_of(0.01, n=t["min_valid_checkpoints"] - 1)) == "inconclusive"
    assert decide(_summary_of(0.01, n=t["min_valid_checkpoints"])) == "supported"


def test_hessian_tracker_paper_config_is_the_authors_recipe():
    c = tracker_config.get_config("paper")
    assert c.data.name == "cifar10" and c.model.backbone == "resnet18_cifar"
    assert (c.train.batch_size, c.train.epochs, c.analysis.tracker_batches, c.analysis.power_steps) == (256, 100, 5, 20)
    assert (c.model.hidden, c.model.out_dim, c.model.pred_hidden) == (2048, 2048, 512)
    assert c.runs == [["swish", "normal"], ["swish", "collapsed"], ["relu", "collapsed"]]
    assert not c.analysis.exact_blocks and c.analysis.blockwise_lanczos and c.train.lr == 0.05
