"""Experiment 6, training: data, models and SimCLR through the CLI trainer's step, probes."""
from __future__ import annotations

import math
import pathlib
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from experiments.configs import simsiam_cifar10
from ssl_geometry import augment, data, probes, trainer
from ssl_geometry import checkpoint as ckpt

__all__ = ["load_data", "trainer_config", "make_backbone", "make_head", "train_simclr", "feature_fns",
           "rotation_probe_subset", "probe_suite", "trained_augmentations"]


def _first(ds, n):
    """The first ``n`` examples (``data.subset`` cannot be used: ``Dataset.__len__`` breaks ``_replace``)."""
    return type(ds)(ds.images[:n], ds.labels[:n], {k: v[:n] for k, v in ds.factors.items()}, ds.num_classes, ds.name)


def load_data(cfg):
    """``(train, test)`` :class:`ssl_geometry.data.Dataset`; under ``cfg.dry_run`` a few generated/mock images."""
    d = cfg.data
    kwargs = {"seed": cfg.seed, "image_size": d.image_size}
    test_split = "test" if "test" in data.info(d.name).splits else "validation"
    counts = (d.dry_run_examples,) * 2 if cfg.dry_run else (d.n_train, d.n_test)
    if d.name == "shapes":
        a = math.radians(d.shapes_max_angle_deg)
        return tuple(data.load(d.name, s, num_examples=n, config=data.ShapesConfig(angle=(-a, a)), **kwargs)
                     for s, n in zip(("train", test_split), counts))
    if d.data_dir:
        kwargs["data_dir"] = d.data_dir
    if cfg.dry_run:
        import tensorflow_datasets as tfds

        with tfds.testing.mock_data(num_examples=d.dry_run_examples):
            return tuple(_first(data.load(d.name, s, **kwargs), n) for s, n in zip(("train", test_split), counts))
    return tuple(_first(data.load(d.name, s, **kwargs), n) for s, n in zip(("train", test_split), counts))


def _backbone_section(cfg) -> dict:
    """``model.backbone`` / ``model.backbone_kwargs`` of the trainer config for ``cfg.model.backbone``."""
    m, size = cfg.model, cfg.data.image_size
    kwargs = {"small_cnn": {"widths": tuple(m.widths), "activation": "relu"}, "resnet18_cifar": {},
              "vit_tiny": {"img_size": size}}
    if m.backbone not in kwargs:
        raise ValueError(f"`model.backbone` must be one of {sorted(kwargs)}; got {m.backbone!r}.")
    return {"backbone": m.backbone, "backbone_kwargs": kwargs[m.backbone]}


def _head_section(cfg, depth: int, activation: str | None) -> dict:
    """``model.projector`` of the trainer config: ``depth`` affine layers ``in -> hidden x (depth-1) -> out``."""
    if not isinstance(depth, int) or depth < 1:
        raise ValueError(f"head `depth` must be a positive int; got {depth!r}.")
    m = cfg.model
    return {"hidden": (m.head_hidden,) * (depth - 1), "out_dim": m.head_out,
            "activation": activation or m.head_activation, "batch_norm": True, "final_batch_norm": m.head_final_bn,
            "bias": m.head_bias}


def trainer_config(cfg, depth: int, activation: str | None = None) -> ml_collections.ConfigDict:
    """The trainer config (the shape of ``experiments/configs/simsiam_cifar10.py``) of one guillotine SimCLR run.

    SimCLR's NT-Xent at ``train.temperature``, Adam(``train.lr``) at a constant rate without weight decay,
    the views of the ``augment`` section as ``augment.name = "simclr_custom"``
    (:class:`ssl_geometry.augment.AugmentConfig`), the backbone of ``model.backbone`` and the BN MLP
    projector with ``depth`` affine layers; under ``dry_run`` batch ``train.dry_run_batch`` and 2 steps.
    """
    t = cfg.train
    c = simsiam_cifar10.get_config("relu")
    c.seed = int(cfg.seed)
    c.data.update({"name": cfg.data.name, "image_size": cfg.data.image_size, "data_dir": cfg.data.data_dir,
                   "batch_size": int(t.dry_run_batch if cfg.dry_run else t.batch_size)})
    c.augment = ml_collections.ConfigDict({"name": "simclr_custom", "size": cfg.data.image_size,
                                           **cfg.augment.to_dict()})
    c.model.update(_backbone_section(cfg))
    c.model.projector = ml_collections.ConfigDict(_head_section(cfg, depth, activation))
    c.objective = ml_collections.ConfigDict({"name": "simclr", "temperature": float(t.temperature)})
    c.optimizer.update({"name": "adam", "lr": float(t.lr), "momentum": 0.0, "weight_decay": 0.0,
                        "schedule": "constant"})
    c.train.steps = 2 if cfg.dry_run else int(t.steps)
    return c


def make_backbone(cfg, dtype):
    """The backbone :class:`ssl_geometry.Model` the trainer builds for ``cfg`` (compute dtype ``dtype``)."""
    return trainer.build_backbone(ml_collections.ConfigDict(_backbone_section(cfg)), (cfg.data.image_size,) * 2 + (3,),
                              dtype)


def make_head(cfg, in_dim: int, depth: int, dtype, activation: str | None = None):
    """The BN MLP projector the trainer builds (``depth`` affine layers, BN on hidden layers, ``head_final_bn``).

    ``activation``: default ``model.head_activation`` (the main run); the depth ablation passes
    ``model.ablation_activation`` (the authors' ``head_depth_ablations.py`` uses Swish).
    """
    return trainer.build_head(_head_section(cfg, depth, activation), in_dim, dtype)


def trained_augmentations(cfg) -> dict:
    """Which of the analysed augmentations (rotation, hue, blur) the training views include."""
    a = cfg.augment
    return {"rotation": bool(a.rotation_deg > 0), "hue": bool(a.jitter_prob > 0 and a.jitter[3] > 0),
            "blur": bool(a.blur_prob > 0)}


def _checkpointing(cfg, depth: int, activation: str | None):
    """``(manager, every)`` of one run's checkpoints, or ``(None, 0)`` when ``train.checkpoint_every`` is 0.

    The run's directory is ``train.checkpoint_dir/depth<d>_<activation>``.
    """
    t = cfg.train
    every = int(t.get("checkpoint_every", 0))
    if every < 0:
        raise ValueError(f"`train.checkpoint_every` must be >= 0 (0: off); got {every}.")
    if not every:
        return None, 0
    if not t.get("checkpoint_dir"):
        raise ValueError("`train.checkpoint_every` > 0 needs `train.checkpoint_dir` (reproduce sets it to "
                         "DIR/<run>/checkpoints).")
    act = activation or cfg.model.head_activation
    return ckpt.manager(pathlib.Path(t.checkpoint_dir) / f"depth{depth}_{act}", max_to_keep=2), every


def train_simclr(cfg, depth: int, images, labels, key, activation: str | None = None) -> dict:
    """SimCLR through the trainer's step on ``images`` (uint8 NHWC) and ``labels``, float32.

    The objective, optimiser and step are the CLI trainer's (:func:`ssl_geometry.trainer.build_objective`,
    :func:`~ssl_geometry.trainer.make_optimizer`, :func:`~ssl_geometry.trainer.make_train_step`)
    for :func:`trainer_config`; the state starts from :func:`~ssl_geometry.trainer.init_train_state`
    with ``key``, the batch at step ``s`` is :func:`~ssl_geometry.trainer.batch_indices` ``(seed, s)``
    and the views are drawn on device from ``fold_in(state.rng, s)``, as in ``python -m ssl_geometry.train``.
    The trainer's online probe (on ``stop_gradient`` of the backbone features) trains alongside and cannot
    change the backbone or head. With ``train.checkpoint_every > 0`` the state (and the losses so far) is
    saved every that many steps and at the end (:mod:`ssl_geometry.checkpoint`), and a rerun resumes
    from the newest good checkpoint of the same run (another run's checkpoints raise :class:`~ssl_geometry.trainer.ConfigMismatchError`, a
    ``ValueError`` naming the differing fields). A
    non-finite loss raises ``FloatingPointError`` naming the step. Returns ``{"objective", "params", "state",
    "init_params", "init_state", "losses", "step_time_s", "trainer_config", "resumed_from"}``
    (``step_time_s``: median wall time per step after the first of this call, compile excluded).
    """
    tc = trainer_config(cfg, depth, activation)
    steps, bs = int(tc.train.steps), int(tc.data.batch_size)
    n = images.shape[0]
    if bs > n:
        raise ValueError(f"batch size {bs} exceeds the {n} training images.")
    objective = trainer.build_objective(tc, images.shape[1:], steps)
    tx, sched = trainer.make_optimizer(tc.optimizer, steps, bs, probe_lr=float(tc.optimizer.probe_lr))
    step_fn = jax.jit(trainer.make_train_step(objective, tx, sched), donate_argnums=(0,))
    state = trainer.init_train_state(objective, tx, key, int(np.max(labels)) + 1)
    # copies: the step donates the state's buffers
    init_params, init_state = jax.tree_util.tree_map(jnp.copy, (state["params"], state["obj_state"]))
    mngr, every = _checkpointing(cfg, depth, activation)
    # what the trainer's checkpoints record, so a directory of another run is refused, never mixed
    meta = {"config": trainer.config_record(tc), "state_signature": trainer.state_signature(state)}
    losses, times, start = [], [], 0
    if mngr is not None:
        restored = ckpt.restore_latest(mngr, state)
        if restored is not None:
            try:
                trainer.check_resume(restored.meta, tc, state)
            except trainer.ConfigMismatchError as err:
                raise trainer.ConfigMismatchError(f"{mngr.directory} holds checkpoints of another run: {err}") from err
            state, start, losses = restored.state, restored.step, list(restored.meta["losses"])
    for s in range(start, steps):
        idx = trainer.batch_indices(cfg.seed, s, n, bs)
        batch = {"images": jnp.asarray(images[idx]), "labels": jnp.asarray(labels[idx], jnp.int32)}
        t0 = time.perf_counter()
        state, m = step_fn(state, batch)
        losses.append(m["loss"])
        if s - start < 5 or s == steps - 1:  # time a few steps to completion; the rest run asynchronously
            jax.block_until_ready(m["loss"])
            times.append(time.perf_counter() - t0)
        if mngr is not None and ((s + 1) % every == 0 or s + 1 == steps):
            losses = [float(v) for v in jax.device_get(losses)]
            _check_finite(losses, depth)
            ckpt.save(mngr, s + 1, state, {**meta, "losses": losses})
    if mngr is not None:
        mngr.wait_until_finished()
        mngr.close()
    losses = np.asarray(jax.device_get(losses), np.float64)
    _check_finite(losses, depth)
    return {"objective": objective, "params": state["params"], "state": state["obj_state"],
            "init_params": init_params, "init_state": init_state, "losses": losses, "trainer_config": tc.to_dict(),
            "resumed_from": start or None,
            "step_time_s": float(np.median(times[1:] or times)) if times else float("nan")}  # nan: no step ran


def _check_finite(losses, depth: int) -> None:
    ok = np.isfinite(np.asarray(losses, np.float64))
    if not np.all(ok):
        raise FloatingPointError(f"SimCLR (depth {depth}): non-finite loss at step {int(np.argmin(ok))}.")


def feature_fns(run):
    """Jitted eval-mode ``images -> z`` and ``images -> h(z)`` (float32) of a trained run."""
    obj = run["objective"]
    feat, emb = jax.jit(obj.features), jax.jit(obj.embed)
    p, s = run["params"], run["state"]
    return (lambda x: feat(p, s, x)), (lambda x: emb(p, s, x))


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


def probe_suite(cfg, run, rot_train, rot_test, cls_train, cls_test, key, *, class_probes: bool = True) -> dict:
    """Rotation probes (linear, MLP) and optionally class probes, on ``z`` and on ``h(z)`` (test accuracies)."""
    fz, fh = feature_fns(run)
    epochs = 1 if cfg.dry_run else cfg.probes.epochs
    out = {"rotation": {}, "class": {}}
    for i, (name, fn) in enumerate((("backbone", fz), ("head", fh))):
        r = probes.rotation_probe(fn, rot_train, rot_test, epochs=epochs, hidden=cfg.probes.hidden,
                                  key=jax.random.fold_in(key, i))
        out["rotation"][name] = {k: r[k] for k in ("linear", "mlp", "linear_train", "mlp_train")}
        if class_probes:
            (xtr, ytr), (xte, yte) = cls_train, cls_test
            ftr, fte = probes.features_in_batches(fn, xtr), probes.features_in_batches(fn, xte)
            k = jax.random.fold_in(key, 10 + i)
            lin = probes.logistic_probe(ftr, ytr, fte, yte, epochs=epochs, key=k)
            mlp = probes.mlp_probe(ftr, ytr, fte, yte, hidden=cfg.probes.hidden, epochs=epochs, key=k)
            out["class"][name] = {"linear": lin["acc"], "mlp": mlp["acc"]}
    return out
