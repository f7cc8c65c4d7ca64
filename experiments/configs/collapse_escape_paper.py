"""Config: experiment 4b, the authors' collapse-escape runs (``experiments.py``, Experiment 1).

SimSiam through the one trainer (:mod:`experiments.paper_simsiam`, recipe
``experiments/configs/simsiam_cifar10.py``): ResNet-18 (CIFAR stem) on CIFAR-10, projector
512 -> 2048 -> 2048 and predictor 2048 -> 512 -> 2048, bias-free, one activation for both, BatchNorm
on every layer of both when ``bn`` (the linear head never has BN), pseudo-collapse (projector
weights x 0.1) in every run, SGD momentum 0.9, no weight decay, constant lr, batch 512 with
``drop_last``, 50 epochs, 3 seeds; RandomResizedCrop(32, scale 0.2-1) + flip. Runs: the authors'
14 ``(activation, bn, lr)`` triples (``base`` 0.05, ``large`` 0.5, ``small`` 0.005). Tracked at every
step and averaged per epoch, as the authors do: the std of the L2-normalised projector outputs, their
clamped covariance condition number, the relative update sizes ``lr |grad| / |theta|`` of projector
and backbone; in addition the same std of the backbone features (z-collapse) and the trainer's
actual ``|Delta theta| / |theta|``.

Variants: ``paper`` (the authors' recipe, for an accelerator, ``data.data_dir`` = prepared tfds
CIFAR-10), ``smoke`` (default; the same pipeline on the embedded digits with a small CNN, a few
runs; CPU minutes) and ``tiny`` (tests). Under ``dry_run`` the first run of each head code path
(linear; activation without BN; activation with BN) runs 2 steps at batch ``dry.batch_size`` on
mock CIFAR-10, and the full variant's wall time is projected from the measured step time of each
run's path.

``paper`` deviations from the authors' code, with their reasons:

* the trainer's deviations (online probe on stop-gradient features, synchronised BN, RNG and data
  order, JAX augmentation), listed in ``experiments/configs/simsiam_cifar10.py``;
* the tracking recomputes the step's forward and gradient on the same views before the update (the
  trainer's step does not return per-module gradient norms), so a tracked step costs about two
  training steps; the numbers are those of the authors' definitions;
* a run whose loss becomes non-finite stops there and is reported as diverged (the authors' loop
  would carry NaN to the end of the run).
"""
from __future__ import annotations

import ml_collections

from experiments.configs import build

#: The authors' ``activations_to_test`` in ``experiments.py`` (activation, use_bn, lr name).
PAPER_RUNS = [
    ["linear", False, "base"],
    ["swish", False, "base"], ["swish", True, "base"], ["swish", False, "large"], ["swish", False, "small"],
    ["swish", True, "large"], ["swish", True, "small"],
    ["gelu", False, "base"],
    ["relu", False, "base"], ["relu", True, "base"], ["relu", False, "large"], ["relu", False, "small"],
    ["relu", True, "large"], ["relu", True, "small"],
]


def base() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict({
        "seed": 0,
        "runs": [["linear", False, "base"], ["swish", False, "base"], ["relu", False, "base"],
                 ["relu", True, "base"], ["relu", False, "large"]],
        "lrs": {"base": 0.05, "large": 0.5, "small": 0.005},
        "seeds": 1,
        "data": {"name": "digits", "data_dir": "", "image_size": 16, "num_train": 0},
        "model": {"backbone": "small_cnn", "backbone_kwargs": {"widths": (8, 16), "activation": "relu"},
                  "hidden": 64, "out_dim": 64, "pred_hidden": 16, "collapse_scale": 0.1},
        "train": {"batch_size": 64, "epochs": 4, "steps_per_epoch": 10},  # 0: full epochs
        # Escape: std of L2-normalised projector outputs > escape_fraction / sqrt(out_dim) at some epoch
        # (1/sqrt(k): directions uniform on the sphere; experiment 4's criterion).
        "analysis": {"escape_fraction": 0.5},
        "verdict": {"min_smooth_escape": 0.5},
        "dry": {"batch_size": 8, "examples": 32, "full_examples": 0},  # full_examples 0: len(data)
    })


VARIANTS = {
    "tiny": {"runs": [["linear", False, "base"], ["swish", False, "base"]], "data.image_size": 8,
             "model.backbone_kwargs": {"widths": (4, 8), "activation": "relu"}, "model.hidden": 8,
             "model.out_dim": 8, "model.pred_hidden": 4, "train.batch_size": 16, "train.epochs": 2,
             "train.steps_per_epoch": 3},
    "smoke": {},
    "paper": {"runs": PAPER_RUNS, "seeds": 3, "data.name": "cifar10", "data.image_size": 32,
              "model.backbone": "resnet18_cifar", "model.backbone_kwargs": {}, "model.hidden": 2048,
              "model.out_dim": 2048, "model.pred_hidden": 512, "train.batch_size": 512, "train.epochs": 50,
              "train.steps_per_epoch": 0, "dry.full_examples": 50_000},
}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    return build(base(), VARIANTS, arg)
