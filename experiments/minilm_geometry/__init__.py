"""Experiment 8: Sec. 5 on a real text foundation model -- does a trained SSL head on MiniLM degenerate
along augmentation directions?

Backbone ``f``: all-MiniLM-L6-v2 in pure JAX (:mod:`ssl_geometry.text`), sentence embeddings ``z``
(mean-pooled, L2-normalised, d = 384). Head ``h``: a smooth (GELU) MLP trained with SimCSE's InfoNCE
on two views of each sentence (backbone dropout noise plus token augmentations) through
:func:`ssl_geometry.fit`, (a) with the backbone frozen, (b) fine-tuned jointly for a
few steps at a small learning rate. Data: sentences of Python's own documentation, disjoint train /
evaluation draws.

Measured on the evaluation sentences, for the untrained head (control), the frozen-trained and the
fine-tuned head (:mod:`.core`): effective ranks (``rankme`` and ``squared``); the pullback-metric
spectrum ``eig(J_h^T J_h)``; the metric degeneracy ``g_aug,i = sqrt(mean_v |J_h v|^2 / |v|^2)`` along
``v = z(view) - z(clean)`` against three controls -- the exact isotropic tangent value
``sqrt(tr(P G P) / (d - 1))`` (``random``), Gaussian directions with the embeddings' covariance
(``data``) and directions to other sentences (``between``) -- as ``D_c = exp(mean_i log(g_aug,i /
g_c,i))`` with bootstrap 95% intervals; and the dense float64 effective Hessian of a small batch
with its premises (``H_L`` PSD?). The deciding control is fixed in the config before the run.
"""
from __future__ import annotations

import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import ml_collections

from experiments import common, configs
from ssl_geometry import heads, text

from . import core as C
from .core import CONTROLS as CONTROLS
from .tables import figures as figures
from .tables import report as report

__all__ = ["NAME", "DRY_RUN", "TITLE", "CLAIM", "RULE", "CONTROLS", "measure", "decide", "report", "figures"]

NAME = "minilm_geometry"
DRY_RUN = True  # honours config.dry_run (reduced inputs, 2 steps per training phase, timing record)
TITLE = "Foundation model: MiniLM sentence encoder with a trained SSL head (Sec. 5 on text)"
#: The registry claims (experiments/claims.py) this experiment decides.
CLAIMS = ("sec5-metric-degeneracy",)
CLAIM = ("A trained projection head's pullback metric degenerates along the augmentation directions it was trained "
         "to be invariant to (|J_h v| small for v along view differences) more than along other directions (Sec. 5).")
RULE = ("premise violated if the frozen head's training loss did not decrease (mean of the last 10% of steps >= mean "
        "of the first 10%); otherwise, with D = exp(mean_i log(g_aug,i / g_c,i)) over evaluation sentences against the "
        "control c = '{verdict[control]}' fixed before the run (the views are the training augmentations): supported "
        "if the bootstrap 95% upper bound of the frozen head's D is < 1 and D is below the untrained head's; not "
        "supported if its 95% lower bound is >= 1; inconclusive otherwise")


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
        raise ValueError("`analysis.n_hessian` must lie in [1, data.n_eval] and `analysis.n_views` must be >= 2 "
                         f"(H_eff uses views 0 and 1); got n_hessian={a.n_hessian}, n_views={a.n_views}.")
    if cfg.verdict.control not in CONTROLS:
        raise ValueError(f"`verdict.control` must be one of {CONTROLS}; got {cfg.verdict.control!r}.")


#: Under ``dry_run``: the paper variant's models and token length, a handful of sentences, 2 steps per
#: training phase (frozen head, fine-tuning), every measurement.
_DRY = {"data.n_train": 16, "data.n_eval": 8, "train.view_bank": 2, "train.frozen_steps": 2, "train.frozen_batch": 4,
        "train.finetune_steps": 2, "train.finetune_batch": 4, "train.fit_steps": 1, "train.embed_batch": 8,
        "analysis.n_views": 2, "analysis.n_between": 2, "analysis.n_hessian": 2, "analysis.bootstrap": 50}


def measure(config) -> dict:
    """Train the frozen and fine-tuned heads, then measure init / frozen / fine-tuned geometry (numbers only)."""
    full = config
    cfg = configs.apply_overrides(ml_collections.ConfigDict(config.to_dict()), _DRY) if config.dry_run else config
    _check(cfg)
    C._STEP_TIMES.clear()
    t_start = time.perf_counter()
    k_head, k_bank, k_train, k_ft, k_eval, k_meas = jax.random.split(jax.random.PRNGKey(cfg.seed), 6)
    pm = text.load_minilm()
    sentences = text.python_docs_sentences(cfg.data.n_train + cfg.data.n_eval, seed=cfg.seed)
    train_s, eval_s = sentences[: cfg.data.n_train], sentences[cfg.data.n_train:]
    tok = {k: text.tokenize(pm.tokenizer, s, max_length=cfg.data.max_length, pad_to=cfg.data.max_length)
           for k, s in (("train", train_s), ("eval", eval_s))}
    m = cfg.model
    head = heads.mlp(pm.config.hidden, (m.head_hidden,), m.head_out, activation=m.head_activation,
                     batch_norm=m.head_batch_norm)
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
    views_eval = C.views(view, pm.variables, tok["eval"], eval_keys, eb)
    settings, hess = {}, {}
    for name, hv in (("init", head0), ("frozen", head_frozen)):
        settings[name] = C.head_geometry(head, hv, z_eval, views_eval, cfg, k_meas)
        hess[name] = C.effective_hessian_at_data(head, hv, views_eval[0, :nh], views_eval[1, :nh], cfg)
    loss_ft = np.zeros((0,))
    if cfg.train.finetune_steps > 0:
        bb_ft, head_ft, loss_ft = C.train_finetune(pm.model, pm.variables, head, head0, tok["train"], cfg, k_ft)
        z_ft = text.embed(pm.model, bb_ft, tok["eval"], batch_size=eb)
        views_ft = C.views(view, bb_ft, tok["eval"], eval_keys, eb)
        settings["finetuned"] = C.head_geometry(head, head_ft, z_ft, views_ft, cfg, k_meas)
        hess["finetuned"] = C.effective_hessian_at_data(head, head_ft, views_ft[0, :nh], views_ft[1, :nh], cfg)
        l0, l1 = jax.tree_util.tree_leaves(pm.variables["params"]), jax.tree_util.tree_leaves(bb_ft["params"])
        settings["finetuned"]["backbone_relative_change"] = float(
            np.sqrt(sum(float(jnp.sum((a - b) ** 2)) for a, b in zip(l0, l1))) / np.sqrt(sum(float(jnp.sum(a ** 2)) for a in l0)))
    timings["total_s"] = time.perf_counter() - t_start
    dry = {}
    if config.dry_run:
        steps = [full.train.frozen_steps, full.train.finetune_steps]
        train_s = sum(t * n for t, n in zip(C._STEP_TIMES, steps))
        rest = timings["total_s"] - sum(C._STEP_TIMES[i] * cfg.train[k] for i, k in enumerate(("frozen_steps", "finetune_steps"))
                                        if i < len(C._STEP_TIMES))
        dry = {"dry_run": common.dry_run_record(
            C._STEP_TIMES[0], projected_wall_time_s=train_s + rest * full.data.n_eval / cfg.data.n_eval,
            projection="measured step time x full steps per phase + the rest x n_eval ratio")}
    return {**dry, "corpus": {"n_sentences": len(sentences), "fingerprint": text.corpus_fingerprint(sentences)},
            "model": {"name": pm.model.name, "head": head.name}, "settings": settings, "effective_hessian": hess,
            "loss_curves": {"frozen": loss_frozen.tolist(), "finetuned": np.asarray(loss_ft).tolist()},
            "timings": timings}


def decide(m: dict, config) -> dict:
    cfg = config
    c = cfg.verdict.control
    if c not in CONTROLS:
        raise ValueError(f"`verdict.control` must be one of {CONTROLS}; got {c!r}.")
    loss = np.asarray(m["loss_curves"]["frozen"])
    w = max(1, len(loss) // 10)
    first, last = float(np.mean(loss[:w])), float(np.mean(loss[-w:]))
    fr, init = m["settings"]["frozen"], m["settings"]["init"]
    lo, hi = fr[f"D_vs_{c}_ci"]
    k = min(cfg.verdict.easy_steps, len(loss)) - 1
    h = {"D_frozen": fr[f"D_vs_{c}"], "D_frozen_ci_low": lo, "D_frozen_ci_high": hi, "D_init": init[f"D_vs_{c}"],
         **{f"D_frozen_vs_{x}": fr[f"D_vs_{x}"] for x in CONTROLS}, **{f"D_init_vs_{x}": init[f"D_vs_{x}"] for x in CONTROLS},
         "D_finetuned": m["settings"]["finetuned"][f"D_vs_{c}"] if "finetuned" in m["settings"] else float("nan"),
         "frozen_loss_first": first, "frozen_loss_last": last, "frozen_loss_at_easy_step": float(loss[k]),
         "task_solved_early": bool(loss[k] < cfg.verdict.easy_loss),
         "erank_rankme_z": fr["erank_rankme_z"], "erank_rankme_u_frozen": fr["erank_rankme_u"],
         "H_eff_min_frozen": m["effective_hessian"]["frozen"]["H_eff_min"]}
    if not last < first:
        verdict = "premise violated"
    elif hi < 1.0 and h["D_frozen"] < h["D_init"]:
        verdict = "supported"
    elif lo >= 1.0:
        verdict = "not supported"
    else:
        verdict = "inconclusive"
    reason = f"D vs {c} = {h['D_frozen']:.3g} [{lo:.3g}, {hi:.3g}], untrained {h['D_init']:.3g}"
    if h["task_solved_early"]:
        reason += (f"; the frozen loss is {h['frozen_loss_at_easy_step']:.2g} after {k + 1} steps: the two-view task is "
                   "solved at once, so the run shows the geometry of a head that separates distinct sentences, not of "
                   "one shaped by invariance pressure")
    return {"verdict": verdict, "verdict_reason": reason, "headline": h, "paper": {}}  # no text numbers in the paper
