"""Config: collapse Hessians (Thm 4.1) at constructed collapsed / pseudo-collapsed states."""
import ml_collections


def get_config(variant: str = "smoke") -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.seed = 0
    c.activations = ["identity", "relu", "gelu", "swish", "tanh"]
    # "mse_target" is the control whose H_L is PSD with rho != 0 by construction.
    c.losses = ["mse_target", "simsiam", "byol", "info_nce", "vicreg", "barlow_twins", "spectral_contrastive"]
    c.batch_norm = [False, True]
    c.states = ["collapsed", "pseudo_collapsed"]
    c.pseudo_collapse_scale = 0.1  # the paper: projector weights x 0.1
    c.collapse_jitter = 1e-3  # collapsed state: z_i = c + jitter * xi_i (exact collapse makes batch-std losses singular)
    c.view_noise = 0.1  # second view: z2 = z1 + view_noise * xi
    c.max_dense_dim = 4096
    if variant == "tiny":
        c.n, c.d, c.hidden, c.k = 4, 3, 6, 3
        c.activations = ["identity", "relu", "swish"]
        c.losses = ["mse_target", "simsiam", "vicreg"]
        c.batch_norm = [False]
        c.states = ["pseudo_collapsed"]
        c.predictor = False
    elif variant == "smoke":
        c.n, c.d, c.hidden, c.k = 8, 6, 12, 6
        c.predictor = False
    elif variant == "paper":
        # Paper sizes (DESIGN.md s.3): batch 256, d 512, projector 512->2048->2048, predictor
        # 2048->512->2048. H_eff is 131072-dimensional: Lanczos, not dense.
        c.n, c.d, c.hidden, c.k = 256, 512, 2048, 2048
        c.predictor = True
        c.max_dense_dim = 4096
        c.expected_runtime = "about 30-60 min on one H200 for all cases (Lanczos, 100 steps per operator); not yet run on an accelerator"
    else:
        raise ValueError(f"unknown variant {variant!r}; expected 'tiny', 'smoke' or 'paper'")
    return c
