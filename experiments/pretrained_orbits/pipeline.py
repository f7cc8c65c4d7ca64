"""Experiment 9, pipeline: images and orbits, head geometry, one checkpoint's analysis (the checkpoints and their
random-initialisation controls are in :mod:`.checkpoints`)."""

from __future__ import annotations

import functools
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from experiments import rules
from ssl_geometry import augment, data, metrics, pretrained

from .head_geometry import augmentation_geometry, metric_spectrum, orbit_geometry

__all__ = [
    "AUGMENTATIONS",
    "STATUS_PRESENT",
    "STATUS_ABSENT",
    "STATUS_CONTROL",
    "load_images",
    "orbit_params",
    "backbone_tangents",
    "metric_spectrum",
    "orbit_geometry",
    "analyse",
    "orbit_compressions",
]

AUGMENTATIONS = ("rotation", "hue", "saturation", "blur")
STATUS_PRESENT, STATUS_ABSENT, STATUS_CONTROL = "present", "absent", "control (random init)"
NAME = "pretrained_orbits"


def log(msg: str) -> None:
    print(f"[{NAME}] {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- images and orbits


def load_images(config, *, num_classes: int, images_per_class: int, image_size: int):
    """``(images (C*I, S, S, 3) float32 in [0, 1], labels, source)``, class-major order.

    CIFAR-10 test through :func:`ssl_geometry.data.load` when tfds has it prepared; otherwise
    (:class:`ssl_geometry.data.DataNotFoundError`) the embedded fallback set. ``images_per_class``
    images are drawn per class with ``numpy.random.default_rng(seed)``; each is resized bilinearly
    to ``image_size`` (:func:`augment.crop_and_resize` of the full window).
    """
    ds, why = None, ""
    tfds_dir = _tfds_dataset_dir(config.data.dataset, config.data.data_dir)
    if tfds_dir is None:
        why = f"{config.data.dataset} is not a tfds data set"
    elif not tfds_dir.is_dir():  # not prepared: skip importing TensorFlow at all
        why = f"{config.data.dataset} is not prepared for tfds (no directory {str(tfds_dir)!r})"
    else:
        try:
            ds = data.load(config.data.dataset, config.data.split, data_dir=config.data.data_dir or None)
            source = f"{config.data.dataset}[{config.data.split}] (tfds)"
        except data.DataNotFoundError as err:
            why = f"{config.data.dataset} is not prepared for tfds: {str(err).splitlines()[0][:160]}"
    if ds is None:
        n_cls = min(num_classes, data.info(config.data.fallback_dataset).num_classes)
        ds = data.load(
            config.data.fallback_dataset, "test", seed=config.seed, num_examples=max(64, 8 * n_cls * images_per_class)
        )
        source = f"{config.data.fallback_dataset}[test] (embedded fallback: {why})"
    classes = [c for c in range(ds.num_classes) if np.sum(ds.labels == c) >= images_per_class][:num_classes]
    if len(classes) < 2:
        raise ValueError(f"need at least 2 classes with {images_per_class} images each; {source} has {len(classes)}.")
    rng = np.random.default_rng(config.seed)
    idx = np.concatenate(
        [np.sort(rng.choice(np.flatnonzero(ds.labels == c), images_per_class, replace=False)) for c in classes]
    )
    x = augment.to_float(ds.images[idx], jnp.float32)
    h, w = x.shape[1:3]
    resize = jax.jit(jax.vmap(lambda im: augment.crop_and_resize(im, 0, 0, h, w, (image_size, image_size))))
    return resize(x), np.asarray(ds.labels[idx]), source, len(classes)


def _tfds_dataset_dir(name: str, data_dir: str) -> pathlib.Path | None:
    """Where tfds keeps ``name`` (``<data_dir or $TFDS_DATA_DIR or ~/tensorflow_datasets>/<tfds name>``);
    ``None`` for a data set that is not a tfds one."""
    import os

    src = data.info(name).source
    if not src.startswith("tfds:"):
        return None
    root = data_dir or os.environ.get("TFDS_DATA_DIR") or "~/tensorflow_datasets"
    return pathlib.Path(root).expanduser() / src.split(":", 1)[1].split("/")[0]


def _augmentation(name: str, radius: int):
    if name == "rotation":
        return augment.rotate
    if name == "hue":
        return augment.adjust_hue
    if name == "saturation":
        return augment.adjust_saturation
    if name == "blur":
        return lambda im, s: augment.gaussian_blur(im, s, radius=radius)
    raise ValueError(f"Unknown augmentation {name!r}; expected one of {AUGMENTATIONS}.")


def orbit_params(config, name: str, steps: int) -> np.ndarray:
    """The grid ``theta_t`` of augmentation ``name`` (rotation converted from degrees to radians)."""
    lo, hi = (float(v) for v in config.analysis.orbits[name])
    grid = np.linspace(lo, hi, steps)
    return np.deg2rad(grid) if name == "rotation" else grid


@functools.partial(jax.jit, static_argnames=("name", "radius"))
def _orbits(images, thetas, *, name, radius):
    """ImageNet-normalised orbit images and their tangents, each ``(n * T, S, S, 3)``."""
    fn = _augmentation(name, radius)
    x = jax.vmap(lambda im: augment.orbit(im, fn, thetas))(images)
    xdot = jax.vmap(lambda im: augment.orbit_tangents(im, fn, thetas))(images)
    std = jnp.asarray(pretrained.IMAGENET_STD, x.dtype)
    flat = lambda a: a.reshape((-1,) + a.shape[2:])
    return flat(pretrained.imagenet_normalize(x)), flat(xdot / std)


@functools.partial(jax.jit, static_argnames=("backbone",))
def _backbone_jvp(backbone, variables, x, xdot):
    """``(z, dz)`` = ``jax.jvp(x -> f(x), (x,), (xdot,))`` (eval mode)."""
    return jax.jvp(lambda y: backbone.apply(variables, y)[0], (x,), (xdot,))


def backbone_tangents(backbone, variables, x, xdot, batch: int):
    """``z`` and ``dz`` for all rows, in chunks of ``batch`` (the last chunk padded: one compile)."""
    n = x.shape[0]
    zs, vs = [], []
    for i in range(0, n, batch):
        xi, di = x[i : i + batch], xdot[i : i + batch]
        short = batch - xi.shape[0]
        if short:
            xi = jnp.concatenate([xi, jnp.repeat(xi[-1:], short, axis=0)])
            di = jnp.concatenate([di, jnp.repeat(di[-1:], short, axis=0)])
        z, v = _backbone_jvp(backbone, variables, xi, di)
        zs.append(z[: batch - short])
        vs.append(v[: batch - short])
    z, v = jnp.concatenate(zs), jnp.concatenate(vs)
    if not (bool(jnp.all(jnp.isfinite(z))) and bool(jnp.all(jnp.isfinite(v)))):
        raise FloatingPointError("the backbone produced non-finite representations or tangents.")
    return z, v


# ----------------------------------------------------------------------------- one checkpoint


def analyse(
    name: str,
    status: str,
    backbone,
    head,
    variables,
    config,
    *,
    image_size: int,
    num_classes: int,
    images_per_class: int,
    steps: int,
    key,
    file: str = "",
    image_cache: dict | None = None,
) -> tuple[dict, list]:
    """The whole pipeline for one (backbone, head) pair: ``(summary row, per-augmentation rows)``.

    A present checkpoint's head is also measured at a random initialisation of its own architecture
    (``head.init``), on the same z and tangents: the Sec. 5 rule's untrained head. ``image_cache`` (a
    dict) keeps the loaded images between checkpoints of one run.
    """
    t0 = time.perf_counter()
    if name == "dino_vits16" and image_size % 16:
        raise ValueError(
            f"image size {image_size} must be a multiple of the ViT patch size 16 "
            "(config.data.image_size / config.control.image_size)."
        )
    image_cache = {} if image_cache is None else image_cache
    ikey = (num_classes, images_per_class, image_size)
    if ikey not in image_cache:
        image_cache[ikey] = load_images(
            config, num_classes=num_classes, images_per_class=images_per_class, image_size=image_size
        )
    images, labels, source, n_cls = image_cache[ikey]
    n_img = images.shape[0]
    bv = variables["backbone"]
    to64 = lambda tree: jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64), tree)
    k_metric, k_rand, k_init = jax.random.split(key, 3)
    heads = {"trained": to64(variables["head"])}
    if status == STATUS_PRESENT:
        heads["untrained"] = to64(head.init(k_init))
    batch = int(config.analysis.batch_size)
    radius = augment.blur_radius(float(max(config.analysis.orbits.blur)))
    aug_rows, Z_all, U_all = [], [], []
    trained, negative = set(config.analysis.trained_augmentations), set(config.analysis.negative)
    for a_i, aug in enumerate(AUGMENTATIONS):
        thetas = jnp.asarray(orbit_params(config, aug, steps), jnp.float32)
        x, xdot = _orbits(images, thetas, name=aug, radius=radius)
        Z, V = (jnp.asarray(t, jnp.float64) for t in backbone_tangents(backbone, bv, x, xdot, batch))
        g = augmentation_geometry(
            head,
            heads,
            Z,
            V,
            n_img,
            steps,
            int(config.analysis.control_directions),
            jax.random.fold_in(k_rand, a_i),
            int(config.seed),
        )
        tr, U = g["trained"], g["U"]["trained"]
        logr = np.log(tr["g_aug"][tr["ok"]] / tr["g_c"]["random"][tr["ok"]])
        aug_rows.append(
            {
                "checkpoint": name,
                "status": status,
                "augmentation": aug,
                "in_training_augmentations": aug in trained,
                "negative_control": aug in negative,
                "theta_range": [float(v) for v in config.analysis.orbits[aug]],
                "steps": steps,
                "points": int(len(g["valid"])),
                "zero_tangent_points": int(np.sum(~g["valid"])),
                "degenerate_points_excluded": int(np.sum(g["valid"] & ~tr["ok"])),
                "D": float(np.exp(np.mean(logr))) if logr.size else float("nan"),
                "g_aug_mean": float(np.mean(tr["g_aug"][tr["ok"]])) if tr["ok"].any() else float("nan"),
                "g_rand_mean": float(np.mean(tr["g_c"]["random"][tr["ok"]])) if tr["ok"].any() else float("nan"),
                "frac_points_g_aug_below_g_rand": float(np.mean(logr < 0)) if logr.size else float("nan"),
                "tangent_norm_mean": float(np.mean(g["vnorm"])),
                "ratios": {h: g[h]["ratios"] for h in heads},
                "per_image_gains": {h: g[h]["per_image"] for h in heads},
                "orbit_spreads": {
                    "z": g["orbit_spreads_z"].tolist(),
                    **{h: g[h]["orbit_spreads_u"].tolist() for h in heads},
                },
                **orbit_geometry(Z, U, n_cls, images_per_class, steps),
            }
        )
        Z_all.append(Z)
        U_all.append(jnp.asarray(U))
    Z_all, U_all = jnp.concatenate(Z_all), jnp.concatenate(U_all)
    # Pullback metric spectrum at clean images (zero tangent: the same compiled jvp).
    m = min(int(config.analysis.metric_points), images.shape[0])
    xc = pretrained.imagenet_normalize(images[:m])
    Zc, _ = backbone_tangents(backbone, bv, xc, jnp.zeros_like(xc), batch)
    spec = metric_spectrum(head, heads["trained"], jnp.asarray(Zc, jnp.float64), config, k_metric)
    row = {
        "checkpoint": name,
        "status": status,
        "file": file,
        "data": source,
        "classes": n_cls,
        "images_per_class": images_per_class,
        "image_size": image_size,
        "orbit_steps": steps,
        "backbone": backbone.name,
        "head": head.name,
        "d": int(Z_all.shape[1]),
        "k": int(U_all.shape[1]),
        **{
            f"erank_{meth}_{t}": float(metrics.effective_rank(A, meth))
            for meth in metrics.EFFECTIVE_RANK_METHODS
            for t, A in (("z", Z_all), ("u", U_all))
        },
        **spec,
        "orbit_compression": orbit_compressions(aug_rows, trained, config.seed),
        "seconds": time.perf_counter() - t0,
    }
    return row, aug_rows


def orbit_compressions(aug_rows: list[dict], trained, seed: int) -> dict:
    """``{head: rules.orbit_compression(...)}`` over the orbits of every training augmentation, pooled."""
    rows = [r for r in aug_rows if r["augmentation"] in trained]
    if not rows:
        return {}
    sz = np.concatenate([r["orbit_spreads"]["z"] for r in rows])
    return {
        h: rules.orbit_compression(sz, np.concatenate([r["orbit_spreads"][h] for r in rows]), seed=seed)
        for h in rows[0]["orbit_spreads"]
        if h != "z"
    }
