"""Config: experiment 4, predicted against measured escape from certified collapsed equilibria (Thm 4.1).

Sections: ``model`` (objectives, heads, representation, sizes of the toy problem), ``dynamics``
(the timescale sweep, flow solver, SGD, perturbation, save times) and ``analysis``. The thresholds
and horizons the verdicts read are the registry's (experiments/claims/: ``thm4.1-frozen-head-flow``,
``flow-linear-relu-no-escape``, ``flow-smooth-escape``, ``finite-step-escape``,
``linearised-rate-prediction``); ``dynamics.head_rates`` is the registry's sweep of the timescale
ratio. Variants: ``tiny`` (seconds, tests) and ``smoke`` (default, minutes on 2 CPU cores); the
``paper`` variant (SimSiam ResNet-18 CIFAR-10 through the trainer) is its own experiment module,
``experiments/collapse_escape_paper.py`` with ``experiments/configs/collapse_escape_paper.py``.
"""

import ml_collections

from experiments import configs


def base() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.variant = ""
    c.dry_run = False
    c.seed = 0
    c.seeds = 2
    c.model = ml_collections.ConfigDict(
        dict(
            objectives=["mse", "dino", "simsiam"],  # see experiments.collapse_escape.problem
            activations=["identity", "relu", "swish"],
            representations=["free", "mlp"],  # z trained itself / z = MLP backbone of fixed Gaussian inputs
            mlp_objectives=["mse"],  # objectives also run with the MLP backbone
            n=12,
            d=3,
            k=8,
            head_hidden=8,  # batch, representation dim, head output dim and width
            in_dim=6,
            backbone_hidden=8,
            backbone_activation="swish",
            z_scale=1.0,  # |c| of the collapsed representation z_i = c
            head_init_scale=1.0,  # PyTorch-default head weights times this
            residual_scale=0.5,  # size of the constructed residual (mse: max_i |u_i - t_i|)
            dino_student_temp=0.1,
            dino_teacher_temp=0.04,
        )
    )
    c.dynamics = ml_collections.ConfigDict(
        dict(
            # tau: head parameters move tau times faster than the representation (0: head frozen, the regime of
            # H_eff); the registry's sweep (flow-linear-relu-no-escape)
            head_rates=[0.0, 0.01, 1.0, 4.0, 100.0],
            sgd_head_rate=4.0,  # SGD's tau (one of head_rates: SGD runs that flow's horizon)
            perturbation=1e-5,  # initial spread of z relative to |c|
            solver="auto",  # "auto": RK4 for ReLU heads, kvaerno5 where stiffness > stiff_ratio, else tsit5
            stiff_ratio=100.0,
            rtol=1e-10,
            atol=1e-13,
            max_steps=20_000,
            rk4_safety=0.5,  # ReLU heads under "auto": fixed-step RK4 with |lambda_max| dt = rk4_safety
            rk4_max_steps=400_000,  # ... unless more steps are needed: then kvaerno5 (which stalls at ReLU kinks)
            num_saves=240,  # flow save times over [0, T]
            momentum=0.9,
            lrs=[0.05, 0.5],  # SGD with momentum: the paper's lr and its 10x ablation
        )
    )
    c.analysis = ml_collections.ConfigDict(
        dict(
            bn_eps=1e-5,  # BatchNorm (PyTorch eps) of the head variant used for the BN mechanism
        )
    )
    return c


VARIANTS = {
    "smoke": {},
    "tiny": {
        "seeds": 1,
        "model.objectives": ["mse"],
        "model.activations": ["identity", "swish"],
        "model.representations": ["free", "mlp"],
        "model.n": 6,
        "model.k": 6,
        "model.head_hidden": 5,
        "dynamics.num_saves": 120,
        "dynamics.lrs": [0.05],
        "dynamics.head_rates": [0.0, 4.0],
    },
}


def get_config(arg=None) -> ml_collections.ConfigDict:
    return configs.build(base(), VARIANTS, arg)
