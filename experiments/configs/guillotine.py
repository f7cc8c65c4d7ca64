"""Config: experiment 6, the guillotine (Sec. 5) -- probes, trajectory curvature, orbits, metric degeneracy.

A backbone + ReLU/BN MLP head is trained with SimCLR's NT-Xent (tau 0.1, Adam 1e-3) through
:func:`ssl_geometry.objectives.make_objective`; the trained pair is then measured (see
``experiments/guillotine.py``). ``"smoke"`` trains on the embedded ``"shapes"`` set at 16x16 on CPU;
``"paper"`` is DESIGN.md section 3's setting (CIFAR-10, ResNet-18, batch 256, 50 epochs).
"""
import ml_collections


def get_config(variant: str = "smoke") -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.seed = 0
    # Data. "shapes" is rendered with nuisance rotations in [-shapes_max_angle_deg, +...] only, so that
    # the 90-degree rotations of the rotation probe are visible (CIFAR images have an upright
    # orientation; shapes with the library's default +-45 deg would make 90 deg ambiguous).
    c.dataset = "shapes"
    c.image_size = 16
    c.shapes_max_angle_deg = 15.0
    c.n_train = 4000
    c.n_test = 1000
    # Rotation probe on classes whose shape has no 90-degree symmetry (disk, square, plus and ring look the
    # same under a 90-degree turn; bar under 180), so 4-way rotation prediction is well posed. None: all.
    c.rotation_probe_classes = ["triangle", "ell", "half_disk"]
    # Backbone and head.
    c.backbone = "small_cnn"  # small_cnn | resnet18_cifar | vit_tiny
    c.widths = (16, 32, 64)  # small_cnn only
    c.head_depth = 2  # affine layers of the projector (2: Linear-BN-ReLU-Linear, SimCLR's)
    c.head_hidden = 128
    c.head_out = 32
    c.depths = (1, 2, 3)  # head-depth ablation (the main run is head_depth, reused)
    # SimCLR training (the paper: NT-Xent tau 0.1, Adam 1e-3, batch 256, 50 epochs).
    c.temperature = 0.1
    c.lr = 1e-3
    c.batch_size = 128
    c.steps = 300
    # Steps per jitted call, scanned with `unroll`: XLA:CPU runs a convolution's backward pass inside a
    # while loop ~15x slower than in straight-line code (measured: 0.85 s vs 0.057 s per step), so on CPU
    # the chunk is unrolled; on an accelerator use a long chunk with unroll=1.
    c.steps_per_call = 5
    c.unroll = 5  # lax.scan unroll factor (= steps_per_call: straight-line code)
    c.augment = ml_collections.ConfigDict(dict(  # the CIFAR SimCLR recipe (augment.SIMCLR_CIFAR)
        crop_scale=(0.2, 1.0), flip_prob=0.5, jitter=(0.4, 0.4, 0.4, 0.1), jitter_prob=0.8,
        jitter_random_order=True, gray_prob=0.2, blur_prob=0.0))
    # Probes (the paper: linear and 2-layer MLP, 5 epochs on 4 x 50k rotated images).
    c.probe_train_images = 2000
    c.probe_test_images = 1000
    c.probe_epochs = 20
    c.probe_hidden = 256
    # Trajectory curvature: the paper's grid of 10 rotation angles in [0, 45 deg] (FD spacing 5 deg).
    c.curvature_images = 16
    c.curvature_angles = 10
    c.curvature_max_angle_deg = 45.0
    # FD convergence study at one generic angle, spacings h (degrees) shrinking to where FD must agree.
    c.convergence_angle_deg = 21.3
    c.convergence_images = 8
    c.convergence_spacings_deg = (5.0, 1.0, 0.2, 0.04, 0.008, 0.0016, 0.00032, 0.000064)
    # Orbit geometry: classes x images x rotations in [0, orbit_max_angle_deg].
    c.orbit_classes = 5
    c.orbit_images = 3
    c.orbit_steps = 12
    c.orbit_max_angle_deg = 45.0
    # Metric degeneracy |J_h v|/|v| along augmentation tangents at these parameter values (rotation: a
    # generic angle, since at 0 every bilinear sample sits on a pixel, where interpolation has a kink).
    c.degeneracy_images = 64
    c.tangent_rotation_deg = 10.0
    c.tangent_hue = 0.0
    c.tangent_blur_sigma = 1.0
    c.tangent_blur_radius = 4
    # Verdict rule (experiments/guillotine.py: verdict).
    c.probe_margin = 0.02  # rotation accuracy on h(z) must be below z by this much (mean of lin/MLP)
    c.min_backbone_rotation_acc = 0.30  # premise: z carries rotation information (chance = 0.25)
    c.min_effective_rank = 2.0  # premise: z is not collapsed (RankMe effective rank)
    if variant == "tiny":
        c.image_size = 8
        c.n_train, c.n_test = 256, 128
        c.widths = (4, 8)
        c.head_hidden, c.head_out = 16, 8
        c.depths = (2,)  # the ablation loop runs with the main depth only (test time)
        c.batch_size, c.steps, c.steps_per_call, c.unroll = 32, 3, 1, 1
        c.augment.jitter_prob = 0.0  # crop, flip, grayscale only: seconds less to compile
        c.probe_train_images, c.probe_test_images = 96, 64
        c.probe_epochs, c.probe_hidden = 2, 16
        c.curvature_images = 2
        c.convergence_images = 2
        c.convergence_spacings_deg = (5.0, 0.04, 0.00032)
        c.orbit_images, c.orbit_steps = 2, 6
        c.degeneracy_images = 8
        c.tangent_blur_radius = 2
    elif variant == "smoke":
        pass
    elif variant == "paper":
        c.dataset = "cifar10"
        c.image_size = 32
        c.n_train, c.n_test = 50000, 10000
        c.rotation_probe_classes = None
        c.backbone = "resnet18_cifar"
        c.widths = ()
        c.head_hidden, c.head_out = 2048, 128
        c.batch_size = 256
        c.steps = 50 * (50000 // 256)  # 50 epochs
        c.steps_per_call, c.unroll = 50000 // 256, 1
        c.probe_train_images, c.probe_test_images = 50000, 10000
        c.probe_epochs, c.probe_hidden = 5, 512
        c.curvature_images = 100
        c.convergence_images = 32
        c.degeneracy_images = 256
        c.tangent_blur_radius = 8
        c.expected_runtime = ("not run on an accelerator; estimated 3 SimCLR trainings (head depths 1/2/3) of "
                              "50 epochs of ResNet-18 on CIFAR-10 at about 30-60 min each on one modern GPU, "
                              "plus about 10 min of probes and float64 curvature")
    else:
        raise ValueError(f"unknown variant {variant!r}; expected 'tiny', 'smoke' or 'paper'")
    return c
