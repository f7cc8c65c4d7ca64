"""The text of ``REPORT.md`` (and of a dry run's ``DRY_RUN.md``), from stored results only.

:func:`render` takes the entries :func:`experiments.reproduce.collect` reads back from an output
directory -- one :class:`Entry` per stored ``results.json`` -- and writes, for a reader:

* a header naming the command, the date, and the variant, seed and date of each section whenever the
  sections do not all come from one variant and seed on one day (:func:`provenance`);
* a short plain-language summary (:func:`~experiments.report_claims.summary`): what holds, what fails and
  why, what is undecided, one line per claim from its claim-level verdict's ``why``, and which results
  are stale;
* the claim-level table (:func:`~experiments.report_claims.claim_level_table`, in
  :mod:`experiments.report_claims` with the rest of the claim-level part): one row per registered claim with its one verdict
  (:func:`experiments.claims.claim_verdict`, by the claim's ``combine`` rule), labelled with its scale, the
  experiments and subjects behind it and one line of why; the statement and the combine rule in a
  ``<details>`` collapsible, the claim's rule history (:data:`experiments.claims.HISTORY`) under it;
* the formulas of the claim-level part, the section claims and the records' reasons as maths
  (:func:`experiments.report_claims.as_maths`: ``$\\lambda_{\\min}(H_{\\mathrm{eff}})$``, typeset on GitHub and the site);
* one section per experiment: its records (:func:`record_table`: every stored verdict, its reason and the
  numbers the rule read, marked stale where the rule or the code changed since), the registry rules it
  applied, then its module's ``report``.

The site (``docs/hooks/site.py``) shows the report as one page per experiment: :func:`split_report`
(:mod:`experiments.report_split`) cuts the
text into the part above the first section (header, summary, claim-level table) and one :class:`Part` per section,
named by the results directory its footer cites; REPORT.md itself stays one file.

README.md's "What the suite finds" table is the claim-level table without the statements under it
(:func:`~experiments.report_claims.readme_excerpt`, written into README by
:func:`~experiments.report_claims.update_readme`). Every table cell goes through
:func:`experiments.common.table_cell`, so every table renders on GitHub and in mkdocs.
"""

from __future__ import annotations

import datetime as _dt
import os
import pathlib
from typing import NamedTuple

from experiments import claims as _claims
from experiments import projection as _projection
from experiments.common import table_cell as _cell
from experiments.report_claims import CLAIM_COLUMNS as CLAIM_COLUMNS
from experiments.report_claims import (
    COMBINE_WORDS,
    REPORT_TABLE_HEADING,
    as_maths,
    claim_level_table,
    claim_verdicts,
    current_codes,
    stale_reason,
    summary,
    table_row,
)
from experiments.report_claims import README_TABLE_HEADING as README_TABLE_HEADING
from experiments.report_claims import claim_label as claim_label
from experiments.report_claims import readme_excerpt as readme_excerpt
from experiments.report_claims import update_readme as update_readme
from experiments.report_split import Part as Part
from experiments.report_split import split_report as split_report

#: How many of a record's deciding numbers the record table shows (all are in results.json).
MAX_DECIDING = 6


class Entry(NamedTuple):
    """One stored results file: its experiment, the label the report prints, the results, the module, the directory."""

    name: str
    label: str
    results: dict
    module: object
    out_dir: pathlib.Path


def _fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _numbers(d: dict, limit: int | None = None) -> str:
    """``k = v; ...`` of the scalar items of ``d`` (at most ``limit``)."""
    items = [(k, v) for k, v in d.items() if isinstance(v, (int, float, str, bool)) or v is None]
    return "; ".join(f"{k} = {_fmt(v)}" for k, v in items[:limit]) or "-"


def result_date(res: dict) -> str:
    """When the stored run finished (``date``; older files: their environment's date), or ``unknown``."""
    return str(res.get("date") or res.get("environment", {}).get("date") or "unknown")


def result_seed(res: dict):
    """The stored run's seed (``seed``; older files: ``config.seed``), ``None`` where it has none."""
    return res["seed"] if "seed" in res else (res.get("config") or {}).get("seed")


def verdict_cell(rec: dict, current_code: str | None = None) -> str:
    """A record's verdict as the tables print it: :func:`experiments.claims.label`, marked when stale."""
    text = f"**{_claims.label(rec)}**"
    if rec["id"] not in _claims.CLAIMS:
        return text + " (not a registered claim)"
    why = stale_reason(rec, current_code)
    return text + (f" (stale: {why}; rerun)" if why else "")


def verdict_line(res: dict) -> str:
    """``id[subject]: verdict (scale)`` of every claim record of one results file."""
    return (
        "; ".join(
            f"{r['id']}{'[' + r['subject'] + ']' if r.get('subject') else ''}: {_claims.label(r)}"
            for r in res.get("claims", [])
        )
        or "no claim records (pre-registry results: rerun)"
    )


def _paper_cell(rec: dict, paper: dict) -> str:
    """The paper's numbers for one record: those under a key the rule read, else every one the experiment stores."""
    shown = {k: v for k, v in paper.items() if k in rec.get("deciding", {})} or paper
    return _numbers(shown)


def record_table(e: Entry, current_code: str | None = None) -> str:
    """One section's records: claim, subject, verdict (marked when stale), the rule's reason, the numbers it read
    and the paper's."""
    lines = [
        table_row(["claim", "subject", "verdict", "reason", "deciding numbers (ours)", "paper"]),
        "|---|---|---|---|---|---|",
    ]
    for rec in e.results.get("claims") or []:
        lines.append(
            table_row(
                _cell(c)
                for c in (
                    f"`{rec['id']}`",
                    rec.get("subject") or "-",
                    verdict_cell(rec, current_code),
                    as_maths(rec.get("reason") or "-"),
                    _numbers(rec.get("deciding", {}), MAX_DECIDING),
                    _paper_cell(rec, e.results.get("paper", {})),
                )
            )
        )
    return "\n".join(lines)


def provenance(entries: list[Entry]) -> str:
    """Which variant, seed and date each section comes from: one sentence when all agree, else a table."""
    if not entries:
        return "No stored results were found."
    keys = [(e.results.get("variant"), result_seed(e.results), result_date(e.results)[:10]) for e in entries]
    if len(set(keys)) == 1:
        variant, seed, day = keys[0]
        return f"Every section below comes from variant `{variant}`, seed {seed}, run on {day}."
    lines = [
        "**The sections below come from different runs** (variant, seed and date of each):",
        "",
        "| section | variant | seed | scale | finished (UTC) |",
        "|---|---|---|---|---|",
    ]
    lines += [
        table_row(
            _cell(c)
            for c in (
                e.label,
                f"`{e.results.get('variant')}`",
                result_seed(e.results),
                e.results.get("scale", "-"),
                result_date(e.results),
            )
        )
        for e in entries
    ]
    return "\n".join(lines)


def _part_text(name: str, v: dict) -> str:
    """One separately projected part: fitted (``exponent``, both points, the full size) or measured at full size
    (``points`` per rung, the spread of the timed runs)."""
    if "exponent" not in v:
        spread = "-".join(_fmt(x / 3600) for x in v["spread_s"])
        comp = f", compilation {_fmt(sum(v['compile_s']))} s" if v.get("compile_s") else ""
        return (
            f"{name}: {_fmt(v['projected_s'] / 3600)} h (spread {spread} h), {v['method']}, "
            f"{int(v['count'])} units{comp}, {_projection.points_text(v)}"
        )
    return (
        f"{name}: {_fmt(v['projected_s'] / 3600)} h, p = {_fmt(v['exponent'])}, {_projection.points_text(v)}, "
        f"full {_fmt(v['full_size'])}"
    )


def _projected_part(d: dict, name: str) -> str:
    """A part (training, analysis) of a measured projection: hours, the fitted exponent and both points (of each
    of its own parts, where it is a sum of separately projected parts under ``parts``)."""
    r = d.get(name)
    if not r:
        return "-"
    if r.get("parts"):
        each = "; ".join(_part_text(k, v) for k, v in r["parts"].items())
        return f"{_fmt(r['projected_s'] / 3600)} h ({each})"
    return f"{_fmt(r['projected_s'] / 3600)} h (p = {_fmt(r['exponent'])}; {_projection.points_text(r)}; full {_fmt(r['full_size'])})"


def dry_run_table(entries: list[Entry], skipped: dict | None = None) -> str:
    """The dry-run summary: measured step time and projected wall time of each full paper variant.

    Where the experiment timed its units at two reduced sizes (``training`` / ``analysis`` records of
    :func:`experiments.projection.power_law_projection`), each part is shown with its fitted exponent and
    measured points; otherwise ``-``.
    """
    lines = [
        "| experiment | status | step time (s) | projected full run | training | analysis | device | "
        "dry-run wall time (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for e in entries:
        d = e.results.get("measurements", {}).get("dry_run", {})
        proj = d.get("projected_wall_time_s", float("nan"))
        lines.append(
            f"| {_cell(e.label)} | ran | {_fmt(d.get('step_time_s', float('nan')))} | {_fmt(proj / 3600)} h | "
            f"{_cell(_projected_part(d, 'training'))} | {_cell(_projected_part(d, 'analysis'))} | "
            f"{_cell(d.get('device', '-'))} | {_fmt(e.results.get('wall_time_s', float('nan')))} |"
        )
    for name, why in (skipped or {}).items():
        lines.append(f"| {_cell(name)} | {_cell(why)} | - | - | - | - | - | - |")
    return "\n".join(lines)


def _device(env: dict) -> str:
    """The device of an environment record (the harness's ``platform:kind``; older files: backend and kind)."""
    return env.get("device") or f"{env.get('backend')} ({env.get('device_kind')})"


def _records_and_rules(e: Entry, current_code: str | None) -> str:
    """The section's stored records (:func:`record_table`), then the registry rule of each claim it decides."""
    res = e.results
    recs = res.get("claims", [])
    if not recs:
        return f"*Verdict:* **{res.get('verdict', '-')}** (pre-registry results: rerun)"
    lines = [
        "*Records* (one per claim and subject; the claim-level verdicts are at the top):",
        "",
        record_table(e, current_code),
    ]
    ids = [cid for cid in dict.fromkeys(r["id"] for r in recs) if cid in _claims.CLAIMS]
    lines += ["", "*Rules* (`experiments/claims/`):", ""]
    lines += [f"- `{cid}`: {as_maths(_claims.rule_text(cid))}" for cid in ids]
    return "\n".join(lines)


def _code_line(res: dict, current_code: str | None) -> str:
    """Which code made the section: commit (and whether the hashed files were clean), code digest, and whether it
    is the current code's."""
    commit, clean = res.get("commit"), res.get("clean")
    tree = (
        "commit not recorded"
        if "commit" not in res
        else "no git"
        if commit is None
        else f"commit {commit[:10]}"
        + ("" if clean is None else " (clean)" if clean else " (with uncommitted changes to its code)")
    )
    stored = res.get("code_digest")
    if stored is None:
        state = "no code digest (stale: rerun)"
    elif current_code is None or stored == current_code:
        state = f"code {stored}"
    else:
        state = f"code {stored}, now {current_code} (stale: rerun)"
    return f"{tree}, {state}"


def section(e: Entry, report_path: pathlib.Path, dry_run: bool, current_code: str | None = None) -> str:
    """One experiment's report section (figures linked relative to the report). A run copied into ``results/`` with
    a ``RUN.md`` beside its results (how it was made: command, segments, loads, per-part times) is linked from the
    footer, whose ``wall time`` is only the last invocation's where the run was resumed."""
    rel = os.path.relpath(e.out_dir, report_path.parent)
    how = f"how it was made: [RUN.md]({rel}/RUN.md); " if (pathlib.Path(e.out_dir) / "RUN.md").is_file() else ""
    res, env = e.results, e.results.get("environment", {})
    try:
        body = e.module.report(res, rel)
    except Exception as err:  # stored by an older version of the experiment: say which file, and what to do
        raise RuntimeError(
            f"{e.out_dir}/results.json: {e.name}'s report cannot read these stored results "
            f"({type(err).__name__}: {err}); rerun {e.name}"
        ) from err
    return (
        f"## {e.label}{' (DRY RUN)' if dry_run else ''}\n\n*Claim.* {as_maths(e.module.CLAIM)}\n\n"
        f"{_records_and_rules(e, current_code)}\n\n{body}\n\n"
        f"<sub>variant `{res.get('variant')}` ({res.get('scale', '-')} scale), seed {result_seed(res)}, finished "
        f"{result_date(res)}, wall time {res.get('wall_time_s', float('nan')):.1f} s, {_device(env)}, jax "
        f"{env.get('versions', {}).get('jax')}; {_code_line(res, current_code)}; {how}results: `{rel}/results.json`</sub>\n"
    )


VERDICT_WORDS = (
    "Verdicts: *supported* (the computation shows what the claim says, with its premises met), *not supported* "
    "(premises met, outcome contradicts the claim), *premise violated* (the setting does not meet the claim's "
    "premises, so it says nothing there; what happened is reported), *inconclusive* (the numbers do not decide it "
    "at this scale). Each verdict carries its scale: *toy* (the `tiny` variants), *smoke* (reduced models and data, "
    'minutes on a CPU) or *paper* (the authors\' settings); "supported (smoke)" is a smoke-scale verdict, never '
    "the paper's. Claims, rules and controls: `experiments/claims/`; their reading of the paper: "
    "`docs/theory.md`."
)


def render(
    entries: list[Entry],
    report_path: pathlib.Path,
    command: str,
    *,
    source: str,
    dry_run: bool = False,
    skipped: dict | None = None,
) -> str:
    """The report's text (see the module docstring); ``source`` names the directory the results were read from."""
    date = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    codes = current_codes(entries)
    sections = "\n".join(section(e, report_path, dry_run, codes.get(e.name)) for e in entries)
    if dry_run:
        return (
            "# DRY RUN of the paper variants (not results)\n\n"
            f"Generated by `{command}` on {date}. Each paper variant ran end to end with `config.dry_run = True`: "
            "the paper's models and image shapes, mock or generated data, reduced batches and image counts, a few "
            "steps per training phase and every analysis step. Its verdicts and numbers decide nothing; what it "
            "shows is that every paper path executes, and how long the full variant would take on this device: "
            "training and analysis each timed at two reduced sizes (compilation excluded), fitted as t = a n^p "
            "and projected to the paper's size (the exponent and both measured points are in the table).\n\n"
            "## Projected wall time of each full paper variant\n\n"
            + dry_run_table(entries, skipped)
            + "\n\n"
            + sections
        )
    verdicts = claim_verdicts(entries, codes)
    stale = [
        e.out_dir.name
        for e in entries
        if any(stale_reason(r, codes.get(e.name)) for r in e.results.get("claims") or [])
        or e.results.get("code_digest") is None
        or e.results.get("code_digest") != codes.get(e.name)
    ]
    return (
        "# REPORT: the geometry of projection heads, checked by computation\n\n"
        f"Assembled by `{command}` on {date} from the stored results in `{source}/`; rerunning the command "
        "regenerates this file. " + provenance(entries) + "\n\n"
        "## Summary\n\n" + summary(verdicts, stale) + "\n\n" + VERDICT_WORDS + "\n\n"
        f"{REPORT_TABLE_HEADING}\n\n{COMBINE_WORDS}\n\n" + claim_level_table(verdicts) + "\n\n" + sections
    )
