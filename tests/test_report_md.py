"""REPORT.md as a reader's document (experiments/report_md.py) on hand-made stored results: the summary, the
claim-level table, each section's records, the header naming each section's run, tables that render, and README's
copy of the claim-level table."""

import pathlib
import re
import types

import pytest

from experiments import claims, common, report_claims, report_md

ROOT = pathlib.Path(__file__).resolve().parents[1]
MOD = types.SimpleNamespace(CLAIM="the claim", report=lambda res, rel: f"body of {rel}")


def _rec(cid, verdict, scale="smoke", subject=None, name=None, **deciding):
    """A record decided by the current code of ``name`` (fresh), or by no recorded code (``name`` None: stale)."""
    code = claims.code_digest(name) if name else None
    return claims.record(
        cid, verdict, scale=scale, deciding=deciding, reason=f"{cid} because", subject=subject, code_digest=code
    )


def _entry(name, recs, variant="smoke", date="2026-12-01T10:00:00+00:00", paper=None, seed=0, run_dir=None):
    res = {
        "variant": variant,
        "seed": seed,
        "scale": claims.scale_of(variant),
        "claims": recs,
        "headline": {},
        "paper": paper or {},
        "date": date,
        "code_digest": claims.code_digest(name),
        "commit": "a" * 40,
        "clean": True,
        "environment": {"device": "cpu:cpu", "versions": {"jax": "0.10"}},
    }
    return report_md.Entry(name, f"label {name}", res, MOD, pathlib.Path("/r") / (run_dir or name))


def _cells(row):
    """The cells of a table row (a ``\\|`` inside a cell is text, not a separator)."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]]


def broken_tables(text: str) -> list[str]:
    """Every markdown table of ``text`` whose header, separator and rows do not all have the same number of cells
    (what GitHub and mkdocs then print as raw text)."""
    lines, bad, i = text.splitlines(), [], 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", lines[i + 1]):
            n, j = len(_cells(lines[i + 1])), i + 2
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            if any(len(_cells(ln)) != n for ln in [lines[i], *lines[i + 2 : j]]):
                bad.append(lines[i])
            i = j
        else:
            i += 1
    return bad


def _rows(table, cid):
    return [_cells(ln) for ln in table.splitlines() if ln.startswith(f"| `{cid}` |")]


SEC5, SMOOTH, GAP = "sec5-metric-degeneracy", "thm4.1-smooth-unstable", "guillotine-probe-gap"


def _suite_entries():
    return [
        _entry(
            "guillotine",
            [_rec(GAP, "supported", name="guillotine", gap=0.1), _rec(SEC5, "inconclusive", name="guillotine")],
        ),
        _entry(
            "objectives",
            [
                _rec(SMOOTH, "supported", subject="mse", name="objectives"),
                _rec(SMOOTH, "not supported", subject="dino", name="objectives"),
                _rec(SEC5, "supported", subject="info_nce (seed 0)", name="objectives"),
            ],
        ),
        _entry("minilm_geometry", [_rec(SEC5, "supported", scale="paper", name="minilm_geometry")]),
        _entry(
            "paper_data",
            [_rec("released-arrays", "supported", scale="paper", name="paper_data", x=1.0)],
            variant="paper",
        ),
    ]


def test_the_claim_level_table_has_one_row_per_registered_claim_with_its_one_verdict():
    verdicts = report_md.claim_verdicts(_suite_entries())
    table = report_md.claim_level_table(verdicts)
    lines = table.splitlines()
    assert _cells(lines[0]) == list(report_md.CLAIM_COLUMNS) and broken_tables(table) == []
    rows = lines[2 : lines.index("")]
    assert [_cells(ln)[0].strip("`") for ln in rows] == list(claims.CLAIMS)  # every claim once, registry order
    assert [ln.split("`")[1] for ln in lines if ln.startswith("- `")] == list(claims.CLAIMS)  # and its statement
    (smooth,) = _rows(table, SMOOTH)
    col = dict(zip(report_md.CLAIM_COLUMNS, smooth))
    assert col["verdict"] == "**not supported (smoke)**" and col["scale"] == "smoke"  # one refuting subject decides
    assert col["experiments"] == "objectives" and col["subjects"] == "dino"
    assert col["why"] == "1 of 2 decisive records refutes it -- objectives [dino]: thm4.1-smooth-unstable because"
    (item,) = [ln for ln in lines if ln.startswith(f"- `{SMOOTH}`: ")]  # its statement, under the table
    assert item.startswith(f"- `{SMOOTH}`: <details><summary>Thm 4.1, smooth part")
    assert item.endswith("*Its records combine as:* theorem.</details>")
    col = dict(zip(report_md.CLAIM_COLUMNS, _rows(table, SEC5)[0]))  # guillotine's subject is undecided
    assert col["verdict"] == "**inconclusive (smoke)**" and col["experiments"] == "guillotine"
    col = dict(zip(report_md.CLAIM_COLUMNS, _rows(table, "released-arrays")[0]))
    assert col["verdict"] == "**supported**" and col["scale"] == "paper"  # paper scale: no label
    col = dict(zip(report_md.CLAIM_COLUMNS, _rows(table, "tracker-power-iteration")[0]))
    assert col["verdict"] == "**inconclusive (no decisive record)**" and col["why"] == "no stored record decides it"
    assert col["experiments"] == col["subjects"] == col["scale"] == "-"
    readme = report_md.claim_level_table(verdicts, statement=False)
    assert _cells(readme.splitlines()[0]) == list(report_md.CLAIM_COLUMNS) and "<details>" not in readme
    assert readme == "\n".join(lines[: lines.index("")])  # README's copy: the same table, no statements


def test_stale_records_are_marked_in_the_claim_table_the_section_and_the_summary(monkeypatch):
    fresh = _rec(GAP, "supported", name="guillotine")
    for stale, why in [
        ({**fresh, "code_digest": None}, "no code digest stored"),
        ({**fresh, "code_digest": "0" * 16}, "decided by code 0000000000000000"),
        ({**fresh, "rule_digest": "1" * 16}, "decided under rule 1111111111111111"),
    ]:
        e = _entry("guillotine", [stale])
        code = claims.code_digest("guillotine")
        assert why in report_md.verdict_cell(stale, code)
        assert why in report_md.record_table(e, code)
        (row,) = _rows(report_md.claim_level_table(report_md.claim_verdicts([e])), GAP)
        assert row[1] == "**supported (smoke)** (stale: guillotine; rerun)"
        text = report_md.render([e], pathlib.Path("/r/REPORT.md"), "cmd", source="results")
        assert "**Stale:** the stored results of guillotine" in text and "--stale` reruns" in text
    e = _entry("guillotine", [fresh])
    assert "stale" not in report_md.claim_level_table(report_md.claim_verdicts([e]))
    text = report_md.render([e], pathlib.Path("/r/REPORT.md"), "cmd", source="results")
    assert "**Stale:**" not in text and f"code {claims.code_digest('guillotine')}; results" in text
    e.results["code_digest"] = "2" * 16  # a results file from other code: the section says so
    text = report_md.render([e], pathlib.Path("/r/REPORT.md"), "cmd", source="results")
    assert f"code 2222222222222222, now {claims.code_digest('guillotine')} (stale: rerun)" in text
    assert "**Stale:** the stored results of guillotine" in text


def test_rule_history_prints_under_its_claim(monkeypatch):
    monkeypatch.setitem(
        claims.HISTORY, GAP, [("2026-11-30", "abcdef0123456789", "inconclusive", "control changed | before the rerun")]
    )
    table = report_md.claim_level_table(report_md.claim_verdicts([_entry("guillotine", [_rec(GAP, "supported")])]))
    (item,) = [ln for ln in table.splitlines() if ln.startswith(f"- `{GAP}`: ")]
    assert item.endswith(
        "</details> *Rule history, 2026-11-30:* before, rule abcdef0123456789 gave "
        "*inconclusive*. control changed | before the rerun."
    )
    assert broken_tables(table) == []


def test_the_summary_says_what_holds_what_fails_and_why_one_line_each():
    verdicts = report_md.claim_verdicts(_suite_entries())
    text = report_md.summary(verdicts)
    n = len(claims.CLAIMS)
    assert text.splitlines()[0].startswith(
        f"Of the {n} claims the suite decides, 2 hold, 1 fails and {n - 3} are undecided."
    )
    holds = text[text.index("**What holds**") : text.index("**What fails, and why**")]
    assert "- `released-arrays`, **supported**: paper_data: released-arrays because." in holds
    assert f"- `{GAP}`, **supported (smoke)**: guillotine: {GAP} because." in holds
    fails = text[text.index("**What fails, and why**") : text.index("**What is undecided**")]
    assert fails.strip().splitlines()[1:] == [
        "",
        f"- `{SMOOTH}`, **not supported (smoke)**: 1 of 2 decisive records "
        f"refutes it -- objectives [dino]: {SMOOTH} because.",
    ]
    assert "- `tracker-power-iteration`, **inconclusive (no decisive record)**: no stored record decides it." in text


def test_each_section_lists_its_records_with_reasons_and_its_rules():
    e = _entry(
        "objectives",
        [_rec(SMOOTH, "not supported", subject="dino", name="objectives", margin=-0.5)],
        paper={"margin": 1.0, "other": 2.0},
    )
    text = report_md.section(e, pathlib.Path("/r/REPORT.md"), False, claims.code_digest("objectives"))
    table = text[text.index("| claim | subject |") : text.index("*Rules*")].strip()
    assert broken_tables(table) == []
    row = _cells(table.splitlines()[2])
    assert row == [
        f"`{SMOOTH}`",
        "dino",
        "**not supported (smoke)**",
        f"{SMOOTH} because",
        "margin = -0.5",
        "margin = 1",
    ]
    assert f"- `{SMOOTH}`: {report_claims.as_maths(claims.rule_text(SMOOTH))}" in text and "body of objectives" in text
    assert r"$\lambda_{\min}(H_{\mathrm{eff}}) < -\mathrm{tol}$" in text  # the rule's formulas as maths
    assert "seed 0, finished 2026-12-01T10:00:00+00:00" in text and "commit aaaaaaaaaa (clean)" in text


def test_results_without_claims_are_shown_never_dropped():
    e = _entry("whitening", [])
    e.results.pop("claims")
    e.results["verdict"] = "supported"
    text = report_md.render([e], pathlib.Path("/r/REPORT.md"), "cmd", source="results")
    assert "*Verdict:* **supported** (pre-registry results: rerun)" in text


def test_header_names_variant_seed_and_date_of_each_section_when_they_differ():
    """Issue 34's case: a --seed 5 whitening result beside a default run's paper_data, in one output directory."""
    same = [
        _entry("whitening", [_rec("thm3.1-construction", "supported", name="whitening")]),
        _entry(
            "paper_data",
            [_rec("released-arrays", "supported", scale="paper", name="paper_data")],
            date="2026-12-01T23:00:00+00:00",
        ),
    ]
    text = report_md.render(same, pathlib.Path("/r/REPORT.md"), "python -m experiments.reproduce", source="results")
    assert "Every section below comes from variant `smoke`, seed 0, run on 2026-12-01." in text.splitlines()[2]
    for other, row in [
        (
            dict(variant="tiny", date="2026-12-03T08:00:00+00:00"),
            "| label paper_data | `tiny` | 0 | toy | 2026-12-03T08:00:00+00:00 |",
        ),
        (dict(seed=5), "| label paper_data | `smoke` | 5 | smoke | 2026-12-01T10:00:00+00:00 |"),
    ]:
        mixed = [same[0], _entry("paper_data", [_rec("released-arrays", "supported", scale="paper")], **other)]
        text = report_md.render(
            mixed, pathlib.Path("/r/REPORT.md"), "python -m experiments.reproduce", source="results"
        )
        assert "**The sections below come from different runs** (variant, seed and date of each)" in text
        assert "| label whitening | `smoke` | 0 | smoke | 2026-12-01T10:00:00+00:00 |" in text and row in text
        assert "Every section below" not in text
    assert "variant `smoke` (smoke scale), seed 5, finished" in text  # and the section itself names its seed
    old = _entry("whitening", [])
    old.results.pop("seed")
    old.results["config"] = {"seed": 9}  # a file written before results carried their seed: the config's
    assert report_md.result_seed(old.results) == 9


def test_every_table_of_a_report_renders_headers_with_pipes_included():
    """Issue 33: header cells such as |rho| held unescaped pipes; every table cell goes through common.table_cell."""
    table = common.markdown_table([{"|rho|": 1.23456789, "a|b": "x|y", "c": "already \\| escaped"}])
    assert broken_tables(table) == [] and table.splitlines()[0] == "| \\|rho\\| | a\\|b | c |"
    assert _cells(table.splitlines()[2]) == ["1.235", "x\\|y", "already \\| escaped"]  # 4 significant digits
    assert broken_tables("| a | b |\n|---|---|\n| |x| | y |")  # the check itself fails on a raw pipe
    mod = types.SimpleNamespace(CLAIM="c", report=lambda res, rel: table)
    entries = [e._replace(module=mod) for e in _suite_entries()]
    text = report_md.render(entries, pathlib.Path("/r/REPORT.md"), "cmd", source="results")
    assert broken_tables(text) == [] and text.count("| claim |") == 1 + len(entries)


def test_a_section_the_experiment_cannot_read_names_the_file_and_the_fix():
    def old_report(res, rel):
        return res["headline"]["recomputed"]  # a key the stored (older) results lack

    e = _entry("paper_data", [_rec("released-arrays", "supported", scale="paper")])._replace(
        module=types.SimpleNamespace(CLAIM="c", report=old_report)
    )
    with pytest.raises(RuntimeError, match=r"/r/paper_data/results.json: .*KeyError.*rerun paper_data"):
        report_md.render([e], pathlib.Path("/r/REPORT.md"), "cmd", source="results")


# ----------------------------------------------------------------------------- README's copy


def test_readme_table_is_the_reports_claim_level_table():
    """README.md's "What the suite finds" table is REPORT.md's claim-level table without its statement column
    (``python -m experiments.reproduce`` rewrites both; regenerate REPORT.md if this fails)."""
    readme, report = (ROOT / "README.md").read_text(), (ROOT / "REPORT.md").read_text()
    try:
        expected = report_md.update_readme(readme, report)
    except ValueError as err:
        pytest.fail(f"REPORT.md has no claim-level table ({err}): regenerate it with python -m experiments.reproduce")
    assert readme == expected, "README.md's table differs from REPORT.md's claim-level table; rerun reproduce"


def test_readme_table_check_fails_on_a_changed_verdict_or_row():
    text = report_md.render(_suite_entries(), pathlib.Path("/r/REPORT.md"), "cmd", source="results")
    excerpt = report_md.readme_excerpt(text)
    verdicts = report_md.claim_verdicts(_suite_entries())
    assert excerpt == report_md.claim_level_table(verdicts, statement=False)  # the same function made both
    readme = f"# x\n\n{report_md.README_TABLE_HEADING} (headline)\n\nintro\n\n{excerpt}\n\nafter\n"
    assert report_md.update_readme(readme, text) == readme
    changed = readme.replace("**not supported (smoke)**", "**supported (smoke)**", 1)
    assert changed != readme and report_md.update_readme(changed, text) == readme
    dropped = "\n".join(ln for ln in readme.splitlines() if f"`{GAP}`" not in ln) + "\n"
    assert report_md.update_readme(dropped, text) == readme
    with pytest.raises(ValueError, match="no '## What the suite finds' heading"):
        report_md.update_readme("no table here\n", text)
    with pytest.raises(ValueError, match="not the claim-level table's"):
        report_md.readme_excerpt(f"{report_md.REPORT_TABLE_HEADING}\n\n| a |\n|---|\n| b |\n")


# ----------------------------------------------------------------------------- the site's pages, formulas


def test_split_report_gives_the_head_and_one_part_per_section_named_by_its_results():
    entries = _suite_entries()
    text = report_md.render(entries, pathlib.Path("/r/REPORT.md"), "cmd", source="results")
    head, parts = report_md.split_report(text)
    assert [p.name for p in parts] == [e.out_dir.name for e in entries]
    assert [p.title for p in parts] == [e.label for e in entries]
    assert "## Summary" in head and report_md.REPORT_TABLE_HEADING in head and "body of" not in head
    assert head.rstrip("\n").splitlines()[-1].startswith("- `")  # the statements end the head
    for p, e in zip(parts, entries):
        assert p.text.startswith("*Claim.* the claim") and f"body of {e.out_dir.name}" in p.text
        assert f"results: `{e.out_dir.name}/results.json`" in p.text and "## " not in p.text
    # the head and the parts are the whole report
    rebuilt = head + "".join(f"\n## {p.title}\n\n{p.text}" for p in parts)
    assert rebuilt.split() == text.split()
    with pytest.raises(ValueError, match="no '## Claims and verdicts' heading"):
        report_md.split_report("# a report\n\n## 1. x\n")
    with pytest.raises(ValueError, match="section '1. x' cites no results file"):
        report_md.split_report(f"{report_md.REPORT_TABLE_HEADING}\n\n## 1. x\n\ntext\n")
    twice = f"{report_md.REPORT_TABLE_HEADING}\n" + "".join(
        f"\n## {t}\n\n<sub>results: `results/a/results.json`</sub>\n" for t in ("1. x", "2. y")
    )
    with pytest.raises(ValueError, match="cite a/results.json twice .*'2. y'"):
        report_md.split_report(twice)


@pytest.mark.parametrize(
    "ascii_text, maths",
    [
        ("all 14 have lambda_min(H_eff) >= -tol", r"all 14 have $\lambda_{\min}(H_{\mathrm{eff}}) \ge -\mathrm{tol}$"),
        (
            "have rho = 0 (max |rho| / rho_ref 2.68e-08)",
            r"have $\rho = 0$ ($\max \lVert\rho\rVert / \rho_{\mathrm{ref}}$ 2.68e-08)",
        ),
        ("off S, |H_eff v| / |v| <= 7.58e-16", r"off S, $\lVert H_{\mathrm{eff}} v\rVert / \lVert v\rVert$ ≤ 7.58e-16"),
        ("matches r0 s* within 0.01; s* = 1", r"matches $r_0 s^*$ within 0.01; $s^*$ = 1"),
        (
            "rho != 0, H_L PSD, lambda_min(G) < lambda_max(M)",
            r"$\rho \ne 0$, $H_L$ PSD, $\lambda_{\min}(G) < \lambda_{\max}(M)$",
        ),
        ("error 1.4 -> 0.106 at tau = 4", r"error 1.4 → 0.106 at $\tau$ = 4"),
        # not formulas: code spans, identifiers that contain a symbol's name, run labels
        (
            "`lambda_min(H_eff)` and max_margin_lambda_min_over_abs",
            "`lambda_min(H_eff)` and max_margin_lambda_min_over_abs",
        ),
        ("free/dino/swish/seed 0/tau 0 (rho_reference)", "free/dino/swish/seed 0/tau 0 (rho_reference)"),
    ],
)
def test_as_maths_types_the_formulas_the_claim_level_part_prints(ascii_text, maths):
    out = report_claims.as_maths(ascii_text)
    assert out == maths
    assert all("|" not in m for m in re.findall(r"\$[^$]*\$", out))  # a table cell would end at a |


def test_the_claim_level_part_prints_its_formulas_as_maths_and_its_tables_still_render():
    recs = [_rec("thm4.1-linear-psd", "supported", name="collapse_hessians")]
    recs[0]["reason"] = "all 14 have lambda_min(H_eff) >= -tol; max |rho| = 0"
    text = report_md.render([_entry("collapse_hessians", recs)], pathlib.Path("/r/REPORT.md"), "cmd", source="results")
    assert broken_tables(text) == []
    want = r"$\lambda_{\min}(H_{\mathrm{eff}}) \ge -\mathrm{tol}$"
    head, (part,) = report_md.split_report(text)
    summary_line = next(ln for ln in head.splitlines() if ln.startswith("- `thm4.1-linear-psd`, "))
    table_row = next(ln for ln in head.splitlines() if ln.startswith("| `thm4.1-linear-psd` |"))
    record_row = next(ln for ln in part.text.splitlines() if ln.startswith("| `thm4.1-linear-psd` |"))
    assert want in summary_line and want in table_row and want in record_row
    assert "lambda_min(H_eff)" not in summary_line + table_row + record_row
    # the statement in its <details> too (Thm 4.1's smooth part: "lambda_min(H_eff) < 0")
    item = next(ln for ln in head.splitlines() if ln.startswith("- `thm4.1-smooth-unstable`: "))
    assert r"$\lambda_{\min}(H_{\mathrm{eff}}) < 0$" in item


def test_a_run_with_a_run_md_links_it_from_its_footer(tmp_path):
    """A paper run copied into results/ with its RUN.md is linked (the footer's wall time is the last invocation's
    alone when the run was resumed); a run without one is not, and the footer still cites its results file last."""
    e = _entry("objectives", [], variant="paper")
    e = report_md.Entry(e.name, e.label, e.results, e.module, tmp_path / "results" / "objectives-paper")
    e.out_dir.mkdir(parents=True)
    report = tmp_path / "REPORT.md"
    without = report_md.section(e, report, False, claims.code_digest("objectives"))
    assert "RUN.md" not in without
    (e.out_dir / "RUN.md").write_text("# how\n")
    text = report_md.section(e, report, False, claims.code_digest("objectives"))
    footer = text.strip().splitlines()[-1]
    assert "how it was made: [RUN.md](results/objectives-paper/RUN.md); " in footer
    assert footer.endswith("results: `results/objectives-paper/results.json`</sub>")
