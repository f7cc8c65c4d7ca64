"""REPORT.md's claim-level part: one verdict per registered claim, the plain-language summary, stale records, and
README.md's copy of the claim-level table (:mod:`experiments.report_md` writes the rest of the report).

:func:`claim_verdicts` combines the stored records of each claim by its registered ``combine`` rule
(:func:`experiments.claims.claim_verdict`); :func:`claim_level_table` prints one row per claim and, under the
table, each statement in a ``<details>`` collapsible with its rule history (:func:`statement_item`);
:func:`summary` says what holds, what fails and why, one line per claim from its ``why``. README's table is the claim-level table
without the statements (:func:`readme_excerpt`, written into README by :func:`update_readme`).
Every cell goes through :func:`experiments.common.table_cell`.
"""

from __future__ import annotations

import re

from experiments import claims as _claims
from experiments.common import table_cell as _cell

#: How many subjects a claim-level row names before "and N more".
MAX_SUBJECTS = 6
#: The heading of REPORT's claim-level table, and of README's copy of it.
REPORT_TABLE_HEADING = "## Claims and verdicts"
README_TABLE_HEADING = "## What the suite finds"
#: The claim-level table's columns (README's copy has the same; the statements follow REPORT's table).
CLAIM_COLUMNS = ("claim", "verdict", "scale", "experiments", "subjects", "why")


#: The formulas the claim-level part prints in ASCII (in the records' reasons, the claims' statements) and their TeX,
#: longest first. Each becomes inline maths ``$...$``, which GitHub and the site (pymdownx.arithmatex, MathJax)
#: both typeset; no TeX here uses ``|`` (a table cell would end there), norms are ``\lvert``/``\lVert``.
MATHS: tuple[tuple[str, str], ...] = (
    (r"max \|v\^T H_eff v / \|v\|\^2 - 1\|", r"\max \lvert v^\top H_{\mathrm{eff}} v / \lVert v\rVert^2 - 1\rvert"),
    (r"\|H_eff v\| / \|v\|", r"\lVert H_{\mathrm{eff}} v\rVert / \lVert v\rVert"),
    (r"max \|rho\| / rho_ref", r"\max \lVert\rho\rVert / \rho_{\mathrm{ref}}"),
    (r"\|J_h v\|", r"\lVert J_h v\rVert"),
    (r"\|rho\|", r"\lVert\rho\rVert"),
    (r"v\^T H_eff v", r"v^\top H_{\mathrm{eff}} v"),
    (r"W\^T g_L\(W z\) W", r"W^\top g_L(W z)\, W"),
    (r"G = J\^T H_L J", r"G = J^\top H_L J"),
    (r"M = sum_a rho_a hess h_a\(c\)", r"M = \textstyle\sum_a \rho_a \nabla^2 h_a(c)"),
    (r"\|lambda_(min|max)(?:\((?:H_eff|H_L|G|M)\))?\|", None),  # |lambda_min(M)|: built in _tex
    (r"lambda_(min|max)\((H_eff|H_L|G|M)\)", None),  # lambda_min(H_eff) and the like: built in _tex
    (r"lambda_(min|max)", None),
    (r"dh\(c\)/dtheta", r"\partial h(c)/\partial\theta"),
    (r"dh/dtheta", r"\partial h/\partial\theta"),
    (r"H_eff", r"H_{\mathrm{eff}}"),
    (r"H_L", r"H_L"),
    (r"rho_ref", r"\rho_{\mathrm{ref}}"),
    (r"rho", r"\rho"),
    (r"eps_max", r"\varepsilon_{\max}"),
    (r"r0 s\*", r"r_0 s^*"),
    (r"s\*", r"s^*"),
    (r"tau", r"\tau"),
)
_MATHS_RE = re.compile("|".join(f"(?P<m{i}>(?<![\\w/`$\\\\]){pat}(?![\\w/]))" for i, (pat, _) in enumerate(MATHS)))
_OPERATORS = {">=": r"\ge", "<=": r"\le", "!=": r"\ne", "=": "=", "<": "<", ">": ">"}
_COMPARED = re.compile(r"\$([^$]+)\$ (>=|<=|!=|=|<|>) ([-+]?tol\b|0(?!\w|\.\d)|\$[^$]+\$)")
_PLAIN = {">=": "\u2265", "<=": "\u2264", "->": "\u2192", "!=": "\u2260"}


def _tex(i: int, text: str) -> str:
    """The TeX of the ``i``-th :data:`MATHS` pattern, matched as ``text``."""
    tex = MATHS[i][1]
    if tex is not None:
        return tex
    m = re.fullmatch(r"(\|?)lambda_(min|max)(?:\((\w+)\))?\|?", text)
    arg = {"H_eff": r"H_{\mathrm{eff}}"}.get(m.group(3), m.group(3))
    tex = rf"\lambda_{{\{m.group(2)}}}" + (f"({arg})" if arg else "")
    return rf"\lvert {tex}\rvert" if m.group(1) else tex


def as_maths(text: str) -> str:
    r"""``text`` with the formulas of :data:`MATHS` as inline maths (``lambda_min(H_eff) >= -tol`` becomes
    ``$\lambda_{\min}(H_{\mathrm{eff}}) \ge -\mathrm{tol}$``: a formula compared with ``0``, ``tol`` or another
    formula is one span), and ``>=``, ``<=``, ``!=``, ``->`` outside maths as the signs they stand for. Code spans
    (between backticks) are left as they are; a word that merely contains a symbol's name (``rho_ref_max``,
    ``dino/tau``) is not a formula."""
    parts = re.split(r"(`[^`]*`)", str(text))
    out = []
    for k, part in enumerate(parts):
        if k % 2:  # a code span
            out.append(part)
            continue
        part = _MATHS_RE.sub(lambda m: "$" + _tex(int(m.lastgroup[1:]), m.group(0)) + "$", part)
        for _ in range(3):  # a chain a <= b <= c joins pair by pair
            part = _COMPARED.sub(
                lambda m: (
                    f"${m.group(1)} {_OPERATORS[m.group(2)]} "
                    + (m.group(3)[1:-1] if m.group(3).startswith("$") else m.group(3).replace("tol", r"\mathrm{tol}"))
                    + "$"
                ),
                part,
            )
        pieces = re.split(r"(\$[^$]+\$)", part)
        for j in range(0, len(pieces), 2):
            for ascii_op, sign in _PLAIN.items():
                pieces[j] = pieces[j].replace(f" {ascii_op} ", f" {sign} ")
        out.append("".join(pieces))
    return "".join(out)


def table_row(cells) -> str:
    """One markdown table row ``| a | b |`` of already-escaped cells."""
    return "| " + " | ".join(cells) + " |"


def stale_reason(rec: dict, current_code: str | None) -> str | None:
    """Why a stored record no longer stands for the registry and the code (``None``: it does). ``current_code``
    is its experiment's :func:`experiments.claims.code_digest` now (``None``: the code is not checked)."""
    cid = rec["id"]
    if cid not in _claims.CLAIMS:
        return "not a registered claim"
    if rec.get("rule_digest") != _claims.rule_digest(cid):
        return f"decided under rule {rec.get('rule_digest')}, registry has {_claims.rule_digest(cid)}"
    if current_code is not None and rec.get("code_digest") is None:
        return "no code digest stored"
    if current_code is not None and rec.get("code_digest") != current_code:
        return f"decided by code {rec.get('code_digest')}, the code is now {current_code}"
    return None


def current_codes(entries: list) -> dict[str, str | None]:
    """``{experiment: its code digest now}`` for the entries' experiments (``None`` where it cannot be computed:
    an experiment whose files are not in this tree)."""
    out = {}
    for e in entries:
        if e.name not in out:
            try:
                out[e.name] = _claims.code_digest(e.name)
            except (ValueError, OSError):
                out[e.name] = None
    return out


def claim_verdicts(entries: list, codes: dict[str, str | None] | None = None) -> dict[str, dict]:
    """``{claim id: claim-level verdict}`` for every registered claim, in registry order: the entries' records of
    the claim (each with ``experiment`` set to its run directory's name) combined by
    :func:`experiments.claims.claim_verdict`, plus ``stale``: the run directories whose records of the claim
    are stale (:func:`stale_reason`)."""
    codes = current_codes(entries) if codes is None else codes
    by_claim: dict[str, list[dict]] = {cid: [] for cid in _claims.CLAIMS}
    stale: dict[str, list[str]] = {cid: [] for cid in _claims.CLAIMS}
    for e in entries:
        for rec in e.results.get("claims") or []:
            if rec["id"] not in by_claim:
                continue
            by_claim[rec["id"]].append({**rec, "experiment": e.out_dir.name})
            if stale_reason(rec, codes.get(e.name)) and e.out_dir.name not in stale[rec["id"]]:
                stale[rec["id"]].append(e.out_dir.name)
    return {cid: {**_claims.claim_verdict(cid, recs), "stale": stale[cid]} for cid, recs in by_claim.items()}


def claim_label(v: dict) -> str:
    """A claim-level verdict labelled with its scale: ``not supported (smoke)``; at paper scale the verdict alone."""
    if v["scale"] is None:
        return f"{v['verdict']} (no decisive record)"
    if v["scale"] == "paper":
        return v["verdict"]
    return f"{v['verdict']} ({v['scale']})"


def statement_item(cid: str) -> str:
    """One bullet of the statements under the claim-level table: the claim's statement in a collapsible
    ``<details>`` (its source and combine rule inside), then its rule history (:data:`experiments.claims.HISTORY`)."""
    c = _claims.CLAIMS[cid]
    text = (
        f"- `{cid}`: <details><summary>{as_maths(c.statement)}</summary>*Source:* {c.source}. *Its records combine as:* "
        f"{c.combine}.</details>"
    )
    text += "".join(
        f" *Rule history, {date}:* before, rule {digest} gave *{old}*. {why}."
        for date, digest, old, why in _claims.HISTORY.get(cid, [])
    )
    return text


def claim_level_table(verdicts: dict[str, dict], *, statement: bool = True) -> str:
    """The claim-level table (module docstring): one row per claim of ``verdicts`` (:func:`claim_verdicts`), columns
    :data:`CLAIM_COLUMNS`; with ``statement`` (REPORT's copy; README's has none) a blank line and then one
    :func:`statement_item` per claim, so that the table stays as narrow as its column."""
    lines = [table_row(CLAIM_COLUMNS), "|" + "---|" * len(CLAIM_COLUMNS)]
    for cid, v in verdicts.items():
        subjects = v["subjects"][:MAX_SUBJECTS]
        more = len(v["subjects"]) - len(subjects)
        cells = {
            "claim": f"`{cid}`",
            "verdict": f"**{claim_label(v)}**" + (f" (stale: {', '.join(v['stale'])}; rerun)" if v["stale"] else ""),
            "scale": v["scale"] or "-",
            "experiments": ", ".join(v["experiments"]) or "-",
            "subjects": ", ".join(subjects) + (f" and {more} more" if more else "") or "-",
            "why": as_maths(v["why"]),
        }
        lines.append(table_row(_cell(cells[c]) for c in CLAIM_COLUMNS))
    if statement:
        lines += ["", "**Statements** (click one to read it; its source, combine rule and rule history follow):", ""]
        lines += [statement_item(cid) for cid in verdicts if cid in _claims.CLAIMS]
    return "\n".join(lines)


def summary(verdicts: dict[str, dict], stale: list[str] | None = None) -> str:
    """The plain-language summary: what holds, what fails and why, what is undecided (one line per claim, from its
    claim-level ``why``), and which results are stale."""
    groups = {"Holds": ["supported"], "Fails": ["not supported"], "Undecided": ["inconclusive", "premise violated"]}
    count = {g: sum(v["verdict"] in vs for v in verdicts.values()) for g, vs in groups.items()}
    verb = lambda n, one, many: f"{n} {one if n == 1 else many}"
    lines = [
        f"Of the {len(verdicts)} claims the suite decides, {verb(count['Holds'], 'holds', 'hold')}, "
        f"{verb(count['Fails'], 'fails', 'fail')} and {verb(count['Undecided'], 'is', 'are')} undecided. A scale "
        "in brackets marks a verdict reached at that scale (*smoke*: reduced models and data, not the paper's "
        "settings)."
    ]
    if stale:
        lines += [
            "",
            f"**Stale:** the stored results of {', '.join(stale)} were made by other code or another rule "
            "than the current ones (marked in the tables); `python -m experiments.reproduce --stale` reruns "
            "exactly those.",
        ]
    heads = {
        "Holds": "**What holds**",
        "Fails": "**What fails, and why**",
        "Undecided": "**What is undecided** (inconclusive, or its premise never held)",
    }
    for g, vs in groups.items():
        rows = [(cid, v) for cid, v in verdicts.items() if v["verdict"] in vs]
        if rows:
            lines += ["", heads[g], ""]
            lines += [f"- `{cid}`, **{claim_label(v)}**: {as_maths(v['why'])}." for cid, v in rows]
    return "\n".join(lines)


COMBINE_WORDS = (
    "One row per registered claim: its one verdict, combined from its records (one per experiment run and subject; "
    "each experiment's records are in its section below) by the claim's combine rule, named under its statement; "
    "*experiments* and *subjects* are those whose records decided it, and the scale is the largest among them. "
    "Records at a scale the claim may not be decided at never decide. The combine rules "
    "(`experiments/claims/schema.py`):\n\n"
    + "\n".join(f"- *{kind}*: {words}" for kind, words in _claims.COMBINE_RULES.items())
)


def _split_cells(line: str) -> list[str]:
    """The cells of a table row (a ``\\|`` inside a cell is text, not a separator)."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def _table_span(lines: list[str], heading: str) -> tuple[int, int]:
    """``(first, end)`` line indices of the first markdown table after the line ``heading``; ``ValueError`` without."""
    start = next((i for i, ln in enumerate(lines) if ln.strip().startswith(heading)), None)
    if start is None:
        raise ValueError(f"no {heading!r} heading")
    first = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("|")), None)
    if first is None or any(ln.startswith("#") for ln in lines[start + 1 : first]):
        raise ValueError(f"no table under {heading!r}")
    end = first
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return first, end


def readme_excerpt(report_text: str) -> str:
    """README's table: REPORT's claim-level table (under :data:`REPORT_TABLE_HEADING`), without the statements below it."""
    lines = report_text.splitlines()
    first, end = _table_span(lines, REPORT_TABLE_HEADING)
    header = _split_cells(lines[first])
    if header != list(CLAIM_COLUMNS):
        raise ValueError(
            f"the table under {REPORT_TABLE_HEADING!r} has columns {header}, not the claim-level table's "
            f"{list(CLAIM_COLUMNS)}"
        )
    return "\n".join(lines[first:end])


def update_readme(readme_text: str, report_text: str) -> str:
    """``readme_text`` with the table under :data:`README_TABLE_HEADING` replaced by :func:`readme_excerpt`."""
    lines = readme_text.splitlines()
    first, end = _table_span(lines, README_TABLE_HEADING)
    out = "\n".join([*lines[:first], readme_excerpt(report_text), *lines[end:]])
    return out + ("\n" if readme_text.endswith("\n") else "")
