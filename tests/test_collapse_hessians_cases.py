"""The equilibrium measurement of experiment 3 (experiments/collapse_hessians/cases.py, classify_resolved): the Lanczos
budget it starts from, when it measures again, and what it never refines."""

import types

import jax
import pytest

from experiments import suite
from experiments.collapse_hessians import cases, certificates

jax.config.update("jax_enable_x64", True)


def _cfg(steps=400, cap=1600):
    cfg = suite.make_config("collapse_hessians", "tiny")
    cfg.analysis.equilibrium_lanczos_steps, cfg.analysis.equilibrium_lanczos_max_steps = steps, cap
    return cfg


def _fake(monkeypatch, tol_by_steps, method="lanczos", lmin=1e-7):
    """classify_collapse replaced: at ``s`` steps, lambda_min ``lmin`` with tolerance ``tol_by_steps[s]``."""
    calls = []

    def classify_collapse(model, loss_fn, z, *, variables, lanczos_steps, **opts):
        calls.append(lanczos_steps)
        return types.SimpleNamespace(method=method, lambda_min={"full": lmin}, eig_tol=tol_by_steps[lanczos_steps])

    monkeypatch.setattr(cases.geometry, "classify_collapse", classify_collapse)
    return calls


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
    res, steps = cases.classify_resolved(_cfg(), None, {}, None, None, key=None)
    assert calls == expected_calls and steps == expected_calls[-1] and res.eig_tol == tols[steps]


def test_a_dense_zero_is_exact_and_never_measured_again(monkeypatch):
    calls = _fake(monkeypatch, {400: 1.0}, method="dense", lmin=0.0)
    res, steps = cases.classify_resolved(_cfg(), None, {}, None, None)
    assert calls == [400] and steps == 400 and res.lambda_min["full"] == 0.0


def test_a_budget_above_its_cap_is_refused_by_name(monkeypatch):
    _fake(monkeypatch, {})
    with pytest.raises(ValueError, match="equilibrium_lanczos_steps <= analysis.equilibrium_lanczos_max_steps"):
        cases.classify_resolved(_cfg(800, 400), None, {}, None, None)
    with pytest.raises(ValueError, match="got 0 and 400"):
        cases.classify_resolved(_cfg(0, 400), None, {}, None, None)


def test_the_variants_budgets_and_the_sweeps_unrefined_budget(monkeypatch):
    paper = suite.make_config("collapse_hessians", "paper").analysis
    smoke = suite.make_config("collapse_hessians", "smoke").analysis
    assert (paper.equilibrium_lanczos_steps, paper.equilibrium_lanczos_max_steps) == (400, 1600)
    assert (smoke.equilibrium_lanczos_steps, smoke.equilibrium_lanczos_max_steps) == (100, 100)
    calls = _fake(monkeypatch, {400: 1.0})  # a sweep evaluation reads the raw sign: one measurement, never refined
    eq = types.SimpleNamespace(loss_fn=None, z=None)
    assert certificates.measured_lambda_min(_cfg(), None, {}, eq, "swish", None) == (1e-7, 1.0) and calls == [400]


def test_a_real_equilibrium_row_records_its_budget_and_matches_the_certificates_rebuild():
    cfg = _cfg(100, 100)
    key = jax.random.PRNGKey(3)
    row = cases.run_case(cfg, "mse_target", "swish", False, "equilibrium", key, 10.0)
    _, _, eq = certificates.equilibrium_state(cfg, "mse_target", "swish", key, 10.0)
    assert row["lanczos_steps"] == 100 and row["method"] == "dense" and row["certified"]
    assert row["rho_norm"] == float(eq.premises.residual_norm)
