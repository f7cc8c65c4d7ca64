"""Experiment 9: released vision SSL checkpoints with their heads -- orbit geometry, backbone vs head.

For every released checkpoint that ships its projection head (DINO ViT-S/16, DINO ResNet-50,
VICReg ResNet-50, Barlow Twins ResNet-50; :data:`ssl_geometry.pretrained.CHECKPOINTS`) found in
``config.checkpoint_dir`` (the official ``.pth`` or our converted ``.safetensors``):

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
the expected file name and source URL. With ``config.control`` the same pipeline also runs on the
randomly initialised architecture + head (``config.control_checkpoints``) as a labelled pipeline
control: in place of an absent checkpoint, or as the untrained baseline next to a present one.
Control numbers are never presented as checkpoint results; verdicts use real checkpoints only.
"""
from __future__ import annotations

import functools
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

from experiments import common
from ssl_geometry import augment, backbones, curvature, data, geometry, metrics, pretrained
from ssl_geometry.models import as_function

NAME = "pretrained_orbits"
TITLE = "Foundation models: released vision SSL checkpoints with their heads (Sec. 5)"
CLAIM = ("In released SSL checkpoints (DINO ViT-S/16, DINO / VICReg / Barlow Twins ResNet-50) the head's "
         "metric degenerates along augmentation tangents (|J_h v|/|v| below random directions) and "
         "augmentation orbits shrink from backbone to head (Sec. 5).")

AUGMENTATIONS = ("rotation", "hue", "saturation", "blur")

VERDICT_RULE = (
    "Only checkpoints found on disk count (pipeline controls on random initialisations never do). "
    "For each present checkpoint, over the augmentations in its training distribution "
    "(config.trained_augmentations: hue, saturation, blur; rotation is reported but is not one of "
    "them): D_tr = geometric mean of the degeneracy ratios D = exp(mean_i log(g_aug,i / g_rand,i)) and "
    "S_tr = geometric mean of the relative-orbit-spread ratios head/backbone. A checkpoint agrees "
    "if D_tr < 1 and S_tr < 1, disagrees if D_tr >= 1 and S_tr >= 1, is mixed otherwise. "
    "'supported' if every present checkpoint agrees, 'not supported' if every one disagrees, "
    "'inconclusive' otherwise or when no checkpoint is present.")

STATUS_PRESENT, STATUS_ABSENT, STATUS_CONTROL = "present", "absent", "control (random init)"


def _log(msg: str) -> None:
    import sys

    print(f"[{NAME}] {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- checkpoints


def find_checkpoint(name: str, directory) -> pathlib.Path | None:
    """The file of checkpoint ``name`` in ``directory``, or ``None``.

    Searched in order: ``<dir>/<official file>``, ``<dir>/<name>/<official file>`` (the official
    names are :data:`pretrained.CHECKPOINTS`; Barlow Twins' ``checkpoint.pth`` is generic, so a
    sub-directory per release is accepted) and ``<dir>/<name>.safetensors`` (written by
    :func:`pretrained.save_converted`).
    """
    if name not in pretrained.CHECKPOINTS:
        raise ValueError(f"Unknown checkpoint {name!r}; expected one of {sorted(pretrained.CHECKPOINTS)}.")
    d = pathlib.Path(directory).expanduser()
    info = pretrained.CHECKPOINTS[name]
    for p in (d / info.filename, d / name / info.filename, d / f"{name}.safetensors"):
        if p.is_file():
            return p
    return None


def load_checkpoint(name: str, path, *, dino_which: str = "teacher", barlowtwins_loss_bn: bool = False):
    """A :class:`pretrained.Pretrained` from an official ``.pth`` (converter by ``name``) or a
    converted ``.safetensors`` (its stored kind must be ``name``)."""
    path = pathlib.Path(path)
    if path.suffix == ".safetensors":
        pre = pretrained.load_converted(path)
        if not isinstance(pre, pretrained.Pretrained) or pre.config.get("kind") != name:
            kind = pre.config.get("kind") if isinstance(pre, pretrained.Pretrained) else None
            raise ValueError(f"{str(path)!r} holds a converted checkpoint of kind {kind!r}, not {name!r}.")
        return pre
    if name == "dino_vits16":
        return pretrained.convert_dino_vits16(path, which=dino_which)
    if name == "dino_resnet50":
        return pretrained.convert_dino_resnet50(path, which=dino_which)
    if name == "vicreg_resnet50":
        return pretrained.convert_vicreg_resnet50(path)
    return pretrained.convert_barlowtwins_resnet50(path, loss_bn=barlowtwins_loss_bn)


@functools.lru_cache(maxsize=None)
def _resnet50(image_size: int):
    """One ResNet-50 Model per size, so its jitted jvp compiles once for all ResNet checkpoints."""
    return backbones.resnet50(image_size=image_size)


@functools.lru_cache(maxsize=None)
def _vit_small16(image_size: int):
    return backbones.vit_small16(img_size=image_size)


@functools.lru_cache(maxsize=None)
def _control_head(name: str, d: int, dims: tuple, loss_bn: bool):
    """The release's head type at the control widths (cached: one compile per setting)."""
    if name.startswith("dino"):
        hidden, bottleneck, out = dims
        return pretrained.dino_head(d, out, hidden_dim=hidden, bottleneck_dim=bottleneck)
    if name == "vicreg_resnet50":
        return pretrained.vicreg_projector((d, *dims))
    return pretrained.barlowtwins_projector((d, *dims), loss_bn=loss_bn)


def control_models(name: str, config, key):
    """``(backbone, head, variables)``: the release's architecture with a randomly initialised head
    of the control widths (``config.control_dino``, ``config.control_projector``)."""
    size = int(config.control_image_size)
    if name == "dino_vits16":
        backbone = _vit_small16(size)
    else:
        backbone = _resnet50(size)
    if name.startswith("dino"):
        cd = config.control_dino
        dims = (int(cd.hidden), int(cd.bottleneck), int(cd.out))
    else:
        dims = tuple(int(w) for w in config.control_projector)
    head = _control_head(name, backbone.out_dim, dims, bool(config.barlowtwins_loss_bn))
    kb, kh = jax.random.split(key)
    return backbone, head, {"backbone": backbone.init(kb), "head": head.init(kh)}


# ----------------------------------------------------------------------------- images and orbits


def load_images(config, *, num_classes: int, images_per_class: int, image_size: int):
    """``(images (C*I, S, S, 3) float32 in [0, 1], labels, source)``, class-major order.

    CIFAR-10 test through :func:`ssl_geometry.data.load` when tfds has it prepared; otherwise
    (:class:`ssl_geometry.data.DataNotFoundError`) the embedded fallback set. ``images_per_class``
    images are drawn per class with ``numpy.random.default_rng(seed)``; each is resized bilinearly
    to ``image_size`` (:func:`augment.crop_and_resize` of the full window).
    """
    ds, why = None, ""
    tfds_dir = _tfds_dataset_dir(config.dataset, config.data_dir)
    if tfds_dir is None:
        why = f"{config.dataset} is not a tfds data set"
    elif not tfds_dir.is_dir():  # not prepared: skip importing TensorFlow at all
        why = f"{config.dataset} is not prepared for tfds (no directory {str(tfds_dir)!r})"
    else:
        try:
            ds = data.load(config.dataset, config.split, data_dir=config.data_dir or None)
            source = f"{config.dataset}[{config.split}] (tfds)"
        except data.DataNotFoundError as err:
            why = f"{config.dataset} is not prepared for tfds: {str(err).splitlines()[0][:160]}"
    if ds is None:
        n_cls = min(num_classes, data.info(config.fallback_dataset).num_classes)
        ds = data.load(config.fallback_dataset, "test", seed=config.seed,
                       num_examples=max(64, 8 * n_cls * images_per_class))
        source = f"{config.fallback_dataset}[test] (embedded fallback: {why})"
    classes = [c for c in range(ds.num_classes) if np.sum(ds.labels == c) >= images_per_class][:num_classes]
    if len(classes) < 2:
        raise ValueError(f"need at least 2 classes with {images_per_class} images each; {source} has {len(classes)}.")
    rng = np.random.default_rng(config.seed)
    idx = np.concatenate([np.sort(rng.choice(np.flatnonzero(ds.labels == c), images_per_class, replace=False))
                          for c in classes])
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
    lo, hi = (float(v) for v in config.orbits[name])
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
        xi, di = x[i:i + batch], xdot[i:i + batch]
        short = batch - xi.shape[0]
        if short:
            xi = jnp.concatenate([xi, jnp.repeat(xi[-1:], short, axis=0)])
            di = jnp.concatenate([di, jnp.repeat(di[-1:], short, axis=0)])
        z, v = _backbone_jvp(backbone, variables, xi, di)
        zs.append(z[:batch - short])
        vs.append(v[:batch - short])
    z, v = jnp.concatenate(zs), jnp.concatenate(vs)
    if not (bool(jnp.all(jnp.isfinite(z))) and bool(jnp.all(jnp.isfinite(v)))):
        raise FloatingPointError("the backbone produced non-finite representations or tangents.")
    return z, v


# ----------------------------------------------------------------------------- head geometry


@functools.partial(jax.jit, static_argnames=("head",))
def _head_measure(head, hv, Z, V, R):
    """``u = h(z)``, ``g_aug = |J v|/|v|`` and ``g_rand = sqrt(mean_r |J r|^2/|r|^2)`` per point."""
    hfn = as_function(head, hv)
    U = hfn(Z)
    g_aug = jax.vmap(lambda z, v: metrics.metric_degeneracy(hfn, z, v))(Z, V)
    g_r = jax.vmap(lambda z, rs: jax.vmap(lambda r: metrics.metric_degeneracy(hfn, z, r))(rs))(Z, R)
    return U, g_aug, jnp.sqrt(jnp.mean(g_r ** 2, axis=1))


@functools.lru_cache(maxsize=None)
def _metric_block_matvec(head):
    """``(V (n, d), hv, Z (n, d)) -> (J_i^T J_i V_i)_i``: matrix-free pullback metric, one block per point."""

    def mv(V, hv, Z):
        hfn = as_function(head, hv)

        def one(z, v):
            jv = jax.jvp(hfn, (z,), (v,))[1]
            return jax.vjp(hfn, z)[1](jv)[0]

        return jax.vmap(one)(Z, V)

    return mv


@functools.partial(jax.jit, static_argnames=("head",))
def _jacobians(head, hv, Z):
    """Per-point head Jacobians ``(n, k, d)`` (:func:`geometry.pullback_metric`)."""
    return geometry.pullback_metric(as_function(head, hv), Z).jacobian


def metric_spectrum(head, hv, Z, config, key) -> dict:
    """Extreme eigenvalues of ``G_i = J_h(z_i)^T J_h(z_i)`` at the rows of ``Z`` (float64)."""
    n, d = Z.shape
    k = min(int(config.lanczos_k), d)
    res = curvature.blockwise_extreme_eigenvalues(_metric_block_matvec(head), n, d, k=k,
                                                  num_steps=min(int(config.lanczos_steps), d), key=key,
                                                  args=(hv, Z), dtype=jnp.float64)
    largest = np.asarray(res.largest)  # (n, k) descending
    smallest = np.asarray(res.smallest)
    out = {
        "G_lambda_max_mean": float(np.mean(largest[:, 0])),
        "G_top_eigs_mean": np.mean(largest, axis=0).tolist(),
        "G_lambda_min_mean": float(np.mean(smallest[:, 0])),
        "G_cond_top1_topk": float(np.mean(largest[:, 0] / largest[:, -1])),
        "lanczos_steps": int(res.num_steps), "lanczos_converged": bool(res.converged),
        # the top-k end alone (the bottom end of a rank-deficient J^T J is a cluster at 0 followed by
        # small clustered eigenvalues, which converges slowly and matters less here)
        "lanczos_top_converged": bool(np.all(np.asarray(res.largest_residuals)
                                             <= res.tol * max(np.max(np.abs(np.asarray(res.ritz_values))), 1e-300))),
        "lanczos_max_residual": float(max(np.max(res.largest_residuals), np.max(res.smallest_residuals))),
        "lanczos_breakdowns": int(np.sum(res.num_breakdowns)),
        "dense_check": None,
    }
    if n * d * head.out_dim <= int(config.max_dense_jacobian):
        # Dense cross-check: eig(J^T J) = squared singular values of J (plus d - k zeros when k < d).
        J = _jacobians(head, hv, Z)  # (n, k, d)
        sv = np.asarray(jnp.linalg.svd(J, compute_uv=False))  # (n, min(k, d)) descending
        ev = np.concatenate([sv ** 2, np.zeros((n, max(d - sv.shape[1], 0)))], axis=1)  # (n, d) descending
        top = ev[:, :k]
        tol_rank = ev[:, :1] * max(d, head.out_dim) * np.finfo(np.float64).eps
        out["dense_check"] = {
            "rel_err_top_eigs": float(np.max(np.abs(top - largest) / np.maximum(np.abs(top), 1e-300))),
            "abs_err_min_eig": float(np.max(np.abs(ev[:, -1] - smallest[:, 0]))),
            "lambda_max_dense_mean": float(np.mean(ev[:, 0])),
            "numerical_rank_mean": float(np.mean(np.sum(ev > tol_rank, axis=1))),
        }
    return out


def _rms_scale(reps):
    """``sqrt(mean_p |r_p - mean r|^2)`` over all points of ``reps`` (..., dim)."""
    r = reps.reshape(-1, reps.shape[-1])
    return jnp.sqrt(jnp.mean(jnp.sum((r - r.mean(axis=0)) ** 2, axis=-1)))


_orbit_statistics = jax.jit(metrics.orbit_statistics)


def orbit_geometry(Z, U, n_classes: int, n_images: int, steps: int) -> dict:
    """Orbit statistics of backbone ``Z`` and head ``U`` (rows class-major, then image, then step)."""
    out = {}
    for tag, R in (("z", Z), ("u", U)):
        reps = jnp.asarray(R, jnp.float64).reshape(n_classes, n_images, steps, -1)
        st = _orbit_statistics(reps)
        scale = float(_rms_scale(reps))
        out.update({f"spread_{tag}": float(st.orbit_spread), f"intra_{tag}": float(st.intra_orbit_distance),
                    f"inter_class_{tag}": float(st.inter_class_distance),
                    f"class_orbit_ratio_{tag}": float(st.class_orbit_ratio), f"scale_{tag}": scale,
                    f"rel_spread_{tag}": float(st.orbit_spread) / scale})
    out["spread_ratio_raw"] = out["spread_u"] / out["spread_z"]
    out["spread_ratio_rel"] = out["rel_spread_u"] / out["rel_spread_z"]
    return out


# ----------------------------------------------------------------------------- one checkpoint


def analyse(name: str, status: str, backbone, head, variables, config, *, image_size: int, num_classes: int,
            images_per_class: int, steps: int, key, file: str = "", image_cache: dict | None = None) -> tuple[dict, list]:
    """The whole pipeline for one (backbone, head) pair: ``(summary row, per-augmentation rows)``.

    ``image_cache`` (a dict) keeps the loaded images between checkpoints of one run.
    """
    t0 = time.perf_counter()
    if name == "dino_vits16" and image_size % 16:
        raise ValueError(f"image size {image_size} must be a multiple of the ViT patch size 16 "
                         "(config.image_size / config.control_image_size).")
    image_cache = {} if image_cache is None else image_cache
    ikey = (num_classes, images_per_class, image_size)
    if ikey not in image_cache:
        image_cache[ikey] = load_images(config, num_classes=num_classes, images_per_class=images_per_class,
                                        image_size=image_size)
    images, labels, source, n_cls = image_cache[ikey]
    bv = variables["backbone"]
    hv = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64), variables["head"])
    batch = int(config.batch_size)
    radius = augment.blur_radius(float(max(config.orbits.blur)))
    k_metric, k_rand = jax.random.split(key)
    aug_rows, Z_all, U_all = [], [], []
    trained = set(config.trained_augmentations)
    for a_i, aug in enumerate(AUGMENTATIONS):
        thetas = jnp.asarray(orbit_params(config, aug, steps), jnp.float32)
        x, xdot = _orbits(images, thetas, name=aug, radius=radius)
        Z, V = backbone_tangents(backbone, bv, x, xdot, batch)
        Z64, V64 = jnp.asarray(Z, jnp.float64), jnp.asarray(V, jnp.float64)
        vnorm = np.asarray(jnp.linalg.norm(V64, axis=-1))
        valid = vnorm > 0
        R = jax.random.normal(jax.random.fold_in(k_rand, a_i), (Z64.shape[0], int(config.n_random), Z64.shape[1]),
                              jnp.float64)
        V_safe = jnp.where(jnp.asarray(valid)[:, None], V64, R[:, 0])  # zero tangents are excluded below
        U, g_aug, g_rand = (np.asarray(t) for t in _head_measure(head, hv, Z64, V_safe, R))
        if not (np.all(np.isfinite(U)) and np.all(np.isfinite(g_aug)) and np.all(np.isfinite(g_rand))):
            raise FloatingPointError(f"{name} / {aug}: the head produced non-finite outputs or metric gains.")
        ok = valid & (g_rand > 0) & (g_aug > 0)
        logr = np.log(g_aug[ok] / g_rand[ok])
        geo = orbit_geometry(Z64, U, n_cls, images_per_class, steps)
        aug_rows.append({
            "checkpoint": name, "status": status, "augmentation": aug, "in_training_augmentations": aug in trained,
            "theta_range": [float(v) for v in config.orbits[aug]], "steps": steps,
            "points": int(len(valid)), "zero_tangent_points": int(np.sum(~valid)),
            "degenerate_points_excluded": int(np.sum(valid & ~ok)),
            "D": float(np.exp(np.mean(logr))) if logr.size else float("nan"),
            "g_aug_mean": float(np.mean(g_aug[ok])) if ok.any() else float("nan"),
            "g_rand_mean": float(np.mean(g_rand[ok])) if ok.any() else float("nan"),
            "frac_points_g_aug_below_g_rand": float(np.mean(logr < 0)) if logr.size else float("nan"),
            "tangent_norm_mean": float(np.mean(vnorm)),
            **geo,
        })
        Z_all.append(Z64)
        U_all.append(jnp.asarray(U))
    Z_all, U_all = jnp.concatenate(Z_all), jnp.concatenate(U_all)
    # Pullback metric spectrum at clean images (zero tangent: the same compiled jvp).
    m = min(int(config.metric_points), images.shape[0])
    xc = pretrained.imagenet_normalize(images[:m])
    Zc, _ = backbone_tangents(backbone, bv, xc, jnp.zeros_like(xc), batch)
    spec = metric_spectrum(head, hv, jnp.asarray(Zc, jnp.float64), config, k_metric)
    row = {
        "checkpoint": name, "status": status, "file": file, "data": source, "classes": n_cls,
        "images_per_class": images_per_class, "image_size": image_size, "orbit_steps": steps,
        "backbone": backbone.name, "head": head.name, "d": int(Z_all.shape[1]), "k": int(U_all.shape[1]),
        **{f"erank_{meth}_{t}": float(metrics.effective_rank(A, meth)) for meth in metrics.EFFECTIVE_RANK_METHODS
           for t, A in (("z", Z_all), ("u", U_all))},
        **spec,
    }
    tr = [r for r in aug_rows if r["in_training_augmentations"] and np.isfinite(r["D"])]
    row["D_trained"] = float(np.exp(np.mean([np.log(r["D"]) for r in tr]))) if tr else float("nan")
    row["spread_ratio_trained"] = (float(np.exp(np.mean([np.log(r["spread_ratio_rel"]) for r in tr])))
                                   if tr else float("nan"))
    row["outcome"] = checkpoint_outcome(row["D_trained"], row["spread_ratio_trained"])
    row["seconds"] = time.perf_counter() - t0
    return row, aug_rows


def checkpoint_outcome(D_trained: float, spread_ratio: float) -> str:
    """``agrees`` (D < 1 and S < 1), ``disagrees`` (D >= 1 and S >= 1), ``mixed`` otherwise
    (including non-finite values)."""
    if not (np.isfinite(D_trained) and np.isfinite(spread_ratio)):
        return "mixed"
    if D_trained < 1 and spread_ratio < 1:
        return "agrees"
    if D_trained >= 1 and spread_ratio >= 1:
        return "disagrees"
    return "mixed"


def decide(rows: list[dict]) -> tuple[str, str]:
    """``(verdict, reason)`` from the summary rows by :data:`VERDICT_RULE` (present checkpoints only)."""
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


# ----------------------------------------------------------------------------- run / report


def run(config, out_dir) -> dict:
    t_cpu = time.process_time()
    with jax.enable_x64(True):
        rows, aug_rows, image_cache = [], [], {}
        key = jax.random.PRNGKey(int(config.seed))
        ckdir = pathlib.Path(config.checkpoint_dir).expanduser()
        for i, name in enumerate(config.checkpoints):
            info = pretrained.CHECKPOINTS[name]
            k_i = jax.random.fold_in(key, i)
            path = find_checkpoint(name, ckdir)
            if path is not None:
                _log(f"{name}: loading {path}")
                pre = load_checkpoint(name, path, dino_which=config.dino_which,
                                      barlowtwins_loss_bn=bool(config.barlowtwins_loss_bn))
                backbone = pre.backbone
                if name != "dino_vits16":  # share one compiled ResNet-50 among the three releases
                    cand = _resnet50(int(config.image_size))
                    tmpl = jax.eval_shape(cand.init, jax.random.PRNGKey(0))
                    if jax.tree_util.tree_structure(tmpl) == jax.tree_util.tree_structure(pre.variables["backbone"]):
                        backbone = cand
                row, ar = analyse(name, STATUS_PRESENT, backbone, pre.head, pre.variables, config,
                                  image_size=int(config.image_size), num_classes=int(config.num_classes),
                                  images_per_class=int(config.images_per_class), steps=int(config.orbit_steps),
                                  key=k_i, file=str(path), image_cache=image_cache)
                rows.append(row)
                aug_rows += ar
            else:
                rows.append({"checkpoint": name, "status": STATUS_ABSENT, "expected_file": info.filename,
                             "url": info.url, "layout": info.source, "searched": str(ckdir)})
                _log(f"{name}: absent ({info.filename} not in {ckdir})")
            if config.control and name in config.control_checkpoints:
                # In place of an absent checkpoint, or as the untrained baseline next to a present one.
                _log(f"{name}: pipeline control on the random initialisation")
                backbone, head, variables = control_models(name, config, jax.random.fold_in(k_i, 1))
                row, ar = analyse(name, STATUS_CONTROL, backbone, head, variables, config,
                                  image_size=int(config.control_image_size),
                                  num_classes=int(config.control_num_classes),
                                  images_per_class=int(config.control_images_per_class),
                                  steps=int(config.control_orbit_steps), key=k_i, image_cache=image_cache)
                rows.append(row)
                aug_rows += ar
    verdict, reason = decide(rows)
    present = [r for r in rows if r["status"] == STATUS_PRESENT]
    headline = {"checkpoints_present": len(present),
                "checkpoints_absent": sum(r["status"] == STATUS_ABSENT for r in rows)}
    for r in present:
        headline[f"{r['checkpoint']}_D_trained"] = r["D_trained"]
        headline[f"{r['checkpoint']}_spread_ratio_trained"] = r["spread_ratio_trained"]
    premises = {
        "trained_augmentations": list(config.trained_augmentations),
        "note": ("Sec. 5 speaks of heads trained for invariance to a transformation. The releases train with "
                 "colour jitter (hue, saturation), grayscale and Gaussian blur, not rotation: the premise holds "
                 "for hue/saturation/blur orbits of a real checkpoint and fails for rotation and for every "
                 "control (untrained heads). The paper's orbit ranges are wider than the training jitter "
                 "(DINO / VICReg / Barlow Twins: ColorJitter hue +-0.1, saturation [0.8, 1.2], blur sigma "
                 "[0.1, 2]), so the orbits also leave the training distribution."),
        "held_for": [f"{r['checkpoint']}/{a}" for r in present for a in config.trained_augmentations],
    }
    _figures(rows, aug_rows, out_dir)
    return {"verdict": verdict, "verdict_rule": VERDICT_RULE, "verdict_reason": reason, "headline": headline,
            "paper": {}, "checkpoints": rows, "augmentations": aug_rows, "premises": premises,
            "checkpoint_dir": str(pathlib.Path(config.checkpoint_dir).expanduser()),
            "cpu_time_s": time.process_time() - t_cpu}


def _figures(rows, aug_rows, out_dir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measured = [r for r in rows if r["status"] != STATUS_ABSENT]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    width = 0.8 / max(len(measured), 1)
    for j, r in enumerate(measured):
        rs = [a for a in aug_rows if a["checkpoint"] == r["checkpoint"] and a["status"] == r["status"]]
        xs = np.arange(len(rs)) + j * width
        label = r["checkpoint"] + (" [CONTROL: random init]" if r["status"] == STATUS_CONTROL else "")
        hatch = "//" if r["status"] == STATUS_CONTROL else None
        axes[0].bar(xs, [a["D"] for a in rs], width, label=label, hatch=hatch, alpha=0.8)
        axes[1].bar(xs, [a["spread_ratio_rel"] for a in rs], width, label=label, hatch=hatch, alpha=0.8)
    for ax, title in ((axes[0], "degeneracy ratio D = |J_h v_aug| / |J_h v_rand| (geo. mean)"),
                      (axes[1], "relative orbit spread, head / backbone")):
        ax.axhline(1.0, color="k", lw=0.7)
        ax.set_yscale("log")
        ax.set_xticks(np.arange(len(AUGMENTATIONS)) + 0.4 - width / 2, AUGMENTATIONS)
        ax.set_title(title, fontsize=9)
    if not measured:
        axes[0].text(0.5, 0.5, "no checkpoint present, no control run", ha="center", transform=axes[0].transAxes)
    else:
        axes[1].legend(fontsize=7)
    fig.suptitle("Released checkpoints (solid) and pipeline controls on random initialisations (hatched)", fontsize=9)
    common.save_figure(fig, out_dir, "degeneracy_and_spread")


def _fmt_spec(r):
    return ", ".join(f"{v:.3g}" for v in r["G_top_eigs_mean"])


def report(results, rel_dir) -> str:
    rows = results["checkpoints"]
    present = [r for r in rows if r["status"] == STATUS_PRESENT]
    absent = [r for r in rows if r["status"] == STATUS_ABSENT]
    controls = [r for r in rows if r["status"] == STATUS_CONTROL]
    text = [f"Verdict reason: {results.get('verdict_reason', '')}. Checkpoint directory searched: "
            f"`{results.get('checkpoint_dir')}`.", ""]
    if absent:
        text += ["**Absent checkpoints** (place the official file in the directory, or in `<dir>/<name>/`, or our "
                 "converted `<dir>/<name>.safetensors`):", "",
                 common.markdown_table([{"checkpoint": r["checkpoint"], "expected file": f"`{r['expected_file']}`",
                                         "source": r["url"]} for r in absent]), ""]

    ctrl = {r["checkpoint"]: r for r in controls}

    def summary(rs):
        return common.markdown_table([{
            "checkpoint": r["checkpoint"], "status": r["status"], "data": r["data"].split(" (")[0],
            "images": f"{r['classes']}x{r['images_per_class']} @ {r['image_size']} px, {r['orbit_steps']} steps",
            "d -> k": f"{r['d']} -> {r['k']}",
            "erank z (rankme/sq)": f"{r['erank_rankme_z']:.3g} / {r['erank_squared_z']:.3g}",
            "erank u (rankme/sq)": f"{r['erank_rankme_u']:.3g} / {r['erank_squared_u']:.3g}",
            "top eig(J^T J)": _fmt_spec(r),
            "Lanczos conv. (top / both ends)": f"{r.get('lanczos_top_converged', '?')} / {r['lanczos_converged']}",
            "D (trained augs)": r["D_trained"], "spread ratio (trained augs)": r["spread_ratio_trained"],
            **({"D of control (same arch.)": ctrl[r["checkpoint"]]["D_trained"] if r["checkpoint"] in ctrl else "-"}
               if r["status"] == STATUS_PRESENT else {}),
            "outcome": r["outcome"] if r["status"] == STATUS_PRESENT else "control (not evidence)",
        } for r in rs])

    def per_aug(status):
        return common.markdown_table([{
            "checkpoint": a["checkpoint"], "augmentation": a["augmentation"],
            "trained aug": a["in_training_augmentations"], "D": a["D"],
            "frac g_aug < g_rand": a["frac_points_g_aug_below_g_rand"],
            "rel. spread z": a["rel_spread_z"], "rel. spread u": a["rel_spread_u"],
            "spread ratio (rel)": a["spread_ratio_rel"], "spread ratio (raw)": a["spread_ratio_raw"],
            "class/orbit z": a["class_orbit_ratio_z"], "class/orbit u": a["class_orbit_ratio_u"],
            "zero tangents": a["zero_tangent_points"],
        } for a in results["augmentations"] if a["status"] == status])

    if present:
        text += ["**Released checkpoints** (the evidence):", "", summary(present), "", per_aug(STATUS_PRESENT), ""]
    else:
        text += ["No released checkpoint was present, so there is no evidence for or against the claim here.", ""]
    if controls:
        text += ["**Pipeline controls: randomly initialised architecture + head, NOT checkpoint results** "
                 "(they show the pipeline runs end to end and give the untrained baseline; note that an untrained "
                 "head can already have D < 1, e.g. through the L2 normalisation of the DINO head, which removes "
                 "the radial part of a tangent, so a checkpoint's D is best read next to its control's):", "",
                 summary(controls), "", per_aug(STATUS_CONTROL), ""]
    text += [f"Premises: {results['premises']['note']}", "",
             "D = exp(mean_i log(|J_h v_i| / g_rand,i)) with v_i = dz/dtheta (forward-mode tangent of the augmentation "
             "through the backbone) and g_rand,i the RMS gain over isotropic random directions; the relative spread "
             "is the orbit spread divided by the RMS distance of all orbit points to their mean (scale-free, so "
             "backbone and head compare). The paper gives no numbers for this experiment (its orbit-geometry "
             "shrink factor 21.9x is for a CIFAR-trained ResNet-18, a different setting).", "",
             f"![degeneracy and spread]({rel_dir}/degeneracy_and_spread.png)", "",
             "To run the paper configuration once the files are placed (official `.pth` names above, on a GPU):", "",
             "```", "SSL_GEOMETRY_CHECKPOINTS=/path/to/checkpoints \\",
             "  python -m experiments.reproduce --only pretrained_orbits --variant paper --force", "```"]
    return "\n".join(text)
