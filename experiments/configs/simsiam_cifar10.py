"""The paper's SimSiam collapse-escape setting on CIFAR-10 (DESIGN.md section 3), for an accelerator.

ResNet-18 with the CIFAR stem; projector 512 -> 2048 -> 2048 (bias-free, BatchNorm on both
layers) and predictor 2048 -> 512 -> 2048 (BatchNorm on the hidden layer), one activation for
both; SimSiam negative cosine with stop-gradient; SGD momentum 0.9, lr 0.05, batch 512, 50
epochs; RandomResizedCrop(32, scale 0.2-1) + horizontal flip.

    python -m ssl_geometry.train --config experiments/configs/simsiam_cifar10.py:swish \\
        --workdir runs/simsiam_swish [--config.model.projector.scale=0.1]   # pseudo-collapse

``get_config(arg)``: ``arg`` is the head activation (``relu`` default, ``linear``, ``gelu``,
``swish``). Pseudo-collapse (projector weights x 0.1): ``--config.model.projector.scale=0.1``;
BatchNorm off: ``--config.model.projector.batch_norm=False --config.model.projector.final_batch_norm=False
--config.model.predictor.batch_norm=False``. CIFAR-10 must be prepared for tfds (see ssl_geometry.data).
Weight decay 5e-4 is SimSiam's CIFAR value (Chen & He 2021); DESIGN.md does not list one.
"""
import ml_collections

_EPOCHS = 50
_BATCH = 512
_TRAIN_SIZE = 50_000


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    act = arg or "relu"
    steps_per_epoch = _TRAIN_SIZE // _BATCH
    c = ml_collections.ConfigDict()
    c.seed = 0
    c.dtype = "float32"
    c.data = ml_collections.ConfigDict({"name": "cifar10", "image_size": 32, "batch_size": _BATCH, "data_dir": "",
                                        "num_train": 0, "num_test": 0,
                                        "stream": False, "shuffle_buffer": 10_000})
    c.augment = ml_collections.ConfigDict({"name": "simsiam_cifar"})
    c.model = ml_collections.ConfigDict({
        "backbone": "resnet18_cifar",
        "backbone_kwargs": {},
        "projector": {"hidden": (2048,), "out_dim": 2048, "activation": act, "batch_norm": True,
                      "final_batch_norm": True, "bias": False, "scale": 1.0},
        "predictor": {"hidden": (512,), "out_dim": 2048, "activation": act, "batch_norm": True,
                      "final_batch_norm": False, "bias": False, "scale": 1.0},
    })
    c.objective = ml_collections.ConfigDict({"name": "simsiam", "temperature": 0.1, "ema": 0.99})
    c.optimizer = ml_collections.ConfigDict({
        "name": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4, "nesterov": False,
        "schedule": "cosine", "warmup_steps": 0, "lr_batch_scaling": False, "probe_lr": 1e-3,
        "b1": 0.9, "b2": 0.999,
    })
    c.train = ml_collections.ConfigDict({
        "steps": _EPOCHS * steps_per_epoch, "log_every": 20, "metrics_every": steps_per_epoch,
        "checkpoint_every": 5 * steps_per_epoch, "keep_checkpoints": 3, "progress": True, "tensorboard": False,
        "stop_after": 0, "allow_config_change": False,
    })
    c.eval = ml_collections.ConfigDict({"max_train": 50_000, "max_test": 10_000, "knn_k": 200, "ridge_l2": 1e-3,
                                        "rotation": True, "rotation_epochs": 5, "metrics_images": 2048})
    c.mesh = ml_collections.ConfigDict({"data": -1, "model": 1, "min_model_dim": 1024})
    c.distributed = ml_collections.ConfigDict({"initialize": False, "coordinator_address": "",
                                               "num_processes": 0, "process_id": -1,
                                               "cpu_collectives": "gloo"})
    c.expected_runtime = "about 1 h on one A100/H100-class GPU (50 epochs x 97 steps at batch 512); not measured here"
    return c
