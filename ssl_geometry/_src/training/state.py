"""The training state and where it lives: the state pytree, the device mesh, shardings and placement.

Training state (a plain dict pytree, checkpointed whole)::

    {"step": int32, "params": {backbone, projector[, predictor], probe},
     "opt_state": optax state, "obj_state": objective state (BN stats, EMA target,
     queue, centre), "rng": base PRNG key}

Sharding: :func:`make_mesh` builds a ``("data", "model")`` mesh; the batch is split over ``data``
(:func:`batch_sharding`), every state leaf is replicated except wide 2-D matrices, which are split
along their output side over ``model`` (:func:`state_shardings`). :func:`place_state` and
:func:`place_batch` put host values onto the mesh, multi-host safe.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from ssl_geometry._src.ssl.objectives import Objective

__all__ = [
    "make_mesh",
    "state_shardings",
    "batch_sharding",
    "init_probe",
    "init_train_state",
    "unalias",
    "place_state",
    "place_batch",
]


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
    """``NamedSharding`` per leaf: wide matrices ``P(None, "model")``, everything else replicated.

    A leaf is split when the ``model`` axis has more than one device, the leaf is 2-D, both its
    sides are at least ``min_model_dim`` and its output side divides by the ``model`` axis size.
    """
    msize = mesh.shape["model"]

    def leaf(x):
        shape = jnp.shape(x)
        if msize > 1 and len(shape) == 2 and min(shape) >= min_model_dim and shape[1] % msize == 0:
            return NamedSharding(mesh, P(None, "model"))
        return NamedSharding(mesh, P())

    return jax.tree_util.tree_map(leaf, tree)


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Leading (batch) axis split over ``data``, replicated over ``model``."""
    return NamedSharding(mesh, P("data"))


def init_probe(key, feature_dim: int, num_classes: int, dtype) -> dict:
    """Zero-initialised linear probe ``logits = h @ w + b`` (trained inside the step on
    ``stop_gradient`` of the backbone features, see :func:`ssl_geometry.trainer.make_train_step`)."""
    del key
    return {"w": jnp.zeros((feature_dim, num_classes), dtype), "b": jnp.zeros((num_classes,), dtype)}


def init_train_state(objective: Objective, tx, key, num_classes: int) -> dict:
    """Fresh training state (see the module docstring) from ``key``: ``key`` splits into the
    objective's initialisation, the probe's and the base step RNG ``rng``."""
    k_init, k_probe, k_rng = jax.random.split(key, 3)
    params, obj_state = objective.init(k_init)
    dtype = jax.tree_util.tree_leaves(params["backbone"])[0].dtype
    params = {**params, "probe": init_probe(k_probe, objective.feature_dim, num_classes, dtype)}
    return {
        "step": jnp.zeros((), jnp.int32),
        "params": params,
        "opt_state": tx.init(params),
        "obj_state": obj_state,
        "rng": k_rng,
    }


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
