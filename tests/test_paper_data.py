"""Experiment 0 (paper_data): the paper's printed numbers from its released arrays, checked independently."""

import copy
import pathlib

import numpy as np
import pytest

from experiments import common, paper_data
from experiments.configs import paper_data as paper_data_config

ROOT = pathlib.Path(paper_data.__file__).parent.parent / "paper_results"


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("paper_data")
    return common.run_experiment(paper_data, paper_data_config.get_config("tiny"), out), out


def test_headline_matches_the_papers_printed_values(results):
    res, out = results
    h = res["headline"]
    # the keys outside checks read, each computed with the paper's definition
    assert round(h["spearman_normal_swish"], 3) == 0.339
    assert round(h["spearman_collapsed_swish"], 3) == 0.609
    assert round(h["spearman_collapsed_relu"], 3) == 0.669
    assert round(h["orbit_spread_ratio_cifar10_resnet18"], 1) == 21.9
    assert h["orbit_spread_ratio_cifar10_vit_tiny"] > 1000.0  # not printed by the paper; the released head barely moves
    assert round(h["curvature_ratio_cifar10_resnet18"], 2) == 1.93
    assert round(h["curvature_ratio_cifar10_vit_tiny"], 2) == 2.59
    # Counted apart: 6 values recomputed from arrays decide; the 18 probe accuracies are read back.
    assert (h["recomputed"], h["recomputed_matching"], h["read_back"], h["read_back_matching"]) == (6, 6, 18, 18)
    assert set(paper_data.READ_BACK) == {k for k in paper_data.PRINTED if k.startswith("probe_")}
    (rec,) = res["claims"]
    assert rec["id"] == "released-arrays" and rec["verdict"] == "supported" and rec["scale"] == "paper"
    assert set(paper_data.RECOMPUTED) <= set(rec["deciding"]) and not set(paper_data.READ_BACK) & set(rec["deciding"])
    assert res["paper"] == {k: paper_data.PRINTED[k][0] for k in paper_data.RECOMPUTED}
    assert (out / "tracker.png").exists()
    text = paper_data.report(res, "x")
    assert "0.3387" in text and "21.85" in text
    assert "6 are recomputed" in text and "18 (every probe accuracy)" in text and "read back (stored number)" in text


def _ranks(x):
    r = np.empty(len(x))
    r[np.argsort(x, kind="stable")] = np.arange(len(x))
    return r


def test_spearman_recomputed_by_hand(results):
    res, _ = results
    for run in ("normal_swish", "collapsed_swish", "collapsed_relu"):
        d = np.load(ROOT / "cifar10/resnet18/hessian_tracker" / f"raw_data_{run}.npz")
        v, c = d["variances"][1:], d["condition_numbers"][1:]
        assert len(np.unique(v)) == len(v) and len(np.unique(c)) == len(c)  # no ties: plain ranks suffice
        rv, rc = _ranks(v), _ranks(c)
        n = len(v)
        rho = 1.0 - 6.0 * np.sum((rv - rc) ** 2) / (n * (n * n - 1))
        t = res["measurements"]["tracker"][run]
        assert t["spearman_paper"] == pytest.approx(rho, abs=1e-12)
        assert t["spearman_helper"] == pytest.approx(rho, abs=1e-12)
        # the clamp binds, so the condition number is lambda_max * 1e7: same ranks as lambda_max
        assert t["spearman_std_vs_lambda_max"] == pytest.approx(rho, abs=1e-12)
        assert np.isnan(t["spearman_project_unclamped"])


def test_orbit_compression_recomputed_by_hand(results):
    res, _ = results
    d = np.load(ROOT / "cifar10/resnet18/orbit_visualization/arrays.npz")
    spreads = {}
    for name in ("orbits_z", "orbits_h"):
        x = d[name].astype(np.float64)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        per_orbit = []
        for oid in range(15):
            pts = x[d["orbit_ids"] == oid]
            assert pts.shape[0] == 12
            per_orbit.append(np.mean(np.sum((pts - pts.mean(0)) ** 2, axis=1)))
        spreads[name] = np.mean(per_orbit)
    ratio = spreads["orbits_z"] / spreads["orbits_h"]
    assert res["headline"]["orbit_spread_ratio_cifar10_resnet18"] == pytest.approx(ratio, rel=1e-6)
    o = res["measurements"]["geometry"]["cifar10_resnet18"]["orbits"]
    assert o["angles"] == [30.0 * i for i in range(12)]
    # the project's (distance) spread compresses less: roughly the square root
    assert 0.5 * np.sqrt(ratio) < o["compression_project"] < 1.5 * np.sqrt(ratio)


def test_released_tracker_and_collapse_facts(results):
    res, _ = results
    m = res["measurements"]
    relu = m["tracker"]["collapsed_relu"]
    assert relu["dead_head"] and relu["lambda_min_exact_zero_epochs"] == relu["epochs"] - 1
    assert not m["tracker"]["normal_swish"]["dead_head"]
    rows = {(r["arch"], r["dataset"], r["run"]): r for r in m["collapse"]}
    lin = rows[("resnet18", "cifar10", "linear_bn_False_lr_base")]
    # the linear head grows ~90x (2e-5 -> 1.9e-3) but stays below 0.5 / sqrt(2048): not escaped by our criterion
    assert lin["std_final"] == pytest.approx(1.935e-3, rel=1e-3) and lin["growth_fold"] > 50 and not lin["escaped"]
    bn = rows[("resnet18", "cifar10", "swish_bn_True_lr_base")]
    assert bn["escaped"] and bn["held_initially"]
    assert rows[("resnet18", "cifar10", "swish_bn_False_lr_base")]["timescale_ratio_paper"] > 1.0


def _decide(m):
    (item,) = paper_data.decide(m, paper_data_config.get_config("tiny"))["claims"]
    return item


def test_decide_can_refute(results):
    res, _ = results
    m = copy.deepcopy(res["measurements"])
    m["tracker"]["normal_swish"]["spearman_paper"] = 0.3396  # rounds to 0.340, not the printed 0.339
    out = _decide(m)
    assert out["verdict"] == "not supported" and "spearman_normal_swish" in out["reason"]


def test_read_back_values_decide_nothing(results):
    res, _ = results
    m = copy.deepcopy(res["measurements"])
    m["geometry"]["cifar10_resnet18"]["probes"]["backbone_linear"] = 12.0  # a read-back value off by 40 points
    out = _decide(m)
    assert out["verdict"] == "supported" and paper_data.decide(m, None)["headline"]["read_back_matching"] == 17


def test_nothing_recomputed_is_inconclusive(results):
    res, _ = results
    m = copy.deepcopy(res["measurements"])
    for run in paper_data.analysis.TRACKER_RUNS:
        m["tracker"][run]["spearman_paper"] = float("nan")
    for name in ("cifar10_resnet18", "cifar10_vit_tiny"):
        m["geometry"][name]["curvature_ratio_paper"] = float("nan")
    m["geometry"]["cifar10_resnet18"]["orbits"]["compression_paper"] = float("nan")
    assert _decide(m)["verdict"] == "inconclusive"


def test_bad_root_names_the_field():
    config = paper_data_config.get_config("tiny")
    with config.unlocked():
        config.data.root = "/nonexistent/paper_results"
    with pytest.raises(FileNotFoundError, match="config.data.root"):
        paper_data.data_root(config)


def test_dry_run_projects_the_orbit_analysis_from_two_widths():
    """The dry run times one orbit file's re-analysis at h widths 256 and 512 (of 2048) and projects the five
    orbit files from the fit; nothing is trained, so the projection is the analysis alone."""
    import math

    A = paper_data.analysis
    root = paper_data.data_root(paper_data_config.get_config("tiny"))
    rec = A.dry_measure(root, 1.5, repeats=1)
    a = rec["analysis"]
    assert [p[0] for p in a["points"]] == [256.0, 512.0] and (a["full_size"], a["count"]) == (2048.0, 5.0)
    assert math.isfinite(a["exponent"]) and a["projected_s"] > 0 and all(t > 0 for _, t in a["points"])
    assert "training" not in rec and rec["projected_wall_time_s"] == rec.get("training_s", 0.0) + rec["analysis_s"]
    assert rec["analysis_s"] == a["projected_s"] and rec["step_time_s"] == a["points"][-1][1]
    assert (rec["scaled"], rec["width_full"], rec["measured_full_run_s"]) == ("width", 2048, 1.5)
    assert len(A.orbit_files(root)) == 5 and all(p.exists() for p in A.orbit_files(root))
    # A reduced width is the re-analysis of the first coordinates of z (512 -> 64) and h (2048 -> 256).
    d = A.npz(root / A.DRY_RUN_ORBITS)
    cut = {**d, "orbits_z": d["orbits_z"][:, :64], "orbits_h": d["orbits_h"][:, :256]}
    assert A._orbit_row(d, 1 / 8) == A._orbit_row(cut)
    assert A._orbit_row(d, 1 / 8)["compression_paper"] != A._orbit_row(d)["compression_paper"]
    with pytest.raises(ValueError, match="`fraction`"):
        A._orbit_row(d, 0.0)
