"""Config: local metric adaptation and depth (Thm 3.2) and the curvature barrier (Prop 3.3)."""
import ml_collections


def get_config(variant: str = "smoke") -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.seed = 0
    # Part A (sample variation at initialisation).
    c.activations = ["identity", "relu", "swish", "gelu", "tanh"]
    c.depths = [1, 2, 3]
    # Per-sample contrastive loss (dot-product softmax CE): n_keys keys, temperature tau.
    c.n_keys = 6
    c.tau = 1.0
    # Part B (Thm 3.2): helix z(t) = radius (cos 2 pi turns t, sin 2 pi turns t, pitch t), fitted to H_eff = I.
    c.fit_activations = ["tanh", "swish"]
    c.radius, c.turns, c.pitch = 1.0, 0.75, 1.0
    c.lr = 1e-2
    c.eps_target = 0.1  # max_t |H_eff - I|_2 counted as epsilon-isotropic
    c.depth_factor = 3.0  # the MLP head must beat the affine head by this factor
    # Part C (Prop 3.3).
    c.curvature_losses = ["mse", "negative_cosine", "byol", "info_nce", "softmax_dot"]
    c.base_offset = 0.3  # u0 = target + base_offset * N(0, I)
    c.spread = 0.3  # sample points x = spread * N(0, I) in the chart
    c.n_planes = 3  # random planes per point for the sectional curvature
    c.curvature_tol = 1e-8  # |curvature| above this counts as non-zero (float64, exact derivatives)
    c.flat_residual_tol = 1e-6  # constant-W residual at or below this counts as isotropic
    if variant == "tiny":
        c.d, c.k, c.width, c.n_samples = 3, 3, 8, 8
        c.activations = ["swish"]
        c.depths = [1, 2]
        c.fit_activations = ["tanh"]
        c.n_curve, c.fit_steps, c.fit_restarts = 9, 100, 1
        c.curvature_losses = ["mse", "negative_cosine"]
        c.n_points, c.n_planes = 3, 1
    elif variant == "smoke":
        c.d, c.k, c.width, c.n_samples = 3, 4, 16, 64
        c.n_curve, c.fit_steps, c.fit_restarts = 17, 1500, 2
        c.n_points = 8
    elif variant == "paper":
        c.d, c.k, c.width, c.n_samples = 8, 16, 128, 1024
        c.n_curve, c.fit_steps, c.fit_restarts = 65, 20000, 5
        c.n_points = 32
        c.expected_runtime = ("estimated 30-60 min on one GPU (5 heads x 5 restarts x 20000 Adam steps of dense "
                              "d x d Hessians along 65 curve points, 15-16-dim loss metrics); an estimate, not yet "
                              "run on an accelerator")
    else:
        raise ValueError(f"unknown variant {variant!r}; expected 'tiny', 'smoke' or 'paper'")
    return c
