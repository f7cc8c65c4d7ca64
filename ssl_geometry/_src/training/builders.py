"""From a training config to the objects a run is made of, and the one check of the whole config.

Each builder reads one section of the config (fields documented in :func:`ssl_geometry.trainer.train`):

* data: :func:`load_split` (a split named by the ``data`` section) and :func:`load_dataset` (by name);
  the input feed that serves a run its batches is :func:`ssl_geometry.trainer.make_feed`;
* augmentation: :func:`build_augment` / :func:`augment_config` (``augment``);
* models and objective: :func:`build_backbone`, :func:`build_head`, :func:`build_objective` (``model``,
  ``objective``, ``augment``, ``dtype``);
* optimiser with its schedule: :func:`build_optimizer` (``optimizer``, ``train.steps``, ``data.batch_size``);

The tables :data:`BACKBONES`, :data:`AUGMENTS` and :data:`DTYPES` list the names the config may use.
"""

from __future__ import annotations

import math
from typing import Any

import jax.numpy as jnp
import numpy as np

from ssl_geometry._src.checks import check_choice
from ssl_geometry._src.models import backbones as _bb
from ssl_geometry._src.models import heads as _heads
from ssl_geometry._src.ssl import data as _data
from ssl_geometry._src.ssl import objectives as _obj
from ssl_geometry._src.ssl.augment import pipelines as _aug
from ssl_geometry._src.ssl.losses.registry import objective_spec
from ssl_geometry._src.ssl.shapes import ShapesConfig
from ssl_geometry._src.training.optimizer import make_optimizer

__all__ = [
    "BACKBONES",
    "AUGMENTS",
    "DTYPES",
    "load_dataset",
    "load_split",
    "build_augment",
    "augment_config",
    "build_backbone",
    "build_head",
    "build_objective",
    "build_optimizer",
]

BACKBONES = ("mlp", "small_cnn", "resnet18_cifar", "resnet50", "vit_tiny", "vit_small16")
AUGMENTS = ("none", "crop_flip", "simsiam_cifar", "simclr_cifar", "simclr_imagenet", "simclr_custom")
DTYPES = {"float32": jnp.float32, "float64": jnp.float64}


# ----------------------------------------------------------------------------- data


def load_dataset(
    name: str,
    split: str,
    *,
    image_size: int | None = None,
    num_examples: int | None = None,
    data_dir: str | None = None,
):
    """``(images, labels)`` as NumPy (``uint8`` NHWC, ``int32``) from :func:`ssl_geometry.data.load`.

    Embedded sets (``"digits"``, ``"shapes"``) need no download; tfds sets
    (``"cifar10"``, ...) must be prepared in ``data_dir``. The trainer keeps the
    arrays in host memory and draws batches with
    :func:`ssl_geometry.trainer.batch_indices` (order a pure function of
    ``(seed, step)``, so the data position is the step).
    """
    check_choice(split, "split", ("train", "test"))
    ds = _data.load(name, split, image_size=image_size, num_examples=num_examples, data_dir=data_dir)
    return np.asarray(ds.images), np.asarray(ds.labels, np.int32)


def load_split(data, split: str):
    """The ``split`` of the data set a config's ``data`` section names (a :class:`ssl_geometry.data.Dataset`).

    :func:`ssl_geometry.data.load` of ``data.name`` with ``image_size`` (>= 1; validated),
    ``data_dir`` ("": tfds' default), the first ``num_train`` (``split == "train"``) or ``num_test``
    (any other split) examples (0: all; more than the split holds is refused), ``seed`` (the rendering seed of a generated set; absent: 0)
    and, for ``"shapes"``, ``shapes_max_angle_deg``: nuisance rotation angles uniform in
    ``[-a, a]`` degrees (absent or ``None``: the set's default range).
    """
    count = data.get("num_train" if split == "train" else "num_test", 0) or None
    kwargs = {}
    angle = data.get("shapes_max_angle_deg", None)
    if angle is not None:
        a = math.radians(float(angle))
        kwargs["config"] = ShapesConfig(angle=(-a, a))
    ds = _data.load(
        data.name,
        split,
        seed=int(data.get("seed", 0)),
        image_size=int(data.image_size) if data.get("image_size") else None,
        data_dir=data.get("data_dir") or None,
        num_examples=count,
        **kwargs,
    )
    if count is not None and ds.num_examples < count:
        field = "num_train" if split == "train" else "num_test"
        raise ValueError(
            f"`data.{field}` = {count}, but the {data.name!r} {split!r} split has only "
            f"{ds.num_examples} examples; use at most that (0: the whole split)."
        )
    return ds


# ----------------------------------------------------------------------------- augmentation


def build_augment(cfg, image_shape):
    """``augment(key, images) -> (view1, view2)`` for ``cfg.name`` in :data:`AUGMENTS`.

    ``crop_flip`` / ``simsiam_cifar``: RandomResizedCrop(scale 0.2-1) + horizontal
    flip (the paper's SimSiam CIFAR pipeline; works for any channel count);
    ``simclr_cifar`` / ``simclr_imagenet``: :data:`ssl_geometry.augment.SIMCLR_CIFAR` /
    ``SIMCLR_IMAGENET`` (RGB only); ``simclr_custom``: an
    :class:`~ssl_geometry.augment.AugmentConfig` from the section's other fields (e.g. the
    paper's guillotine views: ``crop_scale=(0.08, 1)``, ``rotation_deg=45``, ``gray_prob=0``,
    ``blur_prob=0``; RGB only); ``none``: both views are the clean images.
    """
    name = cfg.get("name", "crop_flip")
    check_choice(name, "augment.name", AUGMENTS)
    if name == "none":
        return _obj.identity_views
    if name in ("crop_flip", "simsiam_cifar"):
        size = int(image_shape[0])
        return lambda key, x: _aug.two_views(key, x, _aug.simsiam_cifar_augment, size=size)
    if image_shape[-1] != 3:
        raise ValueError(
            f"augment.name={name!r} needs RGB images; the data set has {image_shape[-1]} channel(s). Use 'crop_flip'."
        )
    if name == "simclr_custom":
        conf = augment_config(cfg)
    else:
        conf = _aug.SIMCLR_CIFAR if name == "simclr_cifar" else _aug.SIMCLR_IMAGENET
    return lambda key, x: _aug.two_views(key, x, _aug.simclr_augment, config=conf)


def augment_config(cfg) -> _aug.AugmentConfig:
    """The :class:`~ssl_geometry.augment.AugmentConfig` of an ``augment`` section (every field but ``name``;
    lists become tuples). An unknown field raises ``ValueError`` naming it."""
    fields: dict[str, Any] = {
        k: (tuple(v) if isinstance(v, (list, tuple)) else v) for k, v in dict(cfg).items() if k != "name"
    }
    unknown = sorted(set(fields) - set(_aug.AugmentConfig._fields))
    if unknown:
        raise ValueError(
            f"`augment` has field(s) {unknown} that AugmentConfig does not define; expected a subset of "
            f"{list(_aug.AugmentConfig._fields)}."
        )
    return _aug.AugmentConfig(**fields)


# ----------------------------------------------------------------------------- models, objective, optimiser


def build_backbone(cfg, image_shape, dtype):
    """Backbone :class:`~ssl_geometry.Model` from ``cfg.backbone`` and ``cfg.backbone_kwargs``."""
    name = cfg.get("backbone", "small_cnn")
    check_choice(name, "model.backbone", BACKBONES)
    kw = dict(cfg.get("backbone_kwargs", {}) or {})
    if name == "mlp":
        return _bb.mlp(int(np.prod(image_shape)), dtype=dtype, **kw)
    if name == "small_cnn":
        return _bb.small_cnn(tuple(image_shape), dtype=dtype, **kw)
    return getattr(_bb, name)(dtype=dtype, **kw)


def build_head(cfg, in_dim: int, dtype, default_out: int | None = None):
    """Head :class:`~ssl_geometry.Model` ``heads.mlp(in_dim, hidden, out_dim, **rest)`` from a
    ``model.projector``/``model.predictor`` section (``out_dim`` falls back to ``default_out``)."""
    cfg = dict(cfg)
    hidden = tuple(cfg.pop("hidden", ()))
    out_dim = cfg.pop("out_dim", None) or default_out
    if out_dim is None:
        raise ValueError(f"the head section {sorted(cfg)} needs `out_dim` (no default width for this head).")
    return _heads.mlp(in_dim, hidden, int(out_dim), dtype=dtype, **cfg)


def build_objective(config, image_shape, total_steps: int) -> _obj.Objective:
    """The :class:`~ssl_geometry.objectives.Objective` described by ``config``."""
    dtype = DTYPES[config.dtype]
    backbone = build_backbone(config.model, image_shape, dtype)
    projector = build_head(config.model.projector, backbone.out_dim, dtype, backbone.out_dim)
    ocfg = dict(config.objective)
    name = ocfg.pop("name")
    check_choice(name, "objective.name", _obj.OBJECTIVES)
    predictor = None
    if objective_spec(name).predictor:  # the objective table says whether it has one
        predictor = build_head(config.model.predictor, projector.out_dim, dtype, projector.out_dim)
    ocfg = {k: tuple(v) if isinstance(v, list) else v for k, v in ocfg.items()}  # list-valued hyper-parameters
    return _obj.make_objective(
        name,
        backbone,
        projector,
        predictor,
        augment=build_augment(config.augment, image_shape),
        total_steps=total_steps,
        **ocfg,
    )


def build_optimizer(config):
    """``(tx, schedule)`` of a run: :func:`ssl_geometry.trainer.make_optimizer` of the ``optimizer`` section
    over ``train.steps`` at global batch ``data.batch_size``, the probe's Adam at ``optimizer.probe_lr``
    (default 1e-3)."""
    return make_optimizer(
        config.optimizer,
        int(config.train.steps),
        int(config.data.batch_size),
        probe_lr=float(config.optimizer.get("probe_lr", 1e-3)),
    )
