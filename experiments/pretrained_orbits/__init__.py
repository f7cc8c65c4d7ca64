"""Experiment 9: released vision SSL checkpoints with their heads -- orbit geometry, backbone vs head.

For every released checkpoint that ships its projection head (DINO ViT-S/16, DINO ResNet-50,
VICReg ResNet-50, Barlow Twins ResNet-50; :data:`ssl_geometry.pretrained.CHECKPOINTS`) found in
``config.model.checkpoint_dir`` (the official ``.pth`` or our converted ``.safetensors``):

* images: CIFAR-10 test (``ssl_geometry.data`` tfds loader when prepared, else the embedded
  ``"shapes"`` set; the source used is recorded), ``images_per_class`` from each of
  ``num_classes`` classes, resized bilinearly to ``image_size`` (:func:`augment.crop_and_resize`);
* orbits ``x_t = g_{theta_t}(x)`` for rotation (radians), hue, saturation and Gaussian blur
  (:mod:`ssl_geometry.augment`, ``orbit`` / ``orbit_tangents``), ``theta_t`` on a uniform grid of
  ``orbit_steps`` points, then ImageNet normalisation; the backbone tangent
  ``v = dz/dtheta = J_f(x_t) dx_t/dtheta`` by one forward-mode ``jax.jvp`` (exact);
* backbone ``z = f(x_t)`` (float32, as released) vs head ``u = h(z)`` (float64):

  - orbit statistics (:func:`metrics.orbit_statistics` on ``(classes, images, steps, dim)``):
    orbit spread, intra-orbit distance, inter-class distance, class/orbit ratio; raw, and the
    spread relative to the global scale ``s = sqrt(mean |r - mean r|^2)`` of the same points
    (backbone and head live in spaces of different size and scale, so the scale-free relative
    spread is the one compared; ``spread ratio = rel. spread(u) / rel. spread(z)``);
  - effective rank of all orbit points, both conventions (:func:`metrics.effective_rank`,
    ``"rankme"`` and ``"squared"``);
  - metric degeneracy along augmentation tangents, ``g_aug = |J_h(z) v| / |v|``
    (:func:`metrics.metric_degeneracy`; equal to :func:`metrics.augmentation_metric_degeneracy`
    of the composed path, computed here from the batched backbone jvp), against the registry's
    controls (random, between, data; ``g_c = sqrt(mean_r |J_h r|^2 / |r|^2)`` over
    ``analysis.control_directions`` directions per point), averaged geometrically per image, as
    ``D_c = exp(mean_i log(g_aug,i / g_c,i))`` with bootstrap intervals over images
    (:func:`experiments.rules.degeneracy_ratio`), for the released head and for a random
    initialisation of the same head architecture on the same z (the untrained head);
  - the paper-way orbit compression of the training augmentations' orbits
    (:func:`experiments.rules.orbit_compression`, L2-normalised, squared spread per orbit);
  - the pullback-metric spectrum ``eig(J_h(z)^T J_h(z))`` at ``metric_points`` clean images by
    block Lanczos on the matrix-free ``v -> J^T (J v)`` (:func:`curvature.blockwise_extreme_eigenvalues`,
    jvp + vjp, heads are wide), cross-checked against the dense
    :func:`geometry.pullback_metric` when the Jacobians are small enough.

The claim ``sec5-metric-degeneracy`` is decided per present checkpoint (its ``subject``) by
:func:`experiments.rules.decide_sec5`: the training augmentations (hue, saturation, blur) against
every control and the untrained head, rotation (not in the releases' training views) as the
negative control, the orbits of the training augmentations. No official checkpoint can be
downloaded here: an absent checkpoint's row says ``absent`` with the expected file name and source
URL, and with none present the verdict is ``inconclusive``. With ``config.control.enabled`` the same
pipeline also runs on the randomly initialised architecture + head (``config.control.checkpoints``)
as a labelled pipeline control: in place of an absent checkpoint, or beside a present one. Control
numbers are never presented as checkpoint results and never decide.
"""

from __future__ import annotations

import pathlib
import time

import jax
import ml_collections
import numpy as np

from experiments import claims, configs, rules
from ssl_geometry import pretrained

from . import dry_run as D
from .checkpoints import control_models, find_checkpoint, load_checkpoint, resnet50_backbone
from .pipeline import AUGMENTATIONS as AUGMENTATIONS
from .pipeline import (
    STATUS_ABSENT,
    STATUS_CONTROL,
    STATUS_PRESENT,
    analyse,
    log,
)
from .tables import figures as figures
from .tables import report as report

__all__ = ["NAME", "DRY_RUN", "TITLE", "CLAIM", "CLAIMS", "AUGMENTATIONS", "measure", "decide", "report", "figures"]

NAME = "pretrained_orbits"
DRY_RUN = True  # honours config.dry_run (reduced inputs, projections from two sizes)
TITLE = "Foundation models: released vision SSL checkpoints with their heads (Sec. 5)"
#: The registry claims (experiments/claims/) this experiment decides.
CLAIMS = (rules.SEC5,)
CLAIM = (
    "In released SSL checkpoints (DINO ViT-S/16, DINO / VICReg / Barlow Twins ResNet-50) the head's "
    "metric degenerates along the tangents of the augmentations the release was trained with and "
    "their orbits compress from backbone to head (Sec. 5)."
)


#: Under ``dry_run``: the paper's architectures, heads, 224 px images and control directions per orbit point,
#: 2 classes x 1 image, 3 orbit steps, one metric point (the dense cross-check decided as at the full variant's
#: metric points, :func:`_dry_config`); then the projection (:func:`.dry_run.project`).
_DRY = {
    "data.num_classes": 2,
    "data.images_per_class": 1,
    "analysis.orbit_steps": 3,
    "analysis.metric_points": 1,
    "analysis.lanczos_k": 2,
    "analysis.lanczos_steps": 20,
    "analysis.batch_size": 6,
    "control.num_classes": 2,
    "control.images_per_class": 1,
    "control.orbit_steps": 3,
}


def _dry_config(full) -> ml_collections.ConfigDict:
    """``full`` with :data:`_DRY`, and ``max_dense_jacobian`` scaled by ``metric_points`` (dry / full), so that the
    dense cross-check runs exactly where the full variant's would (``points * d * k <= max_dense_jacobian``)."""
    cfg = configs.apply_overrides(ml_collections.ConfigDict(full.to_dict()), _DRY)
    cfg.analysis.max_dense_jacobian = int(
        full.analysis.max_dense_jacobian * cfg.analysis.metric_points / full.analysis.metric_points
    )
    return cfg


def measure(config) -> dict:
    """Every checkpoint (present, or its absence) and the pipeline controls (numbers only); under ``dry_run`` at
    the sizes of :func:`_dry_config`, with the projection of :func:`.dry_run.project` (``measurements["dry_run"]``)."""
    full, dry = config, None
    if config.dry_run:
        config = _dry_config(full)
    t_cpu = time.process_time()
    with jax.enable_x64(True):
        rows, aug_rows, image_cache = [], [], {}
        key = jax.random.PRNGKey(int(config.seed))
        ckdir = pathlib.Path(config.model.checkpoint_dir).expanduser()
        unit = D.unit_name(config) if config.dry_run else None
        for i, name in enumerate(config.model.checkpoints):
            info = pretrained.CHECKPOINTS[name]
            k_i = jax.random.fold_in(key, i)
            path = find_checkpoint(name, ckdir)
            if path is not None:
                log(f"{name}: loading {path}")
                pre = load_checkpoint(
                    name,
                    path,
                    dino_which=config.model.dino_which,
                    barlowtwins_loss_bn=bool(config.model.barlowtwins_loss_bn),
                )
                backbone = pre.backbone
                if name != "dino_vits16":  # share one compiled ResNet-50 among the three releases
                    cand = resnet50_backbone(int(config.data.image_size))
                    tmpl = jax.eval_shape(cand.init, jax.random.PRNGKey(0))
                    if jax.tree_util.tree_structure(tmpl) == jax.tree_util.tree_structure(pre.variables["backbone"]):
                        backbone = cand
                row, ar = analyse(
                    name,
                    STATUS_PRESENT,
                    backbone,
                    pre.head,
                    pre.variables,
                    config,
                    image_size=int(config.data.image_size),
                    num_classes=int(config.data.num_classes),
                    images_per_class=int(config.data.images_per_class),
                    steps=int(config.analysis.orbit_steps),
                    key=k_i,
                    file=str(path),
                    image_cache=image_cache,
                )
                rows.append(row)
                aug_rows += ar
            else:
                rows.append(
                    {
                        "checkpoint": name,
                        "status": STATUS_ABSENT,
                        "expected_file": info.filename,
                        "url": info.url,
                        "layout": info.source,
                        "searched": str(ckdir),
                    }
                )
                log(f"{name}: absent ({info.filename} not in {ckdir})")
            if config.control.enabled and name in config.control.checkpoints:
                # In place of an absent checkpoint, or as the untrained baseline next to a present one.
                log(f"{name}: pipeline control on the random initialisation")
                backbone, head, variables = control_models(name, config, jax.random.fold_in(k_i, 1))
                if name == unit:  # the dry run's analysis of it is the projection's first (untimed) unit
                    present = sum(find_checkpoint(n, ckdir) is not None for n in full.model.checkpoints)
                    row, ar, dry = D.project(name, (backbone, head, variables), config, full, k_i, image_cache, present)
                else:
                    row, ar = analyse(
                        name,
                        STATUS_CONTROL,
                        backbone,
                        head,
                        variables,
                        config,
                        image_size=int(config.control.image_size),
                        num_classes=int(config.control.num_classes),
                        images_per_class=int(config.control.images_per_class),
                        steps=int(config.control.orbit_steps),
                        key=k_i,
                        image_cache=image_cache,
                    )
                rows.append(row)
                aug_rows += ar
    premises = {
        "trained_augmentations": list(config.analysis.trained_augmentations),
        "note": (
            "Sec. 5 speaks of heads trained for invariance to a transformation. The releases train with "
            "colour jitter (hue, saturation), grayscale and Gaussian blur, not rotation: the premise holds "
            "for hue/saturation/blur orbits of a real checkpoint and fails for rotation and for every "
            "control (untrained heads). The paper's orbit ranges are wider than the training jitter "
            "(DINO / VICReg / Barlow Twins: ColorJitter hue +-0.1, saturation [0.8, 1.2], blur sigma "
            "[0.1, 2]), so the orbits also leave the training distribution."
        ),
        "held_for": [
            f"{r['checkpoint']}/{a}"
            for r in rows
            if r["status"] == STATUS_PRESENT
            for a in config.analysis.trained_augmentations
        ],
    }
    _check_roles(config)
    out = {
        "paper": {},
        "checkpoints": rows,
        "augmentations": aug_rows,
        "premises": premises,
        "checkpoint_dir": str(pathlib.Path(config.model.checkpoint_dir).expanduser()),
        "cpu_time_s": time.process_time() - t_cpu,
    }
    if dry is not None:  # no training: one analysis timed at two orbit sizes, projected to all (.dry_run.project)
        out["dry_run"] = dry
    return out


def _check_roles(config) -> None:
    """The negative control must be analysed and not one of the releases' training augmentations."""
    a = config.analysis
    for name in (*a.trained_augmentations, *a.negative):
        if name not in AUGMENTATIONS:
            raise ValueError(f"`analysis` names augmentation {name!r}; expected names from {AUGMENTATIONS}.")
    both = set(a.trained_augmentations) & set(a.negative)
    if both:
        raise ValueError(f"`analysis.negative` {sorted(both)} are training augmentations of the releases.")


def _sec5_item(row: dict, aug_rows: list[dict]) -> dict:
    """``sec5-metric-degeneracy`` for one present checkpoint (``subject``) by the shared rule."""
    mine = [a for a in aug_rows if a["checkpoint"] == row["checkpoint"] and a["status"] == STATUS_PRESENT]
    role = lambda a: {h: a["ratios"][h] for h in ("trained", "untrained")}
    augs = {a["augmentation"]: role(a) for a in mine if a["in_training_augmentations"] and a["ratios"]["trained"]}
    negative = {a["augmentation"]: role(a) for a in mine if a["negative_control"] and a["ratios"]["trained"]}
    premises = {
        "backbone_not_collapsed": row["erank_rankme_z"] >= claims.CLAIMS[rules.SEC5].thresholds["min_effective_rank"]
    }
    # the trained head's orbit compression over the untrained head's, on the same pooled training-augmentation orbits
    tr_rows = [a for a in mine if a["in_training_augmentations"]]
    vs0 = (
        rules.orbit_gain_over_untrained(
            np.concatenate([a["orbit_spreads"]["trained"] for a in tr_rows]),
            np.concatenate([a["orbit_spreads"]["untrained"] for a in tr_rows]),
        )
        if tr_rows and all({"trained", "untrained"} <= set(a["orbit_spreads"]) for a in tr_rows)
        else None
    )
    item = rules.decide_sec5(
        augs,
        row["orbit_compression"].get("trained"),
        negative=negative or None,
        premises=premises,
        subject=row["checkpoint"],
        orbits_vs_untrained=vs0,
    )
    item["deciding"]["erank_rankme_z"] = row["erank_rankme_z"]
    if "untrained" in row["orbit_compression"]:
        item["deciding"]["orbit_compression_untrained"] = row["orbit_compression"]["untrained"]["S"]
    return item


def decide(m: dict, config) -> dict:
    """One ``sec5-metric-degeneracy`` item per present checkpoint; inconclusive when none is present."""
    del config  # the roles of the augmentations are stored with each row; the thresholds are the registry's
    rows = m["checkpoints"]
    present = [r for r in rows if r["status"] == STATUS_PRESENT]
    items = [_sec5_item(r, m["augmentations"]) for r in present]
    if not items:
        items = [
            {
                "id": rules.SEC5,
                "verdict": "inconclusive",
                "deciding": {"checkpoints_present": 0},
                "reason": (
                    "no released checkpoint was found in the checkpoint directory (none can be downloaded "
                    "here); the pipeline controls (random initialisations) test the pipeline, not the claim"
                ),
            }
        ]
    headline = {
        "checkpoints_present": len(present),
        "checkpoints_absent": sum(r["status"] == STATUS_ABSENT for r in rows),
        "controls_run": sum(r["status"] == STATUS_CONTROL for r in rows),
    }
    for r in present:
        for a in m["augmentations"]:
            if a["checkpoint"] == r["checkpoint"] and a["status"] == STATUS_PRESENT and a["ratios"]["trained"]:
                headline[f"{r['checkpoint']}_D_{a['augmentation']}_vs_random"] = a["ratios"]["trained"]["random"]["D"]
        if "trained" in r["orbit_compression"]:
            headline[f"{r['checkpoint']}_orbit_compression"] = r["orbit_compression"]["trained"]["S"]
    return {"claims": items, "headline": headline}
