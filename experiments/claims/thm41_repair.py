"""The registry's claims on the repaired Thm 4.1 (docs/theory.md, "Thm 4.1 repaired: when a collapsed equilibrium is
unstable"): the certificate's predicted sign, the critical residual, and the rank of ``J(c)`` across widths. Listed
after Sec. 4's claims (:mod:`experiments.claims.sec4`); the registry is :mod:`experiments.claims`.
"""

from __future__ import annotations

from experiments.claims.schema import Claim, Control

#: The claims of this part, in the registry's order.
CLAIMS = [
    Claim(
        id="thm4.1-repaired-sign",
        statement=(
            'The repaired Thm 4.1 (docs/theory.md, section "Thm 4.1 repaired: when a collapsed equilibrium '
            'is unstable"): at a collapsed equilibrium whose loss Hessian is PSD on range(J), the '
            "certificate ssl_geometry.geometry.collapse_certificate predicts the sign of lambda_min(H_eff) "
            "from G = J^T H_L J and M = sum_a rho_a hess h_a(c) alone: unstable when M acts on null(G) or "
            "the residual is above its critical scale s*, degenerate when G and M vanish together on a "
            "direction (or s* = 1), stable otherwise."
        ),
        source="the project's repair of Thm 4.1 (issue 36); Thm 4.1 as the paper states it is thm4.1-smooth-unstable",
        rule=(
            "On every certified collapsed equilibrium the experiment builds (smooth, linear and ReLU heads, no "
            "BatchNorm), compare the certificate's predicted sign (-1 unstable, 0 degenerate, +1 stable) with "
            "the measured sign of lambda_min(H_eff) from the experiment's own dense/Lanczos eigensolve and its "
            "tolerance tol: -1 if lambda_min < -tol, +1 if lambda_min > tol, 0 otherwise. A state whose "
            "certificate concludes 'premise violated (G not PSD)' makes no prediction and is not counted. Not "
            "supported if one counted state's prediction mismatches (the state is named); inconclusive if no "
            "state is counted; supported if every counted prediction matches."
        ),
        thresholds={},
        controls=(),
        scales=("toy", "smoke", "paper"),
        refuted_by=(
            "one certified collapsed equilibrium at which the predicted sign of lambda_min(H_eff) differs "
            "from the measured one (e.g. predicted stable, measured lambda_min < -tol)"
        ),
        experiments=("collapse_hessians",),
        combine="theorem",
    ),
    Claim(
        id="thm4.1-critical-residual",
        statement=(
            "Along a family of collapsed equilibria whose residual is scaled by r (head, c and H_L fixed), "
            "lambda_min(H_eff) changes sign at r = s* r0, with s* the certificate's critical scale at the "
            "state of scale r0."
        ),
        source="the project's repair of Thm 4.1 (issue 36), part (b)",
        rule=(
            "For each listed smooth state (config analysis.critical_sweep) that is certified with null(G) = 0 "
            "and whose certificate makes a prediction (not 'premise violated (G not PSD)'): "
            "p = r0 s* from its certificate (a state with no finite p > 0 predicts no crossing and is not counted); "
            "the equilibrium is rebuilt by collapsed_equilibrium at residual scales r on a x2 grid over "
            "[p / {span}, {span} p], centred on the prediction (DINO's construction builds only r < 2: its top is "
            "capped at 1.99, and a DINO state with p / {span} >= 1.99 cannot be swept, is named as not buildable and "
            "is not counted), and the sign of the measured lambda_min(H_eff) located by bisection at the first "
            "change from + to -, giving m. A state agrees if |m - p| <= {crossing_rtol} p, or, with no sign change on "
            "the sweep, if it is stable throughout and p lies above the sweep's (capped) top; disagrees otherwise: a "
            "true crossing more than {span}x from p leaves the sweep of one sign on the side that refutes p. Not "
            "supported if one state disagrees (named); inconclusive if no state is counted; supported otherwise. "
            "The construction keeps the head fixed and scales the residual linearly, so "
            "H_eff(r) = G + (r / r0) M exactly: this tests the code (the certificate's s* against the "
            "experiment's eigensolve), not the theory; the theory is tested where the head is solved anew for "
            "each residual, which this construction does not do."
        ),
        thresholds={"crossing_rtol": 0.01, "span": 4},
        controls=(),
        scales=("toy", "smoke", "paper"),
        refuted_by=(
            "one swept state whose measured sign change is farther than crossing_rtol from r0 s*, or "
            "absent from the sweep [p / span, span p] around the prediction"
        ),
        experiments=("collapse_hessians",),
        combine="theorem",
    ),
    Claim(
        id="thm4.1-rank-predicts-stability",
        statement=(
            "For a bias-free MLP head -- one hidden layer d -> h -> k, or the composed SimSiam head "
            "d -> h -> k -> p -> k (projector then predictor, d <= h, k, p) -- rank J(c) = min(d, min over hidden "
            "layers l of (h_l - n0_l)), n0_l the number of units of layer l with sigma'(pre-activation) = 0: a "
            "head with at most h_l - d such units in every hidden layer has J of full column rank and its "
            "collapsed equilibria are stable at every residual below their critical scale s* > 0, for every "
            "smooth activation; a head with more than h_l - d such units in some layer (Swish, GELU; none exists "
            "for tanh) drops rank and is unstable at every residual scale when M does not vanish on null(G); a "
            "constant-rank bottleneck (one hidden layer, h < d) is degenerate, not unstable. Predicted from the "
            "head and c before the equilibrium is built, at widths up to the paper's projector 512 -> 2048 -> "
            "2048 and its composed SimSiam head 512 -> 2048 -> 2048 -> 512 -> 2048, whose predictor hidden layer "
            "is as wide as d, so that one unit at a zero of sigma' drops the rank."
        ),
        source="the project's repair of Thm 4.1 (issue 36), parts (c) and (d)",
        rule=(
            "For every head of the width sweep (analysis.widths, one hidden layer d -> h -> k; per width, smooth "
            "activation and seed: the initialiser's head, the rank-drop construction with h - d + 1 hidden units "
            "placed at the zero of sigma', and the bottleneck d -> d/2 -> k; analysis.widths_composed, the "
            "composed SimSiam head d -> h -> k -> p -> k with d <= h, k, p; per width, smooth activation and "
            "seed: the initialiser's head and the composed rank-drop construction with p - d + 1 predictor hidden "
            "units placed at the zero of sigma'; no rank-drop head where sigma' has no zero; a fresh head and c "
            "per residual scale), the prediction is made from the head and c alone: per hidden layer l of width "
            "h_l, n0_l = the number of its units with |sigma'(a_j)| <= {zero_tol}; predicted null dimension "
            "d - min(d, min_l (h_l - n0_l)), class 'rank-drop' if n0_l > max(h_l - d, 0) for some layer l, else "
            "'bottleneck' if the first hidden layer is narrower than d, else 'full'; predicted sign +1 (full), "
            "-1 (rank-drop), 0 (bottleneck). Then the"
            " equilibrium is built by collapsed_equilibrium, its certificate computed and lambda_min(H_eff) "
            "measured by classify_collapse (sign -1 below -tol, +1 above tol, 0 between). Per certified head whose "
            "certificate makes a prediction: a rank mismatch if some sample block's dim null(G) differs from the "
            "predicted null dimension; for 'full' and 'bottleneck' heads with s* <= 1 (residual not below its "
            "critical scale) and 'rank-drop' heads whose certificate finds M zero on null(G), not counted; "
            "otherwise a match if the measured sign equals the predicted sign, a sign mismatch if not. Not "
            "supported if any head is a rank or sign mismatch (named); inconclusive if no 'full' head or no "
            "'rank-drop' head matches; supported otherwise."
        ),
        thresholds={"zero_tol": 1e-6},
        controls=(
            Control(
                "bottleneck",
                "the constant-rank bottleneck d -> d/2 -> k beside every width and activation: "
                "rank deficient with M = 0 on null(G), predicted degenerate (sign 0) and counted by the rule",
                "a rank drop alone does not make a state unstable: M must curve the null directions, which "
                "it does at a unit on a zero of sigma' and not at a bottleneck",
            ),
        ),
        scales=("toy", "smoke", "paper"),
        refuted_by=(
            "a head whose dim null(G) differs from d - min(d, min_l (h_l - n0_l)); a full-rank head unstable (or "
            "degenerate) at a residual below its s*; a rank-drop head with M on null(G) != 0 that is stable "
            "or degenerate; a bottleneck head unstable below its s*"
        ),
        experiments=("collapse_hessians",),
        combine="theorem",
    ),
]
