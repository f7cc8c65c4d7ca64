"""The registry of claims: what the suite decides, by which rule, against which controls, at which scale.

Every verdict in ``results/<experiment>/results.json`` and in REPORT.md is a verdict on a claim of
:data:`CLAIMS`. A claim holds the statement as this project reads the paper (``docs/theory.md``
explains each reading), the sentence or script it comes from, the rule that decides it with every
threshold it reads, the controls (each with the reason it is the right null), the scales at which
a verdict may be given, and what result would refute it.

This module is the only place a rule, a threshold or a control can change. The digest
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

import dataclasses
import hashlib
import json
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
    "fall (mean of the last 10% of steps >= the first 10%), or the representation is collapsed.")

_THM41_SOURCE = (
    "Thm 4.1 (arXiv 2605.17180); abstract: 'at collapsed equilibria, smooth nonlinear heads put negative "
    "curvature into the effective Hessian'")


def _claims() -> dict[str, Claim]:
    c = [
        Claim(
            id="released-arrays",
            statement=("The numbers the paper prints that its released arrays determine (the Hessian-tracker "
                       "Spearman correlations 0.339 / 0.609 / 0.669, the 21.9x orbit-spread compression, the "
                       "curvature ratios 1.93 and 2.59) are what those arrays give under the authors' own "
                       "definitions."),
            source=("the paper's tables and text; the authors' plot_results.py and hessian_tracker.py "
                    "(farischaudhry/projection-head-geometry @117231d) for the definitions"),
            rule=("Count apart the values recomputed from arrays (recomputed) and those read back from a stored "
                  "summary such as meta.json (read_back: they cannot disagree and decide nothing). Supported if "
                  "every recomputed value equals the printed one to within {tol_units} units of its last "
                  "printed digit; not supported if any recomputed value differs by more; inconclusive if "
                  "nothing could be recomputed."),
            thresholds={"tol_units": 0.5},
            controls=(),
            scales=("paper",),
            refuted_by="a recomputed value that differs from the printed one beyond rounding",
            experiments=("paper_data",)),
        Claim(
            id="thm3.1-construction",
            statement=("Thm 3.1: at a point where r = rank H_L, for every r-dimensional subspace S of the "
                       "representation space the linear head W = U_r Lambda_r^(-1/2) B^T gives "
                       "v^T H_eff v = |v|^2 for all v in S (and H_eff = 0 on the complement of S)."),
            source="Thm 3.1 (arXiv 2605.17180); abstract: 'linear heads whiten a subspace'",
            rule=("Supported if max over test vectors v in S of |v^T H_eff v / |v|^2 - 1| < {construction_tol} and "
                  "|H_eff v| < {construction_tol} |v| on the complement; not supported otherwise (a failed "
                  "construction at a point meeting the premise refutes the theorem)."),
            thresholds={"construction_tol": 1e-10},
            controls=(),
            scales=SCALES,
            refuted_by="a subspace S on which the constructed head's H_eff is not the identity beyond rounding",
            experiments=("whitening",)),
        Claim(
            id="linear-heads-whiten",
            statement=("A linear head trained with an objective that does not decorrelate by construction "
                       "(InfoNCE) whitens its outputs: the correlation matrix of h(z) approaches the identity "
                       "on the head's range (the abstract's 'linear heads whiten a subspace', read as a "
                       "statement about training)."),
            source="abstract (arXiv 2605.17180): 'linear heads whiten a subspace'",
            rule=("On the InfoNCE-trained linear head at the config's view noise: decorrelation error "
                  "e = max_i |lambda_i(R) - 1| of the output correlation matrix R. Supported if e_trained < "
                  "{whitening_tol} and e_trained < e_init / {improvement}; not supported if e_trained >= e_init "
                  "(training did not whiten at all); inconclusive otherwise. Barlow Twins and VICReg heads, "
                  "which decorrelate by construction, are the positive control: if one of them misses the "
                  "same thresholds the measurement is broken and the verdict is inconclusive."),
            thresholds={"whitening_tol": 0.25, "improvement": 5.0},
            controls=(Control("decorrelating-losses", "Barlow Twins and VICReg heads trained the same way",
                              "their losses decorrelate the outputs by construction: they must pass, or the "
                              "measurement (not the claim) has failed"),),
            scales=("smoke", "paper"),
            refuted_by="an InfoNCE-trained linear head whose outputs are no whiter than at initialisation",
            experiments=("whitening",)),
        Claim(
            id="thm3.2-depth",
            statement=("Thm 3.2: an MLP head can make H_eff epsilon-isotropic along a smooth non-self-intersecting "
                       "trajectory; depth buys the capacity to adapt locally, which a constant (affine) head "
                       "lacks."),
            source="Thm 3.2 (arXiv 2605.17180)",
            rule=("Heads of depth 1 (affine), 2 and 3 are fitted with parameter counts matched to within "
                  "{param_match} of the depth-2 head's (a deeper head takes the width whose count is nearest; an "
                  "affine head's count d k + k is fixed by its shape, so the affine head is matched as a product of "
                  "two linear layers of the depth-2 width: an affine map with the depth-2 head's count). Supported "
                  "if the best depth >= 2 head reaches eps_max = max_t |H_eff(t) - I|_2 <= {eps_target} and is at "
                  "least {depth_factor} times below "
                  "the affine head's eps_max; inconclusive otherwise (an existence statement: a fit that falls "
                  "short refutes nothing)."),
            thresholds={"eps_target": 0.1, "depth_factor": 3.0, "param_match": 0.1},
            controls=(Control("affine", "the affine head as two linear layers of the depth-2 width (the depth-2 "
                              "head's parameter count)",
                              "a constant metric: what depth adds must be measured against it at equal size"),),
            scales=SCALES,
            refuted_by="none at this scale (existence statement); a fit failure is inconclusive",
            experiments=("metric_adaptation",)),
        Claim(
            id="prop3.3-barrier",
            statement=("Prop 3.3: if the loss metric g_L(u) = hess_u L(u) has non-zero Riemann curvature, no "
                       "constant W makes W^T g_L(W z) W isotropic and non-degenerate everywhere; a quadratic "
                       "loss (flat metric) is the control that can be."),
            source="Prop 3.3 (arXiv 2605.17180)",
            rule=("The flat control must give |curvature| <= {curvature_tol} and best constant-W residual <= "
                  "{flat_residual_tol} (else the computation is broken: not supported). A loss with |curvature| "
                  "> {curvature_tol} at points where its metric is definite whose best constant W reaches "
                  "residual <= {flat_residual_tol} contradicts the proposition: not supported. Supported if every "
                  "curved loss keeps a residual > {flat_residual_tol}; premise violated if no curved loss has a "
                  "definite metric at any point."),
            thresholds={"curvature_tol": 1e-8, "flat_residual_tol": 1e-6},
            controls=(Control("flat", "the quadratic (MSE) loss, whose metric is flat",
                              "a constant W can whiten it: passing shows the fit is able to find such a W"),),
            scales=SCALES,
            refuted_by="a curved loss metric that a constant W makes isotropic",
            experiments=("metric_adaptation",)),
        Claim(
            id="thm4.1-linear-psd",
            statement=("Thm 4.1, linear and ReLU part: at a collapsed equilibrium with non-zero residual and "
                       "H_L PSD, a linear head has H_eff = G >= 0 (M = 0), and so does a ReLU head away from "
                       "its kinks: no second-order escape direction."),
            source=_THM41_SOURCE,
            rule=("Only certified collapsed equilibria count (stationary in z and in the head to the "
                  "certificate's tolerance, rho != 0, H_L PSD, no BatchNorm). Supported if every linear/ReLU "
                  "equilibrium has lambda_min(H_eff) >= -tol (tol = dim eps max|lambda|); not supported if one "
                  "has lambda_min(H_eff) < -tol; premise violated if none was certified."),
            thresholds={},
            controls=(),
            scales=SCALES,
            refuted_by="one certified linear/ReLU collapsed equilibrium with lambda_min(H_eff) < -tol",
            experiments=("collapse_hessians", "objectives")),
        Claim(
            id="thm4.1-smooth-unstable",
            statement=("Thm 4.1, smooth part: at a collapsed equilibrium with non-zero residual and H_L PSD, a "
                       "smooth (C^2, nonlinear) MLP head generically makes the state a strict instability, "
                       "lambda_min(H_eff) < 0."),
            source=_THM41_SOURCE,
            rule=("Decided per objective, on certified collapsed equilibria with a smooth head. 'Generically' "
                  "means: except on a set of states of measure zero. A strictly stable equilibrium "
                  "(lambda_min(H_eff) > +tol) stays stable under every small perturbation (an open set), so one "
                  "such state is a counterexample to 'generically'; an equilibrium with |lambda_min| <= tol is "
                  "degenerate (what a measure-zero exception looks like). Per objective: supported if every "
                  "smooth-head equilibrium has lambda_min(H_eff) < -tol; not supported if one has "
                  "lambda_min(H_eff) > +tol; inconclusive otherwise; premise violated if none was certified. "
                  "The margin lambda_min(H_eff) / |lambda_min(M)| is reported per state."),
            thresholds={},
            controls=(),
            scales=SCALES,
            refuted_by="one certified smooth-head collapsed equilibrium that is strictly stable (lambda_min > +tol)",
            experiments=("collapse_hessians", "objectives")),
        Claim(
            id="stationarity-forces-rho-zero",
            statement=("A finding of this project, not a claim of the paper: for the Siamese (SimSiam, BYOL), "
                       "contrastive and decorrelation families with both views collapsed, stationarity of the "
                       "head forces the residual rho to 0, so Thm 4.1's premise rho != 0 cannot hold at their "
                       "collapsed equilibria."),
            source=("derived here (ssl_geometry.geometry.identical_rows_finding): with all rows of the batch "
                    "identical, the head's gradient is J^T sum_i rho_i, and the families' symmetries make "
                    "sum_i rho_i = 0 imply rho = 0"),
            rule=("Over the collapsed states of those families at which the head is stationary to the "
                  "certificate's tolerance: supported if every one has |rho| <= {rho_tol} |rho at the same state "
                  "with the head perturbed|; not supported if one has |rho| above that bound."),
            thresholds={"rho_tol": 1e-6},
            controls=(),
            scales=SCALES,
            refuted_by="a head-stationary collapsed state of one of these families with rho != 0",
            experiments=("objectives", "collapse_hessians")),
        Claim(
            id="thm4.1-frozen-head-flow",
            statement=("Thm 4.1's H_eff statement as dynamics, in its own regime (the head frozen, which the "
                       "timescale premise idealises): from a perturbed certified collapsed equilibrium, gradient "
                       "flow in z leaves collapse at the rate -lambda_min(H_eff) for a smooth head and does not "
                       "grow for a linear or ReLU head."),
            source=_THM41_SOURCE,
            rule=("Head frozen, gradient flow in z from the config's relative perturbation at a "
                  "certified collapsed equilibrium with H_L PSD; horizon T = {horizon_decades} ln(10) / "
                  "|lambda_min(H_eff)| from the frozen-head prediction itself (capped at {horizon_max}). Growth "
                  "G = spread(T) / spread(0). A smooth-head run agrees if G >= {escape_growth} and its rate, "
                  "fitted while spread <= {linear_factor} x spread(0), is within a relative {rate_rtol} of the "
                  "linearised system's slope over the same window and the same spread functional (z' = -H_eff z "
                  "from the same start; the slope tends to -lambda_min(H_eff) once the leading mode dominates); "
                  "a linear/ReLU run agrees if G <= {no_growth}. Supported if every counted run agrees; not "
                  "supported if a linear/ReLU run grows beyond {escape_growth} x its start, or a smooth run stays "
                  "below {no_growth} or misses its linearised slope by more than {rate_rtol}; inconclusive "
                  "otherwise."),
            thresholds={"horizon_decades": 3.0, "horizon_max": 1e5, "linear_factor": 100.0,
                        "rate_rtol": 0.25, "no_growth": 1.5, "escape_growth": 10.0},
            controls=(),
            scales=SCALES,
            refuted_by=("a frozen-head linear/ReLU run that grows, or a frozen-head smooth run that does not grow at "
                        "the rate the linearised field gives"),
            experiments=("collapse_escape",)),
        Claim(
            id="flow-linear-relu-no-escape",
            statement=("The abstract's dynamical reading: linear and ReLU heads cannot escape collapse under "
                       "continuous-time gradient flow of the joint objective (backbone representation and head "
                       "both trained)."),
            source=("abstract (arXiv 2605.17180): 'linear and ReLU heads cannot escape under continuous-time "
                    "gradient flow'"),
            rule=("Joint gradient flow (head rate tau times the representation's, tau in {timescale_ratios}) from "
                  "the config's relative perturbation at a certified collapsed equilibrium whose "
                  "premises hold. Escape: growth G = spread(T) / spread(0) >= {escape_growth} by the horizon "
                  "(growth against the start, never an absolute threshold); a run whose loss or state becomes "
                  "non-finite is 'diverged', its own outcome. Supported if no counted linear/ReLU flow escapes "
                  "at any tau; not supported if one does (the verdict names the tau); inconclusive if a flow "
                  "diverged or was censored and none escaped."),
            thresholds={"escape_growth": 10.0, "timescale_ratios": "0 (head frozen), 0.01, 1, 4, 100"},
            controls=(),
            scales=SCALES,
            refuted_by="one premise-holding linear/ReLU gradient flow whose deviation grows past the escape growth",
            experiments=("collapse_escape",)),
        Claim(
            id="flow-smooth-escape",
            statement=("The abstract's dynamical reading, smooth part: with a smooth head, training escapes a "
                       "collapsed equilibrium (the negative curvature of H_eff is an escape direction of the "
                       "flow)."),
            source=("abstract (arXiv 2605.17180): 'smooth nonlinear heads put negative curvature into the "
                    "effective Hessian, so training escapes collapse'"),
            rule=("Joint gradient flow as in flow-linear-relu-no-escape, smooth heads. Supported if every counted "
                  "smooth-head flow at tau >= 1 escapes (G >= {escape_growth}); not supported if one at tau >= 1 "
                  "stays below {no_growth}; inconclusive otherwise. Runs at tau < 1 are reported per tau."),
            thresholds={"escape_growth": 10.0, "no_growth": 1.5},
            controls=(),
            scales=SCALES,
            refuted_by="a premise-holding smooth-head flow with tau >= 1 that does not grow",
            experiments=("collapse_escape",)),
        Claim(
            id="finite-step-escape",
            statement=("The abstract's dynamical reading, discrete part: linear and ReLU heads leave collapse "
                       "through finite step size (and BatchNorm)."),
            source="abstract (arXiv 2605.17180): 'lean on finite step size and BatchNorm'",
            rule=("SGD with the config's momentum at each of its learning rates, from the same perturbed equilibria as "
                  "the flows, for the same horizon in flow time (step k at t = k lr / (1 - momentum), the "
                  "heavy-ball clock). Outcomes: escaped (G >= {escape_growth}), diverged (non-finite), stayed. "
                  "Supported if some linear/ReLU SGD run escapes or diverges from a state whose gradient flow did "
                  "not escape; not supported if every linear/ReLU SGD run stays; inconclusive otherwise (an "
                  "escape the flow from the same state shows too is not due to the finite step). The escaped and "
                  "diverged counts are reported apart."),
            thresholds={"escape_growth": 10.0},
            controls=(Control("flow", "the gradient flow from the same state (lr -> 0)",
                              "escape that the flow also shows is not due to the finite step"),),
            scales=SCALES,
            refuted_by="linear/ReLU heads that stay collapsed under SGD at every step size tried",
            experiments=("collapse_escape",)),
        Claim(
            id="linearised-rate-prediction",
            statement=("Near a collapsed equilibrium the deviation of the flow grows at the rate of the leading "
                       "eigenvalue of the linearised vector field, and SGD's by the spectrum of I - lr J (the "
                       "theory's quantitative prediction)."),
            source="the linearisation of the gradient-flow field at the equilibrium (docs/theory.md)",
            rule=("For each counted run and seed (never seed means), the measured rate is the least-squares slope "
                  "of log spread(z) while spread <= {linear_factor} x spread(0) and before any divergence; the "
                  "prediction is the linearised system's slope over the same window. Agreement: |measured / "
                  "predicted - 1| <= {rate_rtol}, or both <= {rate_floor} x max predicted rate of the case. "
                  "Supported if at least {agree_fraction} of counted runs agree and none misses by more than a "
                  "factor 2; not supported if fewer than half agree; inconclusive otherwise."),
            thresholds={"linear_factor": 100.0, "rate_rtol": 0.25, "rate_floor": 0.02, "agree_fraction": 0.8},
            controls=(),
            scales=SCALES,
            refuted_by="measured linear-regime rates that differ from the linearised prediction",
            experiments=("collapse_escape",)),
        Claim(
            id="paper-collapse-ablation",
            statement=("The authors' collapse ablation: from pseudo-collapse (projector weights x 0.1), SimSiam "
                       "with a smooth head (Swish, GELU) escapes collapse, a linear head stays collapsed, and a "
                       "ReLU head escapes only through BatchNorm or a large step size."),
            source="authors' experiments.py, run_collapse_experiment (line 224) and its 14 settings (line 918)",
            rule=("A run escapes when the per-epoch mean std of its L2-normalised projector outputs exceeds "
                  "{escape_fraction} / sqrt(k) at some epoch; diverged runs are their own outcome. Supported if "
                  "E_smooth >= {min_smooth_escape}, no linear run escapes, no ReLU run without BN at lr 0.005 "
                  "escapes and some ReLU run with BN or lr 0.5 does; not supported if a linear run escapes, no "
                  "smooth run escapes, or a ReLU run without BN at lr 0.005 escapes; inconclusive otherwise."),
            thresholds={"escape_fraction": 0.5, "min_smooth_escape": 0.5},
            controls=(),
            scales=("smoke", "paper"),
            refuted_by="a linear head that leaves pseudo-collapse, or a smooth head that does not",
            experiments=("collapse_escape_paper",)),
        Claim(
            id="tracker-power-iteration",
            statement=("The paper's Hessian tracker (the 20-step shifted power iteration on hess_{z1} L at the "
                       "backbone features, first 5 batches of each epoch) resolves lambda_min along SimSiam "
                       "training, so its sign and size can be read as the curvature signature of collapse."),
            source="authors' hessian_tracker.py, get_min_eigenvalue_hvp (line 63) and run_hessian_tracking (line 93)",
            rule=("A checkpoint is valid when its reference (exact blocks, or float64 Lanczos with every true "
                  "residual <= {converged_residual} max|lambda|) exists and the head is not dead. Fewer than "
                  "{min_valid_checkpoints} valid checkpoints: inconclusive. Supported if the median of "
                  "|lambda_min power - lambda_min ref| / |lambda_min ref| is <= {rel_error} and the fraction with "
                  "a wrong sign is <= {sign_error}; not supported if either is exceeded."),
            thresholds={"converged_residual": 1e-6, "min_valid_checkpoints": 3, "rel_error": 0.1, "sign_error": 0.1},
            controls=(Control("lanczos", "converged float64 Lanczos (or exact blocks) on the same Hessian",
                              "the reference the estimator must match"),),
            scales=("smoke", "paper"),
            refuted_by="a median relative error or a wrong-sign fraction above the registry's thresholds",
            experiments=("hessian_tracker",)),
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
            thresholds={"bootstrap": 2000},
            controls=(_RANDOM, _BETWEEN, _DATA, _UNTRAINED, _NEGATIVE),
            scales=("smoke", "paper"),
            refuted_by=("a training augmentation whose degeneracy ratio is >= 1 against a control with "
                        "confidence, or orbits that expand through the head"),
            experiments=("guillotine", "objectives", "minilm_geometry", "pretrained_orbits")),
    ]
    return {claim.id: claim for claim in c}


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
