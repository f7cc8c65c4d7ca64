"""Experiment 3's pieces on hand-made inputs: the decide of each claim, the head driven to stationarity, DINO's scale."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import collapse_hessians, stationary_heads
from experiments.configs import collapse_hessians as cfg_module
from ssl_geometry import geometry, heads, losses


def _row(objective, activation, kind, lmin, *, lmin_m=-0.1, state="equilibrium", **kw):
    base = {"objective": objective, "activation": activation, "head_kind": kind, "state": state, "batch_norm": False,
            "certified": state == "equilibrium", "holds": True, "residual_scale": 1.0, "lambda_min_H_eff": lmin,
            "eig_tol": 1e-12, "lambda_min_M": lmin_m, "margin": collapse_hessians.margin(lmin, lmin_m),
            "H_L_psd": True}
    return {**base, **kw}


def _collapsed(objective, rho, stationary=True, rho_ref=1.0):
    return _row(objective, "swish", "smooth", -0.1, state="collapsed", forces_zero_residual=True, st_stationary=stationary,
                st_rho=rho, st_rho_ref=rho_ref, st_residual_tol=1e-8, st_within_bound=rho <= 1e-6)


def _verdicts(rows):
    d = collapse_hessians.decide({"cases": rows}, cfg_module.get_config("tiny"))
    return {(i["id"], i.get("subject")): i["verdict"] for i in d["claims"]}


def test_decide_each_claim_each_way():
    good = [_row("mse_target", "swish", "smooth", -0.02), _row("mse_target", "gelu", "smooth", -0.1),
            _row("dino_fixed_teacher", "swish", "smooth", 0.01, lmin_m=-0.02),  # strictly stable: a counterexample
            _row("mse_target", "identity", "linear", 0.003, lmin_m=0.0), _row("mse_target", "relu", "piecewise", 0.0),
            _collapsed("byol", 1e-12), _collapsed("vicreg", 0.0, rho_ref=0.0)]
    v = _verdicts(good)
    assert v[("thm4.1-smooth-unstable", "mse_target")] == "supported"
    assert v[("thm4.1-smooth-unstable", "dino_fixed_teacher")] == "not supported"  # decided per objective
    assert v[("thm4.1-linear-psd", None)] == "supported"
    assert v[("stationarity-forces-rho-zero", None)] == "supported"
    v = _verdicts(good[:1] + [_row("mse_target", "tanh", "smooth", 1e-14)]  # degenerate: |lambda_min| <= tol
                  + [_row("mse_target", "identity", "linear", -1e-3, lmin_m=0.0), _collapsed("simsiam", 0.5)])
    assert v[("thm4.1-smooth-unstable", "mse_target")] == "inconclusive"
    assert v[("thm4.1-linear-psd", None)] == "not supported"
    assert v[("stationarity-forces-rho-zero", None)] == "not supported"
    # Uncertified or BatchNorm equilibria never count; nothing certified: premise violated; no stationary head.
    v = _verdicts([_row("mse_target", "swish", "smooth", -0.1, certified=False),
                   _row("mse_target", "identity", "linear", -1.0, batch_norm=True), _collapsed("byol", 1.0, False)])
    assert v[("thm4.1-smooth-unstable", None)] == "premise violated"
    assert v[("thm4.1-linear-psd", None)] == "premise violated"
    assert v[("stationarity-forces-rho-zero", None)] == "inconclusive"


def test_dino_residual_scale_is_bounded_by_the_simplex():
    cfg = cfg_module.get_config("tiny")
    model = collapse_hessians.online_head(cfg, "swish", False, 1.0, False)
    variables = model.init(jax.random.PRNGKey(0))
    c = jax.random.normal(jax.random.PRNGKey(1), (cfg.data.d,), jnp.float64)
    with pytest.raises(ValueError, match="residual_scale.*< 2"):
        geometry.collapsed_equilibrium(model, variables, "dino_fixed_teacher", c, cfg.data.n,
                                       key=jax.random.PRNGKey(2), residual_scale=3.0)
    sizes = []
    for s in (1.0, 1.9):  # a real scale: the residual grows with it, the teacher stays a probability vector
        eq = geometry.collapsed_equilibrium(model, variables, "dino_fixed_teacher", c, cfg.data.n,
                                            key=jax.random.PRNGKey(2), residual_scale=s)
        P = np.asarray(jax.nn.softmax(eq.targets / 0.04, axis=-1))
        q = np.asarray(jax.nn.softmax(model.apply(variables, c[None])[0][0] / 0.1))
        assert eq.certified and np.all(P >= (1.0 - s / 2.0) * q - 1e-12)
        sizes.append(float(np.max(np.abs(np.asarray(eq.residual)))))
    assert sizes[1] == pytest.approx(1.9 * sizes[0], rel=1e-9)


def _linear_head(d, h, k, key):
    model = heads.mlp(d, (h,), k, activation="identity", bias=False, dtype=jnp.float64)
    return model, model.init(key)


def test_stationary_head_reaches_the_closed_form_minimum_and_rho_zero():
    # Spectral contrastive at a collapsed batch with the second view's rows fixed at b:
    # L(a) = -2 a.b + (a.b)^2 (a = h(c) in every row), stationary in the head iff a.b = 1, where L = -1 and rho = 0.
    d, k, n = 3, 5, 4
    model, variables = _linear_head(d, 4, k, jax.random.PRNGKey(0))
    z = jnp.tile(jax.random.normal(jax.random.PRNGKey(1), (1, d), jnp.float64), (n, 1))
    b = jnp.tile(jax.random.normal(jax.random.PRNGKey(2), (1, k), jnp.float64), (n, 1))
    loss = lambda u: losses.get("spectral_contrastive")(u, b)  # noqa: E731
    st = stationary_heads.stationary_head_state(model, variables, loss, z, key=jax.random.PRNGKey(3))
    assert st["loss"] == pytest.approx(-1.0, abs=1e-12) and st["rho_start"] > 1e-3
    assert st["stationary"] and st["within_bound"] and st["rho"] < 1e-10 and st["rho_ref"] > 1e-3


def test_a_rank_deficient_head_is_stationary_with_rho_nonzero_and_refutes():
    # At c = 0 a bias-free linear head outputs 0 for every weight: dh/dtheta = 0, so every head is stationary while
    # rho = grad_u L(0) = -(2/n) b != 0 -- the premise (full row rank) fails and the rule must say so.
    d, k, n = 3, 5, 4
    model, variables = _linear_head(d, 4, k, jax.random.PRNGKey(0))
    z = jnp.zeros((n, d), jnp.float64)
    b = jnp.tile(jax.random.normal(jax.random.PRNGKey(2), (1, k), jnp.float64), (n, 1))
    st = stationary_heads.stationary_head_state(model, variables, lambda u: losses.get("spectral_contrastive")(u, b),
                                                z, key=jax.random.PRNGKey(3))
    assert st["stationary"] and not st["within_bound"]
    assert st["rho"] == pytest.approx(2.0 / n * float(jnp.linalg.norm(b)), rel=1e-12)
    row = {**_collapsed("spectral_contrastive", st["rho"], rho_ref=st["rho_ref"]), "st_residual_tol": st["residual_tol"]}
    assert _verdicts([row])[("stationarity-forces-rho-zero", None)] == "not supported"
