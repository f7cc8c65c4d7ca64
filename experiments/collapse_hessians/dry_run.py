"""Experiment 3's dry run: the paper's widths at 1/8 and 1/4 of its batch, one case per code path, timed at
both batches and projected to the whole paper variant, with the stationarity search's iterations projected
apart (a dry case runs a few of them, the variant up to ``analysis.stationarity_max_iter``)."""

from __future__ import annotations

import statistics
import time

import jax

from experiments import projection, stationary_heads
from experiments.benchmarks import harness
from experiments.collapse_hessians import widths
from experiments.collapse_hessians.cases import all_cases, run_case, siamese_problem
from ssl_geometry import geometry

NAME = "collapse_hessians"

#: Honours ``config.dry_run``: the paper's widths at two batches (:func:`batches`), one case per code path
#: (:func:`_dry_cases`), every operator through Lanczos (at the paper's sizes every one exceeds ``max_dense_dim``);
#: the projection fits the mean per-case time at the two batches and projects all of the variant's cases at its
#: batch ``n``, and the stationarity search's further iterations apart (:func:`dry_measure`).
#: L-BFGS iterations driving a collapsed head to stationarity in a dry case; the iteration-cost probe's two runs.
DRY_RUN_STATIONARITY_ITERS, ITERATION_PROBE = 5, (5, 25)
#: Timed runs of the width sweep's head at each rung (after one untimed run): :func:`width_part`.
WIDTH_REPEATS = 2


def batches(config) -> list[int]:
    """The two dry-run batches: 1/8 and 1/4 of the variant's ``data.n`` (:func:`experiments.projection.reduced_sizes`;
    the widths stay the paper's)."""
    return projection.reduced_sizes(int(config.data.n))


def _dry_config(config, n: int):
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
    branches = [o for o in siam if o in a.predictor_objectives] + [o for o in siam if o not in a.predictor_objectives][
        :1
    ]
    if "collapsed" in a.states:
        cases += [(o, smooth, False, "collapsed", nan) for o in branches]
    if "pseudo_collapsed" in a.states:
        bns = list(config.model.batch_norm)
        cases += [(o, smooth, bns[i % len(bns)], "pseudo_collapsed", nan) for i, o in enumerate(branches)]
    return cases


def _iteration_points(config, sizes) -> list:
    """``[[n, seconds per L-BFGS iteration], ...]``: the first collapsed dry case's stationarity search
    (:func:`experiments.stationary_heads.stationary_head_state`) at batch ``n``, run to each iteration cap of
    :data:`ITERATION_PROBE` (each once untimed first), the difference of the two times over the difference of the
    iterations it made (without the rank measurement at the head reached, ``measure_rank=False``: the same cost at
    both caps, timed with each case).

    Raises:
      ValueError: when the larger cap made no more iterations, or took no longer (no cost per iteration measured).
    """
    cases = [c for c in _dry_cases(_dry_config(config, sizes[0])) if c[3] == "collapsed"]
    if not cases:
        return []
    objective, activation, bn, state, _ = cases[0]
    key, points = jax.random.PRNGKey(config.seed), []
    for n in sizes:
        cfg = _dry_config(config, n)
        model, variables, loss_fn, z1, train, _ = siamese_problem(cfg, objective, activation, bn, state, key)
        iters, secs = {}, {}
        for cap in ITERATION_PROBE:

            def search(cap=cap):
                iters[cap] = stationary_heads.stationary_head_state(
                    model,
                    variables,
                    loss_fn,
                    z1,
                    key=key,
                    train=train,
                    max_iter=cap,
                    newton_steps=0,
                    measure_rank=False,
                )["iterations"]

            secs[cap] = projection.step_time(search, repeats=1)
        lo, hi = ITERATION_PROBE
        its, dt = iters[hi] - iters[lo], secs[hi] - secs[lo]
        if its <= 0 or dt <= 0:
            raise ValueError(
                f"{NAME}: the stationarity search at batch {n} made {its} more iterations in {dt:.3g} s "
                f"more with cap {hi} than with {lo}: no cost per iteration to project."
            )
        points.append([n, dt / its])
    return points


def width_heads(config) -> dict[str, dict[str, int]]:
    """The heads the width sweep builds, per rung label and construction: counted from
    :func:`experiments.collapse_hessians.widths.heads_of`, the sweep's own enumeration (a construction without a head
    at any activation, e.g. the rank drop with tanh alone, is absent)."""
    out: dict[str, dict[str, int]] = {}
    for spec in widths.heads_of(config, jax.random.PRNGKey(0)):
        per = out.setdefault(widths.rung_label(spec.dims), {})
        per[spec.construction] = per.get(spec.construction, 0) + 1
    return out


def width_part(config, key, repeats: int = WIDTH_REPEATS) -> dict:
    """The width sweep's projection, measured at every rung of ``analysis.widths`` and ``analysis.widths_composed``
    at its own size (nothing is extrapolated). Per rung and construction, the first head
    :func:`experiments.collapse_hessians.widths.heads_of` yields (the first activation that has the construction,
    seed 0, the first residual scale; a construction the sweep builds no head of is neither timed nor counted) is run
    once, timed with its compilation, then ``repeats`` times: the rung costs ``sum_c heads_c t_c``
    (:func:`width_heads`, ``t_c`` the median) plus, per activation, the compilations (first call minus ``t_c``, summed
    over the constructions: the rank drop reuses the initialiser's program, the bottleneck has its own), which the
    real sweep pays once per activation and hidden width. ``spread_s``: from the fastest timed runs with the
    compilations paid once per rung (every activation sharing the compiled code but the activation's own) to the
    slowest with them paid per activation. ``points``: ``[[d, seconds per head of the initialiser's draw], ...]``
    (one-hidden-layer rungs); ``compile_s``: per rung."""
    n_act, counts = len(config.analysis.widths_activations), width_heads(config)
    first: dict[str, dict] = {}
    for spec in widths.heads_of(config, key):
        first.setdefault(widths.rung_label(spec.dims), {}).setdefault(spec.construction, spec)
    points, compiles, lo, hi, total = [], [], 0.0, 0.0, 0.0
    for rung, specs in first.items():
        comp = 0.0
        for con, s in specs.items():
            run = lambda s=s: widths.head_row(config, s.dims, s.activation, s.construction, s.seed, s.scale, s.key)
            t0 = time.perf_counter()
            run()
            once = time.perf_counter() - t0
            times = harness.interleave({"head": run}, repeats=repeats, warmup=0)["head"]
            med, n = float(statistics.median(times)), counts[rung][con]
            comp += max(once - med, 0.0)
            total, lo, hi = total + n * med, lo + n * min(times), hi + n * max(times)
            if con == "random":
                points.append([s.dims[0], med])
        compiles.append(n_act * comp)
    c = sum(compiles)
    return {
        "points": points,
        "projected_s": total + c,
        "spread_s": [lo + c / n_act, hi + c],
        "compile_s": compiles,
        "count": sum(sum(per.values()) for per in counts.values()),
        "method": "measured per rung, compilation included",
    }


def dry_measure(config) -> dict:
    """The dry run: the cases of :func:`_dry_cases` timed at the batches of :func:`batches` (each once untimed
    first, so compilation is excluded); the mean time per case, fitted as ``a n^p``, projects every case of the
    variant at its batch (:func:`experiments.projection.power_law_projection`). A dry case runs
    :data:`DRY_RUN_STATIONARITY_ITERS` iterations of the stationarity search where the variant runs up to
    ``analysis.stationarity_max_iter``: the cost of one iteration, measured at the same batches
    (:func:`_iteration_points`), projects the rest for every collapsed case at the cap (an upper bound: a search
    stops early where its line search fails). The width sweep is timed at each of its rungs (:func:`width_part`).
    Nothing is trained: the whole projection is analysis, the sum of the parts (``parts``). The rows are those
    of the smaller batch. A variant without cases (``paper_widths``) has only the width part."""
    key, rows = jax.random.PRNGKey(config.seed), []

    def make_step(n):
        cfg = _dry_config(config, n)
        cases = _dry_cases(cfg)

        def step():
            out = [
                run_case(cfg, o, a, bn, st, jax.random.fold_in(key, i), s) for i, (o, a, bn, st, s) in enumerate(cases)
            ]
            if not rows:
                rows.extend(out)
            return out

        return step

    sizes = batches(config)
    full, parts = list(all_cases(config)), {}
    if full:
        n_cases = len(_dry_cases(_dry_config(config, sizes[0])))
        points = [[n, t / n_cases] for n, t in projection.time_at_sizes(make_step, sizes, repeats=1)]
        parts["cases"] = projection.power_law_projection(points, config.data.n, len(full))
        extra = max(0, config.analysis.stationarity_max_iter - DRY_RUN_STATIONARITY_ITERS)
        n_collapsed = sum(1 for c in full if c[3] == "collapsed")
        it_points = _iteration_points(config, sizes) if extra > 0 and n_collapsed else []
        if it_points:
            parts["stationarity"] = projection.power_law_projection(it_points, config.data.n, n_collapsed * extra)
    if config.analysis.widths:
        parts["widths"] = width_part(config, key)
    first = next(iter(parts))
    analysis = {
        **parts[first],
        "projected_s": sum(p["projected_s"] for p in parts.values()),
        "part_shown": first,
        "parts": parts,
    }
    return {
        "cases": rows,
        "dry_run": projection.dry_run_record(
            parts[first]["points"][-1][1],
            analysis=analysis,
            cases_run=len(rows),
            cases_full=len(full),
            batch_full=config.data.n,
            batches=sizes,
            stationarity_iterations_full=int(config.analysis.stationarity_max_iter),
        ),
    }
