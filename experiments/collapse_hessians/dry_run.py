"""Experiment 3's dry run: the paper's widths at a small batch, one case per code path, timed at two batches
and projected to the whole paper variant."""
from __future__ import annotations

import jax

from experiments import projection
from experiments.collapse_hessians.cases import all_cases, run_case
from ssl_geometry import geometry

NAME = "collapse_hessians"

#: Honours ``config.dry_run``: the paper's widths at batch 2, one case per code path (:func:`_dry_cases`), every
#: operator through Lanczos (at the paper's sizes every one exceeds ``max_dense_dim``); the projection fits the
#: mean per-case time at two batches and projects all of the variant's cases at its batch ``n`` (:func:`dry_measure`).
#: Batch of a dry run (the widths stay the paper's), and its L-BFGS iterations driving a collapsed head to stationarity.
DRY_RUN_N, DRY_RUN_STATIONARITY_ITERS = 2, 5


def _dry_config(config, n: int = DRY_RUN_N):
    """The dry-run config: batch ``n`` (at most the variant's), ``max_dense_dim = 1`` (Lanczos for every
    operator, the paper's path) and :data:`DRY_RUN_STATIONARITY_ITERS` iterations of the stationarity search."""
    cfg = config.copy_and_resolve_references()
    cfg.unlock()
    cfg.data.n = min(n, config.data.n)
    cfg.analysis.max_dense_dim = 1
    cfg.analysis.stationarity_max_iter = min(DRY_RUN_STATIONARITY_ITERS, config.analysis.stationarity_max_iter)
    return cfg


def _dry_cases(config) -> list:
    """One case per code path of :func:`run_case` (each case costs about half a minute at the paper's widths on a
    2-core CPU, compilation included): the first equilibrium objective with a linear, a piecewise and a smooth
    head, the others smooth; each loss wiring of the Siamese objectives (SimSiam, BYOL, the first objective
    without a predictor) at the collapsed state, and pseudo-collapsed with BatchNorm alternating on and off."""
    a, acts = config.analysis, {}
    for act in config.model.activations:  # first activation of each head kind
        acts.setdefault(geometry.head_smoothness(act), act)
    smooth = acts.get("smooth", config.model.activations[0])
    nan, cases = float("nan"), []
    if "equilibrium" in a.states:
        eq = list(a.equilibrium_objectives)
        s0 = a.residual_scales[eq[0]][0]
        cases += [(eq[0], acts[k], False, "equilibrium", s0) for k in ("linear", "piecewise", "smooth") if k in acts]
        cases += [(o, smooth, False, "equilibrium", a.residual_scales[o][0]) for o in eq[1:]]
    siam = list(a.siamese_objectives)
    branches = [o for o in siam if o in a.predictor_objectives] + [o for o in siam if o not in a.predictor_objectives][:1]
    if "collapsed" in a.states:
        cases += [(o, smooth, False, "collapsed", nan) for o in branches]
    if "pseudo_collapsed" in a.states:
        bns = list(config.model.batch_norm)
        cases += [(o, smooth, bns[i % len(bns)], "pseudo_collapsed", nan) for i, o in enumerate(branches)]
    return cases


def dry_measure(config) -> dict:
    """The dry run: the cases of :func:`_dry_cases` timed at batches :data:`DRY_RUN_N` and twice that (each
    once untimed first, so compilation is excluded); the mean time per case, fitted as ``a n^p``, projects
    every case of the variant at its batch (:func:`experiments.projection.power_law_projection`). Nothing is
    trained: the whole projection is analysis. The rows are those of the smaller batch."""
    key, rows = jax.random.PRNGKey(config.seed), []

    def make_step(n):
        cfg = _dry_config(config, n)
        cases = _dry_cases(cfg)

        def step():
            out = [run_case(cfg, o, a, bn, st, jax.random.fold_in(key, i), s)
                   for i, (o, a, bn, st, s) in enumerate(cases)]
            if not rows:
                rows.extend(out)
            return out
        return step

    sizes = sorted({min(DRY_RUN_N, config.data.n), min(2 * DRY_RUN_N, config.data.n)})
    if len(sizes) < 2:
        raise ValueError(f"{NAME}: a dry run needs `data.n` >= {2 * DRY_RUN_N} (two batch sizes to fit); "
                         f"got {config.data.n}.")
    n_cases = len(_dry_cases(_dry_config(config)))
    points = [[n, t / n_cases] for n, t in projection.time_at_sizes(make_step, sizes, repeats=1)]
    n_full = sum(1 for _ in all_cases(config))
    analysis = projection.power_law_projection(points, config.data.n, n_full)
    return {"cases": rows, "dry_run": projection.dry_run_record(
        points[-1][1], analysis=analysis, cases_run=len(rows), cases_full=n_full, batch_full=config.data.n)}
