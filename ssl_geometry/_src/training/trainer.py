"""The SSL trainer: one jitted, sharded update step for every objective.

Implementation of :mod:`ssl_geometry.trainer`; the conventions and formulas are in its docstring.
"""
from __future__ import annotations

import json
import math
import pathlib
import warnings
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from ssl_geometry._src.instrument import metrics as _metrics
from ssl_geometry._src.checks import check_choice, check_positive
from ssl_geometry._src.ssl.objectives import Objective

__all__ = ["OPTIMIZERS", "SCHEDULES", "make_schedule", "make_optimizer", "make_mesh", "state_shardings",
           "batch_sharding", "init_probe", "init_train_state", "make_train_step", "jit_train_step", "unalias",
           "place_state", "place_batch", "representation_metrics", "make_eval_metrics", "batch_indices", "host_slice",
           "MetricLogger", "read_metrics"]

OPTIMIZERS = ("sgd", "lars", "adam", "adamw")
SCHEDULES = ("cosine", "constant")


# ----------------------------------------------------------------------------- optimiser


def _decay_mask(params):
    """Weight decay / LARS adaptation on matrices and kernels only (not biases, BN, 1-D leaves)."""
    return jax.tree_util.tree_map(lambda x: jnp.ndim(x) > 1, params)


def make_schedule(cfg, total_steps: int, batch_size: int) -> optax.Schedule:
    """Learning-rate schedule from ``cfg`` (an ``optimizer`` ConfigDict or dict).

    ``peak = lr * batch_size / 256`` when ``cfg.lr_batch_scaling`` (the SimSiam /
    BYOL linear scaling rule) else ``lr``. ``cosine``: linear warm-up from 0 to
    ``peak`` over ``warmup_steps``, then ``peak * (1 + cos(pi t / T)) / 2`` down to 0
    (``optax.warmup_cosine_decay_schedule``); ``constant``: ``peak`` after warm-up.
    """
    lr = float(cfg["lr"])
    check_positive(lr, "optimizer.lr")
    peak = lr * batch_size / 256.0 if cfg.get("lr_batch_scaling", False) else lr
    warmup = int(cfg.get("warmup_steps", 0))
    if warmup < 0 or warmup > total_steps:
        raise ValueError(f"`optimizer.warmup_steps` must lie in [0, total steps = {total_steps}]; got {warmup}.")
    name = cfg.get("schedule", "cosine")
    check_choice(name, "optimizer.schedule", SCHEDULES)
    if name == "cosine":
        if warmup == total_steps:
            return optax.linear_schedule(0.0, peak, warmup)
        return optax.warmup_cosine_decay_schedule(0.0, peak, warmup, total_steps, end_value=0.0)
    if warmup == 0:
        return optax.constant_schedule(peak)
    return optax.join_schedules([optax.linear_schedule(0.0, peak, warmup), optax.constant_schedule(peak)], [warmup])


def make_optimizer(cfg, total_steps: int, batch_size: int, *, probe_lr: float = 1e-3):
    """``(tx, schedule)``: the optax transformation for the SSL parameters plus the probe.

    ``cfg.name``: ``sgd`` (momentum ``cfg.momentum``, optional ``nesterov``, decoupled
    ``weight_decay`` added to the gradient of matrices as in PyTorch SGD), ``lars``
    (``optax.lars``, trust ratio and decay on matrices only), ``adam``, ``adamw``.
    The online probe (top-level key ``"probe"``) is trained by its own Adam
    (``probe_lr``) through ``optax.multi_transform``.
    """
    name = cfg.get("name", "sgd")
    check_choice(name, "optimizer.name", OPTIMIZERS)
    sched = make_schedule(cfg, total_steps, batch_size)
    wd = float(cfg.get("weight_decay", 0.0))
    check_positive(wd, "optimizer.weight_decay", strict=False)
    momentum = float(cfg.get("momentum", 0.9))
    if not 0.0 <= momentum < 1.0:
        raise ValueError(f"`optimizer.momentum` must lie in [0, 1); got {momentum}.")
    if name == "sgd":
        parts = []
        if wd:
            parts.append(optax.add_decayed_weights(wd, mask=_decay_mask))
        parts.append(optax.sgd(sched, momentum=momentum or None, nesterov=bool(cfg.get("nesterov", False))))
        main = optax.chain(*parts)
    elif name == "lars":
        main = optax.lars(sched, weight_decay=wd, weight_decay_mask=_decay_mask, trust_ratio_mask=_decay_mask,
                          momentum=momentum)
    elif name == "adam":
        main = optax.adam(sched, b1=float(cfg.get("b1", 0.9)), b2=float(cfg.get("b2", 0.999)))
        if wd:
            main = optax.chain(optax.add_decayed_weights(wd, mask=_decay_mask), main)
    else:
        main = optax.adamw(sched, b1=float(cfg.get("b1", 0.9)), b2=float(cfg.get("b2", 0.999)), weight_decay=wd,
                           mask=_decay_mask)

    def labels(params):
        return {k: jax.tree_util.tree_map(lambda _: "probe" if k == "probe" else "ssl", v) for k, v in params.items()}

    tx = optax.multi_transform({"ssl": main, "probe": optax.adam(probe_lr)}, labels)
    return tx, sched


# ----------------------------------------------------------------------------- sharding


def make_mesh(data: int = -1, model: int = 1, devices=None) -> Mesh:
    """A ``("data", "model")`` mesh over ``devices`` (default: all); ``data=-1`` takes the rest."""
    devices = list(jax.devices() if devices is None else devices)
    n = len(devices)
    if not isinstance(model, int) or model < 1 or n % model:
        raise ValueError(f"`mesh.model` must be a positive divisor of the device count {n}; got {model!r}.")
    if data == -1:
        data = n // model
    if not isinstance(data, int) or data < 1 or data * model != n:
        raise ValueError(f"`mesh.data` * `mesh.model` must equal the device count {n}; got {data} * {model}.")
    return Mesh(np.asarray(devices, dtype=object).reshape(data, model), ("data", "model"))


def state_shardings(mesh: Mesh, tree, *, min_model_dim: int = 1024):
    """``NamedSharding`` per leaf: wide matrices ``P(None, "model")``, everything else replicated."""
    msize = mesh.shape["model"]

    def leaf(x):
        shape = jnp.shape(x)
        if (msize > 1 and len(shape) == 2 and min(shape) >= min_model_dim and shape[1] % msize == 0):
            return NamedSharding(mesh, P(None, "model"))
        return NamedSharding(mesh, P())

    return jax.tree_util.tree_map(leaf, tree)


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Leading (batch) axis split over ``data``, replicated over ``model``."""
    return NamedSharding(mesh, P("data"))


# ----------------------------------------------------------------------------- state and step


def init_probe(key, feature_dim: int, num_classes: int, dtype) -> dict:
    """Zero-initialised linear probe ``logits = h @ w + b``."""
    del key
    return {"w": jnp.zeros((feature_dim, num_classes), dtype), "b": jnp.zeros((num_classes,), dtype)}


def init_train_state(objective: Objective, tx, key, num_classes: int) -> dict:
    """Fresh training state (see module docstring) from ``key``."""
    k_init, k_probe, k_rng = jax.random.split(key, 3)
    params, obj_state = objective.init(k_init)
    dtype = jax.tree_util.tree_leaves(params["backbone"])[0].dtype
    params = {**params, "probe": init_probe(k_probe, objective.feature_dim, num_classes, dtype)}
    return {"step": jnp.zeros((), jnp.int32), "params": params, "opt_state": tx.init(params),
            "obj_state": obj_state, "rng": k_rng}


def _group_norms(tree, groups: dict):
    out = {}
    for g in sorted(set(groups.values())):
        leaves = [leaf for k, v in tree.items() if groups.get(k) == g for leaf in jax.tree_util.tree_leaves(v)]
        out[g] = jnp.sqrt(sum(jnp.sum(jnp.square(leaf.astype(jnp.float32))) for leaf in leaves))
    return out


def make_train_step(objective: Objective, tx, schedule: Callable) -> Callable:
    """``train_step(state, batch) -> (new_state, metrics)`` (pure; jit it with :func:`jit_train_step`).

    ``batch = {"images": (n, ...), "labels": (n,) int}``. The minimised scalar is
    ``L_ssl(params) + CE(probe(sg(features_1)), labels)``; only the probe receives
    the second term's gradient.
    """

    def total_loss(params, obj_state, rng, batch):
        loss, (new_obj_state, aux) = objective.loss_fn(params, obj_state, rng, batch)
        aux = dict(aux)
        feats = jax.lax.stop_gradient(aux.pop("features"))
        logits = feats @ params["probe"]["w"] + params["probe"]["b"]
        probe_loss = jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"]))
        probe_acc = jnp.mean(jnp.argmax(logits, -1) == batch["labels"])
        return loss + probe_loss, (loss, new_obj_state, aux, probe_loss, probe_acc)

    def train_step(state, batch):
        step = state["step"]
        rng = jax.random.fold_in(state["rng"], step)
        params = state["params"]
        (_, (loss, new_obj_state, aux, probe_loss, probe_acc)), grads = jax.value_and_grad(
            total_loss, has_aux=True)(params, state["obj_state"], rng, batch)
        updates, opt_state = tx.update(grads, state["opt_state"], params)
        new_params = optax.apply_updates(params, updates)
        new_obj_state = objective.update_state(new_params, new_obj_state, step + 1)
        ssl_grads = {k: v for k, v in grads.items() if k != "probe"}
        delta = jax.tree_util.tree_map(lambda a, b: a - b, new_params, params)
        dn = _group_norms(delta, objective.groups)
        pn = _group_norms(params, objective.groups)
        metrics = {"loss": loss, "probe_loss": probe_loss, "probe_acc": probe_acc, "lr": schedule(step),
                   "grad_norm": optax.global_norm(ssl_grads)}
        for g in dn:
            metrics[f"rel_update/{g}"] = dn[g] / jnp.maximum(pn[g], 1e-30)
        metrics.update(aux)
        new_state = {"step": step + 1, "params": new_params, "opt_state": opt_state, "obj_state": new_obj_state,
                     "rng": state["rng"]}
        return new_state, metrics

    return train_step


def jit_train_step(train_step: Callable, mesh: Mesh, state, *, min_model_dim: int = 1024, donate: bool = True):
    """``jax.jit`` of ``train_step`` with explicit shardings on ``mesh``.

    State leaves follow :func:`state_shardings`, the batch :func:`batch_sharding`,
    metrics are replicated. ``donate=True`` donates the old state's buffers.
    """
    s_sh = state_shardings(mesh, state, min_model_dim=min_model_dim)
    b_sh = batch_sharding(mesh)
    return jax.jit(train_step, in_shardings=(s_sh, b_sh), out_shardings=(s_sh, NamedSharding(mesh, P())),
                   donate_argnums=(0,) if donate else ())


def unalias(tree):
    """``tree`` with every leaf that is the same array object as an earlier leaf replaced by a copy.

    A donated jitted step needs distinct buffers for distinct leaves: a state whose
    leaves alias (e.g. an EMA target initialised as the online parameters themselves)
    fails with "Attempt to donate the same buffer twice".
    """
    seen = set()

    def leaf(x):
        if isinstance(x, jax.Array) and id(x) in seen:
            return jnp.copy(x)
        seen.add(id(x))
        return x

    return jax.tree_util.tree_map(leaf, tree)


def place_state(state, mesh: Mesh, *, min_model_dim: int = 1024):
    """``jax.device_put`` the state onto ``mesh`` with :func:`state_shardings` (aliased leaves
    copied first, see :func:`unalias`).

    Multi-host: every process holds the full (replicated) host value of each leaf
    (same seed, same init); each device gets its shard of it, so no process ever
    reads data held only by another process.
    """
    state = unalias(state)
    shardings = state_shardings(mesh, state, min_model_dim=min_model_dim)
    if jax.process_count() == 1:
        return jax.device_put(state, shardings)

    def put(x, sh):
        x = np.asarray(x)
        return jax.make_array_from_callback(x.shape, sh, lambda idx: x[idx])

    return jax.tree_util.tree_map(put, state, shardings)


def place_batch(batch: dict, mesh: Mesh) -> dict:
    """Make global arrays from this process's slice of the global batch (multi-host safe)."""
    sh = batch_sharding(mesh)
    return {k: jax.make_array_from_process_local_data(sh, np.asarray(v)) for k, v in batch.items()}


# ----------------------------------------------------------------------------- tracked metrics


def representation_metrics(z) -> dict:
    """Collapse diagnostics of a batch of outputs ``z`` (n, k)
    (docs/theory.md, section "Collapse monitor and timescale ratio"),
    computed by :mod:`ssl_geometry.metrics`:

    * ``std_norm``: ``mean_j std_i (z_i / |z_i|)_j`` (``ddof=1``; collapse -> 0, uniform
      directions about ``1 / sqrt(k)``), :func:`~ssl_geometry.metrics.normalized_std`;
    * ``cond``: ``lambda_max / lambda_min`` of the covariance of ``z`` (``inf`` when it is
      singular, e.g. ``n <= k``), :func:`~ssl_geometry.metrics.covariance_condition_number`;
    * ``erank_rankme`` / ``erank_squared``: ``exp(H(p))`` with ``p_i`` proportional to
      the singular values ``s_i`` of ``z`` (RankMe) or to ``s_i^2`` (the paper's code),
      :func:`~ssl_geometry.metrics.effective_rank`.
    """
    return {"std_norm": _metrics.normalized_std(z), "cond": _metrics.covariance_condition_number(z),
            "erank_rankme": _metrics.effective_rank(z, "rankme"),
            "erank_squared": _metrics.effective_rank(z, "squared")}


def make_eval_metrics(objective: Objective) -> Callable:
    """``eval_metrics(params, obj_state, images) -> dict``: :func:`representation_metrics` of
    the backbone features (``backbone/...``) and the projector outputs (``head/...``), eval mode."""

    def eval_metrics(params, obj_state, images):
        h = objective.features(params, obj_state, images)
        z = objective.embed(params, obj_state, images)
        out = {f"backbone/{k}": v for k, v in representation_metrics(h).items()}
        out.update({f"head/{k}": v for k, v in representation_metrics(z).items()})
        return out

    return eval_metrics


# ----------------------------------------------------------------------------- data order


def batch_indices(seed: int, step: int, num_examples: int, batch_size: int) -> np.ndarray:
    """Indices of the global batch at ``step``: epoch ``e = step // (N // B)`` is a
    permutation from ``default_rng([seed, e])``; incomplete last batches are dropped."""
    per_epoch = num_examples // batch_size
    if per_epoch < 1:
        raise ValueError(f"`data.batch_size` {batch_size} exceeds the number of training examples {num_examples}.")
    epoch, pos = divmod(int(step), per_epoch)
    perm = np.random.default_rng([int(seed), epoch]).permutation(num_examples)
    return perm[pos * batch_size:(pos + 1) * batch_size]


def host_slice(indices: np.ndarray) -> np.ndarray:
    """This process's contiguous share of the global batch indices."""
    n_proc, pid = jax.process_count(), jax.process_index()
    if len(indices) % n_proc:
        raise ValueError(f"global batch {len(indices)} must divide by the process count {n_proc}.")
    per = len(indices) // n_proc
    return indices[pid * per:(pid + 1) * per]


# ----------------------------------------------------------------------------- logging


class MetricLogger:
    """Append JSON lines to ``workdir/metrics.jsonl`` (and TensorBoard scalars when
    ``tensorboard=True`` and ``tensorflow`` is importable). Only process 0 writes."""

    def __init__(self, workdir, *, tensorboard: bool = False):
        self.active = jax.process_index() == 0
        self.path = pathlib.Path(workdir) / "metrics.jsonl"
        self._tb = None
        if self.active and tensorboard:
            try:
                import tensorflow as tf  # noqa: PLC0415

                self._tb = tf.summary.create_file_writer(str(pathlib.Path(workdir) / "tensorboard"))
            except Exception as err:  # pragma: no cover - optional dependency
                warnings.warn(f"TensorBoard logging disabled: {err}", stacklevel=2)

    def write(self, record: dict) -> None:
        if not self.active:
            return
        clean = {}
        for k, v in record.items():
            if hasattr(v, "shape"):
                v = np.asarray(v).item()
            if isinstance(v, float) and not math.isfinite(v):
                v = str(v)  # "nan" / "inf": kept visible in JSON
            clean[k] = v
        with open(self.path, "a") as f:
            f.write(json.dumps(clean, sort_keys=True) + "\n")
        if self._tb is not None and "step" in clean:
            import tensorflow as tf  # noqa: PLC0415

            with self._tb.as_default():
                for k, v in clean.items():
                    if isinstance(v, (int, float)) and k != "step":
                        tf.summary.scalar(k, v, step=int(clean["step"]))
            self._tb.flush()


def read_metrics(workdir) -> list[dict]:
    """All records of ``workdir/metrics.jsonl``."""
    path = pathlib.Path(workdir) / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
