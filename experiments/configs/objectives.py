"""Config: geometric measurements across SSL objectives (backbone-free, synthetic two-view data)."""
import ml_collections


def get_config(variant: str = "smoke") -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.seed = 0
    c.objectives = ["info_nce", "moco_v3", "spectral_contrastive", "barlow_twins", "vicreg", "byol", "simsiam",
                    "dino"]
    c.activation = "swish"  # smooth head: Thm 4.1's instability statement applies
    c.spectrum = (0.1, 3.0)  # log-uniform eigenvalues of the representation covariance Sigma
    c.aug_dim = 2  # dimension of the augmentation subspace A
    c.aug_scale = 1.0  # views: z + aug_scale * A xi + iso_noise * xi'
    c.iso_noise = 0.05
    c.temperature = 0.2  # info_nce, moco_v3
    c.ema = 0.99  # base EMA decay of the target (BYOL cosine schedule)
    c.lr = 3e-3
    c.pseudo_collapse_scale = 0.1  # the paper: projector weights x 0.1
    c.max_dense_dim = 4096
    if variant == "tiny":
        c.d, c.hidden, c.k, c.pred_hidden = 4, 8, 4, 4
        c.n, c.steps, c.n_eval, c.n_geom = 16, 40, 24, 4
        c.objectives = ["barlow_twins", "byol"]
    elif variant == "smoke":
        c.d, c.hidden, c.k, c.pred_hidden = 8, 32, 8, 8
        c.n, c.steps, c.n_eval, c.n_geom = 64, 1500, 256, 8
    elif variant == "paper":
        c.d, c.hidden, c.k, c.pred_hidden = 64, 512, 128, 64
        c.n, c.steps, c.n_eval, c.n_geom = 512, 20000, 4096, 32
        c.expected_runtime = ("about 20-40 min on one GPU (eight objectives, dense H_eff of size 2048); not yet run "
                              "on an accelerator")
    else:
        raise ValueError(f"unknown variant {variant!r}; expected 'tiny', 'smoke' or 'paper'")
    return c
