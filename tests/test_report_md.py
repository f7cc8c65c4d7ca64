"""REPORT.md's claim table and header (experiments/report_md.py) on hand-made stored results."""
import pathlib
import re
import types

import pytest

from experiments import claims, report_md

MOD = types.SimpleNamespace(CLAIM="the claim", report=lambda res, rel: f"body of {rel}")


def _rec(cid, verdict, scale="smoke", subject=None, **deciding):
    return claims.record(cid, verdict, scale=scale, deciding=deciding, reason=f"{cid} because", subject=subject)


def _entry(name, recs, variant="smoke", date="2026-12-01T10:00:00+00:00", paper=None):
    res = {"variant": variant, "scale": claims.scale_of(variant), "claims": recs, "headline": {},
           "paper": paper or {}, "date": date, "environment": {"device": "cpu:cpu", "versions": {"jax": "0.10"}}}
    return report_md.Entry(name, f"label {name}", res, MOD, pathlib.Path("/r") / name)


def _rows(table, cid):
    return [ln for ln in table.splitlines() if ln.startswith(f"| `{cid}` |")]


def _cells(row):
    """The cells of a table row (a ``\\|`` inside a cell is text, not a separator)."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]]


def test_a_claim_decided_by_several_experiments_and_subjects_is_one_group_in_registry_order():
    sec5 = "sec5-metric-degeneracy"
    entries = [_entry("guillotine", [_rec("guillotine-probe-gap", "supported", gap=0.1), _rec(sec5, "inconclusive")]),
               _entry("objectives", [_rec("thm4.1-smooth-unstable", "supported", subject="mse"),
                                     _rec("thm4.1-smooth-unstable", "not supported", subject="dino"),
                                     _rec(sec5, "not supported")]),
               _entry("minilm_geometry", [_rec(sec5, "supported", scale="paper")]),
               _entry("paper_data", [_rec("released-arrays", "supported", scale="paper", x=1.0)], variant="paper")]
    table = report_md.claim_table(entries)
    lines = table.splitlines()[2:]
    ids = [ln.split("|")[1].strip().strip("`") for ln in lines]
    order = list(claims.CLAIMS)
    assert ids == sorted(ids, key=order.index)  # grouped, registry order
    rows = _rows(table, sec5)
    head = claims.CLAIMS[sec5].statement.split("|")[0]  # (the table escapes the statement's "|")
    assert len(rows) == 3 and head in rows[0]
    assert all(head not in r for r in rows[1:])  # the statement once per claim
    assert [_cells(r)[2] for r in rows] == ["label guillotine", "label objectives", "label minilm_geometry"]
    smooth = _rows(table, "thm4.1-smooth-unstable")
    assert [_cells(r)[3] for r in smooth] == ["mse", "dino"]
    assert "**supported (smoke)**" in smooth[0] and "**not supported (smoke)**" in smooth[1]
    assert "**supported**" in _rows(table, sec5)[2]  # paper scale: no label
    assert "x = 1" in _rows(table, "released-arrays")[0]


def test_a_changed_rule_keeps_its_history_line_and_marks_old_verdicts_stale(monkeypatch):
    cid = "guillotine-probe-gap"
    rec = _rec(cid, "supported", gap=0.1)
    monkeypatch.setitem(claims.HISTORY, cid, [("2026-11-30", "abcdef0123456789", "inconclusive",
                                               "control changed before the rerun")])
    table = report_md.claim_table([_entry("guillotine", [rec])])
    (row,) = _rows(table, cid)  # one row per verdict: the history sits under the statement, in its cell
    statement = _cells(row)[1]
    assert statement.startswith(claims.CLAIMS[cid].statement[:40])
    assert "<br>*rule history, 2026-11-30:* before, rule abcdef0123456789 gave *inconclusive*" in statement
    assert "stale" not in row
    stale = {**rec, "rule_digest": "0000000000000000"}
    assert "stale: decided under rule 0000000000000000" in report_md.claim_table([_entry("guillotine", [stale])])
    legacy = {**rec, "rule_digest": "legacy"}
    assert "pre-registry rule; rerun" in report_md.verdict_cell(legacy)


def test_results_without_claims_are_shown_never_dropped():
    e = _entry("whitening", [])
    e.results.pop("claims")
    e.results["verdict"] = "supported"
    table = report_md.claim_table([e])
    assert "pre-registry results: rerun" in table and "label whitening" in table


def test_header_names_variant_and_date_of_each_section_when_they_differ():
    same = [_entry("whitening", [_rec("thm3.1-construction", "supported")]),
            _entry("paper_data", [_rec("released-arrays", "supported", scale="paper")],
                   date="2026-12-01T23:00:00+00:00")]
    text = report_md.render(same, pathlib.Path("/r/REPORT.md"), "python -m experiments.reproduce", source="results")
    assert "Every section below comes from variant `smoke`, run on 2026-12-01." in text.splitlines()[2]
    mixed = [same[0], _entry("paper_data", [_rec("released-arrays", "supported", scale="paper")], variant="tiny",
                             date="2026-12-03T08:00:00+00:00")]
    text = report_md.render(mixed, pathlib.Path("/r/REPORT.md"), "python -m experiments.reproduce", source="results")
    assert "The sections below come from different runs" in text
    assert "| label whitening | `smoke` | smoke | 2026-12-01T10:00:00+00:00 |" in text
    assert "| label paper_data | `tiny` | toy | 2026-12-03T08:00:00+00:00 |" in text
    assert "Every section below" not in text
    # Each section says where its numbers come from, and lists its verdicts with reasons and the registry rules.
    assert "variant `tiny` (toy scale), finished 2026-12-03T08:00:00+00:00" in text
    assert "- `released-arrays`: **supported** -- released-arrays because" in text
    assert f"- `released-arrays`: {claims.rule_text('released-arrays')}" in text


def test_a_section_the_experiment_cannot_read_names_the_file_and_the_fix():
    def old_report(res, rel):
        return res["headline"]["recomputed"]  # a key the stored (older) results lack

    e = _entry("paper_data", [_rec("released-arrays", "supported", scale="paper")])._replace(
        module=types.SimpleNamespace(CLAIM="c", report=old_report))
    with pytest.raises(RuntimeError, match=r"/r/paper_data/results.json: .*KeyError.*rerun paper_data"):
        report_md.render([e], pathlib.Path("/r/REPORT.md"), "cmd", source="results")
