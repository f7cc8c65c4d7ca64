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
    of the composed path, computed here from the batched backbone jvp), against isotropic random
    directions ``g_rand = sqrt(mean_r |J_h r|^2 / |r|^2)`` (``n_random`` Gaussian ``r`` per point;
    ``E |J r|^2 / |r|^2 = tr(J^T J) / d``); the degeneracy ratio of an augmentation is
    ``D = exp(mean_i log(g_aug,i / g_rand,i))`` (``D < 1``: the head keeps less of the
    augmentation direction than of a random one);
  - the pullback-metric spectrum ``eig(J_h(z)^T J_h(z))`` at ``metric_points`` clean images by
    block Lanczos on the matrix-free ``v -> J^T (J v)`` (:func:`curvature.blockwise_extreme_eigenvalues`,
    jvp + vjp, heads are wide), cross-checked against the dense
    :func:`geometry.pullback_metric` when the Jacobians are small enough.

No official checkpoint can be downloaded here: an absent checkpoint's row says ``absent`` with
the expected file name and source URL. With ``config.control.enabled`` the same pipeline also runs on the
randomly initialised architecture + head (``config.control.checkpoints``) as a labelled pipeline
control: in place of an absent checkpoint, or as the untrained baseline next to a present one.
Control numbers are never presented as checkpoint results; verdicts use real checkpoints only.
"""
from __future__ import annotations

import pathlib
import time

import jax

import ml_collections

from experiments import common, configs
from ssl_geometry import pretrained

from .pipeline import AUGMENTATIONS as AUGMENTATIONS
from .pipeline import STATUS_ABSENT, STATUS_CONTROL, STATUS_PRESENT, log, resnet50_backbone, analyse, control_models
from .pipeline import find_checkpoint, load_checkpoint
from .tables import figures as figures
from .tables import report as report

__all__ = ["NAME", "DRY_RUN", "TITLE", "CLAIM", "RULE", "AUGMENTATIONS", "measure", "decide", "report", "figures"]

NAME = "pretrained_orbits"
DRY_RUN = True  # honours config.dry_run (reduced inputs, 2 steps per training phase, timing record)
TITLE = "Foundation models: released vision SSL checkpoints with their heads (Sec. 5)"
#: The registry claims (experiments/claims.py) this experiment decides.
CLAIMS = ("sec5-metric-degeneracy",)
CLAIM = ("In released SSL checkpoints (DINO ViT-S/16, DINO / VICReg / Barlow Twins ResNet-50) the head's "
         "metric degenerates along augmentation tangents (|J_h v|/|v| below random directions) and "
         "augmentation orbits shrink from backbone to head (Sec. 5).")
RULE = ("Only checkpoints found on disk count (pipeline controls on random initialisations never do). For each "
        "present checkpoint, over the augmentations in its training distribution (analysis.trained_augmentations = "
        "{analysis[trained_augmentations]}; rotation is reported but is not one of them): D_tr = geometric mean of the "
        "degeneracy ratios D = exp(mean_i log(g_aug,i / g_rand,i)) and S_tr = geometric mean of the relative-orbit-"
        "spread ratios head/backbone. A checkpoint agrees if D_tr < 1 and S_tr < 1, disagrees if D_tr >= 1 and "
        "S_tr >= 1, is mixed otherwise. 'supported' if every present checkpoint agrees, 'not supported' if every one "
        "disagrees, 'inconclusive' otherwise or when no checkpoint is present.")


#: Under ``dry_run``: the paper's architectures, heads and 224 px images, 2 classes x 1 image, 3 orbit steps.
_DRY = {"data.num_classes": 2, "data.images_per_class": 1, "analysis.orbit_steps": 3, "analysis.metric_points": 1,
        "analysis.lanczos_k": 2, "analysis.lanczos_steps": 20, "analysis.n_random": 2, "analysis.batch_size": 6,
        "control.num_classes": 2, "control.images_per_class": 1, "control.orbit_steps": 3}


def _points(c, section) -> int:
    return c[section].num_classes * c[section].images_per_class * (c.analysis.orbit_steps if section == "data"
                                                                     else c.control.orbit_steps)


def measure(config) -> dict:
    """Every checkpoint (present, or its absence) and the pipeline controls (numbers only)."""
    full = config
    if config.dry_run:
        config = configs.apply_overrides(ml_collections.ConfigDict(config.to_dict()), _DRY)
    t_cpu = time.process_time()
    with jax.enable_x64(True):
        rows, aug_rows, image_cache = [], [], {}
        key = jax.random.PRNGKey(int(config.seed))
        ckdir = pathlib.Path(config.model.checkpoint_dir).expanduser()
        for i, name in enumerate(config.model.checkpoints):
            info = pretrained.CHECKPOINTS[name]
            k_i = jax.random.fold_in(key, i)
            path = find_checkpoint(name, ckdir)
            if path is not None:
                log(f"{name}: loading {path}")
                pre = load_checkpoint(name, path, dino_which=config.model.dino_which,
                                      barlowtwins_loss_bn=bool(config.model.barlowtwins_loss_bn))
                backbone = pre.backbone
                if name != "dino_vits16":  # share one compiled ResNet-50 among the three releases
                    cand = resnet50_backbone(int(config.data.image_size))
                    tmpl = jax.eval_shape(cand.init, jax.random.PRNGKey(0))
                    if jax.tree_util.tree_structure(tmpl) == jax.tree_util.tree_structure(pre.variables["backbone"]):
                        backbone = cand
                row, ar = analyse(name, STATUS_PRESENT, backbone, pre.head, pre.variables, config,
                                  image_size=int(config.data.image_size), num_classes=int(config.data.num_classes),
                                  images_per_class=int(config.data.images_per_class), steps=int(config.analysis.orbit_steps),
                                  key=k_i, file=str(path), image_cache=image_cache)
                rows.append(row)
                aug_rows += ar
            else:
                rows.append({"checkpoint": name, "status": STATUS_ABSENT, "expected_file": info.filename,
                             "url": info.url, "layout": info.source, "searched": str(ckdir)})
                log(f"{name}: absent ({info.filename} not in {ckdir})")
            if config.control.enabled and name in config.control.checkpoints:
                # In place of an absent checkpoint, or as the untrained baseline next to a present one.
                log(f"{name}: pipeline control on the random initialisation")
                backbone, head, variables = control_models(name, config, jax.random.fold_in(k_i, 1))
                row, ar = analyse(name, STATUS_CONTROL, backbone, head, variables, config,
                                  image_size=int(config.control.image_size),
                                  num_classes=int(config.control.num_classes),
                                  images_per_class=int(config.control.images_per_class),
                                  steps=int(config.control.orbit_steps), key=k_i, image_cache=image_cache)
                rows.append(row)
                aug_rows += ar
    premises = {
        "trained_augmentations": list(config.analysis.trained_augmentations),
        "note": ("Sec. 5 speaks of heads trained for invariance to a transformation. The releases train with "
                 "colour jitter (hue, saturation), grayscale and Gaussian blur, not rotation: the premise holds "
                 "for hue/saturation/blur orbits of a real checkpoint and fails for rotation and for every "
                 "control (untrained heads). The paper's orbit ranges are wider than the training jitter "
                 "(DINO / VICReg / Barlow Twins: ColorJitter hue +-0.1, saturation [0.8, 1.2], blur sigma "
                 "[0.1, 2]), so the orbits also leave the training distribution."),
        "held_for": [f"{r['checkpoint']}/{a}" for r in rows if r["status"] == STATUS_PRESENT for a in config.analysis.trained_augmentations],
    }
    out = {"checkpoints": rows, "augmentations": aug_rows, "premises": premises,
           "checkpoint_dir": str(pathlib.Path(config.model.checkpoint_dir).expanduser()),
           "cpu_time_s": time.process_time() - t_cpu}
    if full.dry_run:  # no training: a "step" is one analysed checkpoint or control, scaled by its orbit points
        done = [r for r in rows if r["status"] != STATUS_ABSENT]
        sec = {r["status"]: "data" if r["status"] == STATUS_PRESENT else "control" for r in done}
        proj = sum(r["seconds"] * _points(full, sec[r["status"]]) / _points(config, sec[r["status"]]) for r in done)
        out["dry_run"] = common.dry_run_record(
            float(sum(r["seconds"] for r in done) / max(len(done), 1)), projected_wall_time_s=float(proj),
            projection="seconds per analysed checkpoint x (full / dry orbit points)")
    return out


def _verdict(rows: list[dict]) -> tuple[str, str]:
    """``(verdict, reason)`` from the summary rows by :data:`RULE` (present checkpoints only)."""
    present = [r for r in rows if r["status"] == STATUS_PRESENT]
    if not present:
        return "inconclusive", ("no released checkpoint was found in the checkpoint directory; the control "
                                "numbers (random initialisations) test the pipeline, not the claim")
    outcomes = [r["outcome"] for r in present]
    names = ", ".join(f"{r['checkpoint']}: {r['outcome']}" for r in present)
    if all(o == "agrees" for o in outcomes):
        return "supported", f"every present checkpoint agrees ({names})"
    if all(o == "disagrees" for o in outcomes):
        return "not supported", f"every present checkpoint disagrees ({names})"
    return "inconclusive", f"present checkpoints differ or are mixed ({names})"



def decide(m: dict, config) -> dict:
    """The verdict of :data:`RULE` from the stored rows; the headline counts present/absent checkpoints."""
    rows = m["checkpoints"]
    verdict, reason = _verdict(rows)
    present = [r for r in rows if r["status"] == STATUS_PRESENT]
    headline = {"checkpoints_present": len(present), "checkpoints_absent": sum(r["status"] == STATUS_ABSENT for r in rows),
                "controls_run": sum(r["status"] == STATUS_CONTROL for r in rows)}
    for r in present:
        headline[f"{r['checkpoint']}_D_trained"] = r["D_trained"]
        headline[f"{r['checkpoint']}_spread_ratio_trained"] = r["spread_ratio_trained"]
    return {"verdict": verdict, "verdict_reason": reason, "headline": headline, "paper": {}}
