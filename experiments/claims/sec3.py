"""The registry's claims on Sec. 3 and the released arrays: the head as a metric, linear heads whiten, depth and the
barrier (the registry is :mod:`experiments.claims`).
"""

from __future__ import annotations

from experiments.claims.schema import SCALES, Claim, Control

#: The claims of this part, in the registry's order.
CLAIMS = [
    Claim(
        id="released-arrays",
        statement=(
            "The numbers the paper prints that its released arrays determine (the Hessian-tracker "
            "Spearman correlations 0.339 / 0.609 / 0.669, the 21.9x orbit-spread compression, the "
            "curvature ratios 1.93 and 2.59) are what those arrays give under the authors' own "
            "definitions."
        ),
        source=(
            "the paper's tables and text; the authors' plot_results.py and hessian_tracker.py "
            "(farischaudhry/projection-head-geometry @117231d) for the definitions"
        ),
        rule=(
            "Count apart the values recomputed from arrays (recomputed) and those read back from a stored "
            "summary such as meta.json (read_back: they cannot disagree and decide nothing). Supported if "
            "every recomputed value equals the printed one to within {tol_units} units of its last "
            "printed digit; not supported if any recomputed value differs by more; inconclusive if "
            "nothing could be recomputed."
        ),
        thresholds={"tol_units": 0.5},
        controls=(),
        scales=("paper",),
        refuted_by="a recomputed value that differs from the printed one beyond rounding",
        experiments=("paper_data",),
        combine="single",
    ),
    Claim(
        id="thm3.1-construction",
        statement=(
            "Thm 3.1: at a point where r = rank H_L, for every r-dimensional subspace S of the "
            "representation space the linear head W = U_r Lambda_r^(-1/2) B^T gives "
            "v^T H_eff v = |v|^2 for all v in S (and H_eff = 0 on the complement of S)."
        ),
        source="Thm 3.1 (arXiv 2605.17180); abstract: 'linear heads whiten a subspace'",
        rule=(
            "Supported if max over test vectors v in S of |v^T H_eff v / |v|^2 - 1| < {construction_tol} and "
            "|H_eff v| < {construction_tol} |v| on the complement; not supported otherwise (a failed "
            "construction at a point meeting the premise refutes the theorem)."
        ),
        thresholds={"construction_tol": 1e-10},
        controls=(),
        scales=SCALES,
        refuted_by="a subspace S on which the constructed head's H_eff is not the identity beyond rounding",
        experiments=("whitening",),
        combine="theorem",
    ),
    Claim(
        id="linear-heads-whiten",
        statement=(
            "A linear head trained with an objective that does not decorrelate by construction "
            "(InfoNCE) whitens its outputs: the correlation matrix of h(z) approaches the identity "
            "on the head's range (the abstract's 'linear heads whiten a subspace', read as a "
            "statement about training)."
        ),
        source="abstract (arXiv 2605.17180): 'linear heads whiten a subspace'",
        rule=(
            "On the InfoNCE-trained linear head at the config's view noise: decorrelation error "
            "e = max_i |lambda_i(R) - 1| of the output correlation matrix R. Supported if e_trained < "
            "{whitening_tol} and e_trained < e_init / {improvement}; not supported if e_trained >= e_init "
            "(training did not whiten at all); inconclusive otherwise. Barlow Twins and VICReg heads, "
            "which decorrelate by construction, are the positive control: if one of them misses the "
            "same thresholds the measurement is broken and the verdict is inconclusive."
        ),
        thresholds={"whitening_tol": 0.25, "improvement": 5.0},
        controls=(
            Control(
                "decorrelating-losses",
                "Barlow Twins and VICReg heads trained the same way",
                "their losses decorrelate the outputs by construction: they must pass, or the "
                "measurement (not the claim) has failed",
            ),
        ),
        scales=("smoke", "paper"),
        refuted_by="an InfoNCE-trained linear head whose outputs are no whiter than at initialisation",
        experiments=("whitening",),
        combine="single",
    ),
    Claim(
        id="thm3.2-depth",
        statement=(
            "Thm 3.2: an MLP head can make H_eff epsilon-isotropic along a smooth non-self-intersecting "
            "trajectory; depth buys the capacity to adapt locally, which a constant (affine) head "
            "lacks."
        ),
        source="Thm 3.2 (arXiv 2605.17180)",
        rule=(
            "Heads of depth 1 (affine), 2 and 3 are fitted with parameter counts matched to within "
            "{param_match} of the depth-2 head's (a deeper head takes the width whose count is nearest; an "
            "affine head's count d k + k is fixed by its shape, so the affine head is matched as a product of "
            "two linear layers of the depth-2 width: an affine map with the depth-2 head's count). Supported "
            "if the best depth >= 2 head reaches eps_max = max_t |H_eff(t) - I|_2 <= {eps_target} and is at "
            "least {depth_factor} times below "
            "the affine head's eps_max; inconclusive otherwise (an existence statement: a fit that falls "
            "short refutes nothing)."
        ),
        thresholds={"eps_target": 0.1, "depth_factor": 3.0, "param_match": 0.1},
        controls=(
            Control(
                "affine",
                "the affine head as two linear layers of the depth-2 width (the depth-2 head's parameter count)",
                "a constant metric: what depth adds must be measured against it at equal size",
            ),
        ),
        scales=SCALES,
        refuted_by="none at this scale (existence statement); a fit failure is inconclusive",
        experiments=("metric_adaptation",),
        combine="single",
    ),
    Claim(
        id="prop3.3-barrier",
        statement=(
            "Prop 3.3: if the loss metric g_L(u) = hess_u L(u) has non-zero Riemann curvature, no "
            "constant W makes W^T g_L(W z) W isotropic and non-degenerate everywhere; a quadratic "
            "loss (flat metric) is the control that can be."
        ),
        source="Prop 3.3 (arXiv 2605.17180)",
        rule=(
            "The flat control must give |curvature| <= {curvature_tol} and best constant-W residual <= "
            "{flat_residual_tol} (else the computation is broken: not supported). A loss with |curvature| "
            "> {curvature_tol} at points where its metric is definite whose best constant W reaches "
            "residual <= {flat_residual_tol} contradicts the proposition: not supported. Supported if every "
            "curved loss keeps a residual > {flat_residual_tol}; premise violated if no curved loss has a "
            "definite metric at any point."
        ),
        thresholds={"curvature_tol": 1e-8, "flat_residual_tol": 1e-6},
        controls=(
            Control(
                "flat",
                "the quadratic (MSE) loss, whose metric is flat",
                "a constant W can whiten it: passing shows the fit is able to find such a W",
            ),
        ),
        scales=SCALES,
        refuted_by="a curved loss metric that a constant W makes isotropic",
        experiments=("metric_adaptation",),
        combine="theorem",
    ),
]
