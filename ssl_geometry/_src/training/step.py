"""One training update for every objective, with the online probe inside it, jitted on a mesh.

One update (:func:`make_train_step`) draws ``rng_t = fold_in(rng, step)``, runs the objective's
``loss_fn`` (augmentations on device), adds the online linear probe's cross-entropy on
``stop_gradient(backbone features of view 1)`` (so the probe never changes the backbone), takes
``jax.value_and_grad`` of the sum, applies the optax update, then the objective's ``update_state``
(EMA target). :func:`jit_train_step` jits it with the shardings of
:mod:`ssl_geometry._src.training.state`.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from ssl_geometry._src.ssl.objectives import Objective
from ssl_geometry._src.training.state import batch_sharding, state_shardings

__all__ = ["make_train_step", "jit_train_step"]


def _group_norms(tree, groups: dict):
    out = {}
    for g in sorted(set(groups.values())):
        leaves = [leaf for k, v in tree.items() if groups.get(k) == g for leaf in jax.tree_util.tree_leaves(v)]
        out[g] = jnp.sqrt(sum(jnp.sum(jnp.square(leaf.astype(jnp.float32))) for leaf in leaves))
    return out


def _probe_loss(params, feats, labels):
    """Cross-entropy and accuracy of the linear probe ``feats @ w + b`` on ``labels``."""
    logits = feats @ params["probe"]["w"] + params["probe"]["b"]
    loss = jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, labels))
    return loss, jnp.mean(jnp.argmax(logits, -1) == labels)


def make_train_step(objective: Objective, tx, schedule: Callable, *, observe: Callable | None = None) -> Callable:
    """``train_step(state, batch) -> (new_state, metrics)`` (pure; jit it with :func:`jit_train_step`).

    ``batch = {"images": (n, ...), "labels": (n,) int}``. The minimised scalar is
    ``L_ssl(params) + CE(probe(sg(features_1)), labels)``; only the probe receives
    the second term's gradient. ``metrics``: ``loss`` (``L_ssl``), ``probe_loss``, ``probe_acc``,
    ``lr`` (``schedule(step)``), ``grad_norm`` (global norm of the SSL gradient), the relative update
    ``rel_update/<group> = |theta_{t+1} - theta_t| / |theta_t|`` of each parameter group of the
    objective (``backbone``, ``head`` = projector + predictor) and the objective's scalar aux outputs.

    ``observe(state, batch, new_state) -> {name: scalar}``, when given, is traced into the same step
    (on the state before and after the update and the batch; e.g. statistics of the very views the
    update trains on, which the step draws from ``fold_in(state["rng"], state["step"])``); its
    entries join ``metrics`` and must not reuse a name of the step's own metrics.
    """

    def total_loss(params, obj_state, rng, batch):
        loss, (new_obj_state, aux) = objective.loss_fn(params, obj_state, rng, batch)
        aux = dict(aux)
        feats = jax.lax.stop_gradient(aux.pop("features"))
        probe_loss, probe_acc = _probe_loss(params, feats, batch["labels"])
        return loss + probe_loss, (loss, new_obj_state, aux, probe_loss, probe_acc)

    def train_step(state, batch):
        step = state["step"]
        rng = jax.random.fold_in(state["rng"], step)
        params = state["params"]
        (_, (loss, new_obj_state, aux, probe_loss, probe_acc)), grads = jax.value_and_grad(total_loss, has_aux=True)(
            params, state["obj_state"], rng, batch
        )
        updates, opt_state = tx.update(grads, state["opt_state"], params)
        new_params = optax.apply_updates(params, updates)
        new_obj_state = objective.update_state(new_params, new_obj_state, step + 1)
        ssl_grads = {k: v for k, v in grads.items() if k != "probe"}
        delta = jax.tree_util.tree_map(lambda a, b: a - b, new_params, params)
        dn = _group_norms(delta, objective.groups)
        pn = _group_norms(params, objective.groups)
        metrics = {
            "loss": loss,
            "probe_loss": probe_loss,
            "probe_acc": probe_acc,
            "lr": schedule(step),
            "grad_norm": optax.tree.norm(ssl_grads),
        }
        for g in dn:
            metrics[f"rel_update/{g}"] = dn[g] / jnp.maximum(pn[g], 1e-30)
        metrics.update(aux)
        new_state = {
            "step": step + 1,
            "params": new_params,
            "opt_state": opt_state,
            "obj_state": new_obj_state,
            "rng": state["rng"],
        }
        if observe is not None:
            extra = observe(state, batch, new_state)
            clash = sorted(set(extra) & set(metrics))
            if clash:
                raise ValueError(f"`observe` returns {clash}, names the step's own metrics already use.")
            metrics.update(extra)
        return new_state, metrics

    return train_step


def jit_train_step(train_step: Callable, mesh: Mesh, state, *, min_model_dim: int = 1024, donate: bool = True):
    """``jax.jit`` of ``train_step`` with explicit shardings on ``mesh``.

    State leaves follow :func:`ssl_geometry.trainer.state_shardings`, the batch
    :func:`~ssl_geometry.trainer.batch_sharding`, metrics are replicated. ``donate=True`` donates the
    old state's buffers.
    """
    s_sh = state_shardings(mesh, state, min_model_dim=min_model_dim)
    b_sh = batch_sharding(mesh)
    return jax.jit(
        train_step,
        in_shardings=(s_sh, b_sh),
        out_shardings=(s_sh, NamedSharding(mesh, P())),
        donate_argnums=(0,) if donate else (),
    )
