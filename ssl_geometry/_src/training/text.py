"""Two-view SSL on the text encoder: a head (and optionally the encoder) trained through :func:`fit`.

The objective on a token batch ``t`` with key ``k`` is

    t_a = aug(t; k_1),  t_b = aug(t; k_2),   z_v = f(t_v)  (train-mode dropout when ``dropout_views``),
    u = h([z_a; z_b]),  L = loss_fn(u_a, u_b),

with :func:`ssl_geometry.text.augment_tokens` as ``aug`` (identity when no
augmentation is asked for) and independent dropout keys per view (SimCSE). With
``finetune=False`` the encoder is frozen (its output under ``stop_gradient``); with
``finetune=True`` its parameters are trained too. The steps are
:func:`ssl_geometry.fit`, the one optimisation loop of the library.
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ssl_geometry._src.core.loop import fit
from ssl_geometry._src.models.base import Model
from ssl_geometry._src.models.text import Tokens, check_tokens
from ssl_geometry._src.ssl.text_augment import augment_tokens

Array = jax.Array

__all__ = ["TwoViewResult", "make_two_view_loss", "fit_two_view"]


class TwoViewResult(NamedTuple):
    """What :func:`fit_two_view` returns: the trained variables and the per-step losses."""

    backbone: dict
    head: dict
    losses: np.ndarray


def make_two_view_loss(
    backbone: Model,
    head: Model,
    loss_fn: Callable[[Array, Array], Array],
    *,
    finetune: bool,
    augment: dict | None = None,
    dropout_views: bool = True,
) -> Callable:
    """The two-view objective ``objective(params, state, tokens, key) -> (loss, new_head_state)``.

    ``params`` is ``{"head": ...}`` or, with ``finetune=True``, ``{"backbone": ..., "head": ...}``;
    ``state`` is ``{"backbone": encoder variables, "head": head variables}`` (the non-parameter
    collections, e.g. BatchNorm statistics, are read from there). Both views go through the
    head in one call, so a train-mode BatchNorm sees both.
    """
    augment = dict(augment or {})

    def objective(params, state, tokens, key):
        ka, kb, kd1, kd2 = jax.random.split(key, 4)
        ta = augment_tokens(ka, tokens, **augment) if augment else tokens
        tb = augment_tokens(kb, tokens, **augment) if augment else tokens
        bvars = {**state["backbone"], "params": params["backbone"]} if finetune else state["backbone"]
        za, _ = backbone.apply(bvars, ta, train=dropout_views, rng=kd1 if dropout_views else None)
        zb, _ = backbone.apply(bvars, tb, train=dropout_views, rng=kd2 if dropout_views else None)
        if not finetune:
            za, zb = jax.lax.stop_gradient(za), jax.lax.stop_gradient(zb)
        hvars = {**state["head"], "params": params["head"]}
        u, new_hstate = head.apply(hvars, jnp.concatenate([za, zb], axis=0), train=True)
        n = za.shape[0]
        return loss_fn(u[:n], u[n:]), new_hstate

    return objective


@functools.lru_cache(maxsize=32)
def _fit_loss(backbone, head, loss_fn, finetune, augment_items, dropout_views):
    """The stateful loss :func:`fit` runs (cached, so repeated runs reuse one compiled program)."""
    objective = make_two_view_loss(
        backbone, head, loss_fn, finetune=finetune, augment=dict(augment_items), dropout_views=dropout_views
    )

    def loss(params, state, batch, args):
        del args
        tokens, key = batch
        value, new_hstate = objective(params, state, tokens, key)
        return value, {"backbone": state["backbone"], "head": {**state["head"], **new_hstate}}

    return loss


def fit_two_view(
    backbone: Model,
    head: Model,
    loss_fn: Callable[[Array, Array], Array],
    optimizer: optax.GradientTransformation,
    backbone_variables: dict,
    head_variables: dict,
    *,
    tokens: Tokens,
    keys: Array,
    finetune: bool,
    augment: Optional[dict] = None,
    dropout_views: bool = True,
    chunk: Optional[int] = None,
) -> TwoViewResult:
    """Train the head (and with ``finetune=True`` the encoder) on per-step token batches.

    Args:
      backbone, head: the encoder and head :class:`~ssl_geometry.Model`.
      loss_fn: a two-view loss ``loss_fn(u_a, u_b)``, e.g. ``partial(losses.info_nce, temperature=0.05)``.
      optimizer: over ``{"head": params}`` (frozen encoder) or ``{"backbone": ..., "head": ...}``
        (fine-tuning; ``optax.multi_transform`` for per-part learning rates).
      backbone_variables, head_variables: initial variables.
      tokens: :class:`Tokens` with a leading step axis, ``(steps, n, L)``: step ``k`` trains on ``tokens[k]``.
      keys: ``(steps, 2)`` PRNG keys, one per step (views and dropout).
      finetune, augment, dropout_views: see :func:`make_two_view_loss`.
      chunk: steps per inner ``lax.scan`` (default all).

    Returns:
      :class:`TwoViewResult`; a non-finite step raises :class:`ssl_geometry.FitError`.
    """
    ids, mask = tokens
    if jnp.ndim(ids) != 3:
        raise ValueError(
            f"`tokens` must carry a leading step axis, (steps, n, L); got input_ids of shape {tuple(jnp.shape(ids))}."
        )
    check_tokens(Tokens(ids[0], mask[0]))
    steps = int(jnp.shape(ids)[0])
    if jnp.shape(keys)[0] != steps:
        raise ValueError(f"`keys` must hold one key per step ({steps}); got shape {tuple(jnp.shape(keys))}.")
    params = {"head": head_variables["params"]}
    if finetune:
        params["backbone"] = backbone_variables["params"]
    state = {"backbone": backbone_variables, "head": {k: v for k, v in head_variables.items() if k != "params"}}
    loss = _fit_loss(
        backbone, head, loss_fn, bool(finetune), tuple(sorted((augment or {}).items())), bool(dropout_views)
    )
    res = fit(loss, params, optimizer, steps=steps, batches=(Tokens(ids, mask), keys), state=state, chunk=chunk)
    bb = {**backbone_variables, "params": res.params["backbone"]} if finetune else backbone_variables
    hv = {**res.state["head"], "params": res.params["head"]}
    return TwoViewResult(bb, hv, res.losses)
