"""The authors' SimSiam runs (collapse escape, Hessian tracker) through the one trainer, with per-step tracking.

Shared by :mod:`experiments.collapse_escape_paper` and :mod:`experiments.hessian_tracker`. The model,
objective, augmentation and optimiser are built by the trainer (:func:`ssl_geometry.trainer.build_objective`,
:func:`ssl_geometry.trainer.make_optimizer`) from a config of the shape of
``experiments/configs/simsiam_cifar10.py`` (the paper's recipe); one update is the trainer's
:func:`~ssl_geometry.trainer.make_train_step` and the batch order its
:func:`~ssl_geometry.trainer.batch_indices`. What this module adds is what the authors'
scripts track at every step, computed on the *same* two views the step trains on (the trainer draws
them from ``fold_in(state.rng, state.step)``; :func:`views` redraws them identically), before the update:

* ``std_head`` / ``std_backbone``: ``mean_j std_i (u_i / |u_i|)_j`` over the ``2n`` rows of
  ``cat(u1, u2)`` (projector outputs) / ``cat(z1, z2)`` (backbone features), ``ddof = 1``
  (:func:`ssl_geometry.metrics.normalized_std`; ``F.normalize(...).std(0).mean()`` in the authors' code);
* ``cond_head`` / ``cond_backbone``: the authors' condition number ``lambda_max / max(lambda_min, 1e-7)``
  of the covariance of the L2-normalised rows (:func:`ssl_geometry.metrics.covariance_condition_number`
  with ``eig_floor=1e-7``: with ``2n - 1`` below the width the covariance is singular, so this is
  ``1e7 * lambda_max``, not a condition number);
* ``rel_update_projector`` / ``rel_update_backbone``: the authors' "relative update size"
  ``lr * |grad_g| / (|theta_g| + 1e-7)`` (Frobenius norms over the group's parameters, gradient
  *before* momentum, read off the trainer's SGD momentum buffer, so no second backward pass), next
  to the trainer's actual ``|Delta theta| / |theta|`` per group.

The tracked step is the trainer's step plus one forward pass of backbone and projector on the two
views (the trainer's step returns no head outputs).
"""
from __future__ import annotations

import functools
import json
import time
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from experiments.configs import simsiam_cifar10
from ssl_geometry import metrics as _metrics
from ssl_geometry import trainer as _trainer

__all__ = ["trainer_config", "build", "views", "train_run", "load_images", "paper_condition_number", "Run"]

#: The authors' floor on the smallest covariance eigenvalue (``torch.clamp(eigenvalues[0], min=1e-7)``).
PAPER_EIG_FLOOR = 1e-7


def trainer_config(*, activation: str, batch_norm: bool, lr: float, batch_size: int, projector_scale: float,
                   backbone: str = "resnet18_cifar", backbone_kwargs=None, hidden: int = 2048, out_dim: int = 2048,
                   pred_hidden: int = 512, steps: int = 1) -> ml_collections.ConfigDict:
    """The trainer config of one run: ``simsiam_cifar10.get_config(activation)`` with these fields set.

    ``batch_norm`` switches BatchNorm on every layer of projector and predictor (the authors'
    ``ProjectionHead(use_bn=...)``); their ``linear`` head never has BatchNorm (nor an activation).
    """
    c = simsiam_cifar10.get_config(activation)
    bn = bool(batch_norm) and activation != "linear"
    c.model.backbone = backbone
    c.model.backbone_kwargs = dict(backbone_kwargs or {})
    c.model.projector.update({"hidden": (hidden,), "out_dim": out_dim, "batch_norm": bn, "final_batch_norm": bn,
                              "scale": float(projector_scale)})
    c.model.predictor.update({"hidden": (pred_hidden,), "out_dim": out_dim, "batch_norm": bn, "final_batch_norm": bn})
    c.optimizer.lr = float(lr)
    c.data.batch_size = int(batch_size)
    c.train.steps = int(steps)
    return c


class Run(NamedTuple):
    """The trainer's pieces for one trainer config plus the jitted tracked step."""

    objective: object
    backbone: object
    projector: object
    predictor: object
    augment: Callable
    tx: object
    step: Callable          # jitted: (state, batch) -> (state, trainer metrics, tracked observations)
    features: Callable      # jitted: (state, images) -> (z1, z2) backbone features of the step's views
    lr: float


def _config_key(tc) -> str:
    return json.dumps(tc.to_dict(), sort_keys=True, default=str)


def build(tc, image_shape, total_steps: int) -> Run:
    """Build (cached per config) the objective, optimiser and the tracked step for trainer config ``tc``."""
    return _build(_config_key(tc), tuple(image_shape), int(total_steps))


@functools.lru_cache(maxsize=8)
def _build(key: str, image_shape, total_steps):
    tc = ml_collections.ConfigDict(json.loads(key))
    dtype = _trainer.DTYPES[tc.dtype]
    objective = _trainer.build_objective(tc, image_shape, total_steps)
    backbone = _trainer.build_backbone(tc.model, image_shape, dtype)
    projector = _trainer.build_head(tc.model.projector, backbone.out_dim, dtype)
    predictor = _trainer.build_head(tc.model.predictor, projector.out_dim, dtype)
    augment = _trainer.build_augment(tc.augment, image_shape)
    tx, sched = _trainer.make_optimizer(tc.optimizer, total_steps, int(tc.data.batch_size),
                                        probe_lr=float(tc.optimizer.probe_lr))
    train_step = _trainer.make_train_step(objective, tx, sched)
    lr = float(tc.optimizer.lr)

    def online(params, obj_state, x):
        def run(model, name, inp):
            y, _ = model.apply({"params": params[name], **obj_state[name]}, inp, train=True)
            return y
        z = run(backbone, "backbone", x)
        u = run(projector, "projector", z)
        return z, u

    def step_views(state, images):
        return views(augment, state, images, jax.tree_util.tree_leaves(state["params"]["backbone"])[0].dtype)

    momentum = float(tc.optimizer.momentum)

    def observe(state, batch):
        x1, x2 = step_views(state, batch["images"])
        params, obj_state = state["params"], state["obj_state"]
        z1, u1 = online(params, obj_state, x1)
        z2, u2 = online(params, obj_state, x2)
        out = {}
        for name, rep in (("head", jnp.concatenate([u1, u2])), ("backbone", jnp.concatenate([z1, z2]))):
            zn = rep / jnp.maximum(jnp.linalg.norm(rep, axis=1, keepdims=True), 1e-12)
            out[f"std_{name}"] = _metrics.normalized_std(zn)
            out[f"cond_{name}"] = paper_condition_number(zn)
        return out

    def paper_update_sizes(old, new):
        """The authors' ``lr |g| / (|theta| + 1e-7)`` per module, the gradient ``g`` read off the SGD
        momentum buffer: ``trace_t = g_t + mu trace_{t-1}`` (optax ``sgd``), so ``g_t = trace_t - mu trace_{t-1}``;
        without momentum ``g_t = -(theta_{t+1} - theta_t) / lr``."""
        out = {}
        for g in ("projector", "backbone"):
            if momentum:
                t_old, t_new = _trace(old["opt_state"])[g], _trace(new["opt_state"])[g]
                grad = jax.tree_util.tree_map(lambda a, b: b - momentum * a, t_old, t_new)
            else:
                grad = jax.tree_util.tree_map(lambda a, b: (a - b) / lr, old["params"][g], new["params"][g])
            gn = jnp.sqrt(sum(jnp.sum(jnp.square(a)) for a in jax.tree_util.tree_leaves(grad)))
            wn = jnp.sqrt(sum(jnp.sum(jnp.square(a)) for a in jax.tree_util.tree_leaves(old["params"][g])))
            out[f"rel_update_{g}"] = lr * gn / (wn + 1e-7)
        return out

    @jax.jit
    def step(state, batch):
        obs = observe(state, batch)
        new_state, m = train_step(state, batch)
        obs.update(paper_update_sizes(state, new_state))
        return new_state, m, obs

    @jax.jit
    def features(state, images):
        x1, x2 = step_views(state, images)
        return online(state["params"], state["obj_state"], x1)[0], online(state["params"], state["obj_state"], x2)[0]

    return Run(objective, backbone, projector, predictor, augment, tx, step, features, lr)


def paper_condition_number(zn):
    """The authors' ``lambda_max / max(lambda_min, 1e-7)`` of the covariance of ``zn`` (``(m, k)``).

    The same number as ``metrics.covariance_condition_number(zn, eig_floor=1e-7)``, computed from the
    smaller of the ``(k, k)`` covariance and the ``(m, m)`` centred Gram matrix ``Z_c Z_c^T / (m - 1)``
    (same non-zero eigenvalues). When ``m - 1 < k`` the covariance has rank ``<= m - 1 < k``, so its
    smallest eigenvalue is 0 (clamped to 1e-7) and only ``lambda_max`` is needed: the Gram route then
    costs an ``(m, m)`` instead of a ``(k, k)`` eigendecomposition (1024 vs 2048 at the paper's sizes).
    """
    m, k = zn.shape
    if m - 1 >= k:
        return _metrics.covariance_condition_number(zn, eig_floor=PAPER_EIG_FLOOR)
    zc = zn - jnp.mean(zn, axis=0)
    lam_max = jnp.maximum(jnp.linalg.eigvalsh(zc @ zc.T / (m - 1))[-1], 0.0)
    return lam_max / PAPER_EIG_FLOOR


def _trace(opt_state):
    """The momentum buffer (``optax.TraceState.trace``, a params-shaped tree) inside the trainer's optimiser state."""
    found = [x for x in jax.tree_util.tree_leaves(opt_state, is_leaf=lambda x: isinstance(x, optax.TraceState))
             if isinstance(x, optax.TraceState)]
    if len(found) != 1:
        raise ValueError(f"expected one SGD momentum buffer in the optimiser state; found {len(found)}.")
    return found[0].trace


def views(augment, state, images, dtype):
    """The two views the trainer's step ``state["step"]`` trains on: ``augment(fold_in(rng, step), images)``."""
    x = images.astype(dtype) / jnp.asarray(255.0, dtype) if jnp.issubdtype(images.dtype, jnp.integer) else images
    return augment(jax.random.fold_in(state["rng"], state["step"]), x)


def load_images(data_cfg, *, seed: int, dry_run: bool, dry_examples: int):
    """``(images uint8 NHWC, labels)`` of the training split named by ``data_cfg``.

    tfds sets (``cifar10``...) are read from ``data_cfg.data_dir``; under ``dry_run`` they come from
    ``tfds.testing.mock_data`` (random images of the data set's real shape, ``dry_examples`` of them),
    so the paper's path runs without the data.
    """
    from ssl_geometry import data as _data

    kw = {"image_size": data_cfg.image_size or None, "data_dir": data_cfg.data_dir or None}
    if dry_run and _data.DATASETS[data_cfg.name].source != "embedded":
        import tensorflow_datasets as tfds

        with tfds.testing.mock_data(num_examples=int(dry_examples)):
            ds = _data.load(data_cfg.name, "train", seed=seed, **kw)
    else:
        ds = _data.load(data_cfg.name, "train", seed=seed, num_examples=data_cfg.num_train or None, **kw)
    return np.asarray(ds.images), np.asarray(ds.labels, np.int32)


def train_run(run: Run, state, images, labels, *, seed: int, epochs: int, steps_per_epoch: int, batch_size: int,
              before_step: Callable | None = None, label: str = "", timed_steps: int = 4) -> dict:
    """Train ``epochs`` x ``steps_per_epoch`` trainer steps; return per-epoch means of the tracked numbers.

    ``before_step(epoch, i, state, batch)`` is called before step ``i`` of each epoch (the Hessian
    tracker measures there). The tracked numbers stay on the device until the end of each epoch (no
    host sync per step, so the next batch is prepared while the device works). A non-finite loss
    stops the run at the end of its epoch: ``diverged_at_step`` names the first non-finite step and
    the series hold the epochs completed before it -- never NaN-filled series (``state`` is then the
    last, non-finite state). ``step_time_s``: median wall time of steps 2..``timed_steps`` (each
    timed to completion; the first includes compilation and is left out).
    Returns ``{"epochs": {name: [per-epoch mean]}, "diverged_at_step", "state", "label", "step_time_s"}``.
    """
    n = len(images)
    series: dict[str, list] = {}
    times, diverged, step_no = [], None, int(state["step"])
    for ep in range(epochs):
        per, first = [], step_no
        for i in range(steps_per_epoch):
            idx = _trainer.batch_indices(seed, step_no, n, batch_size)
            batch = {"images": jnp.asarray(images[idx]), "labels": jnp.asarray(labels[idx])}
            if before_step is not None:
                before_step(ep, i, state, batch)
            t0 = time.perf_counter()
            state, m, obs = run.step(state, batch)
            if len(times) < timed_steps:
                jax.block_until_ready(m["loss"])
                times.append(time.perf_counter() - t0)
            per.append({"loss": m["loss"], "rel_update_trainer_backbone": m["rel_update/backbone"],
                        "rel_update_trainer_head": m["rel_update/head"], **obs})
            step_no += 1
        per = {k: np.asarray(v, np.float64) for k, v in jax.device_get(
            {k: jnp.stack([r[k] for r in per]) for k in per[0]}).items()} if per else {}
        if per and not np.all(np.isfinite(per["loss"])):
            diverged = first + int(np.argmin(np.isfinite(per["loss"])))
            break
        for k, v in per.items():
            series.setdefault(k, []).append(float(np.mean(v)))
    return {"epochs": series, "diverged_at_step": diverged, "state": state, "label": label,
            "step_time_s": float(np.median(times[1:])) if len(times) > 1 else float("nan")}
