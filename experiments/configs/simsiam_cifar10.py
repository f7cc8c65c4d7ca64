"""The paper's SimSiam collapse-escape setting on CIFAR-10, read from the authors' ``experiments.py``.

ResNet-18 with the CIFAR stem (3x3 stride-1 conv1, no max-pool, ``d = 512``); projector
``ProjectionHead(512, 2048, 2048)`` and predictor ``ProjectionHead(2048, 512, 2048)``: bias-free
``Linear -> BN -> act -> Linear -> BN`` (BatchNorm on the hidden *and* the output layer of both, the
predictor included), one activation for both; the ``linear`` head is ``Linear -> Linear`` with no
BatchNorm and no activation whatever ``use_bn`` says. SimSiam negative cosine with stop-gradient;
``optim.SGD(lr=0.05, momentum=0.9, weight_decay=0.0)`` at a constant learning rate (no schedule, no
warm-up, no batch scaling); batch 512 with ``drop_last`` (97 steps per epoch), 50 epochs;
``RandomResizedCrop(32, scale=(0.2, 1.0)) + RandomHorizontalFlip``, ``ToTensor`` (no normalisation).

    python -m ssl_geometry.train --config experiments/configs/simsiam_cifar10.py:swish \\
        --workdir runs/simsiam_swish --config.data.data_dir=DIR [--config.model.projector.scale=0.1]

``get_config(arg)``: ``arg`` is the head activation (``relu`` default, ``linear``, ``gelu``,
``swish``). Pseudo-collapse (the authors' collapse runs: projector weights x 0.1):
``--config.model.projector.scale=0.1``; BatchNorm off: ``--config.model.projector.batch_norm=False
--config.model.projector.final_batch_norm=False --config.model.predictor.batch_norm=False
--config.model.predictor.final_batch_norm=False``. CIFAR-10 must be prepared for tfds (see ssl_geometry.data).

Remaining deviations from the authors' code, with their reasons:

* the trainer adds an online linear probe on ``stop_gradient`` of the backbone features, trained by
  its own Adam: it cannot change the backbone or the heads (the trainer's monitor of the run);
* BatchNorm is the trainer's synchronised BatchNorm over the global batch (the authors ran one GPU,
  where the two coincide);
* initialisation: ``ssl_geometry.backbones``/``heads`` follow PyTorch's default initialisers, but
  the random draws differ (a different RNG), so runs match in distribution, not bit for bit;
* data order: the trainer's per-epoch permutation ``default_rng([seed, epoch])`` instead of a
  PyTorch ``DataLoader(shuffle=True)`` (same distribution of batches);
* the augmentation is :func:`ssl_geometry.augment.simsiam_cifar_augment` on device (same
  RandomResizedCrop scale/ratio ranges and flip probability; bilinear resampling in JAX).
"""

import ml_collections

_EPOCHS = 50
_BATCH = 512
_TRAIN_SIZE = 50_000

#: The head activations ``get_config`` accepts after ``:`` (``python -m ssl_geometry.train`` refuses others).
VARIANTS = ("relu", "linear", "gelu", "swish")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    act = arg or "relu"
    bn = act != "linear"  # the authors' linear head has no BatchNorm
    steps_per_epoch = _TRAIN_SIZE // _BATCH
    c = ml_collections.ConfigDict()
    c.seed = 0
    c.dtype = "float32"
    c.data = ml_collections.ConfigDict(
        {
            "name": "cifar10",
            "image_size": 32,
            "batch_size": _BATCH,
            "data_dir": "",
            "num_train": 0,
            "num_test": 0,
            "stream": False,
            "shuffle_buffer": 10_000,
        }
    )
    c.augment = ml_collections.ConfigDict({"name": "simsiam_cifar"})
    c.model = ml_collections.ConfigDict(
        {
            "backbone": "resnet18_cifar",
            "backbone_kwargs": {},
            "projector": {
                "hidden": (2048,),
                "out_dim": 2048,
                "activation": act,
                "batch_norm": bn,
                "final_batch_norm": bn,
                "bias": False,
                "scale": 1.0,
            },
            "predictor": {
                "hidden": (512,),
                "out_dim": 2048,
                "activation": act,
                "batch_norm": bn,
                "final_batch_norm": bn,
                "bias": False,
                "scale": 1.0,
            },
        }
    )
    c.objective = ml_collections.ConfigDict({"name": "simsiam", "temperature": 0.1, "ema": 0.99})
    c.optimizer = ml_collections.ConfigDict(
        {
            "name": "sgd",
            "lr": 0.05,
            "momentum": 0.9,
            "weight_decay": 0.0,
            "nesterov": False,
            "schedule": "constant",
            "warmup_steps": 0,
            "lr_batch_scaling": False,
            "probe_lr": 1e-3,
            "b1": 0.9,
            "b2": 0.999,
        }
    )
    c.train = ml_collections.ConfigDict(
        {
            "steps": _EPOCHS * steps_per_epoch,
            "log_every": 20,
            "metrics_every": steps_per_epoch,
            "checkpoint_every": 5 * steps_per_epoch,
            "keep_checkpoints": 3,
            "progress": True,
            "tensorboard": False,
            "stop_after": 0,
            "allow_config_change": False,
        }
    )
    c.eval = ml_collections.ConfigDict(
        {
            "max_train": 50_000,
            "max_test": 10_000,
            "knn_k": 200,
            "ridge_l2": 1e-3,
            "rotation": True,
            "rotation_epochs": 5,
            "metrics_images": 2048,
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
    c.expected_runtime = "about 1 h on one A100/H100-class GPU (50 epochs x 97 steps at batch 512); not measured here"
    return c
