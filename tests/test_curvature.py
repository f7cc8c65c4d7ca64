"""Tests for ssl_geometry.curvature (float64 unless stated; conftest enables x64)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from compilations import compilations as _compilations
from jax.flatten_util import ravel_pytree

from ssl_geometry import curvature as cv

N = 2000


def dense_matvec(v, A):
    return A @ v


def _orthonormal_columns(n, r, seed):
    return np.linalg.qr(np.random.default_rng(seed).standard_normal((n, r)))[0]


def _rotate(A, seed, reflections=4):
    """``P A P`` for a product ``P`` of random Householder reflections (dense, same spectrum, O(n^2))."""
    rng = np.random.default_rng(seed)
    for _ in range(reflections):
        u = rng.standard_normal(A.shape[0])
        u /= np.linalg.norm(u)
        Au = A @ u
        A = A - 2 * np.outer(u, Au) - 2 * np.outer(Au, u) + 4 * (u @ Au) * np.outer(u, u)
    return 0.5 * (A + A.T)


def _with_spectrum(lam, seed):
    A = _rotate(np.diag(lam), seed)
    assert np.count_nonzero(np.abs(A) > 1e-6) > 0.9 * A.size  # genuinely dense
    return A, np.linalg.eigvalsh(A)  # eigvalsh computed once per module (fixtures are module-scoped)


@pytest.fixture(scope="module")
def indefinite():
    rng = np.random.default_rng(1)
    lam = np.concatenate([[-3.0, -2.4, -2.0], rng.uniform(-1.0, 1.5, N - 6), [2.5, 3.1, 4.0]])
    return _with_spectrum(lam, 1)


@pytest.fixture(scope="module")
def clustered():
    rng = np.random.default_rng(2)
    top = 5.0 - 2e-3 * np.arange(12)  # 12 eigenvalues packed in [4.978, 5]
    bottom = -2.0 + 2e-3 * np.arange(12)  # 12 packed in [-2, -1.978]
    lam = np.concatenate([bottom, rng.uniform(-1.0, 3.0, N - 24), top])
    return _with_spectrum(lam, 2)


@pytest.fixture(scope="module")
def power_trap():
    """|lambda_min| > lambda_max and a close second eigenvalue: the paper's estimator fails."""
    rng = np.random.default_rng(3)
    lam = np.concatenate([[-1.05, -1.0], rng.uniform(-0.5, 0.95, N - 4), [0.99, 1.0]])
    return _with_spectrum(lam, 3)


# ----------------------------------------------------------------------------- Hessian / HVP


def _pytree_fn(p):
    return jnp.sum(jnp.sin(p["a"])) * p["b"][0, 0] ** 2 + jnp.prod(p["b"]) * jnp.sum(p["a"] ** 3)


@pytest.fixture(scope="module")
def tree_params():
    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    return {"a": jax.random.normal(k1, (3,)), "b": jax.random.normal(k2, (2, 2))}


def test_hessian_quadratic_closed_form(tree_params):
    rng = np.random.default_rng(0)
    M = rng.standard_normal((7, 7))
    A = M + M.T
    b = rng.standard_normal(7)

    def f(p):
        x, _ = ravel_pytree(p)
        return 0.5 * x @ A @ x + b @ x

    np.testing.assert_allclose(cv.hessian(f, tree_params), A, atol=1e-12)


def test_hessian_matches_jax_hessian_on_pytree(tree_params):
    H = np.asarray(cv.hessian(_pytree_fn, tree_params))
    flat, unravel = ravel_pytree(tree_params)
    ref = jax.hessian(lambda x: _pytree_fn(unravel(x)))(flat)
    np.testing.assert_allclose(H, ref, rtol=1e-12, atol=1e-12)
    # explicit cross-block entry d^2 f / da_0 db_00 = 2 b00 cos(a0) + 3 a0^2 * prod(b)/b00
    a, b = np.asarray(tree_params["a"]), np.asarray(tree_params["b"])
    expect = 2 * b[0, 0] * np.cos(a[0]) + 3 * a[0] ** 2 * np.prod(b) / b[0, 0]
    np.testing.assert_allclose(H[0, 3], expect, rtol=1e-12)


def test_hvp_matches_dense(tree_params):
    H = np.asarray(cv.hessian(_pytree_fn, tree_params))
    v = jax.tree_util.tree_map(lambda x: jnp.cos(3.0 * x + 1.0), tree_params)
    hv = cv.hvp(_pytree_fn, tree_params, v)
    np.testing.assert_allclose(ravel_pytree(hv)[0], H @ ravel_pytree(v)[0], rtol=1e-12, atol=1e-12)
    mv, x0 = cv.flat_hvp(_pytree_fn, tree_params)
    np.testing.assert_allclose(mv(ravel_pytree(v)[0], x0), H @ ravel_pytree(v)[0], rtol=1e-12, atol=1e-12)
    # the flat matvec drives Lanczos: full Krylov space = exact spectrum of the 7x7 Hessian
    r = cv.extreme_eigenvalues(mv, 7, k=2, args=(x0,), options=cv.SolverOptions(num_steps=7))
    ev = np.linalg.eigvalsh(H)
    np.testing.assert_allclose(r.smallest, ev[:2], rtol=1e-10)
    np.testing.assert_allclose(r.largest, ev[::-1][:2], rtol=1e-10)


def test_bad_arguments_are_named(tree_params, no_shape_checks):
    with pytest.raises(ValueError, match="`f` must return a scalar"):
        cv.hessian(lambda p: p["a"], tree_params)
    with pytest.raises(ValueError, match="`v`"):
        cv.hvp(_pytree_fn, tree_params, {"a": jnp.ones(3)})
    with pytest.raises(ValueError, match="`num_steps`"):
        cv.extreme_eigenvalues(dense_matvec, 5, args=(jnp.eye(5),), options=cv.SolverOptions(num_steps=6))
    with pytest.raises(ValueError, match="`k`"):
        cv.extreme_eigenvalues(dense_matvec, 5, k=0, args=(jnp.eye(5),))
    with pytest.raises(TypeError, match="`matvec`"):
        cv.extreme_eigenvalues(np.eye(5), 5)
    with pytest.raises(ValueError, match="`H` must be symmetric"):
        cv.psd_certificate(np.array([[1.0, 2.0], [0.0, 1.0]]))


def test_non_finite_matvec_is_reported():
    with pytest.raises(FloatingPointError, match="non-finite"):
        cv.extreme_eigenvalues(
            lambda v, a: a @ v * jnp.nan, 10, args=(jnp.eye(10),), options=cv.SolverOptions(num_steps=5)
        )


# ----------------------------------------------------------------------------- block structure


def _per_sample_loss(x, W):
    return jnp.mean(jnp.sum(jnp.tanh(x @ W) ** 2, axis=1) - jnp.sum(x**3, axis=1) / 7)


def test_block_diagonal_hessian_and_blockwise_lanczos():
    n, d = 6, 5
    x = jax.random.normal(jax.random.PRNGKey(1), (n, d))
    W = jax.random.normal(jax.random.PRNGKey(2), (d, 4))
    full = np.asarray(jax.hessian(lambda y: _per_sample_loss(y, W))(x)).reshape(n * d, n * d)
    blocks = np.asarray(cv.block_diagonal_hessian(_per_sample_loss, x, args=(W,), chunk_size=2))
    for i in range(n):
        np.testing.assert_allclose(blocks[i], full[i * d : (i + 1) * d, i * d : (i + 1) * d], atol=1e-13)
    assert cv.block_coupling(_per_sample_loss, x, args=(W,)) < 1e-14
    coupled = lambda y, W: _per_sample_loss(y - jnp.mean(y, axis=0), W)  # batch centring couples samples
    assert cv.block_coupling(coupled, x, args=(W,)) > 1e-2
    # more probes can only find more (the measure is the largest response over them)
    key = jax.random.PRNGKey(3)
    assert (
        cv.block_coupling(coupled, x, args=(W,), key=key, num_probes=6)
        >= cv.block_coupling(coupled, x, args=(W,), key=key, num_probes=1)
        > 1e-2
    )

    mv, _ = cv.flat_hvp(lambda y, W: _per_sample_loss(y, W), x)
    block_mv = lambda V, x, W: mv(V.reshape(-1), x.reshape(-1), W).reshape(V.shape)
    r = cv.blockwise_extreme_eigenvalues(block_mv, n, d, k=2, args=(x, W), options=cv.SolverOptions(num_steps=d))
    ev = np.linalg.eigvalsh(blocks)
    np.testing.assert_allclose(r.smallest, ev[:, :2], rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(r.largest, ev[:, ::-1][:, :2], rtol=1e-10, atol=1e-14)
    assert r.smallest.shape == (n, 2) and r.num_breakdowns.shape == (n,)
    np.testing.assert_allclose(r.smallest[:, 0].min(), np.linalg.eigvalsh(full)[0], rtol=1e-10)


# ----------------------------------------------------------------------------- Lanczos accuracy


def test_lanczos_indefinite_matches_eigvalsh(indefinite):
    A, ev = indefinite
    r = cv.extreme_eigenvalues(
        dense_matvec,
        N,
        k=3,
        args=(jnp.asarray(A),),
        key=jax.random.PRNGKey(5),
        options=cv.SolverOptions(num_steps=300, tol=1e-10),
    )
    assert r.converged and not r.breakdown and r.num_steps < 300
    np.testing.assert_allclose(r.smallest, ev[:3], rtol=1e-8)
    np.testing.assert_allclose(r.largest, ev[::-1][:3], rtol=1e-8)
    assert r.smallest[0] < 0 < r.largest[0]
    assert np.all(r.smallest_residuals <= 1e-10 * 4.0) and np.all(r.largest_residuals <= 1e-10 * 4.0)


def test_lanczos_clustered_spectrum_k_gt_1(clustered):
    A, ev = clustered
    r = cv.extreme_eigenvalues(
        dense_matvec,
        N,
        k=5,
        args=(jnp.asarray(A),),
        key=jax.random.PRNGKey(6),
        options=cv.SolverOptions(num_steps=600, tol=1e-11),
    )
    assert r.converged, (r.num_steps, r.smallest_residuals, r.largest_residuals)
    np.testing.assert_allclose(r.smallest, ev[:5], rtol=1e-8)
    np.testing.assert_allclose(r.largest, ev[::-1][:5], rtol=1e-8)
    # the packed eigenvalues are resolved individually (spacing 2e-3)
    np.testing.assert_allclose(np.diff(r.largest), -2e-3, rtol=1e-5)


def test_residual_estimates_equal_true_residuals(indefinite):
    A, ev = indefinite
    Aj = jnp.asarray(A)
    # unconverged run (10 steps): residuals are large and the estimate must match the truth
    r = cv.extreme_eigenvalues(
        dense_matvec,
        N,
        k=2,
        args=(Aj,),
        return_vectors=True,
        key=jax.random.PRNGKey(7),
        options=cv.SolverOptions(num_steps=10, early_stop=False),
    )
    assert r.num_steps == 10 and not r.converged
    for vals, vecs, est, true in (
        (r.smallest, r.smallest_vectors, r.smallest_residuals, r.smallest_true_residuals),
        (r.largest, r.largest_vectors, r.largest_residuals, r.largest_true_residuals),
    ):
        Y = np.asarray(vecs)
        assert Y.shape == (2, N)
        np.testing.assert_allclose(np.linalg.norm(Y, axis=1), 1.0, rtol=1e-12)
        ref = np.linalg.norm(Y @ A - vals[:, None] * Y, axis=1)  # independent NumPy residual
        np.testing.assert_allclose(true, ref, rtol=1e-8)
        np.testing.assert_allclose(est, ref, rtol=1e-6)
        assert np.all(ref > 1e-6)  # genuinely unconverged, so the comparison is meaningful
    # converged run: the true residuals are small too
    rc = cv.extreme_eigenvalues(
        dense_matvec,
        N,
        k=1,
        args=(Aj,),
        return_vectors=True,
        key=jax.random.PRNGKey(7),
        options=cv.SolverOptions(num_steps=300),
    )
    assert rc.converged and rc.largest_true_residuals[0] < 1e-7 and rc.smallest_true_residuals[0] < 1e-7
    np.testing.assert_allclose(rc.largest_residuals, rc.largest_true_residuals, rtol=1e-2, atol=1e-12)


def test_gap_error_bound_stops_earlier_and_bounds_the_true_eigenvalue_error(indefinite):
    """``error_bound="gap"``: the Kato-Temple bound min(r, r^2/delta) holds against eigvalsh at every end, the
    values meet ``tol`` in fewer steps than the residual criterion needs, and the residual run's bounds are
    no larger than its residuals."""
    A, ev = indefinite
    res = cv.extreme_eigenvalues(
        dense_matvec, N, k=2, args=(jnp.asarray(A),), options=cv.SolverOptions(tol=1e-8, check_every=1)
    )
    gap = cv.extreme_eigenvalues(
        dense_matvec,
        N,
        k=2,
        args=(jnp.asarray(A),),
        options=cv.SolverOptions(tol=1e-8, check_every=1, error_bound="gap"),
    )
    assert res.converged and gap.converged and gap.error_bound == "gap" and res.error_bound == "residual"
    assert gap.num_steps < res.num_steps
    scale = max(abs(ev[0]), abs(ev[-1]))
    for r in (res, gap):
        err_lo, err_hi = np.abs(r.smallest - ev[:2]), np.abs(r.largest - ev[::-1][:2])
        assert np.all(err_lo <= r.smallest_error_bounds * (1 + 1e-6) + 1e-13)
        assert np.all(err_hi <= r.largest_error_bounds * (1 + 1e-6) + 1e-13)
        assert np.all(r.smallest_error_bounds <= r.smallest_residuals) and np.all(
            r.largest_error_bounds <= r.largest_residuals
        )
    assert np.max(gap.smallest_error_bounds) <= 1e-8 * scale and np.max(gap.largest_error_bounds) <= 1e-8 * scale
    # at the gap run's stop the residuals are still far above what the residual criterion asks
    assert np.max(np.r_[gap.smallest_residuals, gap.largest_residuals]) > 1e-8 * scale
    # one end each (k = 1), checked after every step: a single Ritz value (step 1) has no neighbour, so no gap is
    # known and its bound is the residual, not 0 -- the run goes on until the bound is met, and it holds
    one = cv.extreme_eigenvalues(
        dense_matvec,
        N,
        k=1,
        args=(jnp.asarray(A),),
        options=cv.SolverOptions(tol=1e-8, check_every=1, error_bound="gap"),
    )
    assert one.converged and one.num_steps > 1
    assert abs(one.smallest[0] - ev[0]) <= one.smallest_error_bounds[0] * (1 + 1e-6) + 1e-13 <= 1e-8 * scale
    assert abs(one.largest[0] - ev[-1]) <= one.largest_error_bounds[0] * (1 + 1e-6) + 1e-13 <= 1e-8 * scale
    with pytest.raises(ValueError, match=r"`SolverOptions.error_bound` must be None or one of \['residual', 'gap'\]"):
        cv.SolverOptions(error_bound="kato")
    h = cv.hessian_extremes(
        _bn_coupled_loss,
        jnp.asarray(np.random.default_rng(5).standard_normal((6, 5))),
        args=(jnp.asarray(np.random.default_rng(6).standard_normal((5, 4))),),
        options=cv.SolverOptions(error_bound="gap", tol=1e-6),
    )
    assert h.method == "full" and h.lanczos.error_bound == "gap" and h.converged
    assert np.all(h.smallest_error_bounds <= h.smallest_residuals)


def test_lanczos_float32(indefinite):
    A, ev = indefinite
    r = cv.extreme_eigenvalues(
        dense_matvec,
        N,
        k=1,
        args=(jnp.asarray(A, jnp.float32),),
        dtype=jnp.float32,
        key=jax.random.PRNGKey(8),
        options=cv.SolverOptions(num_steps=200),
    )
    assert r.converged and r.tol == 1e-4
    np.testing.assert_allclose([r.smallest[0], r.largest[0]], [ev[0], ev[-1]], rtol=1e-4)


def test_breakdown_identity_plus_low_rank():
    U = _orthonormal_columns(N, 3, 4)
    A = np.eye(N) + (U * np.array([5.0, -3.0, 2.0])) @ U.T  # eigenvalues 6, 3, -2 and 1 (x 1997)
    r = cv.extreme_eigenvalues(
        dense_matvec, N, k=2, args=(jnp.asarray(A),), key=jax.random.PRNGKey(9), options=cv.SolverOptions(num_steps=12)
    )
    assert r.breakdown and r.num_breakdowns >= 1
    assert np.all(np.isfinite(r.ritz_values))
    np.testing.assert_allclose(r.smallest, [-2.0, 1.0], rtol=1e-12)
    np.testing.assert_allclose(r.largest, [6.0, 3.0], rtol=1e-12)
    # 4 distinct eigenvalues: the Krylov space is invariant after 4 steps (the breakdown), and the
    # first check (after max(4, 2k) = 4 steps) already sees every residual ~ 0 and stops there.
    assert r.converged and r.num_steps == 4 and r.num_checks == 1


def test_breakdown_rank_3_with_vectors():
    U = _orthonormal_columns(N, 3, 5)
    A = (U * np.array([4.0, -1.5, 0.5])) @ U.T  # eigenvalues 4, 0.5, -1.5 and 0 (x 1997)
    r = cv.extreme_eigenvalues(
        dense_matvec,
        N,
        k=1,
        args=(jnp.asarray(A),),
        return_vectors=True,
        key=jax.random.PRNGKey(10),
        options=cv.SolverOptions(num_steps=10),
    )
    assert r.breakdown
    np.testing.assert_allclose([r.smallest[0], r.largest[0]], [-1.5, 4.0], rtol=1e-12)
    assert np.all(np.isfinite(np.asarray(r.largest_vectors)))
    assert r.largest_true_residuals[0] < 1e-12 and r.smallest_true_residuals[0] < 1e-12


def test_device_loop_runs_the_same_recurrence_as_the_per_step_path():
    """On an accelerator the steps between two checks run as one device loop; on the CPU, where this suite runs,
    two calls a step. ``device_loop`` forces either: both must give the same Ritz values, residuals, breakdowns and
    symmetry defect -- here on an operator that breaks down (identity plus rank 3), on a block batch, and on an
    operator that is not symmetric (both refuse it at the same step)."""
    U = _orthonormal_columns(N, 3, 4)
    A = jnp.asarray(np.eye(N) + (U * np.array([5.0, -3.0, 2.0])) @ U.T)
    runs = [
        cv.extreme_eigenvalues(
            dense_matvec,
            N,
            k=2,
            args=(A,),
            key=jax.random.PRNGKey(9),
            options=cv.SolverOptions(num_steps=12, device_loop=loop),
        )
        for loop in (False, True)
    ]
    for r in runs:
        assert r.breakdown and r.converged
    for field in ("smallest", "largest", "smallest_residuals", "largest_residuals", "ritz_values", "asymmetry"):
        np.testing.assert_allclose(getattr(runs[1], field), getattr(runs[0], field), rtol=1e-10, atol=1e-13)
    assert runs[0].num_steps == runs[1].num_steps and runs[0].num_breakdowns == runs[1].num_breakdowns
    rng = np.random.default_rng(41)
    G = rng.standard_normal((3, 7, 7))
    blocks = jnp.asarray(G + np.transpose(G, (0, 2, 1)))
    bmv = lambda V, M: jnp.einsum("bij,bj->bi", M, V)
    b = [
        cv.blockwise_extreme_eigenvalues(bmv, 3, 7, args=(blocks,), options=cv.SolverOptions(device_loop=loop))
        for loop in (False, True)
    ]
    np.testing.assert_allclose(b[1].smallest, b[0].smallest, rtol=1e-10)
    np.testing.assert_allclose(b[1].smallest, np.linalg.eigvalsh(np.asarray(blocks))[:, :1], rtol=1e-10)
    B = jnp.asarray(rng.standard_normal((N, N)))
    messages = []
    for loop in (False, True):
        with pytest.raises(ValueError, match="not symmetric") as err:
            cv.extreme_eigenvalues(dense_matvec, N, args=(B,), options=cv.SolverOptions(device_loop=loop))
        messages.append(str(err.value))
    assert messages[0] == messages[1]
    # the device loop holds the product, and is compiled once per computation like it: a fresh closure over new
    # arrays of the same shapes compiles nothing
    run = lambda M: cv.extreme_eigenvalues(lambda v: M @ v, N, options=cv.SolverOptions(num_steps=12, device_loop=True))
    run(A)
    out, A2 = {}, jnp.asarray(2.0 * np.asarray(A))
    assert _compilations(lambda: out.update(r=run(A2))) == []
    np.testing.assert_allclose(out["r"].largest[0], 12.0, rtol=1e-10)


# ----------------------------------------------------------------------------- SLQ and traces


def test_slq_density_integrates_to_one_and_moments_exact_for_diagonal():
    d = jnp.asarray(np.random.default_rng(11).uniform(-2.0, 3.0, 400))
    mv = lambda v, d: d * v
    sd = cv.slq_density(mv, 400, num_probes=6, num_steps=30, args=(d,), key=jax.random.PRNGKey(12))
    np.testing.assert_allclose(sd.weights.sum(axis=1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(np.trapezoid(sd.density, sd.grid), 1.0, rtol=1e-6)
    # Rademacher probes: v^T D v / n = tr(D)/n exactly, and Gauss quadrature is exact for degree < 2m
    np.testing.assert_allclose(sd.moment(1), float(jnp.mean(d)), rtol=1e-12)
    np.testing.assert_allclose(sd.moment(2), float(jnp.mean(d**2)), rtol=1e-12)
    assert sd.nodes.min() >= float(d.min()) - 1e-12 and sd.nodes.max() <= float(d.max()) + 1e-12


def test_slq_moments_dense(indefinite):
    A, ev = indefinite
    P = 8
    sd = cv.slq_density(dense_matvec, N, num_probes=P, num_steps=40, args=(jnp.asarray(A),), key=jax.random.PRNGKey(13))
    # Var(v^T A v / n) = 2 (|A|_F^2 - sum A_ii^2) / n^2 for Rademacher v
    std = np.sqrt(2 * (np.sum(A**2) - np.sum(np.diag(A) ** 2)) / N**2 / P)
    assert abs(sd.moment(1) - np.trace(A) / N) < 5 * std
    np.testing.assert_allclose(np.trapezoid(sd.density, sd.grid), 1.0, rtol=1e-6)
    np.testing.assert_allclose(sd.nodes.min(), ev[0], rtol=1e-6)  # the extremes converge in 40 steps


def test_hutchpp_beats_hutchinson_on_low_rank_plus_noise():
    n, r = 1000, 10
    rng = np.random.default_rng(14)
    U = np.linalg.qr(rng.standard_normal((n, r)))[0]
    G = rng.standard_normal((n, n)) / n
    A = jnp.asarray((U * np.linspace(50, 100, r)) @ U.T + 0.01 * (G @ G.T))
    exact = float(jnp.trace(A))
    err_h, err_pp = [], []
    for s in range(8):
        key = jax.random.PRNGKey(100 + s)
        err_h.append(abs(float(cv.hutchinson_trace(dense_matvec, n, num_matvecs=60, args=(A,), key=key)) - exact))
        err_pp.append(abs(float(cv.hutchpp_trace(dense_matvec, n, num_matvecs=60, args=(A,), key=key)) - exact))
    assert np.mean(err_pp) < 0.01 * np.mean(err_h), (np.mean(err_pp), np.mean(err_h))
    assert np.mean(err_pp) / exact < 1e-3


def test_hutchinson_unbiased_scale():
    n = 300
    A = jnp.asarray(np.random.default_rng(15).standard_normal((n, n)))
    A = A + A.T
    est = cv.hutchinson_trace(dense_matvec, n, num_matvecs=3000, args=(A,), key=jax.random.PRNGKey(16))
    std = np.sqrt(2 * (np.sum(np.asarray(A) ** 2) - np.sum(np.diag(A) ** 2)) / 3000)
    assert abs(float(est) - float(jnp.trace(A))) < 5 * std


# ----------------------------------------------------------------------------- certificates


def test_witness_proves_instability_of_indefinite_matrix():
    rng = np.random.default_rng(17)
    Q5 = np.linalg.qr(rng.standard_normal((50, 50)))[0]
    H = (Q5 * np.concatenate([[-1e-3], np.linspace(0.5, 2.0, 49)])) @ Q5.T
    v = np.linalg.eigh(H)[1][:, 0]
    w = cv.negative_curvature_witness(H, v)
    assert w.rigorous and w.proves_instability
    np.testing.assert_allclose(w.quotient, -1e-3, rtol=1e-9)
    assert 0 < w.error_bound < 1e-12
    # the same via a callable with a stated matvec error bound
    wc = cv.negative_curvature_witness(lambda x: H @ x, v, matvec_error=1e-12)
    assert wc.rigorous and wc.proves_instability
    # without a matvec error bound a callable never "proves"
    assert not cv.negative_curvature_witness(lambda x: H @ x, v).proves_instability


def test_witness_does_not_prove_on_psd_null_direction():
    rng = np.random.default_rng(18)
    B = rng.standard_normal((40, 39))
    H = B @ B.T  # PSD, singular; null vector has exact quotient 0
    v = np.linalg.svd(B.T)[2][-1]
    w = cv.negative_curvature_witness(H, v)
    assert abs(w.quotient) <= w.error_bound  # the rounding noise is inside the bound
    assert not w.proves_instability


def test_psd_certificate():
    rng = np.random.default_rng(19)
    B = rng.standard_normal((60, 60))
    ok = cv.psd_certificate(B @ B.T + np.eye(60))
    assert ok.certified and ok.lower_bound == 0.0 and ok.shift > 0
    Bs = rng.standard_normal((60, 59))
    near_singular = Bs @ Bs.T + 1e-15 * np.eye(60)  # PSD, lambda_min ~ 1e-15
    refused = cv.psd_certificate(near_singular, 0.0)
    assert not refused.certified and refused.lower_bound is None and "NOT certified" in refused.message
    with_margin = cv.psd_certificate(near_singular, 1e-6)
    assert with_margin.certified and with_margin.lower_bound == -1e-6
    indef = cv.psd_certificate(np.diag([1.0, -1e-3, 2.0]), 1e-4)
    assert not indef.certified
    assert cv.psd_certificate(np.diag([1.0, -1e-3, 2.0]), 2e-3).certified


# ----------------------------------------------------------------------------- the paper's baseline


def test_paper_power_iteration_is_inaccurate_where_lanczos_is_exact(power_trap):
    A, ev = power_trap
    Aj32 = jnp.asarray(A, jnp.float32)
    p = cv.paper_power_iteration(dense_matvec, N, steps=20, args=(Aj32,), key=jax.random.PRNGKey(20))
    assert p.num_matvecs == 42  # 20 steps and a Rayleigh quotient per phase
    err_max = abs(p.lambda_max - ev[-1]) / abs(ev[-1])
    err_min = abs(p.lambda_min - ev[0]) / abs(ev[0])
    # largest magnitude is lambda_min = -1.05: lambda_max comes out with the wrong sign or far off
    assert err_max > 0.1 and max(err_max, err_min) > 0.1
    r = cv.extreme_eigenvalues(
        dense_matvec, N, args=(jnp.asarray(A),), key=jax.random.PRNGKey(20), options=cv.SolverOptions(num_steps=400)
    )
    assert r.converged
    np.testing.assert_allclose([r.smallest[0], r.largest[0]], [ev[0], ev[-1]], rtol=1e-8)


def test_paper_power_iteration_converges_on_easy_spectrum():
    lam = np.concatenate([[-0.2], np.linspace(0.0, 1.0, 98), [10.0]])
    p = cv.paper_power_iteration(lambda v, d: d * v, 100, steps=20, args=(jnp.asarray(lam, jnp.float32),))
    np.testing.assert_allclose(p.lambda_max, 10.0, rtol=1e-5)  # ratio 0.1: converged in 20 steps
    # Rayleigh quotients never overshoot (lambda_min >= -0.2), but the shifted operator's
    # ratio 10/10.2 makes 20 steps far too few: lambda_min is not resolved
    assert -0.2 - 1e-5 <= p.lambda_min and abs(p.lambda_min + 0.2) > 1e-3


# ----------------------------------------------------------------------------- operator checks, compile once


def test_matvec_with_wrong_output_shape_is_named():
    A = jnp.eye(6)
    with pytest.raises(ValueError, match=r"`matvec` must return an array of the input's shape \(6,\); got \(5,\)"):
        cv.extreme_eigenvalues(lambda v, a: (a @ v)[:5], 6, args=(A,), options=cv.SolverOptions(num_steps=4))
    with pytest.raises(ValueError, match=r"`block_matvec` must return .* \(3, 4\); got \(3, 1\)"):
        cv.blockwise_extreme_eigenvalues(
            lambda V: V.sum(axis=1, keepdims=True), 3, 4, options=cv.SolverOptions(num_steps=4)
        )
    with pytest.raises(ValueError, match=r"`matvec` must return .*\(6,\); got \(6, 1\)"):
        cv.paper_power_iteration(lambda v: v[:, None], 6, steps=2)
    with pytest.raises(ValueError, match=r"`matvec` .*\(4, 6\); got \(4, 3\)"):
        cv.hutchinson_trace(lambda v: v[:3], 6, num_matvecs=4)


def test_non_symmetric_operator_is_refused():
    rng = np.random.default_rng(21)
    S = rng.standard_normal((40, 40))
    A = jnp.asarray(0.5 * (S + S.T) + 0.3 * np.triu(rng.standard_normal((40, 40)), 1))
    with pytest.raises(ValueError, match="not symmetric"):
        cv.extreme_eigenvalues(dense_matvec, 40, args=(A,), options=cv.SolverOptions(num_steps=30))
    # the symmetric part passes, and its asymmetry is at rounding level
    r = cv.extreme_eigenvalues(
        dense_matvec, 40, args=(jnp.asarray(0.5 * (S + S.T)),), options=cv.SolverOptions(num_steps=40)
    )
    assert r.asymmetry < 1e-12
    np.testing.assert_allclose(r.smallest[0], np.linalg.eigvalsh(0.5 * (S + S.T))[0], rtol=1e-10)


_TRACES: list = []  # appended to while JAX traces the counting products below (a global: no part of their program)


def _counting_matvec(v, A):
    _TRACES.append(1)  # runs only while JAX traces the function
    return A @ v


def _counting_apply(V, lin):
    _TRACES.append(1)
    return cv.apply_linear(V, lin)


def test_lanczos_compiles_once_for_new_arrays_of_the_same_shape():
    traces, counting_matvec = _TRACES, _counting_matvec
    traces.clear()

    rng = np.random.default_rng(22)
    mats = []
    for _ in range(3):
        S = rng.standard_normal((30, 30))
        mats.append(jnp.asarray(S + S.T))
    r0 = cv.extreme_eigenvalues(counting_matvec, 30, args=(mats[0],), options=cv.SolverOptions(num_steps=30))
    first = len(traces)
    assert first >= 1
    for A in mats[1:]:
        r = cv.extreme_eigenvalues(
            counting_matvec, 30, args=(A,), key=jax.random.PRNGKey(5), options=cv.SolverOptions(num_steps=30)
        )
        np.testing.assert_allclose(r.largest[0], np.linalg.eigvalsh(np.asarray(A))[-1], rtol=1e-8)
    assert len(traces) == first, "extreme_eigenvalues retraced its matvec for arrays of an unchanged shape"
    assert r0.converged


def test_blockwise_compiles_once_and_linearized_hvp_matches_jvp_of_grad():
    def f(x, w):
        return jnp.sum(jnp.tanh(x @ w) ** 2) + 0.1 * jnp.sum(x**4)

    traces, counting_apply = _TRACES, _counting_apply
    traces.clear()

    rng = np.random.default_rng(23)
    w = jnp.asarray(rng.standard_normal((5, 7)))
    for rep in range(3):
        x = jnp.asarray(rng.standard_normal((4, 5)))
        lin = cv.linearized_hvp(f, x, args=(w,))
        V = jnp.asarray(rng.standard_normal((4, 5)))
        ref = jax.jvp(jax.grad(lambda y: f(y, w)), (x,), (V,))[1]
        np.testing.assert_allclose(lin(V), ref, rtol=1e-12)
        r = cv.blockwise_extreme_eigenvalues(counting_apply, 4, 5, args=(lin,), options=cv.SolverOptions(num_steps=5))
        blocks = np.asarray(cv.block_diagonal_hessian(f, x, args=(w,)))
        ev = np.linalg.eigvalsh(blocks)
        np.testing.assert_allclose(r.smallest[:, 0], ev[:, 0], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(r.largest[:, 0], ev[:, -1], rtol=1e-9)
        if rep == 0:
            first = len(traces)
    assert len(traces) == first, "blockwise Lanczos retraced for a new linearisation of the same shapes"
    # the flat view of the same map as a full-operator matvec
    r = cv.extreme_eigenvalues(cv.LinearMatvec(x.shape), x.size, args=(lin,), options=cv.SolverOptions(num_steps=20))
    np.testing.assert_allclose(r.largest[0], ev[:, -1].max(), rtol=1e-9)


def test_blockwise_union_target_resolves_the_global_extremes_with_fewer_steps():
    rng = np.random.default_rng(24)
    nb, d = 12, 40
    lam = rng.uniform(-1.0, 1.0, (nb, d))
    lam[3, 0], lam[7, -1] = -2.0, 2.5  # the union's extremes sit in blocks 3 and 7
    Q = np.linalg.qr(rng.standard_normal((nb, d, d)))[0]
    A = jnp.asarray(np.einsum("bij,bj,bkj->bik", Q, lam, Q))
    mv = lambda V, A: jnp.einsum("bij,bj->bi", A, V)
    kw = dict(args=(A,), options=cv.SolverOptions(num_steps=d, tol=1e-8, check_every=4))
    full = cv.blockwise_extreme_eigenvalues(mv, nb, d, **kw)
    union = cv.blockwise_extreme_eigenvalues(mv, nb, d, target="union", **kw)
    assert full.converged and union.converged
    assert union.num_steps < full.num_steps
    assert abs(union.smallest[:, 0].min() + 2.0) <= 1e-8 * 2.5 and abs(union.largest[:, 0].max() - 2.5) <= 1e-8 * 2.5
    with pytest.raises(ValueError, match="`k` must be 1"):
        cv.blockwise_extreme_eigenvalues(mv, nb, d, target="union", k=2, **kw)
    with pytest.raises(ValueError, match="`target`"):
        cv.blockwise_extreme_eigenvalues(mv, nb, d, target="some", **kw)


# ----------------------------------------------------------------------------- compiled once per computation


def test_fresh_closure_matvec_compiles_once_and_its_arrays_are_arguments():
    """A matvec written as a new lambda per call is compiled once; the arrays it closes over are not constants."""
    rng = np.random.default_rng(30)
    mats = [jnp.asarray(0.5 * (S + S.T)) for S in rng.standard_normal((4, 24, 24))]
    options = cv.SolverOptions(num_steps=24)
    run = lambda A: cv.extreme_eigenvalues(lambda v: A @ v, 24, options=options)  # a fresh closure each call
    run(mats[0])
    for A in mats[1:]:
        out = {}
        assert _compilations(lambda: out.update(r=run(A))) == []
        ev = np.linalg.eigvalsh(np.asarray(A))
        np.testing.assert_allclose([out["r"].smallest[0], out["r"].largest[0]], [ev[0], ev[-1]], rtol=1e-10)
    # the paper's estimator and the trace estimators follow the same rule
    power = lambda A: cv.paper_power_iteration(lambda v: A @ v, 24, dtype=jnp.float64)
    power(mats[0])
    assert _compilations(lambda: power(mats[1])) == []
    trace = lambda A: cv.hutchinson_trace(lambda v: A @ v, 24, num_matvecs=6)
    trace(mats[0])
    est = {}
    assert _compilations(lambda: est.update(t=trace(mats[2]))) == []
    assert np.isfinite(float(est["t"]))
    # a closure of other code is another program: it compiles (once), and computes its own product
    assert (
        _compilations(lambda: est.update(t=cv.hutchinson_trace(lambda v: 2.0 * (mats[2] @ v), 24, num_matvecs=6))) != []
    )
    np.testing.assert_allclose(float(est["t"]), 2.0 * float(trace(mats[2])), rtol=1e-12)


def test_closure_conversion_separates_the_program_from_its_arrays():
    """``closure_convert``: equal for the same code over other arrays (through cells, defaults, partials, bound
    methods, plain objects and containers), unequal for other code or another non-array value, and the rebuilt
    function computes with the caller's new arrays."""
    import functools

    closure_convert = cv.closure_convert

    class Scaled:
        def __init__(self, W, c):
            self.W, self.c = W, c

        def apply(self, v):
            return self.c * (self.W @ v)

    def make(W, c=2.0):
        obj = Scaled(W, c)
        part = functools.partial(lambda v, M, k: k * (M @ v), M=W, k=3.0)
        return lambda v, B=W: obj.apply(v) + part(v) + B @ v

    rng = np.random.default_rng(5)
    W1, W2 = (jnp.asarray(rng.standard_normal((3, 3))) for _ in range(2))
    v = jnp.ones(3)
    (c1, k1, _), (c2, k2, _) = (closure_convert(make(W), v) for W in (W1, W2))
    assert c1 == c2 and hash(c1) == hash(c2) and len(k2) == 3
    np.testing.assert_allclose(c1(k2, v), (2.0 + 3.0 + 1.0) * (W2 @ v), rtol=1e-14)  # the arrays given, not W1
    assert closure_convert(make(W1, c=5.0), v)[0] != c1  # another scalar: another program
    assert closure_convert(lambda u: W1 @ u, v)[0] != c1  # other code
    np_cells = [closure_convert(lambda u, A=A: jnp.asarray(A) @ u, v)[0] for A in (np.eye(3), 2 * np.eye(3))]
    assert np_cells[0] != np_cells[1]  # NumPy arrays are values
    sized = lambda cfg: lambda u: u * len(cfg)  # a list without arrays: part of the program
    assert closure_convert(sized([1, 2]), v)[0] == closure_convert(sized([1, 2]), v)[0]
    assert closure_convert(sized([1, 2]), v)[0] != closure_convert(sized([1, 2, 3]), v)[0]


def test_matvec_with_its_own_host_callback_is_keyed_by_the_callback():
    """A matvec holding a host callback created afresh recompiles (its printed program does not identify it)."""
    A = jnp.asarray(np.diag(np.arange(1.0, 13.0)))

    def run(scale):
        cb = lambda v: np.asarray(v) * scale  # a new host function per call
        mv = lambda v: A @ jax.pure_callback(cb, jax.ShapeDtypeStruct(v.shape, v.dtype), v)
        return cv.extreme_eigenvalues(mv, 12, options=cv.SolverOptions(num_steps=12))

    run(1.0)
    out = {}
    assert any("_product" in m for m in _compilations(lambda: out.update(r=run(2.0))))
    np.testing.assert_allclose(out["r"].largest[0], 24.0, rtol=1e-10)  # the new callback ran, not the old one


# ----------------------------------------------------------------------------- numerics in the caller's terms


def test_lanczos_norms_cannot_overflow_for_a_finite_float32_operator():
    lam = np.linspace(-1.0, 2.0, 60) * 1e30  # finite in float32; |A v|^2 ~ 1e60 is not
    d = jnp.asarray(lam, jnp.float32)
    assert not np.isfinite(float(jnp.linalg.norm(d)))
    r = cv.extreme_eigenvalues(
        lambda v, d: d * v, 60, args=(d,), dtype=jnp.float32, options=cv.SolverOptions(num_steps=60)
    )
    np.testing.assert_allclose([r.smallest[0], r.largest[0]], [-1e30, 2e30], rtol=1e-5)
    assert r.converged and np.isfinite(r.smallest_residuals[0])


def test_non_finite_start_vector_and_overflowing_coefficients_are_named():
    with pytest.raises(FloatingPointError, match="`v0` contains 10 non-finite"):
        cv.extreme_eigenvalues(
            dense_matvec, 10, args=(jnp.eye(10),), v0=jnp.full(10, jnp.nan), options=cv.SolverOptions(num_steps=5)
        )
    with pytest.raises(ValueError, match="`v0` must be non-zero"):
        cv.extreme_eigenvalues(
            dense_matvec, 10, args=(jnp.eye(10),), v0=jnp.zeros(10), options=cv.SolverOptions(num_steps=5)
        )
    with pytest.raises(FloatingPointError, match="`matvec` returned non-finite values"):
        cv.extreme_eigenvalues(lambda v: jnp.where(v > 0, jnp.inf, v), 10, options=cv.SolverOptions(num_steps=5))


def test_in_jit_checks_called_outside_jit_give_the_message_alone():
    """A value traced by grad but not jit: the library's checks raise what a concrete value raises, message first."""
    from ssl_geometry import losses

    x = jnp.asarray(np.random.default_rng(34).standard_normal((4, 3)), jnp.float32)
    with pytest.raises(ValueError, match=r"^`temperature` must be finite and > 0\.") as err:
        jax.grad(lambda t: losses.info_nce(x, x, temperature=t))(0.0)
    assert "JIT" not in str(err.value) and "EQX_ON_ERROR" not in str(err.value)
    with pytest.raises(FloatingPointError, match=r"^`vicreg` loss is not finite") as err:
        jax.grad(lambda a: losses.vicreg(a, 1e30 * x))(1e30 * x)
    assert "JIT" not in str(err.value) and "EQX_ON_ERROR" not in str(err.value)
    with pytest.raises(RuntimeError, match="`temperature` must"):  # under jit: a run-time error, as before
        jax.jit(lambda t: losses.info_nce(x, x, temperature=t))(jnp.asarray(0.0))


# ----------------------------------------------------------------------------- hessian_extremes


def _bn_coupled_loss(x, W):
    """A per-sample loss after batch standardisation (train-mode BatchNorm): the batch is coupled."""
    h = x @ W
    h = (h - h.mean(axis=0)) / jnp.sqrt(h.var(axis=0) + 1e-5)
    return jnp.mean(jnp.sum(jax.nn.silu(h) ** 2, axis=1)) - 0.05 * jnp.sum(x**2)


def test_hessian_extremes_picks_blockwise_or_full_and_matches_the_dense_hessian():
    n, d = 6, 5
    rng = np.random.default_rng(31)
    x = jnp.asarray(rng.standard_normal((n, d)))
    W = jnp.asarray(rng.standard_normal((d, 4)))
    for loss, method in ((_per_sample_loss, "blockwise"), (_bn_coupled_loss, "full")):
        H = np.asarray(jax.hessian(lambda y: loss(y, W))(x)).reshape(n * d, n * d)
        ev = np.linalg.eigvalsh(0.5 * (H + H.T))
        r = cv.hessian_extremes(loss, x, args=(W,), k=2, return_vectors=True, options=cv.SolverOptions(tol=1e-10))
        assert r.method == method and r.converged
        assert (r.coupling == 0.0) if method == "blockwise" else (r.coupling > 1e-3)
        np.testing.assert_allclose(r.smallest, ev[:2], rtol=1e-8, atol=1e-12)
        np.testing.assert_allclose(r.largest, ev[::-1][:2], rtol=1e-8, atol=1e-12)
        assert r.smallest_vectors.shape == (2, n, d)
        y = np.asarray(r.smallest_vectors[0]).reshape(-1)
        np.testing.assert_allclose(np.linalg.norm(H @ y - r.smallest[0] * y), 0.0, atol=1e-7)
        lin_y = np.asarray(r.linearization(r.smallest_vectors[0])).reshape(-1)  # the returned map is H
        np.testing.assert_allclose(lin_y, H @ y, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(np.asarray(r.gradient), np.asarray(jax.grad(loss)(x, W)), rtol=1e-12)
        # Lanczos steps, the coupling probes (two that see nothing; the first settles a coupled Hessian), 2 k true
        # residuals
        assert r.num_hvps == r.num_steps + (2 if method == "blockwise" else 1) + 4
    forced = cv.hessian_extremes(_per_sample_loss, x, args=(W,), method="blockwise")  # no coupling measured
    assert forced.method == "blockwise" and forced.coupling is None
    with pytest.raises(ValueError, match="not block-diagonal over the rows of `x`"):
        cv.hessian_extremes(_bn_coupled_loss, x, args=(W,), method="blockwise")
    vec = cv.hessian_extremes(lambda v: jnp.sum(jnp.cos(v)) + 0.3 * jnp.sum(v) ** 2, jnp.linspace(0.0, 1.0, 7))
    assert vec.method == "full" and vec.coupling is None  # a single vector: no rows to couple
    with pytest.raises(ValueError, match="Unknown method 'dense'"):
        cv.hessian_extremes(_per_sample_loss, x, args=(W,), method="dense")
    with pytest.raises(ValueError, match="`f` must return a scalar"):
        cv.hessian_extremes(lambda y, W: y @ W, x, args=(W,))
    with pytest.raises(FloatingPointError, match="gradient of `loss`"):
        cv.hessian_extremes(lambda y, W: jnp.sum(jnp.sqrt(y - 10.0)), x, args=(W,))


def test_auto_falls_back_to_the_full_operator_when_a_tiny_block_sees_the_coupling():
    """Block 0 has scale 1e6, block 1 scale 1e-6, and they couple by 1e-9: the relative coupling, 1e-15, is below
    the default tolerance (100 eps), yet block 1 alone is not symmetric at its own scale. ``auto`` then solves the
    full operator (and matches the dense eigenvalues); a forced ``blockwise`` raises."""

    def loss(x, s):
        return (
            0.5 * (1e6 * jnp.sum(x[0] ** 2) + s * jnp.sum(x[1] * jnp.array([1.0, -2.0]) * x[1]))
            + 1e-9 * x[0, 0] * x[1, 0]
        )

    x = jnp.ones((2, 2))
    ev = np.linalg.eigvalsh(np.asarray(jax.hessian(loss)(x, 1e-6)).reshape(4, 4))
    budget = cv.SolverOptions(num_steps=50)  # a budget above the dimension is clamped to it
    r = cv.hessian_extremes(loss, x, args=(1e-6,), options=budget)
    assert r.method == "full" and 0 < r.coupling <= 100 * np.finfo(np.float64).eps and r.converged
    assert r.num_steps <= 4
    # every product is counted: the full run's steps, both probes, and the 2 steps (a block's whole dimension) of
    # the blockwise attempt whose symmetry check sent the run to the full operator
    assert r.num_hvps == r.num_steps + 2 + 2
    # the guarantee: within tol * max|theta| = 1e-8 * 1e6 of an eigenvalue; the small end keeps its sign
    np.testing.assert_allclose([r.smallest[0], r.largest[0]], [ev[0], ev[-1]], rtol=1e-12, atol=r.tol * 1e6)
    assert r.smallest[0] < 0
    with pytest.raises(ValueError, match="not block-diagonal over the rows of `x`"):
        cv.hessian_extremes(loss, x, args=(1e-6,), method="blockwise")


def test_hessian_extremes_compiles_once_whatever_closure_the_caller_writes():
    n, d = 5, 4
    rng = np.random.default_rng(32)
    W = jnp.asarray(rng.standard_normal((d, 3)))
    run = lambda x, Wc: cv.hessian_extremes(lambda z: _bn_coupled_loss(z, Wc), x)  # fresh closures
    run(jnp.asarray(rng.standard_normal((n, d))), W)
    for c in (0.5, 2.0):
        x, Wc = jnp.asarray(rng.standard_normal((n, d))), c * W
        out = {}
        assert _compilations(lambda: out.update(r=run(x, Wc))) == []
        H = np.asarray(jax.hessian(lambda y: _bn_coupled_loss(y, c * W))(x)).reshape(n * d, n * d)
        np.testing.assert_allclose(out["r"].smallest[0], np.linalg.eigvalsh(H)[0], rtol=1e-7)
        assert out["r"].method == "full"


# ----------------------------------------------------------------------------- the authors' power iteration


def _authors_power_iteration(H, v, v_min, num_iterations=20):
    """``get_min_eigenvalue_hvp`` of the authors' hessian_tracker.py (commit 117231d), torch -> NumPy."""
    v = v / (np.linalg.norm(v) + 1e-8)
    for _ in range(num_iterations):
        Hv = H @ v
        v = Hv / (np.linalg.norm(Hv) + 1e-8)
    lambda_max = np.sum(v * (H @ v))
    v_min = v_min / (np.linalg.norm(v_min) + 1e-8)
    for _ in range(num_iterations):
        Hv = H @ v_min
        shifted_Hv = Hv - lambda_max * v_min
        v_min = shifted_Hv / (np.linalg.norm(shifted_Hv) + 1e-8)
    Hv_final = H @ v_min
    return np.sum(v_min * Hv_final), lambda_max


def test_paper_power_iteration_is_the_authors_algorithm_step_for_step():
    rng = np.random.default_rng(33)
    lam = np.concatenate([[-1.3, -1.2], np.linspace(-0.9, 0.9, 26), [1.0, 1.1]])  # slow: 20 steps do not converge
    Q = np.linalg.qr(rng.standard_normal((30, 30)))[0]
    H = (Q * lam) @ Q.T
    v0, u0 = rng.standard_normal(30), rng.standard_normal(30)
    want_min, want_max = _authors_power_iteration(H, v0, u0)
    p = cv.paper_power_iteration(dense_matvec, 30, args=(jnp.asarray(H),), dtype=jnp.float64, v0=v0, u0=u0)
    np.testing.assert_allclose([p.lambda_min, p.lambda_max], [want_min, want_max], rtol=1e-12)
    assert p.num_matvecs == 42 and p.mu == pytest.approx(p.lambda_max - p.lambda_min)
    # the Rayleigh quotient after the 19th step (the project's earlier reading) is measurably different
    off_min, off_max = _authors_power_iteration(H, v0, u0, num_iterations=19)
    assert min(abs(off_min - want_min), abs(off_max - want_max)) > 1e-4
    # float32, as the paper runs it
    p32 = cv.paper_power_iteration(dense_matvec, 30, args=(jnp.asarray(H, jnp.float32),), v0=v0, u0=u0)
    np.testing.assert_allclose([p32.lambda_min, p32.lambda_max], [want_min, want_max], rtol=1e-4)
    with pytest.raises(ValueError, match=r"`u0` must have shape \(30,\)"):
        cv.paper_power_iteration(dense_matvec, 30, args=(jnp.asarray(H),), u0=np.ones(3))


# ----------------------------------------------------------------------------- one end only; the operator norm


def test_one_end_stops_when_that_end_meets_tol():
    """``which="largest"`` on a Gram-like spectrum (a dense bulk from 0 and a separated top): it stops at the first
    check where the top meets ``tol``, long before the bottom of the bulk would; its top value is within its bound
    of ``eigvalsh``; the same step budget does not converge both ends."""
    rng = np.random.default_rng(40)
    lam = np.concatenate([rng.uniform(0.0, 1.0, 390), [3.0, 5.0, 6.0, 8.0, 10.0]])
    A, ev = _with_spectrum(lam, 41)
    Aj = jnp.asarray(A)
    top = cv.extreme_eigenvalues(
        dense_matvec,
        395,
        args=(Aj,),
        which="largest",
        options=cv.SolverOptions(tol=1e-10, check_every=2, error_bound="gap"),
    )
    assert top.converged and top.num_steps < 60
    assert abs(top.largest[0] - ev[-1]) <= top.largest_error_bounds[0] * (1 + 1e-6) + 1e-13 <= 1e-10 * ev[-1]
    both = cv.extreme_eigenvalues(
        dense_matvec,
        395,
        args=(Aj,),
        options=cv.SolverOptions(tol=1e-10, check_every=2, error_bound="gap", num_steps=top.num_steps),
    )
    assert not both.converged and both.smallest_error_bounds[0] > 1e-10 * ev[-1]
    low = cv.extreme_eigenvalues(
        dense_matvec,
        395,
        args=(-Aj,),
        which="smallest",
        options=cv.SolverOptions(tol=1e-10, check_every=2, error_bound="gap"),
    )
    assert low.converged and low.num_steps == top.num_steps and abs(low.smallest[0] + ev[-1]) < 1e-9
    with pytest.raises(ValueError, match="Unknown which 'top'"):
        cv.extreme_eigenvalues(dense_matvec, 395, args=(Aj,), which="top")


@pytest.mark.parametrize("shape", [(40, 300), (300, 40)])  # J J^T (the output side) and J^T J (the input side)
def test_operator_norm_by_lanczos_is_the_largest_singular_value_from_below(shape):
    rng = np.random.default_rng(42)
    A = rng.standard_normal(shape) * np.linspace(0.1, 1.0, shape[1])
    sigma = np.linalg.svd(A, compute_uv=False)[0]
    Aj, x = jnp.asarray(A), jnp.asarray(rng.standard_normal(shape[1]))

    def fn(v):  # J = A at every x
        return Aj @ v

    dense = cv.operator_norm(fn, x)
    free = cv.operator_norm(fn, x, max_dense_entries=0, options=cv.SolverOptions(tol=1e-8))
    assert dense == pytest.approx(sigma, rel=1e-12)
    assert free <= sigma * (1 + 1e-12) and free == pytest.approx(sigma, rel=1e-8)
    with pytest.raises(RuntimeError, match=r"did not meet `options.tol` = 1.0e-12 in 2 steps \(`options.num_steps`\)"):
        cv.operator_norm(fn, x, max_dense_entries=0, options=cv.SolverOptions(tol=1e-12, num_steps=2))
    with pytest.raises(ValueError, match=r"`options.tol` must lie in \(0, 1\)"):
        cv.operator_norm(fn, x, options=cv.SolverOptions(tol=1.0))
    with pytest.raises(ValueError, match="`SolverOptions.tol` must be None or a finite float > 0"):
        cv.SolverOptions(tol=0.0)
    with pytest.raises(ValueError, match="`SolverOptions.num_steps` must be an integer >= 1"):
        cv.SolverOptions(num_steps=0)
    with pytest.raises(TypeError, match="`options` must be a SolverOptions"):
        cv.operator_norm(fn, x, options={"tol": 1e-3})


def test_operator_norm_of_a_fresh_closure_compiles_nothing_new():
    """The head-parameter Jacobian norm of the Thm 4.1 premises: a closure made afresh per call (new arrays of the
    same shapes) reuses the compiled Lanczos loop, and the norm matches the dense Jacobian's."""
    from ssl_geometry import heads

    m = heads.mlp(6, (20,), 30, activation="gelu", bias=False, dtype=jnp.float64)

    def norm(seed, **kw):
        v = m.init(jax.random.PRNGKey(seed))
        z = jax.random.normal(jax.random.PRNGKey(seed + 1), (5, 6), jnp.float64)
        flat, unravel = ravel_pytree(v["params"])
        return cv.operator_norm(lambda th: m.apply({"params": unravel(th)}, z)[0], flat, **kw)

    norm(0, max_dense_entries=0)
    out = {}
    assert _compilations(lambda: out.update(r=norm(2, max_dense_entries=0))) == []
    assert out["r"] == pytest.approx(norm(2), rel=1e-6) and out["r"] <= norm(2) * (1 + 1e-12)
