"""Config: local metric adaptation and depth (Thm 3.2) and the curvature barrier (Prop 3.3).

The paper states Thm 3.2 and Prop 3.3 without experiments, so there is no authors' recipe; the
``paper`` variant is a larger computation of the same quantities (deviations: none possible).
``model.width`` is the depth-2 heads' width; deeper heads and the affine control take widths that
match its parameter count (``experiments.metric_adaptation.widths``). The rules and thresholds are
the registry's (``experiments/claims/``: ``thm3.2-depth``, ``prop3.3-barrier``).
"""

import ml_collections

from experiments.configs import build


def base() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.seed = 0
    c.model = dict(
        d=3,
        k=4,
        width=16,  # width: the depth-2 heads'; the others are matched to its parameter count
        activations=["identity", "relu", "swish", "gelu", "tanh"],  # part A: sample variation at initialisation
        depths=[1, 2, 3],
        fit_activations=["tanh", "swish"],  # part B: heads fitted to H_eff = I
    )
    c.data = dict(
        n_keys=6,
        tau=1.0,  # per-sample contrastive loss (dot-product softmax CE): n_keys keys, temperature tau
        n_samples=64,
        radius=1.0,
        turns=0.75,
        pitch=1.0,  # helix z(t) = radius (cos 2 pi turns t, sin 2 pi turns t, pitch t)
        n_curve=17,  # fitted curve points (evaluated on a 4x finer grid)
        curvature_losses=["mse", "negative_cosine", "byol", "info_nce", "softmax_dot"],  # part C
        base_offset=0.3,  # u0 = target + base_offset * N(0, I)
        spread=0.3,  # sample points x = spread * N(0, I) in the chart
        n_points=8,
        n_planes=3,  # random planes per point for the sectional curvature
    )
    c.train = dict(lr=1e-2, fit_steps=1500, fit_restarts=2)
    c.expected_runtime = "about 2 min on 2 CPU cores"
    return c


VARIANTS = {
    "smoke": {},
    "tiny": {
        "model.d": 3,
        "model.k": 3,
        "model.width": 8,
        "data.n_samples": 8,
        "model.activations": ["swish"],
        "model.depths": [1, 2],
        "model.fit_activations": ["tanh"],
        "data.n_curve": 9,
        "train.fit_steps": 100,
        "train.fit_restarts": 1,
        "data.curvature_losses": ["mse", "negative_cosine"],
        "data.n_points": 3,
        "data.n_planes": 1,
        "expected_runtime": "seconds",
    },
    "paper": {
        "model.d": 8,
        "model.k": 16,
        "model.width": 128,
        "data.n_samples": 1024,
        "data.n_curve": 65,
        "train.fit_steps": 20000,
        "train.fit_restarts": 5,
        "data.n_points": 32,
        "expected_runtime": (
            "estimated 30-60 min on one GPU (6 heads x 5 restarts x 20000 Adam steps of dense "
            "d x d Hessians along 65 curve points, 15-16-dim loss metrics); an estimate, not "
            "yet run on an accelerator"
        ),
    },
}


def get_config(arg=None) -> ml_collections.ConfigDict:
    return build(base(), VARIANTS, arg)
