"""Two-view self-supervised objectives behind one interface.

Implementation of :mod:`ssl_geometry.objectives`; the conventions and formulas are in its docstring.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from ssl_geometry._src.checks import check_positive
from ssl_geometry._src.models.base import Model
from ssl_geometry._src.ops import l2_normalize
from ssl_geometry._src.ssl.losses import cosine as _cosine
from ssl_geometry._src.ssl.losses.registry import (
    EMA_METHODS,
    OBJECTIVES,
    PREDICTOR_METHODS,
    TABLE,
    Hyper,
    ObjectiveSpec,
    hypers,
    objective_spec,
)

Array = jax.Array

__all__ = [
    "OBJECTIVES",
    "EMA_METHODS",
    "PREDICTOR_METHODS",
    "TABLE",
    "Hyper",
    "ObjectiveSpec",
    "Objective",
    "ema_decay",
    "identity_views",
    "make_objective",
]

# OBJECTIVES, EMA_METHODS, PREDICTOR_METHODS, TABLE, Hyper and ObjectiveSpec: the objective table
# (ssl_geometry/_src/ssl/losses/registry.py), one ObjectiveSpec per objective; everything here reads it.


class Objective(NamedTuple):
    """A two-view SSL objective as pure functions.

    Attributes:
      name: method name.
      init: ``init(key) -> (params, state)``.
      loss_fn: ``loss_fn(params, state, rng, batch) -> (loss, (new_state, aux))``.
      update_state: ``update_state(new_params, state, step) -> state``; run after the
        optimiser step (EMA target update; identity for methods without a target).
      features: ``features(params, state, images) -> (n, d)`` backbone features, eval mode.
      embed: ``embed(params, state, images) -> (n, k)`` projector outputs, eval mode:
        ``project(params, state, features(params, state, images))``.
      project: ``project(params, state, z) -> (n, k)`` the projector alone on backbone features
        ``z (n, d)``, eval mode: one backbone pass serves several heads (the trained head and the
        same head at its initialisation, say).
      groups: top-level parameter key -> ``"backbone"`` or ``"head"`` (for the
        per-group relative update size).
      feature_dim: backbone output dimension d.
    """

    name: str
    init: Callable
    loss_fn: Callable
    update_state: Callable
    features: Callable
    embed: Callable
    project: Callable
    groups: dict
    feature_dim: int


# --------------------------------------------------------------------------- helpers


def _flat_input(model: Model, x):
    """Flatten image batches for models with a vector input (e.g. an MLP backbone)."""
    if len(model.in_shape) == 1 and x.ndim > 2:
        x = x.reshape(x.shape[0], -1)
    return x


def _as_float(images, params):
    """Integer images -> floats in [0, 1] (``/ 255``); float images cast to the parameter dtype."""
    dtype = jax.tree_util.tree_leaves(params)[0].dtype
    if jnp.issubdtype(images.dtype, jnp.integer):
        return images.astype(dtype) / jnp.asarray(255.0, dtype)
    return images.astype(dtype)


def _run(model: Model, params, stats, x, train: bool):
    variables = {"params": params, **stats}
    y, new = model.apply(variables, _flat_input(model, x), train=train)
    return y, (new if train else stats)


def ema_decay(step, total_steps: int, base: float):
    """BYOL's cosine EMA schedule ``tau_k = 1 - (1 - tau_0) (cos(pi k / K) + 1) / 2`` at ``step``.

    :func:`ssl_geometry.losses.byol_decay_schedule` evaluated at ``step`` (one definition).
    """
    return _cosine.byol_decay_schedule(total_steps, base)(step)


def identity_views(key, images):
    """No augmentation: both views are the clean images (for tests and debugging)."""
    del key
    return images, images


def _check_args(spec: ObjectiveSpec, backbone, projector, predictor, values: dict, total_steps) -> None:
    """Argument checks of :func:`make_objective` (errors name the argument): the models against the spec,
    ``temperature`` > 0 and ``ema`` in [0, 1) for every objective, ``total_steps``, then each hyper-parameter
    the spec reads by its :attr:`Hyper.check`."""
    name = spec.objective
    if spec.predictor and predictor is None:
        raise ValueError(f"objective {name!r} needs a `predictor` model; got None.")
    if not spec.predictor and predictor is not None:
        raise ValueError(f"objective {name!r} has no predictor; pass `predictor=None`.")
    if projector.in_shape != (backbone.out_dim,):
        raise ValueError(
            f"`projector` input {projector.in_shape} does not match the backbone output dimension {backbone.out_dim}."
        )
    if predictor is not None and predictor.in_shape != (projector.out_dim,):
        raise ValueError(
            f"`predictor` input {predictor.in_shape} does not match the projector output dimension {projector.out_dim}."
        )
    check_positive(values["temperature"], "temperature")
    if not 0.0 <= values["ema"] < 1.0:
        raise ValueError(f"`ema` must lie in [0, 1); got {values['ema']!r}.")
    if not isinstance(total_steps, int) or total_steps < 1:
        raise ValueError(f"`total_steps` must be a positive int; got {total_steps!r}.")
    for h in spec.hypers:
        h.check(h.name, values[h.name])


def _hyper_values(given: dict) -> dict[str, Any]:
    """Every hyper-parameter of the table (:func:`hypers`): ``given`` or its default; ``TypeError`` naming a
    keyword that is none of them."""
    known = hypers()
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise TypeError(
            f"make_objective() got unexpected keyword argument(s) {unknown}; the objectives' hyper-parameters "
            f"are {sorted(known)}."
        )
    return {n: given.get(n, h.default) for n, h in known.items()}


def _view(k: str, views: dict, state):
    """Input ``k`` of :attr:`ObjectiveSpec.inputs`: a view output (``z1``), both views stacked (``z``), or
    ``state[k]``."""
    if k in views:
        return views[k]
    if f"{k}1" in views:
        return jnp.stack([views[f"{k}1"], views[f"{k}2"]])
    return state[k]


def _method_loss(spec: ObjectiveSpec, c: dict, z, p, t, state, new_state):
    """The loss of the objective ``spec`` (formulas in :func:`make_objective`) on projector outputs
    ``z = (z1, z2)``, predictor outputs ``p`` and EMA target outputs ``t`` (``None`` for an objective without
    a target, which then has no ``t1, t2``): ``spec.loss.fn`` of ``spec.inputs`` with the keywords
    ``spec.keywords(c)``; a stateful loss's new state (MoCo's queue, DINO's centre) goes into ``new_state``."""
    if t is None and spec.ema_target:
        raise ValueError(f"objective {spec.objective!r} reads the EMA target's outputs `t`; got None.")
    views = {"z1": z[0], "z2": z[1]}
    if spec.predictor:
        views.update(p1=p[0], p2=p[1])
    if spec.ema_target:
        views.update(t1=t[0], t2=t[1])
    out = spec.loss.fn(*(_view(k, views, state) for k in spec.inputs), **spec.keywords(c))
    if spec.state_input is None:
        return out
    loss, new_state[spec.state_input] = out
    return loss


def _init(spec: ObjectiveSpec, models, values, key):
    """``(params, state)`` of a fresh objective (see the module docstring for the state)."""
    keys = dict(zip(models, jax.random.split(key, len(models) + 1)))
    params, state = {}, {}
    for k, m in models.items():
        v = m.init(keys[k])
        params[k] = v["params"]
        state[k] = {c: val for c, val in v.items() if c != "params"}
    if spec.ema_target:
        # The target starts equal to the online network but as *copies*: a state whose
        # leaves alias each other cannot be donated to a jitted step ("Attempt to donate
        # the same buffer twice"; on several devices the aliased donation crashed XLA).
        state["target"] = jax.tree_util.tree_map(
            jnp.copy,
            {
                "params": {k: params[k] for k in ("backbone", "projector")},
                "stats": {k: state[k] for k in ("backbone", "projector")},
            },
        )
    pdt = jax.tree_util.tree_leaves(params["projector"])[0].dtype  # the state's dtype: independent of x64
    for k, init in spec.state.items():
        state[k] = init(key, models["projector"].out_dim, pdt, values)
    return params, state


def _online(models, params, x, new_state):
    """``(h, z, p)`` of the online branch in train mode (``p`` is ``None`` without a predictor); the new BN
    statistics are written into ``new_state``."""
    h, new_state["backbone"] = _run(models["backbone"], params["backbone"], new_state["backbone"], x, True)
    z, new_state["projector"] = _run(models["projector"], params["projector"], new_state["projector"], h, True)
    p = None
    if "predictor" in models:
        p, new_state["predictor"] = _run(models["predictor"], params["predictor"], new_state["predictor"], z, True)
    return h, z, p


def _target(models, target_params, x, stats):
    """``sg t``: the EMA target's projector output in train mode; its new BN statistics go into ``stats``."""
    h, stats["backbone"] = _run(models["backbone"], target_params["backbone"], stats["backbone"], x, True)
    t, stats["projector"] = _run(models["projector"], target_params["projector"], stats["projector"], h, True)
    return jax.lax.stop_gradient(t)


def _loss_fn(spec: ObjectiveSpec, consts, models, augment, params, state, rng, batch):
    """:attr:`Objective.loss_fn`: two augmented views through the online (and target) branches, then the
    method's loss (:func:`_method_loss`); ``aux`` holds ``z_std`` (mean per-dimension std of ``z1~``) and the
    first view's features."""
    x1, x2 = augment(rng, _as_float(batch["images"], params["backbone"]))
    new_state = dict(state)
    h1, z1, p1 = _online(models, params, x1, new_state)
    _, z2, p2 = _online(models, params, x2, new_state)
    targets = None
    if spec.ema_target:
        tparams, tstats = state["target"]["params"], dict(state["target"]["stats"])
        targets = (_target(models, tparams, x1, tstats), _target(models, tparams, x2, tstats))
        new_state["target"] = {"params": tparams, "stats": tstats}
    loss = _method_loss(spec, consts, (z1, z2), (p1, p2), targets, state, new_state)
    aux = {"z_std": jnp.mean(jnp.std(l2_normalize(z1), axis=0)), "features": h1}
    return loss, (new_state, aux)


def _update_state(uses_target: bool, total_steps: int, ema: float, new_params, state, step):
    """:attr:`Objective.update_state`: ``target <- tau_k target + (1 - tau_k) online`` (:func:`ema_decay`) for
    the EMA methods, the identity otherwise."""
    if not uses_target:
        return state
    online_p = {k: new_params[k] for k in ("backbone", "projector")}
    new_target = dict(state["target"])
    new_target["params"] = _cosine.ema_update(state["target"]["params"], online_p, ema_decay(step, total_steps, ema))
    return {**state, "target": new_target}


def _features(backbone, params, state, images):
    """:attr:`Objective.features`: ``f(x)`` in eval mode."""
    h, _ = _run(backbone, params["backbone"], state["backbone"], _as_float(images, params["backbone"]), False)
    return h


def _project(projector, params, state, z):
    """:attr:`Objective.project`: ``g(z)`` in eval mode, ``z`` the backbone features ``f(x)``."""
    out, _ = _run(projector, params["projector"], state["projector"], jnp.asarray(z), False)
    return out


def _embed(backbone, projector, params, state, images):
    """:attr:`Objective.embed`: ``g(f(x))`` in eval mode."""
    return _project(projector, params, state, _features(backbone, params, state, images))


# --------------------------------------------------------------------------- builder


def make_objective(
    name: str,
    backbone: Model,
    projector: Model,
    predictor: Model | None = None,
    *,
    augment: Callable = identity_views,
    total_steps: int = 1000,
    **hyper: Any,
) -> Objective:
    """Build the :class:`Objective` ``name`` from ``backbone -> projector [-> predictor]``.

    Losses on head outputs (view ``a``: ``z_a = g(f(x_a))``, ``p_a = q(z_a)``):

    * simsiam: ``-(cos(p1, sg z2) + cos(p2, sg z1)) / 2``;
    * byol: ``|p1~ - sg t2~|^2 + |p2~ - sg t1~|^2`` with ``t`` from the EMA target
      and ``~`` L2 normalisation;
    * simclr: NT-Xent over the 2n views with temperature ``temperature``;
    * simclr_one_way: ``CE(z1~ z2~^T / temperature, arange(n))``, view 1 against the ``n`` second
      views (``n - 1`` cross-view negatives; :func:`ssl_geometry.losses.info_nce_one_way`), the
      authors' guillotine loss;
    * moco: InfoNCE of query ``q = z1`` against the EMA key ``k = t2`` and the queue;
      the keys are enqueued (FIFO, ``queue_size`` rows);
    * moco_v3: symmetric InfoNCE of ``p_a`` against EMA keys ``t_b`` in the batch,
      scaled by ``2 tau``;
    * barlow_twins: ``sum_i (1 - C_ii)^2 + lambda sum_{i!=j} C_ij^2`` on the
      cross-correlation of standardised ``z1, z2``;
    * vicreg: ``a * MSE(z1, z2) + b * variance hinge + c * covariance penalty``;
    * dino: teacher (EMA) softmax of centred ``t / tau_t`` against student
      log-softmax ``z / tau_s`` across views; the centre is an EMA of teacher means;
    * spectral_contrastive: ``-2 E[z1.z2] + E_{i!=j}[(z1_i.z2_j)^2]``;
    * wmse: MSE of L2-normalised whitened embeddings (each view's sub-batch whitened on its own, as
      :func:`ssl_geometry.losses.wmse` and the W-MSE reference code do).

    Each objective is one :class:`ObjectiveSpec` of :data:`TABLE`, which says which head outputs its loss reads,
    whether it has a predictor or an EMA target, the state it carries and the hyper-parameters it reads.

    Args:
      name: one of :data:`OBJECTIVES`.
      backbone, projector, predictor: models; ``predictor`` is required for the objectives of
        :data:`PREDICTOR_METHODS` (simsiam, byol, moco_v3) and must be ``None`` otherwise.
      augment: ``augment(key, images) -> (view1, view2)``, run on device.
      total_steps: K in the cosine EMA schedule.
      **hyper: the hyper-parameters of the table (each :class:`Hyper`; an objective reads those of its spec),
        by default ``temperature=0.1`` (softmax temperature: simclr, simclr_one_way, moco, moco_v3),
        ``ema=0.99`` (base EMA decay ``tau_0`` of the target network: byol, moco, moco_v3, dino),
        ``queue_size=4096`` (MoCo v2 queue length K), ``barlow_lambda=5e-3``,
        ``vicreg_coeffs=(25.0, 25.0, 1.0)``, ``dino_temps=(0.1, 0.04)`` (student, teacher) and
        ``dino_center_momentum=0.9``; another keyword is a ``TypeError``.
    """
    consts = _hyper_values(hyper)
    spec = objective_spec(name)
    _check_args(spec, backbone, projector, predictor, consts, total_steps)
    models = {"backbone": backbone, "projector": projector}
    if predictor is not None:
        models["predictor"] = predictor
    groups = {k: "backbone" if k == "backbone" else "head" for k in models}
    return Objective(
        name=name,
        init=functools.partial(_init, spec, models, consts),
        loss_fn=functools.partial(_loss_fn, spec, consts, models, augment),
        update_state=functools.partial(_update_state, spec.ema_target, total_steps, consts["ema"]),
        features=functools.partial(_features, backbone),
        embed=functools.partial(_embed, backbone, projector),
        project=functools.partial(_project, projector),
        groups=groups,
        feature_dim=backbone.out_dim,
    )
