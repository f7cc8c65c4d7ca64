"""The text of ``REPORT.md`` (and of a dry run's ``DRY_RUN.md``), from stored results only.

:func:`render` takes the entries :func:`experiments.reproduce.collect` reads back from an output
directory -- one :class:`Entry` per stored ``results.json`` -- and writes:

* a header naming the command, the date, and which variant and date each section comes from
  whenever the sections do not all come from one variant on one day (:func:`provenance`);
* the claim table (:func:`claim_table`): one row per stored verdict, grouped by registry claim
  (a claim decided by several experiments, or per subject, has one row for each), with the claim
  id, the scale, the verdict as :func:`experiments.claims.label` prints it, the numbers the rule
  read and the paper's; a verdict decided under another rule than the registry's is marked stale,
  and a claim whose rule changed keeps its history line under its statement
  (:data:`experiments.claims.HISTORY`);
* one section per experiment (its module's ``report``).
"""
from __future__ import annotations

import datetime as _dt
import os
import pathlib
from typing import NamedTuple

from experiments import claims as _claims
from experiments import projection as _projection

#: How many of a record's deciding numbers the claim table shows (all are in results.json).
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


def _cell(text) -> str:
    """Escape a markdown table cell (``|`` would end the cell; newlines would end the row)."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _numbers(d: dict, limit: int | None = None) -> str:
    """``k = v; ...`` of the scalar items of ``d`` (at most ``limit``)."""
    items = [(k, v) for k, v in d.items() if isinstance(v, (int, float, str, bool)) or v is None]
    return "; ".join(f"{k} = {_fmt(v)}" for k, v in items[:limit]) or "-"


def result_date(res: dict) -> str:
    """When the stored run finished (``date``; older files: their environment's date), or ``unknown``."""
    return str(res.get("date") or res.get("environment", {}).get("date") or "unknown")


def verdict_cell(rec: dict) -> str:
    """A record's verdict as the table prints it: :func:`experiments.claims.label`, marked when stale."""
    text = f"**{_claims.label(rec)}**"
    if rec["id"] not in _claims.CLAIMS:
        return text + " (not a registered claim)"
    if rec.get("rule_digest") == "legacy":
        return text + " (stale: decided by the experiment's pre-registry rule; rerun)"
    if rec.get("rule_digest") != _claims.rule_digest(rec["id"]):
        return text + f" (stale: decided under rule {rec.get('rule_digest')}, registry has {_claims.rule_digest(rec['id'])}; rerun)"
    return text


def verdict_line(res: dict) -> str:
    """``id[subject]: verdict (scale)`` of every claim record of one results file."""
    return "; ".join(f"{r['id']}{'[' + r['subject'] + ']' if r.get('subject') else ''}: {_claims.label(r)}"
                     for r in res.get("claims", [])) or "no claim records (pre-registry results: rerun)"


def _paper_cell(rec: dict, paper: dict) -> str:
    """The paper's numbers for one record: those under a key the rule read, else every one the experiment stores."""
    shown = {k: v for k, v in paper.items() if k in rec.get("deciding", {})} or paper
    return _numbers(shown)


def claim_table(entries: list[Entry]) -> str:
    """The claim table: one row per stored verdict, grouped by claim in registry order (see the module docstring)."""
    order = {cid: i for i, cid in enumerate(_claims.CLAIMS)}
    rows = []  # (claim order, entry order, record, entry)
    for i, e in enumerate(entries):
        recs = e.results.get("claims")
        if not recs:  # a results file written before the registry: say so, never drop it
            recs = [{"id": "(none)", "subject": None, "verdict": e.results.get("verdict", "-"), "scale": "-",
                     "decisive": False, "deciding": e.results.get("headline", {}), "rule_digest": "legacy"}]
        for rec in recs:
            rows.append((order.get(rec["id"], len(order)), i, rec, e))
    rows.sort(key=lambda r: (r[0], r[1]))
    lines = ["| claim | statement | experiment | subject | scale | verdict | deciding numbers (ours) | paper |",
             "|---|---|---|---|---|---|---|---|"]
    for j, (_, _, rec, e) in enumerate(rows):
        cid = rec["id"]
        first = j == 0 or rows[j - 1][2]["id"] != cid
        stmt = ""
        if first:  # the statement once per claim, and under it the history of its rule
            stmt = _cell(_claims.CLAIMS[cid].statement if cid in _claims.CLAIMS else "(not in the registry)")
            stmt += "".join(f"<br>*rule history, {_cell(date)}:* before, rule {digest} gave *{_cell(old)}*. {_cell(why)}"
                            for date, digest, old, why in _claims.HISTORY.get(cid, []))
        verdict = verdict_cell(rec) if cid != "(none)" else f"**{rec['verdict']}** (pre-registry results: rerun)"
        lines.append(f"| `{cid}` | {stmt} | {_cell(e.label)} | {_cell(rec.get('subject') or '-')} | "
                     f"{rec['scale']} | {_cell(verdict)} | {_cell(_numbers(rec.get('deciding', {}), MAX_DECIDING))} | "
                     f"{_cell(_paper_cell(rec, e.results.get('paper', {})))} |")
    return "\n".join(lines)


def provenance(entries: list[Entry]) -> str:
    """Which variant and date each section comes from: one sentence when all agree, else a table."""
    if not entries:
        return "No stored results were found."
    keys = [(e.results.get("variant"), result_date(e.results)[:10]) for e in entries]
    if len(set(keys)) == 1:
        variant, day = keys[0]
        return f"Every section below comes from variant `{variant}`, run on {day}."
    lines = ["**The sections below come from different runs** (variant and date of each):", "",
             "| section | variant | scale | finished (UTC) |", "|---|---|---|---|"]
    lines += [f"| {_cell(e.label)} | `{e.results.get('variant')}` | {e.results.get('scale', '-')} | "
              f"{result_date(e.results)} |" for e in entries]
    return "\n".join(lines)


def _projected_part(d: dict, name: str) -> str:
    """A part (training, analysis) of a measured projection: hours, the fitted exponent and both points (of each
    of its own parts, where it is a sum of separately projected parts under ``parts``)."""
    r = d.get(name)
    if not r:
        return "-"
    if r.get("parts"):
        each = "; ".join(f"{k}: {_fmt(v['projected_s'] / 3600)} h, p = {_fmt(v['exponent'])}, "
                         f"{_projection.points_text(v)}, full {_fmt(v['full_size'])}" for k, v in r["parts"].items())
        return f"{_fmt(r['projected_s'] / 3600)} h ({each})"
    return f"{_fmt(r['projected_s'] / 3600)} h (p = {_fmt(r['exponent'])}; {_projection.points_text(r)}; full {_fmt(r['full_size'])})"


def dry_run_table(entries: list[Entry], skipped: dict | None = None) -> str:
    """The dry-run summary: measured step time and projected wall time of each full paper variant.

    Where the experiment timed its units at two reduced sizes (``training`` / ``analysis`` records of
    :func:`experiments.projection.power_law_projection`), each part is shown with its fitted exponent and
    measured points; otherwise ``-``.
    """
    lines = ["| experiment | status | step time (s) | projected full run | training | analysis | device | "
             "dry-run wall time (s) |", "|---|---|---|---|---|---|---|---|"]
    for e in entries:
        d = e.results.get("measurements", {}).get("dry_run", {})
        proj = d.get("projected_wall_time_s", float("nan"))
        lines.append(f"| {_cell(e.label)} | ran | {_fmt(d.get('step_time_s', float('nan')))} | {_fmt(proj / 3600)} h | "
                     f"{_cell(_projected_part(d, 'training'))} | {_cell(_projected_part(d, 'analysis'))} | "
                     f"{_cell(d.get('device', '-'))} | {_fmt(e.results.get('wall_time_s', float('nan')))} |")
    for name, why in (skipped or {}).items():
        lines.append(f"| {_cell(name)} | {_cell(why)} | - | - | - | - | - | - |")
    return "\n".join(lines)


def _device(env: dict) -> str:
    """The device of an environment record (the harness's ``platform:kind``; older files: backend and kind)."""
    return env.get("device") or f"{env.get('backend')} ({env.get('device_kind')})"


def _verdicts_and_rules(res: dict) -> str:
    """Each stored verdict with its reason, then the registry rule of each claim the section decides."""
    recs = res.get("claims", [])
    if not recs:
        return f"*Verdict:* **{res.get('verdict', '-')}** (pre-registry results: rerun)"
    lines = ["*Verdicts:*", ""]
    lines += [f"- `{r['id']}`{' [' + r['subject'] + ']' if r.get('subject') else ''}: {verdict_cell(r)}"
              f"{' -- ' + r['reason'] if r.get('reason') else ''}" for r in recs]
    if res.get("verdict_rule"):  # a decide not yet on the registry: the rule it applied, not the registry's
        return "\n".join(lines + ["", f"*Rule applied (the experiment's own, pre-registry):* {res['verdict_rule']}"])
    ids = [cid for cid in dict.fromkeys(r["id"] for r in recs) if cid in _claims.CLAIMS]
    lines += ["", "*Rules* (`experiments/claims/`):", ""]
    lines += [f"- `{cid}`: {_claims.rule_text(cid)}" for cid in ids]
    return "\n".join(lines)


def section(e: Entry, report_path: pathlib.Path, dry_run: bool) -> str:
    """One experiment's report section (figures linked relative to the report)."""
    rel = os.path.relpath(e.out_dir, report_path.parent)
    res, env = e.results, e.results.get("environment", {})
    try:
        body = e.module.report(res, rel)
    except Exception as err:  # stored by an older version of the experiment: say which file, and what to do
        raise RuntimeError(f"{e.out_dir}/results.json: {e.name}'s report cannot read these stored results "
                           f"({type(err).__name__}: {err}); rerun {e.name}") from err
    return (
        f"## {e.label}{' (DRY RUN)' if dry_run else ''}\n\n*Claim.* {e.module.CLAIM}\n\n"
        f"{_verdicts_and_rules(res)}\n\n{body}\n\n"
        f"<sub>variant `{res.get('variant')}` ({res.get('scale', '-')} scale), finished {result_date(res)}, wall time "
        f"{res.get('wall_time_s', float('nan')):.1f} s, {_device(env)}, jax {env.get('versions', {}).get('jax')}; "
        f"results: `{rel}/results.json`</sub>\n")


VERDICT_WORDS = (
    "Verdicts: *supported* (the computation shows what the claim says, with its premises met), *not supported* "
    "(premises met, outcome contradicts the claim), *premise violated* (the setting does not meet the claim's "
    "premises, so it says nothing there; what happened is reported), *inconclusive* (the numbers do not decide it "
    "at this scale). Each verdict carries its scale: *toy* (the `tiny` variants), *smoke* (reduced models and data, "
    "minutes on a CPU) or *paper* (the authors' settings); \"supported (smoke)\" is a smoke-scale verdict, never "
    "the paper's. Claims, rules and controls: `experiments/claims/`; their reading of the paper: "
    "`docs/theory.md`.")


def render(entries: list[Entry], report_path: pathlib.Path, command: str, *, source: str, dry_run: bool = False,
           skipped: dict | None = None) -> str:
    """The report's text (see the module docstring); ``source`` names the directory the results were read from."""
    date = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    sections = "\n".join(section(e, report_path, dry_run) for e in entries)
    if dry_run:
        return (
            "# DRY RUN of the paper variants (not results)\n\n"
            f"Generated by `{command}` on {date}. Each paper variant ran end to end with `config.dry_run = True`: "
            "the paper's models and image shapes, mock or generated data, reduced batches and image counts, a few "
            "steps per training phase and every analysis step. Its verdicts and numbers decide nothing; what it "
            "shows is that every paper path executes, and how long the full variant would take on this device: "
            "training and analysis each timed at two reduced sizes (compilation excluded), fitted as t = a n^p "
            "and projected to the paper's size (the exponent and both measured points are in the table).\n\n"
            "## Projected wall time of each full paper variant\n\n" + dry_run_table(entries, skipped) + "\n\n"
            + sections)
    return (
        "# REPORT: the geometry of projection heads, checked by computation\n\n"
        f"Assembled by `{command}` on {date} from the stored results in `{source}/`; rerunning the command "
        "regenerates this file. " + provenance(entries) + "\n\n" + VERDICT_WORDS + "\n\n"
        "## Claims and verdicts\n\n" + claim_table(entries) + "\n\n" + sections)
