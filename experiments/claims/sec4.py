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
        experiments=("collapse_hessians", "objectives"),
        combine="theorem"),
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
        experiments=("collapse_hessians", "objectives"),
        combine="theorem"),
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
              "to a stationary point of theta -> L by quasi-Newton (BFGS up to 4096 head parameters, L-BFGS "
              "beyond) and then, where the test below does not yet hold, by at most 5 Newton steps on the "
              "gradient (a minimum-norm least-squares step up to 4096 parameters, 10 conjugate-gradient "
              "iterations on Hessian-vector products beyond), each kept only if it lowers |grad|; rho_ref = "
              "|rho| at that head with every parameter perturbed by a relative {head_perturbation} (Gaussian). "
              "Premise, checked per state at the head reached: dh(c)/dtheta (k x P: one row's output against "
              "the P head parameters) has full row rank, "
              "sigma_min > sqrt(eps) max(k, P) sigma_max (eps the float64 epsilon; k > P fails), its extreme "
              "singular values from a float64 SVD of the dense Jacobian when k P <= 2^22, else from the "
              "eigenvalues of the k x k Gram J J^T built column by column (a vjp, then a jvp); a state that "
              "fails it (a dead head: dh/dtheta = 0) is premise violated for that state, reported and not "
              "counted. A premise-holding state counts if |grad_theta L| <= sqrt(eps) |dh/dtheta|_2 rho_ref "
              "(the certificate's stationarity tolerance with rho_ref as the scale: relative to its own rho a "
              "collapsed head with identical residual rows is never stationary unless rho = 0), or if rho_ref "
              "<= sqrt(eps) max(1, |L|) (rho vanishes there whatever the head, so every head is stationary to "
              "working precision). Supported if every counted state has |rho| <= max({rho_tol} rho_ref, "
              "sqrt(eps) max(1, |L|)) (the second term: the certificate's rho = 0); not supported if one has "
              "|rho| above that bound; premise violated if no state holds the premise; inconclusive if some "
              "do but none was counted."),
        thresholds={"rho_tol": 1e-6, "head_perturbation": 0.1},
        controls=(),
        scales=SCALES,
        refuted_by=("a head-stationary collapsed state of one of these families with dh(c)/dtheta of full row "
                    "rank (the premise) and rho != 0 (above the rule's bound)"),
        experiments=("objectives", "collapse_hessians"),
        combine="theorem"),
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
        experiments=("collapse_escape",),
        combine="single"),
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
        experiments=("collapse_escape",),
        combine="single"),
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
        experiments=("collapse_escape",),
        combine="single"),
    Claim(
        id="finite-step-escape",
        statement=("The abstract's dynamical reading, discrete part: linear and ReLU heads leave collapse "
                   "through finite step size (and BatchNorm)."),
        source="abstract (arXiv 2605.17180): 'lean on finite step size and BatchNorm'",
        rule=("SGD with the config's momentum mu at each of its learning rates lr and the config's SGD head "
              "rate tau, from the same perturbed equilibria as the flows, for the horizon T of the flow at "
              "that tau in flow time (step k at t = k lr / (1 - mu), the heavy-ball clock: steps = T (1 - mu) "
              "/ lr). Outcomes by the growth G = spread(T) / spread(0): escaped (G >= {escape_growth}), diverged "
              "(a non-finite loss or state), stayed or grew otherwise. Counted: linear/ReLU heads at the "
              "equilibria flow-linear-relu-no-escape counts, each seed a run. Control, per state: the gradient "
              "flow from the same perturbed state at the same tau must stay -- its growth over its horizon G <= "
              "{no_growth} and its linearised rate (the leading eigenvalue of its field's Jacobian J among the "
              "modes the spread sees) <= {control_rate_tol} x max|lambda(J)| (0 up to the eigensolver's "
              "roundoff); a state whose flow grows, or is predicted to, is not a control, and its SGD runs are "
              "reported, not counted. Only escape is support: a diverged SGD run is reported apart (count and "
              "runs) and neither supports nor refutes. Supported if some counted SGD run at a controlled state "
              "escapes; not supported if some counted SGD run sits at a controlled state and every such run "
              "ends finite without escaping (stayed or grew); inconclusive otherwise (no controlled state, or "
              "no escape there but a divergence)."),
        thresholds={"escape_growth": 10.0, "no_growth": 1.5, "control_rate_tol": 1e-8},
        controls=(Control("flow", "the gradient flow from the same state at the same tau (lr -> 0), which must "
                          "stay: growth <= no_growth and linearised rate <= 0 (to control_rate_tol)",
                          "escape from a state whose flow also leaves, or is predicted to, is not due to the "
                          "finite step"),),
        scales=SCALES,
        refuted_by=("linear/ReLU heads whose SGD runs all end finite without escaping, at every step size tried, "
                    "from states whose gradient flow stays collapsed"),
        experiments=("collapse_escape",),
        combine="single"),
    Claim(
        id="linearised-rate-prediction",
        statement=("Near a collapsed equilibrium the deviation of the flow grows at the rate of the leading "
                   "eigenvalue of the linearised vector field J, and SGD's by the spectral radius of its "
                   "linearised step map (I + lr J, with momentum its companion map): the theory's "
                   "quantitative prediction."),
        source="the linearisation of the gradient-flow field at the equilibrium (docs/theory.md)",
        rule=("Every run (flows at each tau, SGD at each lr) from a certified collapsed equilibrium (stationary, "
              "rho != 0; the other premises of Thm 4.1 are not needed for a linearisation), each seed a run "
              "(never seed means). The prediction is the claim's own number r, among the modes the observable "
              "spread(z) (RMS of z - mean z; a mode v is seen when |O v| > 1e-6 |O| |v|, O the linear map from "
              "the state to z - mean z) sees: for a flow the leading real part of the eigenvalues of the field's "
              "Jacobian J at the equilibrium; for SGD ln(rho) / lr_eff, rho the spectral radius of the "
              "linearised step map (with momentum mu its companion map), lr_eff = lr / (1 - mu) the heavy-ball "
              "clock on which step k sits at t = k lr_eff. Rate window, from the linearised system itself: the "
              "linearised solution from the run's own start (flow: delta(t) = sum_j a_j exp(lambda_j t) v_j; "
              "SGD: each mode's 2 x 2 companion block from zero velocity, its two roots x each a unit of rate "
              "ln|x| / lr_eff) is split into its leading group (the seen units whose rate is within {lead_rtol} "
              "|r| of r, plus 1e-8 x the largest |rate|, the eigensolver's roundoff) and the rest; the window "
              "starts at the first save from which on the rest's spread is at most {dominance} x the leading "
              "group's (the subleading modes have decayed by that factor), and ends at the last save before the "
              "run leaves the linear regime: spread(z) > {linear_factor} x spread(0), the whole state's "
              "deviation |w - w_eq| > {linear_factor} x its start, spread(z) < {decay_floor} x spread(0) (a "
              "decaying spread that has fallen that far sits near float64 resolution: the perturbation is "
              "1e-5 |c|, so the floor is ~5e4 eps |c|), or a non-finite value. Flows are saved at "
              "the config's num_saves equal steps of their horizon, SGD at every step. A finite run whose "
              "horizon ends before its window holds {min_points} saves is run again from the same start on the "
              "same save spacing, for this measurement only (its outcome stays the horizon run's), to k_a + "
              "max(10 x {min_points}, k_a / 2) saves or the end k_b of the window [k_a, k_b) that the linearised "
              "solution predicts for itself (its spread read as spread and deviation), whichever is first, "
              "where that predicted window holds {min_points} saves within {max_saves} saves; else the horizon "
              "run is measured as it is. The measured rate is "
              "the least-squares slope of log spread(z) against flow time over the window's saves. A run whose "
              "window holds fewer than {min_points} saves is a failure to test: it is counted and does not "
              "agree (never dropped). Agreement: |measured / r - 1| <= {rate_rtol}, or both |measured| and |r| "
              "<= {rate_floor} x the largest |r| among the runs of the same state and kind (the flows at every "
              "tau, or the SGD runs at every lr). A miss by more than a factor 2: a measured rate with no "
              "agreement and measured / r outside [1/2, 2]. Supported if at least {agree_fraction} of counted "
              "runs agree and none misses by more than a factor 2; not supported if fewer than half agree; "
              "inconclusive otherwise."),
        thresholds={"linear_factor": 100.0, "decay_floor": 1e-6, "lead_rtol": 0.05, "dominance": 0.1, "min_points": 3,
                    "max_saves": 5000, "rate_rtol": 0.25, "rate_floor": 0.02, "agree_fraction": 0.8},
        controls=(),
        scales=SCALES,
        refuted_by=("measured rates, once the leading mode dominates and before the nonlinear regime, that differ "
                    "from the leading eigenvalue or spectral radius; or runs in which that window does not exist"),
        experiments=("collapse_escape",),
        combine="single"),
    Claim(
        id="paper-collapse-ablation",
        statement=("The authors' collapse ablation: from pseudo-collapse (projector weights x 0.1), SimSiam "
                   "with a smooth head (Swish, GELU) escapes collapse, a linear head stays collapsed, and a "
                   "ReLU head escapes only through BatchNorm or a large step size."),
        source="authors' experiments.py, run_collapse_experiment (line 224) and its 14 settings (line 918)",
        rule=("Each run's series s(e) is the per-epoch mean std of its L2-normalised projector outputs (the "
              "authors' tracked statistic), threshold t = {escape_fraction} / sqrt(k). A run's outcome: diverged "
              "if its loss becomes non-finite; else not collapsed at start if s(0) > t (it never was collapsed, so "
              "it cannot escape); else escaped if s(e) > t at some epoch, stayed otherwise. Only escaped and stayed "
              "runs are counted; diverged and not-collapsed runs are reported as their own outcomes. Groups: "
              "smooth (Swish, GELU, no BN, lr 0.05), linear, ReLU without BN at lr 0.005, ReLU with BN or at lr "
              "0.5. E_smooth: the escaped fraction of the counted smooth runs. Minimum horizon (a premise, read "
              "from the authors' released cifar10/resnet18 arrays, every seed of Swish and GELU without BN at lr "
              "0.05): a released run's escape epoch is the epoch of its largest s (none of them crosses t, so "
              "there is no crossing epoch to read), and H = 1 + the earliest of those = {horizon_epochs} epochs. "
              "Not supported if a linear run escapes or a ReLU run without BN at lr 0.005 escapes (an escape is "
              "seen at any horizon); else inconclusive (horizon) if a counted run has fewer than H epochs; else "
              "not supported if E_smooth = 0; inconclusive if one of the four groups has no counted run; "
              "supported if E_smooth >= {min_smooth_escape} and some ReLU run with BN or lr 0.5 escapes; "
              "inconclusive otherwise."),
        thresholds={"escape_fraction": 0.5, "min_smooth_escape": 0.5, "horizon_epochs": 16},
        controls=(),
        scales=("smoke", "paper"),
        refuted_by=("a linear head, or a ReLU head without BN at lr 0.005, that leaves pseudo-collapse (at any "
                    "horizon); or, in runs of at least the horizon, no smooth head that does"),
        experiments=("collapse_escape_paper",),
        combine="single"),
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
        experiments=("hessian_tracker",),
        combine="single"),
]
