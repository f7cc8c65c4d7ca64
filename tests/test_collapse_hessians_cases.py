"""The equilibrium measurement of experiment 3 (experiments/collapse_hessians/cases.py, classify_resolved): the Lanczos
budget it starts from, when it measures again, and what it never refines."""

import types

import jax
import pytest

from experiments import suite
from experiments.collapse_hessians import cases, certificates
from ssl_geometry import geometry

jax.config.update("jax_enable_x64", True)


def _cfg(steps=400, cap=1600):
    cfg = suite.make_config("collapse_hessians", "tiny")
    cfg.analysis.equilibrium_lanczos_steps, cfg.analysis.equilibrium_lanczos_max_steps = steps, cap
    return cfg


def _fake(monkeypatch, tol_by_steps, method="lanczos", lmin=1e-7):
    """cases.spectrum replaced: ``H_eff`` at ``s`` steps has lambda_min ``lmin`` with tolerance ``tol_by_steps[s]``;
    ``G`` and ``M`` are ``2`` and ``-3``; the conclusion returns the spectrum it was given (``.spec``)."""
    calls = []

    def spectrum(cfg, model, variables, eq, key, steps, parts):
        calls.append((steps, parts))
        val = {"full": lmin, "metric": 2.0, "interaction": -3.0}
        tol = {"full": tol_by_steps[steps] if "full" in parts else None, "metric": 0.1, "interaction": 0.1}
        pick = lambda d: {p: d[p] for p in parts}
        return geometry.CollapseSpectrum(
            lambda_min=pick(val),
            lambda_max=pick(val),
            sign_tol=pick(tol),
            method=method,
            residual_norms={},
            notes=tuple(f"note {p}" for p in parts),
        )

    def conclusion(premises, spec):
        assert premises == "the construction's premises"
        return types.SimpleNamespace(
            spec=spec, method=spec.method, lambda_min=spec.lambda_min, eig_tol=spec.sign_tol["full"]
        )

    monkeypatch.setattr(cases, "spectrum", spectrum)
    monkeypatch.setattr(cases.geometry, "thm41_conclusion", conclusion)
    return calls


_EQ = types.SimpleNamespace(premises="the construction's premises")


@pytest.mark.parametrize(
    "tols,expected_calls",
    [
        ({400: 3e-8}, [400]),  # resolved at the first budget: measured once
        ({400: 2e-7, 800: 6e-9}, [400, 800]),  # dino/identity/1.8 at paper: 1.15e-7 +- 1.8e-7, then resolved
        ({400: 2e-7, 800: 2e-7, 1600: 5e-8}, [400, 800, 1600]),
        ({400: 2e-7, 800: 2e-7, 1600: 2e-7}, [400, 800, 1600]),  # unresolved at the cap: returned as it is
    ],
)
def test_an_unresolved_lanczos_measurement_is_repeated_with_the_budget_doubled_up_to_the_cap(
    monkeypatch, tols, expected_calls
):
    calls = _fake(monkeypatch, tols)
    res, steps = cases.classify_resolved(_cfg(), None, {}, _EQ, None)
    side = ("metric", "interaction")
    assert calls == [(400, side)] + [(s, ("full",)) for s in expected_calls]  # G and M once, H_eff refined alone
    assert steps == expected_calls[-1] and res.eig_tol == tols[steps]
    assert res.spec.lambda_min == {"metric": 2.0, "interaction": -3.0, "full": 1e-7}
    assert res.spec.sign_tol == {"metric": 0.1, "interaction": 0.1, "full": tols[steps]}
    assert res.spec.notes == ("note metric", "note interaction", "note full")


def test_a_dense_zero_is_exact_and_never_measured_again(monkeypatch):
    calls = _fake(monkeypatch, {400: 1.0}, method="dense", lmin=0.0)
    res, steps = cases.classify_resolved(_cfg(), None, {}, _EQ, None)
    assert [c[0] for c in calls] == [400, 400] and steps == 400 and res.lambda_min["full"] == 0.0


def test_a_budget_above_its_cap_is_refused_by_name(monkeypatch):
    _fake(monkeypatch, {})
    with pytest.raises(ValueError, match="equilibrium_lanczos_steps <= analysis.equilibrium_lanczos_max_steps"):
        cases.classify_resolved(_cfg(800, 400), None, {}, _EQ, None)
    with pytest.raises(ValueError, match="got 0 and 400"):
        cases.classify_resolved(_cfg(0, 400), None, {}, _EQ, None)


def test_the_variants_budgets_and_the_sweeps_unrefined_budget(monkeypatch):
    paper = suite.make_config("collapse_hessians", "paper").analysis
    smoke = suite.make_config("collapse_hessians", "smoke").analysis
    assert (paper.equilibrium_lanczos_steps, paper.equilibrium_lanczos_max_steps) == (400, 1600)
    assert (smoke.equilibrium_lanczos_steps, smoke.equilibrium_lanczos_max_steps) == (100, 100)
    calls = _fake(monkeypatch, {400: 1.0})  # a sweep evaluation reads the raw sign: H_eff alone, never refined
    monkeypatch.setattr(certificates, "spectrum", cases.spectrum)
    assert certificates.measured_lambda_min(_cfg(), None, {}, _EQ, None) == (1e-7, 1.0)
    assert calls == [(400, ("full",))]
    assert (paper.metric_interaction_lanczos_steps, smoke.metric_interaction_lanczos_steps) == (100, 100)


def test_a_real_equilibrium_row_records_its_budget_and_matches_the_certificates_rebuild():
    cfg = _cfg(100, 100)
    key = jax.random.PRNGKey(3)
    row = cases.run_case(cfg, "mse_target", "swish", False, "equilibrium", key, 10.0)
    _, _, eq = certificates.equilibrium_state(cfg, "mse_target", "swish", key, 10.0)
    assert row["lanczos_steps"] == 100 and row["method"] == "dense" and row["certified"]
    assert row["rho_norm"] == float(eq.premises.residual_norm)


def test_a_lanczos_equilibrium_row_reads_the_constructions_premises_and_its_own_budgets():
    """Above the dense limit (``max_dense_dim = 1``): ``H_eff`` at its budget, ``G`` and ``M`` at theirs, and the
    premises (here ``lambda_min(H_L)``) those the construction measured, not measured again."""
    cfg = _cfg(12, 12)
    cfg.analysis.max_dense_dim, cfg.analysis.metric_interaction_lanczos_steps = 1, 2
    key = jax.random.PRNGKey(3)
    row = cases.run_case(cfg, "mse_target", "swish", False, "equilibrium", key, 10.0)
    model, variables, eq = certificates.equilibrium_state(cfg, "mse_target", "swish", key, 10.0)
    assert row["method"] == "lanczos" and row["lanczos_steps"] == 12 and row["certified"]
    assert row["lambda_min_H_L"] == eq.premises.lambda_min_loss_hessian
    g_m = cases.spectrum(cfg, model, variables, eq, key, 12, parts=("metric", "interaction"))
    assert g_m.residual_norms["metric"]["num_steps"] == 2 and row["lambda_min_G"] == g_m.lambda_min["metric"]
    assert row["lambda_min_H_eff"] == certificates.measured_lambda_min(cfg, model, variables, eq, key)[0]
