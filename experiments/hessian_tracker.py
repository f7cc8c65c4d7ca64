"""Experiment 5: Hessian tracker parity -- the paper's power iteration against exact eigenvalues.

A small SimSiam model (small CNN backbone ``f``, bias-free projector ``g`` and predictor
``q``, no BatchNorm) is trained with optax SGD + momentum in float32 on the embedded digits
(two views by the paper's RandomResizedCrop(scale 0.2-1) + flip). At the start of every epoch,
on each of its first ``tracker_batches`` batches, we take the backbone features of the two
views ``z1, z2`` (``(n, d)``) and the Hessian the paper's tracker looks at::

    H = hess_{z1} L,   L(z1) = 1/2 D(q(g(z1)), sg g(z2)),   D(p, t) = -(1/n) sum_i cos(p_i, t_i)

(the other half of SimSiam's symmetric loss reaches ``z1`` only through a stop-gradient).
Without BatchNorm ``L`` is a mean of per-sample terms, so ``H`` is block-diagonal with ``n``
blocks ``(d, d)`` (verified by :func:`ssl_geometry.curvature.block_coupling`). Three estimates
of ``lambda_min(H)`` and ``lambda_max(H)``:

(a) the paper's 20-step shifted power iteration in float32
    (:func:`ssl_geometry.curvature.paper_power_iteration`);
(b) float64 Lanczos with full reorthogonalisation, run to a residual tolerance, with true
    residuals ``|H y - theta y|`` (:func:`ssl_geometry.curvature.extreme_eigenvalues`);
(c) exact: the ``n`` blocks by :func:`ssl_geometry.curvature.block_diagonal_hessian`
    (float64) and ``numpy.linalg.eigvalsh``.

Recorded per checkpoint: the power iteration's relative errors
``|lambda_power - lambda_exact| / |lambda_exact|``, sign errors (wrong-sign ``lambda_min`` or
``lambda_max``), the underestimate ratio ``|lambda_min exact| / |lambda_min power|``, Lanczos's
agreement with the exact values and its residuals; and the collapse statistics of the projector
outputs (std of L2-normalised rows, covariance condition number) for the paper's
Spearman(variance, condition number) over training.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import scipy.stats

from experiments import common
from ssl_geometry import augment, backbones, curvature, data, heads, losses, metrics

NAME = "hessian_tracker"
TITLE = "Hessian tracker parity"
CLAIM = ("Audit of the paper's Hessian tracker (DESIGN.md s.4): its 20-step float32 shifted power iteration is "
         "not a trustworthy estimate of lambda_min(hess_{z1} L) -- it underestimates |lambda_min| and can return "
         "wrong signs.")

PAPER_SPEARMAN = {("swish", "normal"): 0.339, ("swish", "pseudo"): 0.609, ("relu", "pseudo"): 0.669}
AUDIT_UNDERESTIMATE = (170.0, 195.0)


@functools.lru_cache(maxsize=16)
def head_functions(activation: str, d: int, k: int, pred_hidden: int):
    """``(head, first_view_loss, hvp)`` for one head shape (cached: one compile per shape).

    ``first_view_loss(z1, hp, u2) = 1/2 negative_cosine(q(g(z1)), u2)``; ``hvp(v, z1_flat, hp, u2)``
    is ``H v`` by forward-over-reverse, computing in the dtype of its arguments.
    """
    proj = heads.simsiam_projector(d, k, activation=activation, batch_norm=False)
    pred = heads.simsiam_predictor(k, pred_hidden, activation=activation, batch_norm=False)

    def head(hp, z):
        u, _ = proj.apply({"params": hp["proj"]}, z)
        p, _ = pred.apply({"params": hp["pred"]}, u)
        return u, p

    def first_view_loss(z1, hp, u2):
        return 0.5 * losses.negative_cosine(head(hp, z1)[1], u2)

    def hvp(v, zf, hp, u2):
        shape = (u2.shape[0], zf.size // u2.shape[0])
        g = jax.grad(lambda x: first_view_loss(x.reshape(shape), hp, u2))
        return jax.jvp(g, (zf,), (v.astype(zf.dtype),))[1]

    return proj, pred, head, first_view_loss, hvp


def _cast(tree, dtype):
    return jax.tree_util.tree_map(lambda a: jnp.asarray(a, dtype), tree)


class Trainer:
    """Backbone + head, the jitted SimSiam epoch (``lax.scan`` over steps) and view features."""

    def __init__(self, cfg, activation: str):
        self.cfg = cfg
        self.size = cfg.image_size
        self.backbone = backbones.small_cnn((cfg.image_size, cfg.image_size, 3), tuple(cfg.widths),
                                            activation=cfg.backbone_activation, dtype=jnp.float32)
        self.d = cfg.widths[-1]
        self.proj, self.pred, self.head, self.first_view_loss, self.hvp = head_functions(
            activation, self.d, cfg.k, cfg.pred_hidden)
        self.tx = optax.sgd(cfg.lr, momentum=cfg.momentum)
        bb, head, size, tx = self.backbone, self.head, self.size, self.tx

        def features(params, key, images):
            v1, v2 = augment.two_views(key, images, augment.simsiam_cifar_augment, size=size)
            z1, _ = bb.apply({"params": params["backbone"]}, v1)
            z2, _ = bb.apply({"params": params["backbone"]}, v2)
            return z1, z2

        def loss(params, key, images):
            z1, z2 = features(params, key, images)
            u1, p1 = head(params["head"], z1)
            u2, p2 = head(params["head"], z2)
            return losses.simsiam(p1, p2, u1, u2)

        def step(carry, xs):
            params, opt_state = carry
            key, images = xs
            val, g = jax.value_and_grad(loss)(params, key, images)
            upd, opt_state = tx.update(g, opt_state, params)
            return (optax.apply_updates(params, upd), opt_state), val

        @jax.jit
        def epoch(params, opt_state, keys, images):
            (params, opt_state), vals = jax.lax.scan(step, (params, opt_state), (keys, images))
            return params, opt_state, vals

        self.features = jax.jit(features)
        self.epoch = epoch

    def init(self, key, init: str):
        kb, kp, kq = jax.random.split(key, 3)
        vp = self.proj.init(kp)
        if init == "pseudo":
            vp = heads.scale_weights(vp, self.cfg.pseudo_collapse_scale)
        elif init != "normal":
            raise ValueError(f"`init` must be 'normal' or 'pseudo'; got {init!r}.")
        params = {"backbone": self.backbone.init(kb)["params"],
                  "head": {"proj": vp["params"], "pred": self.pred.init(kq)["params"]}}
        return _cast(params, jnp.float32)


def exact_extremes(trainer, z1, hp, u2):
    """Exact spectrum ends of ``H`` from its per-sample blocks (float64): ``(lmin, lmax, blocks)``."""
    blocks = np.asarray(_blocks(trainer.first_view_loss, z1, hp, u2))
    ev = np.linalg.eigvalsh(blocks)  # (n, d)
    return float(ev.min()), float(ev.max()), blocks


@functools.partial(jax.jit, static_argnums=0)
def _blocks(f, z1, hp, u2):
    return curvature.block_diagonal_hessian(f, z1, hp, u2)


def checkpoint(trainer, cfg, params, key, images, lanczos_key, power_key):
    """All three estimates at one batch; returns a row dict."""
    z1, z2 = trainer.features(params, key, images)
    hp64 = _cast(params["head"], jnp.float64)
    z1_64, z2_64 = jnp.asarray(z1, jnp.float64), jnp.asarray(z2, jnp.float64)
    u1_64, _ = trainer.head(hp64, z1_64)
    u2_64, _ = trainer.head(hp64, z2_64)
    n, d = z1_64.shape
    lmin_e, lmax_e, blocks = exact_extremes(trainer, z1_64, hp64, u2_64)
    dead = bool(np.all(blocks == 0))
    lz = curvature.extreme_eigenvalues(trainer.hvp, n * d, k=1, num_steps=min(n * d, cfg.lanczos_steps),
                                       key=lanczos_key, args=(z1_64.reshape(-1), hp64, u2_64), tol=cfg.lanczos_tol,
                                       return_vectors=True, dtype=jnp.float64)
    # The paper's estimator, float32 throughout (as its PyTorch tracker).
    hp32 = _cast(params["head"], jnp.float32)
    u2_32, _ = trainer.head(hp32, jnp.asarray(z2, jnp.float32))
    pw = curvature.paper_power_iteration(trainer.hvp, n * d, steps=cfg.power_steps, key=power_key,
                                         args=(jnp.asarray(z1, jnp.float32).reshape(-1), hp32, u2_32),
                                         dtype=jnp.float32)
    scale = max(abs(lmin_e), abs(lmax_e))
    tol = 100 * n * d * np.finfo(np.float64).eps * max(scale, np.finfo(np.float64).tiny)
    lm_l, lM_l = float(lz.smallest[0]), float(lz.largest[0])
    tr_min, tr_max = float(np.asarray(lz.smallest_true_residuals)[0]), float(np.asarray(lz.largest_true_residuals)[0])

    def rel(p, e):
        return abs(p - e) / abs(e) if abs(e) > tol else float("nan")

    def wrong_sign(p, e):
        return bool(abs(e) > tol and np.sign(p) != np.sign(e))

    return {
        "n": n, "d": d, "dead_head": dead,
        "lambda_min_exact": lmin_e, "lambda_max_exact": lmax_e, "sign_tol": tol,
        "lambda_min_lanczos": lm_l, "lambda_max_lanczos": lM_l,
        "lanczos_residual_min": float(lz.smallest_residuals[0]), "lanczos_residual_max": float(lz.largest_residuals[0]),
        "lanczos_true_residual_min": tr_min, "lanczos_true_residual_max": tr_max,
        "lanczos_steps": int(lz.num_steps), "lanczos_converged": bool(lz.converged),
        "lanczos_valid": bool(max(tr_min, tr_max) <= cfg.converged_residual * max(scale, 1e-300)),
        "lambda_min_power": pw.lambda_min, "lambda_max_power": pw.lambda_max,
        "rel_error_min_power": rel(pw.lambda_min, lmin_e), "rel_error_max_power": rel(pw.lambda_max, lmax_e),
        "sign_error_min": wrong_sign(pw.lambda_min, lmin_e), "sign_error_max": wrong_sign(pw.lambda_max, lmax_e),
        "underestimate_ratio": abs(lmin_e) / abs(pw.lambda_min) if pw.lambda_min != 0 else float("inf"),
        "std": float(metrics.normalized_std(u1_64)), "cond": float(metrics.covariance_condition_number(u1_64)),
    }


def _spearman(x, y):
    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = np.isfinite(x) & ~np.isnan(y)
    if ok.sum() < 3 or np.ptp(x[ok]) == 0:
        return float("nan")
    return float(scipy.stats.spearmanr(x[ok], y[ok]).statistic)


def train_and_track(cfg, activation, init, images, seed):
    """Train one model; returns ``(rows, losses per epoch, block coupling at the first checkpoint)``."""
    trainer = Trainer(cfg, activation)
    key = jax.random.PRNGKey(seed)
    k_init, k_aug, k_track = jax.random.split(key, 3)
    params = trainer.init(k_init, init)
    opt_state = trainer.tx.init(params)
    N = images.shape[0]
    spe = N // cfg.batch_size if cfg.steps_per_epoch is None else min(cfg.steps_per_epoch, N // cfg.batch_size)
    rows, epoch_losses, coupling = [], [], None
    for ep in range(cfg.epochs):
        order = data.epoch_order(N, seed, ep)[: spe * cfg.batch_size].reshape(spe, cfg.batch_size)
        batch_images = jnp.asarray(images[order], jnp.float32) / 255.0  # (spe, B, H, W, 3)
        keys = jax.random.split(jax.random.fold_in(k_aug, ep), spe)
        for b in range(min(cfg.tracker_batches, spe)):
            kt = jax.random.fold_in(k_track, ep * 1000 + b)
            kl, kp = jax.random.split(kt)
            if coupling is None:
                z1, z2 = trainer.features(params, keys[b], batch_images[b])
                hp64 = _cast(params["head"], jnp.float64)
                u2, _ = trainer.head(hp64, jnp.asarray(z2, jnp.float64))
                coupling = curvature.block_coupling(trainer.first_view_loss, jnp.asarray(z1, jnp.float64), hp64, u2,
                                                    key=kt)
            row = checkpoint(trainer, cfg, params, keys[b], batch_images[b], kl, kp)
            row.update({"activation": activation, "init": init, "seed": seed, "epoch": ep, "batch": b})
            rows.append(row)
        params, opt_state, vals = trainer.epoch(params, opt_state, keys, batch_images)
        vals = np.asarray(vals)
        if not np.all(np.isfinite(vals)):
            raise FloatingPointError(f"{activation}/{init}: non-finite SimSiam loss in epoch {ep} "
                                     f"(step {int(np.argmin(np.isfinite(vals)))}); lower the learning rate.")
        epoch_losses.append(float(vals.mean()))
    return rows, epoch_losses, coupling


def verdict(rows, cfg):
    """Rule: a checkpoint is valid when its head is not dead (exact Hessian not identically zero)
    and both Lanczos Ritz pairs have true residual <= converged_residual * max|lambda|. With fewer
    than min_valid_checkpoints valid checkpoints: inconclusive. Otherwise the claim (the paper's
    estimator is not trustworthy) is supported if, over valid checkpoints, the median relative error
    of the power iteration's lambda_min exceeds rel_error_threshold or the fraction of checkpoints
    with a wrong-sign lambda_min or lambda_max exceeds sign_error_threshold; not supported otherwise."""
    valid = [r for r in rows if r["lanczos_valid"] and not r["dead_head"]]
    rel = np.asarray([r["rel_error_min_power"] for r in valid], float)
    rel_ok = rel[np.isfinite(rel)]
    ratios = np.asarray([r["underestimate_ratio"] for r in valid], float)
    signs = [r["sign_error_min"] or r["sign_error_max"] for r in valid]
    stats = {
        "checkpoints": len(rows), "valid_checkpoints": len(valid),
        "dead_head_checkpoints": sum(r["dead_head"] for r in rows),
        "median_rel_error_lambda_min_power": float(np.median(rel_ok)) if rel_ok.size else float("nan"),
        "max_rel_error_lambda_min_power": float(np.max(rel_ok)) if rel_ok.size else float("nan"),
        "median_rel_error_lambda_max_power": float(np.nanmedian([r["rel_error_max_power"] for r in valid]))
        if valid else float("nan"),
        "sign_error_fraction": (sum(signs) / len(valid)) if valid else float("nan"),
        "sign_error_lambda_min_fraction": (sum(r["sign_error_min"] for r in valid) / len(valid)) if valid else float("nan"),
        "sign_error_lambda_max_fraction": (sum(r["sign_error_max"] for r in valid) / len(valid)) if valid else float("nan"),
        "median_underestimate_ratio": float(np.median(ratios)) if ratios.size else float("nan"),
        "max_underestimate_ratio": float(np.max(ratios)) if ratios.size else float("nan"),
        "max_lanczos_abs_error": float(max((max(abs(r["lambda_min_lanczos"] - r["lambda_min_exact"]),
                                                abs(r["lambda_max_lanczos"] - r["lambda_max_exact"])) for r in valid),
                                           default=float("nan"))),
        "negative_lambda_min_fraction": (sum(r["lambda_min_exact"] < -r["sign_tol"] for r in valid) / len(valid))
        if valid else float("nan"),
    }
    if len(valid) < cfg.min_valid_checkpoints:
        return "inconclusive", stats
    if stats["median_rel_error_lambda_min_power"] > cfg.rel_error_threshold or \
            stats["sign_error_fraction"] > cfg.sign_error_threshold:
        return "supported", stats
    return "not supported", stats


def run(config, out_dir) -> dict:
    if not jax.config.read("jax_enable_x64"):
        raise ValueError("hessian_tracker needs jax_enable_x64 for its float64 exact and Lanczos eigenvalues "
                         "(experiments.reproduce enables it); training itself runs in float32.")
    ds = data.load(config.dataset, "train", seed=config.seed, image_size=config.image_size)
    rows, spearman, training = [], [], []
    for i, (act, init) in enumerate(config.runs):
        seed = config.seed + i
        r, ls, coupling = train_and_track(config, act, init, ds.images, seed)
        rows += r
        training.append({"activation": act, "init": init, "seed": seed, "epoch_loss": ls, "block_coupling": coupling})
        spearman.append({"activation": act, "init": init,
                         "spearman_std_cond": _spearman([x["std"] for x in r], [x["cond"] for x in r]),
                         "checkpoints": len(r), "paper": PAPER_SPEARMAN.get((act, init), float("nan"))})
    v, stats = verdict(rows, config)
    headline = dict(stats)
    headline["max_block_coupling"] = max(t["block_coupling"] for t in training)
    for s in spearman:
        headline[f"spearman_{s['init']}_{s['activation']}"] = s["spearman_std_cond"]
    paper = {f"spearman_{init}_{act}": val for (act, init), val in PAPER_SPEARMAN.items()}
    paper["audit_underestimate_ratio_low"], paper["audit_underestimate_ratio_high"] = AUDIT_UNDERESTIMATE
    _figures(rows, out_dir)
    return {"verdict": v, "verdict_rule": verdict.__doc__.split("Rule: ")[1].replace("\n    ", " "),
            "headline": headline, "paper": paper, "rows": rows, "spearman": spearman, "training": training,
            "premises": {"block_diagonal_verified": bool(headline["max_block_coupling"] <= 1e-12),
                         "rule": "max relative off-block HVP response <= 1e-12 (curvature.block_coupling)"}}


def _figures(rows, out_dir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = []
    for r in rows:
        if (r["activation"], r["init"]) not in runs:
            runs.append((r["activation"], r["init"]))
    fig, axes = plt.subplots(1, len(runs), figsize=(3.6 * len(runs), 3.0), squeeze=False)
    for ax, (act, init) in zip(axes[0], runs):
        rs = [r for r in rows if r["activation"] == act and r["init"] == init]
        x = np.arange(len(rs))
        ax.plot(x, [r["lambda_min_exact"] for r in rs], "k-", lw=1.5, label="exact")
        ax.plot(x, [r["lambda_min_lanczos"] for r in rs], "c:", lw=2, label="Lanczos")
        ax.plot(x, [r["lambda_min_power"] for r in rs], "r--", marker=".", label="paper power (f32, 20)")
        ax.set_yscale("symlog", linthresh=1e-6)
        ax.set_title(f"{act}, {init} init", fontsize=8)
        ax.set_xlabel("checkpoint (epoch-major)", fontsize=7)
        ax.set_ylabel("lambda_min(hess_z1 L)", fontsize=7)
        ax.tick_params(labelsize=6)
    axes[0, 0].legend(fontsize=6)
    common.save_figure(fig, out_dir, "lambda_min_tracker")

    fig, ax = plt.subplots(figsize=(4.2, 3.0))
    valid = [r for r in rows if r["lanczos_valid"] and not r["dead_head"]]
    ratios = np.asarray([r["underestimate_ratio"] for r in valid], float)
    ratios = ratios[np.isfinite(ratios) & (ratios > 0)]
    if ratios.size:
        ax.hist(np.log10(ratios), bins=20, color="tab:red")
    ax.set_xlabel("log10 |lambda_min exact| / |lambda_min power|", fontsize=7)
    ax.set_ylabel("checkpoints", fontsize=7)
    ax.set_title("underestimate of |lambda_min| by the paper's tracker", fontsize=8)
    common.save_figure(fig, out_dir, "underestimate_ratio")


def _floats(d: dict) -> dict:
    """JSON round trip stores non-finite floats as "nan"/"inf"/"-inf" strings: turn them back."""
    return {k: (float(v) if isinstance(v, str) and v in ("nan", "inf", "-inf") else v) for k, v in d.items()}


def report(results, rel_dir) -> str:
    h = _floats(results["headline"])
    table = []
    results = {**results, "rows": [_floats(r) for r in results["rows"]],
               "spearman": [_floats(r) for r in results["spearman"]]}
    for (act, init) in dict.fromkeys((r["activation"], r["init"]) for r in results["rows"]):
        rs = [r for r in results["rows"] if r["activation"] == act and r["init"] == init]
        val = [r for r in rs if r["lanczos_valid"] and not r["dead_head"]]
        table.append({
            "head": act, "init": init, "checkpoints": len(rs), "valid": len(val),
            "lmin exact (median)": float(np.median([r["lambda_min_exact"] for r in rs])),
            "lmin power (median)": float(np.median([r["lambda_min_power"] for r in rs])),
            "median rel err lmin": float(np.nanmedian([r["rel_error_min_power"] for r in val])) if val else "-",
            "median |exact|/|power|": float(np.median([r["underestimate_ratio"] for r in val])) if val else "-",
            "sign errors (min/max)": f"{sum(r['sign_error_min'] for r in val)}/{sum(r['sign_error_max'] for r in val)}",
            "max Lanczos true resid": float(max(max(r["lanczos_true_residual_min"], r["lanczos_true_residual_max"])
                                                for r in rs)),
        })
    text = [
        f"{h['valid_checkpoints']} of {h['checkpoints']} checkpoints valid (Lanczos converged with true residuals, "
        f"head not dead; Lanczos vs exact max abs error {h['max_lanczos_abs_error']:.3g}; Hessian block-diagonal to "
        f"{h['max_block_coupling']:.2g}). The paper's 20-step float32 power iteration: median relative error of "
        f"lambda_min {h['median_rel_error_lambda_min_power']:.3g} (max {h['max_rel_error_lambda_min_power']:.3g}), "
        f"median |lambda_min exact| / |lambda_min power| = {h['median_underestimate_ratio']:.3g} (max "
        f"{h['max_underestimate_ratio']:.3g}; the audit at paper scale: 170-195x), wrong sign of lambda_min or "
        f"lambda_max in a fraction {h['sign_error_fraction']:.3g} of checkpoints. Exact lambda_min < 0 at a "
        f"fraction {h['negative_lambda_min_fraction']:.3g} of valid checkpoints.",
        "",
        common.markdown_table(table),
        "",
        "Spearman(std of L2-normalised projector outputs, covariance condition number) over the checkpoints of each "
        "run (`pseudo` = the paper's 'collapsed' init, projector x 0.1):",
        "",
        common.markdown_table(results["spearman"]),
        "",
        f"![lambda_min along training]({rel_dir}/lambda_min_tracker.png)",
        f"![underestimate ratio]({rel_dir}/underestimate_ratio.png)",
    ]
    return "\n".join(text)
