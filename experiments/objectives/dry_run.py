"""Experiment 7's dry run (``config.dry_run``): every objective's head trained 2 steps and measured once at reduced
sizes, and the full variant projected from units timed at two reduced sizes each, training and analysis apart."""

from __future__ import annotations

import jax

from experiments import projection
from experiments.objectives.analysis import analyse_objective, geometry_row, train_objective
from experiments.objectives.problem import PREDICTOR, TARGET, problem_data, sample_views, training_step

#: Training steps of each head in a dry run, and the iterations of its stationarity search (executed, not projected).
DRY_RUN_STEPS, DRY_RUN_STATIONARITY_ITERS = 2, 5


def dry_config(config, n: int, n_geom: int):
    """The dry-run config at training batch ``n`` and geometry batch ``n_geom``: ``n_eval`` in proportion to
    ``n_geom`` (``data.n_eval * n_geom / data.n_geom``, at least ``analysis.n_orbits``, the orbits' samples), the
    variant's widths and objectives, one seed, the config's head only, and at most
    :data:`DRY_RUN_STATIONARITY_ITERS` iterations of the stationarity search."""
    cfg = config.copy_and_resolve_references()
    cfg.data.n, cfg.data.n_geom = int(n), int(n_geom)
    cfg.data.n_eval = max(config.analysis.n_orbits, 2, round(config.data.n_eval * n_geom / config.data.n_geom))
    cfg.seeds = 1
    cfg.analysis.thm41_activations = [config.model.activation]
    cfg.analysis.stationarity_max_iter = min(DRY_RUN_STATIONARITY_ITERS, config.analysis.stationarity_max_iter)
    return cfg


def classifications(config) -> int:
    """Thm 4.1 classifications (:func:`~experiments.objectives.analysis.geometry_row` or an equilibrium's) of the full
    variant: per seed, two per objective (the trained and the pseudo-collapsed state) and one per residual scale of
    each DINO head (the config's where DINO is trained, and each other head of ``analysis.thm41_activations``)."""
    objectives = list(config.train.objectives)
    others = sum(a != config.model.activation for a in config.analysis.thm41_activations)
    dino_heads = int("dino" in objectives) + others
    return config.seeds * (2 * len(objectives) + dino_heads * len(config.analysis.dino_residual_scales))


def costliest(objectives) -> str:
    """The objective whose training step and online head cost the most: MoCo v3 (a predictor, an EMA target and an
    ``n x n`` contrastive loss), else the first with a predictor and a target, else the first with a predictor, else
    the first."""
    ranked = (
        [o for o in objectives if o == "moco_v3"]
        + [o for o in objectives if o in PREDICTOR and o in TARGET]
        + [o for o in objectives if o in PREDICTOR]
        + list(objectives)
    )
    return ranked[0]


def dry_measure(config) -> dict:
    """The dry run: every objective trained :data:`DRY_RUN_STEPS` steps at 1/8 of the batch ``data.n`` and measured
    at 1/8 of the geometry batch ``data.n_geom`` (:func:`dry_config`), and the projection of the full variant from
    units timed at two reduced sizes each (:func:`experiments.projection.project_at_sizes`):

    * Training, scaled by the batch ``data.n`` (N = 512 in ``paper``): the unit is one step
      (:func:`~experiments.objectives.problem.training_step`) of the costliest objective (:func:`costliest`: MoCo v3
      in ``paper``, with a predictor, an EMA target and an ``n x n`` contrastive loss), timed at n = N/8 and N/4;
      ``t(n) = a n^p`` through the two points and the training is ``trainings * train.steps * a N^p`` for the
      ``seeds * (objectives + other DINO heads)`` trainings, an upper bound.
    * Analysis, scaled by the geometry batch ``data.n_geom`` (G = 32): the unit is one Thm 4.1 classification,
      :func:`~experiments.objectives.analysis.geometry_row` at the trained state of the same objective (the
      deepest online head; DINO's equilibria classify its projector alone): ``H_eff``, ``G`` and
      ``M`` (``G d`` square, dense ``eigh`` up to 2048) and ``H_L`` (``G k`` square, Lanczos above 2048), their
      extreme eigenvalues and the premises, timed at g = G/8 and G/4; the analysis is
      ``classifications(config) * a G^p``. Sec. 5 (Jacobian-vector products at ``n_eval`` samples), the
      representation statistics, the stationarity search and the equilibria's construction run in the dry run but
      are not projected: at G the spectra of these ``G d``- and ``G k``-dimensional matrices dominate.

    Known bias: fixed per-unit costs (dispatch, compilation of the closures each call makes) lower ``p`` at small
    sizes, and a reduced batch underuses an accelerator, so both parts under-project where those dominate. The
    training unit excludes Adam's update (elementwise) and the ``lax.scan`` around the steps.
    """
    objectives = list(config.train.objectives)
    extra = [a for a in config.analysis.thm41_activations if a != config.model.activation]
    train_sizes, geom_sizes = projection.reduced_sizes(config.data.n), projection.reduced_sizes(config.data.n_geom)
    cfg = dry_config(config, train_sizes[0], geom_sizes[0])
    data = problem_data(cfg)
    k_o = jax.random.fold_in(jax.random.PRNGKey(cfg.seed), 3)
    keys = {name: jax.random.fold_in(jax.random.fold_in(k_o, i), 0) for i, name in enumerate(objectives)}
    rows, equilibria, curves, trained = [], [], {}, {}
    for name in objectives:
        row, trained[name], vals = train_objective(cfg, name, keys[name], data, DRY_RUN_STEPS, 0)
        curves[f"{name}/{cfg.model.activation}/seed0"] = [float(v) for v in vals]
        row, eqs = analyse_objective(cfg, name, keys[name], data, row, trained[name], full=True)
        rows.append(row)
        equilibria += eqs
    timed = costliest(objectives)

    def make_analysis(n_geom):
        c = dry_config(config, train_sizes[0], n_geom)
        _, _, p, tgt, centre = trained[timed]
        _, _, k_geo, _, k_eig = jax.random.split(keys[timed], 5)
        _, z1, z2 = sample_views(c, k_geo, c.data.n_geom, *data[:2])
        return lambda: geometry_row(c, timed, p, tgt, centre, z1, z2, k_eig)

    def make_train(n):
        c = dry_config(config, n, geom_sizes[0])
        return training_step(c, timed, jax.random.split(keys[timed], 5)[0], *data[:2], config.train.steps)

    trainings = config.seeds * (len(objectives) + len(extra))
    analysis = projection.project_at_sizes(
        make_analysis, config.data.n_geom, classifications(config), sizes=geom_sizes, repeats=1
    )
    training = projection.project_at_sizes(
        make_train, config.data.n, trainings * config.train.steps, sizes=train_sizes, repeats=3
    )
    record = projection.dry_run_record(
        training["points"][-1][1],
        training=training,
        analysis=analysis,
        timed_objective=timed,
        trainings=trainings,
        scaled={"training": "data.n (batch)", "analysis": "data.n_geom (the geometry batch)"},
    )
    return {"rows": rows, "equilibria": equilibria, "curves": curves, "dry_run": record}
