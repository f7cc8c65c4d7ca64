"""Experiment 4b: the authors' collapse-escape runs (experiment 4 at the paper's scale) through the one trainer.

``experiments.py`` (Experiment 1) of the authors trains SimSiam from pseudo-collapse (projector
weights x 0.1) for 14 ``(activation, BatchNorm, lr)`` settings x 3 seeds and tracks, per step and
averaged per epoch, the std of the L2-normalised projector outputs, their clamped covariance
condition number and the relative update sizes of projector and backbone. This module runs those
settings (:mod:`experiments.configs.collapse_escape_paper`) through the trainer's run loop
(:mod:`experiments.paper_simsiam`) and tracks the same numbers plus the std of the backbone
features (z-collapse). The registry claim ``paper-collapse-ablation`` (experiments/claims/) is
decided on the runs; the same rule applied to the authors' released per-seed series
(``experiments/paper_results``, cifar10/resnet18) is stored as ``measurements["paper"]``.

Curvature (reported beside the escape statistics): ``lambda_min`` / ``lambda_max`` of the Hessian of
the tracker's first-view loss ``L(z1) = 1/2 D(q(g(z1)), sg g(z2))`` in the backbone features ``z1``
(:mod:`experiments.hessian_tracker`), on the first batch, before the first update and after the last,
in float64. With BatchNorm in the heads (train mode) the batch statistics couple the samples, so the
Hessian is not block-diagonal: those rows use Lanczos on the coupled ``(n d)``-dimensional operator;
the per-sample blockwise solver runs only where :func:`ssl_geometry.curvature.block_coupling` is
at most ``analysis.block_coupling_tol`` (it is reported beside every value).
"""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

from experiments import paper_simsiam, projection
from experiments.collapse_ablation import (  # noqa: F401 (the rule's names, read here and by the tests)
    ABLATION,
    GROUPS,
    HORIZON_KEYS,
    OUTCOMES,
    apply_rule,
    escape_threshold,
    escaped,
    group_counts,
    horizon_epochs,
    peak_epoch,
    released_collapse_arrays,
    released_horizon,
    run_outcome,
)
from experiments.collapse_escape_paper_report import figures, report  # noqa: F401  (the reporting half)
from ssl_geometry import curvature, losses
from ssl_geometry import trainer as _trainer

NAME = "collapse_escape_paper"
TITLE = "Collapse escape, the authors' SimSiam runs"
#: The registry claims (experiments/claims/) this experiment decides.
CLAIMS = ("paper-collapse-ablation",)
CLAIM = (
    "From pseudo-collapse (projector weights x 0.1), SimSiam with a smooth head (Swish, GELU) escapes "
    "collapse, a linear head stays collapsed, and a ReLU head escapes only through BatchNorm or a large "
    "step size (near the gradient-flow limit, lr 0.005 without BN, it stays collapsed)."
)
#: Honours ``config.dry_run`` (each code path at a reduced batch, the costliest at two, ``dry.steps``, mock data;
#: :func:`_projection`).
DRY_RUN = True
#: The authors' projector width (``ProjectionHead(output_dim=2048)``): the escape threshold of their released runs.
PAPER_OUT_DIM = 2048


def _plan(cfg, n_images, batch=None):
    """``(batch, epochs, steps per epoch)`` of a run (a dry run's: one epoch of ``dry.steps`` at ``batch``)."""
    if cfg.dry_run:
        return int(batch or paper_simsiam.dry_batches(cfg)[0]), 1, cfg.dry.steps
    return cfg.train.batch_size, cfg.train.epochs, _steps_per_epoch(cfg, n_images)


def _steps_per_epoch(cfg, n_images: int) -> int:
    """Updates per epoch of a full run on ``n_images`` images (``drop_last``; ``train.steps_per_epoch`` caps it)."""
    spe = n_images // cfg.train.batch_size
    return min(spe, cfg.train.steps_per_epoch) if cfg.train.steps_per_epoch else spe


def _path(activation: str, bn: bool) -> str:
    """The code path of a run's heads: ``linear`` (no activation, no BN), ``bn`` or ``plain`` (activation only).
    Runs on one path differ only in an elementwise activation and in constants (lr, seed)."""
    return "linear" if activation == "linear" else ("bn" if bn else "plain")


#: The code paths, costliest first (BatchNorm in both heads; a dry run's ``path_times_s`` check the order).
PATHS = ("bn", "plain", "linear")


def _timed_path(cfg) -> str:
    """The costliest code path among the variant's runs (:data:`PATHS`): the one a dry run times at two batches."""
    present = {_path(a, bool(bn)) for a, bn, _ in cfg.runs}
    return next(p for p in PATHS if p in present)


def _runs(cfg):
    """``(activation, bn, lr name, seed, batch)`` of every run executed (``batch`` ``None``: the variant's).

    A dry run: the first run of each code path at the smaller batch of
    :func:`experiments.paper_simsiam.dry_batches`, and the first of :func:`_timed_path` at the larger too."""
    out = [(a, bool(bn), lr, cfg.seed + s, None) for a, bn, lr in cfg.runs for s in range(cfg.seeds)]
    if not cfg.dry_run:
        return out
    batches, seen, first = paper_simsiam.dry_batches(cfg), set(), []
    for a, bn, lr, s, _ in out:
        if _path(a, bn) not in seen:
            seen.add(_path(a, bn))
            first.append((a, bn, lr, s, batches[0]))
            if _path(a, bn) == _timed_path(cfg):
                first += [(a, bn, lr, s, b) for b in batches[1:]]
    return first


@functools.lru_cache(maxsize=8)
def _first_view_loss(projector, predictor):
    """``L(z1, hp, u2, bs) = 1/2 D(q(g(z1)), u2)`` with the heads in train mode (BatchNorm on batch statistics)."""

    def first_view_loss(z1, hp, u2, bs):
        u, _ = projector.apply({"params": hp["projector"], **bs["projector"]}, z1, train=True)
        p, _ = predictor.apply({"params": hp["predictor"], **bs["predictor"]}, u, train=True)
        return 0.5 * losses.negative_cosine(p, u2)

    return first_view_loss


def float64_heads(tc, feature_dim: int) -> tuple:
    """``(projector, predictor)`` of trainer config ``tc`` computing in float64 (the analysis' copies of the
    trained heads: a head built for float32 computes in float32 whatever its inputs)."""
    projector = _trainer.build_head(tc.model.projector, feature_dim, jnp.float64)
    return projector, _trainer.build_head(tc.model.predictor, projector.out_dim, jnp.float64)


def head_curvature(run, heads64, state, images, cfg, key) -> dict:
    """``lambda_min``/``lambda_max`` of ``hess_{z1} L`` at ``state`` on ``images`` (module docstring) in float64
    (``heads64``: :func:`float64_heads`), by :func:`ssl_geometry.curvature.hessian_extremes` in ``auto`` mode:
    ``blockwise`` where the measured block coupling is at most ``analysis.block_coupling_tol`` and the blocks alone
    are symmetric, Lanczos on the ``coupled`` operator otherwise; with the coupling and the worst residual bound."""
    projector, predictor = heads64
    f = _first_view_loss(projector, predictor)
    z1, z2 = run.features(state, images)
    cast = lambda t: jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64), t)
    hp = cast({k: state["params"][k] for k in ("projector", "predictor")})
    bs = cast({k: state["obj_state"].get(k, {}) for k in ("projector", "predictor")})
    z1 = jnp.asarray(z1, jnp.float64)
    u2, _ = projector.apply({"params": hp["projector"], **bs["projector"]}, jnp.asarray(z2, jnp.float64), train=True)
    a = cfg.analysis
    res = curvature.hessian_extremes(
        f,
        z1,
        args=(hp, u2, bs),
        k=1,
        key=key,
        method="auto",
        coupling_tol=a.block_coupling_tol,
        options=curvature.SolverOptions(tol=a.lanczos_tol, num_steps=a.lanczos_steps),
    )
    resid = float(max(np.max(res.smallest_residuals), np.max(res.largest_residuals)))
    return {
        "lambda_min": float(res.smallest[0]),
        "lambda_max": float(res.largest[0]),
        "solver": "blockwise" if res.method == "blockwise" else "coupled",
        "block_coupling": float("nan") if res.coupling is None else float(res.coupling),  # None: one row
        "residual": resid,
        "converged": bool(res.converged),
    }


def train_one(cfg, activation, bn, lr_name, seed, images, batch=None) -> dict:
    """One run (on the training split ``images`` was loaded from; a dry run's at ``batch``); returns its per-epoch
    series, escape statistics, curvature at the start and the end, and timing: ``step_time_s`` the trainer's
    (compilation excluded), ``curvature_time_s`` the end's curvature (the start's compiles)."""
    if lr_name not in cfg.lrs:
        raise ValueError(f"`runs`: lr name {lr_name!r} is not one of {sorted(cfg.lrs)}.")
    batch, epochs, spe = _plan(cfg, len(images), batch)
    m = cfg.model
    tc = paper_simsiam.trainer_config(
        activation=activation,
        batch_norm=bn,
        lr=cfg.lrs[lr_name],
        batch_size=batch,
        projector_scale=m.collapse_scale,
        backbone=m.backbone,
        backbone_kwargs=m.backbone_kwargs,
        hidden=m.hidden,
        out_dim=m.out_dim,
        pred_hidden=m.pred_hidden,
        epochs=epochs,
        steps_per_epoch=spe,
        seed=seed,
        data=cfg.data,
    )
    run = paper_simsiam.build(tc, images.shape[1:])
    k_curv = jax.random.PRNGKey(seed + 20_000)
    heads64 = float64_heads(tc, run.backbone.out_dim)
    start = {}

    def before_step(epoch, i, state, batch):  # the state before the first update and its batch
        if epoch == 0 and i == 0 and not start:
            start["first"] = jnp.asarray(batch["images"])
            start["curvature"] = head_curvature(run, heads64, state, start["first"], cfg, k_curv)

    rec = paper_simsiam.train_run(run, tc, before_step=before_step, dry_examples=cfg.dry.examples if cfg.dry_run else 0)
    curv_start, first = start["curvature"], start["first"]
    thr = escape_threshold(m.out_dim)
    std = rec["epochs"].get("std_head", [])
    diverged = rec["diverged_at_step"] is not None
    outcome = run_outcome(std, thr, diverged)
    above = [i for i, v in enumerate(std) if v > thr]
    ratio = [
        p / b if b > 0 else float("nan")
        for p, b in zip(rec["epochs"].get("rel_update_projector", []), rec["epochs"].get("rel_update_backbone", []))
    ]
    t0 = time.perf_counter()
    curv_end = (
        head_curvature(run, heads64, rec["state"], first, cfg, k_curv)
        if not diverged
        else {
            "lambda_min": float("nan"),
            "lambda_max": float("nan"),
            "solver": "-",
            "block_coupling": float("nan"),
            "residual": float("nan"),
            "converged": False,
        }
    )
    t_curv = time.perf_counter() - t0 if not diverged else float("nan")
    return {
        "activation": activation,
        "batch_norm": bn and activation != "linear",
        "lr_name": lr_name,
        "lr": cfg.lrs[lr_name],
        "seed": seed,
        "epochs": rec["epochs"],
        "diverged_at_step": rec["diverged_at_step"],
        "escape_threshold": thr,
        "outcome": outcome,
        "escaped": outcome == "escaped",
        "epochs_run": len(std),
        "escape_epoch": above[0] if outcome == "escaped" else float("nan"),
        "std_first": std[0] if std else float("nan"),
        "std_final": std[-1] if std else float("nan"),
        "std_backbone_final": rec["epochs"]["std_backbone"][-1] if std else float("nan"),
        "timescale_ratio_median": float(np.nanmedian(ratio)) if ratio else float("nan"),
        "curvature_start": curv_start,
        "curvature_end": curv_end,
        "step_time_s": rec["step_time_s"],
        "curvature_time_s": t_curv,
        "batch": batch,
    }


def released_runs(threshold: float) -> list[dict]:
    """The authors' released cifar10/resnet18 runs, per setting and seed, with the rule's outcome (:func:`run_outcome`)."""
    arr = released_collapse_arrays()
    rows = []
    for key in sorted({k.split("/")[0] for k in arr}):
        act, rest = key.split("_bn_")
        bn, lr_name = rest.split("_lr_")
        for s, series in enumerate(np.asarray(arr[f"{key}/raw"], float)):
            diverged = not np.all(np.isfinite(series))
            outcome = run_outcome(series, threshold, diverged)
            rows.append(
                {
                    "activation": act,
                    "batch_norm": bn == "True" and act != "linear",
                    "lr_name": lr_name,
                    "seed": s,
                    "diverged_at_step": -1 if diverged else None,
                    "outcome": outcome,
                    "escaped": outcome == "escaped",
                    "epochs_run": len(series),
                    "std_first": float(series[0]),
                    "std_final": float(series[-1]),
                }
            )
    return rows


def measure(config) -> dict:
    """Train every run (see :func:`_runs`); numbers only, with the released runs' rule outcome as ``paper``.
    A dry run's rows are those of the smaller batch (:func:`_projection` times the larger too)."""
    images, _ = paper_simsiam.load_images(
        config.data, seed=config.seed, dry_run=config.dry_run, dry_examples=config.dry.examples
    )
    timed = [train_one(config, a, bn, lr, s, images, batch=b) for a, bn, lr, s, b in _runs(config)]
    rows = [r for r in timed if not config.dry_run or r["batch"] == paper_simsiam.dry_batches(config)[0]]
    thr = escape_threshold(PAPER_OUT_DIM)
    verdict, reason, deciding = apply_rule(released_runs(thr))
    out = {
        "rows": rows,
        "paper": {
            **deciding,
            "rule_outcome": verdict,
            "rule_reason": reason,
            "horizon_from_released": released_horizon(released_collapse_arrays()),
            "source": "released cifar10/resnet18 collapse_results, per seed",
        },
    }
    if config.dry_run:
        out["dry_run"] = _projection(config, len(images), timed)
    return out


def _projection(config, n_images, rows) -> dict:
    """The dry run's projection of the full variant, training and analysis apart, from the runs of
    :func:`_timed_path` (the costliest code path) at the two dry batches (``rows``: every dry run's row).

    The scaled dimension is the batch ``n`` (the paper's ``train.batch_size`` ``N``; the curvature is
    taken on the first training batch, so it scales with it too). Each part fits ``t(n) = a n^p``
    through its two measured points (:func:`experiments.projection.power_law_projection`) and projects
    ``count * a * N^p``, every run at the timed path's cost (the other paths, run at the smaller batch,
    lack BatchNorm or the activation in the heads): training, one tracked update (the trainer's timing),
    ``count`` = runs x seeds x epochs x updates per epoch of ``dry.full_examples`` images; analysis, one
    curvature (:func:`head_curvature`), two per run. Known bias: a fixed cost per unit lowers ``p`` at
    small batches, and a reduced batch underuses an accelerator, so both under-project there; the Lanczos
    solves stop at a residual tolerance, so their cost depends on the state's spectrum too.
    """
    path = _timed_path(config)
    timed = sorted((r for r in rows if _path(r["activation"], r["batch_norm"]) == path), key=lambda r: r["batch"])
    runs, full = len(config.runs) * config.seeds, config.train.batch_size
    steps = runs * config.train.epochs * _steps_per_epoch(config, config.dry.full_examples or n_images)
    training = projection.power_law_projection([[r["batch"], r["step_time_s"]] for r in timed], full, steps)
    analysis = projection.power_law_projection([[r["batch"], r["curvature_time_s"]] for r in timed], full, 2 * runs)
    small = {_path(r["activation"], r["batch_norm"]): r for r in rows if r["batch"] == timed[0]["batch"]}
    return projection.dry_run_record(
        training["points"][-1][1],
        training=training,
        analysis=analysis,
        scaled="batch",
        batch_full=full,
        batches=[r["batch"] for r in timed],
        timed_path=path,
        paths_run=sorted(small),
        steps_full=steps,
        curvatures_full=2 * runs,
        steps_run=int(config.dry.steps),
        path_times_s={p: [r["step_time_s"], r["curvature_time_s"]] for p, r in small.items()},
    )


def decide(measurements, config) -> dict:
    """The registry's ``paper-collapse-ablation`` on the stored runs (the released runs' outcome is in ``paper``)."""
    verdict, reason, deciding = apply_rule(measurements["rows"])
    headline = {**deciding, "runs": len(measurements["rows"])}
    for r in measurements["rows"]:
        if r["seed"] == config.seed:
            headline[f"std_final_{r['activation']}_bn{int(r['batch_norm'])}_{r['lr_name']}"] = r["std_final"]
    return {
        "claims": [{"id": ABLATION, "verdict": verdict, "deciding": deciding, "reason": reason}],
        "headline": headline,
    }
