"""Experiment 3's dry run: the paper's widths at 1/8 and 1/4 of its batch, one case per code path, each part of
:func:`experiments.collapse_hessians.measure` (the cases, the certificates, the critical-residual sweeps, the width
sweep) timed at both batches, compilation included, and projected to the whole paper variant (:func:`dry_measure`).
"""

from __future__ import annotations

import math
import statistics
import time

import jax
import numpy as np

from experiments import claims, projection
from experiments.benchmarks import harness
from experiments.collapse_hessians import certificates, widths
from experiments.collapse_hessians.cases import all_cases, run_case
from ssl_geometry import geometry

NAME = "collapse_hessians"

#: Honours ``config.dry_run``: the paper's widths at two batches (:func:`batches`), one case per code path
#: (:func:`_dry_cases`), each matrix on the real run's path (the variant's ``max_dense_dim``: ``H_eff``, ``G`` and ``M``
#: through Lanczos, the certificate's ``d x d`` sample blocks dense),
#: the stationarity search run to its own stop; each unit timed cold (its first call: compilation, as the real run
#: pays it per case) and warm, projected by :func:`_compiled_projection`.
#: Timed runs of the width sweep's head at each rung (after one untimed run): :func:`width_part`.
WIDTH_REPEATS = 2
#: The projection's method, stored with every part it makes (:func:`_compiled_projection`).
METHOD = (
    "warm time a n^p fitted at the two dry batches, projected at the variant's batch per unit, plus the "
    "measured compilation (cold - warm, not grown with n) per compiled unit; spread: the two batches' "
    "compilations"
)


def batches(config) -> list[int]:
    """The two dry-run batches: 1/8 and 1/4 of the variant's ``data.n`` (:func:`experiments.projection.reduced_sizes`;
    the widths stay the paper's)."""
    return projection.reduced_sizes(int(config.data.n))


def _dry_config(config, n: int):
    """The dry-run config: batch ``n`` (at most the variant's), everything else the variant's (its ``max_dense_dim``
    sends each matrix down the real run's path: at the paper's widths ``n d >= 16384`` puts ``H_eff``, ``G`` and ``M``
    above every dense limit, while the certificate's ``512 x 512`` sample blocks stay dense), the stationarity
    search's cap unchanged, and ``checkpoint_dir`` empty (a dry run stores no part)."""
    cfg = config.copy_and_resolve_references()
    cfg.unlock()
    cfg.data.n = min(n, config.data.n)
    if "checkpoint_dir" in cfg:
        cfg.checkpoint_dir = ""
    return cfg


def _kind_activations(config) -> dict[str, str]:
    """The first activation of ``model.activations`` of each head kind (linear, piecewise, smooth)."""
    acts: dict[str, str] = {}
    for act in config.model.activations:
        acts.setdefault(geometry.head_smoothness(act), act)
    return acts


def _dry_cases(config) -> list:
    """One case per code path of :func:`run_case` (each case costs about half a minute at the paper's widths on a
    2-core CPU, compilation included): the first equilibrium objective with a linear, a piecewise and a smooth
    head, the others smooth; each loss wiring of the Siamese objectives (SimSiam, BYOL, the first objective
    without a predictor) at the collapsed state, and pseudo-collapsed with BatchNorm alternating on and off."""
    a, acts = config.analysis, _kind_activations(config)
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


def cold_warm(fn) -> tuple[float, float, object]:
    """``(cold, warm, result)``: the wall times (s) of two successive calls of ``fn`` (results waited for, by
    :func:`experiments.benchmarks.harness.time_call`); the first pays the compilation, the second does not."""
    cold, _ = harness.time_call(fn)
    warm, out = harness.time_call(fn)
    return cold, warm, out


def _compiled_projection(times, counts, full_size, compiled=None) -> dict:
    """Project units timed cold and warm at the dry batches: ``times[label] = {n: (cold, warm)}`` (a label's
    ``(cold, warm)`` the means over the units timed for it), ``counts[label]`` units of it in the variant, of which
    ``compiled[label]`` (default all) pay their own compilation.

    Per label: the warm times fitted as ``a n^p`` give ``count a N^p`` at the variant's batch ``N``
    (:func:`experiments.projection.power_law_projection`, stored under ``units``), plus ``compiled`` times the
    compilation ``max(cold - warm, 0)`` averaged over the batches (it does not grow with ``n``); ``spread_s`` takes
    each label's smallest then largest compilation of the batches. The record is a ``power_law_projection`` of the
    whole part's warm time at each batch, ``sum_label count warm(n)`` (its ``exponent`` says how the sum grows;
    ``projected_s`` is the sum over the labels above), with ``compile_s`` and :data:`METHOD`."""
    compiled = counts if compiled is None else compiled
    units, lo, hi, total, comp_all = {}, 0.0, 0.0, 0.0, []
    for label, per_n in times.items():
        rec = projection.power_law_projection([[n, w] for n, (_, w) in per_n.items()], full_size, counts[label])
        comps = [max(c - w, 0.0) for c, w in per_n.values()]
        comp = compiled[label] * float(np.mean(comps))
        units[label] = {**rec, "compile_s": comp, "compiled_units": compiled[label]}
        total, comp_all = total + rec["projected_s"] + comp, comp_all + [comp]
        lo += rec["projected_s"] + compiled[label] * min(comps)
        hi += rec["projected_s"] + compiled[label] * max(comps)
    sizes = sorted({n for per_n in times.values() for n in per_n})
    whole = [[n, sum(counts[k] * times[k][n][1] for k in times)] for n in sizes]
    rec = projection.power_law_projection(whole, full_size)
    return {
        **rec,
        "projected_s": total,
        "spread_s": [lo, hi],
        "compile_s": comp_all,
        "count": sum(counts.values()),
        "method": METHOD,
        "units": units,
    }


def _mean_pair(pairs) -> tuple[float, float]:
    return float(np.mean([c for c, _ in pairs])), float(np.mean([w for _, w in pairs]))


def cases_part(config, key, sizes) -> tuple[dict, list, dict]:
    """``(part, rows, iterations)``: every dry case (:func:`_dry_cases`) run cold then warm at each batch (the
    collapsed cases' stationarity search to its own stop, as the real run), projected per state (equilibrium,
    collapsed, pseudo-collapsed) to the variant's cases of that state, each paying its compilation
    (:func:`_compiled_projection`). ``rows``: the smaller batch's cold rows; ``iterations``: per collapsed dry case,
    ``{n: [L-BFGS iterations, Newton steps]}`` and whether they are the same at both batches (at a collapsed state
    every row is the same point, so the loss landscape does not depend on ``n``; the search's floating-point path
    may: the tiny variant's BYOL/swish search stopped one iteration apart at n = 2 and 3, 15 and 14 BFGS)."""
    full = list(all_cases(config))
    per_state: dict[str, dict[int, list]] = {}
    rows, iters = [], {}
    for n in sizes:
        cfg = _dry_config(config, n)
        for i, (o, a, bn, st, s) in enumerate(_dry_cases(cfg)):
            cold, warm, row = cold_warm(lambda: run_case(cfg, o, a, bn, st, jax.random.fold_in(key, i), s))
            per_state.setdefault(st, {}).setdefault(n, []).append((cold, warm))
            if n == sizes[0]:
                rows.append(row)
            if st == "collapsed":
                iters.setdefault(f"{o}/{a}", {})[n] = [int(row["st_iterations"]), int(row["st_newton_steps"])]
    for rec in iters.values():
        rec["same_at_both_batches"] = len({tuple(v) for v in rec.values()}) == 1
    times = {st: {n: _mean_pair(p) for n, p in per_n.items()} for st, per_n in per_state.items()}
    counts = {st: sum(1 for c in full if c[3] == st) for st in times}
    return _compiled_projection(times, counts, config.data.n), rows, iters


def _equilibrium_units(config):
    """The certificates :func:`certificates.certify_cases` makes, per head kind: ``{kind: (objective, activation,
    residual_scale, count)}``, the first equilibrium objective, activation and scale of that kind, and the number of
    equilibrium cases (without BatchNorm) of that kind."""
    out = {}
    for o, act, bn, st, s in all_cases(config):
        if st == "equilibrium" and not bn:
            kind = geometry.head_smoothness(act)
            first = out.get(kind, (o, act, s, 0))
            out[kind] = (*first[:3], first[3] + 1)
    return out


def _certificate_unit(cfg, state):
    """One certificate as :func:`certificates.cases_and_certificates` makes it: of the equilibrium its case built
    (``state``), so the build is the case's time, not the certificate's."""
    return certificates.certificate(cfg, *state)


def certificates_part(config, key, sizes) -> tuple[dict, dict]:
    """The certificates' part: per head kind, one equilibrium built (untimed: its case pays it) and certified
    (:func:`_certificate_unit`) cold then warm at each batch, projected to the variant's equilibrium cases of that
    kind (:func:`_equilibrium_units`), each paying its compilation."""
    units = _equilibrium_units(config)
    times = {}
    for kind, (o, act, s, _) in units.items():
        for n in sizes:
            cfg = _dry_config(config, n)
            state = certificates.equilibrium_state(cfg, o, act, key, s)
            cold, warm, _ = cold_warm(lambda: _certificate_unit(cfg, state))
            times.setdefault(kind, {})[n] = (cold, warm)
    counts = {k: u[3] for k, u in units.items()}
    return _compiled_projection(times, counts, config.data.n)


def sweep_evaluations(lo: float, hi: float, *, factor: float = 2.0, rtol: float = 1e-4) -> int:
    """The most evaluations :func:`certificates.locate_crossing` makes on ``[lo, hi]``: its grid
    ``lo factor^j < hi``, ``hi`` evaluated up to the right end ``b`` of the first ``+``/``-`` interval ``[a, b]``,
    then its bisection, whose longest run is a crossing just above ``a`` (every midpoint negative, ``b`` halving
    towards ``a`` until ``b - a <= rtol b``); the maximum over the intervals, or the whole grid without a crossing."""
    grid = [lo]
    while grid[-1] * factor < hi:
        grid.append(grid[-1] * factor)
    grid.append(hi)
    most = len(grid)
    for j, (a, b) in enumerate(zip(grid[:-1], grid[1:])):
        steps = 0
        while b - a > rtol * b:
            b, steps = 0.5 * (a + b), steps + 1
        most = max(most, j + 2 + steps)
    return most


def sweeps_part(config, key, sizes) -> dict:
    """The critical-residual sweeps (:func:`certificates.sweep_states`): per listed sweep (its base certificate is the
    certificates part's) :func:`sweep_evaluations` evaluations of a sweep ``[p / span, span p]`` (the claim's span;
    ``p`` is not known before the certificate at full size, and the count depends only on the ratio), each an
    equilibrium rebuilt and its ``lambda_min(H_eff)`` measured as ``sign_at`` does; one
    evaluation is timed cold (at the base scale) then warm (at ``base / span``, rebuilt) at each batch, the
    compilation paid once per sweep. A DINO sweep that will prove not buildable is still counted."""
    a = config.analysis
    span = claims.claim(certificates.CRITICAL_RESIDUAL).thresholds["span"]
    times, counts, compiled = {}, {}, {}
    for objective, act, base in a.critical_sweep:
        lo = base / span
        label = f"{objective}/{act}/scale {base:g}"
        for n in sizes:
            cfg = _dry_config(config, n)

            def evaluate(r):
                m, v, e = certificates.equilibrium_state(cfg, objective, act, key, r)
                return certificates.measured_lambda_min(cfg, m, v, e, key)

            cold, _ = harness.time_call(lambda: evaluate(base))
            warm, _ = harness.time_call(lambda: evaluate(lo))
            times.setdefault(label, {})[n] = (cold, warm)
        counts[label] = sweep_evaluations(1.0 / span, span, rtol=a.critical_sweep_rtol)
        compiled[label] = 1
    return _compiled_projection(times, counts, config.data.n, compiled)


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
    """The dry run: each part of the real run timed at the batches of :func:`batches`, compilation included, and
    projected to the variant (:data:`METHOD`, :func:`_compiled_projection`): ``cases`` (:func:`cases_part`),
    ``certificates`` (:func:`certificates_part`), ``critical_sweeps`` (:func:`sweeps_part`) and ``widths``
    (:func:`width_part`, measured at each rung), each present where the variant has it. Nothing is trained and
    nothing is stored (``checkpoint_dir`` is ignored): the whole projection is analysis, the sum of the parts
    (``parts``). The rows are those of the smaller batch. ``step_time_s``: the mean warm time of a dry case at the
    larger batch. A variant without cases (``paper_widths``) has only the width part."""
    key, sizes, parts = jax.random.PRNGKey(config.seed), batches(config), {}
    full, rows, iters, step = list(all_cases(config)), [], {}, math.nan
    if full:
        parts["cases"], rows, iters = cases_part(config, key, sizes)
        units = parts["cases"]["units"].values()
        step = statistics.fmean(u["points"][-1][1] for u in units)
        if any(c[3] == "equilibrium" for c in full):
            parts["certificates"] = certificates_part(config, key, sizes)
        if config.analysis.critical_sweep:
            parts["critical_sweeps"] = sweeps_part(config, key, sizes)
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
            parts[first]["points"][-1][1] if math.isnan(step) else step,
            analysis=analysis,
            cases_run=len(rows),
            cases_full=len(full),
            batch_full=config.data.n,
            batches=sizes,
            method=METHOD,
            stationarity_iterations=iters,
            stationarity_max_iter=int(config.analysis.stationarity_max_iter),
        ),
    }
