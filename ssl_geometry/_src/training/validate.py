"""The one check of a whole training config, before anything is built.

Implementation of :func:`ssl_geometry.trainer.validate_config`. Every field the trainer reads has one
check: an entry in ``FIELDS`` (dotted name -> check), or, for ``objective.<name>``, the :class:`Hyper` of that
name in the objective table (``ssl_geometry/_src/ssl/losses/registry.py``; :func:`field_check` finds either).
A field of the config that none names, other than further constants of
:func:`ssl_geometry.objectives.make_objective` (which refuses unknown ones by name) and the fields of an
``augment`` section of ``name = "simclr_custom"``, is refused, so no input is silently ignored.
``model.backbone_kwargs`` is handed whole to the backbone's constructor (its fields depend on the
backbone), which checks it.
"""

from __future__ import annotations

import math
import os
import pathlib

import jax

from ssl_geometry._src.fields import POSITIVE, boolean, choice, fail, integer, number, sequence, text
from ssl_geometry._src.models.activations import ACTIVATIONS
from ssl_geometry._src.ssl import data as _data
from ssl_geometry._src.ssl.augment import pipelines as _aug
from ssl_geometry._src.ssl.losses.registry import OBJECTIVES, hypers, objective_spec
from ssl_geometry._src.training.builders import AUGMENTS, BACKBONES, DTYPES
from ssl_geometry._src.training.optimizer import OPTIMIZERS, SCHEDULES

__all__ = ["FIELDS", "field_check", "validate_config"]


def _data_dir(field, v):
    if not isinstance(v, str) or (v and not pathlib.Path(v).expanduser().is_dir()):
        fail(field, "'' (tfds' default) or an existing directory", v)


def _address(field, v):
    host, _, port = v.rpartition(":") if isinstance(v, str) else ("", "", "")
    if not isinstance(v, str) or (v and not (host and port.isdigit())):
        fail(field, "'' (auto-detect) or 'host:port'", v)


def _head(prefix):
    return {
        f"{prefix}.hidden": sequence(integer(1)),
        f"{prefix}.out_dim": integer(1),
        f"{prefix}.activation": choice(ACTIVATIONS),
        f"{prefix}.batch_norm": boolean,
        f"{prefix}.final_batch_norm": boolean,
        f"{prefix}.bias": boolean,
        f"{prefix}.scale": number(0, lo_open=True),
    }


#: Every config field the trainer reads but the objective's hyper-parameters (:func:`field_check`): dotted name ->
#: ``check(field, value)`` raising ``ValueError``.
FIELDS = {
    "seed": integer(0),
    "dtype": choice(DTYPES),
    "expected_runtime": text,
    "data.name": choice(_data.DATASETS),
    "data.image_size": integer(1),
    "data.batch_size": integer(2),
    "data.data_dir": _data_dir,
    "data.num_train": integer(0),
    "data.num_test": integer(0),
    "data.stream": boolean,
    "data.shuffle_buffer": integer(1),
    "data.seed": integer(0),
    "data.shapes_max_angle_deg": lambda f, v: None if v is None else number(0)(f, v),
    "augment.name": choice(AUGMENTS),
    "model.backbone": choice(BACKBONES),
    **_head("model.projector"),
    **_head("model.predictor"),
    "objective.name": choice(OBJECTIVES),  # the table's objectives, read when the check runs
    "optimizer.name": choice(OPTIMIZERS),
    "optimizer.lr": POSITIVE,
    "optimizer.momentum": number(0, 1, hi_open=True),
    "optimizer.weight_decay": number(0),
    "optimizer.nesterov": boolean,
    "optimizer.schedule": choice(SCHEDULES),
    "optimizer.warmup_steps": integer(0),
    "optimizer.lr_batch_scaling": boolean,
    "optimizer.probe_lr": POSITIVE,
    "optimizer.b1": number(0, 1, hi_open=True),
    "optimizer.b2": number(0, 1, hi_open=True),
    "train.steps": integer(1),
    "train.log_every": integer(1),
    "train.metrics_every": integer(0),
    "train.checkpoint_every": integer(1),
    "train.keep_checkpoints": integer(1),
    "train.progress": boolean,
    "train.tensorboard": boolean,
    "train.stop_after": integer(0),
    "train.allow_config_change": boolean,
    "eval.final_probes": boolean,
    "eval.max_train": integer(1),
    "eval.max_test": integer(1),
    "eval.knn_k": integer(0),
    "eval.ridge_l2": number(0),
    "eval.rotation": boolean,
    "eval.rotation_epochs": integer(1),
    "eval.metrics_images": integer(0),
    "mesh.data": integer(1, also=(-1,)),
    "mesh.model": integer(1),
    "mesh.min_model_dim": integer(1),
    "distributed.initialize": boolean,
    "distributed.coordinator_address": _address,
    "distributed.num_processes": integer(0),
    "distributed.process_id": integer(0, also=(-1,)),
    "distributed.cpu_collectives": choice(("gloo", "mpi", "")),
    "distributed.timeout_s": POSITIVE,
}
#: Sections whose whole value is handed to a constructor that checks it.
_OPAQUE = ("model.backbone_kwargs",)


def field_check(field: str):
    """The check of the dotted config ``field``: its ``FIELDS`` entry, or for ``objective.<name>`` the check of
    the objective table's hyper-parameter ``<name>`` (its :class:`~ssl_geometry.objectives.Hyper`, read now, so a
    spec added to the table is checked too); ``None`` when neither names it."""
    if field in FIELDS:
        return FIELDS[field]
    section, _, name = field.partition(".")
    hyper = hypers().get(name) if section == "objective" else None
    return None if hyper is None else hyper.check


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

    Each field is checked by its check (``FIELDS``, or the objective table's ``Hyper``; type and range; no 0-means-default for a
    dimension), then the checks across fields: ``eval.knn_k`` >= 1 when ``eval.final_probes`` is on,
    ``eval.metrics_images`` >= 1 when ``train.metrics_every`` > 0, ``eval.knn_k`` within the kNN probe's
    training examples, a batch above ``model.projector.out_dim`` where the objective's spec asks for one
    (``batch_above_dim``: W-MSE), the batch divides over the mesh's data axis,
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
        check = field_check(field)
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
    _check_batch_above_dim(objective_spec(config.objective.name), b, config.get("model", {}).get("projector", {}))
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


def _check_batch_above_dim(spec, b, projector) -> None:
    """Refuse ``data.batch_size`` ``b`` below ``k + margin`` for ``k = model.projector.out_dim`` when the
    objective's spec sets ``batch_above_dim`` (W-MSE: ``k + 1``), with the spec's reason."""
    above, k = spec.batch_above_dim, projector.get("out_dim", 0)
    if above is not None and k and b < k + above.margin:
        m = above.margin
        raise ValueError(
            f"`data.batch_size`: {above.why.format(k=k)} (model.projector.out_dim), which needs a batch of at least "
            f"{k + m}; got {b}. Use data.batch_size >= {k + m} or model.projector.out_dim <= {b - m}."
        )


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
