"""Two-view self-supervised objectives behind one interface.

Every objective is an :class:`Objective` built from a backbone, a head
(projector) and, where the method has one, a predictor (all :class:`Model`).
Following DeepMind's BYOL JAX code, the whole update is one pure function::

    loss, (new_state, aux) = objective.loss_fn(params, state, rng, batch)

``batch["images"]`` is an ``(n, H, W, C)`` (or ``(n, D)``) array of *clean*
images (``uint8`` in [0, 255] or floats in [0, 1]; cast to the parameter dtype);
the two augmented views are drawn on device inside ``loss_fn`` from ``rng`` by
the ``augment(key, images) -> (view1, view2)`` function given at construction. ``params`` holds the trainable parameters
(``{"backbone", "projector"[, "predictor"]}``); ``state`` holds everything else
the method carries from step to step:

* ``state["backbone" | "projector" | "predictor"]``: BatchNorm statistics
  (the non-``"params"`` collections of each model, ``{}`` when none);
* ``state["target"]``: the EMA target/teacher/key network (BYOL, MoCo, DINO):
  ``{"params": {...}, "stats": {...}}``, updated by :attr:`Objective.update_state`
  after the optimiser step with ``xi <- tau xi + (1 - tau) theta`` and the cosine
  schedule ``tau_k = 1 - (1 - tau_0)(cos(pi k / K) + 1) / 2`` (BYOL, Grill et al. 2020);
* ``state["queue"]`` (MoCo v2: the ``(K, dim)`` queue of L2-normalised keys) and
  ``state["center"]`` (DINO: the teacher centre), returned updated by ``loss_fn``.

``aux`` holds scalar diagnostics and ``aux["features"]``, the backbone features
of view 1 (the trainer trains its online linear probe on
``stop_gradient(aux["features"])`` and removes them before logging).

The losses are those of :mod:`ssl_geometry.losses`; the formulas are summarised
in :func:`make_objective` and given in full there.

Methods (``name`` in :data:`OBJECTIVES`): ``simsiam`` (Chen & He 2021),
``byol`` (Grill et al. 2020), ``simclr`` (NT-Xent, Chen et al. 2020), ``moco``
(v2 queue, He et al. 2020 / Chen et al. 2020), ``moco_v3`` (Chen et al. 2021),
``barlow_twins`` (Zbontar et al. 2021), ``vicreg`` (Bardes et al. 2022),
``dino`` (Caron et al. 2021), ``spectral_contrastive`` (HaoChen et al. 2021),
``wmse`` (Ermolov et al. 2021).
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from ssl_geometry.ssl import losses
from ssl_geometry._checks import check_choice, check_positive
from ssl_geometry.models.base import Model

Array = jax.Array

OBJECTIVES = ("simsiam", "byol", "simclr", "moco", "moco_v3", "barlow_twins", "vicreg", "dino",
              "spectral_contrastive", "wmse")
#: Methods that keep an EMA copy of backbone + projector as ``state["target"]``.
EMA_METHODS = frozenset({"byol", "moco", "moco_v3", "dino"})
#: Methods whose online branch has a predictor after the projector.
PREDICTOR_METHODS = frozenset({"simsiam", "byol", "moco_v3"})


class Objective(NamedTuple):
    """A two-view SSL objective as pure functions.

    Attributes:
      name: method name.
      init: ``init(key) -> (params, state)``.
      loss_fn: ``loss_fn(params, state, rng, batch) -> (loss, (new_state, aux))``.
      update_state: ``update_state(new_params, state, step) -> state``; run after the
        optimiser step (EMA target update; identity for methods without a target).
      features: ``features(params, state, images) -> (n, d)`` backbone features, eval mode.
      embed: ``embed(params, state, images) -> (n, k)`` projector outputs, eval mode.
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
    groups: dict
    feature_dim: int


# --------------------------------------------------------------------------- losses


def _l2n(x, eps=1e-12):
    return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), eps)


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
    """BYOL's cosine EMA schedule ``tau_k = 1 - (1 - tau_0) (cos(pi k / K) + 1) / 2``."""
    k = jnp.minimum(jnp.asarray(step, jnp.float32), float(total_steps))
    return 1.0 - (1.0 - base) * (jnp.cos(math.pi * k / total_steps) + 1.0) / 2.0


def identity_views(key, images):
    """No augmentation: both views are the clean images (for tests and debugging)."""
    del key
    return images, images


# --------------------------------------------------------------------------- builder


def make_objective(
    name: str,
    backbone: Model,
    projector: Model,
    predictor: Model | None = None,
    *,
    augment: Callable = identity_views,
    temperature: float = 0.1,
    ema: float = 0.99,
    total_steps: int = 1000,
    queue_size: int = 4096,
    barlow_lambda: float = 5e-3,
    vicreg_coeffs: tuple = (25.0, 25.0, 1.0),
    dino_temps: tuple = (0.1, 0.04),
    dino_center_momentum: float = 0.9,
) -> Objective:
    """Build the :class:`Objective` ``name`` from ``backbone -> projector [-> predictor]``.

    Losses on head outputs (view ``a``: ``z_a = g(f(x_a))``, ``p_a = q(z_a)``):

    * simsiam: ``-(cos(p1, sg z2) + cos(p2, sg z1)) / 2``;
    * byol: ``|p1~ - sg t2~|^2 + |p2~ - sg t1~|^2`` with ``t`` from the EMA target
      and ``~`` L2 normalisation;
    * simclr: NT-Xent over the 2n views with temperature ``temperature``;
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
    * wmse: MSE of L2-normalised whitened embeddings (whitening over both views).

    Args:
      name: one of :data:`OBJECTIVES`.
      backbone, projector, predictor: models; ``predictor`` is required for
        simsiam, byol and moco_v3 and must be ``None`` otherwise.
      augment: ``augment(key, images) -> (view1, view2)``, run on device.
      temperature: softmax temperature (simclr, moco, moco_v3).
      ema: base EMA decay ``tau_0`` of the target network (byol, moco, moco_v3, dino).
      total_steps: K in the cosine EMA schedule.
      queue_size: MoCo v2 queue length K.
      barlow_lambda, vicreg_coeffs, dino_temps, dino_center_momentum: method constants.
    """
    check_choice(name, "objective", OBJECTIVES)
    if name in PREDICTOR_METHODS and predictor is None:
        raise ValueError(f"objective {name!r} needs a `predictor` model; got None.")
    if name not in PREDICTOR_METHODS and predictor is not None:
        raise ValueError(f"objective {name!r} has no predictor; pass `predictor=None`.")
    if projector.in_shape != (backbone.out_dim,):
        raise ValueError(f"`projector` input {projector.in_shape} does not match the backbone output "
                         f"dimension {backbone.out_dim}.")
    if predictor is not None and predictor.in_shape != (projector.out_dim,):
        raise ValueError(f"`predictor` input {predictor.in_shape} does not match the projector output "
                         f"dimension {projector.out_dim}.")
    check_positive(temperature, "temperature")
    if not 0.0 <= ema < 1.0:
        raise ValueError(f"`ema` must lie in [0, 1); got {ema!r}.")
    if not isinstance(total_steps, int) or total_steps < 1:
        raise ValueError(f"`total_steps` must be a positive int; got {total_steps!r}.")
    if name == "moco" and (not isinstance(queue_size, int) or queue_size < 1):
        raise ValueError(f"`queue_size` must be a positive int; got {queue_size!r}.")
    uses_target = name in EMA_METHODS
    models = {"backbone": backbone, "projector": projector}
    if predictor is not None:
        models["predictor"] = predictor

    def init(key):
        keys = dict(zip(models, jax.random.split(key, len(models) + 1)))
        params, state = {}, {}
        for k, m in models.items():
            v = m.init(keys[k])
            params[k] = v["params"]
            state[k] = {c: val for c, val in v.items() if c != "params"}
        if uses_target:
            # The target starts equal to the online network but as *copies*: a state whose
            # leaves alias each other cannot be donated to a jitted step ("Attempt to donate
            # the same buffer twice"; on several devices the aliased donation crashed XLA).
            state["target"] = jax.tree_util.tree_map(jnp.copy, {
                "params": {k: params[k] for k in ("backbone", "projector")},
                "stats": {k: state[k] for k in ("backbone", "projector")},
            })
        if name == "moco":
            q = jax.random.normal(jax.random.fold_in(key, 7), (queue_size, projector.out_dim))
            state["queue"] = _l2n(q).astype(jax.tree_util.tree_leaves(params["projector"])[0].dtype)
        if name == "dino":
            state["center"] = jnp.zeros((projector.out_dim,), jax.tree_util.tree_leaves(params["projector"])[0].dtype)
        return params, state

    def online(params, x, new_state):
        h, new_state["backbone"] = _run(backbone, params["backbone"], new_state["backbone"], x, True)
        z, new_state["projector"] = _run(projector, params["projector"], new_state["projector"], h, True)
        p = None
        if predictor is not None:
            p, new_state["predictor"] = _run(predictor, params["predictor"], new_state["predictor"], z, True)
        return h, z, p

    def target(state, x, new_target_stats):
        tp = state["target"]["params"]
        h, new_target_stats["backbone"] = _run(backbone, tp["backbone"], new_target_stats["backbone"], x, True)
        t, new_target_stats["projector"] = _run(projector, tp["projector"], new_target_stats["projector"], h, True)
        return jax.lax.stop_gradient(t)

    def loss_fn(params, state, rng, batch):
        images = _as_float(batch["images"], params["backbone"])
        x1, x2 = augment(rng, images)
        new_state = dict(state)
        h1, z1, p1 = online(params, x1, new_state)
        h2, z2, p2 = online(params, x2, new_state)
        aux = {}
        if uses_target:
            tstats = dict(state["target"]["stats"])
            t1 = target(state, x1, tstats)
            t2 = target({"target": {"params": state["target"]["params"], "stats": tstats}}, x2, tstats)
            new_state["target"] = {"params": state["target"]["params"], "stats": tstats}
        if name == "simsiam":
            loss = losses.simsiam(p1, p2, z1, z2)
        elif name == "byol":
            loss = losses.byol(p1, p2, t1, t2)
        elif name == "simclr":
            loss = losses.info_nce(z1, z2, temperature=temperature)
        elif name == "moco":
            loss, new_state["queue"] = losses.moco(z1, t2, state["queue"], temperature=temperature)
        elif name == "moco_v3":
            loss = losses.moco_v3(p1, p2, t1, t2, temperature=temperature)
        elif name == "barlow_twins":
            loss = losses.barlow_twins(z1, z2, lambd=barlow_lambda)
        elif name == "vicreg":
            loss = losses.vicreg(z1, z2, sim_coeff=vicreg_coeffs[0], std_coeff=vicreg_coeffs[1],
                                 cov_coeff=vicreg_coeffs[2])
        elif name == "dino":
            loss, new_state["center"] = losses.dino(
                jnp.stack([z1, z2]), jnp.stack([t1, t2]), state["center"], student_temp=dino_temps[0],
                teacher_temp=dino_temps[1], center_momentum=dino_center_momentum)
        elif name == "spectral_contrastive":
            loss = losses.spectral_contrastive(z1, z2)
        else:  # wmse
            loss = losses.wmse(z1, z2)
        zn = _l2n(z1)
        aux["z_std"] = jnp.mean(jnp.std(zn, axis=0))
        aux["features"] = h1
        return loss, (new_state, aux)

    def update_state(new_params, state, step):
        if not uses_target:
            return state
        tau = ema_decay(step, total_steps, ema)
        online_p = {k: new_params[k] for k in ("backbone", "projector")}
        new_target = dict(state["target"])
        new_target["params"] = losses.ema_update(state["target"]["params"], online_p, tau)
        return {**state, "target": new_target}

    def features(params, state, images):
        images = _as_float(images, params["backbone"])
        h, _ = _run(backbone, params["backbone"], state["backbone"], images, False)
        return h

    def embed(params, state, images):
        h = features(params, state, images)
        z, _ = _run(projector, params["projector"], state["projector"], h, False)
        return z

    groups = {"backbone": "backbone", "projector": "head"}
    if predictor is not None:
        groups["predictor"] = "head"
    return Objective(name=name, init=init, loss_fn=loss_fn, update_state=update_state, features=features,
                     embed=embed, groups=groups, feature_dim=backbone.out_dim)
