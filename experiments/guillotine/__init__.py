"""Experiment 6: the guillotine -- does the projection head destroy augmentation information? (Sec. 5)

A backbone ``f`` and a ReLU+BatchNorm MLP projector ``h`` are trained jointly with a SimCLR loss
(tau 0.1, Adam 1e-3; the authors' one-directional cross-entropy in the paper variants) on the
authors' guillotine views (crop, flip, rotation up to 45 deg, colour jitter; :mod:`.training`).
Then, on held-out images, backbone ``z = f(x)`` against head ``h(z)`` and against the same head at
its initialisation ``h_0(z)`` (the untrained head, same inputs):

* **Probes** (:mod:`.probing`): 4-way rotation prediction (one random 90-degree rotation per image,
  as the authors; linear and 2-layer MLP) and class prediction, from ``z``, ``h(z)`` and ``h_0(z)``.
* **Trajectory curvature** along the rotation angle on the paper's grid (10 angles in [0, 45 deg]):
  the paper's number (L2-normalised, undivided second differences, ratio of means), the exact
  ``|d^2 r / d theta^2|`` by nested ``jax.jvp`` and the divided FD, raw and scale-free, and an FD
  convergence study (rotation by bilinear resampling and ReLUs make ``r`` piecewise smooth).
* **Orbit geometry**: the paper's full orbits (12 rotations 0..330 deg, normalised, squared spread
  per orbit, compression with a bootstrap interval over orbits) for the trained and the untrained
  head, and the project's (``metrics.orbit_statistics`` over [0, 45 deg], raw and scale-free).
* **Metric degeneracy** ``|J_h v| / |v|`` per image along rotation, hue and blur tangents
  ``v = dz/dt``, against the registry's controls (random, between-sample, data directions), for
  the trained and the untrained head (:mod:`.geometry`).
* **Head-depth ablation**: heads with 1/2/3 affine layers, trained alike, rotation probes.

Two claims of :mod:`experiments.claims` are decided: ``sec5-metric-degeneracy`` by the shared
rule :func:`experiments.rules.decide_sec5` (training augmentations rotation and hue against every
control and the untrained head, blur as the negative control, the paper-way orbit compression and its
ratio to the untrained head's) and ``guillotine-probe-gap`` (the rotation-probe gap z - h(z) of the trained
head minus the untrained head's, with a paired bootstrap interval over the probe's test images:
:func:`probe_gap_interval`, :func:`gap_verdict`). Training, probes and analysis are bitwise reproducible
run to run on one machine (``tests/test_experiments_guillotine.py``).
Everything after training runs in float64 when ``jax_enable_x64`` is on; the float32 weights are cast.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from experiments import claims, rules
from ssl_geometry import augment, data, metrics

from . import dry_run as D
from . import geometry as G
from . import probing
from . import runs as R
from . import training as T
from .curvature import curvature_analysis
from .gap import GAP, PROBES, decide_gap, gap, gap_outcomes, gap_verdict, probe_gap_interval  # tests
from .geometry import AUGMENTATIONS as AUGMENTATIONS
from .geometry import CONTROLS as CONTROLS
from .tables import figures as figures
from .tables import report as report

__all__ = [
    "NAME",
    "DRY_RUN",
    "TITLE",
    "CLAIM",
    "CLAIMS",
    "AUGMENTATIONS",
    "CONTROLS",
    "PAPER_NUMBERS",
    "measure",
    "decide",
    "report",
    "figures",
]

NAME = "guillotine"
DRY_RUN = True  # honours config.dry_run (two reduced sizes of each part, a few steps per training; .dry_run)
TITLE = "Guillotine and information-invariance (Sec. 5)"
#: The registry claims (experiments/claims/) this experiment decides.
CLAIMS = (rules.SEC5, "guillotine-probe-gap")
CLAIM = (
    "The trained projection head buys invariance by destroying information (the guillotine): rotation is less "
    "decodable from h(z) than from the backbone z, and the head's pullback metric degenerates along the "
    "augmentation directions it was trained to be invariant to (J_h v small for v = dz/dtheta), with the "
    "augmentation orbits compressed from z to h(z)."
)

#: The paper's numbers for the setting of each paper variant (accuracies as fractions).
_DEPTH = {
    "depth1_rot_lin_backbone": 0.475,
    "depth1_rot_lin_head": 0.474,
    "depth2_rot_lin_backbone": 0.528,
    "depth2_rot_lin_head": 0.397,
    "depth3_rot_lin_backbone": 0.524,
    "depth3_rot_lin_head": 0.356,
}
PAPER_NUMBERS = {
    ("cifar10", "resnet18_cifar"): {
        "rot_lin_backbone": 0.5227,
        "rot_lin_head": 0.3755,
        "rot_mlp_backbone": 0.5546,
        "rot_mlp_head": 0.4356,
        "curvature_ratio_paper": 1.93,
        "spread_shrink_paper": 21.9,
        **_DEPTH,
    },
    ("cifar10", "vit_tiny"): {
        "rot_lin_backbone": 0.4075,
        "rot_lin_head": 0.3492,
        "rot_mlp_backbone": 0.4422,
        "rot_mlp_head": 0.4087,
        "curvature_ratio_paper": 2.59,
    },
    ("cifar100", "resnet18_cifar"): {
        "rot_lin_backbone": 0.4201,
        "rot_lin_head": 0.3119,
        "rot_mlp_backbone": 0.4453,
        "rot_mlp_head": 0.3416,
        "curvature_ratio_paper": 1.84,
    },
}


def _sizes(cfg, probe_images: int | None = None, geometry_images: int | None = None) -> dict:
    """Image counts of every analysis step. Under ``dry_run`` each is its full count scaled by a fraction (at
    least 1; 2 for the probe sets and the degeneracy, whose between-sample control needs two): the probe sets
    by ``probe_images / probes.train_images``, the geometry's (curvature, convergence, orbit images,
    degeneracy) by ``geometry_images / analysis.degeneracy_images``, by default :data:`.dry_run.PROBE_IMAGES` /
    the smaller of :data:`.dry_run.GEOMETRY_IMAGES`; two orbit classes."""
    a, p = cfg.analysis, cfg.probes
    full = {
        "probe_train": p.train_images,
        "probe_test": p.test_images,
        "curvature": a.curvature_images,
        "convergence": a.convergence_images,
        "orbit_classes": a.orbit_classes,
        "orbit_images": a.orbit_images,
        "degeneracy": a.degeneracy_images,
    }
    if not cfg.dry_run:
        return full
    fp = (probe_images or D.PROBE_IMAGES) / p.train_images
    fg = (geometry_images or D.GEOMETRY_IMAGES[0]) / a.degeneracy_images
    f = {
        "probe_train": (fp, 2),
        "probe_test": (fp, 2),
        "curvature": (fg, 1),
        "convergence": (fg, 1),
        "orbit_images": (fg, 1),
        "degeneracy": (fg, 2),
    }
    return {**{k: max(lo, round(full[k] * x)) for k, (x, lo) in f.items()}, "orbit_classes": min(2, a.orbit_classes)}


def _premise_values(losses, rot, erank_z) -> dict:
    """The numbers the claims' premises read (compared with the registry's thresholds in :func:`decide`)."""
    k = max(1, len(losses) // 10)
    return {
        "loss_first_10pct": float(np.mean(losses[:k])),
        "loss_last_10pct": float(np.mean(losses[-k:])),
        "backbone_rotation_acc": 0.5 * (rot["backbone"]["linear"] + rot["backbone"]["mlp"]),
        "erank_rankme_backbone": float(erank_z),
    }


def _check(cfg, trained: dict) -> None:
    """The Sec. 5 settings of the config: the negative control must be analysed and not trained."""
    for a in cfg.analysis.negative:
        if a not in AUGMENTATIONS:
            raise ValueError(f"`analysis.negative` names {a!r}; expected augmentations from {AUGMENTATIONS}.")
        if trained[a]:
            raise ValueError(
                f"`analysis.negative` names {a!r}, which the training views contain: a negative control "
                "must be an augmentation the head was not trained on."
            )
    if cfg.analysis.control_directions < 1:
        raise ValueError(f"`analysis.control_directions` must be >= 1; got {cfg.analysis.control_directions}.")


def _sec5(deg: dict, orb: dict, trained: dict, negative, seed: int) -> dict:
    """The measurements :func:`experiments.rules.decide_sec5` reads, in its argument shapes: the orbits'
    compression per head and the trained head's over the untrained head's (``orbits_vs_untrained``,
    :func:`experiments.rules.orbit_gain_over_untrained` of the paper-way spreads)."""
    ratios, sp = deg["ratios"], orb["paper_spreads"]
    return {
        "training": {a: ratios[a] for a in AUGMENTATIONS if trained[a]},
        "negative": {a: ratios[a] for a in negative},
        "orbits": orb["compression"],
        "orbits_vs_untrained": rules.orbit_gain_over_untrained(sp["head"], sp["head_untrained"], seed=seed),
    }


def _representation(main, images, adt) -> tuple[dict, dict]:
    """``(scales, effective ranks)`` of z and h(z) of the main run on ``images`` (the class-probe test images)."""
    fz, fh = T.feature_fns(main)
    reps = probing.representations(fz, {"head": fh}, images)
    z, h = reps["backbone"], reps["head"]
    scales = {"backbone": G.spread_scale(z), "head": G.spread_scale(h)}
    return scales, {
        f"erank_{m}_{w}": float(metrics.effective_rank(jnp.asarray(r, adt), m))
        for w, r in (("backbone", z), ("head", h))
        for m in metrics.EFFECTIVE_RANK_METHODS
    }


def _geometry(cfg, geos, heads, test_ds, sz, scales, key, trained, adt, t0=None) -> tuple[dict, dict, dict]:
    """``(curvature, orbits, degeneracy)`` of the main run (``heads``: its trained and untrained head variables) on
    the test images, at the image counts ``sz`` (:func:`_sizes`); progress logged from ``t0`` when given."""
    test_f, (v_tr, v_init) = augment.to_float(test_ds.images, adt), (heads["trained"], heads["untrained"])
    log = (lambda msg: R.log(msg, t0)) if t0 is not None else (lambda msg: None)
    curv = curvature_analysis(
        cfg, geos["rotation"], v_tr, test_f[: sz["curvature"]], scales, convergence_images=sz["convergence"]
    )
    log("curvature done")
    orb_imgs = G.orbit_images(cfg, test_ds, sz["orbit_classes"], sz["orbit_images"])
    orb = G.orbit_analysis(cfg, geos["rotation"], v_tr, augment.to_float(orb_imgs, adt), scales, v_init=v_init)
    log("orbits done")
    deg = G.degeneracy_analysis(cfg, geos, heads, test_f[: sz["degeneracy"]], key, trained)
    log("degeneracy done")
    return curv, orb, deg


def measure(config) -> dict:
    """Train (every head depth), then probe, curvature, orbits and degeneracy of the main run (numbers only)."""
    cfg = config
    trained = T.trained_augmentations(cfg)
    _check(cfg, trained)
    t_start = time.perf_counter()
    adt = jnp.float64 if jax.config.read("jax_enable_x64") else jnp.float32
    _, k_probe, k_deg = jax.random.split(jax.random.PRNGKey(cfg.seed), 3)  # training starts from PRNGKey(seed)
    sz = _sizes(cfg)
    train_ds, test_ds = T.load_data(cfg)
    runs, probe_res, sets = R.train_all(cfg, train_ds, test_ds, sz, k_probe)
    seed_probes = R.extra_seed_probes(cfg, sz)
    main = runs["main"]
    scales, ranks = _representation(main, sets[3][0], adt)
    backbone = T.make_backbone(cfg, adt)
    head = T.make_head(cfg, backbone.out_dim, cfg.model.head_depth, adt)  # the main run's activation
    geos = {a: G.Geometry(backbone, head, G.augmentation_fn(cfg, a)) for a in AUGMENTATIONS}
    heads = {
        "trained": G.analysis_variables(main, adt),
        "untrained": G.analysis_variables(main, adt, initial_head=True),
    }
    R.log("representation statistics done", t_start)
    curv, orb, deg = _geometry(cfg, geos, heads, test_ds, sz, scales, k_deg, trained, adt, t_start)
    paper = PAPER_NUMBERS.get((cfg.data.name, cfg.model.backbone), PAPER_NUMBERS[("cifar10", "resnet18_cifar")])
    out = {
        "paper": dict(paper),
        "premise_values": _premise_values(
            main["losses"], probe_res["main"]["rotation"], ranks["erank_rankme_backbone"]
        ),
        "setting": {
            "dataset": cfg.data.name,
            "image_size": cfg.data.image_size,
            "backbone": backbone.name,
            "head": head.name,
            "objective": cfg.objective.name,
            "analysis_dtype": str(jnp.dtype(adt)),
            "trained_augmentations": trained,
            "negative_augmentations": list(cfg.analysis.negative),
            "paper_setting": (cfg.data.name, cfg.model.backbone) in PAPER_NUMBERS,
            "rotation_probe_train_images": int(sets[0].shape[0]),
            "rotation_probe_test_images": int(sets[1].shape[0]),
            "sizes": sz,
        },
        "probes": {**probe_res["main"], "seed": int(cfg.seed), "gap_seeds": seed_probes},
        "representation": {**ranks, **{f"scale_{k}": v for k, v in scales.items()}},
        "curvature": curv,
        "orbits": orb,
        "degeneracy": deg,
        "sec5": _sec5(deg, orb, trained, cfg.analysis.negative, cfg.seed),
        "depth_ablation": [
            {
                "head_depth": d,
                "activation": cfg.ablation.activation if runs[d] is not main else cfg.model.head_activation,
                "batch_size": runs[d]["batch_size"],
                "steps": runs[d]["steps"],
                **{
                    f"rot_{k[:3]}_{w}": probe_res[d]["rotation"][w][k]
                    for k in ("linear", "mlp")
                    for w in ("backbone", "head")
                },
                "final_loss": float(runs[d]["losses"][-1]),
            }
            for d in sorted(cfg.ablation.depths)
        ],
        "loss_curve": main["losses"].tolist(),
        "step_time_s": main["step_time_s"],
    }
    if cfg.dry_run:
        fz, fh = T.feature_fns(main)
        pool = np.concatenate([train_ds.images, test_ds.images])

        def probe_unit(n):  # n probe-set training images and the test set scaled alike, through z and then h(z)
            sz_n = _sizes(cfg, probe_images=n)
            images = augment.to_float(D.tile(pool, sz_n["probe_train"] + sz_n["probe_test"]))
            return lambda: probing.representations(fz, {"head": fh}, images)

        def geometry_unit(n):  # the geometry of the main run at n degeneracy images (every count scaled alike)
            sz_n = _sizes(cfg, geometry_images=n)
            return lambda: _geometry(cfg, geos, heads, test_ds, sz_n, scales, k_deg, trained, adt)

        reps = probing.representations(fz, {"head": fh}, augment.to_float(pool[:2]))
        widths = {k: v.shape[1] for k, v in reps.items()}
        out["dry_run"] = D.dry_run(
            cfg, R.ablation_config(cfg), runs, probe_unit, geometry_unit, widths, data.info(cfg.data.name).num_classes
        )
    return out


def headline_of(m: dict) -> dict:
    """The compared numbers, from the measurements (the paper's keys where the paper has them)."""
    rot = m["probes"]["rotation"]
    h = {
        "rotation_gap_mean": gap(rot),
        "rotation_gap_mean_untrained_head": gap(rot, "head_untrained"),
        "rotation_gap_difference": gap(rot) - gap(rot, "head_untrained"),
    }
    for a, r in m["degeneracy"]["ratios"].items():
        for c in CONTROLS:
            h[f"D_{a}_vs_{c}"] = r["trained"][c]["D"]
            h[f"D_{a}_vs_{c}_untrained"] = r["untrained"][c]["D"]
    for head_state, s in m["orbits"]["compression"].items():
        h["orbit_compression" + ("" if head_state == "head" else "_untrained")] = s["S"]
    cs = m["curvature"]["summary"]
    for w in ("backbone", "head"):
        h[f"rot_lin_{w}"], h[f"rot_mlp_{w}"] = rot[w]["linear"], rot[w]["mlp"]
        h[f"class_lin_{w}"] = m["probes"]["class"][w]["linear"]
    h.update(
        {
            "curvature_ratio_paper": cs["ratio_paper"],
            "curvature_ratio_exact_raw": cs["ratio_exact_raw"],
            "curvature_ratio_exact_normalised": cs["ratio_exact_normalised"],
            "spread_shrink_paper": m["orbits"]["compression"]["head"]["S"],
        }
    )
    for r in m["depth_ablation"]:
        h[f"depth{r['head_depth']}_rot_lin_backbone"] = r["rot_lin_backbone"]
        h[f"depth{r['head_depth']}_rot_lin_head"] = r["rot_lin_head"]
    return h


def decide(m: dict, config) -> dict:
    """Both claims by the registry's rules; thresholds from :data:`experiments.claims.CLAIMS`."""
    del config  # the settings that matter are in the measurements; the thresholds in the registry
    pv, s5 = m["premise_values"], m["sec5"]
    premises = {
        "ssl_loss_decreased": pv["loss_last_10pct"] < pv["loss_first_10pct"],
        "backbone_not_collapsed": pv["erank_rankme_backbone"]
        >= claims.CLAIMS[rules.SEC5].thresholds["min_effective_rank"],
    }
    sec5 = rules.decide_sec5(
        s5["training"],
        s5["orbits"]["head"],
        negative=s5["negative"] or None,
        premises=premises,
        orbits_vs_untrained=s5["orbits_vs_untrained"],
    )
    return {"claims": [sec5, decide_gap(m)], "headline": headline_of(m)}
