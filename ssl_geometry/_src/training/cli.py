"""Train an SSL model from a config file; resume from ``--workdir`` when run again.

Usage::

    python -m ssl_geometry.train --config experiments/configs/tiny.py --workdir /tmp/tiny \\
        [--config.train.steps=200] [--config.objective.name=byol] ...

``--config`` is a Python file with ``get_config()`` returning an
``ml_collections.ConfigDict`` (``path.py:arg`` passes ``arg`` to ``get_config``);
``--config.a.b=value`` overrides a field (``ml_collections.config_flags``: the
value is parsed to the field's type; unknown fields are an error). The run writes
``<workdir>/metrics.jsonl`` (one JSON record per log step, per tracked-metric
evaluation and a final ``"event": "final"`` record with the offline probes) and
orbax checkpoints under ``<workdir>/checkpoints/`` every
``train.checkpoint_every`` steps (keeping ``train.keep_checkpoints``); a second
run on the same workdir restores the newest readable step (parameters, optimiser
and objective state, RNG key, data position) and continues.

The workdir is guarded (:mod:`ssl_geometry.trainer`): it must be a writable
directory; a lock file keeps a second run out (a stale lock of a dead process is
taken over); each checkpoint stores the trajectory-defining config fields and the
state's shapes, and a resume under a different config is refused naming the fields
(``train.allow_config_change=True`` continues anyway when the shapes match, recording
an ``"event": "config_change"`` record); logging/evaluation/checkpoint cadence, the
probes and process set-up may always change. A damaged newest checkpoint is moved to
``checkpoints.damaged/`` and the previous step used; ``metrics.jsonl`` is cut back to
the restored step; a finished workdir reports "already complete" and writes nothing.

The config fields (see ``experiments/configs/tiny.py`` for a complete example):

* ``seed``, ``dtype`` (``"float32"`` | ``"float64"``);
* ``data``: ``name``, ``image_size``, ``data_dir``, ``num_train``, ``num_test`` (see
  :func:`load_dataset`; ``0`` / ``""`` for the data set's defaults), ``batch_size`` (global),
  ``stream`` (read a tfds set with tf.data, per-host shards, instead of from memory;
  :mod:`ssl_geometry.trainer`), ``shuffle_buffer`` (streaming);
* ``augment``: ``name`` in :data:`AUGMENTS`;
* ``model``: ``backbone`` (name in :data:`BACKBONES`) and ``backbone_kwargs``;
  ``projector`` / ``predictor`` :func:`ssl_geometry.heads.mlp` arguments
  (``hidden``, ``out_dim``, ``activation``, ``batch_norm``, ``final_batch_norm``,
  ``bias``, ``scale``);
* ``objective``: ``name`` and the constants of :func:`ssl_geometry.objectives.make_objective`;
* ``optimizer``: see :func:`ssl_geometry.trainer.make_optimizer` (+ ``probe_lr``);
* ``train``: ``steps``, ``log_every``, ``metrics_every``, ``checkpoint_every``,
  ``keep_checkpoints``, ``progress`` (tqdm bar), ``tensorboard``, ``stop_after`` (end this
  invocation at that step, checkpointed; 0: off), ``allow_config_change``;
* ``eval``: ``max_train``, ``max_test``, ``knn_k``, ``ridge_l2``, ``rotation`` (run the
  rotation probe), ``rotation_epochs``, ``metrics_images`` (test images for the
  tracked metrics of :func:`ssl_geometry.trainer.make_eval_metrics`);
* ``mesh``: ``data``, ``model``, ``min_model_dim``;
* ``distributed``: ``initialize``, ``coordinator_address``, ``num_processes``, ``process_id``,
  ``cpu_collectives`` (``"gloo"``); see ``docs/multihost.md``.
"""
from __future__ import annotations

import math
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from ssl_geometry._src.ssl.augment import pipelines as _aug
from ssl_geometry._src.models import backbones as _bb
from ssl_geometry._src.training import checkpoint as ckpt
from ssl_geometry._src.ssl import data as _data
from ssl_geometry._src.models import heads as _heads
from ssl_geometry._src.ssl import objectives as _obj
from ssl_geometry._src.training import probes as _probes
from ssl_geometry._src.training import trainer as _tr
from ssl_geometry._src.training import feed as _feed
from ssl_geometry._src.training import workdir as _wd
from ssl_geometry._src.checks import check_choice

__all__ = ["BACKBONES", "AUGMENTS", "DTYPES", "load_dataset", "build_augment", "augment_config", "build_backbone", "build_head", "build_objective",
           "validate_config", "evaluate", "init_distributed", "train", "parse_args", "main"]

BACKBONES = ("mlp", "small_cnn", "resnet18_cifar", "resnet50", "vit_tiny", "vit_small16")
AUGMENTS = ("none", "crop_flip", "simsiam_cifar", "simclr_cifar", "simclr_imagenet", "simclr_custom")
DTYPES = {"float32": jnp.float32, "float64": jnp.float64}


# ----------------------------------------------------------------------------- data


def load_dataset(name: str, split: str, *, image_size: int | None = None, num_examples: int | None = None,
                 data_dir: str | None = None):
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


# ----------------------------------------------------------------------------- builders


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
        raise ValueError(f"augment.name={name!r} needs RGB images; the data set has {image_shape[-1]} channel(s). "
                         "Use 'crop_flip'.")
    if name == "simclr_custom":
        conf = augment_config(cfg)
    else:
        conf = _aug.SIMCLR_CIFAR if name == "simclr_cifar" else _aug.SIMCLR_IMAGENET
    return lambda key, x: _aug.two_views(key, x, _aug.simclr_augment, config=conf)


def augment_config(cfg) -> _aug.AugmentConfig:
    """The :class:`~ssl_geometry.augment.AugmentConfig` of an ``augment`` section (every field but ``name``;
    lists become tuples). An unknown field raises ``ValueError`` naming it."""
    fields = {k: (tuple(v) if isinstance(v, (list, tuple)) else v) for k, v in dict(cfg).items() if k != "name"}
    unknown = sorted(set(fields) - set(_aug.AugmentConfig._fields))
    if unknown:
        raise ValueError(f"`augment` has field(s) {unknown} that AugmentConfig does not define; expected a subset of "
                         f"{list(_aug.AugmentConfig._fields)}.")
    return _aug.AugmentConfig(**fields)


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
    if name in _obj.PREDICTOR_METHODS:
        predictor = build_head(config.model.predictor, projector.out_dim, dtype, projector.out_dim)
    for key in ("vicreg_coeffs", "dino_temps"):
        if key in ocfg:
            ocfg[key] = tuple(ocfg[key])
    return _obj.make_objective(name, backbone, projector, predictor, augment=build_augment(config.augment, image_shape),
                               total_steps=total_steps, **ocfg)


def validate_config(config) -> None:
    """Raise ``ValueError`` naming the field for values the trainer cannot run with."""
    check_choice(config.dtype, "dtype", tuple(DTYPES))
    for field in ("steps", "log_every", "checkpoint_every", "keep_checkpoints"):
        v = config.train[field]
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"`train.{field}` must be a positive int; got {v!r}.")
    stop = config.train.get("stop_after", 0)
    if isinstance(stop, bool) or not isinstance(stop, int) or stop < 0:
        raise ValueError(f"`train.stop_after` must be an int >= 0 (0: off); got {stop!r}.")
    if not isinstance(config.train.metrics_every, int) or config.train.metrics_every < 0:
        raise ValueError(f"`train.metrics_every` must be an int >= 0 (0: off); got {config.train.metrics_every!r}.")
    b = config.data.batch_size
    if not isinstance(b, int) or b < 2:
        raise ValueError(f"`data.batch_size` must be an int >= 2 (batch statistics); got {b!r}.")
    n_dev = len(jax.devices())
    data_axis = config.mesh.data if config.mesh.data != -1 else n_dev // max(config.mesh.model, 1)
    if isinstance(data_axis, int) and data_axis >= 1 and b % data_axis:
        raise ValueError(f"`data.batch_size` {b} must divide by the mesh data axis size {data_axis}.")
    if config.dtype == "float64" and not jax.config.read("jax_enable_x64"):
        raise ValueError("`dtype='float64'` needs jax_enable_x64 (set JAX_ENABLE_X64=1).")


# ----------------------------------------------------------------------------- evaluation


def _apply_in_batches(fn, params, obj_state, images, batch_size=512):
    out = [np.asarray(fn(params, obj_state, jnp.asarray(images[i:i + batch_size])))
           for i in range(0, len(images), batch_size)]
    return np.concatenate(out, 0)


def evaluate(objective, params, obj_state, train_data, test_data, cfg, *, key=None) -> dict:
    """Offline probes on frozen backbone features and projector outputs.

    Ridge (closed form) and cosine kNN on ``backbone`` and ``head`` outputs of up to
    ``cfg.max_train`` / ``cfg.max_test`` images; with ``cfg.rotation`` also the
    rotation probe (linear and MLP) on both.
    """
    (xtr, ytr), (xte, yte) = train_data, test_data
    xtr, ytr = xtr[: cfg.max_train], ytr[: cfg.max_train]
    xte, yte = xte[: cfg.max_test], yte[: cfg.max_test]
    feat = jax.jit(objective.features)
    emb = jax.jit(objective.embed)
    out = {}
    for where, fn in (("backbone", feat), ("head", emb)):
        ftr = _apply_in_batches(fn, params, obj_state, xtr)
        fte = _apply_in_batches(fn, params, obj_state, xte)
        out[f"{where}/ridge_acc"] = _probes.ridge_probe(ftr, ytr, fte, yte, l2=cfg.ridge_l2)["acc"]
        out[f"{where}/knn_acc"] = _probes.knn_probe(ftr, ytr, fte, yte, k=min(cfg.knn_k, len(ftr)))["acc"]
        if cfg.get("rotation", False):
            if xtr.shape[1] != xtr.shape[2]:
                raise ValueError("eval.rotation needs square images.")
            r = _probes.rotation_probe(lambda x, fn=fn: fn(params, obj_state, x), xtr, xte,
                                       epochs=cfg.get("rotation_epochs", 5), key=key)
            out[f"{where}/rotation_linear"] = r["linear"]
            out[f"{where}/rotation_mlp"] = r["mlp"]
    return out


# ----------------------------------------------------------------------------- training


def init_distributed(config) -> None:
    """``jax.distributed.initialize`` from ``config.distributed`` when ``initialize`` is set
    (empty fields are left to JAX's cluster auto-detection: TPU pods, SLURM, Open MPI).
    On CPU the collectives go over gloo (``jax_cpu_collectives_implementation``)."""
    dist = config.get("distributed", None)
    if dist is None or not dist.get("initialize", False):
        return
    kw = {}
    if dist.get("coordinator_address"):
        kw["coordinator_address"] = dist.coordinator_address
    if dist.get("num_processes", 0) > 0:
        kw["num_processes"] = int(dist.num_processes)
    if dist.get("process_id", -1) >= 0:
        kw["process_id"] = int(dist.process_id)
    if dist.get("cpu_collectives", "gloo"):
        jax.config.update("jax_cpu_collectives_implementation", dist.get("cpu_collectives", "gloo"))
    if not jax.distributed.is_initialized():
        jax.distributed.initialize(**kw)


def _checkpoint_meta(config, state, position) -> dict:
    return {"data_position": position, "seed": int(config.seed), "config": _wd.config_record(config),
            "state_signature": _wd.state_signature(state)}


def _final_record(workdir) -> dict | None:
    recs = [r for r in _tr.read_metrics(workdir) if r.get("event") == "final"] \
        if (pathlib.Path(workdir) / "metrics.jsonl").exists() else []
    return recs[-1] if recs else None


def _resume(run: dict, config, workdir, verbose: bool):
    """Restore the newest readable checkpoint into ``run`` (state, start step, data position);
    refuses a mismatched config (see :func:`ssl_geometry.trainer.check_resume`)."""
    allow = bool(config.train.get("allow_config_change", False))
    meta = ckpt.latest_meta(run["mngr"])
    if meta is not None:  # refuse a different run before orbax fails on mismatched shapes
        _wd.check_resume(meta, config, run["state"], allow_config_change=allow)
    restored = ckpt.restore_latest(run["mngr"], run["state"])
    if restored is None:
        if jax.process_index() == 0:
            _wd.truncate_metrics(workdir / "metrics.jsonl", 0)
        return None
    changed = _wd.check_resume(restored.meta, config, run["state"], allow_config_change=allow)
    steps = int(config.train.steps)
    if restored.step > steps:
        raise ValueError(f"workdir {workdir} holds a checkpoint at step {restored.step}, beyond `train.steps` = "
                         f"{steps}; set train.steps >= {restored.step} or use a fresh --workdir.")
    run.update(state=restored.state, start=restored.step, position=restored.meta.get("data_position"))
    if jax.process_index() == 0:
        dropped = _wd.truncate_metrics(workdir / "metrics.jsonl", restored.step)
        if changed:
            run["logger"].write({"step": restored.step, "event": "config_change",
                                 "fields": {k: {"saved": a, "now": b} for k, (a, b) in changed.items()}})
        if verbose:
            print(f"resumed from checkpoint step {restored.step}"
                  + (f" (dropped {dropped} metrics records written after it)" if dropped else ""), flush=True)
    return restored.step


def _log_step(run, config, metrics, done, clock) -> dict:
    rec = {k: float(v) for k, v in jax.device_get(metrics).items()}
    now = time.perf_counter()
    if done > clock["s_mark"]:
        clock["t_train"] += now - clock["t_mark"]
        clock["n_images"] += (done - clock["s_mark"]) * run["batch_size"]
        rec["images_per_s"] = (done - clock["s_mark"]) * run["batch_size"] / (now - clock["t_mark"])
    clock["t_mark"], clock["s_mark"] = now, done
    rec["step"] = done
    if not math.isfinite(rec["loss"]):
        raise FloatingPointError(f"non-finite SSL loss {rec['loss']} at step {done}; the last checkpoint "
                                 f"is step {run['mngr'].latest_step()}.")
    run["logger"].write(rec)
    return rec


def _run_steps(run: dict, config, verbose: bool) -> tuple[dict, dict, int]:
    """The training loop from ``run["start"]`` to ``train.steps`` (or ``train.stop_after``)."""
    steps, mngr, tc = int(config.train.steps), run["mngr"], config.train
    stop = int(tc.get("stop_after", 0) or 0)
    end = min(steps, stop) if 0 < stop else steps
    bar = None
    if verbose and tc.get("progress", True) and jax.process_index() == 0:
        from tqdm.auto import tqdm  # noqa: PLC0415

        bar = tqdm(total=steps, initial=run["start"], desc=f"{config.objective.name}", dynamic_ncols=True)
    last, state, feed = {}, run["state"], run["feed"]
    clock = {"t_mark": None, "s_mark": run["start"], "n_images": 0, "t_train": 0.0}
    for s in range(run["start"], end):
        state, metrics = run["step_fn"](state, feed.batch(s))
        done = s + 1
        if clock["t_mark"] is None:  # first step includes compilation: start the clock after it
            jax.block_until_ready(metrics)
            clock["t_mark"], clock["s_mark"] = time.perf_counter(), done
        if done % tc.log_every == 0 or done == end:
            last = _log_step(run, config, metrics, done, clock)
            if bar is not None:
                bar.set_postfix(loss=f"{last['loss']:.4f}", probe=f"{last['probe_acc']:.3f}",
                                img_s=f"{last.get('images_per_s', float('nan')):.0f}")
        if tc.metrics_every and (done % tc.metrics_every == 0 or done == steps):
            em = jax.device_get(run["eval_fn"](state["params"], state["obj_state"], run["eval_images"]))
            run["logger"].write({"step": done, "event": "tracked", **{k: float(v) for k, v in em.items()}})
            clock["t_mark"] = time.perf_counter()
        if done % tc.checkpoint_every == 0 or done == end:
            ckpt.save(mngr, done, state, _checkpoint_meta(config, state, feed.position(done)))
            mngr.wait_until_finished()
            if verbose and jax.process_index() == 0:
                msg = f"checkpoint saved: step {done}"
                (bar.write(msg) if bar is not None else print(msg, flush=True))
            clock["t_mark"] = time.perf_counter()
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    ips = clock["n_images"] / clock["t_train"] if clock["t_train"] > 0 else float("nan")
    return state, last, ips


def _setup(config, workdir) -> dict:
    """Data, objective, optimiser, mesh, fresh placed state, checkpoint manager and logger."""
    seed, steps, batch_size = int(config.seed), int(config.train.steps), int(config.data.batch_size)
    feed = _feed.make_feed(config)
    objective = build_objective(config, feed.image_shape, steps)
    tx, sched = _tr.make_optimizer(config.optimizer, steps, batch_size,
                                   probe_lr=float(config.optimizer.get("probe_lr", 1e-3)))
    mesh = _tr.make_mesh(config.mesh.data, config.mesh.model)
    mmd = int(config.mesh.get("min_model_dim", 1024))
    state = _tr.init_train_state(objective, tx, jax.random.PRNGKey(seed), feed.num_classes)
    state = _tr.place_state(state, mesh, min_model_dim=mmd)
    feed.attach(mesh)
    mngr = ckpt.manager(workdir / "checkpoints", max_to_keep=int(config.train.keep_checkpoints))
    n_eval = min(len(feed.test[0]), int(config.eval.get("metrics_images", 512)))
    return {"feed": feed, "objective": objective, "tx": tx, "sched": sched, "mesh": mesh, "mmd": mmd,
            "state": state, "mngr": mngr, "start": 0, "batch_size": batch_size,
            "eval_images": np.asarray(feed.test[0][:n_eval]),  # numpy: valid under multi-process jit
            "eval_fn": jax.jit(_tr.make_eval_metrics(objective)),
            "logger": _tr.MetricLogger(workdir, tensorboard=bool(config.train.get("tensorboard", False)))}


def train(config, workdir, *, verbose: bool = True) -> dict:
    """Train ``config`` in ``workdir`` (resuming from its newest checkpoint); return a summary.

    The summary has ``step``, ``resumed_from`` (``None`` for a fresh start),
    ``last`` (the last logged metrics), ``final`` (offline probe accuracies),
    ``images_per_s`` (training throughput over this invocation, compilation
    excluded), ``status`` (``"finished"``, ``"stopped"`` at ``train.stop_after``, or
    ``"already_complete"``: the workdir's run had finished; nothing is recomputed or
    logged again) and ``state``. The workdir is checked to be a writable directory
    and locked against a second run (:mod:`ssl_geometry.trainer`); a
    damaged newest checkpoint is moved aside and the previous one used.
    Raises ``FloatingPointError`` when the loss becomes non-finite.
    """
    init_distributed(config)
    validate_config(config)
    workdir = _wd.prepare(workdir)
    with _wd.Lock(workdir, enabled=jax.process_index() == 0):
        return _train_locked(config, workdir, verbose)


def _train_locked(config, workdir, verbose):
    steps = int(config.train.steps)
    run = _setup(config, workdir)
    resumed_from = _resume(run, config, workdir, verbose)
    final = _final_record(workdir) if resumed_from == steps else None
    if final is not None:
        run["mngr"].close()
        if verbose and jax.process_index() == 0:
            print(f"already complete: {workdir} holds a finished run of {steps} steps; nothing to do.", flush=True)
        final = {k: v for k, v in final.items() if k not in ("step", "event")}
        return {"step": steps, "resumed_from": resumed_from, "last": {}, "final": final, "images_per_s": float("nan"),
                "state": run["state"], "status": "already_complete"}
    run["feed"].seek(run["start"], run.pop("position", None))
    run["step_fn"] = _tr.jit_train_step(_tr.make_train_step(run["objective"], run["tx"], run["sched"]), run["mesh"],
                                        run["state"], min_model_dim=run["mmd"])
    state, last, ips = _run_steps(run, config, verbose)
    run["mngr"].wait_until_finished()
    run["mngr"].close()
    done = int(jax.device_get(state["step"]))
    if done < steps:
        return {"step": done, "resumed_from": resumed_from, "last": last, "final": {}, "images_per_s": ips,
                "state": state, "status": "stopped"}
    final = evaluate(run["objective"], state["params"], state["obj_state"], run["feed"].eval_train, run["feed"].test,
                     config.eval, key=jax.random.PRNGKey(int(config.seed)))
    run["logger"].write({"step": steps, "event": "final", **final})
    return {"step": steps, "resumed_from": resumed_from, "last": last, "final": final, "images_per_s": ips,
            "state": state, "status": "finished"}


# ----------------------------------------------------------------------------- CLI


def parse_args(argv):
    """``(config, workdir)`` from ``argv`` (``argv[0]`` is the program name).

    Uses a private ``absl.flags.FlagValues`` with ``ml_collections.config_flags``,
    so it can be called repeatedly (tests) without touching global flags.
    """
    from absl import flags  # noqa: PLC0415
    from ml_collections import config_flags  # noqa: PLC0415

    fv = flags.FlagValues()
    config_flags.DEFINE_config_file("config", None, "Training config file (get_config()).", flag_values=fv,
                                    lock_config=True, sys_argv=list(argv))
    flags.DEFINE_string("workdir", None, "Directory for metrics.jsonl and checkpoints.", flag_values=fv)
    fv(list(argv))
    if fv["config"].value is None:
        raise flags.IllegalFlagValueError("--config is required (a path to a config file with get_config()).")
    if not fv["workdir"].value:
        raise flags.IllegalFlagValueError("--workdir is required (where metrics and checkpoints go).")
    return fv["config"].value, fv["workdir"].value


def main(argv=None) -> int:
    """Run the CLI on ``argv`` (default ``sys.argv``) and return the exit status (``--help``: usage, 0)."""
    argv = sys.argv if argv is None else argv
    if any(a in ("-h", "--help", "-help", "--helpfull") for a in argv[1:]):
        print(__doc__)
        return 0
    try:
        config, workdir = parse_args(argv)
    except Exception as err:  # absl flag errors: print a clear message, not a traceback
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        summary = train(config, workdir)
    except (_wd.WorkdirLockedError, ValueError, NotADirectoryError, PermissionError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if jax.process_index() != 0:
        return 0
    if summary["status"] == "stopped":
        print(f"stopped at step {summary['step']} (train.stop_after); run again to continue.")
        return 0
    if summary["status"] == "finished" and summary["last"]:
        print(f"final step {summary['step']}: loss {summary['last']['loss']:.4f}, "
              f"throughput {summary['images_per_s']:.1f} images/s")
    elif summary["status"] == "finished":
        print(f"final step {summary['step']} (restored; no training step in this invocation)")
    for k, v in sorted(summary["final"].items()):
        print(f"  {k}: {v:.4f}" if isinstance(v, float) else f"  {k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
