"""Thm 4.1 premises and conclusion on hand-made states with known answers (float64)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssl_geometry import curvature, geometry, heads, losses

# Linear head h(z) = z @ W, d = 2 -> k = 3; J = W^T, null(J^T) = null(W) = span(e3).
W = jnp.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
C = jnp.array([0.5, -1.5])
E3 = jnp.array([0.0, 0.0, 1.0])
E1 = jnp.array([1.0, 0.0, 0.0])


def _linear():
    model = heads.linear(2, 3, dtype=jnp.float64)
    return model, {"params": {"layers": [{"w": W}]}}


def _collapsed(n=2):
    return jnp.tile(C, (n, 1))


def test_stationary_collapsed_state_with_nonzero_residual_linear_head():
    model, v = _linear()
    z = _collapsed()
    u_star = C @ W
    targets = jnp.stack([u_star + E3, u_star - E3])  # t_i - u* in null(W^T), summing to zero
    loss = lambda u: losses.mse(u, targets)
    p = geometry.thm41_premises(model, v, loss, z, timescale_ratio=10.0)
    # rho_i = (2/n)(u* - t_i) = -/+ e3: |rho| = sqrt(2); H_L = (2/n) I = I.
    assert p.residual_norm == pytest.approx(np.sqrt(2.0), abs=1e-14)
    assert p.lambda_min_loss_hessian == pytest.approx(1.0, abs=1e-14) == p.lambda_max_loss_hessian
    assert p.grad_z_norm == 0.0 and p.grad_head_norm == 0.0
    assert p.residual_nonzero and p.loss_hessian_psd and p.stationary_z and p.stationary_head
    assert p.c2_head is True and p.head_kind == "linear" and p.timescale_separation is True
    assert p.holds and p.collapsed and p.violated() == ()
    res = geometry.classify_collapse(model, loss, z, variables=v, timescale_ratio=10.0)
    # H_eff = G = blockdiag((2/n) W W^T) = I_4, M = 0.
    assert res.conclusion == "no second-order escape" == res.predicted
    assert res.lambda_min["full"] == pytest.approx(1.0, abs=1e-13) and res.lambda_max["interaction"] == 0.0
    # the library construction certifies the same kind of state
    eq = geometry.collapsed_equilibrium(model, v, "mse_target", C, 2, key=jax.random.PRNGKey(0))
    assert eq.certified and eq.null_dim == 1 and eq.residual_error < 1e-14
    r = np.asarray(eq.residual)
    assert np.allclose(r[0], -r[1]) and abs(abs(r[0, 2]) - np.linalg.norm(r[0])) < 1e-14  # +-e3 direction


def test_non_stationary_collapsed_state():
    model, v = _linear()
    z = _collapsed()
    targets = jnp.tile(C @ W + E1, (2, 1))  # t - u* = e1: in the range of W^T, not its null space
    loss = lambda u: losses.mse(u, targets)
    p = geometry.thm41_premises(model, v, loss, z, timescale_ratio=10.0)
    # rho_i = -e1 for both rows: |J^T rho| = |J| |rho| (ratio 1) and likewise for the head.
    assert p.residual_nonzero and p.loss_hessian_psd
    assert p.grad_z_ratio == pytest.approx(1.0, abs=1e-12) and p.grad_head_ratio == pytest.approx(1.0, abs=1e-12)
    assert p.stationary_z is False and p.stationary_head is False and p.holds is False
    assert set(p.violated()) == {"stationary_z", "stationary_head"}
    res = geometry.classify_collapse(model, loss, z, variables=v, timescale_ratio=10.0)
    assert res.conclusion == "premise violated"
    # identical residual rows with a full-row-rank dh/dtheta: head stationarity would force rho = 0
    f = geometry.identical_rows_finding(model, v, loss, z)
    assert f["rows_identical"] and f["forces_zero_residual"]
    assert f["sigma_min_head_jacobian"] == pytest.approx(float(jnp.linalg.norm(C)), abs=1e-12)  # dh/dW = c (x) I
    assert f["residual_norm"] <= f["rho_bound"] * (1 + 1e-12)
    lz = geometry.identical_rows_finding(model, v, loss, z, max_dense_entries=1)  # matrix-free Gram + Lanczos
    assert lz["sigma_min_head_jacobian"] == pytest.approx(f["sigma_min_head_jacobian"], rel=1e-10)


def test_indefinite_loss_hessian_at_a_stationary_state():
    model, v = _linear()
    z = _collapsed()
    u_star = C @ W
    targets = jnp.stack([u_star + E3, u_star - E3])
    D = jnp.array([1.0, 1.0, -1.0])
    loss = lambda u: 0.5 * jnp.sum(D * (u - targets) ** 2)  # H_L = blockdiag(diag(D))
    p = geometry.thm41_premises(model, v, loss, z, timescale_ratio=10.0)
    assert p.lambda_min_loss_hessian == pytest.approx(-1.0, abs=1e-14)
    assert p.loss_hessian_psd is False and p.stationary_z and p.stationary_head and p.residual_nonzero
    assert p.violated() == ("loss_hessian_psd",) and p.holds is False
    assert geometry.classify_collapse(model, loss, z, variables=v).conclusion == "premise violated"


def test_timescale_and_plain_function_premises():
    model, v = _linear()
    z = _collapsed()
    targets = jnp.stack([C @ W + E3, C @ W - E3])
    loss = lambda u: losses.mse(u, targets)
    slow = geometry.thm41_premises(model, v, loss, z, timescale_ratio=0.5)
    assert slow.timescale_separation is False and slow.violated() == ("timescale_separation",)
    none = geometry.thm41_premises(model, v, loss, z)
    assert none.timescale_separation is None and none.holds
    fn = geometry.thm41_premises(lambda x: x @ W, None, loss, z, activation="identity")
    assert fn.stationary_head is None and fn.grad_head_norm is None and fn.holds
    with pytest.raises(ValueError, match="variables"):
        geometry.thm41_premises(model, None, loss, z)
    with pytest.raises(TypeError, match="premises"):
        geometry.thm41_conclusion("x", None)


@pytest.mark.parametrize("objective", geometry.EQUILIBRIUM_OBJECTIVES)
def test_constructed_equilibria_of_a_smooth_head_match_their_residual_formula(objective):
    m = heads.mlp(3, (5,), 6, activation="swish", dtype=jnp.float64)
    v = m.init(jax.random.PRNGKey(3))
    c = jax.random.normal(jax.random.PRNGKey(4), (3,), jnp.float64)
    eq = geometry.collapsed_equilibrium(m, v, objective, c, 4, key=jax.random.PRNGKey(5), timescale_ratio=5.0)
    u = m.apply(v, eq.z)[0]
    rho = np.asarray(jax.grad(eq.loss_fn)(u))
    if objective == "mse_target":  # rho_i = (2/n)(u_i - t_i)
        expect = 2.0 / 4 * (np.asarray(u) - np.asarray(eq.targets))
    else:  # rho_i = (softmax(u_i / 0.1) - softmax(T_i / 0.04)) / (n * 0.1)
        expect = (np.asarray(jax.nn.softmax(u / 0.1)) - np.asarray(jax.nn.softmax(eq.targets / 0.04))) / 0.4
    np.testing.assert_allclose(rho, expect, atol=1e-14)
    J = np.asarray(jax.jacfwd(lambda x: m.apply(v, x)[0])(c))
    assert np.max(np.abs(rho @ J)) < 1e-13 and np.max(np.abs(rho.sum(0))) < 1e-14
    p = eq.premises
    assert eq.certified and p.holds and p.residual_norm > 1e-5 and p.head_kind == "smooth"
    res = geometry.classify_collapse(m, eq.loss_fn, eq.z, variables=v, timescale_ratio=5.0)
    assert res.conclusion in ("strict instability", "no second-order escape")


def test_no_equilibrium_when_the_null_space_is_trivial():
    m = heads.mlp(4, (5,), 3, activation="swish", dtype=jnp.float64)  # k = 3 < d = 4: J^T injective
    v = m.init(jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match="no null space"):
        geometry.collapsed_equilibrium(m, v, "mse_target", jnp.ones(4), 3, key=jax.random.PRNGKey(1))
    with pytest.raises(ValueError, match="n"):
        geometry.null_space_residuals(np.eye(3)[:, :1], 1, key=jax.random.PRNGKey(0))


def test_head_kind_is_read_from_the_models_activations_not_its_name():
    """The kind comes from ``Model.activations`` (the smoothness table): a renamed head keeps its kind,
    a callable activation without a class is "unknown" and the premises say so, an ``Activation`` with
    its class is classified, and composites and the released heads declare every nonlinearity."""
    from ssl_geometry import activations, backbones, pretrained

    swish = heads.mlp(3, (5,), 4, activation="swish", dtype=jnp.float64)
    assert swish.activations == (activations.ACTIVATIONS["swish"],)
    assert geometry.head_smoothness(swish._replace(name="mlp(3->5->4, relu, bn=False)")) == "smooth"
    assert geometry.head_smoothness(heads.linear(3, 4)) == "linear" and heads.linear(3, 4).activations == ()
    relu_then_tanh = heads.compose(heads.mlp(3, (5,), 4, activation="relu"), heads.mlp(4, (5,), 2, activation="tanh"))
    assert [a.name for a in relu_then_tanh.activations] == ["relu", "tanh"]
    assert geometry.head_smoothness(relu_then_tanh) == "non_c2"
    assert geometry.head_smoothness(heads.mlp(3, (5, 5), 4, activation="elu")) == "non_c2"
    assert geometry.head_smoothness(heads.mlp(3, (5, 5), 4, activation="leaky_relu")) == "piecewise"
    assert geometry.head_smoothness(heads.mlp(3, (5,), 4, activation=jax.nn.relu)) == "piecewise"
    dino1 = pretrained.dino_head(3, 5, hidden_dim=4, bottleneck_dim=3, nlayers=1)  # affine MLP, then F.normalize
    assert [a.name for a in dino1.activations] == ["l2_normalize"] and geometry.head_smoothness(dino1) == "smooth"
    assert geometry.head_smoothness(pretrained.vicreg_projector((3, 4, 2))) == "piecewise"
    assert geometry.head_smoothness(pretrained.barlowtwins_projector((3, 4, 2), loss_bn=True)) == "piecewise"
    assert geometry.head_smoothness(backbones.small_cnn((8, 8, 3), widths=(4,), activation="gelu")) == "smooth"
    assert geometry.head_smoothness(backbones.resnet(18)) == "unknown"  # declares no activations

    cube = lambda t: t**3
    model = heads.mlp(2, (3,), 3, activation=cube, dtype=jnp.float64)
    v = model.init(jax.random.PRNGKey(0))
    loss = lambda u: 0.5 * jnp.sum((u - 1.0) ** 2)
    p = geometry.thm41_premises(model, v, loss, _collapsed())
    assert p.head_kind == "unknown" and p.c2_head is None
    assert any("smoothness unknown" in note for note in p.notes)
    stated = heads.mlp(2, (3,), 3, activation=activations.Activation("cube", cube, "c2"), dtype=jnp.float64)
    p2 = geometry.thm41_premises(stated, v, loss, _collapsed())
    assert p2.head_kind == "smooth" and p2.c2_head is True
    np.testing.assert_array_equal(stated.apply(v, _collapsed())[0], model.apply(v, _collapsed())[0])


@pytest.mark.slow  # an end-to-end run (the slow tier of .ci/run)
def test_dense_and_lanczos_spectra_agree_where_both_apply():
    """Below MATRIX_FREE_ABOVE the dense path is exact; forced Lanczos (max_dense_dim=1) matches it within its residuals."""
    m = heads.simsiam_projector(
        4, 6, activation="swish", batch_norm=True, dtype=jnp.float64
    )  # train-mode BN couples rows
    v = m.init(jax.random.PRNGKey(8))
    z = jax.random.normal(jax.random.PRNGKey(9), (5, 4), jnp.float64)
    target = jax.random.normal(jax.random.PRNGKey(10), (5, 6), jnp.float64)
    head = lambda x: m.apply(v, x, train=True)[0]
    loss = lambda u: losses.negative_cosine(u, target)
    dense = geometry.collapse_spectrum(head, loss, z)
    free = geometry.collapse_spectrum(head, loss, z, max_dense_dim=1, options=curvature.SolverOptions(num_steps=20))
    assert dense.method == "dense" and free.method == "lanczos" and free.notes == ()
    scale = max(abs(dense.lambda_min["full"]), abs(dense.lambda_max["full"]))
    for name in ("full", "metric", "interaction"):
        r = free.residual_norms[name]
        assert r["converged"]
        assert abs(free.lambda_min[name] - dense.lambda_min[name]) <= max(r["min"], 1e-12 * scale)
        assert abs(free.lambda_max[name] - dense.lambda_max[name]) <= max(r["max"], 1e-12 * scale)
    # the same routing for the loss Hessian of the premises
    pd = geometry.thm41_premises(head, None, loss, z)
    pl = geometry.thm41_premises(head, None, loss, z, max_dense_dim=1, lanczos_steps=30)
    np.testing.assert_allclose(
        [pl.lambda_min_loss_hessian, pl.lambda_max_loss_hessian],
        [pd.lambda_min_loss_hessian, pd.lambda_max_loss_hessian],
        rtol=1e-8,
        atol=1e-12,
    )


@pytest.mark.slow  # an end-to-end run (the slow tier of .ci/run)
def test_above_the_threshold_no_dense_eigensolve_whatever_max_dense_dim_says():
    assert geometry.MATRIX_FREE_ABOVE == 2048
    m = heads.mlp(1040, (4,), 3, activation="swish", dtype=jnp.float64)
    v = m.init(jax.random.PRNGKey(11))
    z = jax.random.normal(jax.random.PRNGKey(12), (2, 1040), jnp.float64)  # H_eff is 2080-dimensional
    loss = lambda u: jnp.sum(jnp.sin(u)) + 0.5 * jnp.sum(u**2)
    head = lambda x: m.apply(v, x)[0]
    spec = geometry.collapse_spectrum(head, loss, z, max_dense_dim=10**6)
    assert spec.method == "lanczos" and "MATRIX_FREE_ABOVE = 2048" in spec.notes[0]
    assert all(spec.residual_norms[p]["converged"] for p in ("full", "metric", "interaction"))
    # per sample the Hessian is a (1040, 1040) block: its dense spectrum bounds the union exactly
    blocks = [np.asarray(jax.hessian(lambda x: loss(m.apply(v, x)[0]))(z[i])) for i in range(2)]
    ev = np.linalg.eigvalsh(np.stack(blocks))
    np.testing.assert_allclose([spec.lambda_min["full"], spec.lambda_max["full"]], [ev.min(), ev.max()], rtol=1e-7)
