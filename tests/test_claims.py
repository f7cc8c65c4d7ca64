"""The claims registry: one rule per claim, digests that make a changed rule or changed code force a rerun, and one
verdict per claim.

The stored results under ``results/`` must carry, for every claim an experiment decides, the
registry's current rule digest and the current code's digest: a rule or the code changed after the
run makes its stored verdict stale, and :func:`test_committed_results_carry_the_registry_digests`
and :func:`test_committed_results_were_made_by_the_current_code` fail until the experiment is rerun
(``python -m experiments.reproduce --stale``).
"""

import ast
import dataclasses
import importlib
import pathlib
import shutil
import string
import subprocess
import types

import pytest
from ml_collections import config_dict

from experiments import claims, common, suite
from experiments.claims import provenance

ROOT = pathlib.Path(__file__).resolve().parents[1]
MODULES = sorted(suite.NAMES)


def _module(mod):
    return importlib.import_module(f"experiments.{mod}")


def stale_records(results_root: pathlib.Path) -> list[str]:
    """``experiment: claim (stored digest != registry digest)`` for every stale stored verdict."""
    out = []
    for path in sorted(results_root.glob("*/results.json")):
        res = common.read_results(path.parent)
        for rec in res.get("claims", []):
            if rec["id"] not in claims.CLAIMS:
                out.append(f"{path.parent.name}: {rec['id']} is not a registered claim")
            elif rec["rule_digest"] != claims.rule_digest(rec["id"]):
                out.append(
                    f"{path.parent.name}: {rec['id']} decided under {rec['rule_digest']}, "
                    f"registry has {claims.rule_digest(rec['id'])}"
                )
        if not res.get("claims"):
            out.append(f"{path.parent.name}: no claims stored")
    return out


def test_registry_is_well_formed():
    for cid, c in claims.CLAIMS.items():
        assert cid == c.id and c.statement and c.source and c.refuted_by
        assert c.scales and set(c.scales) <= set(claims.SCALES), cid
        fields = {f for _, f, _, _ in string.Formatter().parse(c.rule) if f}
        assert fields <= set(c.thresholds), f"{cid}: rule reads {fields - set(c.thresholds)} not in its thresholds"
        assert set(c.thresholds) <= fields, f"{cid}: thresholds {set(c.thresholds) - fields} not in its rule"
        assert len({ctl.name for ctl in c.controls}) == len(c.controls)
        for ctl in c.controls:
            assert ctl.description and ctl.reason, f"{cid}: control {ctl.name} lacks its reason"
        claims.rule_text(cid)


def test_every_experiment_decides_registered_claims_and_the_registry_agrees():
    decided = {}
    for mod in MODULES:
        m = _module(mod)
        assert m.CLAIMS, mod
        for cid in m.CLAIMS:
            assert cid in claims.CLAIMS, f"{mod} decides {cid!r}, which is not registered"
            decided.setdefault(cid, set()).add(mod)
    for cid, c in claims.CLAIMS.items():
        assert decided.get(cid, set()) == set(c.experiments), (cid, decided.get(cid), c.experiments)


def test_one_rule_per_claim_wherever_it_is_decided():
    """Sec. 5 is decided by four experiments and Thm 4.1's instability by two: one registry entry each."""
    sec5 = claims.CLAIMS["sec5-metric-degeneracy"]
    assert set(sec5.experiments) == {"guillotine", "objectives", "minilm_geometry", "pretrained_orbits"}
    assert {c.name for c in sec5.controls} == {"random", "between", "data", "untrained", "negative"}
    assert set(claims.CLAIMS["thm4.1-smooth-unstable"].experiments) == {"collapse_hessians", "objectives"}


def test_a_changed_rule_changes_the_digest_and_makes_stored_verdicts_stale(tmp_path, monkeypatch):
    cid = "guillotine-probe-gap"
    rec = claims.record(cid, "supported", scale="smoke", deciding={"gap": 0.1}, reason="x")
    common.write_results(tmp_path / "guillotine", {"claims": [rec], "headline": {}, "paper": {}})
    assert stale_records(tmp_path) == []
    changed = dataclasses.replace(claims.CLAIMS[cid], thresholds={**claims.CLAIMS[cid].thresholds, "probe_margin": 0.0})
    monkeypatch.setitem(claims.CLAIMS, cid, changed)
    assert claims.rule_digest(cid) != rec["rule_digest"]
    assert stale_records(tmp_path) == [
        f"guillotine: {cid} decided under {rec['rule_digest']}, registry has {claims.rule_digest(cid)}"
    ]
    for field, value in [("rule", changed.rule + " "), ("controls", ()), ("scales", ("paper",))]:
        monkeypatch.setitem(claims.CLAIMS, cid, dataclasses.replace(claims.CLAIMS[cid], **{field: value}))
        assert claims.rule_digest(cid) != rec["rule_digest"], field


def test_records_carry_scale_digest_and_decisiveness():
    rec = claims.record("released-arrays", "supported", scale="smoke", deciding={}, reason="")
    assert rec["decisive"] is False and claims.label(rec) == "supported (smoke; not decisive)"
    rec = claims.record("guillotine-probe-gap", "inconclusive", scale="smoke", deciding={}, reason="")
    assert rec["decisive"] and claims.label(rec) == "inconclusive (smoke)"
    assert claims.scale_of("tiny") == "toy" and claims.scale_of("paper_vit_tiny") == "paper"
    with pytest.raises(ValueError, match="verdict"):
        claims.record("guillotine-probe-gap", "probably", scale="smoke", deciding={}, reason="")
    with pytest.raises(KeyError, match="unknown claim id"):
        claims.rule_digest("no-such-claim")


def test_committed_results_carry_the_registry_digests():
    """A rule changed in the registry after the committed run: rerun the experiment (README command 1)."""
    assert stale_records(ROOT / "results") == []


def test_committed_results_were_made_by_the_current_code():
    """Every committed results file carries the code digest of the current code (and the registry's rule digests);
    a changed ``decide``, measurement module or library module the experiment imports makes it stale."""
    stale = suite.stale_runs(ROOT / "results")
    assert not stale, suite.stale_message(stale, "results/")


# ----------------------------------------------------------------------------- code digests


def _write(root: pathlib.Path, rel: str, text: str = "") -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_code_files_follow_imports_statically_and_exactly(tmp_path):
    """A hand-made tree: the closure follows absolute, relative, nested and function-level imports inside the two
    packages, runs package __init__ files, and leaves out what nothing imports and what lies outside."""
    files = {
        "experiments/__init__.py": "",
        "experiments/toy/__init__.py": "from . import part\nfrom .helpers import thing\nimport numpy as np\n",
        "experiments/toy/part.py": "from ..common import run\n",
        "experiments/toy/helpers.py": "def thing():\n    from ssl_geometry.sub import leaf\n    return leaf\n",
        "experiments/toy/deeper/extra.py": "",  # in the package: hashed although nothing imports it
        "experiments/common.py": "import importlib\nimportlib.import_module('ssl_geometry.dyn')\n",
        "experiments/configs/__init__.py": "",
        "experiments/configs/toy.py": "from experiments.configs import build\n",
        "experiments/rules.py": "from ssl_geometry import ops\n",
        "experiments/claims/__init__.py": "",
        "experiments/claims/sec9.py": "",
        "experiments/report_md.py": "from experiments import toy\n",  # imports the experiment; not imported by it
        "experiments/other.py": "",
        "ssl_geometry/__init__.py": "",
        "ssl_geometry/ops.py": "",
        "ssl_geometry/dyn.py": "",
        "ssl_geometry/sub/__init__.py": "",
        "ssl_geometry/sub/leaf.py": "",
        "ssl_geometry/unused.py": "",
    }
    for rel, text in files.items():
        _write(tmp_path, rel, text)
    got = provenance.code_files("toy", root=tmp_path)
    leftout = {"experiments/report_md.py", "experiments/other.py", "ssl_geometry/unused.py"}
    assert got == sorted(set(files) - leftout)
    digest = provenance.code_digest("toy", root=tmp_path)
    _write(tmp_path, "experiments/other.py", "x = 1\n")  # not in the closure: the digest stands
    assert provenance.code_digest("toy", root=tmp_path) == digest
    _write(tmp_path, "ssl_geometry/sub/leaf.py", "x = 1\n")  # imported inside a function body: it changes
    assert provenance.code_digest("toy", root=tmp_path) != digest
    with pytest.raises(ValueError, match="experiments/nope.py"):
        provenance.code_files("nope", root=tmp_path)
    (tmp_path / "experiments/configs/toy.py").unlink()
    with pytest.raises(ValueError, match="experiments/configs/toy.py"):
        provenance.code_files("toy", root=tmp_path)


def test_code_files_of_the_suite_are_what_the_registry_says():
    for name in suite.NAMES:
        files = set(claims.code_files(name))
        module = ROOT / "experiments" / name
        own = (
            {p.relative_to(ROOT).as_posix() for p in module.rglob("*.py")}
            if module.is_dir()
            else {f"experiments/{name}.py"}
        )
        registry = {p.relative_to(ROOT).as_posix() for p in (ROOT / "experiments" / "claims").glob("*.py")}
        assert own | registry | {f"experiments/configs/{name}.py", "experiments/rules.py"} <= files, name
        assert {"experiments/common.py", "ssl_geometry/__init__.py"} <= files, name  # imported by every experiment
        assert not files & {
            "experiments/report_md.py",
            "experiments/report_claims.py",
            "experiments/reproduce.py",
            "experiments/suite.py",
        }, name
    assert "experiments/whitening.py" not in claims.code_files("paper_data")


def _copy_tree(dst: pathlib.Path) -> None:
    """The .py files of experiments/ and ssl_geometry/ under ``dst`` (what a code digest reads)."""
    for pkg in provenance.PACKAGES:
        for src in (ROOT / pkg).rglob("*.py"):
            out = dst / src.relative_to(ROOT)
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, out)


def _touch_decide(path: pathlib.Path) -> None:
    """Insert one statement at the top of the body of ``decide`` in ``path``."""
    lines = path.read_text().splitlines(keepends=True)
    fn = next(n for n in ast.parse("".join(lines)).body if isinstance(n, ast.FunctionDef) and n.name == "decide")
    first = (
        fn.body[1] if isinstance(fn.body[0], ast.Expr) and isinstance(fn.body[0].value, ast.Constant) else fn.body[0]
    )
    lines.insert(first.lineno - 1, " " * first.col_offset + "_touched = True\n")
    path.write_text("".join(lines))


def _stored(name: str, root: pathlib.Path, variant: str = "smoke", seed: int = 0) -> dict:
    """A hand-made results file of ``name`` that is fresh for the code under ``root``: every registered claim of the
    experiment decided under the registry's rule digest and the code's digest."""
    digest = claims.code_digest(name, root=root)
    recs = [
        claims.record(cid, "supported", scale="smoke", deciding={}, reason="r", code_digest=digest)
        for cid, c in claims.CLAIMS.items()
        if name in c.experiments
    ]
    return {
        "variant": variant,
        "seed": seed,
        "code_digest": digest,
        "code_files": claims.file_digests(name, root=root),
        "claims": recs,
        "headline": {},
        "paper": {},
    }


def test_touching_a_decide_makes_exactly_that_experiment_stale_and_stale_selects_it(tmp_path):
    tree, results = tmp_path / "tree", tmp_path / "results"
    _copy_tree(tree)
    names = ["paper_data", "whitening", "metric_adaptation"]
    for name in names:
        common.write_results(results / name, _stored(name, tree, seed=3 if name == "whitening" else 0))
    before = {n: claims.code_digest(n, root=tree) for n in names}
    assert suite.stale_runs(results, names, root=tree) == []
    assert suite.stale_message([], results) == ""

    _touch_decide(tree / "experiments" / "whitening.py")
    after = {n: claims.code_digest(n, root=tree) for n in names}
    assert after["whitening"] != before["whitening"]
    assert {n: after[n] for n in names if n != "whitening"} == {n: before[n] for n in names if n != "whitening"}

    stale = suite.stale_runs(results, names, root=tree)
    assert [(s.name, s.run_dir, s.variant, s.seed) for s in stale] == [("whitening", "whitening", "smoke", 3)]
    assert "experiments/whitening.py" in stale[0].why and before["whitening"] in stale[0].why
    message = suite.stale_message(stale, results)
    assert "['whitening']" in message and "python -m experiments.reproduce --stale" in message

    # what `reproduce --stale` runs
    jobs, skipped, _ = suite.stale_jobs(results, names, "smoke", root=tree)
    assert jobs == [("whitening", "smoke", 3)] and skipped == {}  # at its stored variant and seed
    # a missing experiment is stale and runs at --variant; one whose rule changed is stale too
    only = ["paper_data", "collapse_escape"]
    jobs, _, stale = suite.stale_jobs(results, only, "tiny", root=tree)
    assert jobs == [("collapse_escape", "tiny", None)] and "no stored results" in stale[0].why
    res = common.read_results(results / "paper_data")
    res["claims"][0]["rule_digest"] = "0" * 16
    common.write_results(results / "paper_data", res)
    jobs, _, stale = suite.stale_jobs(results, only, "tiny", root=tree)
    assert jobs == [("paper_data", "smoke", 0), ("collapse_escape", "tiny", None)]
    assert "released-arrays decided under rule 0000000000000000" in stale[0].why


def test_a_results_file_without_code_digest_or_with_a_claim_missing_is_stale(tmp_path):
    res = _stored("whitening", provenance.ROOT)
    common.write_results(tmp_path / "whitening", {**res, "claims": res["claims"][:1]})
    (stale,) = suite.stale_runs(tmp_path, ["whitening"])
    assert "no record of ['linear-heads-whiten']" in stale.why
    common.write_results(tmp_path / "whitening", {k: v for k, v in res.items() if k != "code_digest"})
    (stale,) = suite.stale_runs(tmp_path, ["whitening"])
    assert "no code digest stored" in stale.why


def test_a_resumed_run_reuses_a_result_only_from_the_same_config_and_code(tmp_path):
    config = suite.make_config("whitening", "tiny")
    stored = {**_stored("whitening", provenance.ROOT), "config": common.to_jsonable(config)}
    common.write_results(tmp_path, stored)
    assert suite.is_done(tmp_path, config, claims.code_digest("whitening"))
    assert not suite.is_done(tmp_path, config, "0" * 16)  # the code changed since
    config.seed += 1
    assert not suite.is_done(tmp_path, config, claims.code_digest("whitening"))


def test_run_experiment_stores_code_digest_commit_clean_and_seed(tmp_path):
    """A stand-in for ``experiments.whitening`` (its measure and decide replaced) run through the real runner."""
    mod = types.ModuleType("experiments.whitening")
    mod.CLAIMS = ("thm3.1-construction", "linear-heads-whiten")
    mod.measure = lambda config: {"x": 1.0, "paper": {}}
    mod.decide = lambda m, config: {
        "claims": [{"id": cid, "verdict": "supported", "reason": "r"} for cid in mod.CLAIMS],
        "headline": {},
    }
    config = config_dict.ConfigDict({"variant": "tiny", "seed": 7})
    res = common.run_experiment(mod, config, tmp_path)
    digest = claims.code_digest("whitening")
    assert res["code_digest"] == digest and res["seed"] == 7 and res["variant"] == "tiny"
    assert list(res["code_files"]) == claims.code_files("whitening")
    assert all(r["code_digest"] == digest and r["rule_digest"] == claims.rule_digest(r["id"]) for r in res["claims"])
    assert (res["commit"], res["clean"]) == claims.git_state(claims.code_files("whitening"))
    config = config_dict.ConfigDict({"variant": "tiny"})  # a config without a seed stores seed None
    assert common.run_experiment(mod, config, tmp_path)["seed"] is None


def test_git_state_names_the_commit_and_whether_the_hashed_files_changed(tmp_path, monkeypatch):
    assert provenance.git_state(["a.py"], root=tmp_path) == (None, None)  # not a repository
    git = shutil.which("git")
    if git is None:
        pytest.skip("needs git")
    run = lambda *a: subprocess.run([git, "-C", str(tmp_path), *a], check=True, capture_output=True, text=True)
    run("init", "-q")
    assert provenance.git_state(["a.py"], root=tmp_path) == (None, None)  # no commit yet
    _write(tmp_path, "a.py", "x = 1\n")
    _write(tmp_path, "results/r.json", "{}")
    run("add", ".")
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "c")
    head = run("rev-parse", "HEAD").stdout.strip()
    assert provenance.git_state(["a.py"], root=tmp_path) == (head, True)
    _write(tmp_path, "results/r.json", '{"changed": 1}')  # results/ changes do not count
    _write(tmp_path, "REPORT.md", "new")
    assert provenance.git_state(["a.py"], root=tmp_path) == (head, True)
    _write(tmp_path, "a.py", "x = 2\n")
    assert provenance.git_state(["a.py"], root=tmp_path) == (head, False)
    _write(tmp_path, "b.py", "")  # an untracked hashed file
    run("checkout", "-q", "a.py")
    assert provenance.git_state(["a.py", "b.py"], root=tmp_path) == (head, False)
    monkeypatch.setattr(provenance.shutil, "which", lambda name: None)  # git missing
    assert provenance.git_state(["a.py"], root=tmp_path) == (None, None)


# ----------------------------------------------------------------------------- one verdict per claim


def _r(cid, verdict, scale="smoke", experiment="exp", subject=None, decisive=True, reason=None):
    """A hand-made claim record as ``claim_verdict`` reads it."""
    return {
        "id": cid,
        "verdict": verdict,
        "scale": scale,
        "decisive": decisive,
        "subject": subject,
        "experiment": experiment,
        "reason": reason or f"{experiment} {subject} {verdict}",
    }


def test_every_claim_names_a_combine_rule_and_it_does_not_enter_the_rule_digest(monkeypatch):
    for cid, c in claims.CLAIMS.items():
        assert c.combine in claims.COMBINE_RULES, cid
        assert c.combine != "single" or len(c.experiments) == 1, cid
        assert claims.combine_text(cid).startswith(f"combine ({c.combine}): ")
    c = claims.CLAIMS["thm4.1-linear-psd"]
    digest = claims.rule_digest(c.id)
    monkeypatch.setitem(claims.CLAIMS, c.id, dataclasses.replace(c, combine="per-subject-all"))
    assert claims.rule_digest(c.id) == digest
    with pytest.raises(ValueError, match="combine must be one of"):
        dataclasses.replace(c, combine="majority")
    with pytest.raises(ValueError, match="exactly one experiment"):
        dataclasses.replace(c, combine="single")  # two experiments


THM = "thm4.1-smooth-unstable"  # combine: theorem, scales toy/smoke/paper


@pytest.mark.parametrize(
    "records, verdict, scale, experiments, subjects",
    [
        # one sound counterexample anywhere refutes, at any scale, whatever else holds
        (
            [
                _r(THM, "supported", "paper", "a"),
                _r(THM, "not supported", "toy", "b", "dino"),
                _r(THM, "inconclusive", "smoke", "c"),
            ],
            "not supported",
            "toy",
            ["b"],
            ["dino"],
        ),
        # no counterexample, one undecided record: inconclusive ('premise violated' says nothing)
        (
            [
                _r(THM, "supported", "smoke", "a"),
                _r(THM, "inconclusive", "smoke", "b"),
                _r(THM, "premise violated", "paper", "c"),
            ],
            "inconclusive",
            "smoke",
            ["b"],
            [],
        ),
        # every record that says something supports: supported, at the largest scale among them
        (
            [
                _r(THM, "supported", "smoke", "a", "mse"),
                _r(THM, "supported", "paper", "b", "dino"),
                _r(THM, "premise violated", "paper", "c"),
            ],
            "supported",
            "paper",
            ["a", "b"],
            ["mse", "dino"],
        ),
        (
            [_r(THM, "premise violated", "smoke", "a"), _r(THM, "premise violated", "smoke", "b")],
            "premise violated",
            "smoke",
            ["a", "b"],
            [],
        ),
        # a record at a scale the claim may not be decided at never decides
        (
            [_r(THM, "not supported", "toy", "a", decisive=False), _r(THM, "supported", "smoke", "b")],
            "supported",
            "smoke",
            ["b"],
            [],
        ),
        ([_r(THM, "not supported", "toy", "a", decisive=False)], "inconclusive", None, [], []),
    ],
)
def test_theorem_combine(records, verdict, scale, experiments, subjects):
    v = claims.claim_verdict(THM, records)
    assert (v["verdict"], v["scale"], v["experiments"], v["subjects"]) == (verdict, scale, experiments, subjects)
    assert v["why"]


def test_theorem_combine_says_why_in_one_line():
    v = claims.claim_verdict(
        THM,
        [
            _r(THM, "supported", "smoke", "a", reason="all stable"),
            _r(THM, "not supported", "smoke", "b", "dino", reason="7 of 9 strictly stable"),
        ],
    )
    assert v["why"] == "1 of 2 decisive records refutes it -- b [dino]: 7 of 9 strictly stable"
    v = claims.claim_verdict(THM, [_r(THM, "not supported", "smoke", "b", reason="x " * 200)])
    assert "\n" not in v["why"] and v["why"].endswith(" ...") and len(v["why"]) < 220
    assert claims.claim_verdict(THM, [])["why"] == "no stored record decides it"
    assert (
        "may be decided only at smoke, paper"
        in claims.claim_verdict(
            "guillotine-probe-gap", [_r("guillotine-probe-gap", "supported", "toy", "guillotine", decisive=False)]
        )["why"]
    )


SEC5 = "sec5-metric-degeneracy"  # combine: per-subject-all, scales smoke/paper


@pytest.mark.parametrize(
    "records, verdict, scale, subjects",
    [
        # one subject not supported: not supported, whatever the others say
        (
            [
                _r(SEC5, "supported", subject="A"),
                _r(SEC5, "not supported", subject="B"),
                _r(SEC5, "inconclusive", subject="C"),
            ],
            "not supported",
            "smoke",
            ["B"],
        ),
        # a subject's paper-scale record supersedes its smoke-scale one
        (
            [
                _r(SEC5, "not supported", "smoke", subject="A"),
                _r(SEC5, "supported", "paper", subject="A"),
                _r(SEC5, "supported", "smoke", subject="B"),
            ],
            "supported",
            "paper",
            ["A", "B"],
        ),
        # ... but not another subject's: B's smoke failure stands beside A's paper support
        (
            [_r(SEC5, "supported", "paper", subject="A"), _r(SEC5, "not supported", "smoke", subject="B")],
            "not supported",
            "smoke",
            ["B"],
        ),
        (
            [
                _r(SEC5, "supported", subject="A"),
                _r(SEC5, "inconclusive", subject="B"),
                _r(SEC5, "premise violated", subject="C"),
            ],
            "inconclusive",
            "smoke",
            ["B"],
        ),
        (
            [
                _r(SEC5, "supported", subject="A"),
                _r(SEC5, "supported", subject="B"),
                _r(SEC5, "premise violated", subject="C"),
            ],
            "supported",
            "smoke",
            ["A", "B"],
        ),
        (
            [_r(SEC5, "premise violated", subject="A"), _r(SEC5, "premise violated", subject="B")],
            "premise violated",
            "smoke",
            ["A", "B"],
        ),
        ([_r(SEC5, "supported", "toy", subject="A", decisive=False)], "inconclusive", None, []),
    ],
)
def test_per_subject_all_combine(records, verdict, scale, subjects):
    v = claims.claim_verdict(SEC5, records)
    assert (v["verdict"], v["scale"], v["subjects"]) == (verdict, scale, subjects)


def test_per_subject_all_counts_subjects_and_keeps_experiments_apart():
    recs = [
        _r(SEC5, "supported", experiment="objectives", subject="dino"),
        _r(SEC5, "not supported", experiment="minilm_geometry", reason="ratio >= 1"),
        _r(SEC5, "supported", experiment="guillotine"),
        _r(SEC5, "supported", experiment="guillotine"),
    ]
    v = claims.claim_verdict(SEC5, recs)
    assert v["experiments"] == ["minilm_geometry"]
    assert v["why"] == "1 of 3 subjects refutes it -- minilm_geometry: ratio >= 1"


GAP = "guillotine-probe-gap"  # combine: single, scales smoke/paper


@pytest.mark.parametrize(
    "records, verdict, scale, experiments",
    [
        # the paper-scale record supersedes the smoke-scale one
        (
            [_r(GAP, "not supported", "smoke", "guillotine"), _r(GAP, "supported", "paper", "guillotine")],
            "supported",
            "paper",
            ["guillotine"],
        ),
        # sibling paper variants at the same scale: one that refutes decides
        (
            [
                _r(GAP, "supported", "paper", "guillotine"),
                _r(GAP, "not supported", "paper", "guillotine-paper_vit_tiny"),
            ],
            "not supported",
            "paper",
            ["guillotine-paper_vit_tiny"],
        ),
        (
            [
                _r(GAP, "supported", "paper", "guillotine"),
                _r(GAP, "inconclusive", "paper", "guillotine-paper_cifar100"),
            ],
            "inconclusive",
            "paper",
            ["guillotine-paper_cifar100"],
        ),
        ([_r(GAP, "supported", "smoke", "guillotine")], "supported", "smoke", ["guillotine"]),
        ([_r(GAP, "premise violated", "smoke", "guillotine")], "premise violated", "smoke", ["guillotine"]),
        ([_r(GAP, "not supported", "smoke", "guillotine")], "not supported", "smoke", ["guillotine"]),
        ([], "inconclusive", None, []),
    ],
)
def test_single_combine(records, verdict, scale, experiments):
    v = claims.claim_verdict(GAP, records)
    assert (v["verdict"], v["scale"], v["experiments"]) == (verdict, scale, experiments)
    if len(records) == 1:
        assert v["why"] == f"guillotine: guillotine None {verdict}"  # one record: its reason


def test_claim_verdict_refuses_foreign_or_unplaced_records():
    with pytest.raises(ValueError, match="a record of claim 'guillotine-probe-gap'"):
        claims.claim_verdict(THM, [_r(GAP, "supported")])
    with pytest.raises(ValueError, match="'experiment'"):
        claims.claim_verdict(THM, [{**_r(THM, "supported"), "experiment": None}])
    with pytest.raises(KeyError, match="unknown claim id"):
        claims.claim_verdict("no-such-claim", [])
