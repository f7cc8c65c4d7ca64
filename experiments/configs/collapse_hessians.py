"""Config: Thm 4.1 at certified collapsed equilibria and at labelled non-stationary collapsed states.

The paper evaluates Thm 4.1 only through its SimSiam escape runs; there is no authors' recipe for
this experiment. ``paper`` uses the paper's sizes (projector 512 -> 2048 -> 2048, predictor
2048 -> 512 -> 2048, batch 256): ``H_eff`` is then 131072-dimensional and goes through Lanczos. Its deviations
from the smoke variant's list of states, each with its reason:

* No pseudo-collapsed states (and so no BatchNorm, which only they use): they are labelled non-equilibria that
  decide no claim (the smoke variant keeps them for the comparison in its table and figure), and at the paper's
  sizes they would be 60 of 125 cases at about 45-60 s each (Lanczos on the 131072-dimensional ``H_eff``,
  measured 2026-12-06), about as long as everything that decides a claim.
* No width sweep: the sibling variant ``paper_widths`` is that sweep, and decides the width claim at scale paper.
* Each case, certificate and sweep is stored as it ends (``checkpoint_dir``), so a run longer than a session
  resumes where it stopped, with the same code and config only (experiments/stored_parts.py).

``paper_widths`` (a sibling paper variant, run into ``results/collapse_hessians-paper_widths/``) is the width
sweep of ``thm4.1-rank-predicts-stability`` alone, up to the paper's projector 512 -> 2048 -> 2048; it builds no
other state, so the experiment's other claims are not measured there (they say so). Its deviations from the
paper's settings, each with its reason:

* ``analysis.widths_n = 4`` samples per equilibrium, not the paper's batch of 256: at a collapsed state ``H_eff``
  is block diagonal by sample and every block has the same ``J(c)``, whose rank the claim predicts; ``n`` only
  sets how many residual rows there are (at least 2, so that ``sum_i rho_i = 0`` leaves ``rho != 0``), and
  ``n d = 2048`` keeps the top rung's ``H_eff`` within the dense float64 eigensolver.
* The heads are the one-hidden-layer, bias-free projector shape of the paper (no BatchNorm): the claim is
  about the rank of ``J(c)`` of such a head, which train-mode BatchNorm does not have at a collapsed state.
* The objective is the fixed-target MSE of the smoke ladder, the one whose collapsed equilibria are constructed
  and certified exactly (no SSL objective of the paper has a certified collapsed equilibrium with ``rho != 0``:
  the claim ``stationarity-forces-rho-zero``).
* The composed SimSiam head (projector then predictor, ``analysis.widths_composed``) only at the paper's size
  ``512 -> 2048 -> 2048 -> 512 -> 2048`` and with one seed (``analysis.widths_composed_seeds = 1``: 5 heads, the
  initialiser's draw per activation and one predictor unit at the zero of sigma' for Swish and GELU), not the
  one-hidden-layer ladder's 4: four composed heads at that size (two of each construction) took 162 s (compilation
  included), 210 s, 263 s and 268 s wall on this 2-core CPU at load 10-13 (2026-12-06), 253 CPU-seconds in all
  (about 63 per head), far above the ~15 s of the ladder's top rung; the smaller composed rung runs in the smoke
  variant.
"""

import ml_collections

from experiments.configs import build


def base() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.seed = 0
    c.data = dict(
        n=6,
        d=4,
        view_noise=0.1,  # pseudo-collapsed state: z2 = z1 + view_noise * xi
    )
    c.model = dict(
        hidden=12,
        k=8,
        pred_hidden=4,  # an expanding head (k > d): null(J^T) != 0, equilibria with rho != 0 exist
        activations=["identity", "relu", "gelu", "swish", "tanh"],
        batch_norm=[
            False,
            True,
        ],  # train-mode BN: pseudo-collapsed states only (at exact collapse it maps every row to beta)
        pseudo_collapse_scale=0.1,  # the paper: projector weights x 0.1
    )
    c.analysis = dict(
        states=["equilibrium", "collapsed", "pseudo_collapsed"],
        # fixed-target objectives: certified equilibria with rho != 0 are constructed (ssl_geometry.geometry.collapsed_equilibrium)
        equilibrium_objectives=["mse_target", "dino_fixed_teacher"],
        # objectives whose samples are exchangeable at collapse: evaluated at collapsed / pseudo-collapsed states
        siamese_objectives=["simsiam", "byol", "info_nce", "vicreg", "barlow_twins", "spectral_contrastive"],
        predictor_objectives=["simsiam", "byol"],  # online branch = predictor after projector
        # The size of the constructed residual, per objective (M grows with |rho|, G = J^T H_L J does not, so the
        # sweep shows where M overcomes G). MSE: targets at distance s from u*. DINO: the teacher P_i = q*(1 - (s/2)
        # V_i / max|V|) with q* the student's softmax, so P_i >= q*(1 - s/2) > 0 needs s < 2
        # (ssl_geometry.geometry.collapsed_equilibrium raises otherwise): 1.8 keeps P_i >= q*/10.
        residual_scales=dict(mse_target=[0.3, 1.0, 3.0, 10.0], dino_fixed_teacher=[0.3, 1.0, 1.8]),
        max_dense_dim=4096,
        # the Lanczos budget of lambda_min(H_eff) at every certified equilibrium and sweep evaluation above
        # max_dense_dim, and the cap up to which an equilibrium whose sign it leaves unresolved (|lambda_min| <= tol)
        # is measured again with the budget doubled (experiments/collapse_hessians/cases.py, classify_resolved);
        # below max_dense_dim (smoke, tiny) the eigensolve is dense and neither enters
        equilibrium_lanczos_steps=100,
        equilibrium_lanczos_max_steps=100,
        # the Lanczos budget of G and M at those equilibria (their extremes are reported, the margin reads
        # lambda_min(M); only the sign of lambda_min(H_eff) decides, so only H_eff gets the budget above and its
        # refinement: experiments/collapse_hessians/cases.py, spectrum)
        metric_interaction_lanczos_steps=100,
        # collapsed states: quasi-Newton iterations driving the head to stationarity (scipy BFGS up to 4096 head
        # parameters, the jitted L-BFGS beyond: experiments/stationary_heads.py)
        stationarity_max_iter=400,
        # thm4.1-critical-residual: the smooth full-rank equilibria whose residual is swept ([objective, activation,
        # residual_scale], each a state built above) and the bisection's relative width; the sweep is centred on the
        # predicted crossing p, [p / span, span p] with the claim's registered span (DINO capped below 2:
        # experiments/collapse_hessians/certificates.py, sweep_range)
        critical_sweep=[["mse_target", "swish", 0.3], ["dino_fixed_teacher", "swish", 0.3]],
        critical_sweep_rtol=1e-3,
        # thm4.1-rank-predicts-stability (experiments/collapse_hessians/widths.py): the ladder of one-hidden-layer
        # heads (d, h, k) whose top, in the paper variant, is the paper's projector 512 -> 2048 -> 2048; the smooth
        # activations; seeds per (width, activation, construction); the residual scales (a fresh head per scale);
        # the samples n of each equilibrium (H_eff is n d dimensional); the fixed-target objective of the equilibria
        # (the tolerance for a hidden unit at a zero of sigma' is the claim's threshold zero_tol).
        # smoke: 16 heads per width; measured 57 s (4 -> 12 -> 8) + 81 s (16 -> 48 -> 32) wall at load ~10 on 2 cores,
        # about 1 min of CPU (JIT compilation dominates up to 64 -> 192 -> 128)
        widths=[[4, 12, 8], [16, 48, 32]],
        widths_activations=["swish", "gelu", "tanh"],
        widths_seeds=2,
        widths_residual_scales=[0.01],
        widths_n=4,
        widths_objective="mse_target",
        # the composed SimSiam head of part (d), projector d -> h -> k then predictor k -> p -> k (rungs [d, h, k, p],
        # d <= h, k, p; the paper: 512 -> 2048 -> 2048 -> 512 -> 2048): per activation the initialiser's draw and,
        # where sigma' has a zero, p - d + 1 predictor hidden units placed at it (experiments/collapse_hessians/
        # constructions.py); its own seeds per (rung, activation, construction), the residual scales and n as above
        widths_composed=[[4, 12, 8, 4]],
        widths_composed_seeds=2,
    )
    # where each case, certificate and sweep is stored as it ends (experiments/stored_parts.py): reproduce sets
    # DIR/<run>/checkpoints, and a resumed run of the same code and config reuses them; empty: nothing stored
    c.checkpoint_dir = ""
    c.expected_runtime = "about 1-2 min on 2 CPU cores"
    return c


VARIANTS = {
    "smoke": {},
    "tiny": {
        "data.n": 3,
        "data.d": 2,
        "model.hidden": 5,
        "model.k": 4,
        "model.pred_hidden": 3,
        "model.activations": ["identity", "swish"],
        "model.batch_norm": [False],
        "analysis.siamese_objectives": ["byol"],
        "analysis.residual_scales": {"mse_target": [10.0], "dino_fixed_teacher": [1.8]},
        "analysis.critical_sweep": [["mse_target", "swish", 10.0]],
        "analysis.widths": [[4, 12, 8]],
        "analysis.widths_activations": ["swish", "tanh"],
        "analysis.widths_seeds": 1,
        "analysis.widths_composed_seeds": 1,
        "expected_runtime": "seconds",
    },
    "paper": {
        "data.n": 256,
        "data.d": 512,
        "model.hidden": 2048,
        "model.k": 2048,
        "model.pred_hidden": 512,
        "model.batch_norm": [False],  # BatchNorm enters only the pseudo-collapsed states, which paper leaves out
        "analysis.states": ["equilibrium", "collapsed"],
        "analysis.widths": [],  # the width sweep is the sibling variant paper_widths
        "analysis.widths_composed": [],
        # Lanczos on the 131072-dimensional H_eff: 100 steps left lambda_min(H_eff) ~ 1e-7 of the DINO equilibria
        # inside its tolerance (3.7e-7 to 1.2e-6: a measured 0); at dino/identity/1.0 (lambda_min 9.8e-8) 300 steps
        # gave tol 1.9e-7 and 400 steps 3.2e-8 (2026-12-07); dino/identity/1.8 needed 800
        "analysis.equilibrium_lanczos_steps": 400,
        "analysis.equilibrium_lanczos_max_steps": 1600,
        "expected_runtime": "hours on a 2-core CPU (the run of 28579f9 took 256.9 min of part time; its dry run "
        "projects this code: docs/dry_run_paper.md)",
    },
}


#: The paper's ladder of one-hidden-layer heads ``(d, h, k)``, from the smoke sizes to the projector.
PAPER_WIDTHS = [[4, 12, 8], [16, 48, 32], [64, 192, 128], [128, 512, 512], [512, 2048, 2048]]
#: The composed SimSiam head at the paper's size alone, one seed (the module docstring says why).
PAPER_COMPOSED = {"analysis.widths_composed": [[512, 2048, 2048, 512]], "analysis.widths_composed_seeds": 1}
VARIANTS["paper_widths"] = {
    "analysis.states": [],  # the width sweep alone: no experiment row, certificate or residual sweep
    "analysis.critical_sweep": [],
    "analysis.widths": PAPER_WIDTHS,
    "analysis.widths_seeds": 4,  # 32 heads per rung (smoke: 2 seeds, 16 heads)
    **PAPER_COMPOSED,
    "expected_runtime": "about 10 min on 2 CPU cores for the one-hidden-layer ladder (the top rung: about 15 s per "
    "head) plus the 5 composed heads (about 1-4 min each, the load deciding); its dry run projects it",
}


def get_config(arg=None) -> ml_collections.ConfigDict:
    return build(base(), VARIANTS, arg)
