"""Experiment 6: the guillotine -- does the projection head destroy augmentation information? (Sec. 5)

A backbone ``f`` and a ReLU+BatchNorm MLP projector ``h`` are trained jointly with SimCLR's NT-Xent
(tau 0.1, Adam 1e-3) on the authors' guillotine views (crop, flip, rotation up to 45 deg, colour
jitter; :mod:`.training`), through the one run loop (``ssl_geometry.trainer.train``, as
``python -m ssl_geometry.train``). Then, on held-out images,
backbone ``z = f(x)`` against head ``h(z)`` (:mod:`.geometry`):

* **Probes**: 4-way rotation prediction (0/90/180/270 deg, linear and 2-layer MLP) and class
  prediction, from ``z`` and from ``h(z)``.
* **Trajectory curvature** along the rotation angle on the paper's grid (10 angles in [0, 45 deg]):
  the paper's number (L2-normalised, undivided second differences, ratio of means), the exact
  ``|d^2 r / d theta^2|`` by nested ``jax.jvp`` and the divided FD, raw and scale-free, and an FD
  convergence study (rotation by bilinear resampling and ReLUs make ``r`` piecewise smooth).
* **Orbit geometry**: the paper's full orbits (12 rotations 0..330 deg, normalised, squared spread)
  and the project's (``metrics.orbit_statistics`` over [0, 45 deg], raw and scale-free).
* **Metric degeneracy** ``|J_h v| / |v|`` along rotation, hue and blur tangents ``v = dz/dt``,
  against three controls (isotropic random, data-covariance and between-sample directions), for
  the trained head and the head at initialisation on the same backbone. The control that decides
  is fixed in the config (``verdict.control``) before the run, and only tangents of augmentations
  the head was trained with enter the rule.
* **Head-depth ablation**: heads with 1/2/3 affine layers, trained alike, rotation probes.

Everything after training runs in float64 when ``jax_enable_x64`` is on; the float32 weights are cast.
"""
from __future__ import annotations

import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from experiments import common
from ssl_geometry import augment, metrics, probes

from . import geometry as G
from . import training as T
from .geometry import AUGMENTATIONS as AUGMENTATIONS
from .geometry import CONTROLS as CONTROLS
from .tables import figures as figures
from .tables import report as report

__all__ = ["NAME", "DRY_RUN", "TITLE", "CLAIM", "RULE", "AUGMENTATIONS", "CONTROLS", "PAPER_NUMBERS", "measure", "decide",
           "report", "figures"]

NAME = "guillotine"
DRY_RUN = True  # honours config.dry_run (reduced inputs, 2 steps per training phase, timing record)
TITLE = "Guillotine and information-invariance (Sec. 5)"
#: The registry claims (experiments/claims.py) this experiment decides.
CLAIMS = ("sec5-metric-degeneracy", "guillotine-probe-gap")
CLAIM = ("The trained projection head buys invariance by destroying information (the guillotine): rotation is less "
         "decodable from h(z) than from the backbone z, and the head's pullback metric degenerates along the "
         "augmentation directions it was trained to be invariant to (J_h v small for v = dz/dtheta).")
RULE = ("premise violated unless the SimCLR loss fell (mean of the last 10% of steps below the first 10%), the "
        "backbone's rotation probe beats chance (mean of linear and MLP accuracy >= "
        "{verdict[min_backbone_rotation_acc]}; chance 0.25) and z is not collapsed (RankMe effective rank >= "
        "{verdict[min_effective_rank]}). The degeneracy half counts only the tangents of augmentations in the "
        "training views (rotation if augment.rotation_deg = {augment[rotation_deg]} > 0; hue if augment.jitter_prob "
        "= {augment[jitter_prob]} > 0 with a hue strength > 0; blur if augment.blur_prob = {augment[blur_prob]} > 0), "
        "each as the ratio of the trained head's mean |J_h v|/|v| along the tangent to its mean along the control "
        "fixed before the run, '{verdict[control]}' directions. Supported if the rotation-probe accuracy on h(z) is "
        "below that on z by >= {verdict[probe_margin]} (mean of linear and MLP) AND every counted ratio is < 1; not "
        "supported if the gap is <= 0 and no counted ratio is < 1; inconclusive otherwise, and when no analysed "
        "augmentation was a training augmentation")

#: The paper's numbers for the setting of each paper variant (accuracies as fractions).
_DEPTH = {"depth1_rot_lin_backbone": 0.475, "depth1_rot_lin_head": 0.474, "depth2_rot_lin_backbone": 0.528,
          "depth2_rot_lin_head": 0.397, "depth3_rot_lin_backbone": 0.524, "depth3_rot_lin_head": 0.356}
PAPER_NUMBERS = {
    ("cifar10", "resnet18_cifar"): {"rot_lin_backbone": 0.5227, "rot_lin_head": 0.3755, "rot_mlp_backbone": 0.5546,
                                    "rot_mlp_head": 0.4356, "curvature_ratio_paper": 1.93,
                                    "spread_shrink_paper": 21.9, **_DEPTH},
    ("cifar10", "vit_tiny"): {"rot_lin_backbone": 0.4075, "rot_lin_head": 0.3492, "rot_mlp_backbone": 0.4422,
                              "rot_mlp_head": 0.4087, "curvature_ratio_paper": 2.59},
    ("cifar100", "resnet18_cifar"): {"rot_lin_backbone": 0.4201, "rot_lin_head": 0.3119, "rot_mlp_backbone": 0.4453,
                                     "rot_mlp_head": 0.3416, "curvature_ratio_paper": 1.84},
}


def _log(msg: str, t0: float) -> None:
    """Progress on stderr (a paper-size run takes hours; a CPU dry run minutes, mostly XLA compiles)."""
    print(f"[{NAME}] {time.perf_counter() - t0:8.1f} s  {msg}", file=sys.stderr, flush=True)


def _sizes(cfg) -> dict:
    """Image counts of every analysis step (a handful under ``dry_run``: every step still runs)."""
    a, p = cfg.analysis, cfg.probes
    full = {"probe_train": p.train_images, "probe_test": p.test_images, "curvature": a.curvature_images,
            "convergence": a.convergence_images, "orbit_classes": a.orbit_classes, "orbit_images": a.orbit_images,
            "degeneracy": a.degeneracy_images}
    if not cfg.dry_run:
        return full
    return {**full, "probe_train": 8, "probe_test": 8, "curvature": 1, "convergence": 1, "orbit_classes": 2,
            "orbit_images": 1, "degeneracy": 4}


def _premises(cfg, losses, rot, erank_z) -> dict:
    k = max(1, len(losses) // 10)
    first, last = float(np.mean(losses[:k])), float(np.mean(losses[-k:]))
    z_rot = 0.5 * (rot["backbone"]["linear"] + rot["backbone"]["mlp"])
    v = cfg.verdict
    return {"ssl_loss_decreased": {"met": last < first, "value": {"first_10pct": first, "last_10pct": last}},
            "backbone_encodes_rotation": {"met": z_rot >= v.min_backbone_rotation_acc, "value": z_rot},
            "backbone_not_collapsed": {"met": erank_z >= v.min_effective_rank, "value": erank_z}}


def _train_all(cfg, train_ds, test_ds, sz, k_probe):
    rot_train = T.rotation_probe_subset(cfg, train_ds, sz["probe_train"])
    rot_test = T.rotation_probe_subset(cfg, test_ds, sz["probe_test"])
    cls_train = (augment.to_float(train_ds.images[: sz["probe_train"]]), train_ds.labels[: sz["probe_train"]])
    cls_test = (augment.to_float(test_ds.images[: sz["probe_test"]]), test_ds.labels[: sz["probe_test"]])
    m = cfg.model
    # The main run (head_depth, head_activation) first; then the ablation depths with ablation_activation (the
    # main run is reused at its depth when the activations agree). Same seed: same backbone initialisation.
    plan = [("main", m.head_depth, m.head_activation)]
    plan += [(d, d, m.ablation_activation) for d in m.depths
             if not (d == m.head_depth and m.ablation_activation == m.head_activation)]
    runs, probe_res = {}, {}
    t0 = time.perf_counter()
    for name, d, act in plan:
        runs[name] = T.train_simclr(cfg, d, act)
        _log(f"{name} (depth {d}, {act}): SimCLR trained ({runs[name]['step_time_s']:.3g} s/step)", t0)
        probe_res[name] = T.probe_suite(cfg, runs[name], rot_train, rot_test, cls_train, cls_test, k_probe,
                                        class_probes=(name == "main"))
        _log(f"{name}: probes done", t0)
    for d in m.depths:  # the ablation's entries
        if d not in runs:
            runs[d], probe_res[d] = runs["main"], probe_res["main"]
    return runs, probe_res, cls_test, rot_train.shape[0], rot_test.shape[0]


def measure(config) -> dict:
    """Train (every head depth), then probe, curvature, orbits and degeneracy of the main run (numbers only)."""
    cfg = config
    t_start = time.perf_counter()
    adt = jnp.float64 if jax.config.read("jax_enable_x64") else jnp.float32
    _, k_probe, k_deg = jax.random.split(jax.random.PRNGKey(cfg.seed), 3)  # training starts from PRNGKey(seed)
    sz = _sizes(cfg)
    train_ds, test_ds = T.load_data(cfg)
    runs, probe_res, cls_test, n_rot_tr, n_rot_te = _train_all(cfg, train_ds, test_ds, sz, k_probe)
    main = runs["main"]
    t_analysis = time.perf_counter()
    fz, fh = T.feature_fns(main)
    z_test, h_test = probes.features_in_batches(fz, cls_test[0]), probes.features_in_batches(fh, cls_test[0])
    scales = {"backbone": G.spread_scale(z_test), "head": G.spread_scale(h_test)}
    ranks = {f"erank_{m}_{w}": float(metrics.effective_rank(jnp.asarray(r, adt), m))
             for w, r in (("backbone", z_test), ("head", h_test)) for m in metrics.EFFECTIVE_RANK_METHODS}
    backbone = T.make_backbone(cfg, adt)
    head = T.make_head(cfg, backbone.out_dim, cfg.model.head_depth, adt)  # the main run's activation
    geos = {a: G.Geometry(backbone, head, G.augmentation_fn(cfg, a)) for a in AUGMENTATIONS}
    v_tr, v_init = G.analysis_variables(main, adt), G.analysis_variables(main, adt, initial_head=True)
    test_f = augment.to_float(test_ds.images, adt)
    _log("representation statistics done", t_start)
    curv = G.curvature_analysis(cfg, geos["rotation"], v_tr, test_f[: sz["curvature"]], scales,
                                convergence_images=sz["convergence"])
    _log("curvature done", t_start)
    orb_imgs = G.orbit_images(cfg, test_ds, sz["orbit_classes"], sz["orbit_images"])
    orb = G.orbit_analysis(cfg, geos["rotation"], v_tr, augment.to_float(orb_imgs, adt), scales)
    _log("orbits done", t_start)
    deg = G.degeneracy_analysis(cfg, geos, v_tr, v_init, test_f[: sz["degeneracy"]], k_deg)
    t_end = time.perf_counter()
    _log("degeneracy done", t_start)
    out = {
        "premises": _premises(cfg, main["losses"], probe_res["main"]["rotation"],
                              ranks["erank_rankme_backbone"]),
        "setting": {"dataset": cfg.data.name, "image_size": cfg.data.image_size, "backbone": backbone.name,
                    "head": head.name, "analysis_dtype": str(jnp.dtype(adt)), "trained_augmentations":
                    T.trained_augmentations(cfg), "rotation_probe_train_images": int(n_rot_tr),
                    "rotation_probe_test_images": int(n_rot_te), "sizes": sz},
        "probes": probe_res["main"], "representation": {**ranks, **{f"scale_{k}": v for k, v in scales.items()}},
        "curvature": curv, "orbits": orb,
        "degeneracy": deg,
        "depth_ablation": [{"head_depth": d, **{f"rot_{k[:3]}_{w}": probe_res[d]["rotation"][w][k]
                                                for k in ("linear", "mlp") for w in ("backbone", "head")},
                            "final_loss": float(runs[d]["losses"][-1])} for d in sorted(cfg.model.depths)],
        "loss_curve": main["losses"].tolist(), "step_time_s": main["step_time_s"],
    }
    if cfg.dry_run:
        t = cfg.train
        trained = {id(r): r for r in runs.values()}.values()
        train_proj = sum(r["step_time_s"] for r in trained) * t.steps * t.batch_size / t.dry_run_batch
        full = _sizes(_full(cfg))
        scale = max(full[k] / max(sz[k], 1) for k in ("curvature", "degeneracy", "probe_train"))
        out["dry_run"] = common.dry_run_record(
            main["step_time_s"], projected_wall_time_s=train_proj + (t_end - t_analysis) * scale,
            wall_time_s=t_end - t_start,
            projection="training: measured step time x steps x depths x batch/dry batch; "
                       "analysis: measured dry analysis time x the largest image-count ratio")
    return out


def _full(cfg):
    import ml_collections

    c = ml_collections.ConfigDict(cfg.to_dict())
    c.dry_run = False
    return c


def headline_of(m: dict, cfg) -> dict:
    """The deciding and compared numbers, from the measurements."""
    rot = m["probes"]["rotation"]
    gap = 0.5 * ((rot["backbone"]["linear"] - rot["head"]["linear"]) + (rot["backbone"]["mlp"] - rot["head"]["mlp"]))
    h = {"rotation_gap_mean": gap}
    trained = [r for r in m["degeneracy"] if r["head"] == "trained"]
    for r in trained:
        for c in CONTROLS:
            h[f"degeneracy_ratio_{r['augmentation']}_vs_{c}"] = r[f"ratio_vs_{c}"]
    cs, osum = m["curvature"]["summary"], m["orbits"]["summary"]
    for w in ("backbone", "head"):
        h[f"rot_lin_{w}"], h[f"rot_mlp_{w}"] = rot[w]["linear"], rot[w]["mlp"]
        h[f"class_lin_{w}"] = m["probes"]["class"][w]["linear"]
    h.update({"curvature_ratio_paper": cs["ratio_paper"], "curvature_ratio_exact_raw": cs["ratio_exact_raw"],
              "curvature_ratio_exact_normalised": cs["ratio_exact_normalised"],
              "spread_shrink_paper": osum["spread_shrink_paper"], "spread_shrink_project_raw": osum["spread_shrink_raw"],
              "spread_shrink_project_normalised": osum["spread_shrink_normalised"]})
    for r in m["depth_ablation"]:
        h[f"depth{r['head_depth']}_rot_lin_backbone"] = r["rot_lin_backbone"]
        h[f"depth{r['head_depth']}_rot_lin_head"] = r["rot_lin_head"]
    return h


def decide(m: dict, config) -> dict:
    cfg = config
    if cfg.verdict.control not in CONTROLS:
        raise ValueError(f"`verdict.control` must be one of {CONTROLS}; got {cfg.verdict.control!r}.")
    h = headline_of(m, cfg)
    counted = [a for a, on in m["setting"]["trained_augmentations"].items() if on]
    ratios = {a: h[f"degeneracy_ratio_{a}_vs_{cfg.verdict.control}"] for a in counted}
    h = {"rotation_gap_mean": h["rotation_gap_mean"],
         **{f"degeneracy_ratio_{a}": r for a, r in ratios.items()}, **h}
    if not all(p["met"] for p in m["premises"].values()):
        verdict, why = "premise violated", "premises not met: " + ", ".join(k for k, p in m["premises"].items() if not p["met"])
    elif not counted:
        verdict, why = "inconclusive", "no analysed augmentation (rotation, hue, blur) is a training augmentation"
    elif h["rotation_gap_mean"] >= cfg.verdict.probe_margin and all(r < 1.0 for r in ratios.values()):
        verdict, why = "supported", f"gap {h['rotation_gap_mean']:.3g} and ratios {ratios} vs {cfg.verdict.control}"
    elif h["rotation_gap_mean"] <= 0.0 and all(r >= 1.0 for r in ratios.values()):
        verdict, why = "not supported", f"gap {h['rotation_gap_mean']:.3g} and ratios {ratios} vs {cfg.verdict.control}"
    else:
        verdict, why = "inconclusive", f"gap {h['rotation_gap_mean']:.3g} and ratios {ratios} vs {cfg.verdict.control}"
    # Other settings (shapes, tiny) are compared with the paper's CIFAR-10 ResNet-18 numbers, labelled so.
    paper = PAPER_NUMBERS.get((cfg.data.name, cfg.model.backbone), PAPER_NUMBERS[("cifar10", "resnet18_cifar")])
    return {"verdict": verdict, "verdict_reason": why, "headline": h,
            "paper": {k: v for k, v in paper.items() if k in h}}
