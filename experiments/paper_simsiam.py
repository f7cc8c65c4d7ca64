"""The authors' SimSiam runs (collapse escape, Hessian tracker) through the one run loop, with per-step tracking.

Shared by :mod:`experiments.collapse_escape_paper` and :mod:`experiments.hessian_tracker`. A run is
:func:`ssl_geometry.trainer.train` of a trainer config of the shape of
``experiments/configs/simsiam_cifar10.py`` (the paper's recipe; :func:`trainer_config`): the loop
builds the model, objective, augmentation and optimiser, trains with the trainer's step in the order
:func:`~ssl_geometry.trainer.batch_indices`, and checkpoints into a workdir. What this module adds is
what the authors' scripts track at every step, computed inside the trainer's jitted step (its
``observe`` hook, :func:`build`) on the *same* two views the step trains on (the trainer draws them
from ``fold_in(state.rng, state.step)``; :func:`views` redraws them identically), before the update:

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
views (the trainer's step returns no head outputs). :class:`EpochMeans`, a hook of the run loop
(:mod:`experiments.paper_simsiam_hooks`), averages the numbers per epoch without a host sync per step.
"""

from __future__ import annotations

import contextlib
import functools
import json
import tempfile
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from experiments import projection
from experiments.configs import simsiam_cifar10
from experiments.paper_simsiam_hooks import OBSERVED as OBSERVED
from experiments.paper_simsiam_hooks import BeforeStep
from experiments.paper_simsiam_hooks import Diverged as Diverged
from experiments.paper_simsiam_hooks import EpochMeans as EpochMeans
from ssl_geometry import data as _data
from ssl_geometry import metrics as _metrics
from ssl_geometry import trainer as _trainer

__all__ = [
    "trainer_config",
    "build",
    "views",
    "train_run",
    "load_images",
    "paper_condition_number",
    "Run",
    "EpochMeans",
    "Diverged",
    "OBSERVED",
    "dry_batches",
]

#: The authors' floor on the smallest covariance eigenvalue (``torch.clamp(eigenvalues[0], min=1e-7)``).
PAPER_EIG_FLOOR = 1e-7


def trainer_config(
    *,
    activation: str,
    batch_norm: bool,
    lr: float,
    batch_size: int,
    projector_scale: float,
    backbone: str = "resnet18_cifar",
    backbone_kwargs=None,
    hidden: int = 2048,
    out_dim: int = 2048,
    pred_hidden: int = 512,
    epochs: int = 1,
    steps_per_epoch: int = 1,
    seed: int = 0,
    data=None,
) -> ml_collections.ConfigDict:
    """The trainer config of one run: ``simsiam_cifar10.get_config(activation)`` with these fields set.

    ``batch_norm`` switches BatchNorm on every layer of projector and predictor (the authors'
    ``ProjectionHead(use_bn=...)``); their ``linear`` head never has BatchNorm (nor an activation).
    ``epochs`` x ``steps_per_epoch`` steps; an epoch is one log record (``train.log_every``), one
    checkpoint at the end, no tracked metrics, no final probes (the experiments measure their own).
    ``data``: the experiment's ``data`` section (``name``, ``image_size``, ``data_dir``, ``num_train``);
    ``None`` keeps the recipe's CIFAR-10.
    """
    c = simsiam_cifar10.get_config(activation)
    bn = bool(batch_norm) and activation != "linear"
    c.seed = int(seed)
    c.model.backbone = backbone
    c.model.backbone_kwargs = dict(backbone_kwargs or {})
    c.model.projector.update(
        {
            "hidden": (hidden,),
            "out_dim": out_dim,
            "batch_norm": bn,
            "final_batch_norm": bn,
            "scale": float(projector_scale),
        }
    )
    c.model.predictor.update({"hidden": (pred_hidden,), "out_dim": out_dim, "batch_norm": bn, "final_batch_norm": bn})
    c.optimizer.lr = float(lr)
    c.data.batch_size = int(batch_size)
    if data is not None:
        c.data.update(
            {"name": data.name, "image_size": data.image_size, "data_dir": data.data_dir, "num_train": data.num_train}
        )
    steps = int(epochs) * int(steps_per_epoch)
    c.train.update(
        {
            "steps": steps,
            "log_every": int(steps_per_epoch),
            "metrics_every": 0,
            "checkpoint_every": steps,
            "keep_checkpoints": 1,
            "progress": False,
        }
    )
    with c.unlocked():
        c.eval.final_probes = False
    return c


class Run(NamedTuple):
    """The models of one trainer config, the ``observe`` hook of its tracked step and a feature function."""

    objective: object
    backbone: object
    projector: object
    predictor: object
    augment: Callable
    tx: object
    observe: Callable  # traced into the trainer's step: (state, batch, new_state) -> {name in OBSERVED: scalar}
    features: Callable  # jitted: (state, images) -> (z1, z2) backbone features of the step's views
    lr: float


def _config_key(tc) -> str:
    return json.dumps(tc.to_dict(), sort_keys=True, default=str)


def build(tc, image_shape) -> Run:
    """Build (cached per config) the models, optimiser and the ``observe`` hook for trainer config ``tc``."""
    return _build(_config_key(tc), tuple(image_shape))


@functools.lru_cache(maxsize=8)
def _build(key: str, image_shape):
    tc = ml_collections.ConfigDict(json.loads(key))
    dtype = _trainer.DTYPES[tc.dtype]
    objective = _trainer.build_objective(tc, image_shape, int(tc.train.steps))
    backbone = _trainer.build_backbone(tc.model, image_shape, dtype)
    projector = _trainer.build_head(tc.model.projector, backbone.out_dim, dtype)
    predictor = _trainer.build_head(tc.model.predictor, projector.out_dim, dtype)
    augment = _trainer.build_augment(tc.augment, image_shape)
    tx, _ = _trainer.build_optimizer(tc)
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

    def statistics(state, batch):
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

    def observe(state, batch, new_state):
        return {**statistics(state, batch), **paper_update_sizes(state, new_state)}

    @jax.jit
    def features(state, images):
        x1, x2 = step_views(state, images)
        return online(state["params"], state["obj_state"], x1)[0], online(state["params"], state["obj_state"], x2)[0]

    return Run(objective, backbone, projector, predictor, augment, tx, observe, features, lr)


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
    found = [
        x
        for x in jax.tree_util.tree_leaves(opt_state, is_leaf=lambda x: isinstance(x, optax.TraceState))
        if isinstance(x, optax.TraceState)
    ]
    if len(found) != 1:
        raise ValueError(f"expected one SGD momentum buffer in the optimiser state; found {len(found)}.")
    return found[0].trace


def views(augment, state, images, dtype):
    """The two views the trainer's step ``state["step"]`` trains on: ``augment(fold_in(rng, step), images)``."""
    x = images.astype(dtype) / jnp.asarray(255.0, dtype) if jnp.issubdtype(images.dtype, jnp.integer) else images
    return augment(jax.random.fold_in(state["rng"], state["step"]), x)


def _mock(data_name: str, dry_examples: int):
    """tfds mock data (``dry_examples`` random images of the set's real shape per split) for a tfds set
    when ``dry_examples`` > 0; else nothing (embedded sets are generated)."""
    if dry_examples and _data.DATASETS[data_name].source != "embedded":
        import tensorflow_datasets as tfds

        return tfds.testing.mock_data(num_examples=int(dry_examples))
    return contextlib.nullcontext()


def load_images(data_cfg, *, seed: int, dry_run: bool, dry_examples: int):
    """``(images uint8 NHWC, labels)`` of the training split named by ``data_cfg`` (the split a run of
    :func:`trainer_config` with ``data=data_cfg`` trains on; the experiments plan their epochs from it).

    tfds sets (``cifar10``...) are read from ``data_cfg.data_dir``; under ``dry_run`` they come from
    ``tfds.testing.mock_data`` (random images of the data set's real shape, ``dry_examples`` of them),
    so the paper's path runs without the data.
    """
    kw = {
        "image_size": data_cfg.image_size or None,
        "data_dir": data_cfg.data_dir or None,
        "num_examples": data_cfg.num_train or None,
    }
    with _mock(data_cfg.name, dry_examples if dry_run else 0):
        ds = _data.load(data_cfg.name, "train", seed=seed, **kw)
    return np.asarray(ds.images), np.asarray(ds.labels, np.int32)


def dry_batches(cfg) -> list[int]:
    """The two (or more) batches a dry run trains at: ``dry.batch_sizes``, or when empty 1/8 and 1/4 of
    ``train.batch_size`` (:func:`experiments.projection.reduced_sizes`); sorted and distinct.

    Raises:
      ValueError: when they are fewer than two distinct sizes, or one exceeds ``dry.examples`` (the mock
        images a dry run trains on), naming the field.
    """
    sizes = (
        sorted({int(b) for b in cfg.dry.batch_sizes})
        if cfg.dry.batch_sizes
        else projection.reduced_sizes(cfg.train.batch_size)
    )
    if len(sizes) < 2 or sizes[0] < 2:
        raise ValueError(
            f"`dry.batch_sizes` must hold at least two distinct batches >= 2 (two sizes to fit an "
            f"exponent); got {list(cfg.dry.batch_sizes)}."
        )
    if sizes[-1] > cfg.dry.examples:
        raise ValueError(f"`dry.examples` = {cfg.dry.examples} is fewer than the dry run's largest batch {sizes[-1]}.")
    return sizes


def train_run(
    run: Run, tc, *, before_step: Callable | None = None, label: str = "", dry_examples: int = 0, workdir=None
) -> dict:
    """Train trainer config ``tc`` (:func:`trainer_config`) with :func:`ssl_geometry.trainer.train`, its step
    observed by ``run.observe``; return per-epoch means of the tracked numbers (:class:`EpochMeans`).

    An epoch is ``tc.train.log_every`` updates. ``before_step(epoch, i, state, batch)`` is called before
    update ``i`` of each epoch (the Hessian tracker measures there). ``dry_examples`` > 0: tfds sets come
    from ``tfds.testing.mock_data`` with that many examples. ``workdir``: where the run's checkpoints and
    ``metrics.jsonl`` go (a rerun there resumes; the epoch series then cover this invocation's epochs);
    ``None``: a temporary directory. A diverged run (non-finite loss) stops at the end of its epoch:
    ``diverged_at_step`` names the first non-finite update, the series hold the epochs completed before
    it and ``state`` and ``step_time_s`` are ``None`` / NaN. ``step_time_s``: the loop's median time of
    the updates after the first (each timed to completion; the first compiles).
    Returns ``{"epochs": {name: [per-epoch mean]}, "diverged_at_step", "state", "label", "step_time_s"}``.
    """
    spe = int(tc.train.log_every)
    means = EpochMeans(spe)
    hooks = [means] + ([BeforeStep(before_step, spe)] if before_step is not None else [])
    out = None
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="paper_simsiam-"))
        stack.enter_context(_mock(tc.data.name, dry_examples))
        try:
            out = _trainer.train(tc, workdir, verbose=False, observe=run.observe, hooks=hooks)
        except Diverged:
            pass
    return {
        "epochs": means.series,
        "diverged_at_step": means.diverged_at_step,
        "label": label,
        "state": None if out is None else out["state"],
        "step_time_s": float("nan") if out is None else out["step_time_s"],
    }
