"""Config: experiment 9, orbit geometry of released vision SSL checkpoints, backbone vs their released heads.

Checkpoints (``ssl_geometry.pretrained.CHECKPOINTS``) are looked up in ``model.checkpoint_dir``
(default: ``$SSL_GEOMETRY_CHECKPOINTS``, else ``~/.cache/ssl_geometry/checkpoints``) as the official
file (``<dir>/<file>`` or ``<dir>/<name>/<file>``) or as our converted ``<dir>/<name>.safetensors``
(``ssl_geometry.pretrained.save_converted``). An absent checkpoint is reported as absent; when
``control.enabled`` is on, the same pipeline runs on the randomly initialised architecture + head (a
labelled pipeline control, never a checkpoint result), in place of an absent checkpoint or next to a
present one as its untrained baseline. No checkpoint can be downloaded in this environment.

Orbits (the paper's ``pretrained.ipynb``): rotation [0, 45 deg], hue [-0.4, 0.4]
(turns), saturation [0, 2], Gaussian blur sigma [0.1, 3] (pixels at ``image_size``),
``orbit_steps`` steps each, on CIFAR-10 test images resized to ``image_size`` (the embedded "shapes"
set when CIFAR-10 is not prepared for tfds) and ImageNet-normalised.

Sec. 5 (the registry's ``sec5-metric-degeneracy``), per present checkpoint: the training
augmentations ``analysis.trained_augmentations`` against the random, between and data controls
(``analysis.control_directions`` per orbit point) and against the untrained head (a random
initialisation of the release's own head architecture, on the checkpoint's z); rotation
(``analysis.negative``) is the negative control; the orbits of the training augmentations give the
paper-way orbit compression. The pipeline controls (random backbone + head, ``control``) are never
decided.
"""

import os

import ml_collections

from experiments import configs

_ALL = ["dino_vits16", "dino_resnet50", "vicreg_resnet50", "barlowtwins_resnet50"]


def default_checkpoint_dir() -> str:
    """``$SSL_GEOMETRY_CHECKPOINTS`` if set, else ``~/.cache/ssl_geometry/checkpoints``."""
    return os.environ.get("SSL_GEOMETRY_CHECKPOINTS") or os.path.expanduser("~/.cache/ssl_geometry/checkpoints")


def base() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(
        {
            "seed": 0,
            "model": {
                "checkpoint_dir": default_checkpoint_dir(),
                "checkpoints": list(_ALL),
                "dino_which": "teacher",  # DINO evaluates the EMA teacher
                "barlowtwins_loss_bn": False,
            },  # True appends the loss's BatchNorm1d(affine=False) to the head
            "data": {
                "dataset": "cifar10",
                "split": "test",
                "fallback_dataset": "shapes",
                "data_dir": "",  # tfds data_dir; "" = tfds's default; reproduce --data-dir sets it
                "num_classes": 10,
                "images_per_class": 5,
                "image_size": 224,
            },  # 10 x 5 = the paper's 50 images
            "analysis": {
                "orbits": {"rotation": [0.0, 45.0], "hue": [-0.4, 0.4], "saturation": [0.0, 2.0], "blur": [0.1, 3.0]},
                "orbit_steps": 12,
                # The four releases train with colour jitter (hue, saturation) and Gaussian blur, not with rotation:
                # Sec. 5's premise (a head trained for invariance to the transformation) holds only for these.
                "trained_augmentations": ["hue", "saturation", "blur"],
                # The negative control, fixed before any run: rotation is not in the releases' training views.
                "negative": ["rotation"],
                "batch_size": 32,  # backbone chunk (one compiled shape)
                "control_directions": 8,  # directions per orbit point of each Sec. 5 control (random, between, data)
                "metric_points": 4,
                "lanczos_k": 4,
                "lanczos_steps": 400,  # pullback spectrum (capped at d)
                "max_dense_jacobian": 2**24,  # entries of the stacked Jacobians for the dense eigh cross-check
            },
            "control": {
                "enabled": True,
                "checkpoints": list(_ALL),
                "image_size": 224,
                "num_classes": 10,
                "images_per_class": 5,
                "orbit_steps": 12,
                # Head widths of the control (the releases': DINO 2048-2048-256 -> 65536, VICReg / Barlow Twins
                # 8192-8192-8192); real checkpoints always use their own widths.
                "dino": {"hidden": 2048, "bottleneck": 256, "out": 65536},
                "projector": [8192, 8192, 8192],
            },
            "expected_runtime": (
                "not run on an accelerator yet; estimated a few minutes per checkpoint on one GPU (600 "
                "orbit images at 224 px per augmentation through ResNet-50 / ViT-S/16 with forward-mode "
                "tangents, float64 head geometry)"
            ),
        }
    )


VARIANTS = {
    "tiny": {
        "data.num_classes": 2,
        "data.images_per_class": 1,
        "data.image_size": 32,
        "analysis.orbit_steps": 3,
        "analysis.batch_size": 8,
        "analysis.control_directions": 2,
        "analysis.metric_points": 2,
        "analysis.lanczos_k": 2,
        "analysis.lanczos_steps": 40,
        "control.image_size": 32,
        "control.num_classes": 2,
        "control.images_per_class": 1,
        "control.orbit_steps": 3,
        # Test budget (40 s CPU): the ViT control only; smoke runs all four.
        "control.checkpoints": ["dino_vits16"],
        "control.dino": {"hidden": 32, "bottleneck": 16, "out": 64},
        "control.projector": [32, 32, 32],
        "expected_runtime": "about 15-30 s of CPU time",
    },
    "smoke": {
        "data.num_classes": 2,
        "data.images_per_class": 2,
        "data.image_size": 64,
        "analysis.orbit_steps": 5,
        "analysis.batch_size": 20,
        "analysis.control_directions": 4,
        "analysis.metric_points": 2,
        "analysis.lanczos_k": 3,
        "analysis.lanczos_steps": 200,
        "control.image_size": 64,
        "control.num_classes": 2,
        "control.images_per_class": 2,
        "control.orbit_steps": 5,
        "control.dino": {"hidden": 256, "bottleneck": 64, "out": 1024},
        "control.projector": [512, 512, 512],
        "expected_runtime": (
            "about 2 min of CPU time with the four controls (measured: 114 s user CPU, 190 s "
            "wall on a shared 2-core machine)"
        ),
    },
    "paper": {},
}


def get_config(arg=None) -> ml_collections.ConfigDict:
    return configs.build(base(), VARIANTS, arg)
