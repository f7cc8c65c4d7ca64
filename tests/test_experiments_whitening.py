"""Experiment 1 (Thm 3.1 whitening) on its tiny config, through the skeleton runner."""
import numpy as np
import pytest

from experiments import common, whitening
from experiments.configs import whitening as cfg_whitening


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("whitening")
    return out, common.run_experiment(whitening, cfg_whitening.get_config("tiny"), out)


def test_whitening_tiny_construction_exact_and_rule(tiny):
    out, r = tiny
    common.check_verdict(r)
    A = r["measurements"]["construction"]
    assert A["max_rel_error_on_S"] < 1e-10
    assert A["max_abs_eig_off_S"] < 1e-8
    # Locality: away from the base point the same head no longer whitens S exactly.
    assert A["max_rel_error_on_S_at_other_points"] > 1e-6
    for row in r["measurements"]["trained"]:
        assert np.isfinite(row["decorrelation_error_trained"]) and row["cond_C_trained"] >= 1.0
    assert (out / "training_curves.png").exists()
    # The stated rule is the one decide applies, with the config's numbers in it.
    assert "1e-10" in r["verdict_rule"] and "0.25" in r["verdict_rule"]
    assert whitening.decide(r["measurements"], cfg_whitening.get_config("tiny"))["verdict"] == r["verdict"]


def test_whitening_rule_can_come_out_either_way():
    config = cfg_whitening.get_config("tiny")
    good = {"construction": {"max_rel_error_on_S": 1e-14, "max_abs_eig_off_S": 0.0,
                             "max_rel_error_on_S_at_other_points": 0.1, "rank_H_L": 3},
            "trained": [{"loss": "barlow_twins", "kind": "decorrelation", "view_noise": config.data.view_noise,
                         "decorrelation_error_init": 1.0, "decorrelation_error_trained": 0.01}]}
    assert whitening.decide(good, config)["verdict"] == "supported"
    bad_training = {**good, "trained": [{**good["trained"][0], "decorrelation_error_trained": 0.5}]}
    assert whitening.decide(bad_training, config)["verdict"] == "inconclusive"
    bad_construction = {**good, "construction": {**good["construction"], "max_rel_error_on_S": 1e-3}}
    assert whitening.decide(bad_construction, config)["verdict"] == "not supported"


def test_config_overrides_must_name_defined_fields():
    from experiments.configs import build

    with pytest.raises(KeyError, match="train.nope"):
        build(cfg_whitening.base(), {"smoke": {"train.nope": 1}}, "smoke")
    with pytest.raises(ValueError, match="unknown variant 'big'"):
        cfg_whitening.get_config("big")
    c = cfg_whitening.get_config("tiny")
    assert c.variant == "tiny" and c.dry_run is False and c.data.d == 6
