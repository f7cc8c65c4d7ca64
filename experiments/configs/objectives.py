"""Config: geometric measurements across SSL objectives (backbone-free, synthetic two-view data).

The paper has no such cross-objective experiment, so there is no authors' recipe; ``paper`` scales
the synthetic problem up for an accelerator.
"""

import ml_collections

from experiments.configs import build


def base() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.seed = 0
    c.seeds = 2  # every objective (and DINO with every head of analysis.thm41_activations) is trained per seed
    c.data = dict(
        d=8,
        n=64,
        n_eval=256,
        n_geom=8,
        spectrum=(0.1, 3.0),  # log-uniform eigenvalues of the representation covariance Sigma
        aug_dim=2,  # dimension of the augmentation subspace A
        aug_scale=1.0,  # views: z + aug_scale * A xi + iso_noise * xi'
        iso_noise=0.05,
    )
    # k > d: an expanding head, so null(J^T) != 0 and a collapsed equilibrium with rho != 0 can exist
    c.model = dict(hidden=32, k=16, pred_hidden=8, activation="swish")  # every objective's head (smooth)
    c.train = dict(
        objectives=["info_nce", "moco_v3", "spectral_contrastive", "barlow_twins", "vicreg", "byol", "simsiam", "dino"],
        temperature=0.2,  # info_nce, moco_v3
        ema=0.99,  # base EMA decay of the target (BYOL cosine schedule)
        lr=3e-3,
        steps=1000,
    )
    c.analysis = dict(
        # Thm 4.1: DINO is also trained with each of these heads (per seed); its certified equilibria decide
        # thm4.1-smooth-unstable (gelu, swish, tanh) and thm4.1-linear-psd (identity, relu)
        thm41_activations=["identity", "relu", "gelu", "swish", "tanh"],
        # DINO equilibria: P_i = q*(1 - (s/2) V_i / max|V|) for each s (s < 2 keeps P > 0; 1.8: P >= q*/10)
        dino_residual_scales=[1.0, 1.8],
        pseudo_collapse_scale=0.1,  # the paper: projector weights x 0.1
        max_dense_dim=4096,
        stationarity_max_iter=400,  # BFGS iterations driving a collapsed head to stationarity
        # Sec. 5 (experiments/objectives/sec5.py): K directions per sample and kind; orbits of the training views
        directions_per_sample=4,
        n_orbits=32,
        orbit_size=8,
        # The negative control, fixed before any run: a random aug_dim-dimensional subspace orthogonal to the
        # augmentation subspace A (drawn from the config seed), which the views contain only through iso_noise
        negative_control="orthogonal_subspace",
    )
    c.expected_runtime = "a few minutes on 2 CPU cores"
    return c


VARIANTS = {
    "smoke": {},
    "tiny": {
        "data.d": 4,
        "model.hidden": 8,
        "model.k": 6,
        "model.pred_hidden": 4,
        "data.n": 16,
        "train.steps": 40,
        "data.n_eval": 24,
        "data.n_geom": 4,
        "train.objectives": ["barlow_twins", "byol", "dino"],
        "seeds": 1,
        "analysis.thm41_activations": ["identity", "swish"],
        "analysis.dino_residual_scales": [1.8],
        "analysis.n_orbits": 6,
        "analysis.orbit_size": 4,
        "analysis.directions_per_sample": 2,
        "expected_runtime": "seconds",
    },
    "paper": {
        "data.d": 64,
        "model.hidden": 512,
        "model.k": 128,
        "model.pred_hidden": 64,
        "data.n": 512,
        "train.steps": 20000,
        "data.n_eval": 4096,
        "data.n_geom": 32,
        "expected_runtime": "about 20-40 min on one GPU (eight objectives, dense H_eff of size 2048); not yet "
        "run on an accelerator",
    },
}


def get_config(arg=None) -> ml_collections.ConfigDict:
    return build(base(), VARIANTS, arg)
