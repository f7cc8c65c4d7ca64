"""The one check of a whole training config, before anything is built.

Implementation of :func:`ssl_geometry.trainer.validate_config`. Every field the trainer reads has one
entry in ``FIELDS`` (dotted name -> check); a field of the config that no entry names, other
than the objective constants of :func:`ssl_geometry.objectives.make_objective` and the fields of an
``augment`` section of ``name = "simclr_custom"``, is refused, so no input is silently ignored.
``model.backbone_kwargs`` is handed whole to the backbone's constructor (its fields depend on the
backbone), which checks it.
"""

from __future__ import annotations

import math
import os
import pathlib

import jax

from ssl_geometry._src.models.activations import ACTIVATIONS
from ssl_geometry._src.ssl import data as _data
from ssl_geometry._src.ssl.augment import pipelines as _aug
from ssl_geometry._src.ssl.objectives import OBJECTIVES
from ssl_geometry._src.training.builders import AUGMENTS, BACKBONES, DTYPES
from ssl_geometry._src.training.optimizer import OPTIMIZERS, SCHEDULES

__all__ = ["FIELDS", "validate_config"]


def _fail(field, expected, value):
    raise ValueError(f"{field}: expected {expected}, got {value!r}.")


def _int(lo, *, also=()):
    """An int ``>= lo`` (or one of ``also``); bools are not ints here."""

    def check(field, v):
        if isinstance(v, bool) or not isinstance(v, int) or (v < lo and v not in also):
            _fail(field, f"an integer >= {lo}" + "".join(f" or {a}" for a in also), v)

    return check


def _num(lo, hi=math.inf, *, lo_open=False, hi_open=False):
    """A finite number in the interval from ``lo`` to ``hi`` (open ends as given)."""

    def check(field, v):
        ok = (
            not isinstance(v, bool)
            and isinstance(v, (int, float))
            and math.isfinite(v)
            and ((v > lo if lo_open else v >= lo) and (v < hi if hi_open else v <= hi))
        )
        if not ok:
            _fail(field, f"a finite number in {'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}", v)

    return check


def _bool(field, v):
    if not isinstance(v, bool):
        _fail(field, "True or False", v)


def _choice(options):
    def check(field, v):
        if v not in tuple(options):
            _fail(field, f"one of {sorted(options)}", v)

    return check


def _tuple(item, length=None):
    def check(field, v):
        if not isinstance(v, (tuple, list)) or (length is not None and len(v) != length):
            _fail(field, f"a list of {length or 'any number of'} values", v)
        for i, x in enumerate(v):
            item(f"{field}[{i}]", x)

    return check


def _text(field, v):
    if not isinstance(v, str):
        _fail(field, "a string", v)


def _data_dir(field, v):
    if not isinstance(v, str) or (v and not pathlib.Path(v).expanduser().is_dir()):
        _fail(field, "'' (tfds' default) or an existing directory", v)


def _address(field, v):
    host, _, port = v.rpartition(":") if isinstance(v, str) else ("", "", "")
    if not isinstance(v, str) or (v and not (host and port.isdigit())):
        _fail(field, "'' (auto-detect) or 'host:port'", v)


def _head(prefix):
    return {
        f"{prefix}.hidden": _tuple(_int(1)),
        f"{prefix}.out_dim": _int(1),
        f"{prefix}.activation": _choice(ACTIVATIONS),
        f"{prefix}.batch_norm": _bool,
        f"{prefix}.final_batch_norm": _bool,
        f"{prefix}.bias": _bool,
        f"{prefix}.scale": _num(0, lo_open=True),
    }


_POS = _num(0, lo_open=True)
_UNIT = _num(0, 1)

#: Every config field the trainer reads: dotted name -> ``check(field, value)`` raising ``ValueError``.
FIELDS = {
    "seed": _int(0),
    "dtype": _choice(DTYPES),
    "expected_runtime": _text,
    "data.name": _choice(_data.DATASETS),
    "data.image_size": _int(1),
    "data.batch_size": _int(2),
    "data.data_dir": _data_dir,
    "data.num_train": _int(0),
    "data.num_test": _int(0),
    "data.stream": _bool,
    "data.shuffle_buffer": _int(1),
    "data.seed": _int(0),
    "data.shapes_max_angle_deg": lambda f, v: None if v is None else _num(0)(f, v),
    "augment.name": _choice(AUGMENTS),
    "model.backbone": _choice(BACKBONES),
    **_head("model.projector"),
    **_head("model.predictor"),
    "objective.name": _choice(OBJECTIVES),
    "objective.temperature": _POS,
    "objective.ema": _UNIT,
    "objective.queue_size": _int(1),
    "objective.barlow_lambda": _num(0),
    "objective.vicreg_coeffs": _tuple(_num(0), 3),
    "objective.dino_temps": _tuple(_POS, 2),
    "objective.dino_center_momentum": _UNIT,
    "optimizer.name": _choice(OPTIMIZERS),
    "optimizer.lr": _POS,
    "optimizer.momentum": _num(0, 1, hi_open=True),
    "optimizer.weight_decay": _num(0),
    "optimizer.nesterov": _bool,
    "optimizer.schedule": _choice(SCHEDULES),
    "optimizer.warmup_steps": _int(0),
    "optimizer.lr_batch_scaling": _bool,
    "optimizer.probe_lr": _POS,
    "optimizer.b1": _num(0, 1, hi_open=True),
    "optimizer.b2": _num(0, 1, hi_open=True),
    "train.steps": _int(1),
    "train.log_every": _int(1),
    "train.metrics_every": _int(0),
    "train.checkpoint_every": _int(1),
    "train.keep_checkpoints": _int(1),
    "train.progress": _bool,
    "train.tensorboard": _bool,
    "train.stop_after": _int(0),
    "train.allow_config_change": _bool,
    "eval.final_probes": _bool,
    "eval.max_train": _int(1),
    "eval.max_test": _int(1),
    "eval.knn_k": _int(0),
    "eval.ridge_l2": _num(0),
    "eval.rotation": _bool,
    "eval.rotation_epochs": _int(1),
    "eval.metrics_images": _int(0),
    "mesh.data": _int(1, also=(-1,)),
    "mesh.model": _int(1),
    "mesh.min_model_dim": _int(1),
    "distributed.initialize": _bool,
    "distributed.coordinator_address": _address,
    "distributed.num_processes": _int(0),
    "distributed.process_id": _int(0, also=(-1,)),
    "distributed.cpu_collectives": _choice(("gloo", "mpi", "")),
    "distributed.timeout_s": _POS,
}
#: Sections whose whole value is handed to a constructor that checks it.
_OPAQUE = ("model.backbone_kwargs",)


def _leaves(config, prefix=""):
    for k, v in config.items():
        name = f"{prefix}{k}"
        if name in _OPAQUE:
            continue
        if hasattr(v, "items") and name not in FIELDS:
            yield from _leaves(v, name + ".")
        else:
            yield name, v


def validate_config(config, *, devices: bool = True) -> None:
    """Raise ``ValueError`` naming the dotted field for any value the run cannot train with.

    Each field is checked by its ``FIELDS`` entry (type and range; no 0-means-default for a
    dimension), then the checks across fields: ``eval.knn_k`` >= 1 when ``eval.final_probes`` is on,
    ``eval.metrics_images`` >= 1 when ``train.metrics_every`` > 0, ``eval.knn_k`` within the kNN probe's
    training examples, a W-MSE batch above ``model.projector.out_dim``, the batch divides over the mesh's data axis,
    ``data.num_train`` (when set) holds a batch, ``data.shapes_max_angle_deg`` only for
    ``"shapes"``, ``data.data_dir`` / ``data.stream`` only for tfds sets, ``float64`` only
    under x64, ``distributed.process_id < distributed.num_processes`` when both are set, and
    ``data.image_size`` within host memory (``_check_memory``). Called by
    :func:`ssl_geometry.trainer.train` before anything is built, first with ``devices=False`` (every check
    but the mesh's, which asks JAX for its devices and so would start its backend) before
    ``jax.distributed.initialize``, then in full.
    """
    custom_augment = config.get("augment", {}).get("name") == "simclr_custom"
    for field, value in _leaves(config):
        check = FIELDS.get(field)
        if check is not None:
            check(field, value)
        elif field.startswith("objective."):
            continue  # another make_objective constant: make_objective refuses unknown ones by name
        elif not (
            custom_augment and field.split(".")[0] == "augment" and field.split(".")[1] in _aug.AugmentConfig._fields
        ):
            raise ValueError(f"`{field}`: the trainer reads no such config field (see --help for the fields).")
    for required in ("seed", "dtype", "data.name", "data.batch_size", "objective.name", "train.steps"):
        _get(config, required)
    _check_across(config, devices=devices)


def _get(config, field):
    node = config
    for part in field.split("."):
        if not hasattr(node, "get") or part not in node:
            raise ValueError(f"`{field}`: the config must set this field.")
        node = node[part]
    return node


def _check_across(config, *, devices: bool = True) -> None:
    data = config.data
    if config.dtype == "float64" and not jax.config.read("jax_enable_x64"):
        raise ValueError("`dtype`: 'float64' needs jax_enable_x64 (set JAX_ENABLE_X64=1).")
    dist = config.get("distributed", {})
    n_proc, pid = dist.get("num_processes", 0), dist.get("process_id", -1)
    if n_proc > 0 and pid >= n_proc:
        raise ValueError(
            f"`distributed.process_id`: expected an id in [0, {n_proc - 1}] for "
            f"distributed.num_processes = {n_proc}, got {pid}."
        )
    b, mesh = data.batch_size, config.get("mesh", {})
    data_axis = mesh.get("data", -1)
    if data_axis == -1:
        data_axis = len(jax.devices()) // max(mesh.get("model", 1), 1) if devices else 0
    if data_axis >= 1 and b % data_axis:
        raise ValueError(f"`data.batch_size`: {b} must divide by the mesh data axis size {data_axis}.")
    ev, tr = config.get("eval", {}), config.train
    if ev.get("final_probes", True) and ev.get("knn_k", 20) < 1:
        raise ValueError(f"eval.knn_k: expected an integer >= 1 with eval.final_probes on, got {ev.knn_k!r}.")
    if tr.get("metrics_every", 0) and ev.get("metrics_images", 512) < 1:
        raise ValueError(
            f"eval.metrics_images: expected an integer >= 1 with train.metrics_every = "
            f"{tr.metrics_every} (tracked metrics on), got {ev.metrics_images!r}."
        )
    obj, proj = config.get("objective", {}), config.get("model", {}).get("projector", {})
    k = proj.get("out_dim", 0)
    if obj.get("name") == "wmse" and k and b < k + 1:
        raise ValueError(
            f"`data.batch_size`: W-MSE whitens each view with the covariance of its {k} projector "
            f"outputs (model.projector.out_dim), which needs a batch of at least {k + 1}; got {b}. "
            f"Use data.batch_size >= {k + 1} or model.projector.out_dim <= {b - 1}."
        )
    n = data.get("num_train", 0)
    if n and n < b:
        raise ValueError(
            f"`data.num_train`: {n} examples cannot fill one batch of `data.batch_size` = {b}; "
            "use num_train >= batch_size (0: the whole split)."
        )
    probe_train = min(ev.get("max_train", math.inf), data.get("num_train", 0) or math.inf)
    if ev.get("final_probes", True) and ev.get("knn_k", 20) > probe_train:
        raise ValueError(
            f"eval.knn_k: {ev.knn_k} neighbours cannot be found among the kNN probe's "
            f"{probe_train} training examples (eval.max_train = {ev.get('max_train')}, data.num_train = "
            f"{data.get('num_train', 0)}); use eval.knn_k <= {probe_train} or more examples."
        )
    if data.get("shapes_max_angle_deg", None) is not None and data.name != "shapes":
        raise ValueError(
            f"`data.shapes_max_angle_deg` sets the nuisance rotations of the 'shapes' set; the data set "
            f"is {data.name!r}: leave it None."
        )
    _check_memory(data)
    embedded = _data.DATASETS[data.name].source == "embedded"
    if embedded and data.get("data_dir", ""):
        raise ValueError(f"`data.data_dir`: {data.name!r} is embedded (no files are read); leave it ''.")
    if embedded and data.get("stream", False):
        raise ValueError(f"`data.stream`: {data.name!r} is embedded and held in memory; streaming reads tfds sets.")


#: Training examples of each data set's train split (the in-memory feed holds them all; ``shapes``: the default
#: ``num_examples``), for the memory bound of ``_check_memory``.
_TRAIN_EXAMPLES = {
    "shapes": 10_000,
    "digits": 1_438,
    "cifar10": 50_000,
    "cifar100": 50_000,
    "stl10": 5_000,
    "imagenette": 9_469,
    "imagenet2012": 1_281_167,
}


def host_memory_bytes() -> int:
    """The host's physical memory in bytes (``os.sysconf``), the limit ``_check_memory`` states."""
    return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))


def _check_memory(data) -> None:
    """Refuse ``data.image_size`` when the in-memory feed's train split, resized, cannot fit in host memory:
    ``n * image_size^2 * 3`` bytes (``uint8`` RGB; ``n`` = ``data.num_train`` or the split's size) above
    :func:`host_memory_bytes`. A streamed set (``data.stream``) holds only ``eval.max_train`` images, not checked."""
    if data.get("stream", False):
        return
    side = data.get("image_size") or _data.DATASETS[data.name].image_size or 0
    n = data.get("num_train", 0) or _TRAIN_EXAMPLES.get(data.name, 0)
    need, limit = n * side * side * 3, host_memory_bytes()
    if need > limit:
        raise ValueError(
            f"`data.image_size`: {side} px would make the {n} training images of {data.name!r} "
            f"{need / 2**30:.3g} GiB in memory, more than this host's {limit / 2**30:.3g} GiB; "
            "use a smaller image_size (or fewer data.num_train)."
        )
