"""The registry's types: a claim, a control, and the verdicts and scales a claim can carry."""

from __future__ import annotations

import dataclasses
from typing import Mapping

VERDICTS = ("supported", "not supported", "inconclusive", "premise violated")
SCALES = ("toy", "smoke", "paper")
#: The scale of a config variant (``paper_*`` siblings are ``paper``).
VARIANT_SCALE = {"tiny": "toy", "smoke": "smoke", "paper": "paper"}

#: How a claim's records combine into its one claim-level verdict (:func:`experiments.claims.claim_verdict`
#: implements exactly these words). A record counts only if it is *decisive* (stored at a scale the claim may be
#: decided at); the others never decide.
COMBINE_RULES = {
    "theorem": (
        "A claim about every state that meets its premises. Every decisive record counts, at every scale, in "
        "every experiment and subject; 'premise violated' records say nothing. Not supported if any decisive "
        "record is 'not supported' (one sound counterexample anywhere refutes the claim); otherwise inconclusive "
        "if any is 'inconclusive'; otherwise supported if at least one is 'supported'; otherwise premise violated "
        "(every decisive record is); inconclusive when there is no decisive record."
    ),
    "per-subject-all": (
        "A claim about what training does, for every subject it is stated for. A subject is one (experiment run, "
        "subject) pair (an objective, a seed, a model; a record without a subject is its run's one subject). "
        "Each subject is decided by its decisive records at the largest scale it has (a paper-scale record "
        "supersedes the subject's smoke-scale ones), combined as for a theorem. 'premise violated' subjects "
        "say nothing. Not supported if some subject is not supported; otherwise inconclusive if some subject is "
        "inconclusive; otherwise supported if at least one subject is supported; otherwise premise violated "
        "(every subject is); inconclusive when there is no decisive record."
    ),
    "single": (
        "A claim decided by one experiment. Its decisive records at the largest scale present decide (a "
        "paper-scale record supersedes the smoke-scale one); where several runs are at that scale (the paper "
        "variant and its paper_* siblings) they combine as for a theorem: not supported if one is, otherwise "
        "inconclusive if one is, otherwise supported if one is, otherwise premise violated; inconclusive when "
        "there is no decisive record."
    ),
}


@dataclasses.dataclass(frozen=True)
class Control:
    """A null the claim is tested against.

    Attributes:
      name: the key the measurements use (``random``, ``between``, ...).
      description: what is measured for it.
      reason: why it is the right null (what passing against it rules out).
    """

    name: str
    description: str
    reason: str


@dataclasses.dataclass(frozen=True)
class Claim:
    """One claim of the registry (see :mod:`experiments.claims`).

    ``combine`` names the rule of :data:`COMBINE_RULES` by which the claim's records (one per experiment run and
    subject) combine into its one claim-level verdict.
    """

    id: str
    statement: str
    source: str
    rule: str
    thresholds: Mapping[str, float | str]
    controls: tuple[Control, ...]
    scales: tuple[str, ...]
    refuted_by: str
    experiments: tuple[str, ...]
    combine: str

    def __post_init__(self):
        if self.combine not in COMBINE_RULES:
            raise ValueError(f"claim {self.id!r}: combine must be one of {sorted(COMBINE_RULES)}; got {self.combine!r}")
        if self.combine == "single" and len(self.experiments) != 1:
            raise ValueError(
                f"claim {self.id!r}: combine 'single' needs exactly one experiment; got {self.experiments}"
            )

    def digest_payload(self) -> dict:
        """What :func:`rule_digest` hashes: the rule, its thresholds, its controls and its scales.

        ``combine`` is not hashed: it says how the records combine, not how one record is decided, so a change
        to it leaves every stored record's rule digest valid; the code digest (which hashes the registry's
        files) marks the results stale all the same."""
        return {
            "id": self.id,
            "rule": self.rule,
            "thresholds": dict(sorted(self.thresholds.items())),
            "controls": [[c.name, c.description] for c in self.controls],
            "scales": list(self.scales),
        }
