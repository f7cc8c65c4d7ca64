"""Experiment 4b: the authors' collapse-escape runs (experiment 4 at the paper's scale) through the one trainer.

``experiments.py`` (Experiment 1) of the authors trains SimSiam from pseudo-collapse (projector
weights x 0.1) for 14 ``(activation, BatchNorm, lr)`` settings x 3 seeds and tracks, per step and
averaged per epoch, the std of the L2-normalised projector outputs, their clamped covariance
condition number and the relative update sizes of projector and backbone. This module runs those
settings (:mod:`experiments.configs.collapse_escape_paper`) through the trainer's run loop
(:mod:`experiments.paper_simsiam`) and tracks the same numbers plus the std of the backbone
features (z-collapse). Nothing here is dense at paper size: the statistics are batch covariances,
the update sizes norms. Escape of a run: some epoch's std exceeds ``escape_fraction / sqrt(k)``
(experiment 4's criterion; ``1 / sqrt(k)`` is the std of directions uniform on the sphere).
"""
from __future__ import annotations

import math

import jax
import numpy as np

from experiments import common, paper_simsiam

NAME = "collapse_escape_paper"
TITLE = "Collapse escape, the authors' SimSiam runs"
#: The registry claims (experiments/claims.py) this experiment decides.
CLAIMS = ("paper-collapse-ablation",)
CLAIM = ("From pseudo-collapse (projector weights x 0.1), SimSiam with a smooth head (Swish, GELU) escapes "
         "collapse, a linear head stays collapsed, and a ReLU head escapes only through BatchNorm or a large "
         "step size (near the gradient-flow limit, lr 0.005 without BN, it stays collapsed).")
#: Honours ``config.dry_run`` (reduced batch, 2 steps, mock data, projected wall time).
DRY_RUN = True
RULE = ("A run escapes when the per-epoch mean std of its L2-normalised projector outputs exceeds "
        "{analysis[escape_fraction]} / sqrt(k) at some epoch; diverged runs (non-finite loss) are excluded and "
        "counted. E_smooth: escaped fraction of Swish/GELU runs without BN at lr 0.05; E_lin: of linear-head runs; "
        "E_relu_flow: of ReLU runs without BN at lr 0.005; E_relu_fin: of ReLU runs with BN or lr 0.5. Supported if "
        "E_smooth >= {verdict[min_smooth_escape]}, E_lin = 0, E_relu_flow = 0 (where run) and E_relu_fin > 0 (where "
        "run); not supported if E_lin > 0, E_smooth = 0 or E_relu_flow > 0; inconclusive otherwise (or when no "
        "smooth or no linear run counts).")


def _plan(cfg, n_images):
    if cfg.dry_run:
        return cfg.dry.batch_size, 1, 2
    spe = n_images // cfg.train.batch_size
    if cfg.train.steps_per_epoch:
        spe = min(spe, cfg.train.steps_per_epoch)
    return cfg.train.batch_size, cfg.train.epochs, spe


def _path(activation: str, bn: bool) -> str:
    """The code path of a run's heads: ``linear`` (no activation, no BN), ``bn`` or ``plain`` (activation only).
    Runs on one path differ only in an elementwise activation and in constants (lr, seed)."""
    return "linear" if activation == "linear" else ("bn" if bn else "plain")


def _runs(cfg):
    """``(activation, bn, lr name, seed)`` of every run executed (dry run: the first run of each code path)."""
    out = [(a, bool(bn), lr, cfg.seed + s) for a, bn, lr in cfg.runs for s in range(cfg.seeds)]
    if not cfg.dry_run:
        return out
    seen, first = set(), []
    for a, bn, lr, s in out:
        if _path(a, bn) not in seen:
            seen.add(_path(a, bn))
            first.append((a, bn, lr, s))
    return first


def train_one(cfg, activation, bn, lr_name, seed, images) -> dict:
    """One run (on the training split ``images`` was loaded from); its per-epoch series, escape statistics, timing."""
    if lr_name not in cfg.lrs:
        raise ValueError(f"`runs`: lr name {lr_name!r} is not one of {sorted(cfg.lrs)}.")
    batch, epochs, spe = _plan(cfg, len(images))
    m = cfg.model
    tc = paper_simsiam.trainer_config(activation=activation, batch_norm=bn, lr=cfg.lrs[lr_name], batch_size=batch,
                                      projector_scale=m.collapse_scale, backbone=m.backbone,
                                      backbone_kwargs=m.backbone_kwargs, hidden=m.hidden, out_dim=m.out_dim,
                                      pred_hidden=m.pred_hidden, epochs=epochs, steps_per_epoch=spe, seed=seed,
                                      data=cfg.data)
    run = paper_simsiam.build(tc, images.shape[1:])
    rec = paper_simsiam.train_run(run, tc, dry_examples=cfg.dry.examples if cfg.dry_run else 0)
    thr = cfg.analysis.escape_fraction / math.sqrt(m.out_dim)
    std = rec["epochs"].get("std_head", [])
    above = [i for i, v in enumerate(std) if v > thr]
    ratio = [p / b if b > 0 else float("nan") for p, b in zip(rec["epochs"].get("rel_update_projector", []),
                                                             rec["epochs"].get("rel_update_backbone", []))]
    return {"activation": activation, "batch_norm": bn and activation != "linear", "lr_name": lr_name,
            "lr": cfg.lrs[lr_name], "seed": seed, "epochs": rec["epochs"], "diverged_at_step": rec["diverged_at_step"],
            "escape_threshold": thr, "escaped": bool(above), "escape_epoch": above[0] if above else float("nan"),
            "std_first": std[0] if std else float("nan"), "std_final": std[-1] if std else float("nan"),
            "std_backbone_final": rec["epochs"]["std_backbone"][-1] if std else float("nan"),
            "timescale_ratio_median": float(np.nanmedian(ratio)) if ratio else float("nan"),
            "step_time_s": rec["step_time_s"]}


def measure(config) -> dict:
    """Train every run (see :func:`_runs`); numbers only."""
    images, _ = paper_simsiam.load_images(config.data, seed=config.seed, dry_run=config.dry_run,
                                               dry_examples=config.dry.examples)
    rows = [train_one(config, a, bn, lr, s, images) for a, bn, lr, s in _runs(config)]
    out = {"rows": rows}
    if config.dry_run:
        out["dry_run"] = _projection(config, len(images), rows)
    return out


def _projection(config, n_images, rows) -> dict:
    """Projected wall time of the full variant: every run at the measured step time of its code path
    (:func:`_path`), cost linear in the batch size (an upper bound on an accelerator, which small batches
    underuse)."""
    per_graph = {_path(r["activation"], r["batch_norm"]): r["step_time_s"] for r in rows}
    n_full = config.dry.full_examples or n_images
    spe = n_full // config.train.batch_size
    if config.train.steps_per_epoch:
        spe = min(spe, config.train.steps_per_epoch)
    scale = config.train.batch_size / config.dry.batch_size
    total = 0.0
    for a, bn, _ in config.runs:
        total += config.seeds * config.train.epochs * spe * per_graph[_path(a, bool(bn))] * scale
    return common.dry_run_record(float(np.nanmean(list(per_graph.values()))), projected_wall_time_s=total,
                                 batch=config.dry.batch_size, paths_run=sorted(per_graph))


def _fraction(rows, pred):
    sel = [r for r in rows if pred(r)]
    return (sum(r["escaped"] for r in sel) / len(sel)) if sel else float("nan"), len(sel)


def decide(measurements, config) -> dict:
    """Apply :data:`RULE` to the stored runs."""
    rows = [r for r in measurements["rows"] if r["diverged_at_step"] is None]
    e_smooth, n_smooth = _fraction(rows, lambda r: r["activation"] in ("swish", "gelu") and not r["batch_norm"]
                                   and r["lr_name"] == "base")
    e_lin, n_lin = _fraction(rows, lambda r: r["activation"] == "linear")
    e_flow, n_flow = _fraction(rows, lambda r: r["activation"] == "relu" and not r["batch_norm"]
                               and r["lr_name"] == "small")
    e_fin, n_fin = _fraction(rows, lambda r: r["activation"] == "relu" and (r["batch_norm"] or r["lr_name"] == "large"))
    headline = {"E_smooth": e_smooth, "E_lin": e_lin, "E_relu_flow": e_flow, "E_relu_fin": e_fin,
                "runs": len(measurements["rows"]), "diverged_runs": len(measurements["rows"]) - len(rows)}
    for r in measurements["rows"]:
        if r["seed"] == config.seed:
            headline[f"std_final_{r['activation']}_bn{int(r['batch_norm'])}_{r['lr_name']}"] = r["std_final"]
    if n_smooth == 0 or n_lin == 0:
        verdict = "inconclusive"
    elif e_lin > 0 or e_smooth == 0 or (n_flow and e_flow > 0):
        verdict = "not supported"
    elif e_smooth >= config.verdict.min_smooth_escape and (not n_flow or e_flow == 0) and (not n_fin or e_fin > 0):
        verdict = "supported"
    else:
        verdict = "inconclusive"
    reason = (f"E_smooth {e_smooth:.3g} ({n_smooth} runs), E_lin {e_lin:.3g} ({n_lin}), E_relu_flow {e_flow:.3g} "
              f"({n_flow}), E_relu_fin {e_fin:.3g} ({n_fin})")
    return {"verdict": verdict, "headline": headline, "paper": {}, "verdict_reason": reason}


def figures(results, out_dir) -> None:
    """``escape_std_paper.png``: per-epoch std of L2-normalised projector outputs of every run."""
    plt = common.pyplot()
    rows = results["measurements"]["rows"]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    for r in rows:
        lab = f"{r['activation']} bn={int(r['batch_norm'])} {r['lr_name']} s{r['seed']}"
        axes[0].plot(r["epochs"].get("std_head", []), label=lab)
        axes[1].plot(r["epochs"].get("std_backbone", []), label=lab)
    for ax, what in zip(axes, ("projector outputs", "backbone features")):
        ax.set_yscale("log")
        ax.set_xlabel("epoch", fontsize=7)
        ax.set_ylabel(f"std of L2-normalised {what}", fontsize=7)
        ax.tick_params(labelsize=6)
    if rows:
        axes[0].axhline(rows[0]["escape_threshold"], color="k", ls=":", lw=1)
        axes[0].legend(fontsize=5)
    common.save_figure(fig, out_dir, "escape_std_paper")


def report(results, rel_dir) -> str:
    """The markdown section (a table of runs, the verdict's fractions, the figure)."""
    m = results["measurements"]
    cols = ["activation", "batch_norm", "lr", "seed", "std_first", "std_final", "escaped", "escape_epoch",
            "std_backbone_final", "timescale_ratio_median", "diverged_at_step"]
    text = [f"Fractions of escaped runs: {results.get('verdict_reason', '-')}.", "",
            common.markdown_table([{c: r[c] for c in cols} for r in m["rows"]]), "",
            "timescale_ratio_median: median over epochs of the projector's lr|grad|/|theta| over the backbone's "
            "(the authors' relative update sizes).", "",
            f"![std of normalised outputs]({rel_dir}/escape_std_paper.png)"]
    if "dry_run" in m:
        d = m["dry_run"]
        text.insert(0, f"**Dry run** (batch {d['batch']}, 2 steps, mock data, head paths {', '.join(d['paths_run'])}): "
                       f"step {d['step_time_s']:.3g} s; projected full variant {d['projected_wall_time_s'] / 3600:.3g} h "
                       f"on {d['device']}.\n")
    return "\n".join(text)
