"""Experiment 3's pieces on hand-made inputs: the decide of each claim, the head driven to stationarity, DINO's scale."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from experiments import collapse_hessians, rules, stationary_heads
from experiments.configs import collapse_hessians as cfg_module
from ssl_geometry import geometry, heads, losses


def _row(objective, activation, kind, lmin, *, lmin_m=-0.1, state="equilibrium", **kw):
    base = {
        "objective": objective,
        "activation": activation,
        "head_kind": kind,
        "state": state,
        "batch_norm": False,
        "certified": state == "equilibrium",
        "holds": True,
        "residual_scale": 1.0,
        "lambda_min_H_eff": lmin,
        "eig_tol": 1e-12,
        "lambda_min_M": lmin_m,
        "margin": collapse_hessians.margin(lmin, lmin_m),
        "H_L_psd": True,
        "rho_norm": 1.0,
    }
    return {**base, **kw}


def _collapsed(objective, rho, stationary=True, rho_ref=1.0, s_min=0.5, s_max=2.0):
    return _row(
        objective,
        "swish",
        "smooth",
        -0.1,
        state="collapsed",
        forces_zero_residual=True,
        st_stationary=stationary,
        st_rho=rho,
        st_rho_ref=rho_ref,
        st_residual_tol=1e-8,
        st_within_bound=rho <= 1e-6,
        st_jac_sigma_min=s_min,
        st_jac_sigma_max=s_max,
        st_jac_rows=8,
        st_jac_cols=100,
        st_full_row_rank=s_min > 1e-5 * s_max,
    )


def _verdicts(rows):
    # the repaired claim's certificates, each predicting its row's measured sign (the rules are tested in
    # test_collapse_hessians_certificates.py)
    certs = [
        {
            "case": i,
            "conclusion": "stable",
            "critical_scale": 1.0,
            "critical_bounds": [1.0, 1.0],
            "rho_norm": 1.0,
            "predicted_sign": int(np.sign(r["lambda_min_H_eff"])) if abs(r["lambda_min_H_eff"]) > r["eig_tol"] else 0,
        }
        for i, r in enumerate(rows)
        if r["state"] == "equilibrium"
    ]
    d = collapse_hessians.decide(
        {"cases": rows, "certificates": certs, "critical_sweeps": []}, cfg_module.get_config("tiny")
    )
    return {(i["id"], i.get("subject")): i["verdict"] for i in d["claims"]}


def test_decide_each_claim_each_way():
    good = [
        _row("mse_target", "swish", "smooth", -0.02),
        _row("mse_target", "gelu", "smooth", -0.1),
        _row("dino_fixed_teacher", "swish", "smooth", 0.01, lmin_m=-0.02),  # strictly stable: a counterexample
        _row("mse_target", "identity", "linear", 0.003, lmin_m=0.0),
        _row("mse_target", "relu", "piecewise", 0.0),
        _collapsed("byol", 1e-12),
        _collapsed("vicreg", 0.0, rho_ref=0.0),
    ]
    v = _verdicts(good)
    assert v[("thm4.1-smooth-unstable", "mse_target")] == "supported"
    assert v[("thm4.1-smooth-unstable", "dino_fixed_teacher")] == "not supported"  # decided per objective
    assert v[("thm4.1-linear-psd", None)] == "supported"
    assert v[("stationarity-forces-rho-zero", None)] == "supported"
    assert v[("thm4.1-repaired-sign", None)] == "supported" and v[("thm4.1-critical-residual", None)] == "inconclusive"
    v = _verdicts(
        good[:1]
        + [_row("mse_target", "tanh", "smooth", 1e-14)]  # degenerate: |lambda_min| <= tol
        + [_row("mse_target", "identity", "linear", -1e-3, lmin_m=0.0), _collapsed("simsiam", 0.5)]
    )
    assert v[("thm4.1-smooth-unstable", "mse_target")] == "inconclusive"
    assert v[("thm4.1-linear-psd", None)] == "not supported"
    assert v[("stationarity-forces-rho-zero", None)] == "not supported"
    # Uncertified or BatchNorm equilibria never count; nothing certified: premise violated; no stationary head.
    v = _verdicts(
        [
            _row("mse_target", "swish", "smooth", -0.1, certified=False),
            _row("mse_target", "identity", "linear", -1.0, batch_norm=True),
            _collapsed("byol", 1.0, False),
        ]
    )
    assert v[("thm4.1-smooth-unstable", None)] == "premise violated"
    assert v[("thm4.1-linear-psd", None)] == "premise violated"
    assert v[("stationarity-forces-rho-zero", None)] == "inconclusive"


def test_dino_residual_scale_is_bounded_by_the_simplex():
    cfg = cfg_module.get_config("tiny")
    model = collapse_hessians.online_head(cfg, "swish", False, 1.0, False)
    variables = model.init(jax.random.PRNGKey(0))
    c = jax.random.normal(jax.random.PRNGKey(1), (cfg.data.d,), jnp.float64)
    with pytest.raises(ValueError, match="residual_scale.*< 2"):
        geometry.collapsed_equilibrium(
            model, variables, "dino_fixed_teacher", c, cfg.data.n, key=jax.random.PRNGKey(2), residual_scale=3.0
        )
    sizes = []
    for s in (1.0, 1.9):  # a real scale: the residual grows with it, the teacher stays a probability vector
        eq = geometry.collapsed_equilibrium(
            model, variables, "dino_fixed_teacher", c, cfg.data.n, key=jax.random.PRNGKey(2), residual_scale=s
        )
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
    loss = lambda u: losses.get("spectral_contrastive")(u, b)
    st = stationary_heads.stationary_head_state(model, variables, loss, z, key=jax.random.PRNGKey(3))
    assert st["loss"] == pytest.approx(-1.0, abs=1e-12) and st["rho_start"] > 1e-3
    assert st["stationary"] and st["within_bound"] and st["rho"] < 1e-10 and st["rho_ref"] > 1e-3


def test_a_rank_deficient_head_is_stationary_with_rho_nonzero_and_violates_the_premise():
    # At c = 0 a bias-free linear head outputs 0 for every weight: dh/dtheta = 0, so every head is stationary while
    # rho = grad_u L(0) = -(2/n) b != 0 -- the premise (full row rank) fails, and the rule says so for that state.
    d, k, n = 3, 5, 4
    model, variables = _linear_head(d, 4, k, jax.random.PRNGKey(0))
    z = jnp.zeros((n, d), jnp.float64)
    b = jnp.tile(jax.random.normal(jax.random.PRNGKey(2), (1, k), jnp.float64), (n, 1))
    st = stationary_heads.stationary_head_state(
        model, variables, lambda u: losses.get("spectral_contrastive")(u, b), z, key=jax.random.PRNGKey(3)
    )
    assert st["stationary"] and not st["within_bound"]
    assert st["rho"] == pytest.approx(2.0 / n * float(jnp.linalg.norm(b)), rel=1e-12)
    assert st["jac_sigma_max"] == 0.0 and st["jac_sigma_min"] == 0.0 and not st["full_row_rank"]
    assert (st["jac_rows"], st["jac_cols"]) == (k, d * 4 + 4 * k) and st["rho_implied_bound"] == float("inf")
    row = {
        **_collapsed("spectral_contrastive", st["rho"], rho_ref=st["rho_ref"]),
        **{
            f"st_{key}": st[key]
            for key in ("residual_tol", "jac_sigma_min", "jac_sigma_max", "jac_rows", "jac_cols", "full_row_rank")
        },
    }
    rho_zero = lambda rows: rules.decide_rho_zero(collapse_hessians.stationarity_states(rows))["verdict"]
    assert rho_zero([row]) == "premise violated"
    # beside a full-rank stationary state with rho = 0 the dead head is excluded (and named) and the finding holds
    both = rules.decide_rho_zero(collapse_hessians.stationarity_states([row, _collapsed("byol", 1e-12)]))
    assert both["verdict"] == "supported" and both["deciding"]["premise_violated_not_full_row_rank"] == 1
    assert "spectral_contrastive/swish" in both["reason"]


def test_stationary_head_state_rejects_a_batch_that_is_not_collapsed():
    model, variables = _linear_head(3, 4, 5, jax.random.PRNGKey(0))
    z = jax.random.normal(jax.random.PRNGKey(1), (4, 3), jnp.float64)
    with pytest.raises(ValueError, match="`z` must be a collapsed batch"):
        stationary_heads.stationary_head_state(model, variables, lambda u: jnp.sum(u**2), z, key=jax.random.PRNGKey(3))


def _sv(model, variables, c, **kw):
    flat, unravel = ravel_pytree(variables["params"])
    fn = lambda th: model.apply({**variables, "params": unravel(th)}, c[None, :])[0][0]
    return stationary_heads.head_jacobian_singular_values(fn, flat, **kw)


@pytest.mark.parametrize("dense", [True, False])
def test_head_jacobian_singular_values_of_a_two_layer_linear_head(dense):
    # h(c) = W2^T W1^T c (x @ W convention): dh/dW2 = I_k (x) (W1^T c)^T, dh/dW1 = W2^T (x) c^T, so
    # J J^T = |W1^T c|^2 I_k + |c|^2 W2^T W2, whose eigenvalues are |W1^T c|^2 + |c|^2 s_i(W2)^2 (0 beyond rank W2).
    d, hdim, k = 3, 4, 6
    model, variables = _linear_head(d, hdim, k, jax.random.PRNGKey(0))
    w1, w2 = (np.asarray(layer["w"]) for layer in variables["params"]["layers"])
    c = jax.random.normal(jax.random.PRNGKey(1), (d,), jnp.float64)
    a, cn = float(np.sum((w1.T @ np.asarray(c)) ** 2)), float(np.sum(np.asarray(c) ** 2))
    s2 = np.concatenate([np.linalg.svd(w2, compute_uv=False) ** 2, np.zeros(k - hdim)])  # k > hidden: rank W2 = 4
    sv = _sv(model, variables, c, max_dense_entries=(1 << 22) if dense else 1)
    assert sv["method"] == ("dense svd" if dense else "gram eigvalsh") and (sv["rows"], sv["cols"]) == (k, 36)
    assert sv["sigma_max"] == pytest.approx(np.sqrt(a + cn * s2.max()), rel=1e-10)
    assert sv["sigma_min"] == pytest.approx(np.sqrt(a), rel=1e-6)  # the Gram resolves sigma_min to sqrt(eps) sigma_max
    keys = ("sigma_min", "sigma_max", "rows", "cols")
    assert rules.rho_zero_full_row_rank({f"jac_{key}": sv[key] for key in keys})  # the dh/dW2 block: full row rank
    # c in null(W1^T): dh/dtheta = W2^T (x) c^T has rank rank(W2) = 4 < k = 6, so the premise fails
    w1_null = w1 - np.outer(np.asarray(c), np.asarray(c) @ w1) / cn
    v0 = {"params": {"layers": [{"w": jnp.asarray(w1_null)}, {"w": jnp.asarray(w2)}]}}
    sv = _sv(model, v0, c, max_dense_entries=(1 << 22) if dense else 1)
    assert sv["sigma_max"] == pytest.approx(np.sqrt(cn * s2.max()), rel=1e-10)
    assert sv["sigma_min"] <= 1e-7 * sv["sigma_max"]
    assert not rules.rho_zero_full_row_rank({f"jac_{key}": sv[key] for key in keys})


def test_head_jacobian_of_a_relu_head_with_every_hidden_unit_dead():
    # relu(W1^T c + b1) = 0 for every hidden unit: dh/dtheta is the output bias block I_k (every singular value 1,
    # full row rank) with a bias, and 0 (a dead head) without one.
    d, hdim, k = 3, 4, 2
    c = jnp.asarray([1.0, -2.0, 0.5])
    for bias in (True, False):
        model = heads.mlp(d, (hdim,), k, activation="relu", bias=bias, dtype=jnp.float64)
        variables = model.init(jax.random.PRNGKey(0))
        layers = [dict(layer) for layer in variables["params"]["layers"]]
        layers[0]["w"] = -jnp.outer(c, jnp.ones(hdim))  # every pre-activation -|c|^2 (+ b1 < 0) < 0
        if bias:
            layers[0]["b"] = -jnp.abs(layers[0]["b"])
        v = {"params": {"layers": layers}}
        pre = np.asarray(c) @ np.asarray(layers[0]["w"]) + (np.asarray(layers[0]["b"]) if bias else 0.0)
        assert np.all(pre < 0)
        for dense in (True, False):
            sv = _sv(model, v, c, max_dense_entries=(1 << 22) if dense else 1)
            if bias:
                assert sv["sigma_min"] == pytest.approx(1.0, rel=1e-12)
                assert sv["sigma_max"] == pytest.approx(1.0, rel=1e-12)
            else:
                assert sv["sigma_min"] == 0.0 and sv["sigma_max"] == 0.0


def test_head_jacobian_singular_values_rejects_bad_input():
    fn = lambda th: th[:2] * 2.0
    with pytest.raises(ValueError, match="`theta` must be a flat"):
        stationary_heads.head_jacobian_singular_values(fn, jnp.ones((2, 2)))
    with pytest.raises(ValueError, match="`max_dense_entries`"):
        stationary_heads.head_jacobian_singular_values(fn, jnp.ones(3), max_dense_entries=0)
    with pytest.raises(ValueError, match="`fn` must map theta to a vector"):
        stationary_heads.head_jacobian_singular_values(lambda th: th.sum(), jnp.ones(3))
    with pytest.raises(FloatingPointError, match="non-finite"):
        stationary_heads.head_jacobian_singular_values(lambda th: jnp.sqrt(th[:2]), jnp.zeros(3))
    sv = stationary_heads.head_jacobian_singular_values(lambda th: jnp.concatenate([th, th]), jnp.ones(2))
    assert sv["method"] == "k > P" and sv["sigma_min"] == 0.0 and sv["sigma_max"] == pytest.approx(np.sqrt(2.0))
