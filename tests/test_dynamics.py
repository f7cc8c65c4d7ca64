"""Gradient flow vs discrete optimisers (ssl_geometry.dynamics), checked in float64."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import scipy.linalg as sla

# The small tanh-MLP regression shared with the flow benchmark (one definition).
from experiments.bench_flow import problem as _regression
from ssl_geometry import curvature, heads, metrics
from ssl_geometry import dynamics as D

# ---------------------------------------------------------------- quadratic problem


@pytest.fixture(scope="module")
def quad():
    rng = np.random.default_rng(0)
    q = rng.normal(size=(5, 5))
    a = q @ q.T / 5 + 0.2 * np.eye(5)
    th0 = rng.normal(size=5)
    c = rng.normal(size=5)
    return a, th0, c


def quad_loss(p, batch, a):
    return 0.5 * p @ a @ p


def test_flow_matches_expm_and_observes_at_exact_times(quad):
    a, th0, c = quad
    cj = jnp.asarray(c)
    save_at = np.array([0.0, 0.13, 0.5, 0.77, 1.0, 2.0])
    tr = D.gradient_flow(
        quad_loss,
        jnp.asarray(th0),
        t1=2.0,
        save_at=save_at,
        args=jnp.asarray(a),
        observe=lambda p, t, a: {"t": t, "cp": p @ cj, "p": p},
        rtol=1e-11,
        atol=1e-13,
    )
    assert tr.ok and tr.status == "successful" and tr.t_final == 2.0
    np.testing.assert_array_equal(tr.ts, save_at)
    np.testing.assert_allclose(tr.observed["t"], save_at, rtol=0, atol=1e-15)  # observe saw exactly these times
    ref = np.stack([sla.expm(-t * a) @ th0 for t in save_at])
    np.testing.assert_allclose(tr.observed["p"], ref, rtol=0, atol=1e-8)
    np.testing.assert_allclose(tr.observed["cp"], ref @ c, rtol=0, atol=1e-8)
    np.testing.assert_allclose(tr.params, ref[-1], rtol=0, atol=1e-8)
    assert tr.saved.all() and tr.n_steps > 0 and tr.n_grad_evals > tr.n_steps
    np.testing.assert_allclose(tr.last["cp"], ref[-1] @ c, atol=1e-8)


def test_gd_deviates_from_flow_at_order_lr_and_igr_at_order_lr2(quad):
    a, th0, _ = quad
    exact = sla.expm(-a) @ th0
    lrs = np.array([0.1, 0.05, 0.025, 0.0125])
    dev_gd, dev_igr = [], []
    for lr in lrs:
        steps = int(round(1.0 / lr))
        gd = D.discrete(
            quad_loss, jnp.asarray(th0), optax.sgd(lr), steps=steps, args=jnp.asarray(a), lr=lr, observe_every=steps
        )
        np.testing.assert_allclose(gd.ts, [0.0, 1.0])
        # GD on a quadratic is (I - lr A)^k theta0 exactly.
        np.testing.assert_allclose(gd.params, np.linalg.matrix_power(np.eye(5) - lr * a, steps) @ th0, atol=1e-12)
        dev_gd.append(np.linalg.norm(np.asarray(gd.params) - exact))
        igr = D.gradient_flow(
            quad_loss, jnp.asarray(th0), t1=1.0, save_at=[1.0], args=jnp.asarray(a), igr_lr=lr, rtol=1e-11, atol=1e-13
        )
        # the IGR flow of a quadratic is exp(-t (A + lr/2 A^2)) theta0
        np.testing.assert_allclose(igr.params, sla.expm(-(a + 0.5 * lr * a @ a)) @ th0, atol=1e-9)
        dev_igr.append(np.linalg.norm(np.asarray(gd.params) - np.asarray(igr.params)))
    slope_gd = np.polyfit(np.log(lrs), np.log(dev_gd), 1)[0]
    slope_igr = np.polyfit(np.log(lrs), np.log(dev_igr), 1)[0]
    assert 0.8 <= slope_gd <= 1.2, slope_gd
    assert 1.8 <= slope_igr <= 2.2, slope_igr  # GD follows the modified flow to second order
    assert all(i < g for i, g in zip(dev_igr, dev_gd))


# ---------------------------------------------------------------- small network


@pytest.fixture(scope="module")
def net_problem():
    """4 -> 16 -> 16 -> 1 tanh MLP (369 parameters), MSE on 32 points."""
    return _regression(32, 16)


@pytest.mark.slow  # end to end (subprocesses, full runs): the slow tier of .ci/run keeps README command 2 under 15 minutes
def test_every_registered_solver_agrees_with_tsit5():
    """Parametrised over the registry: a solver added to ``dynamics.SOLVERS`` is tested here."""
    loss, p0, data = _regression(8, 4)  # 4 -> 4 -> 4 -> 1: 45 parameters (Kvaerno5 forms Jacobians)
    save_at = np.linspace(0.0, 2.0, 5)
    obs = lambda p, t, d: loss(p, None, d)
    runs = {
        s: D.gradient_flow(
            loss,
            p0,
            t1=2.0,
            save_at=save_at,
            args=data,
            observe=obs,
            solver=s,
            rtol=1e-9,
            atol=1e-11,
            dt0=None if D.SOLVERS[s][3] else 0.01,
        )
        for s in D.SOLVERS
    }
    ref = runs["tsit5"]
    assert np.all(np.diff(ref.observed) < 0)  # the loss decreases along the flow
    for s, tr in runs.items():
        assert tr.ok, s
        np.testing.assert_allclose(tr.observed, ref.observed, rtol=0, atol=1e-8, err_msg=s)
        chex.assert_trees_all_close(tr.params, ref.params, rtol=0, atol=1e-7, custom_message=s)
    assert runs["rk4"].n_steps == 200 and runs["rk4"].n_grad_evals == 800
    assert runs["kvaerno5"].n_grad_evals is None


def test_edge_of_stability_gd_settles_at_2_over_lr_flow_does_not(net_problem):
    loss, p0, data = net_problem
    lr = 0.2
    hess = lambda p, t, d: curvature.hessian(lambda q: loss(q, None, d), p)
    gd = D.discrete(loss, p0, optax.sgd(lr), steps=800, args=data, lr=lr, observe=hess, observe_every=100)
    sharp_gd = np.linalg.eigvalsh(np.asarray(gd.observed))[:, -1]
    fl = D.gradient_flow(loss, p0, t1=160.0, save_at=gd.ts, args=data, observe=hess, rtol=1e-4, atol=1e-6)
    sharp_fl = np.linalg.eigvalsh(np.asarray(fl.observed))[:, -1]
    ratio_gd, ratio_fl = sharp_gd * lr / 2, sharp_fl * lr / 2
    assert ratio_gd[0] < 0.3 and ratio_fl[0] == pytest.approx(ratio_gd[0])  # starts well below 2/lr
    assert np.all(np.abs(ratio_gd[-3:] - 1) < 0.05), ratio_gd  # GD: sharpness settles at 2/lr
    assert np.all(ratio_fl[-3:] > 1.3), ratio_fl  # flow: progressive sharpening far past 2/lr
    assert np.all(np.diff(ratio_fl[2:]) > 0)
    np.testing.assert_allclose(D.sharpness(loss, gd.params, data), sharp_gd[-1], rtol=1e-10)


# ---------------------------------------------------------------- failures


def test_max_steps_raises_and_flags(quad):
    a, th0, _ = quad
    kw = dict(
        t1=2.0,
        save_at=np.linspace(0, 2, 5),
        args=jnp.asarray(a),
        rtol=1e-10,
        atol=1e-12,
        max_steps=4,
        observe=lambda p, t, a: {"t": t, "n": jnp.sum(p**2)},
    )
    with pytest.raises(D.DynamicsError, match="max_steps_reached.*Reached t = ") as err:
        D.gradient_flow(quad_loss, jnp.asarray(th0), **kw)
    tr = err.value.trajectory
    tr2 = D.gradient_flow(quad_loss, jnp.asarray(th0), throw=False, **kw)
    for t in (tr, tr2):
        assert not t.ok and t.status == "max_steps_reached" and t.n_steps == 4
        assert 0 < t.t_final < 2.0
        np.testing.assert_array_equal(t.saved, t.ts <= t.t_final)
        assert np.all(np.isnan(t.observed["n"][~t.saved])) and np.all(np.isfinite(t.observed["n"][t.saved]))
        # the last statistics are those of the state reached, at the time reached
        ref = sla.expm(-t.t_final * a) @ th0
        assert float(t.last["t"]) == t.t_final
        np.testing.assert_allclose(t.last["n"], ref @ ref, rtol=1e-6)


def test_flow_blow_up_is_reported_non_finite():
    # d p/dt = 4 p^3 blows up at t* = 1 / (8 p0^2) = 0.5; fixed-step RK4 overflows to inf.
    loss = lambda p, b, a: -jnp.sum(p**4)
    tr = D.gradient_flow(
        loss, jnp.array([0.5]), t1=1.0, save_at=np.linspace(0, 1, 11), solver="rk4", dt0=1e-3, throw=False
    )
    assert not tr.ok and tr.status == "non_finite"
    assert 0.45 < tr.t_final < 0.6
    assert tr.saved[:5].all() and not tr.saved[-1]
    with pytest.raises(D.DynamicsError, match="non_finite"):
        D.gradient_flow(loss, jnp.array([0.5]), t1=1.0, save_at=[1.0], solver="rk4", dt0=1e-3)
    # adaptive: the step size collapses towards the singularity -> explicit failure, not truncation
    tr = D.gradient_flow(loss, jnp.array([0.5]), t1=1.0, save_at=[0.25, 1.0], max_steps=500, throw=False)
    assert not tr.ok and tr.t_final < 0.51 and tr.saved.tolist() == [True, False]


def test_discrete_reports_first_non_finite_step():
    lr = 3.0  # p_{k+1} = p_k - 3 p_k = -2 p_k: diverges, loss 0.5 p^2 overflows
    loss = lambda p, b, a: 0.5 * jnp.sum(p**2)
    p = np.array([1.0])
    ref = None
    with np.errstate(over="ignore", invalid="ignore"):
        for k in range(2000):
            g = p
            new = p - lr * g
            if not (np.isfinite(0.5 * np.sum(p**2)) and np.all(np.isfinite(new))):
                ref = k
                break
            p = new
    assert ref is not None
    tr = D.discrete(
        loss,
        jnp.array([1.0]),
        optax.sgd(lr),
        steps=1000,
        lr=lr,
        observe_every=50,
        throw=False,
        observe=lambda q, t, a: q[0],
    )
    assert not tr.ok and tr.first_bad_step == ref and tr.n_steps == ref
    np.testing.assert_allclose(tr.params, p)  # last finite parameters
    np.testing.assert_array_equal(tr.saved, np.arange(21) * 50 <= ref)
    assert np.isnan(tr.observed[~tr.saved]).all() and np.isfinite(tr.observed[tr.saved]).all()
    assert tr.t_final == ref * lr
    with pytest.raises(D.DynamicsError, match=f"step {ref} "):
        D.discrete(loss, jnp.array([1.0]), optax.sgd(lr), steps=1000, lr=lr, observe_every=50)


# ---------------------------------------------------------------- optimisers, state, batches


def test_stateful_batchnorm_minibatch_run_matches_python_loop():
    head = heads.mlp(3, (6,), 2, activation="swish", batch_norm=True, dtype=jnp.float64)
    v0 = head.init(jax.random.PRNGKey(2))
    steps, n = 6, 8
    xs = jax.random.normal(jax.random.PRNGKey(3), (steps, n, 3), dtype=jnp.float64)

    def loss(p, state, x, args):
        u, new_state = head.apply({"params": p, **state}, x, train=True)
        return jnp.mean((u - 1.0) ** 2), new_state

    opt = optax.sgd(0.1, momentum=0.9)
    tr = D.discrete(
        loss,
        v0["params"],
        opt,
        steps=steps,
        batches=xs,
        lr=0.1,
        has_state=True,
        state0={"batch_stats": v0["batch_stats"]},
        observe_every=2,
        observe=lambda p, t, a: p["layers"][0]["w"][0, 0],
    )
    # independent reference: a Python loop of optax updates
    p, s, o = v0["params"], {"batch_stats": v0["batch_stats"]}, opt.init(v0["params"])
    ws = [p["layers"][0]["w"][0, 0]]
    for k in range(steps):
        (_, s_new), g = jax.value_and_grad(loss, has_aux=True)(p, s, xs[k], None)
        u, o = opt.update(g, o, p)
        p, s = optax.apply_updates(p, u), s_new
        if (k + 1) % 2 == 0:
            ws.append(p["layers"][0]["w"][0, 0])
    assert tr.ok and tr.n_steps == steps
    np.testing.assert_allclose(tr.ts, [0.0, 0.2, 0.4, 0.6])
    np.testing.assert_allclose(tr.observed, ws, rtol=1e-12)
    chex.assert_trees_all_close((tr.params, tr.state), (p, s), rtol=1e-12, atol=1e-14)
    # running statistics really moved (the state was carried)
    assert not np.allclose(tr.state["batch_stats"]["bn"][0]["mean"], 0.0)


def test_adam_and_lars_run_and_count(quad):
    a, th0, _ = quad
    for opt in (optax.adam(1e-2), optax.lars(1e-2)):
        tr = D.discrete(
            quad_loss,
            jnp.asarray(th0),
            opt,
            steps=20,
            args=jnp.asarray(a),
            observe_every=10,
            observe=lambda p, t, args: quad_loss(p, None, args),
        )
        assert tr.ok and tr.n_grad_evals == 20 and tr.observed[-1] < tr.observed[0]
        np.testing.assert_array_equal(tr.ts, [0, 10, 20])  # no lr: the time axis is the step


def test_count_evals_is_exact_for_rk4_and_bounds_tsit5(quad):
    a, th0, _ = quad
    tr = D.gradient_flow(
        quad_loss,
        jnp.asarray(th0),
        t1=1.0,
        save_at=[0.5, 1.0],
        args=jnp.asarray(a),
        solver="rk4",
        dt0=0.1,
        count_evals=True,
    )
    assert tr.n_grad_evals == 40 and tr.n_steps == 10
    tr = D.gradient_flow(quad_loss, jnp.asarray(th0), t1=1.0, save_at=[1.0], args=jnp.asarray(a), count_evals=True)
    attempted = tr.n_steps + tr.n_rejected
    assert 1 + 6 * attempted <= tr.n_grad_evals <= 3 + 6 * attempted


def test_bad_arguments_name_the_argument(quad):
    a, th0, _ = quad
    p0, aj = jnp.asarray(th0), jnp.asarray(a)
    with pytest.raises(ValueError, match="save_at"):
        D.gradient_flow(quad_loss, p0, t1=1.0, save_at=[0.0, 2.0], args=aj)
    with pytest.raises(ValueError, match="dt0"):
        D.gradient_flow(quad_loss, p0, t1=1.0, save_at=[1.0], args=aj, solver="rk4")
    with pytest.raises(ValueError, match="solver"):
        D.gradient_flow(quad_loss, p0, t1=1.0, save_at=[1.0], args=aj, solver="euler")
    with pytest.raises(ValueError, match="observe_every"):
        D.discrete(quad_loss, p0, optax.sgd(0.1), steps=10, observe_every=3, args=aj)
    with pytest.raises(ValueError, match="batches"):
        D.discrete(quad_loss, p0, optax.sgd(0.1), steps=10, batches=jnp.ones((9, 5, 5)))
    with pytest.raises(TypeError, match="optimizer"):
        D.discrete(quad_loss, p0, "sgd", steps=10, args=aj)


def test_a_flow_loss_or_observe_of_the_wrong_arity_is_refused_naming_the_signature():
    """``gradient_flow`` reads the loss's signature before JAX traces it: a one-argument loss (the JAX habit) is a
    ``TypeError`` naming ``loss_fn(params, batch, args) -> scalar`` and the function's own signature, not
    ``<lambda>() takes 1 positional argument but 3 were given`` from inside the solver; so is a two-argument
    ``observe``. A loss that binds but returns a vector is refused as before; a right one integrates."""
    p0, save = jnp.ones(2), jnp.array([0.0, 1.0])
    with pytest.raises(
        TypeError, match=r"`loss_fn` must be loss_fn\(params, batch, args\) -> scalar.*got <lambda>\(p\)"
    ):
        D.gradient_flow(lambda p: 0.5 * jnp.sum(p**2), p0, t1=1.0, save_at=save)
    with pytest.raises(TypeError, match=r"got <lambda>\(p, batch\): too many positional arguments"):
        D.gradient_flow(lambda p, batch: 0.5 * jnp.sum(p**2), p0, t1=1.0, save_at=save)
    with pytest.raises(TypeError, match=r"`observe` must be observe\(params, t, args\)"):
        D.gradient_flow(lambda p, b, a: 0.5 * jnp.sum(p**2), p0, t1=1.0, save_at=save, observe=lambda p: p)
    with pytest.raises(TypeError, match="returned shape"):
        D.gradient_flow(lambda p, b, a: p**2, p0, t1=1.0, save_at=save)
    tr = D.gradient_flow(lambda p, b, a: 0.5 * jnp.sum(p**2), p0, t1=1.0, save_at=save, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(tr.params, np.exp(-1.0) * np.ones(2), rtol=1e-8)


# ---------------------------------------------------------------- escape


def _traj(ts, observed, saved=None):
    ts = np.asarray(ts, float)
    return D.Trajectory(
        ts=ts,
        observed=observed,
        params=None,
        ok=True,
        status="successful",
        message="",
        t_final=float(ts[-1]),
        n_steps=len(ts),
        n_rejected=0,
        n_grad_evals=None,
        saved=np.ones(len(ts), bool) if saved is None else np.asarray(saved),
        last=None,
    )


def test_escape_time_on_constructed_trajectories():
    ts = np.linspace(0.0, 5.0, 6)
    rng = np.random.default_rng(0)
    direction = rng.normal(size=4)
    # outputs collapsed onto one direction, then spreading out with a growing random part
    outs = np.stack([direction + s * rng.normal(size=(16, 4)) for s in (0, 0, 0.01, 0.05, 0.2, 0.6)])
    std = np.array([float(metrics.normalized_std(o)) for o in outs])
    assert std[0] == pytest.approx(0.0, abs=1e-12) and np.all(np.diff(std[1:]) > 0)
    un = outs / np.linalg.norm(outs, axis=-1, keepdims=True)
    np.testing.assert_allclose(std, un.std(axis=1, ddof=1).mean(axis=-1), rtol=1e-12, atol=1e-14)
    thr = 0.5 * (std[3] + std[4])
    e = D.escape_time(_traj(ts, {"std": outs}), "std_threshold", threshold=thr)
    assert e.escaped and e.index == 4 and e.time == 4.0 and e.criterion == "std_threshold"
    assert e.threshold == thr and e.value == pytest.approx(std[4]) and not e.held_initially
    e2 = D.escape_time(_traj(ts, {"std": std}), "std_threshold", threshold=thr)
    assert e2.time == 4.0
    none = D.escape_time(_traj(ts, {"std": std}), "std_threshold", threshold=10.0)
    assert not none.escaped and none.time is None and "did not escape" in str(none)
    # unsaved (never reached) entries never count
    e3 = D.escape_time(_traj(ts, {"std": std}, saved=[1, 1, 1, 1, 0, 0]), "std_threshold", threshold=thr)
    assert not e3.escaped
    # parameter distance from the collapsed state
    params = {"w": np.outer(np.arange(6.0), np.ones(3))}  # |w(t) - 0| = sqrt(3) * k
    e4 = D.escape_time(_traj(ts, params), "distance", threshold=5.0, reference={"w": np.zeros(3)})
    assert e4.index == 3 and e4.value == pytest.approx(3 * np.sqrt(3))
    e5 = D.escape_time(_traj(ts, {"distance": np.arange(6.0)}), "distance", threshold=-1.0)
    assert e5.held_initially and e5.time == 0.0
    with pytest.raises(ValueError, match="observed"):
        D.escape_time(_traj(ts, {"x": std}), "std_threshold", threshold=0.1)
    with pytest.raises(ValueError, match="criterion"):
        D.escape_time(_traj(ts, {"std": std}), "speed", threshold=0.1)
