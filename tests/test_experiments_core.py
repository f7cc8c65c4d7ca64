"""The suite runner and experiments 1 and 3 end to end on their tiny configs."""

import json

import numpy as np
import pytest

from experiments import claims, collapse_hessians, common, reproduce, suite
from experiments.configs import collapse_hessians as collapse_hessians_config


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("suite")
    res = {name: suite.run_one(name, "tiny", out) for name in ("collapse_hessians", "whitening")}
    return out, res


@pytest.mark.slow  # an end-to-end run (the slow tier of .ci/run)
def test_collapse_hessians_tiny_schema_rule_and_closed_forms(tiny_runs):
    import jax

    out, res = tiny_runs
    r = res["collapse_hessians"]
    common.check_verdict(r)
    assert (out / "collapse_hessians" / "lambda_min_by_case.png").exists()
    rows = r["measurements"]["cases"]
    assert all(np.isfinite(c["lambda_min_H_eff"]) for c in rows)
    config = collapse_hessians_config.get_config("tiny")
    # The stored verdicts are the rules' on the stored rows (per objective for the smooth half).
    d = collapse_hessians.decide(r["measurements"], config)
    assert [(i["id"], i.get("subject"), i["verdict"]) for i in d["claims"]] == [
        (c["id"], c["subject"], c["verdict"]) for c in r["claims"]
    ]
    eq = [c for c in rows if c["state"] == "equilibrium"]
    assert eq and all(c["certified"] and c["rho_nonzero"] and c["H_L_psd"] for c in eq)
    assert all(c["grad_z_ratio"] < 1e-8 and c["grad_head_ratio"] < 1e-8 for c in eq)
    # Rows carry the residual scale the construction used (DINO's below 2, where its teacher stays positive).
    for obj, scales in config.analysis.residual_scales.items():
        assert sorted({c["residual_scale"] for c in eq if c["objective"] == obj}) == sorted(scales)
    # Closed form: a linear head on MSE has H_eff = G = (2/n) blockdiag(J^T J), so lambda_min = (2/n) sigma_min(J)^2,
    # J = W2 W1 of the head the case built (run_case's key: fold_in(PRNGKey(seed), case index)).
    cases = list(collapse_hessians.all_cases(config))
    for i, (obj, act, bn, state, s) in enumerate(cases):
        if (obj, act, state) != ("mse_target", "identity", "equilibrium"):
            continue
        key = jax.random.fold_in(jax.random.PRNGKey(config.seed), i)
        w = [
            np.asarray(l["w"])
            for l in collapse_hessians.online_head(config, act, False, 1.0, False).init(key)["params"]["layers"]
        ]
        J = (w[0] @ w[1]).T  # heads apply x @ w
        expect = 2.0 / config.data.n * np.linalg.svd(J, compute_uv=False)[-1] ** 2
        row = [c for c in eq if c["objective"] == obj and c["activation"] == act and c["residual_scale"] == s][0]
        assert row["lambda_min_H_eff"] == pytest.approx(expect, rel=1e-9)
    for c in rows:
        # Exact maths: a linear head has M = 0, so lambda_min(M) = lambda_max(M) = 0.
        if c["head_kind"] == "linear":
            assert c["lambda_min_M"] == 0.0 and c["lambda_max_M"] == 0.0 and np.isnan(c["margin"])
        else:
            assert c["margin"] == pytest.approx(c["lambda_min_H_eff"] / abs(c["lambda_min_M"]))
        if c["H_L_psd"]:  # G = J^T H_L J is PSD (up to rounding)
            assert c["lambda_min_G"] > -1e-10 * max(1.0, abs(c["lambda_max_H_eff"]))
        if c["state"] != "equilibrium":  # labelled, never counted
            assert not c["certified"]
    # The BYOL wiring: each prediction against the *target* projection of the other view, so rho != 0.
    byol = [c for c in rows if c["objective"] == "byol"]
    assert byol and all(c["rho_nonzero"] and c["rho_norm"] > 1e-3 for c in byol)
    # Collapsed Siamese states: the given head is not stationary; driven to stationarity, rho vanishes.
    coll = [c for c in rows if c["state"] == "collapsed"]
    assert coll and all(c["forces_zero_residual"] and not c["stationary"] for c in coll)
    assert all(c["st_stationary"] and c["st_rho"] <= c["st_rho_bound"] < 1e-3 * c["st_rho_start"] for c in coll)
    # the premise held, and |rho| <= |grad| / (sqrt(n) sigma_min) (identical rows), up to the residual's round-off
    assert all(c["st_full_row_rank"] and c["st_rho"] <= c["st_rho_implied_bound"] + c["st_residual_tol"] for c in coll)


def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _residual_formula(objective, u, fixed, n):
    """rho = grad_u L by hand for each objective's first-view loss."""
    if objective == "simsiam":  # 0.5 * -(1/n) sum cos(p_i, z_i)
        p, zz = np.asarray(u), _unit(np.asarray(fixed["u2"]))
        ph = _unit(p)
        return -(0.5 / n) * (zz - np.sum(ph * zz, 1, keepdims=True) * ph) / np.linalg.norm(p, axis=1, keepdims=True)
    if objective == "byol":  # (1/n) sum (2 - 2 cos(p_i, t2_i))
        p, t = np.asarray(u), _unit(np.asarray(fixed["t2"]))
        ph = _unit(p)
        return -(2.0 / n) * (t - np.sum(ph * t, 1, keepdims=True) * ph) / np.linalg.norm(p, axis=1, keepdims=True)
    if objective == "spectral_contrastive":  # -(2/n) sum u_i.v_i + 1/(n(n-1)) sum_{i!=j} (u_i.v_j)^2
        v = np.asarray(fixed["u2"])
        g = np.asarray(u) @ v.T
        np.fill_diagonal(g, 0.0)
        return -(2.0 / n) * v + 2.0 / (n * (n - 1)) * g @ v
    raise KeyError(objective)


@pytest.mark.parametrize(
    "objective,state",
    [(o, "collapsed") for o in ("simsiam", "byol", "spectral_contrastive", "vicreg", "barlow_twins", "info_nce")]
    + [("simsiam", "pseudo_collapsed"), ("byol", "pseudo_collapsed"), ("spectral_contrastive", "pseudo_collapsed")],
)
def test_collapse_hessians_residuals_match_their_formulas(objective, state):
    """Each objective's residual at the experiment's states, against its formula. At exact collapse
    (both views at one point) VICReg, Barlow Twins and InfoNCE have rho = 0 exactly: every gradient term
    is proportional to u_i - mean(u), to u1_i - u2_i, or orthogonal to the common direction."""
    import jax

    cfg = collapse_hessians_config.get_config("tiny")
    model, variables, loss_fn, z1, train, fixed = collapse_hessians.siamese_problem(
        cfg, objective, "swish", False, state, jax.random.PRNGKey(4)
    )
    u = model.apply(variables, z1, train=train)[0]
    rho = np.asarray(jax.grad(loss_fn)(u))
    n = cfg.data.n
    if objective in ("vicreg", "barlow_twins", "info_nce"):
        if state == "collapsed":
            assert np.max(np.abs(rho)) < 1e-12
        else:
            assert np.linalg.norm(rho) > 1e-6
        return
    np.testing.assert_allclose(rho, _residual_formula(objective, u, fixed, n), atol=1e-12, rtol=1e-9)
    assert np.linalg.norm(rho) > 1e-6
    if objective == "spectral_contrastive" and state == "collapsed":  # (2/n)(|u*|^2 - 1) u* in every row
        us = np.asarray(u)[0]
        np.testing.assert_allclose(rho, np.tile(2.0 / n * (us @ us - 1.0) * us, (n, 1)), atol=1e-12)


@pytest.mark.slow  # an end-to-end run (the slow tier of .ci/run)
def test_resume_skips_finished_experiment_and_seed_changes_numbers(tiny_runs, tmp_path):
    out, res = tiny_runs
    path = out / "whitening" / "results.json"
    before = path.stat().st_mtime_ns
    again = suite.run_one("whitening", "tiny", out)
    assert path.stat().st_mtime_ns == before  # reused, not rerun
    assert again["headline"] == res["whitening"]["headline"]
    other = suite.run_one("whitening", "tiny", tmp_path, seed=1)
    first = lambda r: r["measurements"]["trained"][0]["decorrelation_error_trained"]
    assert first(other) != first(res["whitening"])


@pytest.mark.slow  # an end-to-end run (the slow tier of .ci/run)
def test_report_assembly_lists_verdicts_and_figures(tiny_runs, tmp_path):
    out, res = tiny_runs
    report_path = tmp_path / "REPORT.md"
    text = reproduce.assemble_report(out, report_path, "python -m experiments.reproduce --variant tiny")
    assert report_path.read_text() == text
    assert "python -m experiments.reproduce --variant tiny" in text.splitlines()[2]
    for name in ("collapse_hessians", "whitening"):
        for rec in res[name]["claims"]:  # one claim-table row per stored verdict: id, scale, labelled verdict
            assert f"| `{rec['id']}` |" in text and f"**{claims.label(rec)}**" in text and rec["scale"] == "toy"
    assert "lambda_min_by_case.png" in text and "training_curves.png" in text


def test_write_results_rejects_bad_verdict_and_keeps_nonfinite_visible(tmp_path):
    bad = claims.record("guillotine-probe-gap", "inconclusive", scale="smoke", deciding={}, reason="")
    with pytest.raises(ValueError, match="verdict"):
        common.write_results(tmp_path, {"claims": [{**bad, "verdict": "maybe"}], "headline": {}, "paper": {}})
    with pytest.raises(ValueError, match="claims"):
        common.write_results(tmp_path, {"headline": {}, "paper": {}})
    common.write_results(tmp_path, {"claims": [bad], "headline": {"x": float("nan")}, "paper": {}})
    assert json.loads((tmp_path / "results.json").read_text())["headline"]["x"] == "nan"


def test_unknown_experiment_name_is_a_clear_error():
    with pytest.raises(ValueError, match="Unknown experiment"):
        suite.load("nope")


@pytest.mark.slow  # end to end (subprocesses, full runs): the slow tier of .ci/run keeps README command 2 under 15 minutes
def test_main_recomputes_unless_an_interrupted_run_is_marked(tmp_path):
    out = tmp_path / "suite"
    argv = ["--only", "whitening", "--variant", "tiny", "--out", str(out)]
    assert reproduce.main(argv) == 0
    path = out / "whitening" / "results.json"
    marker = out / reproduce.MARKER
    assert path.exists() and (out / "REPORT.md").exists() and not marker.exists()
    first = path.stat().st_mtime_ns
    # A finished run (or committed results): the next run computes afresh.
    assert reproduce.main(argv) == 0
    second = path.stat().st_mtime_ns
    assert second > first
    # An interrupted run leaves the marker: the next run resumes and reuses what finished.
    marker.write_text("{}")
    assert reproduce.main(argv) == 0
    assert path.stat().st_mtime_ns == second and not marker.exists()


def test_require_x64_names_the_experiment_and_the_fix():
    import jax

    with jax.enable_x64(False):
        with pytest.raises(RuntimeError, match="objectives computes exact Hessians in float64"):
            common.require_x64("objectives")
    common.require_x64("objectives")  # enabled by conftest: no error


def test_make_config_passes_data_dir_and_dry_run(tmp_path):
    c = suite.make_config("hessian_tracker", "paper", data_dir=str(tmp_path), dry_run=True, seed=3)
    assert c.data.data_dir == str(tmp_path) and c.dry_run is True and c.seed == 3
    assert suite.make_config("hessian_tracker", "paper").dry_run is False
    # One module per experiment: the authors' SimSiam runs of experiment 4 are experiment 4b, whose config
    # holds the paper variant; the toy problem of experiment 4 has none, so --variant paper skips it.
    mod, cfg = suite.load("collapse_escape_paper")
    assert mod.__name__ == "experiments.collapse_escape_paper" and cfg.get_config("paper").seeds == 3
    assert suite.variants_of("collapse_escape", "paper") == []
    assert suite.variants_of("collapse_escape_paper", "paper") == ["paper"]
    with pytest.raises(ValueError, match="unknown variant 'paper'"):
        suite.make_config("collapse_escape", "paper")


def test_dry_run_of_an_unconverted_config_is_a_clear_skip(monkeypatch):
    import ml_collections

    class FakeCfg:
        @staticmethod
        def get_config(arg=None):
            return ml_collections.ConfigDict({"seed": 0})

    class Declares:
        __name__ = "fake"
        DRY_RUN = True

    monkeypatch.setattr(suite, "load", lambda name: (Declares, FakeCfg))
    with pytest.raises(NotImplementedError, match="no `dry_run` field"):
        suite.make_config("whitening", "paper", dry_run=True)
    # A module that does not declare DRY_RUN would ignore the flag and run its full variant: refused.
    monkeypatch.setattr(suite, "load", lambda name: (type("M", (), {"__name__": "m"}), FakeCfg))
    with pytest.raises(NotImplementedError, match="does not declare DRY_RUN"):
        suite.make_config("whitening", "paper", dry_run=True)


@pytest.mark.slow  # end to end (subprocesses, full runs): the slow tier of .ci/run keeps README command 2 under 15 minutes
def test_main_dry_run_writes_its_own_report_never_report_md(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "dry"
    assert reproduce.main(["--variant", "tiny", "--dry-run", "--only", "hessian_tracker", "--out", str(out)]) == 0
    text = (out / "DRY_RUN.md").read_text()
    assert text.startswith("# DRY RUN") and "| 5. Hessian tracker parity | ran |" in text
    assert not (tmp_path / "REPORT.md").exists() and not (out / "REPORT.md").exists()
    res = common.read_results(out / "hessian_tracker")
    assert res["config"]["dry_run"] is True and res["measurements"]["dry_run"]["step_time_s"] > 0
    assert "[hessian_tracker] dry run: step" in capsys.readouterr().out
    # REPORT.md is never a dry run's report: refused (status 2) before anything runs.
    assert (
        reproduce.main(
            ["--variant", "tiny", "--dry-run", "--only", "hessian_tracker", "--report", str(reproduce.COMMITTED_REPORT)]
        )
        == 2
    )
    assert "--dry-run never writes" in capsys.readouterr().err
