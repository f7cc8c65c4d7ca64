"""The registry's claims on Sec. 5: the guillotine and the head's metric degenerating along augmentation
directions, with the controls they are tested against (the registry is :mod:`experiments.claims`).
"""
from __future__ import annotations

from experiments.claims.schema import Claim, Control

# --------------------------------------------------------------------------------------------- Sec. 5 controls
_RANDOM = Control(
    "random", "isotropic Gaussian directions N(0, I) in representation space",
    "the head's average gain: passing rules out a head that is merely small everywhere")
_BETWEEN = Control(
    "between", "directions z_j - z_i between the representations of different samples",
    "the differences the data actually has: passing rules out a head that contracts every in-distribution "
    "direction alike, and keeps the ones a downstream probe needs")
_DATA = Control(
    "data", "Gaussian directions with the covariance of the representations",
    "the data's span without its pairing: passing rules out a contraction of the whole representation "
    "subspace")
_UNTRAINED = Control(
    "untrained", "the same ratio for the head at its initialisation (same architecture, same inputs)",
    "passing rules out a ratio below 1 that the architecture gives before any training, which no "
    "invariance pressure can have caused")
_NEGATIVE = Control(
    "negative", "an augmentation the head was not trained on, measured the same way",
    "a negative control: it must not pass, or the test does not tell trained invariances from any "
    "direction of that kind")

_SEC5_RULE = (
    "For each augmentation a of the training views and each control c in (random, between, data): "
    "D_c(a) = exp(mean_i log(g_a,i / g_c,i)), g = |J_h v| / |v| per sample, with a bootstrap 95% interval "
    "over samples ({bootstrap} resamples). a passes if, for every c, the interval's upper end is < 1 and "
    "D_c(a) of the trained head is below D_c(a) of the untrained head. a fails if, for some c, the "
    "interval's lower end is >= 1. Orbit compression, the paper's way: S = spread(z) / spread(h(z)) of "
    "the L2-normalised orbits (mean squared distance to the orbit centroid), with a bootstrap 95% "
    "interval over orbits; it compresses if the lower end is > 1 and expands if the upper end is < 1. "
    "Negative control: an analysed augmentation the head was not trained on must not pass. "
    "Supported: every training augmentation passes, the orbits compress and the negative control "
    "(where one is analysed) does not pass. Not supported: some training augmentation fails, or the "
    "orbits expand. Inconclusive otherwise (the negative control passing makes it inconclusive: the "
    "test does not separate trained invariances). Premise violated: the head's training loss did not "
    "fall (mean of the last 10% of steps >= the first 10%; not checkable for a released checkpoint, whose "
    "training is the release's), or the representation is collapsed (RankMe effective rank of the "
    "backbone's z on the analysed inputs < {min_effective_rank}).")

#: The claims of this part, in the registry's order.
CLAIMS = [
    Claim(
        id="guillotine-probe-gap",
        statement=("The guillotine: a trained projection head destroys information, so rotation is less "
                   "decodable from h(z) than from the backbone's z."),
        source=("abstract (arXiv 2605.17180): 'trading information for invariance'; authors' experiments.py, "
                "run_guillotine_experiment (line 491), head_depth_ablations.py (line 80)"),
        rule=("Premises: the SimCLR loss fell (mean of the last 10% of steps below the first 10%), the "
              "backbone's rotation probe beats chance (mean of linear and MLP accuracy >= "
              "{min_backbone_rotation_acc}) and z is not collapsed (RankMe >= {min_effective_rank}). Gap = "
              "backbone accuracy - head accuracy (mean of linear and MLP probes). Supported if the gap is "
              ">= {probe_margin}; not supported if it is <= 0; inconclusive otherwise."),
        thresholds={"min_backbone_rotation_acc": 0.30, "min_effective_rank": 2.0, "probe_margin": 0.02},
        controls=(Control("untrained", "the same probes on the head at initialisation",
                          "reported beside the gap: a gap the untrained head already shows is architecture, "
                          "not training"),),
        scales=("smoke", "paper"),
        refuted_by="a rotation probe that is at least as accurate on h(z) as on z",
        experiments=("guillotine",)),
    Claim(
        id="sec5-metric-degeneracy",
        statement=("Sec. 5: along the augmentation directions it was trained to be invariant to, the trained "
                   "head's pullback metric degenerates (|J_h v| small for v along the augmentation), and "
                   "augmentation orbits compress from backbone to head: the head buys invariance by "
                   "destroying information."),
        source=("Sec. 5 and the abstract (arXiv 2605.17180): 'the head's metric degenerates along "
                "augmentation directions, trading information for invariance'; orbit spread as in the "
                "authors' experiments.py, run_orbit_visualization_experiment (line 739)"),
        rule=_SEC5_RULE,
        thresholds={"bootstrap": 2000, "min_effective_rank": 2.0},
        controls=(_RANDOM, _BETWEEN, _DATA, _UNTRAINED, _NEGATIVE),
        scales=("smoke", "paper"),
        refuted_by=("a training augmentation whose degeneracy ratio is >= 1 against a control with "
                    "confidence, or orbits that expand through the head"),
        experiments=("guillotine", "objectives", "minilm_geometry", "pretrained_orbits")),
]
