"""Experiments 4 (collapse escape) and 5 (Hessian tracker parity) end to end on their tiny configs."""
import math

import numpy as np
import pytest
import scipy.stats

from experiments import collapse_escape, common, hessian_tracker, reproduce
from experiments.configs import hessian_tracker as tracker_config


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("dynamics")
    res = {name: reproduce.run_one(name, "tiny", out) for name in ("collapse_escape", "hessian_tracker")}
    return out, res


def _finite(x):
    return isinstance(x, (int, float)) and math.isfinite(x)


def test_collapse_escape_schema_rule_and_numbers(tiny_runs):
    out, res = tiny_runs
    r = res["collapse_escape"]
    common.check_verdict(r)
    rows = r["rows"]
    cfg = r["config"]
    # One flow + one SGD run per lr for every (activation, BN, init, seed).
    n_cases = len(cfg["activations"]) * len(cfg["batch_norm"]) * len(cfg["inits"]) * cfg["seeds"]
    assert len(rows) == n_cases * (1 + len(cfg["lrs"]))
    for row in rows:
        for key in ("std_init", "lambda_min_H_eff_init", "lambda_max_H_eff_init", "rho_norm", "lambda_min_H_L"):
            assert _finite(row[key]), (key, row[key])
        assert row["lambda_min_H_eff_init"] <= row["lambda_max_H_eff_init"]
        # Constructed collapse: the projector outputs start (nearly) parallel, far below the escape threshold.
        if not row["batch_norm"]:
            assert row["std_init"] < row["escape_threshold"] and not row["held_initially"]
        assert row["ok"] and row["status"] == "successful"
        # An escape time, when there is one, lies inside the horizon.
        if row["escaped"]:
            assert 0 <= row["escape_time"] <= cfg["horizon"] + 1e-9
            assert (row["escape_time"] == 0) == row["held_initially"]
        # A linear head has no interaction term: M = 0 exactly, so lambda_min(M) = 0.
        if row["activation"] == "identity":
            assert row["lambda_min_M_init"] == 0.0
        # SimSiam's negative cosine: H_L is indefinite (DESIGN.md s.4), so Thm 4.1's premise fails.
        assert not row["H_L_psd"] and row["lambda_min_H_L"] < 0
    # Flow and SGD start from the same state: same initial statistics.
    for (act, seed) in {(x["activation"], x["seed"]) for x in rows}:
        same = [x for x in rows if x["activation"] == act and x["seed"] == seed]
        assert len({x["std_init"] for x in same}) == 1
        assert len({x["lambda_min_H_eff_init"] for x in same}) == 1
    # The rule, recomputed from the stored rows.
    v, stats = collapse_escape.verdict(rows)
    assert v == r["verdict"]
    assert stats["E_smooth_flow"] == r["headline"]["E_smooth_flow"]
    assert (out / "collapse_escape" / "escape_std.png").exists()
    assert (out / "collapse_escape" / "lambda_min_heff.png").exists()
    text = collapse_escape.report(r, "fig")
    assert "| init | head | BN | dynamics |" in text
    assert "![std of normalised outputs](fig/escape_std.png)" in text
    assert "(fig/lambda_min_heff.png)" in text


def test_collapse_escape_verdict_rule_cases():
    base = dict(init="collapsed", dead_head_init=False, ok=True, H_L_psd=True, timescale_ratio_median=2.0)

    def row(kind, dyn, bn, escaped):
        return {**base, "head_kind": kind, "dynamics": dyn, "batch_norm": bn, "escaped": escaped}

    good = [row("smooth", "flow", False, True), row("linear", "flow", False, False),
            row("piecewise", "flow", False, False), row("linear", "sgd", False, True)]
    assert collapse_escape.verdict(good)[0] == "supported"
    bad = good[:1] + [row("linear", "flow", False, True)] + good[2:]
    assert collapse_escape.verdict(bad)[0] == "not supported"
    indef = [{**x, "H_L_psd": False} for x in good]
    assert collapse_escape.verdict(indef)[0] == "premise violated"
    # A dead head is excluded, not counted as "did not escape".
    dead = good + [{**row("piecewise", "flow", False, False), "dead_head_init": True}]
    assert collapse_escape.verdict(dead)[1]["dead_head_runs"] == 1


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
    assert again["verdict"] == r["verdict"] and "resolves lambda_min" in hessian_tracker.CLAIM
    assert r["paper"] == hessian_tracker.PAPER_SPEARMAN
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
    decide = lambda m: hessian_tracker.decide(m, cfg)["verdict"]
    assert decide(_summary_of(0.01)) == "supported"           # the tracker resolves lambda_min
    assert decide(_summary_of(0.5)) == "not supported"        # 50% relative error
    assert decide(_summary_of(0.01, sign=True)) == "not supported"  # right size, wrong sign
    assert decide(_summary_of(0.01, valid=False)) == "inconclusive"
    assert decide(_summary_of(0.01, n=cfg.verdict.min_valid_checkpoints - 1)) == "inconclusive"


def test_hessian_tracker_paper_config_is_the_authors_recipe():
    c = tracker_config.get_config("paper")
    assert c.data.name == "cifar10" and c.model.backbone == "resnet18_cifar"
    assert (c.train.batch_size, c.train.epochs, c.analysis.tracker_batches, c.analysis.power_steps) == (256, 100, 5, 20)
    assert (c.model.hidden, c.model.out_dim, c.model.pred_hidden) == (2048, 2048, 512)
    assert c.runs == [["swish", "normal"], ["swish", "collapsed"], ["relu", "collapsed"]]
    assert not c.analysis.exact_blocks and c.analysis.blockwise_lanczos and c.train.lr == 0.05
