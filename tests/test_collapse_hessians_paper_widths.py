"""The width sweep at the paper's widths: the certificate's rounding scale without the (k, d, d) head Hessian, the
``paper_widths`` variant (the sweep alone) and the dry run's per-rung projection of the sweep."""

import jax
import pytest

import experiments.collapse_hessians as E
from experiments import common
from experiments.collapse_hessians import constructions, dry_run, widths
from experiments.configs import collapse_hessians as C
from ssl_geometry import geometry

jax.config.update("jax_enable_x64", True)


def _certificate(d, h, k, construction, **kw):
    model, variables, c = constructions.draw_head((d, h, k), "swish", construction, jax.random.PRNGKey(7))
    eq = geometry.collapsed_equilibrium(
        model, variables, "mse_target", c, 4, key=jax.random.PRNGKey(8), residual_scale=0.01, activation="swish"
    )
    return geometry.collapse_certificate(model, eq.loss_fn, eq.z, variables=variables, **kw)


@pytest.mark.parametrize("d,h,k", [(4, 12, 8), (16, 48, 32)])
def test_the_probed_rounding_scale_changes_the_tolerance_by_less_than_a_third_and_nothing_else(d, h, k):
    """The rank drop at swish' = 0 and an initialiser's head: with the size of M's terms from 16 Rademacher probes
    instead of the exact (k, d, d) head Hessian, M's rounding tolerance moves by < 1/3, and the conclusion, s* and
    the null dimensions do not move; the probes are fixed, so the same state gives the same tolerance."""
    for construction, conclusion in (
        ("random", "stable (residual below critical)"),
        ("rank_drop", "unstable (M on null(G))"),
    ):
        exact = _certificate(d, h, k, construction)
        probed = _certificate(d, h, k, construction, rounding_probes=16)
        assert exact.conclusion == probed.conclusion == conclusion
        assert probed.block_null_dims == exact.block_null_dims
        assert probed.critical_scale == pytest.approx(exact.critical_scale, rel=1e-12)
        assert exact.interaction_tol > 0
        assert probed.interaction_tol / exact.interaction_tol == pytest.approx(1.0, abs=1 / 3)
        again = _certificate(d, h, k, construction, rounding_probes=16)
        assert again.interaction_tol == probed.interaction_tol


@pytest.mark.parametrize("bad", [0, -1, 2.5, "16"])
def test_rounding_probes_must_be_a_positive_int(bad):
    with pytest.raises(ValueError, match="rounding_probes"):
        _certificate(4, 12, 8, "random", rounding_probes=bad)


def test_the_paper_widths_variant_is_the_sweep_alone_up_to_the_papers_projector():
    cfg = C.get_config("paper_widths")
    assert list(cfg.analysis.states) == [] and list(cfg.analysis.critical_sweep) == []
    assert [list(w) for w in cfg.analysis.widths][-1] == [512, 2048, 2048]
    assert [list(w) for w in cfg.analysis.widths] == [list(w) for w in C.PAPER_WIDTHS]
    assert list(C.get_config("paper").analysis.widths) == []  # paper builds the states; this variant the widths
    # the composed SimSiam head at the paper's size alone, one seed (the config docstring says why)
    assert [list(w) for w in cfg.analysis.widths_composed] == [[512, 2048, 2048, 512]]
    assert cfg.analysis.widths_composed_seeds == 1
    assert dry_run.width_heads(cfg)["512->2048->2048->512->2048"] == {"composed": 3, "composed_rank_drop": 2}
    assert list(E.all_cases(cfg)) == []


@pytest.fixture(scope="module")
def sweep_alone(tmp_path_factory):
    cfg = C.get_config("tiny")
    cfg.unlock()
    cfg.analysis.states = []
    cfg.analysis.critical_sweep = []
    out = tmp_path_factory.mktemp("sweep_alone")
    return cfg, common.run_experiment(E, cfg, out), out


def test_a_variant_without_states_stores_the_width_claim_alone(sweep_alone):
    """No record for a claim about states the variant did not build (an 'inconclusive' there would count
    against the claim's smoke verdict when the records combine)."""
    cfg, res, out = sweep_alone
    m = res["measurements"]
    assert m["cases"] == [] and m["certificates"] == [] and m["critical_sweeps"] == []
    counts = dry_run.width_heads(cfg)
    assert counts == {  # swish and tanh (no zero of tanh'); one seed
        "4->12->8": {"random": 2, "rank_drop": 1, "bottleneck": 2},
        "4->12->8->4->8": {"composed": 2, "composed_rank_drop": 1},
    }
    assert sorted((r["width"], r["construction"]) for r in m["widths"]["rows"]) == sorted(
        (w, c) for w, per in counts.items() for c, n in per.items() for _ in range(n)
    )
    assert [c["id"] for c in res["claims"]] == [widths.RANK_PREDICTS_STABILITY]
    assert res["claims"][0]["verdict"] == "supported"
    text = E.report(res, "rel")
    assert "Collapsed equilibria (residual scale" not in text and "Widths (thm4.1-rank-predicts-stability)" in text
    assert (out / "widths.png").exists() and not (out / "lambda_min_by_case.png").exists()


def test_decide_keeps_exactly_the_claims_measured_claims_names(sweep_alone, monkeypatch):
    """decide filters its items by measured_claims whatever the variant (no separate guard on analysis.states)."""
    _, res, _ = sweep_alone
    full = C.get_config("tiny")  # builds states: every claim is measured
    assert [c["id"] for c in E.decide(res["measurements"], full)["claims"]][-1] == widths.RANK_PREDICTS_STABILITY
    assert {c["id"] for c in E.decide(res["measurements"], full)["claims"]} == set(E.CLAIMS)
    monkeypatch.setattr(E, "measured_claims", lambda config: ("thm4.1-linear-psd", widths.RANK_PREDICTS_STABILITY))
    got = [c["id"] for c in E.decide(res["measurements"], full)["claims"]]
    assert got == ["thm4.1-linear-psd", widths.RANK_PREDICTS_STABILITY]


def test_a_decision_must_hold_exactly_the_claims_its_variant_measures(sweep_alone):
    cfg, res, _ = sweep_alone
    items = [{"id": cid, "verdict": "inconclusive", "deciding": {}, "reason": "x"} for cid in E.CLAIMS]
    with pytest.raises(ValueError, match="which its variant does not measure"):
        common._claim_records(E, {"claims": items}, "toy", None, cfg)
    with pytest.raises(ValueError, match="did not decide its claims"):
        common._claim_records(E, {"claims": []}, "toy", None, cfg)
    full = C.get_config("tiny")
    assert len(common._claim_records(E, {"claims": items}, "toy", None, full)) == len(E.CLAIMS)


def test_the_dry_run_projects_each_rung_from_its_own_timed_heads_and_their_compilation(monkeypatch, fake_clock):
    """A fake head costing 4 ms x d (rank drop 2x, bottleneck 1/2x, composed 3x), whose first call per
    (d, construction) costs 50 ms more (its compilation): each rung's projection is its heads times their times, plus
    the compilations once per activation. The timed head of each construction is the first of the sweep's own
    enumeration (the rank drops: Swish, the activation with a zero of sigma'). The fake head advances a fake clock
    that both of the dry run's timers read (its ``time.perf_counter`` for the first call, ``harness.interleave``'s
    ``clock`` for the timed ones) instead of sleeping, so the projection is exact whatever the load."""
    import types

    cfg = C.get_config("tiny")  # activations swish and tanh, 1 seed, 1 residual scale
    cfg.unlock()
    cfg.analysis.widths = [[4, 12, 8], [8, 24, 16]]
    cfg.analysis.widths_composed = [[4, 12, 8, 4]]
    cfg.analysis.widths_activations = ["tanh", "swish"]  # the rank drops are timed with the second
    seen, compiled, clock = [], set(), fake_clock
    monkeypatch.setattr(dry_run, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    factor = {"random": 1.0, "rank_drop": 2.0, "bottleneck": 0.5, "composed": 3.0, "composed_rank_drop": 3.0}

    def fake_head_row(c, dims, act, construction, seed, scale, key):
        seen.append((dims[0], len(dims), act, construction))
        if (dims, construction) not in compiled:
            compiled.add((dims, construction))
            clock[0] += 0.05
        clock[0] += 0.004 * dims[0] * factor[construction]
        return {}

    monkeypatch.setattr(widths, "head_row", fake_head_row)
    part = dry_run.width_part(cfg, jax.random.PRNGKey(0), repeats=2)
    act = {"random": "tanh", "bottleneck": "tanh", "rank_drop": "swish"}
    one = [(c, act[c]) for c in ("random", "bottleneck", "rank_drop") for _ in range(3)]  # first + 2 timed
    comp = [(c, a) for c, a in (("composed", "tanh"), ("composed_rank_drop", "swish")) for _ in range(3)]
    assert seen == [(d, 3, a, c) for d in (4, 8) for c, a in one] + [(4, 4, a, c) for c, a in comp]
    assert [p[0] for p in part["points"]] == [4, 8] and part["count"] == 13
    assert [p[1] for p in part["points"]] == pytest.approx([0.004 * 4, 0.004 * 8], rel=1e-9)  # the random head's
    counts = dry_run.width_heads(cfg)
    unit = {w: sum(n * factor[c] for c, n in per.items()) for w, per in counts.items()}
    assert unit == {"4->12->8": 5.0, "8->24->16": 5.0, "4->12->8->4->8": 9.0}
    work = 0.004 * 4 * 5 + 0.004 * 8 * 5 + 0.004 * 4 * 9  # every head at its median time: 0.384 s
    expect = [0.004 * 4 * 5 + 6 * 0.05, 0.004 * 8 * 5 + 6 * 0.05, 0.004 * 4 * 9 + 4 * 0.05]  # 2 activations x firsts
    assert sum(expect) == pytest.approx(1.184) and part["projected_s"] == pytest.approx(sum(expect), rel=1e-9)
    # per activation: 0.3 and 0.2 (paid once, not per activation: 0.15 and 0.1)
    assert part["compile_s"] == pytest.approx([0.3, 0.3, 0.2], rel=1e-9)
    # every timed run takes the same: from the compilations paid once per rung to paid per activation
    assert part["spread_s"] == pytest.approx([work + 0.4, work + 0.8], rel=1e-9)
    lo, hi = part["spread_s"]
    assert lo <= part["projected_s"] <= hi
    assert part["projected_s"] - lo >= sum(part["compile_s"]) / 2 - 1e-9  # compilations paid once at the low end


def test_variant_names_the_command_line_accepts():
    import argparse

    from experiments import suite

    for ok in ("tiny", "smoke", "paper", "paper_widths", "paper_vit_tiny"):
        assert suite.parse_variant(ok) == ok
    for bad in ("bogus", "Paper", "smoke_x"):
        with pytest.raises(argparse.ArgumentTypeError, match="sibling paper_"):
            suite.parse_variant(bad)
    assert suite.variants_of("collapse_hessians", "paper_widths") == ["paper_widths"]
    assert suite.run_dir("collapse_hessians", "paper_widths") == "collapse_hessians-paper_widths"


def test_a_stored_variant_is_stale_only_for_the_claims_it_measures(tmp_path):
    """The committed paper_widths run holds the width claim alone and is current; the same records stored as a
    smoke run (a variant that measures every claim) lack five records and are stale, naming them."""
    import json
    import pathlib
    import shutil

    from experiments import suite

    src = pathlib.Path(__file__).resolve().parents[1] / "results" / "collapse_hessians-paper_widths" / "results.json"
    root = pathlib.Path(__file__).resolve().parents[1]
    (tmp_path / "collapse_hessians-paper_widths").mkdir()
    shutil.copy(src, tmp_path / "collapse_hessians-paper_widths" / "results.json")
    shutil.copytree(root / "results" / "collapse_hessians", tmp_path / "collapse_hessians")
    assert suite.stale_runs(tmp_path, ["collapse_hessians"]) == []
    res = json.loads(src.read_text())
    res["variant"] = "smoke"
    (tmp_path / "collapse_hessians" / "results.json").write_text(json.dumps(res))
    (stale,) = suite.stale_runs(tmp_path, ["collapse_hessians"])
    assert stale.run_dir == "collapse_hessians" and "no record of" in stale.why and "thm4.1-linear-psd" in stale.why


def test_a_paper_run_is_stored_beside_the_smoke_run(tmp_path):
    """Every paper variant has a directory of its own (``name-paper``), so the paper-scale run stored in results/
    never overwrites the smoke run's ``name/``; the report collects both (the paper one labelled) and the staleness
    check reads both: a paper run whose code digest differs is stale under its own directory and variant."""
    import json
    import pathlib
    import shutil

    from experiments import reproduce, suite

    assert [suite.run_dir("collapse_hessians", v) for v in ("tiny", "smoke", "paper", "paper_widths")] == [
        "collapse_hessians",
        "collapse_hessians",
        "collapse_hessians-paper",
        "collapse_hessians-paper_widths",
    ]
    root = pathlib.Path(__file__).resolve().parents[1] / "results"
    for d in ("collapse_hessians", "collapse_hessians-paper_widths"):
        shutil.copytree(root / d, tmp_path / d)
    (tmp_path / "collapse_hessians-paper").mkdir()
    (tmp_path / "collapse_hessians-paperless").mkdir()  # neither name-paper nor name-paper_*: not collected
    res = json.loads((root / "collapse_hessians" / "results.json").read_text())
    res["variant"] = "paper"
    (tmp_path / "collapse_hessians-paper" / "results.json").write_text(json.dumps(res))
    shutil.copy(root / "collapse_hessians" / "results.json", tmp_path / "collapse_hessians-paperless")
    assert [d.name for d in suite.stored_dirs(tmp_path, "collapse_hessians")] == [
        "collapse_hessians",
        "collapse_hessians-paper",
        "collapse_hessians-paper_widths",
    ]
    labels = [e.label for e in reproduce.collect(tmp_path, ["collapse_hessians"])]
    assert labels == [
        "3. Collapse Hessians (Thm 4.1)",
        "3. Collapse Hessians (Thm 4.1) [paper]",
        "3. Collapse Hessians (Thm 4.1) [paper_widths]",
    ]
    assert suite.stale_runs(tmp_path, ["collapse_hessians"]) == []
    res["code_digest"] = "0" * 16
    (tmp_path / "collapse_hessians-paper" / "results.json").write_text(json.dumps(res))
    (stale,) = suite.stale_runs(tmp_path, ["collapse_hessians"])
    assert (stale.run_dir, stale.variant) == ("collapse_hessians-paper", "paper") and "code digest" in stale.why
    assert suite.run_dir(stale.name, stale.variant) == stale.run_dir  # --stale reruns it where it is stored
