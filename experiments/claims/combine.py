"""One verdict per claim: a claim's stored records combined by its registered ``combine`` rule.

:func:`claim_verdict` implements the words of :data:`experiments.claims.schema.COMBINE_RULES`; the
registry (:mod:`experiments.claims`) re-exports it.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from experiments.claims.schema import COMBINE_RULES, SCALES

#: The order in which a verdict overrides the others when records or subjects combine: one 'not supported'
#: decides, then 'inconclusive', then 'supported'; 'premise violated' only when nothing else is left.
PRECEDENCE = ("not supported", "inconclusive", "supported", "premise violated")
#: How long a record's reason may run in a claim-level ``why`` (a longer one is cut at a word, with " ...").
WHY_REASON_CHARS = 200


def _short(text: str, limit: int = WHY_REASON_CHARS) -> str:
    text = " ".join(str(text).split()).rstrip(".")
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " ..."


def where(rec: Mapping) -> str:
    """``experiment`` or ``experiment [subject]``: where one record was decided."""
    return rec["experiment"] + (f" [{rec['subject']}]" if rec.get("subject") else "")


def _pooled(records: list[Mapping]) -> tuple[str | None, list[Mapping]]:
    """The theorem rule over records: ``(verdict, the records that decide it)``; ``(None, [])`` for none."""
    for verdict in PRECEDENCE:
        hits = [r for r in records if r["verdict"] == verdict]
        if hits:
            return verdict, hits
    return None, []


def _top_scale(records: list[Mapping]) -> list[Mapping]:
    """The records at the largest scale among ``records``."""
    top = max((SCALES.index(r["scale"]) for r in records), default=None)
    return [r for r in records if SCALES.index(r["scale"]) == top]


def _why(verdict: str, deciders: list[Mapping], units: int, unit: str) -> str:
    """One line: how many records (or subjects) decided the verdict, where, and the first one's reason; the deciders
    at the largest scale lead (a paper-scale record before a smoke one), in the order given within a scale."""
    deciders = sorted(deciders, key=lambda r: -SCALES.index(r["scale"]))
    places = list(dict.fromkeys(where(r) for r in deciders))
    first = f"{where(deciders[0])}: {_short(deciders[0].get('reason') or '(no reason stored)')}"
    if units == 1:
        return first
    n = len({(r["experiment"], r.get("subject")) for r in deciders}) if unit == "subject" else len(deciders)
    count = f"{n} of {units} {unit}s"
    lead = {
        "not supported": f"{count} refute{'s' if n == 1 else ''} it",
        "inconclusive": f"{count} {'is' if n == 1 else 'are'} undecided and none refutes it",
        "supported": f"{count} support{'s' if n == 1 else ''} it and none refutes it or is undecided",
        "premise violated": f"all {units} {unit}s have their premise violated",
    }[verdict]
    if len(places) > 1:
        lead += " (" + ", ".join(places[:4]) + (f" and {len(places) - 4} more" if len(places) > 4 else "") + ")"
    return f"{lead} -- {first}"


def claim_verdict(claim_id: str, records: Iterable[Mapping]) -> dict:
    """The claim-level verdict of ``claim_id`` from its stored records, by the claim's ``combine`` rule.

    Each record is a stored claim record (:func:`experiments.claims.record`: ``id``, ``verdict``, ``scale``,
    ``decisive``, ``subject``, ``reason``) with an ``experiment`` key added by the caller: the run it was
    read from (``guillotine``, ``guillotine-paper_vit_tiny``). Records at a scale the claim may not be
    decided at (``decisive`` False) never decide. The rules (:data:`~experiments.claims.schema.COMBINE_RULES`):

    * ``theorem``: over every decisive record, one 'not supported' gives not supported; else one
      'inconclusive' gives inconclusive; else one 'supported' gives supported; else premise violated.
    * ``per-subject-all``: each (experiment, subject) is decided by its decisive records at its largest
      scale, as for a theorem; then the subjects combine the same way.
    * ``single``: the decisive records at the largest scale present, as for a theorem.

    No decisive record gives inconclusive. Returns ``{verdict, scale, experiments, subjects, why}``:
    ``scale`` is the largest scale among the records that decided the verdict (``None`` when none did),
    ``experiments`` and ``subjects`` are theirs (in the order given, each once), ``why`` is one line.
    Raises ``ValueError`` for a record of another claim or one without ``experiment``.
    """
    from experiments.claims import claim as _claim  # the registry imports this module

    c = _claim(claim_id)
    records = list(records)
    for r in records:
        if r.get("id") != claim_id:
            raise ValueError(f"claim_verdict({claim_id!r}): a record of claim {r.get('id')!r} was passed")
        if not r.get("experiment"):
            raise ValueError(f"claim_verdict({claim_id!r}): every record needs the 'experiment' it was read from")
    decisive = [r for r in records if r["decisive"]]
    if not decisive:
        scales = sorted({r["scale"] for r in records}, key=SCALES.index)
        why = (
            f"no decisive record: {len(records)} record(s) at scale {', '.join(scales)}, where the claim may be "
            f"decided only at {', '.join(c.scales)}"
            if records
            else "no stored record decides it"
        )
        return {"verdict": "inconclusive", "scale": None, "experiments": [], "subjects": [], "why": why}
    if c.combine == "theorem":
        verdict, deciders = _pooled(decisive)
        units, unit = len(decisive), "decisive record"
    elif c.combine == "single":
        top = _top_scale(decisive)
        verdict, deciders = _pooled(top)
        units, unit = len(top), f"{top[0]['scale']}-scale record"
    elif c.combine == "per-subject-all":
        subjects: dict[tuple, list[Mapping]] = {}
        for r in decisive:
            subjects.setdefault((r["experiment"], r.get("subject")), []).append(r)
        decided = {key: _pooled(_top_scale(recs)) for key, recs in subjects.items()}
        verdict = next(v for v in PRECEDENCE if any(d[0] == v for d in decided.values()))
        deciders = [r for d in decided.values() if d[0] == verdict for r in d[1]]
        units, unit = len(subjects), "subject"
    else:  # the Claim type refuses any other kind; kept so a new kind cannot pass silently
        raise ValueError(f"claim {claim_id!r}: no combine rule {c.combine!r}; expected one of {sorted(COMBINE_RULES)}")
    return {
        "verdict": verdict,
        "scale": max((r["scale"] for r in deciders), key=SCALES.index),
        "experiments": list(dict.fromkeys(r["experiment"] for r in deciders)),
        "subjects": list(dict.fromkeys(r["subject"] for r in deciders if r.get("subject"))),
        "why": _why(verdict, deciders, units, unit),
    }
