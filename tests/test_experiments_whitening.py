"""Experiment 1 (Thm 3.1 whitening) on its tiny config through the runner, and its two claims' rules on
hand-made measurements for which each verdict must come out."""

import numpy as np
import pytest

from experiments import claims, common, whitening
from experiments.configs import whitening as cfg_whitening


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("whitening")
    return out, common.run_experiment(whitening, cfg_whitening.get_config("tiny"), out)


def test_whitening_tiny_construction_exact_and_records(tiny):
    out, r = tiny
    common.check_verdict(r)
    A = r["measurements"]["construction"]
    assert A["max_rel_error_on_S"] < 1e-10 and A["max_abs_eig_off_S"] < 1e-8
    # |H_eff P|_2 bounds both blocks off S: at least the complement's eigenvalues and the coupling.
    assert max(A["max_abs_eig_off_S"], A["cross_norm"]) <= A["max_norm_off_S"] + 1e-15 < 1e-10
    # Locality: away from the base point the same head no longer whitens S exactly.
    assert A["max_rel_error_on_S_at_other_points"] > 1e-6
    for row in r["measurements"]["trained"]:
        assert np.isfinite(row["decorrelation_error_trained"]) and row["cond_C_trained"] >= 1.0
    assert (out / "training_curves.png").exists()
    recs = {c["id"]: c for c in r["claims"]}
    assert set(recs) == set(whitening.CLAIMS) and all(c["scale"] == "toy" for c in recs.values())
    assert recs["thm3.1-construction"]["verdict"] == "supported"
    assert recs["thm3.1-construction"]["rule_digest"] == claims.rule_digest("thm3.1-construction")
    # The stored verdicts are the rule applied to the stored measurements.
    again = whitening.decide(r["measurements"], cfg_whitening.get_config("tiny"))
    assert [c["verdict"] for c in again["claims"]] == [c["verdict"] for c in r["claims"]]
    assert r["paper"] == {} and "verdict" not in r


def _construction(on_s=1e-14, off_s=1e-15):
    return {"max_rel_error_on_S": on_s, "max_norm_off_S": off_s, "rank_H_L": 8, "r": 4}


@pytest.mark.parametrize(
    "on_s, off_s, expected",
    [
        (1e-14, 1e-15, "supported"),
        (1e-3, 1e-15, "not supported"),  # S not whitened: refutes the theorem
        (1e-14, 1e-4, "not supported"),  # H_eff not zero off S
        (2e-10, 1e-15, "not supported"),  # just above the registry's 1e-10
    ],
)
def test_construction_rule_comes_out_each_way(on_s, off_s, expected):
    assert whitening.decide_construction(_construction(on_s, off_s))["verdict"] == expected


def _row(loss, init, trained, noise=0.05):
    return {"loss": loss, "view_noise": noise, "decorrelation_error_init": init, "decorrelation_error_trained": trained}


GOOD_CONTROL = [_row("barlow_twins", 2.0, 0.1), _row("vicreg", 2.0, 0.1)]


@pytest.mark.parametrize(
    "rows, expected",
    [
        ([_row("info_nce", 1.4, 0.1), *GOOD_CONTROL], "supported"),
        ([_row("info_nce", 1.4, 1.5), *GOOD_CONTROL], "not supported"),  # no whiter than at initialisation
        ([_row("info_nce", 1.4, 0.5), *GOOD_CONTROL], "inconclusive"),  # whiter, short of 0.25
        ([_row("info_nce", 1.0, 0.24), *GOOD_CONTROL], "inconclusive"),  # < 0.25 but not 5x below the start
        (
            [_row("info_nce", 1.4, 0.1), _row("barlow_twins", 2.0, 0.3), GOOD_CONTROL[1]],
            "inconclusive",
        ),  # control fails
        (
            [_row("info_nce", 1.4, 1.5), GOOD_CONTROL[0], _row("vicreg", 0.4, 0.3)],
            "inconclusive",
        ),  # ... even over a refutation
    ],
)
def test_implicit_whitening_rule_comes_out_each_way(rows, expected):
    item = whitening.decide_whitening(rows, 0.05)
    assert item["id"] == "linear-heads-whiten" and item["verdict"] == expected, item["reason"]
    assert item["deciding"]["whitening_tol"] == claims.CLAIMS["linear-heads-whiten"].thresholds["whitening_tol"]


def test_implicit_whitening_is_decided_on_infonce_at_the_configs_noise_only():
    # The decorrelating losses passing does not make the claim: InfoNCE decides it.
    rows = [
        _row("info_nce", 1.4, 1.5),
        *GOOD_CONTROL,
        _row("info_nce", 1.4, 0.01, noise=0.3),
        _row("spectral_contrastive", 2.0, 0.01),
    ]
    assert whitening.decide_whitening(rows, 0.05)["verdict"] == "not supported"


def test_config_must_train_the_claims_objective_and_its_control():
    c = cfg_whitening.get_config("tiny")
    whitening.check_config(c)
    c.train.losses = ["barlow_twins", "info_nce"]
    with pytest.raises(ValueError, match=r"config.train.losses must include \['vicreg'\]"):
        whitening.measure(c)
    assert "verdict" not in cfg_whitening.get_config("smoke")  # thresholds live in the registry only


def test_config_overrides_must_name_defined_fields():
    from experiments.configs import build

    with pytest.raises(KeyError, match="train.nope"):
        build(cfg_whitening.base(), {"smoke": {"train.nope": 1}}, "smoke")
    with pytest.raises(ValueError, match="unknown variant 'big'"):
        cfg_whitening.get_config("big")
    c = cfg_whitening.get_config("tiny")
    assert c.variant == "tiny" and c.dry_run is False and c.data.d == 6


def test_dry_run_projects_training_and_analysis_from_two_reduced_sizes_each():
    """The dry run times one step of every run at 1/8 and 1/4 of the batch and the analysis at 1/8 and 1/4 of the
    head width, and projects the variant's steps and its one analysis from each fit (tiny, head width 16)."""
    import math

    import jax
    import jax.numpy as jnp

    c = cfg_whitening.get_config("tiny")
    c.dry_run, c.model.k = True, 16
    runs = [("vicreg", c.data.view_noise)]
    rec, A = whitening.dry_run(
        c, jnp.eye(c.data.d), np.eye(c.data.d), runs, jax.random.PRNGKey(0), jax.random.PRNGKey(1)
    )
    train, analysis = rec["training"], rec["analysis"]
    assert [p[0] for p in train["points"]] == [8.0, 16.0] and train["full_size"] == c.data.n == 64
    assert train["count"] == c.train.steps and analysis["count"] == 1
    assert [p[0] for p in analysis["points"]] == [2.0, 4.0] and analysis["full_size"] == 16
    for part in (train, analysis):
        assert math.isfinite(part["exponent"]) and part["projected_s"] > 0 and part["unit_time_s"] > 0
    assert rec["projected_wall_time_s"] == rec["training_s"] + rec["analysis_s"]
    assert rec["training_s"] == train["projected_s"] and rec["step_time_s"] == train["points"][-1][1]
    assert set(rec["scaled"]) == {"training", "analysis"}
    # The construction kept is the one of the larger width (k = 4: q = 2), exact there as at full size.
    assert A["loss"].endswith("q=2)") and A["max_rel_error_on_S"] < 1e-10
