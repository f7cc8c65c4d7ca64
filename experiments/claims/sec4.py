"""The registry's claims on Sec. 4: curvature at collapsed equilibria (Thm 4.1), gradient flow against finite
steps, the paper's collapse ablation and the Hessian tracker (the registry is :mod:`experiments.claims`).
"""
from __future__ import annotations

from experiments.claims.schema import SCALES, Claim, Control

_THM41_SOURCE = (
    "Thm 4.1 (arXiv 2605.17180); abstract: 'at collapsed equilibria, smooth nonlinear heads put negative "
    "curvature into the effective Hessian'")


#: The claims of this part, in the registry's order.
CLAIMS = [
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
        source=("derived here (ssl_geometry.geometry.identical_rows_finding): with both views at one point "
                "the samples are exchangeable, every residual row is the same r, the head's gradient is "
                "n (dh(c)/dtheta)^T r, and a full-row-rank dh(c)/dtheta makes head stationarity force r = 0"),
        rule=("At each collapsed state of those families (both views at one point c; the second view's "
              "outputs and any target held fixed, the loss the Thm 4.1 certificate reads), the head is driven "
              "by BFGS to a stationary point of theta -> L; rho_ref = |rho| at that head with every parameter "
              "perturbed by a relative {head_perturbation} (Gaussian). The state counts if |grad_theta L| <= "
              "sqrt(eps) |dh/dtheta|_2 rho_ref (the certificate's stationarity tolerance with rho_ref as the "
              "scale: relative to its own rho a collapsed head with identical residual rows is never "
              "stationary unless rho = 0), or if rho_ref <= sqrt(eps) max(1, |L|) (rho vanishes there "
              "whatever the head, so every head is stationary to working precision). Supported if every "
              "counted state has |rho| <= max({rho_tol} rho_ref, sqrt(eps) max(1, |L|)) (the second term: "
              "the certificate's rho = 0); not supported if one has |rho| above that bound; inconclusive if "
              "no state was counted."),
        thresholds={"rho_tol": 1e-6, "head_perturbation": 0.1},
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
        rule=("Head frozen (tau = 0), gradient flow in z itself (the free representation: the flow of a "
              "backbone's parameters is reported, not counted) from the config's relative perturbation at a "
              "certified collapsed equilibrium with H_L PSD; horizon T = {horizon_decades} ln(10) / "
              "|lambda_min(H_eff)| from the frozen-head prediction itself (capped at {horizon_max}), with no "
              "rate floor. Growth G = spread(T) / spread(0), spread = RMS of z - mean z. A smooth-head run "
              "agrees if G >= {escape_growth} and its rate (least-squares slope of log spread against t over "
              "the second half of the leading stretch of save times with spread <= {linear_factor} x "
              "spread(0)) is within a relative {rate_rtol} of the linearised system's slope over the same "
              "window and the same spread functional (z' = -H_eff z from the same start; the slope tends to "
              "-lambda_min(H_eff) once the leading mode dominates); a linear/ReLU run agrees if G <= "
              "{no_growth}. Each seed is a run. Supported if every counted run agrees; not supported if a "
              "linear/ReLU run grows beyond {escape_growth} x its start, or a smooth run stays below "
              "{no_growth} or misses its linearised slope by more than {rate_rtol}; inconclusive otherwise "
              "(also when no run was counted)."),
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
              "the config's relative perturbation at a certified collapsed equilibrium (rho != 0, stationary "
              "in every variable) with H_L PSD; the timescale premise is what tau sweeps (the measured ratio "
              "is reported per run). Horizon: T = {horizon_margin} ln({escape_growth}) / r when the run's "
              "linearised rate r (the leading eigenvalue of the field's Jacobian among the modes the spread "
              "sees) is > 0, so that a run growing as predicted passes {escape_growth}^{horizon_margin}; "
              "otherwise the frozen-head horizon of thm4.1-frozen-head-flow; capped at {horizon_max}. Escape: "
              "growth G = spread(T) / spread(0) >= {escape_growth} (growth against the start, never an "
              "absolute threshold); a run whose loss or state becomes non-finite is 'diverged' and one the "
              "solver stops before T is 'censored', each its own outcome. Each seed is a run. Supported if no "
              "counted linear/ReLU flow escapes at any tau; not supported if one does (the verdict names the "
              "tau); inconclusive if a flow diverged or was censored and none escaped, or if none was counted."),
        thresholds={"escape_growth": 10.0, "timescale_ratios": "0 (head frozen), 0.01, 1, 4, 100",
                    "horizon_margin": 2.5, "horizon_max": 1e5},
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
        rule=("Joint gradient flow as in flow-linear-relu-no-escape (the same runs, horizon and outcomes), "
              "smooth heads. Supported if every counted smooth-head flow at tau >= 1 escapes (G >= "
              "{escape_growth}); not supported if one at tau >= 1 stays (G <= {no_growth}); inconclusive "
              "otherwise (a diverged or censored run, a growth between the two, or none counted). Runs at "
              "tau < 1 are reported per tau."),
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
        rule=("SGD with the config's momentum mu at each of its learning rates lr and the config's SGD head "
              "rate tau, from the same perturbed equilibria as the flows, for the horizon T of the flow at "
              "that tau in flow time (step k at t = k lr / (1 - mu), the heavy-ball clock: steps = T (1 - mu) "
              "/ lr). Outcomes: escaped (G >= {escape_growth}), diverged (non-finite), stayed (otherwise). "
              "Counted: linear/ReLU heads at the equilibria flow-linear-relu-no-escape counts, each seed a "
              "run. Supported if some counted SGD run escapes or diverges from a state whose gradient flow (at "
              "the same tau) did not escape; not supported if every counted SGD run stays; inconclusive "
              "otherwise (an escape the flow from the same state shows too is not due to the finite step; "
              "also when none was counted). The escaped and "
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
                   "eigenvalue of the linearised vector field J, and SGD's by the spectral radius of its "
                   "linearised step map (I + lr J, with momentum its companion map): the theory's "
                   "quantitative prediction."),
        source="the linearisation of the gradient-flow field at the equilibrium (docs/theory.md)",
        rule=("Every run (flows at each tau, SGD at each lr) from a certified collapsed equilibrium (stationary, "
              "rho != 0; the other premises of Thm 4.1 are not needed for a linearisation), each seed a run "
              "(never seed means). Linear regime: the leading stretch of save times before any divergence at "
              "which spread(z) <= {linear_factor} x spread(0) and the whole state's deviation |w - w_eq| <= "
              "{linear_factor} x its start. The measured rate is the least-squares slope of log spread(z) "
              "against flow time over the second half of that stretch; the prediction is the linearised "
              "system's slope of the same observable over the same window from the same start. A run with "
              "fewer than 3 points in its window is reported, not counted. Agreement: |measured / predicted - "
              "1| <= {rate_rtol}, or both |measured| and |predicted| <= {rate_floor} x the largest |predicted "
              "rate| among the runs of the same state and kind (the flows at every tau, or the SGD runs at "
              "every lr). A miss by more than a factor 2: no agreement and measured / predicted outside "
              "[1/2, 2]. Supported if at least {agree_fraction} of counted runs agree and none misses by more "
              "than a factor 2; not supported if fewer than half agree; inconclusive otherwise."),
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
        rule=("A run escapes when the per-epoch mean std of its L2-normalised projector outputs (the authors' "
              "tracked statistic) exceeds {escape_fraction} / sqrt(k) at some epoch; a run whose loss becomes "
              "non-finite is diverged, its own outcome (neither escaped nor stayed). E_smooth: the escaped "
              "fraction of the non-diverged Swish and GELU runs without BN at lr 0.05. Supported if E_smooth "
              ">= {min_smooth_escape}, no linear run escapes, no ReLU run without BN at lr 0.005 escapes and "
              "some ReLU run with BN or lr 0.5 does; not supported if a linear run escapes, E_smooth = 0, or a "
              "ReLU run without BN at lr 0.005 escapes; inconclusive otherwise, including when one of those "
              "four groups (smooth, linear, ReLU lr 0.005 without BN, ReLU with BN or lr 0.5) has no "
              "non-diverged run."),
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
]
