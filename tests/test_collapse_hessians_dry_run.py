"""Experiment 3's dry run (experiments/collapse_hessians/dry_run.py): the count of a sweep's evaluations against
:func:`certificates.locate_crossing`, the projection with compilation, and every part of the real run projected
(with stand-ins for the measured work and the clock: the real ones compile for minutes at the paper's sizes)."""

import math

import pytest

from experiments import claims, report_md, suite
from experiments.benchmarks import harness
from experiments.collapse_hessians import certificates, dry_run
from experiments.collapse_hessians.cases import all_cases
from ssl_geometry import geometry


@pytest.mark.parametrize(
    "lo,hi,rtol", [(0.0375, 4.8, 1e-3), (0.0375, 1.99, 1e-3), (1.25, 160.0, 1e-3), (1.0, 3.0, 1e-2), (0.5, 0.9, 1e-4)]
)
def test_sweep_evaluations_is_the_most_locate_crossing_makes(lo, hi, rtol):
    """Every crossing (log-spaced over the sweep, and just above each grid point: the longest bisection), and no
    crossing either way: ``locate_crossing`` never makes more evaluations than counted, and makes that many once."""
    grid = [lo * 2.0**j for j in range(64) if lo * 2.0**j < hi] + [hi]
    xs = [lo * (hi / lo) ** (k / 97) for k in range(1, 97)] + [g * (1 + 1e-12) for g in grid[:-1]]
    made = [
        certificates.locate_crossing(lambda r, x=x: 1 if r < x else -1, lo, hi, rtol=rtol)["evaluations"] for x in xs
    ]
    made += [certificates.locate_crossing(lambda r, s=s: s, lo, hi, rtol=rtol)["evaluations"] for s in (1, -1)]
    bound = dry_run.sweep_evaluations(lo, hi, rtol=rtol)
    assert max(made) == bound and all(m <= bound for m in made)


def test_sweep_evaluations_of_the_paper_sweeps():
    """MSE from 0.3/8 to 0.3*16: 8 grid points, then 10 halvings of a ratio-2 bracket to 1e-3; DINO capped at
    1.99: 7 grid points, the last interval [1.2, 1.99] also takes 10 halvings to 1e-3 (0.79 / 2^10 < 1.2e-3)."""
    assert dry_run.sweep_evaluations(0.0375, 4.8, rtol=1e-3) == 18
    assert dry_run.sweep_evaluations(0.0375, 1.99, rtol=1e-3) == 17
    assert dry_run.sweep_evaluations(1.0, 1.5, rtol=0.5) == 2  # one interval, no bisection: both ends


def test_compiled_projection_adds_each_units_compilation_to_its_fitted_warm_time():
    """Warm 1 s at n=32 and 2 s at n=64 (p = 1: 8 s at 256); compilation 4 s then 3 s (mean 3.5, spread 3-4)."""
    times = {"a": {32: (5.0, 1.0), 64: (5.0, 2.0)}, "b": {32: (1.0, 1.0), 64: (2.0, 1.0)}}
    rec = dry_run._compiled_projection(times, {"a": 10, "b": 2}, 256)
    a = rec["units"]["a"]
    assert a["exponent"] == pytest.approx(1.0) and a["projected_s"] == pytest.approx(80.0)
    assert a["compile_s"] == pytest.approx(35.0)
    # b: p = 0, 1 s each, compilation 0 (cold = warm: clipped at 0 where cold < warm) then 1 s
    assert rec["units"]["b"]["compile_s"] == pytest.approx(1.0)
    assert rec["projected_s"] == pytest.approx(80 + 35 + 2 + 1)
    assert rec["spread_s"] == pytest.approx([80 + 30 + 2 + 0, 80 + 40 + 2 + 2])
    assert rec["points"] == [[32.0, 12.0], [64.0, 22.0]] and rec["count"] == 12 and rec["method"] == dry_run.METHOD
    once = dry_run._compiled_projection(times, {"a": 10, "b": 2}, 256, {"a": 1, "b": 1})
    assert once["projected_s"] == pytest.approx(80 + 3.5 + 2 + 0.5)


def _stand_ins(monkeypatch):
    """Stand-ins whose (fake) cost is known: a unit costs ``n`` times its rate, and the first call of each unit
    at each batch also its compilation (``COMPILE``); the clock returns that cost."""
    rate = {"equilibrium": 1.0, "collapsed": 3.0, "pseudo_collapsed": 2.0, "certificate": 0.5, "evaluate": 0.25}
    seen, cost = set(), []

    def charge(unit, n, what):
        cost.append(n * rate[what] + (dry_run_compile if (unit, n) not in seen else 0.0))
        seen.add((unit, n))

    def run_case(cfg, o, a, bn, st, key, s):
        charge((o, a, bn, st), cfg.data.n, st)
        return {"objective": o, "state": st, "st_iterations": 25, "st_newton_steps": 2}

    def equilibrium_state(cfg, o, act, key, r):  # built untimed (a certificate's) or inside a sweep's evaluation
        return o, act, cfg.data.n

    def certificate_unit(cfg, state):
        o, act, n = state
        charge(("cert", o, act), n, "certificate")

    def measured_lambda_min(cfg, o, act, n, key):  # a sweep's evaluation of the stand-in state (o, act, n)
        charge(("sweep", o, act), n, "evaluate")
        return 1.0, 0.0

    def time_call(fn):
        out = fn()
        return cost.pop(), out

    monkeypatch.setattr(dry_run, "run_case", run_case)
    monkeypatch.setattr(dry_run, "_certificate_unit", certificate_unit)
    monkeypatch.setattr(certificates, "equilibrium_state", equilibrium_state)
    monkeypatch.setattr(certificates, "measured_lambda_min", measured_lambda_min)
    monkeypatch.setattr(harness, "time_call", time_call)
    width = {
        "points": [[4, 1.0]],
        "projected_s": 7.0,
        "spread_s": [6.0, 8.0],
        "compile_s": [1.0],
        "count": 3,
        "method": "measured per rung",
    }
    monkeypatch.setattr(dry_run, "width_part", lambda cfg, key: width)
    return rate


dry_run_compile = 10.0


def test_dry_measure_projects_every_part_of_the_real_run_with_its_compilation(monkeypatch, tmp_path):
    rate = _stand_ins(monkeypatch)
    cfg = suite.make_config("collapse_hessians", "tiny", dry_run=True)
    cfg.checkpoint_dir = str(tmp_path)  # a dry run stores no part
    N, full = cfg.data.n, list(all_cases(cfg))
    d = dry_run.dry_measure(cfg)["dry_run"]
    parts = d["analysis"]["parts"]
    assert list(parts) == ["cases", "certificates", "critical_sweeps", "widths"] and not any(tmp_path.iterdir())
    for st in ("equilibrium", "collapsed", "pseudo_collapsed"):  # count n rate N + count compilations
        count = sum(c[3] == st for c in full)
        u = parts["cases"]["units"][st]
        assert u["count"] == count and u["exponent"] == pytest.approx(1.0)
        assert u["projected_s"] + u["compile_s"] == pytest.approx(count * (rate[st] * N + dry_run_compile))
    kinds = {"linear": 2, "smooth": 2}  # tiny: identity and swish, one scale per equilibrium objective
    assert {k: u["count"] for k, u in parts["certificates"]["units"].items()} == kinds
    assert parts["certificates"]["projected_s"] == pytest.approx(4 * (0.5 * N + dry_run_compile))
    ((o, act, base),) = cfg.analysis.critical_sweep
    span = claims.claim(certificates.CRITICAL_RESIDUAL).thresholds["span"]
    evals = dry_run.sweep_evaluations(1 / span, span, rtol=cfg.analysis.critical_sweep_rtol)  # [p/span, span p]
    sweep = parts["critical_sweeps"]
    assert sweep["units"][f"{o}/{act}/scale {base:g}"]["count"] == evals
    # the base certificate is the certificates part's: a sweep adds only its evaluations, compiled once
    assert sweep["projected_s"] == pytest.approx(evals * 0.25 * N + dry_run_compile)
    assert d["projected_wall_time_s"] == pytest.approx(sum(p["projected_s"] for p in parts.values()))
    assert parts["widths"]["projected_s"] == 7.0 and d["method"] == dry_run.METHOD
    its = d["stationarity_iterations"]["byol/swish"]
    assert its[2] == its[3] == [25, 2] and its["same_at_both_batches"] and d["batches"] == [2, 3]
    # the mean warm time of a dry case of each state at the larger batch, n = 3
    assert math.isclose(d["step_time_s"], (rate["equilibrium"] + rate["collapsed"] + rate["pseudo_collapsed"]) * 3 / 3)
    shown = report_md._projected_part(d, "analysis")  # the report's dry-run table reads every part
    assert all(f"{k}: " in shown for k in parts)


def test_a_variant_without_states_projects_the_width_part_alone(monkeypatch):
    _stand_ins(monkeypatch)
    cfg = suite.make_config("collapse_hessians", "tiny", dry_run=True)
    cfg.analysis.states, cfg.analysis.critical_sweep = [], []
    d = dry_run.dry_measure(cfg)["dry_run"]
    assert list(d["analysis"]["parts"]) == ["widths"] and d["projected_wall_time_s"] == 7.0
    assert list(all_cases(cfg)) == []


def test_the_paper_variant_counts_35_certificates_by_head_kind_and_two_sweeps():
    cfg = suite.make_config("collapse_hessians", "paper", dry_run=True)
    units = dry_run._equilibrium_units(cfg)
    assert {k: u[3] for k, u in units.items()} == {"linear": 7, "piecewise": 7, "smooth": 21}
    assert {k: u[1] for k, u in units.items()} == {"linear": "identity", "piecewise": "relu", "smooth": "gelu"}
    assert [c[3] for c in dry_run._dry_cases(cfg)] == ["equilibrium"] * 4 + ["collapsed"] * 3
    # the dry run times the real run's paths: H_eff above the dense limit, the certificate's 512 x 512 blocks dense
    dry = dry_run._dry_config(cfg, dry_run.batches(cfg)[0])
    assert dry.analysis.max_dense_dim == cfg.analysis.max_dense_dim == 4096 and dry.data.n == 32
    assert dry.data.n * dry.data.d > geometry.MATRIX_FREE_ABOVE >= dry.data.d
    # each sweep [p / 4, 4 p] around its prediction: 5 grid points, then 10 halvings of a ratio-2 bracket to 1e-3
    span = claims.claim(certificates.CRITICAL_RESIDUAL).thresholds["span"]
    assert len(cfg.analysis.critical_sweep) == 2
    assert dry_run.sweep_evaluations(1 / span, span, rtol=cfg.analysis.critical_sweep_rtol) == 15
