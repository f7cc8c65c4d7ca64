"""Sec. 5 on a real text foundation model: does a trained SSL head on MiniLM degenerate
along augmentation directions?

Backbone ``f``: all-MiniLM-L6-v2 in pure JAX (:mod:`ssl_geometry.text`), sentence
embeddings ``z`` (mean-pooled, L2-normalised, d = 384). Head ``h``: a smooth (GELU) MLP
trained with SimCSE's InfoNCE on two views of each sentence (backbone dropout noise plus
token augmentations), (a) with the backbone frozen, (b) fine-tuned jointly for a few steps
at a small learning rate. Data: sentences of Python's own documentation
(:func:`ssl_geometry.text.python_docs_sentences`), disjoint train / evaluation draws.

Measured on the evaluation sentences, for the untrained head (control), the frozen-trained
and the fine-tuned head:

* effective rank of ``z`` and ``u = h(z)`` by both conventions
  (:func:`ssl_geometry.metrics.effective_rank`: ``rankme`` and ``squared``);
* the pullback-metric spectrum ``eig(J_h(z_i)^T J_h(z_i))`` averaged over sentences
  (:func:`ssl_geometry.geometry.pullback_metric`);
* metric degeneracy along augmentation directions: with ``v = z(view) - z(clean)`` (views
  drawn as in training), ``g_aug,i = sqrt(mean_v |J_h v|^2 / |v|^2)``
  (:func:`ssl_geometry.metrics.metric_degeneracy`), against the exact isotropic
  random-direction value in the tangent space of the unit sphere (``z`` is normalised),
  ``g_rand,i = sqrt(tr(P_i G_i P_i) / (d - 1))``, ``P_i = I - z_i z_i^T``, and the
  per-sentence log-ratio ``l_i = log(g_aug,i / g_rand,i)``; the degeneracy ratio is
  ``D = exp(mean_i l_i)`` with a bootstrap 95% interval. Directions between different
  sentences are reported for context;
* the effective Hessian of the objective with respect to the view-1 representations of a
  small batch, dense in float64 (:func:`ssl_geometry.geometry.effective_hessian` and
  :func:`ssl_geometry.geometry.premises`): extreme eigenvalues of ``H_eff``, ``G``, ``M``,
  ``H_L`` and the premise ``H_L`` PSD.
"""
from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from experiments import common
from ssl_geometry import geometry, heads, losses, metrics, text
from ssl_geometry.models import as_function

NAME = "minilm_geometry"
TITLE = "Foundation model: MiniLM sentence encoder with a trained SSL head (Sec. 5 on text)"
CLAIM = ("A trained projection head's pullback metric degenerates along augmentation directions "
         "(|J_h v| small for v along view differences) more than along random directions (Sec. 5).")

VERDICT_RULE = (
    "Frozen-backbone head, D = exp(mean_i log(g_aug,i / g_rand,i)) over evaluation sentences. "
    "'premise violated' if the frozen head's training loss did not decrease (mean of the last "
    "10% of steps >= mean of the first 10%); otherwise 'supported' if the bootstrap 95% upper "
    "bound of D is < 1 and D is below the untrained head's D (training deepened the degeneracy); "
    "'not supported' if the 95% lower bound of D is >= 1; 'inconclusive' otherwise.")


def _log(msg: str) -> None:
    """Progress line on stderr (the runs take minutes on CPU)."""
    import sys

    print(f"[{NAME}] {msg}", file=sys.stderr, flush=True)


def decide(h: dict) -> str:
    """The verdict from the headline numbers (:data:`VERDICT_RULE`)."""
    if not h["frozen_loss_last"] < h["frozen_loss_first"]:
        return "premise violated"
    if h["D_frozen_ci_high"] < 1.0 and h["D_frozen"] < h["D_init"]:
        return "supported"
    if h["D_frozen_ci_low"] >= 1.0:
        return "not supported"
    return "inconclusive"


# ----------------------------------------------------------------------------- views


def _tok_slice(tokens, idx):
    return text.Tokens(tokens.input_ids[idx], tokens.attention_mask[idx])


def _view_fn(model, augment):
    """jit: (variables, tokens, key) -> z of one training-style view (token aug + dropout)."""

    @jax.jit
    def view(variables, tokens, key):
        ka, kd = jax.random.split(key)
        t = text.augment_tokens(ka, tokens, **augment)
        return model.apply(variables, t, train=True, rng=kd)[0]

    return view


def _views(view, variables, tokens, keys, batch):
    """Stack of views ``(len(keys), n, d)``; chunks of ``batch`` sentences (padded to one shape)."""
    ids, mask = np.asarray(tokens.input_ids), np.asarray(tokens.attention_mask)
    n, L = ids.shape
    out = []
    for key in keys:
        rows = []
        for i in range(0, n, batch):
            ci, cm = ids[i:i + batch], mask[i:i + batch]
            short = batch - ci.shape[0]
            if short:
                ci = np.concatenate([ci, np.tile(ci[:1], (short, 1))])
                cm = np.concatenate([cm, np.tile(cm[:1], (short, 1))])
            rows.append(view(variables, text.Tokens(jnp.asarray(ci), jnp.asarray(cm)),
                             jax.random.fold_in(key, i))[: batch - short])
        out.append(jnp.concatenate(rows))
    return jnp.stack(out)


# ----------------------------------------------------------------------------- training


def _loss_fn(cfg):
    return _named_loss(cfg.loss, float(cfg.temperature))


@functools.lru_cache(maxsize=None)
def _named_loss(name, temperature):
    """The two-view loss ``(u1, u2) -> scalar`` (one object per setting, so jit caches hit)."""
    fn = losses.get(name)
    if name in ("info_nce", "simclr", "nt_xent", "moco_v3"):
        fn = functools.partial(fn, temperature=temperature)
    return fn


def train_frozen(head, head_vars, bank, cfg, key):
    """Adam on the head only; each step pairs two distinct bank views of each batch sentence.

    ``bank``: ``(V, n, d)`` backbone views. Returns ``(head_vars, losses)``.
    """
    loss_fn = _loss_fn(cfg)
    opt = optax.adam(cfg.frozen_lr)
    V, n, _ = bank.shape

    def objective(params, state, za, zb):
        u, new_state = head.apply({**state, "params": params}, jnp.concatenate([za, zb]), train=True)
        m = za.shape[0]
        return loss_fn(u[:m], u[m:]), new_state

    @jax.jit
    def step(params, state, opt_state, bank, key):
        ki, kv = jax.random.split(key)
        idx = jax.random.choice(ki, n, (cfg.frozen_batch,), replace=False)
        a = jax.random.randint(kv, (cfg.frozen_batch,), 0, V)
        b = (a + jax.random.randint(jax.random.fold_in(kv, 1), (cfg.frozen_batch,), 1, V)) % V  # b != a
        za, zb = bank[a, idx], bank[b, idx]
        (loss, new_state), g = jax.value_and_grad(objective, has_aux=True)(params, state, za, zb)
        upd, opt_state = opt.update(g, opt_state, params)
        return optax.apply_updates(params, upd), new_state, opt_state, loss

    params = head_vars["params"]
    state = {k: v for k, v in head_vars.items() if k != "params"}
    opt_state = opt.init(params)
    out = []
    for s in range(cfg.frozen_steps):
        params, new_state, opt_state, loss = step(params, state, opt_state, bank, jax.random.fold_in(key, s))
        state = {**state, **new_state}
        out.append(float(loss))
    if not np.all(np.isfinite(out)):
        raise FloatingPointError(f"frozen-head training produced a non-finite loss at step {int(np.argmin(np.isfinite(out)))}.")
    return {**state, "params": params}, np.asarray(out)


def train_finetune(model, bb_vars, head, head_vars, tokens, cfg, key):
    """Joint Adam (head lr, small backbone lr) with live dropout + token-augmented views."""
    opt = optax.multi_transform({"head": optax.adam(cfg.finetune_lr_head),
                                 "backbone": optax.adam(cfg.finetune_lr_backbone)},
                                {"head": "head", "backbone": "backbone"})
    rng = np.random.default_rng(cfg.seed + 1)
    n = tokens.input_ids.shape[0]
    idx = np.stack([np.sort(rng.choice(n, cfg.finetune_batch, replace=False)) for _ in range(cfg.finetune_steps)])
    per_step = text.Tokens(jnp.asarray(np.asarray(tokens.input_ids)[idx]), jnp.asarray(np.asarray(tokens.attention_mask)[idx]))
    keys = jnp.stack([jax.random.fold_in(key, s) for s in range(cfg.finetune_steps)])
    res = text.fit_two_view(model, head, _loss_fn(cfg), opt, bb_vars, head_vars, tokens=per_step, keys=keys,
                            finetune=True, augment=dict(cfg.augment))
    return res.backbone, res.head, res.losses


# ----------------------------------------------------------------------------- measurements


def _bootstrap_mean_ci(x, n_boot, seed):
    rng = np.random.default_rng(seed)
    means = np.mean(x[rng.integers(0, len(x), (n_boot, len(x)))], axis=1)
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


@functools.partial(jax.jit, static_argnames=("head", "n_random", "n_between"))
def _measure_core(head, hv, z, views, key, *, n_random, n_between):
    """Jitted float64 core of :func:`measure` (arrays only; see there)."""
    hfn = as_function(head, hv)
    n, d = z.shape
    u = hfn(z)
    eranks = {f"erank_{m}_{nm}": metrics.effective_rank(a, m) for m in metrics.EFFECTIVE_RANK_METHODS
              for nm, a in (("z", z), ("u", u))}
    G = geometry.pullback_metric(hfn, z).euclidean  # (n, d, d), G_i = J_i^T J_i
    eig = jnp.linalg.eigvalsh(G)[:, ::-1]  # descending
    # Exact isotropic tangent-space baseline: E|Jv|^2/|v|^2 = tr(P G P)/(d-1), P = I - z z^T.
    zn = z / jnp.linalg.norm(z, axis=1, keepdims=True)
    P = jnp.eye(d, dtype=z.dtype) - zn[:, :, None] * zn[:, None, :]
    g_rand = jnp.sqrt(jnp.einsum("nab,nbc,nca->n", P, G, P) / (d - 1))
    deg = jax.vmap(jax.vmap(lambda zi, vi: metrics.metric_degeneracy(hfn, zi, vi), in_axes=(None, 0)))
    V_aug = jnp.swapaxes(views - z[None], 0, 1)  # (n, V, d): v = z(view) - z(clean)
    gains_aug = deg(z, V_aug)  # |J v| / |v| by jvp
    vgv = jnp.einsum("nva,nab,nvb->nv", V_aug, G, V_aug) / jnp.sum(V_aug ** 2, axis=-1)
    k1, k2 = jax.random.split(key)
    R = jax.random.normal(k1, (n, n_random, d), z.dtype)
    R = R - jnp.einsum("nvd,nd->nv", R, zn)[..., None] * zn[:, None]  # tangent to the sphere
    others = jax.random.randint(k2, (n, n_between), 1, n)
    Vb = z[(jnp.arange(n)[:, None] + others) % n] - z[:, None]
    return {
        **eranks, "eig": eig, "g_rand": g_rand, "gains_aug": gains_aug, "vgv": vgv,
        "aug_norms": jnp.linalg.norm(V_aug, axis=-1),
        "g_rand_sampled": jnp.sqrt(jnp.mean(deg(z, R) ** 2, axis=1)),
        "g_between": jnp.sqrt(jnp.mean(deg(z, Vb) ** 2, axis=1)),
    }


def measure(head, head_vars, z, views, cfg, key):
    """Geometry of one head at the evaluation embeddings ``z`` (n, d), views ``(V, n, d)``.

    Float64 throughout (head parameters and embeddings are cast). See the module
    docstring for the quantities.
    """
    with jax.enable_x64(True):
        hv = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64), head_vars)
        z = jnp.asarray(z, jnp.float64)
        views = jnp.asarray(views, jnp.float64)
        r = jax.tree_util.tree_map(np.asarray, _measure_core(head, hv, z, views, key, n_random=4 * cfg.n_views,
                                                             n_between=cfg.n_between))
    d = z.shape[1]
    if np.min(r["aug_norms"]) == 0.0:
        raise ValueError("an augmented view equals its clean embedding (zero direction); "
                         "check the augmentation / dropout settings.")
    eig, g_rand = r["eig"], r["g_rand"]
    spec = eig.mean(axis=0)
    g_aug = np.sqrt(np.mean(r["gains_aug"] ** 2, axis=1))
    logr = np.log(g_aug / g_rand)
    lo, hi = _bootstrap_mean_ci(logr, cfg.bootstrap, cfg.seed)
    out = {k: float(v) for k, v in r.items() if k.startswith("erank_")}
    out.update({
        "G_spectrum_mean": spec, "G_lambda_max": float(spec[0]), "G_trace_per_dim": float(spec.sum() / d),
        "G_participation_ratio": float(spec.sum() ** 2 / np.sum(spec ** 2)),
        "G_frac_below_1e-3_max": float(np.mean(eig < 1e-3 * eig[:, :1])),
        "jvp_vs_G_max_rel_err": float(np.max(np.abs(r["gains_aug"] ** 2 - r["vgv"]) / r["vgv"])),
        "D": float(np.exp(np.mean(logr))), "D_ci": (float(np.exp(lo)), float(np.exp(hi))),
        "frac_sentences_aug_below_random": float(np.mean(logr < 0)),
        "gain_aug_mean": float(np.mean(g_aug)), "gain_random_exact_mean": float(np.mean(g_rand)),
        "gain_random_sampled_mean": float(np.mean(r["g_rand_sampled"])),
        "gain_between_mean": float(np.mean(r["g_between"])),
        "D_between": float(np.exp(np.mean(np.log(r["g_between"] / g_rand)))),
        "D_aug_vs_between": float(np.exp(np.mean(np.log(g_aug / r["g_between"])))),
        "aug_direction_norm_mean": float(np.mean(r["aug_norms"])),
        "log_ratios": logr,
    })
    return out


@functools.partial(jax.jit, static_argnames=("head", "loss", "per_sample"))
def _heff_core(head, loss, hv, z1, z2, *, per_sample):
    hfn = as_function(head, hv)
    u2 = jax.lax.stop_gradient(hfn(z2))
    return geometry.effective_hessian(hfn, lambda u: loss(u, u2), z1, per_sample=per_sample)


def effective_hessian_at_data(head, head_vars, z1, z2, cfg):
    """Dense float64 ``H_eff`` of ``L(h(z1), sg(h(z2)))`` w.r.t. the view-1 batch ``z1``."""
    with jax.enable_x64(True):
        hv = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64), head_vars)
        z1 = jnp.asarray(z1, jnp.float64)
        t0 = time.perf_counter()
        eh = _heff_core(head, _loss_fn(cfg), hv, z1, jnp.asarray(z2, jnp.float64),
                        per_sample=not cfg.head_batch_norm)
        eh = jax.tree_util.tree_map(np.asarray, eh)
        p = geometry.premises(eh)
        chain_err = float(np.max(np.abs(eh.full - eh.metric - eh.interaction)) / np.max(np.abs(eh.full)))
    return {
        "dim": int(z1.size),
        "H_eff_min": p.extremes["full"][0], "H_eff_max": p.extremes["full"][1],
        "G_min": p.extremes["metric"][0], "G_max": p.extremes["metric"][1],
        "M_min": p.extremes["interaction"][0], "M_max": p.extremes["interaction"][1],
        "H_L_min": p.extremes["loss_hessian"][0], "H_L_max": p.extremes["loss_hessian"][1],
        "H_L_psd": p.loss_hessian_psd, "H_L_rank": p.loss_hessian_rank,
        "residual_norm": p.residual_norm, "signs": p.signs,
        "chain_rule_rel_err": chain_err, "seconds": time.perf_counter() - t0,
    }


# ----------------------------------------------------------------------------- run


def run(config, out_dir) -> dict:
    cfg = config
    t_start = time.perf_counter()
    if cfg.view_bank < 2:
        raise ValueError(f"`view_bank` must be >= 2 (two distinct views per sentence); got {cfg.view_bank}.")
    for name in ("frozen_batch", "finetune_batch"):
        if not 2 <= cfg[name] <= cfg.n_train:
            raise ValueError(f"`{name}` must lie in [2, n_train={cfg.n_train}]; got {cfg[name]}.")
    if not 1 <= cfg.n_hessian <= cfg.n_eval or cfg.n_views < 2:
        raise ValueError("`n_hessian` must lie in [1, n_eval] and `n_views` must be >= 2 "
                         f"(H_eff uses views 0 and 1); got n_hessian={cfg.n_hessian}, n_views={cfg.n_views}.")
    key = jax.random.PRNGKey(cfg.seed)
    k_head, k_bank, k_train, k_ft, k_eval, k_meas = jax.random.split(key, 6)
    pm = text.load_minilm()
    sentences = text.python_docs_sentences(cfg.n_train + cfg.n_eval, seed=cfg.seed)
    train_s, eval_s = sentences[: cfg.n_train], sentences[cfg.n_train:]
    tok_train = text.tokenize(pm.tokenizer, train_s, max_length=cfg.max_length, pad_to=cfg.max_length)
    tok_eval = text.tokenize(pm.tokenizer, eval_s, max_length=cfg.max_length, pad_to=cfg.max_length)
    d = pm.config.hidden
    head = heads.mlp(d, (cfg.head_hidden,), cfg.head_out, activation=cfg.head_activation,
                     batch_norm=cfg.head_batch_norm)
    head0 = head.init(k_head)
    augment = dict(cfg.augment)
    view = _view_fn(pm.model, augment)
    timings = {}

    # Frozen backbone: bank of views, train the head.
    t0 = time.perf_counter()
    bank = _views(view, pm.variables, tok_train, jax.random.split(k_bank, cfg.view_bank), cfg.embed_batch)
    timings["view_bank_s"] = time.perf_counter() - t0
    _log(f"view bank {tuple(bank.shape)} in {timings['view_bank_s']:.1f} s")
    t0 = time.perf_counter()
    head_frozen, loss_frozen = train_frozen(head, head0, bank, cfg, k_train)
    timings["frozen_training_s"] = time.perf_counter() - t0
    _log(f"frozen head: {cfg.frozen_steps} steps in {timings['frozen_training_s']:.1f} s, "
         f"loss {loss_frozen[0]:.4g} -> {loss_frozen[-1]:.4g}")

    # Evaluation embeddings and views (pretrained backbone).
    z_eval = text.embed(pm.model, pm.variables, tok_eval, batch_size=cfg.embed_batch)
    eval_keys = jax.random.split(k_eval, cfg.n_views)
    views_eval = _views(view, pm.variables, tok_eval, eval_keys, cfg.embed_batch)
    t0 = time.perf_counter()
    settings = {"init": measure(head, head0, z_eval, views_eval, cfg, k_meas),
                "frozen": measure(head, head_frozen, z_eval, views_eval, cfg, k_meas)}
    nh = cfg.n_hessian
    hess = {"init": effective_hessian_at_data(head, head0, views_eval[0, :nh], views_eval[1, :nh], cfg),
            "frozen": effective_hessian_at_data(head, head_frozen, views_eval[0, :nh], views_eval[1, :nh], cfg)}
    timings["measure_s"] = time.perf_counter() - t0
    _log(f"measured init and frozen heads in {timings['measure_s']:.1f} s")

    # Fine-tuned backbone + head (from the same initial head).
    loss_ft = np.zeros((0,))
    if cfg.finetune_steps > 0:
        t0 = time.perf_counter()
        bb_ft, head_ft, loss_ft = train_finetune(pm.model, pm.variables, head, head0, tok_train, cfg, k_ft)
        timings["finetune_s"] = time.perf_counter() - t0
        _log(f"fine-tuned {cfg.finetune_steps} steps in {timings['finetune_s']:.1f} s")
        z_ft = text.embed(pm.model, bb_ft, tok_eval, batch_size=cfg.embed_batch)
        views_ft = _views(view, bb_ft, tok_eval, eval_keys, cfg.embed_batch)
        settings["finetuned"] = measure(head, head_ft, z_ft, views_ft, cfg, k_meas)
        hess["finetuned"] = effective_hessian_at_data(head, head_ft, views_ft[0, :nh], views_ft[1, :nh], cfg)
        leaves0 = jax.tree_util.tree_leaves(pm.variables["params"])
        leaves1 = jax.tree_util.tree_leaves(bb_ft["params"])
        settings["finetuned"]["backbone_relative_change"] = float(
            np.sqrt(sum(float(jnp.sum((a - b) ** 2)) for a, b in zip(leaves0, leaves1)))
            / np.sqrt(sum(float(jnp.sum(a ** 2)) for a in leaves0)))

    w = max(1, len(loss_frozen) // 10)
    fr = settings["frozen"]
    headline = {
        "D_frozen": fr["D"], "D_frozen_ci_low": fr["D_ci"][0], "D_frozen_ci_high": fr["D_ci"][1],
        "D_init": settings["init"]["D"],
        "D_finetuned": settings["finetuned"]["D"] if "finetuned" in settings else float("nan"),
        "frozen_loss_first": float(np.mean(loss_frozen[:w])), "frozen_loss_last": float(np.mean(loss_frozen[-w:])),
        "D_between_frozen": fr["D_between"], "D_aug_vs_between_frozen": fr["D_aug_vs_between"],
        "D_aug_vs_between_init": settings["init"]["D_aug_vs_between"],
        "erank_rankme_z": fr["erank_rankme_z"], "erank_rankme_u_frozen": fr["erank_rankme_u"],
        "erank_squared_z": fr["erank_squared_z"], "erank_squared_u_frozen": fr["erank_squared_u"],
        "H_eff_min_frozen": hess["frozen"]["H_eff_min"], "H_eff_max_frozen": hess["frozen"]["H_eff_max"],
    }
    verdict = decide(headline)
    results = {
        "verdict": verdict, "verdict_rule": VERDICT_RULE, "headline": headline,
        "paper": {},  # the paper's Sec. 5 numbers are on images (rotation probes); none for text
        "corpus": {"source": "pydoc_data.topics (Python standard library documentation)",
                   "n_sentences": len(sentences), "fingerprint": text.corpus_fingerprint(sentences),
                   "first_eval_sentence": eval_s[0]},
        "model": {"name": pm.model.name, "path": str(pm.path), "head": head.name},
        "settings": settings, "effective_hessian": hess,
        "premises": {name: {"H_L_psd": h["H_L_psd"], "residual_norm": h["residual_norm"],
                            "loss_decreased": bool(headline["frozen_loss_last"] < headline["frozen_loss_first"])
                            if name != "init" else None} for name, h in hess.items()},
        "loss_curves": {"frozen": loss_frozen, "finetuned": loss_ft},
        "timings": timings, "wall_time_s": time.perf_counter() - t_start,
    }
    _figures(results, out_dir)
    common.write_results(out_dir, results, config)
    return results


def _figures(results, out_dir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(15, 4))
    for name, s in results["settings"].items():
        spec = np.maximum(np.asarray(s["G_spectrum_mean"]), 1e-30)
        ax[0].semilogy(spec, label=name)
        ax[1].hist(np.asarray(s["log_ratios"]), bins=20, alpha=0.5, label=f"{name} (D={s['D']:.3g})")
    ax[0].set(title="pullback metric J^T J: mean eigenvalues", xlabel="index", ylabel="eigenvalue")
    ax[0].legend()
    ax[1].axvline(0.0, color="k", lw=0.8)
    ax[1].set(title="log(|J v_aug|/|v| / random), per sentence", xlabel="log ratio", ylabel="sentences")
    ax[1].legend()
    for name, c in results["loss_curves"].items():
        if len(c):
            ax[2].plot(np.asarray(c), label=name)
    ax[2].set(title="two-view InfoNCE training loss", xlabel="step", ylabel="loss")
    ax[2].legend()
    common.save_figure(fig, out_dir, "minilm_geometry")


def report(results, out_dir) -> str:
    h = results["headline"]
    rows = []
    for name, s in results["settings"].items():
        he = results["effective_hessian"][name]
        rows.append({"head": name, "D (aug/random)": s["D"], "D 95% CI": f"[{s['D_ci'][0]:.3g}, {s['D_ci'][1]:.3g}]",
                     "D between sentences": s["D_between"], "aug / between": s["D_aug_vs_between"], "erank rankme u": s["erank_rankme_u"],
                     "erank squared u": s["erank_squared_u"], "G participation ratio": s["G_participation_ratio"],
                     "lambda_min H_eff": he["H_eff_min"], "lambda_max H_eff": he["H_eff_max"],
                     "H_L PSD": he["H_L_psd"], "|rho|": he["residual_norm"]})
    corpus = results.get("corpus", {})
    lines = [
        f"## {TITLE}",
        "",
        f"**Claim.** {CLAIM}",
        "",
        f"**Verdict: {results['verdict']}.** Rule: {results['verdict_rule']}",
        "",
        f"Backbone: {results.get('model', {}).get('name', '?')}; head: {results.get('model', {}).get('head', '?')}. "
        f"Corpus: {corpus.get('source', '?')}, {corpus.get('n_sentences', '?')} sentences "
        f"(fingerprint {corpus.get('fingerprint', '?')}). Embedding z: effective rank "
        f"{h['erank_rankme_z']:.4g} (RankMe) / {h['erank_squared_z']:.4g} (squared singular values).",
        "",
        common.markdown_table(rows),
        "",
        f"Frozen-head loss: {h['frozen_loss_first']:.4g} (first 10% of steps) -> {h['frozen_loss_last']:.4g} (last 10%). "
        "D < 1: the head shrinks augmentation directions more than random tangent directions of the "
        "unit sphere; 'D between sentences' is the same ratio for directions to other sentences, and "
        "'aug / between' compares augmentation directions with those content directions. "
        "H_eff is taken w.r.t. the view-1 batch with view 2 fixed; its negative eigenvalues come from "
        "the interaction term M and the indefinite H_L of InfoNCE on normalised outputs (premise of "
        "Thm 4.1 reported in the H_L PSD column).",
        "",
        f"![MiniLM geometry]({out_dir}/minilm_geometry.png)",
    ]
    return "\n".join(lines)
