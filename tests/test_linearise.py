"""Linearised flow and SGD maps (ssl_geometry.dynamics) against closed forms and expm."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import scipy.linalg

from ssl_geometry import dynamics, heads


def _spd(m, seed, shift=0.0):
    a = np.random.default_rng(seed).normal(size=(m, m))
    return a @ a.T / m + shift * np.eye(m)


def test_quadratic_loss_jacobian_is_minus_hessian_with_known_rate():
    # L = 1/2 y^T A y with A indefinite: F = -A y, J = -A, rate = -lambda_min(A).
    A = _spd(5, 0) - 0.7 * np.eye(5)
    field = dynamics.gradient_field(lambda y, b, a: 0.5 * y @ (a @ y))
    lin = dynamics.linearise(field, jnp.zeros(5), jnp.asarray(A))
    np.testing.assert_allclose(lin.jacobian, -A, atol=1e-13)
    assert lin.rate == pytest.approx(-np.linalg.eigvalsh(A)[0], abs=1e-12)
    assert lin.field_norm == 0.0 and lin.asymmetry < 1e-14
    # Per-group rates: the head (second block) tau times faster -> J = -diag(1, tau) A.
    tau = 4.0
    field2 = dynamics.gradient_field(
        lambda y, b, a: 0.5 * jnp.concatenate(y) @ (a @ jnp.concatenate(y)), rates=(1.0, tau)
    )
    lin2 = dynamics.linearise(field2, (jnp.zeros(2), jnp.zeros(3)), jnp.asarray(A))
    D = np.diag([1.0, 1.0, tau, tau, tau])
    np.testing.assert_allclose(lin2.jacobian, -D @ A, atol=1e-12)
    assert lin2.rate == pytest.approx(np.max(np.linalg.eigvals(-D @ A).real), abs=1e-12)


def test_stop_gradient_field_is_not_symmetric_and_matches_expm():
    # L = 1/2 |y - sg(B y + c)|^2: F = -(y - B y - c), J = B - I (not symmetric, not -Hessian).
    rng = np.random.default_rng(1)
    B = rng.normal(size=(4, 4)) * 0.6
    c = rng.normal(size=4)
    y_eq = np.linalg.solve(np.eye(4) - B, c)
    loss = lambda y, b, a: 0.5 * jnp.sum((y - jax.lax.stop_gradient(a[0] @ y + a[1])) ** 2)
    args = (jnp.asarray(B), jnp.asarray(c))
    # lax.stop_gradient inside the loss also freezes the target in the outer Jacobian: J = -I (wrong).
    frozen = dynamics.linearise(dynamics.gradient_field(loss), jnp.asarray(y_eq), args)
    np.testing.assert_allclose(frozen.jacobian, -np.eye(4), atol=1e-12)
    # The target as its own function: the exact Jacobian of the field.
    field = dynamics.gradient_field(
        lambda y, target, a: 0.5 * jnp.sum((y - target) ** 2), target_fn=lambda y, a: a[0] @ y + a[1]
    )
    lin = dynamics.linearise(field, jnp.asarray(y_eq), args)
    np.testing.assert_allclose(lin.jacobian, B - np.eye(4), atol=1e-12)
    assert lin.asymmetry > 0.1 and lin.field_norm < 1e-12
    # The predicted rate is the growth rate of expm(J t) delta0 at large t ...
    d0 = rng.normal(size=4)
    t1, t2 = 20.0, 30.0
    g = lambda t: np.linalg.norm(scipy.linalg.expm(lin.jacobian * t) @ d0)
    measured = (np.log(g(t2)) - np.log(g(t1))) / (t2 - t1)
    assert measured == pytest.approx(lin.rate, abs=2e-3)
    # ... and the actual (affine, so exactly linear) flow from y_eq + delta0 follows expm(J t).
    f = lambda y, a: -(y - a[0] @ y - a[1])
    ts = np.array([0.0, 1.0, 2.0])
    tr = dynamics.gradient_flow(
        loss, jnp.asarray(y_eq + 1e-3 * d0), t1=2.0, save_at=ts, args=args, rtol=1e-11, atol=1e-14
    )
    pred = y_eq + scipy.linalg.expm(lin.jacobian * 2.0) @ (1e-3 * d0)
    np.testing.assert_allclose(np.asarray(tr.params), pred, atol=1e-10)
    path = dynamics.predict_flow(lin.jacobian, 1e-3 * d0, ts)
    np.testing.assert_allclose(path[-1], pred - y_eq, atol=1e-14)
    with pytest.raises(ValueError, match="uniformly"):
        dynamics.predict_flow(lin.jacobian, d0, np.array([0.0, 1.0, 3.0]))
    assert np.asarray(f(jnp.asarray(y_eq), args)) @ np.ones(4) == pytest.approx(0.0, abs=1e-12)


def test_nonlinear_flow_near_equilibrium_grows_at_predicted_rate():
    # L(y) = 1/2 y^T A y + 1/4 |y|^4 (A indefinite): y* = 0 is an equilibrium, unstable along A's
    # negative eigenvector. A deviation of size 1e-6 grows at -lambda_min(A) in the linear regime.
    A = np.diag([-0.5, 0.3, 1.2])
    loss = lambda y, b, a: 0.5 * y @ (a @ y) + 0.25 * jnp.sum(y**2) ** 2
    lin = dynamics.linearise(dynamics.gradient_field(loss), jnp.zeros(3), jnp.asarray(A))
    assert lin.rate == pytest.approx(0.5, abs=1e-12)
    assert lin.stiffness == pytest.approx(1.2 / 0.5)
    ts = np.linspace(0.0, 10.0, 11)
    tr = dynamics.gradient_flow(
        loss,
        jnp.full(3, 1e-6),
        t1=10.0,
        save_at=ts,
        args=jnp.asarray(A),
        observe=lambda p, t, a: jnp.linalg.norm(p),
        rtol=1e-10,
        atol=1e-16,
    )
    slope = np.polyfit(ts[5:], np.log(np.asarray(tr.observed)[5:]), 1)[0]
    assert slope == pytest.approx(lin.rate, rel=1e-3)


def test_visible_rate_ignores_modes_the_observable_cannot_see():
    J = np.diag([2.0, -1.0, 0.5])
    lin = dynamics.linearise(lambda y, a: jnp.asarray(J) @ y, jnp.zeros(3))
    assert lin.rate == 2.0
    assert dynamics.visible_rate(lin, np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])) == pytest.approx(0.5)
    assert dynamics.visible_rate(lin, np.array([[0.0, 1.0, 0.0]])) == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="observable"):
        dynamics.visible_rate(lin, np.ones((2, 4)))


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_sgd_growth_matches_optax_steps_on_a_quadratic(momentum):
    # Hessian eigenvalues 0.2 and 5: plain GD at lr 0.5 escapes along 5 (|1 - 0.5*5| = 1.5 > 1:
    # beyond 2/lr) though the flow is stable; heavy ball (mu = 0.9) is stable up to
    # lr h < 2 (1 + mu) = 3.8, so it escapes at lr 0.9 (4.5). The predicted factor is the measured one.
    H = np.diag([0.2, 5.0])
    loss = lambda p, b, a: 0.5 * p @ (a @ p)
    lin = dynamics.linearise(dynamics.gradient_field(loss), jnp.zeros(2), jnp.asarray(H))
    assert lin.rate < 0
    lr = 0.5 if momentum == 0.0 else 0.9
    assert dynamics.sgd_growth(np.diag([-0.2, -5.0]), 0.5, 0.9) < 1.0  # heavy ball stable at lr h = 2.5 < 3.8
    g = dynamics.sgd_growth(lin.jacobian, lr, momentum)
    if momentum == 0.0:
        assert g == pytest.approx(1.5)
    steps = 60
    tr = dynamics.discrete(
        loss,
        jnp.array([1e-8, 1e-8]),
        optax.sgd(lr, momentum=momentum or None),
        steps=steps,
        args=jnp.asarray(H),
        observe=lambda p, t, a: jnp.linalg.norm(p),
        observe_every=1,
    )
    norms = np.asarray(tr.observed)
    measured = np.exp((np.log(norms[-1]) - np.log(norms[steps // 2])) / (steps - steps // 2))
    assert measured == pytest.approx(g, rel=2e-2)
    # The linearised SGD map reproduces the optax iterates exactly (the loss is quadratic).
    pred = dynamics.predict_sgd(lin.jacobian, np.array([1e-8, 1e-8]), lr, momentum, steps)
    np.testing.assert_allclose(np.linalg.norm(pred, axis=1), norms, rtol=1e-10)
    assert g > 1.0
    # Small lr: both modes contract.
    assert dynamics.sgd_growth(lin.jacobian, 0.05, momentum) < 1.0
    # The per-eigenvalue roots are the spectral radius of the full companion map.
    A = dynamics.sgd_map(lin.jacobian, lr, momentum)
    assert g == pytest.approx(np.max(np.abs(np.linalg.eigvals(A))), rel=1e-12)
    with pytest.raises(ValueError, match="momentum"):
        dynamics.sgd_map(lin.jacobian, 0.1, 1.0)


def test_sgd_growth_roots_equal_companion_spectrum_for_a_nonsymmetric_jacobian():
    J = np.random.default_rng(4).normal(size=(6, 6))
    for lr, mu in ((0.3, 0.9), (0.1, 0.0), (1.0, 0.5)):
        ref = np.max(np.abs(np.linalg.eigvals(dynamics.sgd_map(J, lr, mu))))
        assert dynamics.sgd_growth(J, lr, mu) == pytest.approx(ref, rel=1e-10)


def test_batchnorm_amplification_is_gamma_over_sqrt_var_plus_eps():
    head = heads.mlp(3, (), 3, activation="identity", final_batch_norm=True, bias=False, dtype=jnp.float64)
    v = head.init(jax.random.PRNGKey(0))
    v = {**v, "params": {**v["params"]}}
    W = jnp.eye(3)
    v["params"]["layers"] = [{**v["params"]["layers"][0], "w": W}]
    fn = lambda x: head.apply(v, x, train=True)[0]
    rng = np.random.default_rng(2)
    x = jnp.asarray(np.ones((8, 3)) + 1e-4 * rng.normal(size=(8, 3)))
    delta = rng.normal(size=(8, 3))
    delta = jnp.asarray(delta - delta.mean(0))
    amp = dynamics.amplification(fn, x, delta)
    var = np.var(np.asarray(x), axis=0)
    # Exact for a perturbation orthogonal (per feature) to the current spread; here bounded by
    # the collapsed-batch value and far above 1.
    assert amp <= 1.0 / np.sqrt(var.min() + 1e-5) + 1e-9
    assert amp > 0.5 / np.sqrt(var.max() + 1e-5) > 50
    with pytest.raises(ValueError, match="non-zero"):
        dynamics.amplification(fn, x, jnp.zeros_like(x))
