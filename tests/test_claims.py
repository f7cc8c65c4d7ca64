"""The claims registry: one rule per claim, digests that make a changed rule force a rerun.

The stored results under ``results/`` must carry, for every claim an experiment decides, the
registry's current rule digest: a rule changed after the run makes its stored verdict stale, and
:func:`test_committed_results_carry_the_registry_digests` fails until the experiment is rerun.
"""
import dataclasses
import importlib
import pathlib
import string

import pytest

from experiments import claims, common, suite

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
                out.append(f"{path.parent.name}: {rec['id']} decided under {rec['rule_digest']}, "
                           f"registry has {claims.rule_digest(rec['id'])}")
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
    assert stale_records(tmp_path) == [f"guillotine: {cid} decided under {rec['rule_digest']}, registry has "
                                       f"{claims.rule_digest(cid)}"]
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
