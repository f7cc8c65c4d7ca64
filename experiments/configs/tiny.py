"""Hello-world SSL run: SimSiam on the embedded 8x8 digits, a small CNN, 60 steps (< 1 min on 2 CPU cores).

python -m ssl_geometry.train --config experiments/configs/tiny.py --workdir /tmp/tiny
"""

import ml_collections

#: The variants ``get_config`` accepts after ``:`` on the command line (``python -m ssl_geometry.train`` refuses others).
VARIANTS = ()


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """The tiny config; ``arg`` is unused (kept for the ``path.py:arg`` syntax)."""
    del arg
    c = ml_collections.ConfigDict()
    c.seed = 0
    c.dtype = "float32"
    c.data = ml_collections.ConfigDict(
        {
            "name": "digits",
            "image_size": 8,
            "batch_size": 64,
            "data_dir": "",
            "num_train": 0,
            "num_test": 0,
            # stream: read a tfds set with tf.data (per-host shards) instead of memory
            "stream": False,
            "shuffle_buffer": 10_000,
        }
    )
    c.augment = ml_collections.ConfigDict({"name": "crop_flip"})
    c.model = ml_collections.ConfigDict(
        {
            "backbone": "small_cnn",
            "backbone_kwargs": {"widths": (16, 32), "batch_norm": True},
            # SimSiam projector d -> w -> w (BN on both, bias-free) and predictor w -> w/4 -> w.
            "projector": {
                "hidden": (64,),
                "out_dim": 64,
                "activation": "relu",
                "batch_norm": True,
                "final_batch_norm": True,
                "bias": False,
                "scale": 1.0,
            },
            "predictor": {
                "hidden": (16,),
                "out_dim": 64,
                "activation": "relu",
                "batch_norm": True,
                "final_batch_norm": False,
                "bias": False,
                "scale": 1.0,
            },
        }
    )
    # The constants of every objective (make_objective's defaults), so any can be set from the command line.
    c.objective = ml_collections.ConfigDict(
        {
            "name": "simsiam",
            "temperature": 0.1,
            "ema": 0.99,
            "queue_size": 4096,
            "barlow_lambda": 5e-3,
            "vicreg_coeffs": (25.0, 25.0, 1.0),
            "dino_temps": (0.1, 0.04),
            "dino_center_momentum": 0.9,
        }
    )
    c.optimizer = ml_collections.ConfigDict(
        {
            "name": "sgd",
            "lr": 0.05,
            "momentum": 0.9,
            "weight_decay": 1e-4,
            "nesterov": False,
            "schedule": "cosine",
            "warmup_steps": 0,
            "lr_batch_scaling": False,
            "probe_lr": 1e-2,
            "b1": 0.9,
            "b2": 0.999,
        }
    )
    c.train = ml_collections.ConfigDict(
        {
            "steps": 60,
            "log_every": 10,
            "metrics_every": 30,
            "checkpoint_every": 20,
            "keep_checkpoints": 2,
            "progress": True,
            "tensorboard": False,
            # stop_after: end this invocation at that step (checkpointed; rerun to continue), 0: off.
            # allow_config_change: resume under changed trajectory fields (state shapes must match).
            "stop_after": 0,
            "allow_config_change": False,
        }
    )
    c.eval = ml_collections.ConfigDict(
        {
            "max_train": 1437,
            "max_test": 360,
            "knn_k": 20,
            "ridge_l2": 1e-3,
            "rotation": False,
            "rotation_epochs": 5,
            "metrics_images": 360,
        }
    )
    c.mesh = ml_collections.ConfigDict({"data": -1, "model": 1, "min_model_dim": 1024})
    c.distributed = ml_collections.ConfigDict(
        {
            "initialize": False,
            "coordinator_address": "",
            "num_processes": 0,
            "process_id": -1,
            "cpu_collectives": "gloo",
            "timeout_s": 300,
        }
    )
    return c
