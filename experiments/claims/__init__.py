"""The registry of claims: what the suite decides, by which rule, against which controls, at which scale.

Every verdict in ``results/<experiment>/results.json`` and in REPORT.md is a verdict on a claim of
:data:`CLAIMS`. A claim holds the statement as this project reads the paper (``docs/theory.md``
explains each reading), the sentence or script it comes from, the rule that decides it with every
threshold it reads, the controls (each with the reason it is the right null), the scales at which
a verdict may be given, and what result would refute it.

This package is the only place a rule, a threshold or a control can change (the claims of each
section are in ``sec3.py``, ``sec4.py`` and ``sec5.py``, their types in ``schema.py``). The digest
:func:`rule_digest` hashes all of them; each stored verdict carries the digest it was decided
under, and ``tests/test_claims.py`` fails when a stored digest differs from the registry's, so a
changed rule forces a rerun. When a rule changes, add a line to :data:`HISTORY` (date, old rule
digest, old verdict, why): REPORT.md prints it under the claim.

Scales. ``toy`` (the ``tiny`` variants: seconds, for tests), ``smoke`` (the committed suite:
minutes on a CPU, reduced models and data) and ``paper`` (the authors' settings). A claim about
every state (a theorem) may be decided at any scale: one counterexample refutes it. A claim about
what training does at the paper's settings may be decided at ``smoke`` and ``paper``; a ``smoke``
verdict is printed as e.g. "supported (smoke)" and never stands unlabelled beside the paper's
numbers.

Verdicts: ``supported``, ``not supported``, ``inconclusive``, ``premise violated`` (the setting
does not meet the claim's premises, so it says nothing there).
"""
from __future__ import annotations

import hashlib
import json
from typing import Mapping

from experiments.claims import sec3, sec4, sec5
from experiments.claims.schema import SCALES as SCALES, VARIANT_SCALE as VARIANT_SCALE, VERDICTS as VERDICTS
from experiments.claims.schema import Claim as Claim, Control as Control


def _claims() -> dict[str, Claim]:
    claims = [*sec3.CLAIMS, *sec4.CLAIMS, *sec5.CLAIMS]
    out = {c.id: c for c in claims}
    if len(out) != len(claims):
        raise ValueError("the registry holds a claim id twice")
    return out


#: Every claim the suite decides, by id.
CLAIMS: dict[str, Claim] = _claims()

#: Rule changes: ``{claim id: [(date, old digest, old verdict, what changed and why), ...]}``. A rule
#: that changes keeps its old verdict here; REPORT.md prints the line under the claim.
HISTORY: dict[str, list[tuple[str, str, str, str]]] = {
    "thm3.2-depth": [
        ("2026-12-01", "4a979347d55c2bbc", "none under that rule (the committed pre-registry 'supported' compared the "
         "16-parameter affine head with MLP heads of 132 and 404 parameters)",
         "An affine head's parameter count is fixed by its shape, so the rule now says how it is matched: two linear "
         "layers of the depth-2 width; changed before any run under the registry"),
    ],
}


def claim(claim_id: str) -> Claim:
    """The registered :class:`Claim` ``claim_id`` (``KeyError`` naming the registered ids otherwise)."""
    try:
        return CLAIMS[claim_id]
    except KeyError:
        raise KeyError(f"unknown claim id {claim_id!r}; registered: {sorted(CLAIMS)}") from None


def rule_digest(claim_id: str) -> str:
    """SHA-256 (first 16 hex digits) of the claim's rule, thresholds, controls and scales."""
    payload = json.dumps(claim(claim_id).digest_payload(), sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def rule_text(claim_id: str) -> str:
    """The claim's rule with its thresholds filled in."""
    c = claim(claim_id)
    return c.rule.format(**c.thresholds)


def scale_of(variant: str) -> str:
    """The scale of a config variant: ``tiny`` -> ``toy``, ``smoke`` -> ``smoke``, ``paper*`` -> ``paper``."""
    if variant.startswith("paper"):
        return "paper"
    if variant not in VARIANT_SCALE:
        raise ValueError(f"no scale for variant {variant!r}; expected one of {sorted(VARIANT_SCALE)} or paper_*")
    return VARIANT_SCALE[variant]


def record(claim_id: str, verdict: str, *, scale: str, deciding: Mapping, reason: str,
           subject: str | None = None) -> dict:
    """The stored form of one verdict: ``{id, subject, verdict, scale, decisive, rule_digest, deciding, reason}``.

    ``decisive`` is False when ``scale`` is not one at which the claim may be decided (the verdict is
    then kept, labelled, and never counted as the claim's). ``deciding`` holds the numbers the rule read.
    """
    c = claim(claim_id)
    if verdict not in VERDICTS:
        raise ValueError(f"verdict of {claim_id!r} must be one of {VERDICTS}; got {verdict!r}")
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}; got {scale!r}")
    return {"id": claim_id, "subject": subject, "verdict": verdict, "scale": scale, "decisive": scale in c.scales,
            "rule_digest": rule_digest(claim_id), "deciding": dict(deciding), "reason": reason}


def label(rec: Mapping) -> str:
    """A verdict as REPORT.md prints it: ``supported (smoke)``; ``supported (toy; not decisive)``."""
    if rec["scale"] == "paper":
        return rec["verdict"]
    return f"{rec['verdict']} ({rec['scale']}{'' if rec['decisive'] else '; not decisive'})"


def reason_lines(records) -> list[str]:
    """One markdown bullet per stored claim record: id, subject, labelled verdict and the rule's reason."""
    out = []
    for rec in records:
        subject = f" ({rec['subject']})" if rec.get("subject") else ""
        out.append(f"- `{rec['id']}`{subject}: **{label(rec)}** -- {rec['reason']}.")
    return out
