"""The registry's claims on Sec. 5: the guillotine and the head's metric degenerating along augmentation
directions, with the controls they are tested against (the registry is :mod:`experiments.claims`).
"""

from __future__ import annotations

from experiments.claims.schema import Claim, Control

# --------------------------------------------------------------------------------------------- Sec. 5 controls
_RANDOM = Control(
    "random",
    "isotropic Gaussian directions N(0, I) in representation space",
    "the head's average gain: passing rules out a head that is merely small everywhere",
)
_BETWEEN = Control(
    "between",
    "directions z_j - z_i between the representations of different samples",
    "the differences the data actually has: passing rules out a head that contracts every in-distribution "
    "direction alike, and keeps the ones a downstream probe needs",
)
_DATA = Control(
    "data",
    "Gaussian directions with the covariance of the representations",
    "the data's span without its pairing: passing rules out a contraction of the whole representation subspace",
)
_UNTRAINED = Control(
    "untrained",
    "the same ratio, and the same orbit compression, for the head at its initialisation (same "
    "architecture, same inputs)",
    "passing rules out a ratio below 1, or orbits compressed, by what the architecture gives before any "
    "training, which no invariance pressure can have caused",
)
_NEGATIVE = Control(
    "negative",
    "an augmentation the head was not trained on, measured the same way",
    "a negative control: it must not pass, or the test does not tell trained invariances from any "
    "direction of that kind",
)

_SEC5_RULE = (
    "For each augmentation a of the training views and each control c in (random, between, data): "
    "D_c(a) = exp(mean_i log(g_a,i / g_c,i)), g = |J_h v| / |v| per sample, with a bootstrap 95% interval "
    "over samples ({bootstrap} resamples). a passes if, for every c, the interval's upper end is < 1 and "
    "D_c(a) of the trained head is below D_c(a) of the untrained head. a fails if, for some c, the "
    "interval's lower end is >= 1. Orbit compression, the paper's way: S = spread(z) / spread(h(z)) of "
    "the L2-normalised orbits (mean squared distance to the orbit centroid), with a bootstrap 95% "
    "interval over orbits; it expands if the upper end is < 1. Untrained comparison: R = S / S_0, S_0 the "
    "same compression through the head at its initialisation on the same orbits of the same z (R = "
    "spread(h_0(z)) / spread(h(z)), bootstrap 95% interval over orbits); the orbits compress if S's lower "
    "end is > 1 and R's lower end is > 1 (training compresses them beyond what the architecture does before "
    "any training), and cannot count as compressed where S_0 is not measured. "
    "Negative control: an analysed augmentation the head was not trained on must not pass. "
    "Supported: every training augmentation passes, the orbits compress and the negative control "
    "(where one is analysed) does not pass. Not supported: some training augmentation fails, or the "
    "orbits expand. Inconclusive otherwise (the negative control passing makes it inconclusive: the "
    "test does not separate trained invariances). Premise violated: the head's training loss did not "
    "fall (mean of the last 10% of steps >= the first 10%; not checkable for a released checkpoint, whose "
    "training is the release's), or the representation is collapsed (RankMe effective rank of the "
    "backbone's z on the analysed inputs < {min_effective_rank})."
)

#: The claims of this part, in the registry's order.
CLAIMS = [
    Claim(
        id="guillotine-probe-gap",
        statement=(
            "The guillotine: a trained projection head destroys information, so rotation is less "
            "decodable from h(z) than from the backbone's z."
        ),
        source=(
            "abstract (arXiv 2605.17180): 'trading information for invariance'; authors' experiments.py, "
            "run_guillotine_experiment (line 491), head_depth_ablations.py (line 80)"
        ),
        rule=(
            "Premises: the SimCLR loss fell (mean of the last 10% of steps below the first 10%), the "
            "backbone's rotation probe beats chance (mean of linear and MLP accuracy >= "
            "{min_backbone_rotation_acc}) and z is not collapsed (RankMe >= {min_effective_rank}). The gap of "
            "a head is acc(z) - acc(head(z)) of the same probe on the same rotated test images, averaged over "
            "the linear and MLP probes; the gap difference is the trained head's gap minus the untrained "
            "head's (the same head at its initialisation on the same z; acc(z) cancels). Both are computed "
            "per test image from each probe's 0/1 outcome, with a 95% bootstrap interval ({bootstrap} "
            "resamples; paired: one resample of test images serves every representation and probe; over the "
            "run's training seeds, the seeds are resampled too, then the test images within each). A run is "
            "bitwise reproducible on one machine, but another CPU core count trains another float32 run, so "
            "the spread between machines is carried by the seeds (the smoke variant trains the main head at "
            "3). Supported if the gap difference's lower "
            "end is > {probe_margin} and the trained gap's lower end is > 0. Not supported if the gap "
            "difference's upper end is < 0 (training leaves the head more rotation-decodable than it was at "
            "initialisation) or the trained gap's upper end is < 0 (rotation more decodable from h(z) than "
            "from z). Inconclusive otherwise (an interval that reaches the margin or 0)."
        ),
        thresholds={
            "min_backbone_rotation_acc": 0.30,
            "min_effective_rank": 2.0,
            "probe_margin": 0.02,
            "bootstrap": 2000,
        },
        controls=(
            Control(
                "untrained",
                "the same probes on the head at initialisation (same architecture, same z, same rotated test images)",
                "the verdict is decided on the trained minus the untrained gap: it rules out "
                "attributing to training a gap the head's architecture gives before any training (a "
                "random ReLU/BN projection to a lower dimension already loses rotation information), "
                "which no invariance pressure can have caused",
            ),
        ),
        scales=("smoke", "paper"),
        refuted_by="a rotation probe that is at least as accurate on h(z) as on z",
        experiments=("guillotine",),
        combine="single",
    ),
    Claim(
        id="sec5-metric-degeneracy",
        statement=(
            "Sec. 5: along the augmentation directions it was trained to be invariant to, the trained "
            "head's pullback metric degenerates (|J_h v| small for v along the augmentation), and "
            "augmentation orbits compress from backbone to head: the head buys invariance by "
            "destroying information."
        ),
        source=(
            "Sec. 5 and the abstract (arXiv 2605.17180): 'the head's metric degenerates along "
            "augmentation directions, trading information for invariance'; orbit spread as in the "
            "authors' experiments.py, run_orbit_visualization_experiment (line 739)"
        ),
        rule=_SEC5_RULE,
        thresholds={"bootstrap": 2000, "min_effective_rank": 2.0},
        controls=(_RANDOM, _BETWEEN, _DATA, _UNTRAINED, _NEGATIVE),
        scales=("smoke", "paper"),
        refuted_by=(
            "a training augmentation whose degeneracy ratio is >= 1 against a control with "
            "confidence, or orbits that expand through the head"
        ),
        experiments=("guillotine", "objectives", "minilm_geometry", "pretrained_orbits"),
        combine="per-subject-all",
    ),
]
