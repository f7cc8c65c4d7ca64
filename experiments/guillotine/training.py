"""Experiment 6, training: data, models, the authors' SimCLR views, SimCLR through ``training.loop.fit``, probes."""
from __future__ import annotations

import functools
import math
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ssl_geometry import augment, backbones, data, heads, objectives, probes, trainer
from ssl_geometry.training import loop

__all__ = ["load_data", "make_backbone", "make_head", "view", "train_simclr", "feature_fns",
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


def make_backbone(cfg, dtype):
    """The backbone :class:`ssl_geometry.models.Model` named by ``cfg.model.backbone``, compute dtype ``dtype``."""
    m, size = cfg.model, cfg.data.image_size
    if m.backbone == "small_cnn":
        return backbones.small_cnn((size, size, 3), widths=tuple(m.widths), activation="relu", dtype=dtype)
    if m.backbone == "resnet18_cifar":
        return backbones.resnet18_cifar(dtype=dtype)
    if m.backbone == "vit_tiny":
        return backbones.vit_tiny(img_size=size, dtype=dtype)
    raise ValueError(f"`model.backbone` must be 'small_cnn', 'resnet18_cifar' or 'vit_tiny'; got {m.backbone!r}.")


def make_head(cfg, in_dim: int, depth: int, dtype, activation: str | None = None):
    """BN MLP projector with ``depth`` affine layers ``in -> hidden x (depth-1) -> out`` (BN on hidden).

    ``activation``: default ``model.head_activation`` (the main run); the depth ablation passes
    ``model.ablation_activation`` (the authors' ``head_depth_ablations.py`` uses Swish).
    """
    if not isinstance(depth, int) or depth < 1:
        raise ValueError(f"head `depth` must be a positive int; got {depth!r}.")
    m = cfg.model
    return heads.mlp(in_dim, (m.head_hidden,) * (depth - 1), m.head_out, activation=activation or m.head_activation,
                     batch_norm=True, final_batch_norm=m.head_final_bn, bias=m.head_bias, dtype=dtype)


def trained_augmentations(cfg) -> dict:
    """Which of the analysed augmentations (rotation, hue, blur) the training views include."""
    a = cfg.augment
    return {"rotation": bool(a.rotation_deg > 0), "hue": bool(a.jitter_prob > 0 and a.jitter[3] > 0),
            "blur": bool(a.blur_prob > 0)}


def _view_one(key, image, a, size):
    """One view in the authors' order: crop, flip, rotation, colour jitter, grayscale, blur."""
    kc, kf, kr, kj, kg, kb = jax.random.split(key, 6)
    x = augment.random_resized_crop(kc, image, size, tuple(a["crop_scale"]))
    x = augment.random_flip(kf, x, a["flip_prob"])
    if a["rotation_deg"] > 0:
        x = augment.random_rotation(kr, x, math.radians(a["rotation_deg"]))
    if a["jitter_prob"] > 0:
        x = augment.random_color_jitter(kj, x, *a["jitter"], random_order=a["jitter_random_order"],
                                        p=a["jitter_prob"])
    if a["gray_prob"] > 0:
        x = augment.random_grayscale(kg, x, a["gray_prob"])
    if a["blur_prob"] > 0:
        x = augment.random_gaussian_blur(kb, x, p=a["blur_prob"])
    return x


def view(key, images, *, aug: tuple, size: int):
    """A batch of views (``aug``: the ``augment`` section as a sorted item tuple, hashable for jit)."""
    x = augment.to_float(images, jnp.float32)
    return augment.batch_augment(key, x, _view_one, dict(aug), size)


def train_simclr(cfg, depth: int, images, key, activation: str | None = None) -> dict:
    """SimCLR (NT-Xent, ``train.temperature``) with Adam(``train.lr``) on ``images`` (uint8 NHWC), float32.

    The batch at step ``s`` is :func:`ssl_geometry.trainer.batch_indices` ``(seed, s)``, the views are
    drawn on device with key ``fold_in(rng, s)``; steps run through :func:`ssl_geometry.training.loop.fit`
    (``scan=False``: a conv net inside a scan is ~20x slower on XLA:CPU; same numbers),
    ``train.fit_steps`` per call (a non-finite step raises :class:`loop.FitError` naming it). Returns
    ``{"objective", "params", "state", "init_params", "init_state", "losses", "step_time_s"}``
    (``step_time_s``: median wall time per step over the calls after the first, compile excluded).
    """
    t = cfg.train
    steps = 2 if cfg.dry_run else t.steps
    bs = t.dry_run_batch if cfg.dry_run else t.batch_size
    per_call = 1 if cfg.dry_run else min(t.fit_steps, steps)  # dry run: 2 calls, the second one times a step
    if steps % per_call:
        raise ValueError(f"`train.steps` ({steps}) must be a multiple of `train.fit_steps` ({per_call}).")
    backbone = make_backbone(cfg, jnp.float32)
    head = make_head(cfg, backbone.out_dim, depth, jnp.float32, activation)
    aug = tuple(sorted((k, tuple(v) if isinstance(v, (list, tuple)) else v) for k, v in cfg.augment.items()))
    views = functools.partial(augment.two_views, pipeline=functools.partial(view, aug=aug, size=cfg.data.image_size))
    obj = objectives.make_objective("simclr", backbone, head, augment=views, temperature=t.temperature)
    k_init, k_rng = jax.random.split(key)
    params, state = obj.init(k_init)
    init_params, init_state = params, state
    opt = optax.adam(t.lr)

    def loss_fn(p, s, b):
        value, (s_new, _) = obj.loss_fn(p, s, b["key"], {"images": b["images"]})
        return value, s_new

    n = images.shape[0]
    if bs > n:
        raise ValueError(f"batch size {bs} exceeds the {n} training images.")
    opt_state, losses, times = None, [], []
    for c0 in range(0, steps, per_call):
        idx = np.stack([trainer.batch_indices(cfg.seed, s, n, bs) for s in range(c0, c0 + per_call)])
        batches = {"images": jnp.asarray(images[idx]),
                   "key": jax.vmap(lambda s: jax.random.fold_in(k_rng, s))(jnp.arange(c0, c0 + per_call))}
        t0 = time.perf_counter()
        res = loop.fit(loss_fn, params, opt, steps=per_call, batches=batches, state=state, has_state=True,
                       scan=False, opt_state=opt_state)
        jax.block_until_ready(res.params)
        times.append((time.perf_counter() - t0) / per_call)
        params, state, opt_state = res.params, res.state, res.opt_state
        losses.append(np.asarray(res.losses))
    return {"objective": obj, "params": params, "state": state, "init_params": init_params,
            "init_state": init_state, "losses": np.concatenate(losses),
            "step_time_s": float(np.median(times[1:])) if len(times) > 1 else float(times[0])}


def feature_fns(run):
    """Jitted eval-mode ``images -> z`` and ``images -> h(z)`` (float32) of a trained run."""
    obj = run["objective"]
    feat, emb = jax.jit(obj.features), jax.jit(obj.embed)
    p, s = run["params"], run["state"]
    return (lambda x: feat(p, s, x)), (lambda x: emb(p, s, x))


def rotation_probe_subset(cfg, ds, n):
    """The first ``n`` images of ``ds`` whose class is in ``data.rotation_probe_classes`` (all when None)."""
    keep = np.arange(len(ds))
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
