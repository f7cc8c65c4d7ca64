"""Config: collapse escape dynamics (Thm 4.1, DESIGN.md s.3 "Collapse escape").

A small SimSiam model (MLP backbone on flattened 8x8 digits, projector + predictor of the
paper's shape, bias-free) trained full batch on one fixed pair of noisy views, from a
constructed collapsed state and from the paper's pseudo-collapse, by continuous-time
gradient flow (diffrax) and by SGD with momentum 0.9 at three learning rates.
"""
import ml_collections


def get_config(variant: str = "smoke") -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.seed = 0
    c.dataset = "digits"
    c.image_size = 8              # digits rendered at 8x8; channel 0 flattened -> in_dim 64
    c.view_noise = 0.3            # views: x + view_noise * N(0, I) on standardised pixels (fixed per run)
    c.backbone_activation = "relu"
    c.activations = ["identity", "relu", "swish", "gelu"]
    c.batch_norm = [False, True]
    # "collapsed": backbone output layer x collapse_scale (z_i = b + O(collapse_scale));
    # "pseudo": the paper's pseudo-collapse (projector weights x pseudo_collapse_scale);
    # "normal": PyTorch-default initialisation.
    c.inits = ["collapsed", "pseudo"]
    c.collapse_scale = 1e-3
    c.pseudo_collapse_scale = 0.1
    # SGD with momentum; lrs are the paper's 0.5 / 0.05 / 0.005 ablation (the toy's gradients are
    # of the same order, so no rescaling). Time axis t = step * lr / (1 - momentum) (heavy-ball
    # effective step), so SGD and the flow share one clock.
    c.momentum = 0.9
    c.lrs = [0.5, 0.05, 0.005]
    c.base_lr = 0.05              # the paper's lr: Spearman numbers are read from these runs
    c.horizon = 20.0              # flow time T
    c.num_saves = 20              # observations at t = T * i / num_saves
    c.solver = "tsit5"
    c.rtol, c.atol = 1e-6, 1e-9
    c.max_steps = 20_000
    # Escape criterion (dynamics.escape_time "std_threshold"): std of L2-normalised projector
    # outputs > escape_fraction / sqrt(k) (1/sqrt(k) = directions uniform on the sphere).
    c.escape_fraction = 0.5
    c.dtype = "float64"           # toy dynamics in float64 (exact flow/SGD comparison, exact H_eff)
    if variant == "tiny":
        c.n, c.backbone_hidden, c.d, c.k, c.pred_hidden = 16, 12, 4, 6, 3
        c.activations = ["identity", "swish"]
        c.batch_norm = [False]
        c.inits = ["collapsed"]
        c.lrs = [0.05]
        c.horizon = 4.0
        c.num_saves = 4
        c.seeds = 1
    elif variant == "smoke":
        c.n, c.backbone_hidden, c.d, c.k, c.pred_hidden = 32, 32, 8, 16, 8
        c.seeds = 2
        c.activations = ["identity", "relu", "swish"]
        c.inits = ["collapsed"]
        c.horizon = 10.0
        # The SimSiam flow is stiff near collapse (|grad| ~ 1/|p|): looser tolerances and a step cap;
        # flows that hit the cap are reported (status max_steps_reached) and left out of the verdict.
        c.rtol, c.atol, c.max_steps = 1e-4, 1e-6, 4000
    elif variant == "paper":
        # The paper's sizes (DESIGN.md s.3) on the toy data: projector d->2048->2048, predictor
        # 2048->512->2048, batch 512, 3 seeds. H_eff is (512*d)^2: dense only for small d.
        c.n, c.backbone_hidden, c.d, c.k, c.pred_hidden = 512, 256, 8, 2048, 512
        c.seeds = 3
        c.horizon = 50.0
        c.num_saves = 50
        c.dtype = "float32"
        c.expected_runtime = ("not run on an accelerator; estimate 30-90 min on one H200 "
                              "(48 trajectories, dense 4096x4096 H_eff at every save)")
    else:
        raise ValueError(f"unknown variant {variant!r}; expected 'tiny', 'smoke' or 'paper'")
    return c
