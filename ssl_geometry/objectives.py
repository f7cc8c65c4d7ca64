"""Two-view self-supervised objectives behind one interface.

Every objective is an :class:`Objective` built from a backbone, a head
(projector) and, where the method has one, a predictor (all :class:`Model`).
Following DeepMind's BYOL JAX code, the whole update is one pure function::

    loss, (new_state, aux) = objective.loss_fn(params, state, rng, batch)

``batch["images"]`` is an ``(n, H, W, C)`` (or ``(n, D)``) array of *clean*
images (``uint8`` in [0, 255] or floats in [0, 1]; cast to the parameter dtype);
the two augmented views are drawn on device inside ``loss_fn`` from ``rng`` by
the ``augment(key, images) -> (view1, view2)`` function given at construction (:func:`identity_views`: none).
``params`` holds the trainable parameters
(``{"backbone", "projector"[, "predictor"]}``); ``state`` holds everything else
the method carries from step to step:

* ``state["backbone" | "projector" | "predictor"]``: BatchNorm statistics
  (the non-``"params"`` collections of each model, ``{}`` when none);
* ``state["target"]``: the EMA target/teacher/key network (BYOL, MoCo, DINO):
  ``{"params": {...}, "stats": {...}}``, updated by :attr:`Objective.update_state`
  after the optimiser step with ``xi <- tau xi + (1 - tau) theta`` and the cosine
  schedule ``tau_k = 1 - (1 - tau_0)(cos(pi k / K) + 1) / 2`` (BYOL, Grill et al. 2020; :func:`ema_decay`);
* ``state["queue"]`` (MoCo v2: the ``(K, dim)`` queue of L2-normalised keys) and
  ``state["center"]`` (DINO: the teacher centre), returned updated by ``loss_fn``.

``aux`` holds scalar diagnostics and ``aux["features"]``, the backbone features
of view 1 (the trainer trains its online linear probe on
``stop_gradient(aux["features"])`` and removes them before logging).

The losses are those of :mod:`ssl_geometry.losses`; the formulas are summarised
in :func:`make_objective` and given in full there.

Methods (``name`` in :data:`OBJECTIVES`): ``simsiam`` (Chen & He 2021),
``byol`` (Grill et al. 2020), ``simclr`` (NT-Xent, Chen et al. 2020), ``simclr_one_way`` (the
one-directional cross-entropy of the paper authors' guillotine experiment), ``moco``
(v2 queue, He et al. 2020 / Chen et al. 2020), ``moco_v3`` (Chen et al. 2021),
``barlow_twins`` (Zbontar et al. 2021), ``vicreg`` (Bardes et al. 2022),
``dino`` (Caron et al. 2021), ``spectral_contrastive`` (HaoChen et al. 2021),
``wmse`` (Ermolov et al. 2021).

The objective table :data:`TABLE` (``ssl_geometry/_src/ssl/losses/registry.py``) holds one
:class:`ObjectiveSpec` per loss and objective: its names, its loss, which head outputs the loss reads, whether
it has a predictor or an EMA target, its state, its hyper-parameters (:class:`Hyper`) and a minimum batch that
grows with the feature dimension (:class:`BatchAboveDim`, W-MSE's). Each spec is written beside its loss, in the
``SPECS`` of the loss's family module under ``ssl_geometry/_src/ssl/losses/``, and the table collects them.
:data:`OBJECTIVES`, :data:`EMA_METHODS`, :data:`PREDICTOR_METHODS`, :func:`make_objective`, the losses registry
(:data:`ssl_geometry.losses.REGISTRY`) and the trainer's config check all read it when they are used, so a
spec added to it is trained by name (``docs/howto/extend.md``).
"""

from ssl_geometry._src.ssl.losses.specs import BatchAboveDim as BatchAboveDim
from ssl_geometry._src.ssl.objectives import EMA_METHODS as EMA_METHODS
from ssl_geometry._src.ssl.objectives import OBJECTIVES as OBJECTIVES
from ssl_geometry._src.ssl.objectives import PREDICTOR_METHODS as PREDICTOR_METHODS
from ssl_geometry._src.ssl.objectives import TABLE as TABLE
from ssl_geometry._src.ssl.objectives import Hyper as Hyper
from ssl_geometry._src.ssl.objectives import Objective as Objective
from ssl_geometry._src.ssl.objectives import ObjectiveSpec as ObjectiveSpec
from ssl_geometry._src.ssl.objectives import ema_decay as ema_decay
from ssl_geometry._src.ssl.objectives import identity_views as identity_views
from ssl_geometry._src.ssl.objectives import make_objective as make_objective

__all__ = [
    "OBJECTIVES",
    "EMA_METHODS",
    "PREDICTOR_METHODS",
    "TABLE",
    "BatchAboveDim",
    "Hyper",
    "Objective",
    "ObjectiveSpec",
    "ema_decay",
    "identity_views",
    "make_objective",
]
