"""The jitted L-BFGS stationarity search (experiments/stationary_heads.py) against scipy's L-BFGS-B, on hand-made heads
with known stationary points and on one smoke collapsed state; its stops and its reuse of one compiled search."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize
from jax.flatten_util import ravel_pytree

from experiments import stationary_heads
from experiments.collapse_hessians.cases import siamese_problem
from experiments.configs import collapse_hessians as cfg_module
from ssl_geometry import heads

jax.config.update("jax_enable_x64", True)


def _linear(d, k, key):
    """``h(z) = z W`` (one bias-free linear layer, ``W`` of shape (d, k))."""
    model = heads.mlp(d, (), k, activation="identity", bias=False, dtype=jnp.float64)
    return model, model.init(key)


def _target_problem(seed, n=4, d=3, k=5):
    """``L(W) = (1/2) sum_i |c W - t|^2`` at a collapsed batch (every row ``c``): stationary iff ``c W = t``
    (then ``L = 0`` and ``rho = grad_u L = 0``), the minimiser nearest ``W_0`` being ``W_0 + c^T (t - c W_0) / |c|^2``."""
    model, variables = _linear(d, k, jax.random.PRNGKey(seed))
    c = jax.random.normal(jax.random.PRNGKey(seed + 100), (1, d), jnp.float64)
    t = jax.random.normal(jax.random.PRNGKey(seed + 200), (k,), jnp.float64)
    z = jnp.tile(c, (n, 1))
    return model, variables, (lambda u: 0.5 * jnp.sum((u - t) ** 2)), z, c[0], t


def _scipy_lbfgsb(model, variables, loss_fn, z, train=False, max_iter=400):
    flat0, unravel = ravel_pytree(variables["params"])
    vg = jax.jit(
        jax.value_and_grad(lambda th: loss_fn(model.apply({**variables, "params": unravel(th)}, z, train=train)[0]))
    )

    def fg(x):
        v, g = vg(jnp.asarray(x))
        return float(v), np.asarray(g, np.float64)

    opt = scipy.optimize.minimize(
        fg, np.asarray(flat0), jac=True, method="L-BFGS-B", options={"gtol": 0.0, "maxiter": max_iter}
    )
    return opt.x, fg(opt.x)


def test_lbfgs_reaches_the_known_minimiser_like_scipy_lbfgsb():
    model, variables, loss_fn, z, c, t = _target_problem(0)
    theta, it, stop = stationary_heads._lbfgs_search(model, variables, loss_fn, z, False, max_iter=400)
    W = np.asarray(theta).reshape(3, 5)
    # the minimiser: c W = t; L-BFGS from W_0 along gradients (all in span(c^T)) reaches the nearest one
    W0 = np.asarray(ravel_pytree(variables["params"])[0]).reshape(3, 5)
    nearest = W0 + np.outer(c, t - np.asarray(c) @ W0) / float(c @ c)
    np.testing.assert_allclose(W, nearest, atol=1e-9)
    assert 0 < it < 400 and stop in ("line search failed", "no decrease", "gtol")
    x_ref, (l_ref, g_ref) = _scipy_lbfgsb(model, variables, loss_fn, z)
    np.testing.assert_allclose(np.asarray(c) @ x_ref.reshape(3, 5), t, atol=1e-6)  # scipy's own stop: ftol
    st = stationary_heads.stationary_head_state(
        model, variables, loss_fn, z, key=jax.random.PRNGKey(1), method="lbfgs", newton_steps=0
    )
    assert st["search_method"] == "lbfgs" and st["newton_steps"] == 0
    assert st["loss"] <= max(l_ref, 1e-20) and st["grad_norm"] <= max(np.linalg.norm(g_ref), 1e-12)
    assert st["stationary"] and st["within_bound"] and st["rho"] < 1e-9 and st["rho_start"] > 1e-2


def test_one_compiled_search_serves_new_data_of_the_same_shapes():
    # the data (z, the target the loss closes over) are arguments of the compiled search: a second state of the
    # same shapes reuses it, and reaches its own minimiser (not the first state's)
    a, b = _target_problem(0), _target_problem(7)
    canon_a = stationary_heads._objective_program(*a[:4], False)[0]
    canon_b = stationary_heads._objective_program(*b[:4], False)[0]
    assert canon_a == canon_b and hash(canon_a) == hash(canon_b)  # one program: the jit cache key is equal
    before = stationary_heads._lbfgs_run._cache_size()
    for model, variables, loss_fn, z, c, t in (a, b):
        theta, _, _ = stationary_heads._lbfgs_search(model, variables, loss_fn, z, False, max_iter=400)
        np.testing.assert_allclose(np.asarray(c) @ np.asarray(theta).reshape(3, 5), np.asarray(t), atol=1e-9)
    assert stationary_heads._lbfgs_run._cache_size() - before <= 1


def test_the_search_reports_each_stop():
    model, variables, loss_fn, z, _, _ = _target_problem(0)
    # max_iter: three steps, not yet at the minimiser of an ill-conditioned quadratic in 15 parameters
    scale = jnp.linspace(1.0, 1e3, 5)
    th, it, stop = stationary_heads._lbfgs_search(
        model, variables, lambda u: jnp.sum(scale * (u - 1.0) ** 2), z, False, max_iter=3
    )
    assert (it, stop) == (3, "max_iter")
    # gtol: a head already stationary (|grad|_inf = 0 <= gtol = 0) takes no step
    zero = {"params": jax.tree.map(jnp.zeros_like, variables["params"])}
    th, it, stop = stationary_heads._lbfgs_search(model, zero, lambda u: jnp.sum(u**2), z, False, max_iter=50)
    assert (it, stop) == (0, "gtol") and float(jnp.max(jnp.abs(th))) == 0.0

    # no decrease: a gradient of the wrong sign makes the L-BFGS direction an ascent direction; the step the line
    # search returns raises L, so it is not taken and the search stops where it started
    @jax.custom_jvp
    def uphill(u):
        return jnp.sum(u**2)

    @uphill.defjvp
    def _uphill_jvp(primals, tangents):
        (u,), (du,) = primals, tangents
        return jnp.sum(u**2), jnp.sum(-2.0 * u * du)

    th, it, stop = stationary_heads._lbfgs_search(model, variables, uphill, z, False, max_iter=50)
    assert (it, stop) == (0, "no decrease")
    np.testing.assert_array_equal(np.asarray(th), np.asarray(ravel_pytree(variables["params"])[0]))
    # non-finite: a loss that is NaN at the start raises, naming what failed
    with pytest.raises(FloatingPointError, match="non-finite"):
        stationary_heads._lbfgs_search(model, variables, lambda u: jnp.sum(jnp.log(u)), z, False, max_iter=5)


def test_stationary_head_state_rejects_bad_search_arguments():
    model, variables, loss_fn, z, _, _ = _target_problem(0)
    kw = dict(key=jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match="`method`"):
        stationary_heads.stationary_head_state(model, variables, loss_fn, z, method="newton", **kw)
    with pytest.raises(ValueError, match="`max_iter`"):
        stationary_heads.stationary_head_state(model, variables, loss_fn, z, max_iter=-1, **kw)
    with pytest.raises(ValueError, match="`gtol`"):
        stationary_heads.stationary_head_state(model, variables, loss_fn, z, gtol=float("nan"), **kw)
    big_model, big_vars = _linear(64, 65, jax.random.PRNGKey(0))  # 4160 > MAX_DENSE_PARAMS parameters
    big_z = jnp.ones((2, 64), jnp.float64)
    with pytest.raises(ValueError, match="only for at most"):
        stationary_heads.stationary_head_state(big_model, big_vars, lambda u: jnp.sum(u**2), big_z, method="bfgs", **kw)


def test_smoke_collapsed_state_reaches_scipys_verdict_inputs():
    # SimSiam/swish at the smoke config's collapsed state: the jitted L-BFGS (no Newton polish) and scipy's
    # L-BFGS-B reach the same loss, and the L-BFGS head meets the stationarity rule with rho within its bound, as
    # scipy's BFGS head does
    cfg = cfg_module.get_config("smoke")
    model, variables, loss_fn, z1, train, _ = siamese_problem(
        cfg, "simsiam", "swish", False, "collapsed", jax.random.PRNGKey(cfg.seed)
    )
    key = jax.random.PRNGKey(3)
    new = stationary_heads.stationary_head_state(
        model, variables, loss_fn, z1, key=key, train=train, method="lbfgs", newton_steps=0
    )
    old = stationary_heads.stationary_head_state(
        model, variables, loss_fn, z1, key=key, train=train, method="bfgs", newton_steps=0
    )
    _, (l_ref, g_ref) = _scipy_lbfgsb(model, variables, loss_fn, z1, train)
    assert new["loss"] == pytest.approx(l_ref, abs=1e-9) and new["loss"] == pytest.approx(old["loss"], abs=1e-12)
    assert new["grad_norm"] <= max(np.linalg.norm(g_ref), old["grad_norm"])
    for k in ("stationary", "within_bound", "full_row_rank"):
        assert new[k] == old[k] is True, k
    assert new["rho"] <= new["rho_bound"] and new["rho_start"] > 1e3 * new["rho_bound"]


def test_matrix_free_newton_polish_reaches_the_minimiser_above_the_dense_threshold():
    # A linear head with 5000 > MAX_DENSE_PARAMS parameters and L = |c W - t|^2 / 2 summed over a collapsed batch:
    # one L-BFGS iteration leaves it short of stationary; the matrix-free Newton step (CG on Hessian-vector
    # products) then lands on the minimiser nearest W_0, W_0 + c^T (t - c W_0) / |c|^2 (H is n |c|^2 on span(c)),
    # which the dense threshold would otherwise have left to no Newton step at all.
    d, k, n = 50, 100, 3
    model, variables = _linear(d, k, jax.random.PRNGKey(5))
    c = jax.random.normal(jax.random.PRNGKey(6), (d,), jnp.float64)
    t = jax.random.normal(jax.random.PRNGKey(7), (k,), jnp.float64)
    z = jnp.tile(c[None], (n, 1))
    loss_fn = lambda u: 0.5 * jnp.sum((u - t) ** 2)
    kw = dict(key=jax.random.PRNGKey(0), max_iter=1, measure_rank=False)
    assert d * k > stationary_heads.MAX_DENSE_PARAMS
    bare = stationary_heads.stationary_head_state(model, variables, loss_fn, z, newton_steps=0, **kw)
    polished = stationary_heads.stationary_head_state(model, variables, loss_fn, z, **kw)
    assert bare["search_method"] == polished["search_method"] == "lbfgs"
    assert not bare["stationary"] and bare["grad_norm"] > 1e-6
    assert polished["stationary"] and 1 <= polished["newton_steps"] <= 5
    assert polished["rho"] < 1e-10 < bare["rho"]


def test_newton_cg_step_equals_the_dense_minimum_norm_step():
    # A linear head 4 -> 3 (P = 12) under a convex non-quadratic loss: H = J^T H_L J is positive semi-definite of
    # rank 3 < 12 (singular, as for an over-parametrised head). CG from 0 on H s = g then gives the minimum-norm
    # solution, the dense least-squares step, to rounding.
    model, variables = _linear(4, 3, jax.random.PRNGKey(2))
    c = jax.random.normal(jax.random.PRNGKey(3), (1, 4), jnp.float64)
    z = jnp.tile(c, (2, 1))
    t = jnp.array([0.3, -0.2, 0.5])
    loss_fn = lambda u: jnp.sum(jnp.log(jnp.cosh(u - t)))
    canon, consts, theta = stationary_heads._objective_program(model, variables, loss_fn, z, False)
    g = jax.grad(lambda th: canon(consts, th))(theta)
    H = np.asarray(jax.hessian(lambda th: canon(consts, th))(theta))
    lam = np.linalg.eigvalsh(0.5 * (H + H.T))
    assert lam[0] > -1e-12 and np.sum(lam > 1e-10) == 3  # the premise: PSD and singular
    dense = np.linalg.lstsq(0.5 * (H + H.T), np.asarray(g), rcond=1e-12)[0]
    cg = np.asarray(stationary_heads._newton_cg_step(canon, theta, consts, g, 6))
    np.testing.assert_allclose(cg, dense, rtol=1e-9, atol=1e-12 * np.linalg.norm(dense))


def test_the_rank_premise_reads_one_row_without_batchnorm_and_the_whole_batch_with_it():
    """The head-Jacobian singular values of the stationarity premise come from ``h(z[:1])`` when ``train`` is false
    (rows independent: the same values as row 0 of ``h(z)``, n times cheaper) and from the whole batch under
    train-mode BatchNorm, where row 0 depends on every row (one row has no batch statistics: refused)."""
    cfg = cfg_module.get_config("tiny")
    key = jax.random.PRNGKey(3)
    model, variables, loss_fn, z, train, _ = siamese_problem(cfg, "byol", "swish", False, "collapsed", key)
    assert not train and z.shape[0] > 1
    st = stationary_heads.stationary_head_state(model, variables, loss_fn, z, key=key, max_iter=0, newton_steps=0)
    assert st["iterations"] == 0 and st["newton_steps"] == 0  # so theta* is the initial head
    flat, unravel = ravel_pytree(variables["params"])
    for rows in (z, z[:1]):
        fn = lambda th, rows=rows: model.apply({**variables, "params": unravel(th)}, rows, train=False)[0][0]
        sv = stationary_heads.head_jacobian_singular_values(fn, jnp.asarray(flat))
        np.testing.assert_allclose(
            [st["jac_sigma_min"], st["jac_sigma_max"]], [sv["sigma_min"], sv["sigma_max"]], rtol=1e-12
        )
        assert st["jac_rows"] == 4 and st["jac_cols"] == flat.size
    bn_model = heads.mlp(2, (5,), 4, activation="swish", batch_norm=True, bias=False, dtype=jnp.float64)
    bn_vars = bn_model.init(jax.random.PRNGKey(0))
    zb = jax.random.normal(jax.random.PRNGKey(1), (6, 2), jnp.float64)
    bflat, bun = ravel_pytree(bn_vars["params"])
    whole = lambda th: bn_model.apply({**bn_vars, "params": bun(th)}, zb, train=True)[0][0]
    one = lambda th: bn_model.apply({**bn_vars, "params": bun(th)}, zb[:1], train=True)[0][0]
    assert np.all(np.isfinite(np.asarray(whole(bflat))))
    with pytest.raises(ValueError, match="at least 2 samples"):  # one row has no batch statistics: keep the batch
        one(bflat)
