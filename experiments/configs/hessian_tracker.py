"""Config: experiment 5, the Hessian tracker (the authors' ``hessian_tracker.py``;
docs/theory.md, sections "The authors' experiments" and "tracker-power-iteration").

Each run trains SimSiam through the one trainer (:mod:`experiments.paper_simsiam`): backbone,
bias-free projector ``d -> hidden -> out_dim`` and predictor ``out_dim -> pred_hidden -> out_dim``
with no BatchNorm in either, SGD momentum 0.9 at a constant lr 0.05, no weight decay. Before the
update on each of the first ``analysis.tracker_batches`` batches of every epoch it takes
``H = hess_{z1} L`` at the backbone features ``z1`` of the batch's first view and estimates its
``lambda_min`` / ``lambda_max`` by the authors' 20-step shifted power iteration (float32) and by
converged float64 Lanczos (and, where ``analysis.exact_blocks``, exactly from the per-sample blocks).
Every step it records the authors' collapse statistics of the *backbone* features (std of the
L2-normalised ``cat(z1, z2)`` and the clamped condition number), averaged per epoch; their
Spearman correlation over epochs ``spearman_from_epoch..`` is the paper's 0.339 / 0.609 / 0.669.

Variants: ``tiny`` (tests, seconds), ``smoke`` (default; small CNN on the embedded digits, CPU
minutes), ``paper`` (the authors' recipe, for an accelerator, ``data.data_dir`` = prepared tfds CIFAR-10).

``paper`` deviations from the authors' code, with their reasons:

* ``lambda_min`` beside the power iteration: float64 Lanczos with full reorthogonalisation and true
  residuals (the point of the experiment), globally on the ``n d``-dimensional ``H`` and blockwise
  (:func:`ssl_geometry.curvature.blockwise_extreme_eigenvalues`: one Lanczos per ``(d, d)`` sample block,
  all advanced by one HVP, so each converges in at most ``d`` steps; the reference at paper size,
  where the extremes of 256 blocks cluster and the global Krylov space resolves them slowly);
  the per-sample exact blocks are off at paper size
  (``analysis.exact_blocks = False``: 512 HVPs and 256 dense 512x512 eigendecompositions per
  checkpoint, 1500 times; the converged Lanczos with its true-residual certificate is the reference
  there; set it True on a large accelerator for the independent check the smoke variant makes);
  the smoke and tiny variants compute all three, so the Lanczos references are checked against exact;
* the trainer's own deviations (online probe on stop-gradient features, RNG and data order,
  JAX augmentation), listed in ``experiments/configs/simsiam_cifar10.py``;
* the authors average ``lambda_min`` over the 5 tracked batches of an epoch; we keep every
  checkpoint (and report the per-epoch mean too).
"""

from __future__ import annotations

import ml_collections

from experiments.configs import build


def base() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(
        {
            "seed": 0,
            # (activation, init): the paper's three runs; "collapsed" = projector weights x 0.1.
            "runs": [["swish", "normal"], ["swish", "collapsed"], ["relu", "collapsed"]],
            "data": {"name": "digits", "data_dir": "", "image_size": 16, "num_train": 0},
            "model": {
                "backbone": "small_cnn",
                "backbone_kwargs": {"widths": (8, 16), "activation": "relu"},
                "hidden": 32,
                "out_dim": 32,
                "pred_hidden": 8,
                "collapse_scale": 0.1,
            },
            "train": {"lr": 0.05, "batch_size": 64, "epochs": 6, "steps_per_epoch": 20},  # 0: full epochs
            # The Lanczos references are certified by the registry's converged_residual (experiments/claims/).
            "analysis": {
                "tracker_batches": 2,
                "power_steps": 20,
                "lanczos_steps": 200,
                "lanczos_tol": 1e-10,
                "exact_blocks": True,
                "blockwise_lanczos": True,
                "block_lanczos_steps": 200,
                "spearman_from_epoch": 1,
            },
            # Under dry_run: the first run at each of these batches (empty: 1/8 and 1/4 of train.batch_size), one
            # epoch of `steps` steps (the trainer times those after the first), the first `tracker_batches` tracked
            # (the first compiles), on this many mock examples; the full variant's training images (0: len(data))
            # for the projection (experiments/hessian_tracker.py, _projection).
            "dry": {"batch_sizes": (), "steps": 4, "examples": 32, "tracker_batches": 2, "full_examples": 0},
        }
    )


VARIANTS = {
    "tiny": {
        "runs": [["swish", "collapsed"]],
        "data.image_size": 8,
        "model.backbone_kwargs": {"widths": (4, 8), "activation": "relu"},
        "model.hidden": 8,
        "model.out_dim": 8,
        "model.pred_hidden": 4,
        "train.batch_size": 16,
        "train.epochs": 3,
        "train.steps_per_epoch": 3,
        "analysis.lanczos_steps": 128,
        "analysis.spearman_from_epoch": 0,
    },
    "smoke": {},
    "paper": {
        "data.name": "cifar10",
        "data.image_size": 32,
        "model.backbone": "resnet18_cifar",
        "model.backbone_kwargs": {},
        "model.hidden": 2048,
        "model.out_dim": 2048,
        "model.pred_hidden": 512,
        "train.batch_size": 256,
        "train.epochs": 100,
        "train.steps_per_epoch": 0,
        "analysis.tracker_batches": 5,
        "analysis.lanczos_steps": 400,
        "analysis.exact_blocks": False,
        "analysis.block_lanczos_steps": 512,
        # 1/32 and 1/16 of the batch: at 1/8 and 1/4 (32, 64) the dry run's two checkpoints per batch
        # take several minutes each on a 2-core CPU (float64 Lanczos through the 2048-wide heads).
        "dry.batch_sizes": (8, 16),
        "dry.full_examples": 50_000,
    },
}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    return build(base(), VARIANTS, arg)
