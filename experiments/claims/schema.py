"""The registry's types: a claim, a control, and the verdicts and scales a claim can carry."""
from __future__ import annotations

import dataclasses
from typing import Mapping

VERDICTS = ("supported", "not supported", "inconclusive", "premise violated")
SCALES = ("toy", "smoke", "paper")
#: The scale of a config variant (``paper_*`` siblings are ``paper``).
VARIANT_SCALE = {"tiny": "toy", "smoke": "smoke", "paper": "paper"}


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
    """One claim of the registry (see the module docstring)."""

    id: str
    statement: str
    source: str
    rule: str
    thresholds: Mapping[str, float | str]
    controls: tuple[Control, ...]
    scales: tuple[str, ...]
    refuted_by: str
    experiments: tuple[str, ...]

    def digest_payload(self) -> dict:
        """What :func:`rule_digest` hashes: the rule, its thresholds and its controls."""
        return {"id": self.id, "rule": self.rule, "thresholds": dict(sorted(self.thresholds.items())),
                "controls": [[c.name, c.description] for c in self.controls], "scales": list(self.scales)}
