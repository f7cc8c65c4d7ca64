"""A rendered report cut into its parts: the head above the first experiment section, and one :class:`Part` per
section (the site's one page per experiment, ``docs/hooks/site.py``). Re-exported by :mod:`experiments.report_md`.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from experiments.report_claims import REPORT_TABLE_HEADING

__all__ = ["Part", "split_report"]


class Part(NamedTuple):
    """One experiment section of a report: its results directory's name, its heading, and its text below the heading."""

    name: str
    title: str
    text: str


_SECTION_HEADING = re.compile(r"^## (.+?)\s*$")
_RESULTS_CITED = re.compile(r"results: `(?:[^`]*/)?([^`/]+)/results\.json`</sub>")


def split_report(text: str) -> tuple[str, list[Part]]:
    """``(head, parts)`` of a report written by :func:`experiments.report_md.render`: ``head`` is everything above the first experiment
    section (the header, the summary and the claim-level table with its statements); each :class:`Part` is one
    section: every ``## `` heading after :data:`REPORT_TABLE_HEADING` starts one, and it is named by the results
    directory its footer cites (``results: `results/<name>/results.json```, written by :func:`experiments.report_md.section`).
    ``ValueError`` naming the section when a section cites no results file, or two cite the same one."""
    lines = text.split("\n")
    table = next((i for i, ln in enumerate(lines) if ln.strip() == REPORT_TABLE_HEADING), None)
    if table is None:
        raise ValueError(f"the report has no {REPORT_TABLE_HEADING!r} heading: not a report written by render()")
    starts = [i for i in range(table + 1, len(lines)) if _SECTION_HEADING.match(lines[i])]
    head = "\n".join(lines[: starts[0]] if starts else lines).rstrip() + "\n"
    parts: list[Part] = []
    for k, start in enumerate(starts):
        title = _SECTION_HEADING.match(lines[start]).group(1)
        body = "\n".join(lines[start + 1 : starts[k + 1] if k + 1 < len(starts) else len(lines)]).strip("\n")
        cited = _RESULTS_CITED.findall(body)
        if not cited:
            raise ValueError(f"report section {title!r} cites no results file (results: `.../<name>/results.json`)")
        if cited[-1] in {p.name for p in parts}:
            raise ValueError(f"report sections cite {cited[-1]}/results.json twice (the second: {title!r})")
        parts.append(Part(cited[-1], title, body + "\n"))
    return head, parts
