"""Experiment 8: Sec. 5 on a real text foundation model -- does a trained SSL head on MiniLM degenerate
along augmentation directions?

Backbone ``f``: all-MiniLM-L6-v2 in pure JAX (:mod:`ssl_geometry.text`), sentence embeddings ``z``
(mean-pooled, L2-normalised, d = 384). Head ``h``: a smooth (GELU) MLP trained with SimCSE's InfoNCE
on two views of each sentence (backbone dropout noise plus token augmentations ``augment``) through
:func:`ssl_geometry.fit`, (a) with the backbone frozen, (b) fine-tuned jointly for a
few steps at a small learning rate. Data: sentences of Python's own documentation, disjoint train /
evaluation draws.

Measured on the evaluation sentences, for the untrained head (the same head at initialisation, same
z), the frozen-trained and the fine-tuned head (:mod:`.core`): effective ranks (``rankme`` and
``squared``); the pullback-metric spectrum ``eig(J_h^T J_h)``; the metric degeneracy ``g_aug,i =
sqrt(mean_v |J_h v|^2 / |v|^2)`` along ``v = z(view) - z(clean)`` of the training views, and
``g_neg,i`` the same along the negative control's views (``analysis.negative``: a token
augmentation the head was not trained with, eval mode), against the registry's controls -- the
exact isotropic tangent value ``sqrt(tr(P G P) / (d - 1))`` (``random``: z lives on the unit
sphere, so isotropic means isotropic in its tangent space), directions to other sentences
(``between``) and Gaussian directions with the embeddings' covariance (``data``) -- as ``D_c`` with
bootstrap 95% intervals (:func:`experiments.rules.degeneracy_ratio`); the paper-way orbit
compression of each sentence's set of training views (:func:`experiments.rules.orbit_compression`);
and the dense float64 effective Hessian of a small batch with its premises (``H_L`` PSD?).

The claim ``sec5-metric-degeneracy`` is decided on the frozen-backbone head by
:func:`experiments.rules.decide_sec5`; the fine-tuned head is reported beside it.
"""

from __future__ import annotations

import sys
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from experiments import claims, configs, rules
from ssl_geometry import heads, text

from . import core as C
from . import dry_run as D
from .core import CONTROLS as CONTROLS
from .tables import figures as figures
from .tables import report as report

__all__ = ["NAME", "DRY_RUN", "TITLE", "CLAIM", "CLAIMS", "CONTROLS", "measure", "decide", "report", "figures"]

NAME = "minilm_geometry"
DRY_RUN = True  # honours config.dry_run (reduced inputs, a few steps per training phase, projections from two sizes)
TITLE = "Foundation model: MiniLM sentence encoder with a trained SSL head (Sec. 5 on text)"
#: The registry claims (experiments/claims/) this experiment decides.
CLAIMS = (rules.SEC5,)
CLAIM = (
    "A trained projection head's pullback metric degenerates along the augmentation directions it was trained "
    "to be invariant to (|J_h v| small for v along view differences) more than along other directions, and "
    "each sentence's views are closer together through the head than in z (Sec. 5)."
)
#: The name of the training views' augmentation (dropout noise + the ``augment`` token augmentations).
VIEWS = "views"


def _log(msg: str) -> None:
    print(f"[{NAME}] {msg}", file=sys.stderr, flush=True)


def _check(cfg) -> None:
    t, a, d = cfg.train, cfg.analysis, cfg.data
    if t.view_bank < 2:
        raise ValueError(f"`train.view_bank` must be >= 2 (two distinct views per sentence); got {t.view_bank}.")
    for name in ("frozen_batch", "finetune_batch"):
        if not 2 <= t[name] <= d.n_train:
            raise ValueError(f"`train.{name}` must lie in [2, data.n_train={d.n_train}]; got {t[name]}.")
    if not 1 <= a.n_hessian <= d.n_eval or a.n_views < 2:
        raise ValueError(
            "`analysis.n_hessian` must lie in [1, data.n_eval] and `analysis.n_views` must be >= 2 "
            f"(H_eff uses views 0 and 1); got n_hessian={a.n_hessian}, n_views={a.n_views}."
        )
    trained = {k: v for k, v in cfg.augment.items() if v != _NEUTRAL[k]}
    negative = {k: v for k, v in a.negative.items() if v != _NEUTRAL[k]}
    if not negative:
        raise ValueError(f"`analysis.negative` must set a token augmentation away from its neutral value {_NEUTRAL}.")
    if set(negative) & set(trained):
        raise ValueError(
            f"`analysis.negative` {negative} shares {sorted(set(negative) & set(trained))} with the "
            f"training views {trained}: a negative control must be an augmentation the head was not "
            "trained on."
        )


#: The neutral value of each token augmentation of :func:`ssl_geometry.text.augment_tokens` (skipped there).
_NEUTRAL = {"deletion": 0.0, "span": 0.0, "crop": 1.0, "masking": 0.0, "shuffle_window": 0.0}


#: Under ``dry_run``: the paper variant's models, token length and per-sentence analysis counts (``n_views``,
#: ``n_between``), a handful of sentences, 2 steps per training phase (frozen head, fine-tuning), every
#: measurement; then the projection (:mod:`.dry_run`). The batches and evaluation size are the paper variant's
#: smaller reduced sizes there (16 and 8 of 128 and 64; 8 of 256 sentences), so its compiled programs are shared;
#: 32 training sentences hold the larger frozen batch.
_DRY = {
    "data.n_train": 32,
    "data.n_eval": 8,
    "train.view_bank": 2,
    "train.frozen_steps": 2,
    "train.frozen_batch": 16,
    "train.finetune_steps": 2,
    "train.finetune_batch": 8,
    "train.fit_steps": 1,
    "train.embed_batch": 8,
    "analysis.n_hessian": 2,
}


def measure(config) -> dict:
    """Train the frozen and fine-tuned heads, then measure init / frozen / fine-tuned geometry (numbers only); under
    ``dry_run`` at the reduced sizes of :data:`_DRY`, then the projections of :mod:`.dry_run`."""
    full = config
    cfg = configs.apply_overrides(ml_collections.ConfigDict(config.to_dict()), _DRY) if config.dry_run else config
    _check(cfg)
    t_start = time.perf_counter()
    k_head, k_bank, k_train, k_ft, k_eval, k_meas = jax.random.split(jax.random.PRNGKey(cfg.seed), 6)
    pm = text.load_minilm()
    sentences = text.python_docs_sentences(cfg.data.n_train + cfg.data.n_eval, seed=cfg.seed)
    train_s, eval_s = sentences[: cfg.data.n_train], sentences[cfg.data.n_train :]
    tok = {
        k: text.tokenize(pm.tokenizer, s, max_length=cfg.data.max_length, pad_to=cfg.data.max_length)
        for k, s in (("train", train_s), ("eval", eval_s))
    }
    m = cfg.model
    head = heads.mlp(
        pm.config.hidden, (m.head_hidden,), m.head_out, activation=m.head_activation, batch_norm=m.head_batch_norm
    )
    head0 = head.init(k_head)
    view = C.view_fn(pm.model, dict(cfg.augment))
    eb, nh, timings = cfg.train.embed_batch, cfg.analysis.n_hessian, {}
    t0 = time.perf_counter()
    bank = C.views(view, pm.variables, tok["train"], jax.random.split(k_bank, cfg.train.view_bank), eb)
    head_frozen, loss_frozen = C.train_frozen(head, head0, bank, cfg, k_train)
    timings["frozen_s"] = time.perf_counter() - t0
    _log(f"frozen head: loss {loss_frozen[0]:.4g} -> {loss_frozen[-1]:.4g} in {timings['frozen_s']:.1f} s")
    z_eval = text.embed(pm.model, pm.variables, tok["eval"], batch_size=eb)
    eval_keys = jax.random.split(k_eval, cfg.analysis.n_views)
    neg_keys = [jax.random.fold_in(k, 1) for k in eval_keys]
    neg_view = C.negative_view_fn(pm.model, dict(cfg.analysis.negative))
    views_eval = C.views(view, pm.variables, tok["eval"], eval_keys, eb)
    neg_eval = C.views(neg_view, pm.variables, tok["eval"], neg_keys, eb)
    settings, hess = {}, {}
    for name, hv in (("init", head0), ("frozen", head_frozen)):
        settings[name] = C.head_geometry(head, hv, z_eval, views_eval, neg_eval, cfg, k_meas)
        hess[name] = C.effective_hessian_at_data(head, hv, views_eval[0, :nh], views_eval[1, :nh], cfg)
    loss_ft = np.zeros((0,))
    if cfg.train.finetune_steps > 0:
        bb_ft, head_ft, loss_ft = C.train_finetune(pm.model, pm.variables, head, head0, tok["train"], cfg, k_ft)
        z_ft = text.embed(pm.model, bb_ft, tok["eval"], batch_size=eb)
        views_ft = C.views(view, bb_ft, tok["eval"], eval_keys, eb)
        neg_ft = C.views(neg_view, bb_ft, tok["eval"], neg_keys, eb)
        settings["finetuned"] = C.head_geometry(head, head_ft, z_ft, views_ft, neg_ft, cfg, k_meas)
        hess["finetuned"] = C.effective_hessian_at_data(head, head_ft, views_ft[0, :nh], views_ft[1, :nh], cfg)
        l0, l1 = jax.tree_util.tree_leaves(pm.variables["params"]), jax.tree_util.tree_leaves(bb_ft["params"])
        settings["finetuned"]["backbone_relative_change"] = float(
            np.sqrt(sum(float(jnp.sum((a - b) ** 2)) for a, b in zip(l0, l1)))
            / np.sqrt(sum(float(jnp.sum(a**2)) for a in l0))
        )
    timings["total_s"] = time.perf_counter() - t_start
    dry = {}
    if config.dry_run:  # the full variant's training and analysis, each timed at two reduced sizes
        tok_all = text.tokenize(pm.tokenizer, sentences, max_length=cfg.data.max_length, pad_to=cfg.data.max_length)
        training = D.training_projection(pm, head, head0, bank, tok["train"], full, cfg, k_train)
        analysis = D.analysis_projection(
            pm, head, head0, view, neg_view, tok_all, full, cfg, k_meas, n_heads=2 + (full.train.finetune_steps > 0)
        )  # init, frozen[, fine-tuned]
        dry = {"dry_run": D.record(training, analysis, full)}
    return {
        **dry,
        "paper": {},  # the paper has no text experiment
        "corpus": {"n_sentences": len(sentences), "fingerprint": text.corpus_fingerprint(sentences)},
        "model": {"name": pm.model.name, "head": head.name},
        "settings": settings,
        "effective_hessian": hess,
        "loss_curves": {"frozen": loss_frozen.tolist(), "finetuned": np.asarray(loss_ft).tolist()},
        "negative": {k: float(v) for k, v in cfg.analysis.negative.items()},
        "timings": timings,
    }


def _sec5_inputs(m: dict, trained: str = "frozen") -> tuple[dict, dict, dict]:
    """``(augmentations, negative, orbits)`` of :func:`experiments.rules.decide_sec5` for the ``trained`` head;
    ``orbits["vs_untrained"]`` is the rule's ``orbits_vs_untrained``: the head's orbit compression over the head at
    initialisation on the same views (:func:`experiments.rules.orbit_gain_over_untrained`)."""
    tr, init = m["settings"][trained], m["settings"]["init"]
    augs = {VIEWS: {"trained": tr["views"], "untrained": init["views"]}}
    neg_name = "token_" + "+".join(sorted(k for k, v in m["negative"].items() if v != _NEUTRAL[k]))
    negative = {neg_name: {"trained": tr["negative"], "untrained": init["negative"]}}
    vs0 = rules.orbit_gain_over_untrained(tr["orbit_spreads"]["u"], init["orbit_spreads"]["u"])
    return augs, negative, {**tr["orbit_compression"], "vs_untrained": vs0}


def decide(m: dict, config) -> dict:
    """The Sec. 5 claim by :func:`experiments.rules.decide_sec5` on the frozen-backbone head."""
    easy_steps, easy_loss = config.analysis.easy_steps, config.analysis.easy_loss  # a label, not a threshold
    loss = np.asarray(m["loss_curves"]["frozen"])
    w = max(1, len(loss) // 10)
    first, last = float(np.mean(loss[:w])), float(np.mean(loss[-w:]))
    fr, init = m["settings"]["frozen"], m["settings"]["init"]
    augs, negative, orbits = _sec5_inputs(m)
    premises = {
        "head_loss_decreased": last < first,
        "backbone_not_collapsed": fr["erank_rankme_z"] >= claims.CLAIMS[rules.SEC5].thresholds["min_effective_rank"],
    }
    item = rules.decide_sec5(
        augs, orbits, negative=negative, premises=premises, orbits_vs_untrained=orbits["vs_untrained"]
    )
    item["deciding"].update(frozen_loss_first=first, frozen_loss_last=last, erank_rankme_z=fr["erank_rankme_z"])
    k = min(easy_steps, len(loss)) - 1
    solved_early = bool(loss[k] < easy_loss)
    if solved_early:
        item["reason"] += (
            f"; the frozen loss is {loss[k]:.2g} after {k + 1} steps: the two-view task is solved at "
            "once, so the run shows the geometry of a head that separates distinct sentences, not of "
            "one shaped by invariance pressure"
        )
    h = {
        "orbit_compression_frozen": fr["orbit_compression"]["S"],
        "orbit_compression_init": init["orbit_compression"]["S"],
        **{
            f"D_{which}_{s}_vs_{c}": m["settings"][s][which][c]["D"]
            for s in m["settings"]
            for which in ("views", "negative")
            for c in CONTROLS
        },
        "frozen_loss_first": first,
        "frozen_loss_last": last,
        "frozen_loss_at_easy_step": float(loss[k]),
        "task_solved_early": solved_early,
        "erank_rankme_z": fr["erank_rankme_z"],
        "erank_rankme_u_frozen": fr["erank_rankme_u"],
        "H_eff_min_frozen": m["effective_hessian"]["frozen"]["H_eff_min"],
    }
    if "finetuned" in m["settings"]:
        h["orbit_compression_finetuned"] = m["settings"]["finetuned"]["orbit_compression"]["S"]
    return {"claims": [item], "headline": h}
