"""Experiments 4 (collapse escape) and 5 (Hessian tracker parity) end to end on their tiny configs."""

import math

import jax
import numpy as np
import pytest
import scipy.stats

from experiments import claims, collapse_escape, common, hessian_tracker, suite
from experiments.collapse_escape import problem as ce_problem
from experiments.collapse_escape import runs as ce_runs
from experiments.collapse_escape import verdict as ce_verdict
from experiments.configs import collapse_escape as ce_config
from experiments.configs import hessian_tracker as tracker_config
from ssl_geometry import dynamics


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("dynamics")
    res = {name: suite.run_one(name, "tiny", out) for name in ("collapse_escape", "hessian_tracker")}
    return out, res


def _finite(x):
    return isinstance(x, (int, float)) and math.isfinite(x)


@pytest.mark.slow  # an end-to-end run (the slow tier of .ci/run)
def test_collapse_escape_tiny_rows_bookkeeping_and_rules(tiny_runs):
    out, res = tiny_runs
    r = res["collapse_escape"]
    common.check_verdict(r)
    cfg = ce_config.get_config("tiny")
    rows, cases = r["measurements"]["rows"], r["measurements"]["cases"]
    assert {x["objective"] for x in rows} == set(cfg.model.objectives)
    assert {x["representation"] for x in rows} == {"free", "mlp"}
    # One flow per head rate + one SGD run per lr for every (representation, head, seed); every state certified.
    assert all(c["certified"] and c["state_premises"] for c in cases)
    assert len(rows) == len(cases) * (len(cfg.dynamics.head_rates) + len(cfg.dynamics.lrs))
    flows = {(ce_verdict.state_key(x), x["tau"]): x for x in rows if x["dynamics"] == "flow"}
    for x in rows:
        # A certified equilibrium: every gradient is rounding, the residual is not.
        assert x["grad_norm_eq"] < 1e-12 and x["rho_norm"] > 1e-3
        if x["dynamics"] == "sgd":  # SGD runs the horizon of the flow at its head rate, within one step
            assert x["horizon"] == flows[(ce_verdict.state_key(x), x["tau"])]["horizon"]
            assert abs(x["t_final"] - x["horizon"]) <= x["lr_eff"] and x["n_steps"] == round(x["horizon"] / x["lr_eff"])
        else:  # flows end at their horizon: the frozen one from -lambda_min(H_eff), the others from their rate
            assert x["ok"] and x["t_final"] == pytest.approx(x["horizon"], rel=1e-12) and x["field_norm_eq"] < 1e-12
            expect = (
                ce_runs.frozen_horizon(x["lambda_min_H_eff"])
                if x["tau"] == 0
                else ce_runs.flow_horizon(x["predicted_rate"], ce_runs.frozen_horizon(x["lambda_min_H_eff"]))
            )
            assert x["horizon"] == pytest.approx(expect)
        # growth against the start, and the outcome it gives
        assert x["growth"] == pytest.approx(x["spread_T"] / x["spread_0"])
        assert x["outcome"] == ce_runs.outcome(x["growth"], x["status"])
        # The claim's rate r predicts the measured rate over the window in which the leading modes dominate; a run
        # without a window is one whose linearised solution has none either (its leading mode is not excited).
        agreement = ce_verdict.rate_agreement(x, ce_verdict.rate_scales(rows))
        assert agreement == "agree" or (agreement == "no window" and "no window within max_saves" in x["rate_run"]), (
            ce_verdict.label(x),
            agreement,
            x["rate_run"],
        )
        if x["dynamics"] == "flow" and x["tau"] == 0 and x["head_kind"] == "smooth" and x["representation"] == "free":
            # the frozen-head rule's target: the linearised system's slope over the spread-only window
            assert (
                abs(ce_verdict.frozen_ratio(x) - 1) <= claims.CLAIMS["thm4.1-frozen-head-flow"].thresholds["rate_rtol"]
            ), ce_verdict.label(x)
        assert x["H_L_psd"] and x["timescale_ratio"] == (0.0 if x["tau"] == 0 else x["timescale_ratio"])
        if x["activation"] == "identity":
            assert x["lambda_min_M"] == 0.0
    for c in cases:  # escape is read on z; the BN head's outputs start far from collapse (the t = 0 artefact)
        assert c["bn_amplification"] > 10
    # The rules, recomputed from the stored rows.
    d = collapse_escape.decide(r["measurements"], cfg)
    assert [(i["id"], i["verdict"]) for i in d["claims"]] == [(c["id"], c["verdict"]) for c in r["claims"]]
    for name in ("escape_rates.png", "predicted_vs_measured.png"):
        assert (out / "collapse_escape" / name).exists()
    text = collapse_escape.report(r, "fig")
    assert "| rep | objective | head | seed |" in text and "measured/r" in text and "(fig/escape_rates.png)" in text


def test_collapse_escape_frozen_head_rate_is_minus_lambda_min_h_eff_in_closed_form():
    # With the head frozen the flow in z is dz/dt = -grad_z L: its Jacobian is -H_eff. For a linear head on MSE,
    # H_eff = G = (2/n) blockdiag(J^T J), J = (W1 W2)^T: lambda_min = (2/n) sigma_min(J)^2 -- a closed form.
    cfg = ce_config.get_config("tiny")
    for act in ("identity", "swish"):
        prob = ce_problem.make_problem(cfg, "mse", act, "free")
        eq = ce_problem.equilibrium(prob, cfg, jax.random.PRNGKey(3))
        assert eq.certified
        lin, O, _, _ = ce_runs.predictions(prob, eq, 0.0)
        spec = collapse_escape._spectra(prob, eq)
        assert dynamics.visible_rate(lin, O) == pytest.approx(-spec["lambda_min_H_eff"], abs=1e-10)
        if act == "identity":
            w = [np.asarray(layer["w"]) for layer in eq.y["head"]["layers"]]
            sigma = np.linalg.svd(w[0] @ w[1], compute_uv=False)[-1]
            assert spec["lambda_min_H_eff"] == pytest.approx(2.0 / cfg.model.n * sigma**2, rel=1e-9)
            assert spec["lambda_min_H_eff"] == pytest.approx(spec["lambda_min_G"], abs=1e-12)
            # Moving head and z together the Jacobian is -D H with D > 0, which has the inertia of -H (Sylvester);
            # the joint Hessian H is indefinite through the cross term d^2 L / dz dtheta, proportional to rho.
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
            expect = -(tn - np.sum(un * tn, axis=1, keepdims=True) * un) / (
                n * np.linalg.norm(U, axis=1, keepdims=True)
            )
        np.testing.assert_allclose(rho, expect, atol=1e-12)
        assert eq.premises.loss_hessian_psd == (obj != "simsiam"), obj


def test_collapse_escape_fit_rate_linear_regime_and_horizons():
    t = np.linspace(0.0, 40.0, 401)
    s = 1e-6 * (np.exp(0.3 * t) + 5 * np.exp(-0.5 * t))  # leading mode 0.3 plus a decaying transient
    rate, ta, tb, points = ce_runs.fit_rate(t, s, s[0], 1e3)
    assert rate == pytest.approx(0.3, rel=1e-3) and tb <= 40 and s[t <= tb].max() <= 1e3 * s[0] and points >= 3
    assert ce_runs.fit_on(t, s, (ta, tb)) == pytest.approx(rate)
    # The whole state's deviation leaves the linear regime first: the window ends there, and before a divergence.
    dev = np.exp(0.6 * t)
    assert ce_runs.fit_rate(t, s, s[0], 1e3, dev=dev)[2] <= np.log(1e3) / 0.6 + 0.1
    assert ce_runs.fit_rate(t, s, s[0], 1e3, stop=10.0)[2] < 10.0
    assert np.isnan(ce_runs.fit_rate(t[:4], s[:4], s[0], 1e3)[0])  # fewer than 3 points in the second half
    th = claims.CLAIMS["thm4.1-frozen-head-flow"].thresholds
    assert ce_runs.frozen_horizon(-0.01) == pytest.approx(th["horizon_decades"] * np.log(10) / 0.01)
    assert ce_runs.frozen_horizon(1e-12) == th["horizon_max"]
    ne = claims.CLAIMS["flow-linear-relu-no-escape"].thresholds
    assert ce_runs.flow_horizon(0.2, 50.0) == pytest.approx(ne["horizon_margin"] * np.log(ne["escape_growth"]) / 0.2)
    assert ce_runs.flow_horizon(-0.2, 50.0) == 50.0  # predicted not to grow: the frozen-head horizon
    assert [ce_runs.outcome(g, "successful") for g in (20.0, 1.2, 3.0)] == ["escaped", "stayed", "grew"]
    assert ce_runs.outcome(1e6, "non_finite") == "diverged" and ce_runs.outcome(0.5, "max_steps_reached") == "censored"


def _run(kind, dyn, tau, outcome, *, growth=None, seed=0, lr=0.0, measured=0.2, predicted=0.2, act=None, **kw):
    base = {
        "representation": "free",
        "objective": "mse",
        "activation": act or kind,
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
        "predicted_rate_window": predicted,
        "predicted_rate": predicted,
        "rate_points": 20,
        "jacobian_scale": 1.0,
        "frozen_rate": -0.01,
        "frozen_predicted_rate": -0.01,
        "lambda_min_H_eff": 0.01,
    }
    return {**base, **kw}


def _decide(rows):
    return {
        i["id"]: i for i in collapse_escape.decide({"rows": rows, "cases": []}, ce_config.get_config("tiny"))["claims"]
    }


def test_collapse_escape_rules_each_way():
    lin0 = _run("linear", "flow", 0.0, "stayed", growth=0.001, measured=-0.01, predicted=-0.01)
    sm0 = _run(
        "smooth", "flow", 0.0, "escaped", frozen_rate=0.0101, frozen_predicted_rate=0.0099, lambda_min_H_eff=-0.01
    )
    lin4 = _run("linear", "flow", 4.0, "stayed", measured=-0.003, predicted=-0.003)
    sm4 = _run("smooth", "flow", 4.0, "escaped")
    sgd = _run("linear", "sgd", 4.0, "escaped", lr=0.5, measured=0.5, predicted=0.5)
    d = _decide([lin0, sm0, lin4, sm4, sgd])
    assert {k: v["verdict"] for k, v in d.items()} == {
        "thm4.1-frozen-head-flow": "supported",
        "flow-linear-relu-no-escape": "supported",
        "flow-smooth-escape": "supported",
        "finite-step-escape": "supported",
        "linearised-rate-prediction": "supported",
    }
    # A linear head escaping under the joint flow refutes the no-escape reading, and names the tau; its SGD twin
    # then escapes where the flow did too (no control), so the finite step is not what made it leave.
    d = _decide([lin0, sm0, {**lin4, "outcome": "escaped", "growth": 50.0}, sm4, sgd])
    assert (
        d["flow-linear-relu-no-escape"]["verdict"] == "not supported"
        and "tau = 4" in d["flow-linear-relu-no-escape"]["reason"]
    )
    assert d["finite-step-escape"]["verdict"] == "inconclusive"
    # Diverged is its own outcome: a diverged linear flow with none escaping is inconclusive, never "stayed".
    assert _decide([lin0, {**lin4, "outcome": "diverged"}])["flow-linear-relu-no-escape"]["verdict"] == "inconclusive"
    # The frozen head: a smooth rate off the linearised slope over the same window, a smooth run that does not
    # grow, or a linear head that grows, refutes Thm 4.1's reading; the slope, not -lambda_min(H_eff), is the target.
    frozen = lambda rows: _decide(rows)["thm4.1-frozen-head-flow"]["verdict"]
    assert frozen([{**sm0, "frozen_rate": 0.02}]) == "not supported"
    assert frozen([{**sm0, "frozen_rate": 0.0062, "frozen_predicted_rate": 0.006}]) == "supported"  # pre-asymptotic
    assert frozen([{**sm0, "growth": 1.2}]) == "not supported"  # right slope, but the run stays
    assert frozen([{**sm0, "growth": 5.0, "outcome": "grew"}]) == "inconclusive"  # grew, but short of escape_growth
    assert frozen([{**sm0, "outcome": "diverged"}]) == "inconclusive"
    assert _decide([{**lin0, "growth": 20.0}])["thm4.1-frozen-head-flow"]["verdict"] == "not supported"
    assert _decide([{**lin0, "representation": "mlp"}])["thm4.1-frozen-head-flow"]["verdict"] == "inconclusive"
    # A smooth flow at tau >= 1 that stays refutes the escape reading; tau < 1 runs are only reported.
    assert _decide([{**sm4, "outcome": "stayed", "growth": 1.0}])["flow-smooth-escape"]["verdict"] == "not supported"
    assert _decide([{**sm4, "tau": 0.01, "outcome": "stayed"}])["flow-smooth-escape"]["verdict"] == "inconclusive"
    # SGD that stays everywhere refutes the finite-step reading; a diverged run is not escape.
    assert _decide([lin4, {**sgd, "outcome": "stayed"}])["finite-step-escape"]["verdict"] == "not supported"
    assert _decide([lin4, {**sgd, "outcome": "diverged"}])["finite-step-escape"]["verdict"] == "inconclusive"
    # Rates (against the claim's r, predicted_rate): per seed, each run judged; a factor-2 miss keeps it from
    # "supported", a majority off refutes it.
    miss = [lin4, sm4, {**sm4, "seed": 1, "measured_rate": 0.5}]
    assert _decide(miss * 2)["linearised-rate-prediction"]["verdict"] == "inconclusive"
    off = [{**sm4, "seed": s, "measured_rate": 0.6} for s in range(3)] + [sm4]
    assert _decide(off)["linearised-rate-prediction"]["verdict"] == "not supported"
    # Both rates below rate_floor x the state's largest |predicted rate|: agreement, whatever their ratio.
    tiny_rates = [
        {**lin4, "measured_rate": 1e-5, "predicted_rate_window": -1e-5, "predicted_rate": -1e-5},
        {**lin4, "tau": 100.0, "predicted_rate": 0.2},
    ]  # the same state's fastest flow sets the scale
    assert ce_verdict.rate_agreement(tiny_rates[0], ce_verdict.rate_scales(tiny_rates)) == "agree"
    assert np.isnan(ce_verdict.rate_ratio({**sm4, "predicted_rate": 0.0}))


@pytest.mark.slow  # an end-to-end run (the slow tier of .ci/run)
def test_hessian_tracker_schema_rule_and_exact_parity(tiny_runs):
    out, res = tiny_runs
    r = res["hessian_tracker"]
    common.check_verdict(r)
    m = r["measurements"]
    rows = m["rows"]
    cfg = tracker_config.get_config("tiny")
    assert len(rows) == len(cfg.runs) * cfg.train.epochs * cfg.analysis.tracker_batches
    for row in rows:
        for key in (
            "lambda_min_exact",
            "lambda_max_exact",
            "lambda_min_lanczos",
            "lambda_min_power",
            "lambda_max_power",
            "lanczos_true_residual_min",
        ):
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
                abs(row["lambda_min_power"] - row["lambda_min_exact"]) / abs(row["lambda_min_exact"])
            )
        assert row["sign_error_min"] == bool(
            abs(row["lambda_min_exact"]) > row["sign_tol"]
            and np.sign(row["lambda_min_power"]) != np.sign(row["lambda_min_exact"])
        )
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
        assert r["headline"][key] == pytest.approx(
            scipy.stats.spearmanr(e["std_backbone"], e["cond_backbone"])[0], nan_ok=True
        )
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
    row = {
        "valid": valid,
        "dead_head": False,
        "rel_error_min_power": rel,
        "sign_error_min": sign,
        "sign_error_max": False,
        "underestimate_ratio": 1.0 / (1.0 - min(rel, 0.5)),
        "lambda_min_ref": -1.0,
        "sign_tol": 1e-12,
        "lanczos_abs_error": float("nan"),
    }
    return {"summary": hessian_tracker.summary([row] * n), "max_block_coupling": 0.0, "spearman": {}}


def test_hessian_tracker_verdict_rule_thresholds():
    cfg = tracker_config.get_config("tiny")
    decide = lambda m: hessian_tracker.decide(m, cfg)["claims"][0]["verdict"]
    t = hessian_tracker.THRESHOLDS  # the registry's
    assert decide(_summary_of(0.01)) == "supported"  # the tracker resolves lambda_min
    assert decide(_summary_of(t["rel_error"])) == "supported"  # at the threshold
    assert decide(_summary_of(0.5)) == "not supported"  # 50% relative error
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


def test_hessian_tracker_dry_run_projects_training_and_checkpoints_apart_from_two_batches(monkeypatch):
    """The tiny dry run: the first run trained at 1/8 and 1/4 of the batch (2 and 4 of 16), the trainer's step and
    the checkpoint time of each fitted as ``a n^p`` and projected to every step and checkpoint of the variant."""
    cfg = suite.make_config("hessian_tracker", "tiny", dry_run=True)
    calls, t_step, t_ck = [], (lambda b: 1e-3 * b**1.5), (lambda b: 2e-2 * b**2)

    def fake_train_and_track(config, act, init, images, seed, batch=None):  # the timings of a run at `batch`
        calls.append((act, init, batch))
        epochs = {"std_backbone": [0.1, 0.2, 0.3], "cond_backbone": [3.0, 2.0, 1.0]}
        return (
            [],
            {"activation": act, "init": init, "seed": seed, "epochs": epochs, "block_coupling": 0.0},
            t_step(batch),
            t_ck(batch),
        )

    monkeypatch.setattr(hessian_tracker, "train_and_track", fake_train_and_track)
    d = hessian_tracker.measure(cfg)["dry_run"]
    assert calls == [(*cfg.runs[0], 2), (*cfg.runs[0], 4)]  # the first run only, at both batches
    images, _ = hessian_tracker.paper_simsiam.load_images(
        cfg.data, seed=cfg.seed, dry_run=True, dry_examples=cfg.dry.examples
    )  # digits: generated
    spe = min(len(images) // cfg.train.batch_size, cfg.train.steps_per_epoch)
    steps = len(cfg.runs) * cfg.train.epochs * spe
    checkpoints = len(cfg.runs) * cfg.train.epochs * min(cfg.analysis.tracker_batches, spe)
    assert (d["steps_full"], d["checkpoints_full"], d["batch_full"], d["scaled"]) == (steps, checkpoints, 16, "batch")
    for part, t, p, count in (("training", t_step, 1.5, steps), ("analysis", t_ck, 2.0, checkpoints)):
        r = d[part]
        assert [n for n, _ in r["points"]] == [2.0, 4.0] and r["exponent"] == pytest.approx(p)
        assert r["count"] == count and r["projected_s"] == pytest.approx(count * t(16)) and r["projected_s"] > 0
    assert d["projected_wall_time_s"] == d["training_s"] + d["analysis_s"]
    assert d["step_time_s"] == t_step(4) and d["training_device_hours"] == pytest.approx(steps * t_step(16) / 3600)
