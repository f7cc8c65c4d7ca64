"""Experiment 6, training: data, models and SimCLR through the one run loop (``ssl_geometry.trainer.train``)."""

from __future__ import annotations

import contextlib
import pathlib
import tempfile

import jax
import ml_collections
import numpy as np

from ssl_geometry import augment, data, trainer

__all__ = [
    "load_data",
    "dry_batch",
    "trainer_config",
    "make_backbone",
    "make_head",
    "train_simclr",
    "feature_fns",
    "rotation_probe_subset",
    "trained_augmentations",
]


def dry_batch(cfg) -> int:
    """The batch of a dry run's training: the smaller of ``train.dry_run_batches``."""
    return int(min(cfg.train.dry_run_batches))


def _data_section(cfg, batch: int | None = None) -> dict:
    """The trainer's ``data`` section: the guillotine's data set (``shapes`` with its nuisance rotations
    ``data.shapes_max_angle_deg``), rendered from ``seed``; under ``dry_run`` ``dry_run_examples`` per split
    and batch ``batch`` (default :func:`dry_batch`)."""
    d, t = cfg.data, cfg.train
    counts = (d.dry_run_examples,) * 2 if cfg.dry_run else (d.n_train, d.n_test)
    return {
        "name": d.name,
        "image_size": d.image_size,
        "data_dir": d.data_dir,
        "num_train": int(counts[0]),
        "num_test": int(counts[1]),
        "seed": int(cfg.seed),
        "shapes_max_angle_deg": float(d.shapes_max_angle_deg) if d.name == "shapes" else None,
        "batch_size": int((batch or dry_batch(cfg)) if cfg.dry_run else t.batch_size),
        "stream": False,
    }


def _data_context(cfg):
    """tfds mock data (``dry_run_examples`` per split) under ``dry_run`` for a tfds set; else nothing."""
    if cfg.dry_run and data.info(cfg.data.name).source != "embedded":
        import tensorflow_datasets as tfds

        return tfds.testing.mock_data(num_examples=cfg.data.dry_run_examples)
    return contextlib.nullcontext()


def load_data(cfg):
    """``(train, test)`` :class:`ssl_geometry.data.Dataset`: the very images the run loop trains on
    (:func:`ssl_geometry.trainer.load_split` of the trainer's ``data`` section); under ``cfg.dry_run``
    a few generated/mock images."""
    section = ml_collections.ConfigDict(_data_section(cfg))
    with _data_context(cfg):
        return tuple(trainer.load_split(section, s) for s in ("train", data.info(cfg.data.name).splits[1]))


def _backbone_section(cfg) -> dict:
    """``model.backbone`` / ``model.backbone_kwargs`` of the trainer config for ``cfg.model.backbone``."""
    m, size = cfg.model, cfg.data.image_size
    kwargs = {
        "small_cnn": {"widths": tuple(m.widths), "activation": "relu"},
        "resnet18_cifar": {},
        "vit_tiny": {"img_size": size},
    }
    if m.backbone not in kwargs:
        raise ValueError(f"`model.backbone` must be one of {sorted(kwargs)}; got {m.backbone!r}.")
    return {"backbone": m.backbone, "backbone_kwargs": kwargs[m.backbone]}


def _head_section(cfg, depth: int, activation: str | None) -> dict:
    """``model.projector`` of the trainer config: ``depth`` affine layers ``in -> hidden x (depth-1) -> out``."""
    if not isinstance(depth, int) or depth < 1:
        raise ValueError(f"head `depth` must be a positive int; got {depth!r}.")
    m = cfg.model
    return {
        "hidden": (m.head_hidden,) * (depth - 1),
        "out_dim": m.head_out,
        "activation": activation or m.head_activation,
        "batch_norm": True,
        "final_batch_norm": m.head_final_bn,
        "bias": m.head_bias,
    }


def trainer_config(
    cfg, depth: int, activation: str | None = None, batch: int | None = None
) -> ml_collections.ConfigDict:
    """The trainer config of one guillotine SimCLR run (every field :func:`ssl_geometry.trainer.train` reads).

    The objective ``objective.name`` (SimCLR's NT-Xent, or the authors' one-way cross-entropy
    ``simclr_one_way``) at ``train.temperature``, Adam(``train.lr``, betas 0.9/0.999) at a constant rate
    without weight decay, the online probe's Adam at 1e-3, the views of the ``augment`` section as
    ``augment.name = "simclr_custom"`` (:class:`ssl_geometry.augment.AugmentConfig`), the backbone of
    ``model.backbone`` and the BN MLP projector with ``depth`` affine layers, float32, the data of
    :func:`load_data`. Every step's loss is logged (``train.log_every = 1``: the loss curve); checkpoints
    every ``train.checkpoint_every`` steps (0: only at the end, in a temporary workdir); no tracked
    metrics and no final probes (the experiment runs its own). Under ``dry_run`` batch ``batch``
    (default :func:`dry_batch`) and ``train.dry_run_steps`` steps.
    """
    t = cfg.train
    steps = int(t.dry_run_steps) if cfg.dry_run else int(t.steps)
    every = _checkpoint_every(cfg)
    return ml_collections.ConfigDict(
        {
            "seed": int(cfg.seed),
            "dtype": "float32",
            "data": _data_section(cfg, batch),
            "augment": {"name": "simclr_custom", "size": cfg.data.image_size, **cfg.augment.to_dict()},
            "model": {**_backbone_section(cfg), "projector": _head_section(cfg, depth, activation)},
            "objective": {"name": cfg.objective.name, "temperature": float(t.temperature)},
            "optimizer": {
                "name": "adam",
                "lr": float(t.lr),
                "b1": 0.9,
                "b2": 0.999,
                "weight_decay": 0.0,
                "schedule": "constant",
                "warmup_steps": 0,
                "lr_batch_scaling": False,
                "probe_lr": 1e-3,
            },
            "train": {
                "steps": steps,
                "log_every": 1,
                "metrics_every": 0,
                "checkpoint_every": min(every, steps) or steps,
                "keep_checkpoints": 2,
                "progress": False,
                "tensorboard": False,
                "stop_after": 0,
                "allow_config_change": False,
            },
            "eval": {"final_probes": False, "metrics_images": 0},
            "mesh": {"data": -1, "model": 1, "min_model_dim": 1024},
        }
    )


def make_backbone(cfg, dtype):
    """The backbone :class:`ssl_geometry.Model` the trainer builds for ``cfg`` (compute dtype ``dtype``)."""
    return trainer.build_backbone(
        ml_collections.ConfigDict(_backbone_section(cfg)), (cfg.data.image_size,) * 2 + (3,), dtype
    )


def make_head(cfg, in_dim: int, depth: int, dtype, activation: str | None = None):
    """The BN MLP projector the trainer builds (``depth`` affine layers, BN on hidden layers, ``head_final_bn``).

    ``activation``: default ``model.head_activation`` (the main run); the depth ablation passes
    ``model.ablation_activation`` (the authors' ``head_depth_ablations.py`` uses Swish).
    """
    return trainer.build_head(_head_section(cfg, depth, activation), in_dim, dtype)


def trained_augmentations(cfg) -> dict:
    """Which of the analysed augmentations (rotation, hue, blur) the training views include."""
    a = cfg.augment
    return {
        "rotation": bool(a.rotation_deg > 0),
        "hue": bool(a.jitter_prob > 0 and a.jitter[3] > 0),
        "blur": bool(a.blur_prob > 0),
    }


def _checkpoint_every(cfg) -> int:
    every = int(cfg.train.get("checkpoint_every", 0))
    if every < 0:
        raise ValueError(f"`train.checkpoint_every` must be >= 0 (0: off); got {every}.")
    return every


def _workdir(cfg, depth: int, activation: str | None) -> pathlib.Path | None:
    """The run's workdir ``train.checkpoint_dir/depth<d>_<activation>``, or ``None`` (a temporary one) when
    ``train.checkpoint_every`` is 0."""
    if not _checkpoint_every(cfg):
        return None
    if not cfg.train.get("checkpoint_dir"):
        raise ValueError(
            "`train.checkpoint_every` > 0 needs `train.checkpoint_dir` (reproduce sets it to DIR/<run>/checkpoints)."
        )
    return pathlib.Path(cfg.train.checkpoint_dir) / f"depth{depth}_{activation or cfg.model.head_activation}"


def train_simclr(cfg, depth: int, activation: str | None = None, batch: int | None = None) -> dict:
    """One SimCLR run of :func:`trainer_config` through the run loop, :func:`ssl_geometry.trainer.train`.

    The loop builds the objective, optimiser and step from the trainer config, starts from
    :func:`~ssl_geometry.trainer.init_train_state` with ``PRNGKey(seed)``, trains on the images of
    :func:`load_data` in the order :func:`~ssl_geometry.trainer.batch_indices` ``(seed, s)`` with views
    drawn on device from ``fold_in(state.rng, s)``, exactly as ``python -m ssl_geometry.train``. The
    trainer's online probe (on ``stop_gradient`` of the backbone features) trains alongside and cannot
    change the backbone or head. With ``train.checkpoint_every > 0`` the workdir
    ``train.checkpoint_dir/depth<d>_<activation>`` keeps the checkpoints and ``metrics.jsonl``, and a rerun
    resumes from the newest good checkpoint of the same run (another run's workdir raises
    :class:`~ssl_geometry.trainer.ConfigMismatchError`, a ``ValueError`` naming the differing fields). A
    non-finite loss raises ``FloatingPointError`` naming the step. Returns ``{"objective", "params",
    "state", "init_params", "init_state", "losses", "step_time_s", "trainer_config", "resumed_from"}``
    (``losses``: every step's, read from ``metrics.jsonl``; ``step_time_s``: the loop's median step time
    of this call, compile excluded). ``batch``: a dry run's batch (default :func:`dry_batch`).
    """
    tc = trainer_config(cfg, depth, activation, batch)
    workdir = _workdir(cfg, depth, activation)
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="guillotine-"))
        stack.enter_context(_data_context(cfg))
        try:
            out = trainer.train(tc, workdir, verbose=False)
        except trainer.ConfigMismatchError as err:
            raise trainer.ConfigMismatchError(f"{workdir} holds checkpoints of another run: {err}") from err
        losses = [r["loss"] for r in trainer.read_metrics(workdir) if "event" not in r]
    state = out["state"]
    # The state train() started from (init_train_state is a pure function of the key): the untrained head.
    init = trainer.init_train_state(
        out["objective"],
        trainer.build_optimizer(tc)[0],
        jax.random.PRNGKey(tc.seed),
        int(state["params"]["probe"]["b"].shape[0]),
    )
    return {
        "objective": out["objective"],
        "params": state["params"],
        "state": state["obj_state"],
        "init_params": init["params"],
        "init_state": init["obj_state"],
        "losses": np.asarray(losses, np.float64),
        "trainer_config": tc.to_dict(),
        "resumed_from": out["resumed_from"],
        "step_time_s": out["step_time_s"],
    }


def feature_fns(run):
    """Jitted eval-mode ``images -> z`` (the backbone) and ``z -> h(z)`` (the projector alone) of a trained run:
    ``h(z)`` of images is ``head(backbone(x))``, and one backbone pass serves every head on the same images."""
    obj = run["objective"]
    feat, proj = jax.jit(obj.features), jax.jit(obj.project)
    p, s = run["params"], run["state"]
    return (lambda x: feat(p, s, x)), (lambda z: proj(p, s, z))


def rotation_probe_subset(cfg, ds, n):
    """The first ``n`` images of ``ds`` whose class is in ``data.rotation_probe_classes`` (all when None)."""
    keep = np.arange(ds.num_examples)
    classes = cfg.data.rotation_probe_classes
    if classes is not None:
        if cfg.data.name != "shapes":
            raise ValueError("`data.rotation_probe_classes` names shape classes; set it to None for other data sets.")
        keep = keep[np.isin(ds.labels, [data.SHAPE_NAMES.index(c) for c in classes])]
    if keep.size < 2:
        raise ValueError(f"only {keep.size} images of classes {classes} in the data set.")
    return augment.to_float(ds.images[keep[:n]])
