"""Config: experiment 4, predicted against measured escape from certified collapsed equilibria (Thm 4.1).

Sections: ``model`` (objectives, heads, representation, sizes of the toy problem), ``dynamics``
(flow solver, SGD, perturbation, horizon rule, escape monitor) and ``verdict`` (how close a
measured rate must be to its prediction). Variants: ``tiny`` (seconds, tests) and ``smoke``
(default, minutes on 2 CPU cores). The authors' SimSiam ResNet-18 CIFAR-10 runs are an experiment of
their own, ``experiments/collapse_escape_paper.py`` (config ``experiments/configs/collapse_escape_paper.py``).
"""
import ml_collections

from experiments import configs


def base() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.variant = ""
    c.dry_run = False
    c.seed = 0
    c.seeds = 2
    c.model = ml_collections.ConfigDict(dict(
        objectives=["mse", "dino", "simsiam"],   # see experiments.collapse_escape.problem
        activations=["identity", "relu", "swish"],
        representations=["free", "mlp"],         # z trained itself / z = MLP backbone of fixed Gaussian inputs
        mlp_objectives=["mse"],                  # objectives also run with the MLP backbone
        n=12, d=3, k=8, head_hidden=8,           # batch, representation dim, head output dim and width
        in_dim=6, backbone_hidden=8, backbone_activation="swish",
        z_scale=1.0,                             # |c| of the collapsed representation z_i = c
        head_init_scale=1.0,                     # PyTorch-default head weights times this
        residual_scale=0.5,                      # size of the constructed residual (mse: max_i |u_i - t_i|)
        dino_student_temp=0.1, dino_teacher_temp=0.04,
    ))
    c.dynamics = ml_collections.ConfigDict(dict(
        head_rate=4.0,            # tau: head parameters move tau times faster (timescale separation)
        frozen_head=True,         # also run the flow with the head frozen (H_eff's regime; not counted)
        perturbation=1e-5,        # initial spread of z relative to |c|
        solver="auto",            # "auto": RK4 for ReLU heads, kvaerno5 where stiffness > stiff_ratio, else tsit5
        stiff_ratio=100.0, rtol=1e-10, atol=1e-13, max_steps=20_000,
        rk4_safety=0.5,           # ReLU heads under "auto": fixed-step RK4 with |lambda_max| dt = rk4_safety
        rk4_max_steps=400_000,    # ... unless more steps are needed: then kvaerno5 (which stalls at ReLU kinks)
        num_saves=240,            # flow save times over [0, T]
        momentum=0.9, lrs=[0.05, 0.5],    # SGD with momentum: the paper's lr and its 10x ablation
        base_lr=0.05,
        escape_fraction=0.05,     # escaped: normalised std of z > escape_fraction / sqrt(d) (~3e3 x the start)
        linear_factor=1e2,        # linear regime: std <= linear_factor * std(t = 0)
        horizon=0.0,              # > 0 fixes T; 0 chooses it from the predicted rates (runs.case_horizon)
        horizon_margin=2.5, horizon_max=1000.0,
        rate_floor=0.02,          # rates at or below this are "no exponential escape" within T
    ))
    c.analysis = ml_collections.ConfigDict(dict(
        bn_eps=1e-5,              # BatchNorm (PyTorch eps) of the head variant used for the BN mechanism
    ))
    c.verdict = ml_collections.ConfigDict(dict(
        rate_rtol=0.25,           # |measured / predicted - 1| <= rate_rtol: the prediction holds for a run
        agree_fraction=0.8,       # ... for at least this fraction of the counted runs
    ))
    return c


VARIANTS = {
    "smoke": {},
    "tiny": {"seeds": 1, "model.objectives": ["mse"], "model.activations": ["identity", "swish"],
             "model.representations": ["free", "mlp"], "model.n": 6, "model.k": 6, "model.head_hidden": 5,
             "dynamics.num_saves": 120, "dynamics.lrs": [0.05], "dynamics.horizon_max": 400.0,
             "dynamics.frozen_head": False},
}


def get_config(arg=None) -> ml_collections.ConfigDict:
    return configs.build(base(), VARIANTS, arg)
