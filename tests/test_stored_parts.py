"""Per-part checkpoints (experiments/stored_parts.py) and their use by collapse_hessians: a resumed run reuses exactly
its own code's and config's parts, recomputes any other, and decides from the same values as a run without a break."""

import json
import math

import pytest

from experiments import stored_parts, suite
from experiments.configs import collapse_hessians as cfg_module


def _calls():
    log = []

    def fn(value):
        def run():
            log.append(value)
            return value

        return run

    return log, fn


def test_a_part_is_computed_once_and_read_back_by_the_same_code_and_config(tmp_path):
    cfg = cfg_module.get_config("tiny")
    log, fn = _calls()
    run = stored_parts.parts(tmp_path, "collapse_hessians", cfg)
    value = {"x": 1.5, "nan": float("nan"), "t": (1, 2), "flag": True}
    first = run("case000", fn(value))
    again = stored_parts.parts(tmp_path, "collapse_hessians", cfg)("case000", fn("never"))
    assert log == [value]  # the second runner read the file
    for got in (first, again):  # the JSON form either way: tuples as lists, NaN restored
        assert got["x"] == 1.5 and got["t"] == [1, 2] and got["flag"] is True and math.isnan(got["nan"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["case000.json"]  # no temporary file left
    assert json.loads((tmp_path / "case000.json").read_text())["seconds"] >= 0.0  # the part's own wall time


def test_another_config_or_code_or_a_torn_file_recomputes(tmp_path, monkeypatch):
    cfg = cfg_module.get_config("tiny")
    log, fn = _calls()
    stored_parts.parts(tmp_path, "collapse_hessians", cfg)("p", fn(1))
    other = cfg_module.get_config("tiny")
    other.seed = 7  # another run: never mixed with the first
    assert stored_parts.parts(tmp_path, "collapse_hessians", other)("p", fn(2)) == 2
    moved = cfg_module.get_config("tiny")
    moved.checkpoint_dir = "/elsewhere"  # the directory is not part of the stamp: a moved run still resumes
    other.seed = cfg.seed
    assert stored_parts.parts(tmp_path, "collapse_hessians", other)("p", fn(3)) == 3  # file now holds seed 0's 3
    assert stored_parts.parts(tmp_path, "collapse_hessians", moved)("p", fn(4)) == 3
    monkeypatch.setattr(stored_parts.claims, "code_digest", lambda name: "0" * 16)  # edited code
    assert stored_parts.parts(tmp_path, "collapse_hessians", cfg)("p", fn(5)) == 5
    (tmp_path / "p.json").write_text('{"stamp": "x", "val')  # cut short by an interrupted write
    assert stored_parts.parts(tmp_path, "collapse_hessians", cfg)("p", fn(6)) == 6
    assert log == [1, 2, 3, 5, 6]


def test_no_directory_stores_nothing_and_bad_tags_are_refused(tmp_path):
    cfg = cfg_module.get_config("tiny")
    log, fn = _calls()
    run = stored_parts.parts("", "collapse_hessians", cfg)
    assert run("a", fn((1.0, float("inf"))))[1] == math.inf and run("a", fn(2)) == 2 and log == [(1.0, math.inf), 2]
    run = stored_parts.parts(tmp_path, "collapse_hessians", cfg)
    for bad in ("", "../x", ".hidden", "a/b", "a b"):
        with pytest.raises(ValueError, match="`tag` must be a plain file name"):
            run(bad, fn(0))


def test_the_paper_variant_measures_every_claim_but_the_width_claim_which_paper_widths_measures():
    from experiments import collapse_hessians as exp

    paper, widths_only, smoke = (cfg_module.get_config(v) for v in ("paper", "paper_widths", "smoke"))
    assert set(exp.measured_claims(paper)) == set(exp.CLAIMS) - {exp.widths.RANK_PREDICTS_STABILITY}
    assert exp.measured_claims(widths_only) == (exp.widths.RANK_PREDICTS_STABILITY,)
    assert exp.measured_claims(smoke) == exp.CLAIMS
    assert paper.analysis.states == ["equilibrium", "collapsed"] and paper.model.batch_norm == [False]
    assert (paper.data.n, paper.data.d, paper.model.hidden, paper.model.k) == (256, 512, 2048, 2048)


@pytest.mark.slow
def test_a_run_interrupted_after_some_cases_resumes_to_the_same_results(tmp_path, monkeypatch):
    """The tiny variant without widths (the paper variant's shape) through reproduce's runner: a run that fails after
    its fourth case leaves four case files; the resumed run computes only the rest and stores the same records and
    measurements as an uninterrupted run."""
    from experiments.collapse_hessians import cases as cases_mod

    make = suite.make_config

    def tiny(*a, **k):
        c = make(*a, **k)
        c.analysis.widths, c.analysis.widths_composed = [], []
        return c

    monkeypatch.setattr(suite, "make_config", tiny)
    whole = suite.run_one("collapse_hessians", "tiny", tmp_path / "whole", force=True)
    real, calls = cases_mod.run_case, []

    def failing(*a, **k):
        calls.append(a[1:5])
        if len(calls) == 5:
            raise RuntimeError("interrupted")
        return real(*a, **k)

    import experiments.collapse_hessians as exp

    monkeypatch.setattr(exp, "run_case", failing)
    with pytest.raises(RuntimeError, match="interrupted"):
        suite.run_one("collapse_hessians", "tiny", tmp_path / "resumed", force=True)
    stored = sorted(p.name for p in (tmp_path / "resumed" / "collapse_hessians" / "checkpoints").iterdir())
    # each equilibrium case's certificate right after it (the two share one build of the state)
    assert stored == [f"{kind}{i:03d}.json" for kind in ("case", "certificate") for i in range(4)]
    calls.clear()
    monkeypatch.setattr(exp, "run_case", lambda *a, **k: calls.append(a[1:5]) or real(*a, **k))
    resumed = suite.run_one("collapse_hessians", "tiny", tmp_path / "resumed", force=False)
    n_cases = len(whole["measurements"]["cases"])
    assert len(calls) == n_cases - 4  # only the cases not stored
    timeless = lambda m: json.dumps({**m, "widths": {**m["widths"], "seconds": 0.0}}, sort_keys=True)
    assert timeless(resumed["measurements"]) == timeless(whole["measurements"])  # the widths' wall time aside
    strip = lambda recs: [{k: r.get(k) for k in ("id", "subject", "verdict", "deciding", "reason")} for r in recs]
    assert strip(resumed["claims"]) == strip(whole["claims"])
    assert exp.widths.RANK_PREDICTS_STABILITY not in {r["id"] for r in whole["claims"]}
