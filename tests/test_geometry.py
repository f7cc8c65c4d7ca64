"""Effective Hessian, premises, Thm 3.1 whitening and Thm 4.1 collapse classification (float64)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssl_geometry import as_function, geometry, heads

N, D, HID, K = 3, 4, 6, 3


def _vicreg_like(u):
    """Batch-coupled smooth loss: invariance between halves + covariance + variance terms."""
    n = u.shape[0]
    a, b = u[: n // 2 + 1], u[n // 2 :]  # overlapping halves (n = 3): still couples all rows
    inv = jnp.mean((a[:2] - b[:2]) ** 2)
    uc = u - jnp.mean(u, axis=0)
    cov = uc.T @ uc / (n - 1)
    off = jnp.sum((cov * (1 - jnp.eye(u.shape[1]))) ** 2)
    var = jnp.sum((jnp.diag(cov) - 1.0) ** 2)
    return inv + off + 0.5 * var


@pytest.fixture(scope="module")
def mlp_heads():
    out = {}
    for act in ("swish", "relu", "identity"):
        m = heads.mlp(D, (HID,), K, activation=act, dtype=jnp.float64)
        v = m.init(jax.random.PRNGKey(7))
        out[act] = (as_function(m, v), v)
    return out


@pytest.fixture(scope="module")
def z_batch():
    return jax.random.normal(jax.random.PRNGKey(1), (N, D), jnp.float64)


def _rel(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300)


def _np_jacobian(variables, act, z):
    """Analytic NumPy Jacobian of x -> sigma(x W1 + b1) W2 + b2, per sample: (k, d)."""
    L = variables["params"]["layers"]
    W1, b1, W2 = (np.asarray(L[0]["w"]), np.asarray(L[0]["b"]), np.asarray(L[1]["w"]))
    a = np.asarray(z) @ W1 + b1
    if act == "swish":
        s = 1 / (1 + np.exp(-a))
        dsig = s * (1 + a * (1 - s))
    elif act == "relu":
        dsig = (a > 0).astype(float)
    else:
        dsig = np.ones_like(a)
    return W2.T @ (dsig[:, None] * W1.T), a


def test_full_matches_hessian_of_composition_and_splits(mlp_heads, z_batch):
    h, _ = mlp_heads["swish"]
    # batch-coupled loss, batch z
    eh = geometry.effective_hessian(h, _vicreg_like, z_batch)
    ref = jax.hessian(lambda x: _vicreg_like(h(x.reshape(N, D))))(z_batch.reshape(-1))
    assert eh.full.shape == (N * D, N * D) and eh.loss_hessian.shape == (N * K, N * K)
    assert _rel(eh.full, ref) < 1e-10
    assert _rel(eh.metric + eh.interaction, eh.full) < 1e-12
    # H_L couples samples (off-diagonal blocks non-zero)
    assert np.max(np.abs(np.asarray(eh.loss_hessian)[:K, K:])) > 1e-3
    # single sample
    t = jnp.array([0.3, -1.0, 0.5])
    loss1 = lambda u: jnp.sum(jnp.log(jnp.cosh(u - t)))
    eh1 = geometry.effective_hessian(h, loss1, z_batch[0])
    ref1 = jax.hessian(lambda x: loss1(h(x)))(z_batch[0])
    assert eh1.full.shape == (D, D)
    assert _rel(eh1.full, ref1) < 1e-10
    assert _rel(eh1.metric + eh1.interaction, eh1.full) < 1e-12


def test_library_loss_if_present(mlp_heads):
    losses = pytest.importorskip("ssl_geometry.losses")
    h, _ = mlp_heads["swish"]
    z = jax.random.normal(jax.random.PRNGKey(3), (4, D), jnp.float64)

    def loss(u):  # two views = first and second half of the batch
        return losses.barlow_twins(u[:2], u[2:])

    # under jit (one compilation instead of eager dispatch for new shapes): also checks jit-compatibility
    eh = jax.jit(lambda x: geometry.effective_hessian(h, loss, x))(z)
    ref = jax.jit(jax.hessian(lambda x: loss(h(x.reshape(4, D)))))(z.reshape(-1))
    assert _rel(eh.full, ref) < 1e-10
    assert _rel(eh.metric + eh.interaction, eh.full) < 1e-12


def test_metric_against_numpy_and_interaction_zero_for_piecewise_linear(mlp_heads, z_batch):
    rng = np.random.default_rng(0)
    A = rng.normal(size=(N * K, N * K))
    Q = A @ A.T + np.eye(N * K)  # batch-coupling SPD H_L
    c = rng.normal(size=N * K)
    loss = lambda u: 0.5 * u.reshape(-1) @ jnp.asarray(Q) @ u.reshape(-1) + jnp.asarray(c) @ u.reshape(-1)
    for act in ("swish", "relu", "identity"):
        h, v = mlp_heads[act]
        eh = geometry.effective_hessian(h, loss, z_batch)
        Jb = [_np_jacobian(v, act, z_batch[i]) for i in range(N)]
        if act == "relu":  # away from kinks
            assert min(np.min(np.abs(a)) for _, a in Jb) > 1e-3
        J = np.zeros((N * K, N * D))
        for i, (Ji, _) in enumerate(Jb):
            J[i * K : (i + 1) * K, i * D : (i + 1) * D] = Ji
        np.testing.assert_allclose(np.asarray(eh.loss_hessian), Q, atol=1e-12)
        assert _rel(eh.jacobian, J) < 1e-12
        assert _rel(eh.metric, J.T @ Q @ J) < 1e-12
        u = np.concatenate([np.asarray(h(z_batch[i])) for i in range(N)])
        np.testing.assert_allclose(np.asarray(eh.residual), Q @ u + c, rtol=1e-12)
        M = float(jnp.max(jnp.abs(eh.interaction)))
        if act == "swish":
            assert M > 1e-2
        else:
            assert M == 0.0
        # per-sample path gives the same pieces
        eh2 = geometry.effective_hessian(h, loss, z_batch, per_sample=True)
        assert _rel(eh2.metric, eh.metric) < 1e-12
        assert _rel(eh2.jacobian, eh.jacobian) < 1e-14
        np.testing.assert_allclose(np.asarray(eh2.interaction), np.asarray(eh.interaction), atol=1e-13 * max(M, 1.0))


def test_premises_report(mlp_heads, z_batch):
    h, _ = mlp_heads["swish"]
    eh = geometry.effective_hessian(h, _vicreg_like, z_batch)
    p = geometry.premises(eh)
    eL = np.linalg.eigvalsh(np.asarray(eh.loss_hessian))
    np.testing.assert_allclose(p.loss_hessian_eigenvalues, eL, atol=1e-12)
    assert p.psd_tolerance == pytest.approx(N * K * np.finfo(np.float64).eps * np.max(np.abs(eL)))
    assert p.loss_hessian_psd == bool(eL[0] >= -p.psd_tolerance)
    assert p.loss_hessian_rank == int(np.sum(np.abs(eL) > p.rank_tolerance))
    assert p.residual_norm == pytest.approx(np.linalg.norm(np.asarray(eh.residual)), rel=1e-14)
    ef = np.linalg.eigvalsh(np.asarray(eh.full))
    assert p.extremes["full"] == pytest.approx((ef[0], ef[-1]), rel=1e-10)
    assert p.signs["metric"] in ("PSD", "indefinite")
    assert p.signs["metric"] == ("PSD" if p.loss_hessian_psd else p.signs["metric"])
    # a rank-deficient PSD H_L: sum of squares of the first output only
    p2 = geometry.premises(geometry.effective_hessian(h, lambda u: jnp.sum(u[:, 0] ** 2), z_batch))
    assert p2.loss_hessian_psd and p2.loss_hessian_rank == N
    assert p2.signs["loss_hessian"] == "PSD"
    d = p2.as_dict()
    assert isinstance(d["loss_hessian_eigenvalues"], list) and len(d["loss_hessian_eigenvalues"]) == N * K


def test_pullback_metric_per_sample(mlp_heads, z_batch):
    h, v = mlp_heads["swish"]
    Hs = jnp.asarray(np.diag([1.0, 2.0, 0.5]))
    pm = geometry.pullback_metric(h, z_batch, Hs)
    for i in range(N):
        J, _ = _np_jacobian(v, "swish", z_batch[i])
        np.testing.assert_allclose(np.asarray(pm.euclidean[i]), J.T @ J, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(np.asarray(pm.loss[i]), J.T @ np.asarray(Hs) @ J, rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError, match="loss_hessian"):
        geometry.pullback_metric(h, z_batch, jnp.eye(2))


def test_effective_hvp_matches_dense(mlp_heads, z_batch):
    h, _ = mlp_heads["swish"]
    eh = geometry.effective_hessian(h, _vicreg_like, z_batch)
    v = jax.random.normal(jax.random.PRNGKey(5), (N * D,), jnp.float64)
    for part, dense in (("full", eh.full), ("metric", eh.metric), ("interaction", eh.interaction)):
        mv = geometry.effective_hvp(h, _vicreg_like, z_batch, part=part)
        assert _rel(mv(v), dense @ v) < 1e-12
        assert mv(v.reshape(N, D)).shape == (N, D)
    with pytest.raises(ValueError, match="`v` must have shape"):
        geometry.effective_hvp(h, _vicreg_like, z_batch)(jnp.ones(5))
    with pytest.raises(ValueError, match="part"):
        geometry.effective_hvp(h, _vicreg_like, z_batch, part="hessian")


def test_whitening_head_thm31():
    """Log-sum-exp at u = 0: H_L = (I - 11^T/k)/k has rank k - 1; whiten a random (k-1)-dim S."""
    k, d = 4, 6
    r = k - 1
    lse = lambda u: jax.nn.logsumexp(u)
    HL = jax.hessian(lse)(jnp.zeros(k))
    B = np.linalg.qr(np.random.default_rng(3).normal(size=(d, r)))[0]
    wh = geometry.whitening_head(HL, B)
    assert wh.loss_hessian_rank == r and wh.paper.shape == (k, d) and wh.weight.shape == (d, k)
    np.testing.assert_allclose(np.asarray(wh.eigenvalues), 1.0 / k, rtol=1e-12)
    head = lambda z: z @ wh.weight  # bias-free: z = 0 maps to u = 0
    eh = geometry.effective_hessian(head, lse, jnp.zeros(d))
    chk = geometry.check_whitening(eh, B)
    assert chk.max_rel_error < 1e-10
    c = np.random.default_rng(4).normal(size=(5, r))
    for ci in c:
        vv = B @ ci
        assert vv @ np.asarray(eh.full) @ vv == pytest.approx(vv @ vv, rel=1e-10)
    # off S the linear head's H_eff vanishes: the construction destroys S-perp
    assert chk.complement_eigenvalues.shape == (d - r,)
    assert np.max(np.abs(chk.complement_eigenvalues)) < 1e-12 and chk.cross_norm < 1e-12
    # a non-whitening head is detected
    bad = geometry.check_whitening(2.0 * np.asarray(eh.full), B)
    assert bad.max_rel_error == pytest.approx(1.0, rel=1e-10)
    with pytest.raises(ValueError, match="rank"):
        geometry.whitening_head(HL, np.linalg.qr(np.random.default_rng(5).normal(size=(d, k)))[0])
    with pytest.raises(ValueError, match="orthonormal"):
        geometry.whitening_head(HL, 2.0 * B)


def _collapsed_state(h):
    c = jax.random.normal(jax.random.PRNGKey(11), (D,), jnp.float64)
    z = jnp.tile(c, (N, 1))
    target = jax.random.normal(jax.random.PRNGKey(12), (N, K), jnp.float64) * 2.0
    return z, (lambda u: 0.5 * jnp.sum((u - target) ** 2))


def test_classify_collapse_thm41(mlp_heads):
    """The sign logic on a collapsed state that is *not* an equilibrium (random MSE targets, k < d):
    by default the stationarity premise fails; with the stationarity check switched off
    (``stationary_tol=1``: the ratio |J^T rho| / (|J| |rho|) never exceeds 1) the eigenvalue logic
    of the conclusion is exercised. Certified equilibria: tests/test_thm41.py."""
    results = {}
    for act in ("swish", "relu", "identity"):
        h, v = mlp_heads[act]
        z, mse = _collapsed_state(h)
        if act == "relu":
            assert np.min(np.abs(_np_jacobian(v, act, z[0])[1])) > 1e-3  # away from kinks
        strict = geometry.classify_collapse(h, mse, z, activation=act, timescale_ratio=10.0)
        assert strict.conclusion == "premise violated" and strict.premises.stationary_z is False
        assert strict.premises.grad_z_ratio > 0.1 and "stationary_z" in strict.premises.violated()
        res = geometry.classify_collapse(h, mse, z, activation=act, timescale_ratio=10.0, stationary_tol=1.0)
        results[act] = res
        p = res.premises
        assert p.loss_hessian_psd and p.residual_nonzero and p.stationary_z
        assert p.timescale_separation is True and p.collapsed is True and p.stationary_head is None
        assert res.method == "dense"
        eh = geometry.effective_hessian(h, mse, z)
        e = np.linalg.eigvalsh(np.asarray(eh.full))
        assert res.lambda_min["full"] == pytest.approx(e[0], abs=1e-12)
        assert res.eig_tol == pytest.approx(geometry.sign_tolerance(e, np.float64), rel=1e-6)
    s = results["swish"]
    assert s.conclusion == "strict instability" and s.predicted == s.conclusion
    assert s.lambda_min["full"] < -1e-3 and s.lambda_min["interaction"] < 0 <= s.lambda_min["metric"] + 1e-12
    assert results["relu"].conclusion == "no second-order escape"
    assert results["relu"].premises.c2_head is False and results["relu"].premises.holds is False
    assert results["relu"].premises.holds_except_smoothness is True
    assert results["identity"].conclusion == "no second-order escape"
    for act in ("relu", "identity"):
        assert results[act].lambda_min["full"] >= -results[act].eig_tol
        assert results[act].lambda_min["interaction"] == 0.0 == results[act].lambda_max["interaction"]


def test_classify_collapse_premise_violations(mlp_heads):
    h, _ = mlp_heads["swish"]
    z, mse = _collapsed_state(h)
    # negative cosine loss: indefinite H_L
    t = jax.random.normal(jax.random.PRNGKey(13), (N, K), jnp.float64)

    def neg_cos(u):
        return -jnp.mean(jnp.sum(u * t, 1) / (jnp.linalg.norm(u, axis=1) * jnp.linalg.norm(t, axis=1)))

    res = geometry.classify_collapse(h, neg_cos, z, activation="swish", stationary_tol=1.0)
    assert res.conclusion == "premise violated"
    assert res.premises.loss_hessian_psd is False and res.lambda_min["loss_hessian"] < 0
    # slow head (timescale premise) and zero residual
    assert (
        geometry.classify_collapse(h, mse, z, activation="swish", timescale_ratio=0.5, stationary_tol=1.0).conclusion
        == "premise violated"
    )
    u0 = h(z)
    zero_res = geometry.classify_collapse(h, lambda u: 0.5 * jnp.sum((u - u0) ** 2), z, activation="swish")
    assert zero_res.conclusion == "premise violated" and zero_res.premises.residual_nonzero is False
    with pytest.raises(ValueError, match="activation"):
        geometry.classify_collapse(h, mse, z, activation="swishy")
    # a non-collapsed batch is reported (informational), not a premise violation
    spread = geometry.classify_collapse(
        h, mse, z + 0.1 * jnp.arange(N * D).reshape(N, D), smooth=True, stationary_tol=1.0
    )
    assert spread.premises.collapsed is False and spread.conclusion != "premise violated"
    assert geometry.head_smoothness(jax.nn.silu) == "smooth" and geometry.head_smoothness(jax.nn.relu) == "piecewise"
    assert geometry.head_smoothness(lambda x: x) == "unknown" and geometry.head_smoothness("identity") == "linear"


def test_classify_collapse_lanczos_agrees_with_dense(mlp_heads):
    h, _ = mlp_heads["swish"]
    z, mse = _collapsed_state(h)
    dense = geometry.classify_collapse(h, mse, z, activation="swish", stationary_tol=1.0)
    lz = geometry.classify_collapse(h, mse, z, activation="swish", max_dense_dim=4, stationary_tol=1.0)
    assert lz.method == "lanczos" and lz.conclusion == dense.conclusion
    for name in ("full", "metric", "interaction", "loss_hessian"):
        assert lz.lambda_min[name] == pytest.approx(dense.lambda_min[name], abs=1e-10)
        assert lz.lambda_max[name] == pytest.approx(dense.lambda_max[name], abs=1e-10)
    for name in ("full", "metric", "interaction"):
        assert lz.residual_norms[name]["converged"]


def test_effective_hessian_raises_on_non_finite(mlp_heads):
    h, _ = mlp_heads["swish"]
    # cosine-normalised loss at u = 0: 0/0 in the Hessian
    with pytest.raises(FloatingPointError, match="effective_hessian"):
        geometry.effective_hessian(lambda z: 0.0 * z, lambda u: -jnp.sum(u / jnp.linalg.norm(u)), jnp.ones(D))
    with pytest.raises(FloatingPointError, match="`z`"):
        geometry.effective_hessian(h, lambda u: jnp.sum(u**2), jnp.full((N, D), jnp.nan))
    # under jit nothing is checked (tracers), the value flows through
    out = jax.jit(lambda z: geometry.effective_hessian(h, lambda u: jnp.sum(u**2), z).full)(jnp.ones((N, D)))
    assert np.all(np.isfinite(np.asarray(out)))


def test_bad_inputs(mlp_heads):
    h, _ = mlp_heads["swish"]
    with pytest.raises(ValueError, match="`z` must have rank"):
        geometry.effective_hessian(h, lambda u: jnp.sum(u), jnp.ones((2, 2, D)))
    with pytest.raises(ValueError, match="scalar"):
        geometry.effective_hessian(h, lambda u: u, jnp.ones(D))
    with pytest.raises(TypeError, match="EffectiveHessian"):
        geometry.premises(np.eye(3))


# ----------------------------------------------------------------------------- failures in the caller's terms


def test_empty_batch_is_named_not_reported_as_a_non_finite_loss(mlp_heads):
    head, _ = mlp_heads["swish"]
    with pytest.raises(ValueError, match=r"`z` is empty \(shape \(0, 4\)\)"):
        geometry.effective_hessian(head, lambda u: jnp.mean(u**2), jnp.zeros((0, D)))
    with pytest.raises(ValueError, match="`z` is empty"):
        geometry.collapse_spectrum(head, lambda u: jnp.mean(u**2), jnp.zeros((0, D)))


def test_gradient_flow_with_a_nan_loss_reports_the_field_not_max_steps():
    """A NaN loss makes every step's error estimate NaN: reported as a non-finite field at once, no step taken."""
    from ssl_geometry import dynamics

    save = jnp.array([0.0, 1.0])
    with pytest.raises(dynamics.DynamicsError, match="non-finite at the start") as err:
        dynamics.gradient_flow(lambda p, batch, args: jnp.sum(p**2) * jnp.nan, jnp.ones(3), t1=1.0, save_at=save)
    assert "max_steps" not in str(err.value)
    tr = dynamics.gradient_flow(
        lambda p, batch, args: jnp.sum(p**2) * jnp.nan, jnp.ones(3), t1=1.0, save_at=save, throw=False
    )
    assert not tr.ok and tr.status == "non_finite" and tr.n_steps == 0 and not tr.saved.any()
    assert np.isnan(float(tr.observed[0][0]))  # nothing recorded, nothing invented


def test_effective_hvp_operator_keeps_no_reference_to_the_callers_head():
    """The linearised operator is built from closures made afresh on every call: the library's caches must not
    hold them (nor what they close over, here a head object with its weight) once the caller drops the result."""
    import gc
    import weakref

    class Head:
        def __init__(self, W):
            self.W = W

        def __call__(self, z):
            return jnp.tanh(z @ self.W)

    z = jax.random.normal(jax.random.PRNGKey(0), (3, 4), jnp.float64)
    head = Head(jnp.eye(4, dtype=jnp.float64) * 0.5)
    alive = weakref.ref(head)
    for part in ("full", "interaction", "metric"):
        mv, args = geometry.effective_hvp_operator(head, lambda u: jnp.sum(u**4), z, part=part)
        assert np.isfinite(np.asarray(mv(jnp.ones(12, jnp.float64), *args))).all()
    del head, mv, args
    gc.collect()
    assert alive() is None
