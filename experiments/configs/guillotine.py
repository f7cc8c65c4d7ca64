"""Config: experiment 6, the guillotine (Sec. 5) -- probes, trajectory curvature, orbits, metric degeneracy.

A backbone + ReLU/BN MLP head is trained with a SimCLR loss (tau 0.1, Adam 1e-3; ``objective``) by the
one run loop, ``ssl_geometry.trainer.train`` (what ``python -m ssl_geometry.train`` runs), on the
guillotine's own trainer config ``experiments.guillotine.training.trainer_config``
(``augment.name = "simclr_custom"``, an ``ssl_geometry.augment.AugmentConfig`` with the authors'
views); the trained pair is then measured (``experiments/guillotine/``). Views are the authors' guillotine
recipe (``experiments.py: run_guillotine_experiment``) in every variant: RandomResizedCrop(32,
scale (0.08, 1)), flip, RandomRotation(45), ColorJitter(0.4, 0.4, 0.4, 0.1) with p 0.8; no
grayscale, no blur.

Variants: ``tiny`` (tests, seconds), ``smoke`` (default; the embedded ``shapes`` set at 16 px on
CPU, minutes), ``paper`` (ResNet-18, CIFAR-10), ``paper_vit_tiny`` (ViT-T, CIFAR-10),
``paper_cifar100`` (ResNet-18, CIFAR-100), each with the depth 1/2/3 ablation; tfds data from
``data.data_dir`` (``reproduce --data-dir``). Under ``dry_run`` a variant runs end to end with
``dry_run_examples`` generated images (tfds mock data for tfds sets), ``dry_run_steps`` per training
phase (SimCLR of every depth at the smaller of ``train.dry_run_batches`` scaled to its batch; probes one epoch)
and every analysis step on a few images, then times training and analysis again at a second size and
projects both apart to the full variant (``experiments/guillotine/dry_run.py``).

Sec. 5 controls, fixed here before any run: every training augmentation (``trained_augmentations``
of the views: rotation, hue) is compared with the registry's controls (random, between, data, each
with ``analysis.control_directions`` directions per image; the untrained head on the same z), and
``analysis.negative`` = blur is the negative control: the views have no blur (``augment.blur_prob``
= 0), so a blur tangent that passes too means the test does not separate trained invariances.

Deviations of the ``paper`` variants from the authors' code (``experiments.py``:
``run_guillotine_experiment``, ``run_curvature_experiment``, ``run_orbit_visualization_experiment``;
``head_depth_ablations.py``), with reasons:

* RandomRotation uses bilinear resampling (``augment.rotate``), torchvision's default is nearest:
  the tangent analyses differentiate the same rotation, which must be differentiable. The
  curvature and orbit sweeps rotate with it too.
* The colour jitter's order of the four factors is random per view (torchvision's ColorJitter
  also permutes them); hue is in HSV as torchvision's.
* The loss is the authors' one-directional cross-entropy ``CE(z1 z2^T / 0.1)`` (n - 1 cross-view
  negatives per row; ``objective.name = "simclr_one_way"``) in the paper variants; the ``tiny`` and
  ``smoke`` variants train with the symmetric NT-Xent over the 2n views (2n - 2 negatives, the
  library's ``"simclr"``).
* The head is the authors' ``ProjectionHead(relu, use_bn=True)``: Linear(512, 2048, bias-free)-BN-ReLU-
  Linear(2048, 2048, bias-free)-BN, trained at batch 256 for 50 epochs. The depth ablation trains
  depths 1/2/3 separately with the authors' ``FlexibleProjectionHead(activation='swish', use_bn=True)``
  (BN after every Linear, bias-free) at the authors' ``ExperimentConfig.batch_size`` 512 for 50
  epochs (``ablation``); the main (ReLU) run is not reused for it.
* ViT-Tiny (``paper_vit_tiny``): the library's ``vit_tiny`` (patch 4, width 192, depth 3, 3 heads)
  takes z after a final LayerNorm with LayerNorm eps 1e-6 (DINO's layout); the authors'
  ``nn.TransformerEncoder(norm_first=True)`` has no final norm and eps 1e-5.
* Rotation probes: as the authors, each image once under one rotation ``k * 90`` degrees with ``k``
  drawn uniformly per image (``probes.rotations = "random"``), on the train split (train) and the
  test split (test), a linear probe and a 2-layer ReLU MLP (hidden 256 on z, 512 on h(z)), Adam
  1e-3, batch 256, 5 epochs. The library's probes standardise the features with the training mean
  and std (the authors' do not), and the depth ablation also reports the MLP probe (the authors'
  runs only the linear one). Class probes (linear, MLP) are the project's addition.
* Orbits: the authors' choice of classes (``linspace(0, num_classes - 1, 5)``) and 3 images per
  class drawn without replacement, here from ``default_rng(seed)`` (the authors' ``random.sample``).
* Training is the trainer's run loop (``ssl_geometry.trainer.train``) with its data feed, which
  renders the smoke variant's ``shapes`` set with the nuisance rotations ``data.shapes_max_angle_deg``
  (the trainer's ``data.shapes_max_angle_deg``) from ``seed``. The step includes the trainer's online
  linear probe on ``stop_gradient`` of the backbone features (its own Adam): it cannot change the
  backbone or head. Each training run checkpoints every epoch (``train.checkpoint_every``) and resumes
  after an interruption (``reproduce`` puts each run's workdir under ``DIR/<run>/checkpoints``).
* Initialisation: PyTorch's default initialisers in ``ssl_geometry.backbones``/``heads`` with a JAX
  RNG (``PRNGKey(seed)``, as every run of the trainer), and the trainer's per-epoch data order
  ``trainer.batch_indices``: same distributions, not the same draws (the same holds for the probes'
  rotation draws, the orbit images and every seed).
* Reproducibility and seeds (the project's; the authors train once): a run is bitwise reproducible run to run
  on one machine (the data order, views, initialisation and probe draws are functions of ``seed``; tested in
  ``tests/test_experiments_guillotine.py``), but not from machine to machine: XLA's CPU code depends on the
  cores the process may use, so the same code with another core count trains another float32 run (measured on
  the smoke main run, x64 off: final loss 3.0994 on 2 cores, 3.0129 restricted to 1 core by ``taskset``, either
  way also with ``XLA_FLAGS=--xla_cpu_multi_thread_eigen=false``; ``jax_enable_x64``, which ``reproduce`` turns
  on, changes it too: 3.0224 on 2 cores), and the probe gap moves with it. The rule of
  ``guillotine-probe-gap`` therefore resamples training seeds: ``probes.gap_seeds`` runs of the main head (3 in
  ``smoke``, 2 in ``tiny``, 1 in the paper variants), each probed on z, h(z) and h_0(z).
* Curvature and orbits are computed twice: the paper's way (L2-normalised, undivided second
  differences on 10 angles in [0, 45] deg; orbits of 12 rotations 0..330 deg with the head applied
  to the *normalised* z, as ``run_orbit_visualization_experiment`` does) and the project's way
  (exact ``|r''|`` by nested jvp; orbits over ``analysis.orbit_max_angle_deg``), named apart. The
  authors compute curvature on 100 shuffled test images, here the first ``analysis.curvature_images``.
* Added analyses the authors' code does not run (reported, never replacing theirs): the metric
  degeneracy with its controls and the untrained head's probes and orbits.
"""

import ml_collections

from experiments import configs


def base() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(
        {
            "seed": 0,
            "data": {
                # "shapes" is rendered with nuisance rotations within +-shapes_max_angle_deg so that the probe's
                # 90-degree rotations are visible (CIFAR images have an upright orientation).
                "name": "shapes",
                "image_size": 16,
                "shapes_max_angle_deg": 15.0,
                "n_train": 4000,
                "n_test": 1000,
                "data_dir": "",  # tfds data_dir ("" = tfds default); reproduce --data-dir sets it
                # Rotation probe on shape classes without 90-degree symmetry; None: all classes.
                "rotation_probe_classes": ["triangle", "ell", "half_disk"],
                "dry_run_examples": 64,  # images per split under dry_run (tfds mock data for tfds sets)
            },
            "model": {
                "backbone": "small_cnn",  # small_cnn | resnet18_cifar | vit_tiny
                "widths": (16, 32, 64),  # small_cnn only
                "head_depth": 2,  # affine layers of the main run's projector (2: Linear-BN-ReLU-Linear)
                "head_activation": "relu",  # the authors' guillotine head (ProjectionHead(relu, use_bn=True))
                "head_hidden": 128,
                "head_out": 32,
                # smoke: biases, no BN on the output; the paper variants: the authors' (BN on the output, no biases)
                "head_final_bn": False,
                "head_bias": True,
            },
            # The SimCLR loss: "simclr" (symmetric NT-Xent, 2n - 2 negatives) or "simclr_one_way" (the authors'
            # CE(z1 z2^T / tau), n - 1 cross-view negatives; the paper variants).
            "objective": {"name": "simclr"},
            "ablation": {  # head-depth ablation: one run per depth with the `activation` head
                # smoke: ReLU, so the main run is reused at its depth; the paper variants: the authors' Swish
                "depths": (1, 2, 3),
                "activation": "relu",
                # 0: the main run's (train.batch_size, train.steps); the paper variants: the authors' 512, 50 epochs
                "batch_size": 0,
                "steps": 0,
            },
            "augment": {  # the authors' guillotine views (module docstring); rotation_deg 0 = no rotation
                "crop_scale": (0.08, 1.0),
                "flip_prob": 0.5,
                "rotation_deg": 45.0,
                "jitter": (0.4, 0.4, 0.4, 0.1),
                "jitter_prob": 0.8,
                "jitter_random_order": True,
                "gray_prob": 0.0,
                "blur_prob": 0.0,
            },
            "train": {
                "temperature": 0.1,
                "lr": 1e-3,
                "batch_size": 128,
                "steps": 300,
                # Under dry_run the main run trains at the smaller batch and, only timed, at the larger; every other run
                # at the same fraction of its own batch (experiments/guillotine/dry_run.py).
                "dry_run_batches": (8, 16),
                "dry_run_steps": 4,  # the trainer times the steps after the first
                # Checkpoints of the run loop every this many steps and at the end, in the workdir
                # checkpoint_dir/depth<d>_<activation>; a rerun resumes the same run. 0: a temporary workdir,
                # nothing kept. reproduce sets checkpoint_dir to DIR/<run>/checkpoints.
                "checkpoint_every": 0,
                "checkpoint_dir": "",
            },
            # Rotation probes: "random" = one rotation k * 90 deg per image, k drawn uniformly (the authors'); "all":
            # each image under all four. MLP probe widths on z (hidden) and on h(z) (hidden_head).
            # gap_seeds: training seeds of the probe gap's interval (seed, seed + 1, ...): the main run, then the main run
            # retrained at each further seed (own data rendering, init, order, probe draws) for the rotation probes of
            # z, h(z) and h_0(z) only. A run is bitwise reproducible on one machine, but its float32 training depends on
            # the CPU thread count (module docstring), so the gap's interval resamples seeds.
            "probes": {
                "train_images": 2000,
                "test_images": 1000,
                "epochs": 20,
                "rotations": "random",
                "hidden": 256,
                "hidden_head": 256,
                "gap_seeds": 3,
            },
            "analysis": {
                # Trajectory curvature on the paper's grid: 10 rotation angles in [0, 45 deg] (spacing 5 deg).
                "curvature_images": 16,
                "curvature_angles": 10,
                "curvature_max_angle_deg": 45.0,
                # FD convergence at one generic angle, spacings (deg) shrinking to where FD must agree.
                "convergence_angle_deg": 21.3,
                "convergence_images": 8,
                "convergence_spacings_deg": (5.0, 1.0, 0.2, 0.04, 0.008, 0.0016, 0.00032, 0.000064),
                # Orbits: classes x images x steps; the project's arc [0, orbit_max_angle_deg] and the paper's
                # full orbit (paper_orbit_steps rotations 0..330 deg).
                "orbit_classes": 5,
                "orbit_images": 3,
                "orbit_steps": 12,
                "orbit_max_angle_deg": 45.0,
                "paper_orbit_steps": 12,
                # Metric degeneracy |J_h v|/|v| at these augmentation parameters (rotation at a generic angle:
                # at 0 every bilinear sample sits on a pixel, where interpolation has a kink).
                "degeneracy_images": 64,
                "tangent_rotation_deg": 10.0,
                "tangent_hue": 0.0,
                "tangent_blur_sigma": 1.0,
                "tangent_blur_radius": 4,
                # Directions per image of each Sec. 5 control (random, between, data); the gain is their RMS.
                "control_directions": 8,
                # The negative control: analysed augmentations the training views do not contain (must not pass).
                "negative": ("blur",),
            },
            "expected_runtime": "smoke: minutes on 2 CPU cores",
        }
    )


_PAPER = {
    "data.name": "cifar10",
    "data.image_size": 32,
    "data.n_train": 50000,
    "data.n_test": 10000,
    "data.rotation_probe_classes": None,
    "model.backbone": "resnet18_cifar",
    "model.widths": (),
    "model.head_hidden": 2048,
    "model.head_out": 2048,
    "model.head_final_bn": True,
    "model.head_bias": False,
    "objective.name": "simclr_one_way",
    "ablation.activation": "swish",
    "ablation.batch_size": 512,
    "ablation.steps": 50 * (50000 // 512),
    "train.batch_size": 256,
    "train.steps": 50 * (50000 // 256),
    "train.checkpoint_every": 50000 // 256,  # an epoch
    "probes.train_images": 50000,
    "probes.test_images": 10000,
    "probes.epochs": 5,
    "probes.hidden": 256,
    "probes.hidden_head": 512,
    "probes.gap_seeds": 1,  # one 50-epoch run per head; the interval is over test images
    "analysis.curvature_images": 100,
    "analysis.convergence_images": 32,
    "analysis.degeneracy_images": 256,
    "analysis.tangent_blur_radius": 8,
    "expected_runtime": (
        "not run on an accelerator; estimated 4 SimCLR trainings (the main ReLU head, the Swish "
        "ablation heads of depths 1/2/3) of 50 epochs at about 30-60 min each on one modern GPU, plus "
        "about 10 min of probes and float64 curvature; the dry run prints the projection for the "
        "device it runs on"
    ),
}

VARIANTS = {
    "tiny": {
        "data.image_size": 8,
        "data.n_train": 256,
        "data.n_test": 128,
        "model.widths": (4, 8),
        "model.head_hidden": 16,
        "model.head_out": 8,
        "ablation.depths": (2,),
        "train.batch_size": 32,
        "train.steps": 3,
        "augment.jitter_prob": 0.0,
        "probes.train_images": 96,
        "probes.test_images": 64,
        "probes.epochs": 2,
        "probes.hidden": 16,
        "probes.hidden_head": 16,
        "probes.gap_seeds": 2,
        "analysis.control_directions": 2,
        "analysis.curvature_images": 2,
        "analysis.convergence_images": 2,
        "analysis.convergence_spacings_deg": (5.0, 0.04, 0.00032),
        "analysis.orbit_images": 2,
        "analysis.orbit_steps": 6,
        "analysis.paper_orbit_steps": 6,
        "analysis.degeneracy_images": 8,
        "analysis.tangent_blur_radius": 2,
        "expected_runtime": "about a minute on 2 shared CPU cores",
    },
    "smoke": {},
    "paper": _PAPER,  # the base's views are the authors'
    "paper_vit_tiny": {**_PAPER, "model.backbone": "vit_tiny"},
    "paper_cifar100": {**_PAPER, "data.name": "cifar100"},
}


def get_config(arg=None) -> ml_collections.ConfigDict:
    return configs.build(base(), VARIANTS, arg)
