"""Experiment 6: the guillotine -- does the projection head destroy augmentation information? (Sec. 5)

A backbone ``f`` and a ReLU+BatchNorm MLP projector ``h`` are trained jointly with SimCLR's
NT-Xent (temperature 0.1, Adam 1e-3; :func:`ssl_geometry.objectives.make_objective` with
:func:`ssl_geometry.augment.simclr_augment` views drawn on device), in float32, by a minimal
jitted optax loop (chunks of ``steps_per_call`` steps under ``lax.scan``). Then, on held-out
images, backbone ``z = f(x)`` against head ``h(z)``:

* **Probes** (:mod:`ssl_geometry.probes`): 4-way rotation prediction (0/90/180/270 deg, linear
  and 2-layer MLP) and class prediction, from ``z`` and from ``h(z)``.
* **Trajectory curvature** along the rotation angle, ``kappa(theta) = |d^2 r / d theta^2|`` for
  ``r(theta) = f(rot_theta x)`` and ``h(f(rot_theta x))``: exactly by nested ``jax.jvp``
  (:func:`ssl_geometry.metrics.trajectory_curvature`, float64) and by the paper's second
  differences on 10 angles in [0, 45 deg] (:func:`ssl_geometry.metrics.fd_trajectory_curvature`),
  at the 8 interior angles. Head/backbone ratio of the mean ``kappa``: raw (the paper's number)
  and scale-free, each representation divided by its spread ``s_r = sqrt(mean_i |r_i - mean r|^2)``
  over the clean test images. A convergence study shrinks the FD spacing ``h`` at one angle:
  the bilinear resampling of :func:`ssl_geometry.augment.rotate` and the ReLUs make ``r``
  piecewise smooth, so FD at 5 deg averages many kinks while ``r''`` is the a.e. derivative;
  the two agree only once ``h`` is below the kink spacing.
* **Orbit geometry** (:func:`ssl_geometry.metrics.orbit_statistics`): classes x images x
  rotations; spread, intra-orbit and inter-class distances, their ratio; raw and divided by
  ``s_r`` (scale-free). "Spread shrink" = backbone spread / head spread.
* **Metric degeneracy** (:func:`ssl_geometry.metrics.augmentation_metric_degeneracy`):
  ``|J_h(z) v| / |v|`` for ``v = dz/dt`` along rotation, hue and blur, against isotropic random
  ``v ~ N(0, I)`` and against data directions ``v = z_j - z_i`` (a control), for the trained
  head and for the head at initialisation on the same trained backbone.
* **Head-depth ablation**: heads with 1/2/3 affine layers, trained alike, rotation probes.

Everything after training runs in float64 when ``jax_enable_x64`` is on (the suite's runner
turns it on); the trained float32 weights are cast.
"""
from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax

from experiments import common
from ssl_geometry import augment, backbones, data, heads, metrics, objectives, probes, trainer

NAME = "guillotine"
TITLE = "Guillotine and information-invariance (Sec. 5)"
CLAIM = ("The trained projection head buys invariance by destroying information: rotation is less decodable from "
         "h(z) than from the backbone z, and the head's metric degenerates along augmentation tangents "
         "(J_h v small for v = dz/dtheta) more than along random directions.")

AUGMENTATIONS = ("rotation", "hue", "blur")


# ------------------------------------------------------------------------------------ data and models


def load_data(cfg):
    """``(train, test)`` :class:`ssl_geometry.data.Dataset` of the config (shapes: nuisance angle range narrowed)."""
    kwargs = {}
    if cfg.dataset == "shapes":
        a = math.radians(cfg.shapes_max_angle_deg)
        kwargs["config"] = data.ShapesConfig(angle=(-a, a))
    train = data.load(cfg.dataset, "train", seed=cfg.seed, image_size=cfg.image_size, num_examples=cfg.n_train,
                      **kwargs)
    test_split = "test" if "test" in data.info(cfg.dataset).splits else "validation"
    test = data.load(cfg.dataset, test_split, seed=cfg.seed, image_size=cfg.image_size, num_examples=cfg.n_test,
                     **kwargs)
    return train, test


def make_backbone(cfg, dtype):
    """The backbone :class:`ssl_geometry.models.Model` named by ``cfg.backbone`` with compute dtype ``dtype``."""
    shape = (cfg.image_size, cfg.image_size, 3)
    if cfg.backbone == "small_cnn":
        return backbones.small_cnn(shape, widths=tuple(cfg.widths), activation="relu", dtype=dtype)
    if cfg.backbone == "resnet18_cifar":
        return backbones.resnet18_cifar(dtype=dtype)
    if cfg.backbone == "vit_tiny":
        return backbones.vit_tiny(img_size=cfg.image_size, dtype=dtype)
    raise ValueError(f"`backbone` must be 'small_cnn', 'resnet18_cifar' or 'vit_tiny'; got {cfg.backbone!r}.")


def make_head(cfg, in_dim: int, depth: int, dtype):
    """ReLU+BN MLP projector with ``depth`` affine layers: ``in -> hidden x (depth-1) -> out`` (BN on hidden)."""
    if not isinstance(depth, int) or depth < 1:
        raise ValueError(f"head `depth` must be a positive int; got {depth!r}.")
    return heads.mlp(in_dim, (cfg.head_hidden,) * (depth - 1), cfg.head_out, activation="relu", batch_norm=True,
                     dtype=dtype)


def _augment_config(cfg) -> augment.AugmentConfig:
    a = cfg.augment
    return augment.AugmentConfig(crop_scale=tuple(a.crop_scale), flip_prob=a.flip_prob, jitter=tuple(a.jitter),
                                 jitter_prob=a.jitter_prob, jitter_random_order=a.jitter_random_order,
                                 gray_prob=a.gray_prob, blur_prob=a.blur_prob)


# -------------------------------------------------------------------------------------------- training


def train_simclr(cfg, depth: int, images, key) -> dict:
    """SimCLR (NT-Xent, ``cfg.temperature``) with Adam(``cfg.lr``) on ``images`` (uint8 NHWC), float32.

    The batch at step ``s`` is :func:`ssl_geometry.trainer.batch_indices` ``(seed, s)``; views come from
    ``augment.two_views(simclr_augment)`` inside the objective's ``loss_fn`` with key ``fold_in(rng, s)``.
    Returns ``{"objective", "params", "state", "init_params", "init_state", "losses"}``; a non-finite
    loss raises ``FloatingPointError`` naming the step.
    """
    if cfg.steps % cfg.steps_per_call:
        raise ValueError(f"`steps` ({cfg.steps}) must be a multiple of `steps_per_call` ({cfg.steps_per_call}).")
    backbone = make_backbone(cfg, jnp.float32)
    head = make_head(cfg, backbone.out_dim, depth, jnp.float32)
    views = functools.partial(augment.two_views, pipeline=augment.simclr_augment, config=_augment_config(cfg))
    obj = objectives.make_objective("simclr", backbone, head, augment=views, temperature=cfg.temperature)
    k_init, k_rng = jax.random.split(key)
    params, state = obj.init(k_init)
    init_params, init_state = params, state
    opt = optax.adam(cfg.lr)

    def step(carry, xs):
        p, s, o, imgs = carry
        idx, t = xs
        batch = {"images": imgs[idx]}
        (loss, (s_new, _)), g = jax.value_and_grad(obj.loss_fn, has_aux=True)(p, s, jax.random.fold_in(k_rng, t),
                                                                               batch)
        upd, o = opt.update(g, o, p)
        return (optax.apply_updates(p, upd), s_new, o, imgs), loss

    @jax.jit
    def chunk(p, s, o, imgs, idx, t):
        (p, s, o, _), losses = jax.lax.scan(step, (p, s, o, imgs), (idx, t), unroll=cfg.unroll)
        return p, s, o, losses

    imgs = jnp.asarray(images)
    opt_state = opt.init(params)
    n, bs, spc = images.shape[0], cfg.batch_size, cfg.steps_per_call
    out = []
    for c0 in range(0, cfg.steps, spc):
        idx = np.stack([trainer.batch_indices(cfg.seed, s, n, bs) for s in range(c0, c0 + spc)])
        params, state, opt_state, losses = chunk(params, state, opt_state, imgs, jnp.asarray(idx),
                                                 jnp.arange(c0, c0 + spc))
        losses = np.asarray(losses)
        if not np.all(np.isfinite(losses)):
            raise FloatingPointError(f"SimCLR (head depth {depth}): non-finite loss at step "
                                     f"{c0 + int(np.argmin(np.isfinite(losses)))}.")
        out.append(losses)
    return {"objective": obj, "params": params, "state": state, "init_params": init_params,
            "init_state": init_state, "losses": np.concatenate(out)}


def _feature_fns(run):
    """Jitted eval-mode ``images -> z`` and ``images -> h(z)`` (float32) of a trained run."""
    obj = run["objective"]
    feat = jax.jit(obj.features)
    emb = jax.jit(obj.embed)
    p, s = run["params"], run["state"]
    return (lambda x: feat(p, s, x)), (lambda x: emb(p, s, x))


# ---------------------------------------------------------------------------------------------- probes


def rotation_probe_subset(cfg, ds, n):
    """The first ``n`` images of ``ds`` whose class is in ``cfg.rotation_probe_classes`` (all when None)."""
    keep = np.arange(len(ds))
    if cfg.rotation_probe_classes is not None:
        if cfg.dataset != "shapes":
            raise ValueError("`rotation_probe_classes` names shape classes; set it to None for other data sets.")
        ids = [data.SHAPE_NAMES.index(c) for c in cfg.rotation_probe_classes]
        keep = keep[np.isin(ds.labels, ids)]
    if keep.size < 2:
        raise ValueError(f"only {keep.size} images of classes {cfg.rotation_probe_classes} in the data set.")
    return augment.to_float(ds.images[keep[:n]])


def probe_suite(cfg, run, rot_train, rot_test, cls_train, cls_test, key, *, class_probes: bool = True) -> dict:
    """Rotation probes (linear, MLP) and optionally class probes, on ``z`` and on ``h(z)``.

    Returns ``{"rotation": {"backbone": {"linear", "mlp"}, "head": {...}}, "class": {...}}`` (test accuracies).
    """
    fz, fh = _feature_fns(run)
    out = {"rotation": {}, "class": {}}
    for i, (name, fn) in enumerate((("backbone", fz), ("head", fh))):
        r = probes.rotation_probe(fn, rot_train, rot_test, epochs=cfg.probe_epochs, hidden=cfg.probe_hidden,
                                  key=jax.random.fold_in(key, i))
        out["rotation"][name] = {"linear": r["linear"], "mlp": r["mlp"], "linear_train": r["linear_train"],
                                 "mlp_train": r["mlp_train"]}
        if class_probes:
            (xtr, ytr), (xte, yte) = cls_train, cls_test
            ftr = probes.features_in_batches(fn, xtr)
            fte = probes.features_in_batches(fn, xte)
            k = jax.random.fold_in(key, 10 + i)
            lin = probes.logistic_probe(ftr, ytr, fte, yte, epochs=cfg.probe_epochs, key=k)
            mlp = probes.mlp_probe(ftr, ytr, fte, yte, hidden=cfg.probe_hidden, epochs=cfg.probe_epochs, key=k)
            out["class"][name] = {"linear": lin["acc"], "mlp": mlp["acc"]}
    return out


# ------------------------------------------------------------------------- representations of images


def _cast(tree, dtype):
    return jax.tree_util.tree_map(lambda a: a.astype(dtype) if jnp.issubdtype(a.dtype, jnp.floating) else a, tree)


def analysis_variables(run, dtype, *, initial_head: bool = False) -> dict:
    """``{"backbone": variables, "head": variables}`` of a run (trained; head at init if ``initial_head``), cast."""
    p, s = run["params"], run["state"]
    hp, hs = (run["init_params"], run["init_state"]) if initial_head else (p, s)
    return _cast({"backbone": {"params": p["backbone"], **s["backbone"]},
                  "head": {"params": hp["projector"], **hs["projector"]}}, dtype)


def augmentation_fn(cfg, name: str):
    """``(image, t) -> image``: rotation by ``t`` radians, hue shift by ``t`` turns, blur with sigma ``t``."""
    if name == "rotation":
        return augment.rotate
    if name == "hue":
        return augment.adjust_hue
    if name == "blur":
        return lambda x, t: augment.gaussian_blur(x, t, radius=cfg.tangent_blur_radius)
    raise ValueError(f"augmentation must be one of {AUGMENTATIONS}; got {name!r}.")


class Geometry:
    """Jitted measurements of ``r(t) = f(g_t x)`` and ``h(f(g_t x))`` for one backbone/head architecture.

    The models are code (closed over); every array -- variables, images, parameters -- is an argument.
    """

    def __init__(self, backbone, head, aug):
        self.backbone, self.head, self.aug = backbone, head, aug

        def z_of(v, x):
            return backbone.apply(v["backbone"], x[None])[0][0]

        def h_of(v, z):
            return head.apply(v["head"], z[None])[0][0]

        def rep(v, x, t, which):
            z = z_of(v, aug(x, t))
            return z if which == "backbone" else h_of(v, z)

        self.rep = rep

        def grid(v, xs, ts, which):  # (N, T, d)
            return jax.vmap(lambda x: jax.vmap(lambda t: rep(v, x, t, which))(ts))(xs)

        def exact(v, xs, ts, which):  # (N, T)
            one = lambda x, t: metrics.trajectory_curvature(lambda a: rep(v, x, a, which), t)  # noqa: E731
            return jax.vmap(lambda x: jax.vmap(lambda t: one(x, t))(ts))(xs)

        def z_at(v, xs, t0):  # (N, d): z of the augmented images
            return jax.vmap(lambda x: z_of(v, aug(x, t0)))(xs)

        def degeneracy(v, xs, t0, dirs):  # (N,) along the tangent, (N,) along the given directions
            head_fn = lambda z: h_of(v, z)  # noqa: E731
            along = jax.vmap(lambda x: metrics.augmentation_metric_degeneracy(
                head_fn, lambda a: z_of(v, aug(x, a)), t0))(xs)
            other = jax.vmap(lambda z, r: metrics.metric_degeneracy(head_fn, z, r))(z_at(v, xs, t0), dirs)
            return along, other

        self.grid = jax.jit(grid, static_argnames="which")
        self.exact = jax.jit(exact, static_argnames="which")
        self.z_at = jax.jit(z_at)
        self.degeneracy = jax.jit(degeneracy)


def spread_scale(r) -> float:
    """``s_r = sqrt(mean_i |r_i - mean r|^2)``: the overall spread used to make comparisons scale-free."""
    r = np.asarray(r, np.float64)
    return float(np.sqrt(np.mean(np.sum((r - r.mean(0)) ** 2, axis=1))))


# ----------------------------------------------------------------------------------------- curvature


def curvature_analysis(cfg, geo: Geometry, v, images, scales) -> dict:
    """Exact ``|r''|`` and the paper's FD on ``cfg.curvature_angles`` angles in ``[0, max]``, plus FD convergence.

    ``scales``: ``{"backbone": s_z, "head": s_h}`` (see :func:`spread_scale`). Returns summary numbers,
    the per-angle means (figure) and the convergence rows.
    """
    T = cfg.curvature_angles
    if T < 3:
        raise ValueError(f"`curvature_angles` must be >= 3 for second differences; got {T}.")
    dt = images.dtype
    thetas = jnp.linspace(0.0, math.radians(cfg.curvature_max_angle_deg), T, dtype=dt)
    h = float(thetas[1] - thetas[0])
    out, per_angle = {}, {}
    for which in ("backbone", "head"):
        reps = geo.grid(v, images, thetas, which=which)
        fd = np.asarray(metrics.fd_trajectory_curvature(reps, h))  # (N, T-2) at thetas[1:-1]
        ex = np.asarray(geo.exact(v, images, thetas[1:-1], which=which))
        for name, arr in (("fd", fd), ("exact", ex)):
            if not np.all(np.isfinite(arr)):
                raise FloatingPointError(f"non-finite {name} curvature of the {which} trajectory.")
        out[which] = {"exact_mean": float(ex.mean()), "fd_mean": float(fd.mean()),
                      "fd_over_exact": float(fd.mean() / ex.mean()),
                      "median_pointwise_rel_diff": float(np.median(np.abs(fd - ex) / np.maximum(ex, 1e-300))),
                      "scale": scales[which]}
        per_angle[which] = {"exact": ex.mean(0) / scales[which], "fd": fd.mean(0) / scales[which]}
    ratio = lambda k: out["head"][k] / out["backbone"][k]  # noqa: E731
    norm = scales["backbone"] / scales["head"]
    summary = {"ratio_exact_raw": ratio("exact_mean"), "ratio_fd_raw": ratio("fd_mean"),
               "ratio_exact_normalised": ratio("exact_mean") * norm, "ratio_fd_normalised": ratio("fd_mean") * norm,
               "fd_spacing_deg": math.degrees(h)}
    conv = fd_convergence(cfg, geo, v, images[: cfg.convergence_images])
    return {"summary": summary, "by_rep": out, "angles_deg": np.degrees(np.asarray(thetas[1:-1])).tolist(),
            "per_angle": {k: {kk: vv.tolist() for kk, vv in d.items()} for k, d in per_angle.items()},
            "convergence": conv}


def fd_convergence(cfg, geo: Geometry, v, images) -> list[dict]:
    """At ``theta_c``: central second difference ``|r(t+h) - 2 r(t) + r(t-h)| / h^2`` for shrinking ``h`` vs exact.

    Rows: ``{"rep", "h_deg", "median_rel_err", "max_rel_err"}`` with ``rel_err = |FD - exact| / exact`` over
    images. With ``r`` smooth near ``theta_c`` the error is ``O(h^2)`` until rounding (``~eps |r| / h^2``)
    takes over; a kink of ``r'`` inside ``[t-h, t+h]`` adds an ``O(|jump| / h)`` term.
    """
    dt = images.dtype
    tc = math.radians(cfg.convergence_angle_deg)
    rows = []
    for which in ("backbone", "head"):
        ex = np.asarray(geo.exact(v, images, jnp.asarray([tc], dt), which=which))[:, 0]
        for hd in cfg.convergence_spacings_deg:
            hr = math.radians(hd)
            reps = geo.grid(v, images, jnp.asarray([tc - hr, tc, tc + hr], dt), which=which)
            fd = np.asarray(metrics.fd_trajectory_curvature(reps, hr))[:, 0]
            rel = np.abs(fd - ex) / np.maximum(ex, 1e-300)
            rows.append({"rep": which, "h_deg": float(hd), "median_rel_err": float(np.median(rel)),
                         "max_rel_err": float(np.max(rel)), "exact_median": float(np.median(ex))})
    return rows


# -------------------------------------------------------------------------------------------- orbits


def orbit_images(cfg, ds):
    """``(C, I, H, W, 3)`` float images: the first ``orbit_images`` of each of the first ``orbit_classes`` classes."""
    out = []
    for c in range(cfg.orbit_classes):
        idx = np.flatnonzero(ds.labels == c)[: cfg.orbit_images]
        if idx.size < cfg.orbit_images:
            raise ValueError(f"class {c} has only {idx.size} test images; need orbit_images={cfg.orbit_images}.")
        out.append(ds.images[idx])
    return np.stack(out)


def orbit_analysis(cfg, geo: Geometry, v, images, scales) -> dict:
    """:func:`ssl_geometry.metrics.orbit_statistics` of rotation orbits, raw and divided by ``s_r``."""
    C, I = images.shape[:2]
    ts = jnp.linspace(0.0, math.radians(cfg.orbit_max_angle_deg), cfg.orbit_steps, dtype=images.dtype)
    rows, reps_out = [], {}
    flat = images.reshape((C * I,) + images.shape[2:])
    for which in ("backbone", "head"):
        reps = np.asarray(geo.grid(v, flat, ts, which=which)).reshape(C, I, cfg.orbit_steps, -1)
        reps_out[which] = reps
        for norm in ("raw", "normalised"):
            r = reps if norm == "raw" else reps / scales[which]
            st = metrics.orbit_statistics(jnp.asarray(r))
            rows.append({"rep": which, "scale": norm, "orbit_spread": float(st.orbit_spread),
                         "intra_orbit_distance": float(st.intra_orbit_distance),
                         "inter_class_distance": float(st.inter_class_distance),
                         "class_orbit_ratio": float(st.class_orbit_ratio)})
    get = lambda w, n, k: next(r[k] for r in rows if r["rep"] == w and r["scale"] == n)  # noqa: E731
    summary = {f"spread_shrink_{n}": get("backbone", n, "orbit_spread") / get("head", n, "orbit_spread")
               for n in ("raw", "normalised")}
    summary["class_orbit_ratio_backbone"] = get("backbone", "raw", "class_orbit_ratio")
    summary["class_orbit_ratio_head"] = get("head", "raw", "class_orbit_ratio")
    return {"rows": rows, "summary": summary, "reps": reps_out}


# -------------------------------------------------------------------------------------- degeneracy


def degeneracy_analysis(cfg, geos: dict, v_trained, v_init, images, key) -> list[dict]:
    """Mean ``|J_h v|/|v|`` along each augmentation tangent vs random and data directions, trained and init heads.

    Ratio columns divide the tangent mean by the control mean; ``< 1``: the head's metric is more degenerate
    along the augmentation than along the control.
    """
    t0s = {"rotation": math.radians(cfg.tangent_rotation_deg), "hue": cfg.tangent_hue,
           "blur": cfg.tangent_blur_sigma}
    n = images.shape[0]
    k_rand, k_perm = jax.random.split(key)
    perm = np.asarray(jax.random.permutation(k_perm, n))
    perm = np.where(perm == np.arange(n), np.roll(perm, 1), perm)  # no image paired with itself
    rows = []
    for aug in AUGMENTATIONS:
        geo = geos[aug]
        t0 = jnp.asarray(t0s[aug], images.dtype)
        for head_state, v in (("trained", v_trained), ("init", v_init)):
            zs = geo.z_at(v, images, t0)
            rand = jax.random.normal(k_rand, zs.shape, images.dtype)
            along, other = geo.degeneracy(v, images, t0, rand)
            _, data_dir = geo.degeneracy(v, images, t0, zs[perm] - zs)
            along, other, data_dir = (np.asarray(a) for a in (along, other, data_dir))
            for name, arr in (("tangent", along), ("random", other), ("data", data_dir)):
                if not np.all(np.isfinite(arr)):
                    raise FloatingPointError(f"non-finite metric degeneracy ({aug}, {head_state} head, {name}).")
            rows.append({"augmentation": aug, "head": head_state, "at": float(t0s[aug]),
                         "in_training_augmentations": _in_training(cfg, aug),
                         "tangent": float(along.mean()), "random": float(other.mean()), "data": float(data_dir.mean()),
                         "ratio_vs_random": float(along.mean() / other.mean()),
                         "ratio_vs_data": float(along.mean() / data_dir.mean()),
                         "fraction_below_random_median": float(np.mean(along < np.median(other)))})
    return rows


def _in_training(cfg, aug: str) -> bool:
    a = cfg.augment
    if aug == "hue":
        return bool(a.jitter_prob > 0 and a.jitter[3] > 0)
    if aug == "blur":
        return bool(a.blur_prob > 0)
    return False  # SimCLR's views use no rotation


# ------------------------------------------------------------------------------------------- verdict


def verdict(headline: dict, premises: dict, cfg) -> str:
    """The rule (stated in :func:`verdict_rule`) applied to the stored numbers."""
    if not all(p["met"] for p in premises.values()):
        return "premise violated"
    gap = headline["rotation_gap_mean"]
    ratios = [headline[f"degeneracy_ratio_{a}"] for a in AUGMENTATIONS]
    if gap >= cfg.probe_margin and all(r < 1.0 for r in ratios):
        return "supported"
    if gap <= 0.0 and all(r >= 1.0 for r in ratios):
        return "not supported"
    return "inconclusive"


def verdict_rule(cfg) -> str:
    return (f"premise violated unless the SimCLR loss fell (mean of the last 10% of steps below the first 10%), "
            f"the backbone's rotation probe beats chance (mean of linear and MLP accuracy >= "
            f"{cfg.min_backbone_rotation_acc:g}; chance 0.25) and z is not collapsed (RankMe effective rank >= "
            f"{cfg.min_effective_rank:g}); then supported if the rotation-probe accuracy on h(z) is below that on "
            f"z by >= {cfg.probe_margin:g} (mean of linear and MLP) AND the trained head's mean |J_h v|/|v| along "
            f"each of the rotation, hue and blur tangents is below its mean along isotropic random directions "
            f"(ratio < 1 for all three); not supported if h(z) is not below z (gap <= 0) and no tangent ratio is "
            f"below 1; inconclusive otherwise")


def premises_of(cfg, losses, rot, erank_z) -> dict:
    k = max(1, len(losses) // 10)
    first, last = float(np.mean(losses[:k])), float(np.mean(losses[-k:]))
    z_rot = 0.5 * (rot["backbone"]["linear"] + rot["backbone"]["mlp"])
    return {
        "ssl_loss_decreased": {"met": last < first, "value": {"first_10pct": first, "last_10pct": last}},
        "backbone_encodes_rotation": {"met": z_rot >= cfg.min_backbone_rotation_acc, "value": z_rot},
        "backbone_not_collapsed": {"met": erank_z >= cfg.min_effective_rank, "value": erank_z},
    }


# ----------------------------------------------------------------------------------------------- run


def run(config, out_dir) -> dict:
    cfg = config
    adt = jnp.float64 if jax.config.read("jax_enable_x64") else jnp.float32
    key = jax.random.PRNGKey(cfg.seed)
    k_train, k_probe, k_deg = jax.random.split(key, 3)
    train_ds, test_ds = load_data(cfg)
    rot_train = rotation_probe_subset(cfg, train_ds, cfg.probe_train_images)
    rot_test = rotation_probe_subset(cfg, test_ds, cfg.probe_test_images)
    cls_train = (augment.to_float(train_ds.images[: cfg.probe_train_images]), train_ds.labels[: cfg.probe_train_images])
    cls_test = (augment.to_float(test_ds.images[: cfg.probe_test_images]), test_ds.labels[: cfg.probe_test_images])

    # Main run (head_depth) first, then the other depths of the ablation (same key: same backbone init).
    depths = [cfg.head_depth] + [d for d in cfg.depths if d != cfg.head_depth]
    runs, probe_res = {}, {}
    for d in depths:
        runs[d] = train_simclr(cfg, d, train_ds.images, k_train)
        probe_res[d] = probe_suite(cfg, runs[d], rot_train, rot_test, cls_train, cls_test, k_probe,
                                   class_probes=(d == cfg.head_depth))
    main = runs[cfg.head_depth]
    pr = probe_res[cfg.head_depth]

    # Representation statistics on the clean test images (float32 features).
    fz, fh = _feature_fns(main)
    z_test = probes.features_in_batches(fz, cls_test[0])
    h_test = probes.features_in_batches(fh, cls_test[0])
    scales = {"backbone": spread_scale(z_test), "head": spread_scale(h_test)}
    ranks = {f"erank_{m}_{w}": float(metrics.effective_rank(jnp.asarray(r, adt), m))
             for w, r in (("backbone", z_test), ("head", h_test)) for m in metrics.EFFECTIVE_RANK_METHODS}

    # Geometry in the analysis dtype.
    backbone64 = make_backbone(cfg, adt)
    head64 = make_head(cfg, backbone64.out_dim, cfg.head_depth, adt)
    geos = {a: Geometry(backbone64, head64, augmentation_fn(cfg, a)) for a in AUGMENTATIONS}
    v_tr = analysis_variables(main, adt)
    v_init = analysis_variables(main, adt, initial_head=True)
    test_f = augment.to_float(test_ds.images, adt)
    curv = curvature_analysis(cfg, geos["rotation"], v_tr, test_f[: cfg.curvature_images], scales)
    orb = orbit_analysis(cfg, geos["rotation"], v_tr, augment.to_float(orbit_images(cfg, test_ds), adt), scales)
    deg = degeneracy_analysis(cfg, geos, v_tr, v_init, test_f[: cfg.degeneracy_images], k_deg)

    # Headline and verdict.
    rot = pr["rotation"]
    gap_lin = rot["backbone"]["linear"] - rot["head"]["linear"]
    gap_mlp = rot["backbone"]["mlp"] - rot["head"]["mlp"]
    headline = {"rotation_gap_mean": 0.5 * (gap_lin + gap_mlp)}
    for a in AUGMENTATIONS:
        headline[f"degeneracy_ratio_{a}"] = next(r["ratio_vs_random"] for r in deg
                                                 if r["augmentation"] == a and r["head"] == "trained")
    headline.update({
        "rot_lin_backbone": rot["backbone"]["linear"], "rot_lin_head": rot["head"]["linear"],
        "rot_mlp_backbone": rot["backbone"]["mlp"], "rot_mlp_head": rot["head"]["mlp"],
        "class_lin_backbone": pr["class"]["backbone"]["linear"], "class_lin_head": pr["class"]["head"]["linear"],
        "class_mlp_backbone": pr["class"]["backbone"]["mlp"], "class_mlp_head": pr["class"]["head"]["mlp"],
        "curvature_ratio_exact_raw": curv["summary"]["ratio_exact_raw"],
        "curvature_ratio_fd_raw": curv["summary"]["ratio_fd_raw"],
        "curvature_ratio_exact_normalised": curv["summary"]["ratio_exact_normalised"],
        "fd_over_exact_backbone": curv["by_rep"]["backbone"]["fd_over_exact"],
        "fd_over_exact_head": curv["by_rep"]["head"]["fd_over_exact"],
        "spread_shrink_raw": orb["summary"]["spread_shrink_raw"],
        "spread_shrink_normalised": orb["summary"]["spread_shrink_normalised"],
    })
    for d in sorted(cfg.depths):
        r = probe_res[d]["rotation"]
        headline[f"depth{d}_rot_lin_backbone"] = r["backbone"]["linear"]
        headline[f"depth{d}_rot_lin_head"] = r["head"]["linear"]
    premises = premises_of(cfg, main["losses"], rot, ranks["erank_rankme_backbone"])
    v = verdict(headline, premises, cfg)

    depth_rows = []
    for d in sorted(cfg.depths):
        r = probe_res[d]["rotation"]
        depth_rows.append({"head_depth": d, "rot_lin_backbone": r["backbone"]["linear"],
                           "rot_lin_head": r["head"]["linear"], "rot_mlp_backbone": r["backbone"]["mlp"],
                           "rot_mlp_head": r["head"]["mlp"], "final_loss": float(runs[d]["losses"][-1])})
    paper = {"rot_lin_backbone": 0.5227, "rot_lin_head": 0.3755, "rot_mlp_backbone": 0.5546, "rot_mlp_head": 0.4356,
             "curvature_ratio_fd_raw": 1.93, "spread_shrink_raw": 21.9,
             "depth1_rot_lin_backbone": 0.475, "depth1_rot_lin_head": 0.474,
             "depth2_rot_lin_backbone": 0.528, "depth2_rot_lin_head": 0.397,
             "depth3_rot_lin_backbone": 0.524, "depth3_rot_lin_head": 0.356}
    _figures(cfg, pr, depth_rows, curv, orb, deg, main["losses"], out_dir)
    return {
        "verdict": v, "verdict_rule": verdict_rule(cfg), "headline": headline, "paper": paper,
        "premises": premises,
        "setting": {"dataset": cfg.dataset, "image_size": cfg.image_size, "backbone": backbone64.name,
                    "head": head64.name,
                    "training": "objectives.make_objective('simclr') + optax.adam, jitted lax.scan chunks",
                    "analysis_dtype": str(jnp.dtype(adt)), "rotation_probe_train_images": int(rot_train.shape[0]),
                    "rotation_probe_test_images": int(rot_test.shape[0]),
                    "paper_numbers": "CIFAR-10 ResNet-18 (DESIGN.md s.3); accuracies as fractions",
                    "probe_margin": cfg.probe_margin},
        "probes": pr, "representation": {**ranks, "scale_backbone": scales["backbone"], "scale_head": scales["head"]},
        "curvature": curv, "orbits": {"rows": orb["rows"], "summary": orb["summary"]},
        "degeneracy": deg, "depth_ablation": depth_rows,
        "losses": {str(d): {"first": float(runs[d]["losses"][0]), "last": float(runs[d]["losses"][-1])} for d in runs},
        "loss_curve": main["losses"].tolist(),
    }


# ------------------------------------------------------------------------------------------- figures


def _figures(cfg, pr, depth_rows, curv, orb, deg, losses, out_dir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # Probes + depth ablation + loss.
    fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(13, 3.4))
    labels = ["rot lin", "rot MLP", "class lin", "class MLP"]
    vals = {w: [pr["rotation"][w]["linear"], pr["rotation"][w]["mlp"], pr["class"][w]["linear"],
                pr["class"][w]["mlp"]] for w in ("backbone", "head")}
    x = np.arange(4)
    a1.bar(x - 0.2, vals["backbone"], 0.4, label="backbone z")
    a1.bar(x + 0.2, vals["head"], 0.4, label="head h(z)")
    a1.axhline(0.25, color="k", lw=0.5, ls="--")
    a1.set_xticks(x, labels)
    a1.set_ylabel("test accuracy")
    a1.legend(fontsize=7)
    dd = [r["head_depth"] for r in depth_rows]
    a2.plot(dd, [r["rot_lin_backbone"] for r in depth_rows], "o-", label="backbone (linear)")
    a2.plot(dd, [r["rot_lin_head"] for r in depth_rows], "s-", label="head (linear)")
    a2.axhline(0.25, color="k", lw=0.5, ls="--")
    a2.set_xticks(dd)
    a2.set_xlabel("head depth (affine layers)")
    a2.set_ylabel("rotation probe accuracy")
    a2.legend(fontsize=7)
    a3.plot(losses)
    a3.set_xlabel("step")
    a3.set_ylabel("NT-Xent (main run)")
    common.save_figure(fig, out_dir, "probes")

    # Curvature per angle + convergence.
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.4))
    ang = curv["angles_deg"]
    for w, c in (("backbone", "tab:blue"), ("head", "tab:red")):
        a1.plot(ang, curv["per_angle"][w]["exact"], "o-", color=c, label=f"{w} exact")
        a1.plot(ang, curv["per_angle"][w]["fd"], "x--", color=c, label=f"{w} FD (5 deg)")
        rows = [r for r in curv["convergence"] if r["rep"] == w]
        a2.loglog([r["h_deg"] for r in rows], [max(r["median_rel_err"], 1e-17) for r in rows], "o-", color=c,
                  label=f"{w} median")
        a2.loglog([r["h_deg"] for r in rows], [max(r["max_rel_err"], 1e-17) for r in rows], ":", color=c,
                  label=f"{w} max")
    a1.set_yscale("log")
    a1.set_xlabel("rotation angle (deg)")
    a1.set_ylabel("|d2r/dtheta2| / s_r (mean over images)")
    a1.legend(fontsize=7)
    a2.set_xlabel("FD spacing h (deg)")
    a2.set_ylabel("|FD - exact| / exact")
    a2.set_title(f"at {cfg.convergence_angle_deg:g} deg", fontsize=8)
    a2.legend(fontsize=7)
    common.save_figure(fig, out_dir, "curvature")

    # Orbits (PCA of scale-normalised representations) + degeneracy ratios.
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    for ax, w in zip(axes[:2], ("backbone", "head")):
        r = orb["reps"][w]
        C, I, T, d = r.shape
        flat = r.reshape(-1, d)
        flat = (flat - flat.mean(0)) / max(spread_scale(flat), 1e-300)
        _, _, vt = np.linalg.svd(flat, full_matrices=False)
        p = (flat @ vt[:2].T).reshape(C, I, T, 2)
        for c in range(C):
            for i in range(I):
                ax.plot(p[c, i, :, 0], p[c, i, :, 1], "-", color=f"C{c}", lw=0.8)
                ax.plot(p[c, i, 0, 0], p[c, i, 0, 1], "o", color=f"C{c}", ms=3)
        ax.set_title(f"{w}: rotation orbits (PCA, per-rep normalised)", fontsize=8)
    ax = axes[2]
    x = np.arange(len(AUGMENTATIONS))
    for off, hs, col in ((-0.2, "trained", "tab:red"), (0.2, "init", "tab:gray")):
        ax.bar(x + off, [next(r["ratio_vs_random"] for r in deg if r["augmentation"] == a and r["head"] == hs)
                         for a in AUGMENTATIONS], 0.4, color=col, label=f"{hs} head")
    ax.axhline(1, color="k", lw=0.5)
    ax.set_xticks(x, AUGMENTATIONS)
    ax.set_ylabel("mean |J_h v_aug|/|v| / mean |J_h v_rand|/|v|")
    ax.legend(fontsize=7)
    common.save_figure(fig, out_dir, "orbits_degeneracy")


# -------------------------------------------------------------------------------------------- report


def report(results, rel_dir) -> str:
    pr = results["probes"]
    s = results["setting"]
    probe_rows = []
    for task in ("rotation", "class"):
        for kind in ("linear", "mlp"):
            probe_rows.append({"probe": f"{task} {kind}", "backbone z": pr[task]["backbone"][kind],
                               "head h(z)": pr[task]["head"][kind],
                               "gap (z - h)": pr[task]["backbone"][kind] - pr[task]["head"][kind]})
    p = results["paper"]
    prem = "; ".join(f"{k}: {'met' if v['met'] else 'NOT met'} ({_fmt(v['value'])})"
                     for k, v in results["premises"].items())
    cs = results["curvature"]["summary"]
    cb = results["curvature"]["by_rep"]
    curv_rows = [{"rep": w, "exact mean kappa": cb[w]["exact_mean"], "FD mean kappa (paper's)": cb[w]["fd_mean"],
                  "FD / exact": cb[w]["fd_over_exact"], "median pointwise rel. diff.":
                  cb[w]["median_pointwise_rel_diff"], "spread s_r": cb[w]["scale"]} for w in ("backbone", "head")]
    h = results["headline"]
    rep = results["representation"]
    ratios = ", ".join(f"{a} {h[f'degeneracy_ratio_{a}']:.3g}" for a in AUGMENTATIONS)
    reading = (f"Reading: rotation-probe gap z - h(z) = {h['rotation_gap_mean']:.3g} (mean of linear and MLP; "
               f"margin {s['probe_margin']:g}: {'met' if h['rotation_gap_mean'] >= s['probe_margin'] else 'not met'}); "
               f"trained head's tangent/random degeneracy ratios: {ratios} (all < 1: "
               f"{'yes' if all(h[f'degeneracy_ratio_{a}'] < 1 for a in AUGMENTATIONS) else 'no'}).")
    return "\n".join([
        reading,
        "",
        f"Setting: {s['dataset']} at {s['image_size']}px, backbone `{s['backbone']}`, head `{s['head']}`; "
        f"training: {s['training']}; analysis in {s['analysis_dtype']}. Rotation probes on "
        f"{s['rotation_probe_train_images']}/{s['rotation_probe_test_images']} train/test images (x4 rotations). "
        f"Premises: {prem}.",
        "",
        f"Effective rank on clean test images (RankMe / squared): z {rep['erank_rankme_backbone']:.3g} / "
        f"{rep['erank_squared_backbone']:.3g}, h(z) {rep['erank_rankme_head']:.3g} / {rep['erank_squared_head']:.3g}.",
        "",
        "**Probes** (test accuracy; paper, CIFAR-10 RN18, lin/MLP: backbone "
        f"{p['rot_lin_backbone']:.4g}/{p['rot_mlp_backbone']:.4g} vs head {p['rot_lin_head']:.4g}/"
        f"{p['rot_mlp_head']:.4g}):",
        "",
        common.markdown_table(probe_rows),
        "",
        f"**Trajectory curvature** along rotation (10 angles in [0, 45 deg], FD spacing {cs['fd_spacing_deg']:.3g} "
        f"deg, exact = nested jvp at the same 8 interior angles). Head/backbone ratio of mean |r''|: exact "
        f"{cs['ratio_exact_raw']:.4g} raw, {cs['ratio_exact_normalised']:.4g} scale-free (each rep divided by its "
        f"spread s_r); paper's FD {cs['ratio_fd_raw']:.4g} raw, {cs['ratio_fd_normalised']:.4g} scale-free "
        f"(paper: {p['curvature_ratio_fd_raw']:g}).",
        "",
        common.markdown_table(curv_rows),
        "",
        "FD convergence at one angle (rel. error |FD - exact|/exact over images as the spacing shrinks): the "
        "trajectory is only piecewise smooth (bilinear resampling and ReLU kinks), so FD at the paper's spacing "
        "measures a kink-averaged curvature; FD meets the exact value once h is below the kink spacing.",
        "",
        common.markdown_table(results["curvature"]["convergence"]),
        "",
        f"**Orbit geometry** (rotation orbits; 'normalised' divides each representation by its spread s_r, "
        f"a scale-free comparison). Spread shrink backbone/head: {h['spread_shrink_raw']:.4g} raw, "
        f"{h['spread_shrink_normalised']:.4g} normalised (paper: {p['spread_shrink_raw']:g}, raw).",
        "",
        common.markdown_table(results["orbits"]["rows"]),
        "",
        "**Metric degeneracy** |J_h v|/|v| (means over images) along augmentation tangents v = dz/dt vs isotropic "
        "random directions and data directions z_j - z_i; ratio < 1: more degenerate along the augmentation. "
        "'init' is the head at initialisation on the same trained backbone (a control).",
        "",
        common.markdown_table(results["degeneracy"]),
        "",
        "**Head-depth ablation** (paper, linear rotation probe backbone/head: depth 1 47.5/47.4, depth 2 "
        "52.8/39.7, depth 3 52.4/35.6 %):",
        "",
        common.markdown_table(results["depth_ablation"]),
        "",
        f"![probes]({rel_dir}/probes.png)",
        f"![curvature]({rel_dir}/curvature.png)",
        f"![orbits and degeneracy]({rel_dir}/orbits_degeneracy.png)",
    ])


def _fmt(v):
    if isinstance(v, dict):
        return ", ".join(f"{k} {_fmt(x)}" for k, x in v.items())
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)
