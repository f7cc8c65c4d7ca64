"""Collapse / invariance metrics against closed forms and NumPy references (float64)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssl_geometry import metrics


def _with_singular_values(s, n, d, seed=0):
    rng = np.random.default_rng(seed)
    U = np.linalg.qr(rng.normal(size=(n, len(s))))[0]
    V = np.linalg.qr(rng.normal(size=(d, len(s))))[0]
    return U @ np.diag(s) @ V.T


def _entropy_rank(w, eps):
    p = w / w.sum() + eps
    return float(np.exp(-np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0))))


def test_effective_rank_closed_form():
    s = np.array([4.0, 2.0, 1.0, 0.5])
    z = jnp.asarray(_with_singular_values(s, 9, 6))
    s_all = np.r_[s, 0.0, 0.0]  # min(n, d) = 6 singular values; eps is added to every p_k
    for eps in (0.0, 1e-7):
        assert float(metrics.effective_rank(z, "rankme", eps=eps)) == pytest.approx(
            _entropy_rank(s_all, eps), rel=1e-12
        )
        assert float(metrics.effective_rank(z, "squared", eps=eps)) == pytest.approx(
            _entropy_rank(s_all**2, eps), rel=1e-12
        )
    # the two definitions differ here: squared concentrates mass on the top value
    assert (
        float(metrics.effective_rank(z, "squared", eps=0.0)) < float(metrics.effective_rank(z, "rankme", eps=0.0)) - 0.5
    )
    # r equal singular values: both give exactly r (eps = 0)
    z3 = jnp.asarray(_with_singular_values(np.full(3, 2.5), 7, 5, seed=1))
    for m in metrics.EFFECTIVE_RANK_METHODS:
        assert float(metrics.effective_rank(z3, m, eps=0.0)) == pytest.approx(3.0, rel=1e-12)


def test_effective_rank_method_is_explicit():
    z = jnp.ones((4, 3))
    with pytest.raises(TypeError):
        metrics.effective_rank(z)  # the method is required
    with pytest.raises(ValueError, match="method"):
        metrics.effective_rank(z, "entropy")
    with pytest.raises(ValueError, match="zero matrix"):
        metrics.effective_rank(jnp.zeros((4, 3)), "squared")
    with pytest.raises(ValueError, match="`z` must have rank 2"):
        metrics.effective_rank(jnp.ones(3), "rankme")


def test_covariance_condition_number_vs_numpy():
    rng = np.random.default_rng(3)
    z = rng.normal(size=(50, 4)) @ np.diag([3.0, 1.0, 0.5, 0.2])
    ref = np.linalg.cond(np.cov(z.T))
    assert float(metrics.covariance_condition_number(jnp.asarray(z))) == pytest.approx(ref, rel=1e-10)
    # singular covariance (rank 2 in R^3): inf without a floor, lambda_max / floor with one
    zs = jnp.asarray(np.c_[z[:, :2], z[:, :1] + z[:, 1:2]])
    assert np.isinf(float(metrics.covariance_condition_number(zs)))
    lam_max = np.linalg.eigvalsh(np.cov(np.asarray(zs).T))[-1]
    assert float(metrics.covariance_condition_number(zs, eig_floor=1e-3)) == pytest.approx(lam_max / 1e-3, rel=1e-10)
    assert np.isinf(float(metrics.covariance_condition_number(jnp.ones((5, 3)))))
    with pytest.raises(ValueError, match="eig_floor"):
        metrics.covariance_condition_number(zs, eig_floor=-1.0)


def test_normalized_std_collapsed_isotropic_and_numpy():
    collapsed = jnp.tile(jnp.array([[0.3, -1.0, 2.0, 0.5]]), (16, 1))
    assert float(metrics.normalized_std(collapsed)) == pytest.approx(0.0, abs=1e-15)
    d = 16
    iso = jax.random.normal(jax.random.PRNGKey(0), (20000, d))
    assert float(metrics.normalized_std(iso)) == pytest.approx(1 / np.sqrt(d), rel=0.01)
    z = np.random.default_rng(1).normal(size=(10, 5)) + 1.0
    zn = z / np.linalg.norm(z, axis=1, keepdims=True)
    assert float(metrics.normalized_std(jnp.asarray(z))) == pytest.approx(zn.std(0, ddof=1).mean(), rel=1e-12)
    assert float(metrics.normalized_std(jnp.asarray(z), ddof=0)) == pytest.approx(zn.std(0).mean(), rel=1e-12)
    with pytest.raises(ValueError, match="zero norm"):
        metrics.normalized_std(jnp.zeros((3, 2)))


def test_relative_update_size_groups():
    rng = np.random.default_rng(2)
    before = {
        "backbone": {"conv": jnp.asarray(rng.normal(size=(3, 3))), "bn": jnp.zeros(3)},
        "head": {"layers": [{"w": jnp.asarray(rng.normal(size=(3, 2)))}]},
    }
    delta = jax.tree_util.tree_map(lambda x: 0.1 * jnp.asarray(rng.normal(size=x.shape)), before)
    after = jax.tree_util.tree_map(jnp.add, before, delta)
    out = metrics.relative_update_size(before, after)

    def nrm(*xs):
        return np.sqrt(sum(np.sum(np.asarray(x) ** 2) for x in xs))

    b, h = before["backbone"], before["head"]["layers"][0]["w"]
    db, dh = delta["backbone"], delta["head"]["layers"][0]["w"]
    assert float(out["backbone"]) == pytest.approx(nrm(db["conv"], db["bn"]) / nrm(b["conv"]), rel=1e-12)
    assert float(out["head"]) == pytest.approx(nrm(dh) / nrm(h), rel=1e-12)
    assert float(out["all"]) == pytest.approx(nrm(db["conv"], db["bn"], dh) / nrm(b["conv"], h), rel=1e-12)
    custom = metrics.relative_update_size(before, after, {"w_only": lambda p: p.endswith("/w"), "bn": "backbone/bn"})
    assert float(custom["w_only"]) == pytest.approx(nrm(dh) / nrm(h), rel=1e-12)
    assert np.isinf(float(custom["bn"]))  # zero-norm group that moved
    same = metrics.relative_update_size(before, before, {"bn": "backbone/bn"})
    assert float(same["bn"]) == 0.0
    with pytest.raises(ValueError, match="matches no parameter"):
        metrics.relative_update_size(before, after, {"x": "neck"})
    with pytest.raises(ValueError, match="same pytree structure"):
        metrics.relative_update_size(before, {"backbone": before["backbone"]})


def test_orbit_statistics_constructed():
    C, _, T, rad, side = 3, 2, 6, 0.5, 4.0
    angles = 2 * np.pi * np.arange(T) / T
    circle = rad * np.stack([np.cos(angles), np.sin(angles), 0 * angles, 0 * angles], -1)  # (T, 4)
    centres = side / np.sqrt(3) * np.array([[0, 0, np.cos(a), np.sin(a)] for a in 2 * np.pi * np.arange(C) / C])
    offsets = np.array([[1.0, -2.0, 0.3, 0.0], [-1.0, 2.0, -0.3, 0.0]])  # mean zero over images
    reps = centres[:, None, None, :] + offsets[None, :, None, :] + circle[None, None, :, :]
    st = metrics.orbit_statistics(jnp.asarray(reps))
    intra = 2 * rad / np.tan(np.pi / (2 * T)) / (T - 1)  # mean chord over t != t'
    assert float(st.orbit_spread) == pytest.approx(rad, rel=1e-12)
    assert float(st.intra_orbit_distance) == pytest.approx(intra, rel=1e-12)
    assert float(st.inter_class_distance) == pytest.approx(side, rel=1e-12)
    assert float(st.class_orbit_ratio) == pytest.approx(side / intra, rel=1e-12)
    with pytest.raises(ValueError, match="2 classes"):
        metrics.orbit_statistics(jnp.asarray(reps[:1]))


def test_trajectory_curvature_exact_and_fd_order():
    R = 2.5

    def circle(a):
        return R * jnp.stack([jnp.cos(a), jnp.sin(a), 0.0 * a])

    thetas = jnp.linspace(0.0, 1.0, 5)
    kap = jax.vmap(lambda t: metrics.trajectory_curvature(circle, t))(thetas)
    np.testing.assert_allclose(np.asarray(kap), R, rtol=1e-14)
    geo = jax.vmap(lambda t: metrics.trajectory_curvature(circle, t, kind="geometric"))(thetas)
    np.testing.assert_allclose(np.asarray(geo), 1 / R, rtol=1e-12)

    # a generic path: r(t) = tanh(a t + b), r'' = -2 a^2 tanh sech^2 (closed form)
    a = np.array([0.7, -1.3, 0.4])
    b = np.array([0.1, 0.5, -0.2])

    def path(t):
        return jnp.tanh(jnp.asarray(a) * t + jnp.asarray(b))

    t0 = 0.3
    x = a * t0 + b
    ref = np.linalg.norm(-2 * a**2 * np.tanh(x) / np.cosh(x) ** 2)
    assert float(metrics.trajectory_curvature(path, t0)) == pytest.approx(ref, rel=1e-13)

    # FD version: error O(h^2) -- halving h divides the error by ~4
    errs = []
    for h in (0.2, 0.1, 0.05):
        grid = t0 + h * jnp.arange(-1, 2)
        reps = jax.vmap(path)(grid)
        errs.append(abs(float(metrics.fd_trajectory_curvature(reps, h)[0]) - ref))
    assert errs[0] / errs[1] == pytest.approx(4.0, rel=0.05)
    assert errs[1] / errs[2] == pytest.approx(4.0, rel=0.05)
    # circle: (2 - 2 cos h) / h^2 * R exactly
    h = 0.1
    reps = jax.vmap(circle)(h * jnp.arange(10.0))
    np.testing.assert_allclose(
        np.asarray(metrics.fd_trajectory_curvature(reps, h)), R * (2 - 2 * np.cos(h)) / h**2, rtol=1e-9
    )
    with pytest.raises(ValueError, match="scalar"):
        metrics.trajectory_curvature(circle, jnp.ones(2))
    with pytest.raises(ValueError, match="T >= 3"):
        metrics.fd_trajectory_curvature(reps[:2], h)


def test_metric_degeneracy_linear_head():
    rng = np.random.default_rng(4)
    W = rng.normal(size=(5, 3))
    z = rng.normal(size=5)
    v = rng.normal(size=5)
    head = lambda x: x @ jnp.asarray(W)
    got = float(metrics.metric_degeneracy(head, jnp.asarray(z), jnp.asarray(v)))
    assert got == pytest.approx(np.linalg.norm(W.T @ v) / np.linalg.norm(v), rel=1e-13)
    # along a rotation path z(theta) = rot(theta) z0 in the first two coordinates
    z0 = rng.normal(size=5)

    def path(t):
        c, s = jnp.cos(t), jnp.sin(t)
        return jnp.asarray(z0).at[0].set(c * z0[0] - s * z0[1]).at[1].set(s * z0[0] + c * z0[1])

    t = 0.4
    tangent = np.zeros(5)
    tangent[0] = -np.sin(t) * z0[0] - np.cos(t) * z0[1]
    tangent[1] = np.cos(t) * z0[0] - np.sin(t) * z0[1]
    got = float(metrics.augmentation_metric_degeneracy(head, path, t))
    assert got == pytest.approx(np.linalg.norm(W.T @ tangent) / np.linalg.norm(tangent), rel=1e-12)
    # a head that ignores the first two coordinates is blind to the rotation
    blind = lambda x: x[2:] * 3.0
    assert float(metrics.augmentation_metric_degeneracy(blind, path, t)) == 0.0
    with pytest.raises(ValueError, match="non-zero"):
        metrics.metric_degeneracy(head, jnp.asarray(z), jnp.zeros(5))


def test_effective_rank_centered_drops_the_mean_direction():
    # rows = mean + a trajectory moving in 2 orthogonal directions with equal energy:
    # centred, the squared-singular-value rank is exactly 2; uncentred the (large) mean dominates.
    mean = np.zeros(6)
    mean[0] = 50.0
    dev = np.array([[1.0, 0, 0, 0, 0, 0], [-1.0, 0, 0, 0, 0, 0], [0, 1.0, 0, 0, 0, 0], [0, -1.0, 0, 0, 0, 0]])
    dev = dev[:, [1, 2, 0, 3, 4, 5]]  # move in e_1, e_2; the mean sits along e_0
    z = jnp.asarray(mean + dev)
    assert float(metrics.effective_rank(z, "squared", eps=0.0, center=True)) == pytest.approx(2.0, rel=1e-12)
    assert float(metrics.effective_rank(z, "squared", eps=0.0)) < 1.01
    # centring is a row-mean subtraction: same as passing the centred matrix uncentred
    zc = z - jnp.mean(z, axis=0)
    for m in metrics.EFFECTIVE_RANK_METHODS:
        assert float(metrics.effective_rank(z, m, center=True)) == pytest.approx(
            float(metrics.effective_rank(zc, m)), rel=1e-12
        )
    with pytest.raises(TypeError, match="center"):
        metrics.effective_rank(z, "squared", center="yes")


def test_spearman_hand_ranks_nan_inf_and_undefined():
    # hand-made: ranks of y are (1, 3, 2, 4) against (1, 2, 3, 4): 1 - 6 * sum d^2 / (n (n^2 - 1)) = 0.8
    assert metrics.spearman([1.0, 2.0, 3.0, 4.0], [1.0, 3.0, 2.0, 4.0]) == pytest.approx(0.8, abs=1e-14)
    # inf ranks last (a singular covariance's condition number is the largest)
    assert metrics.spearman([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, np.inf]) == pytest.approx(1.0, abs=1e-14)
    # NaN pairs are dropped, not ranked
    assert metrics.spearman([1.0, 2.0, np.nan, 3.0, 4.0], [4.0, 3.0, 0.0, 2.0, 1.0]) == pytest.approx(-1.0, abs=1e-14)
    # undefined: constant series (also all-inf), fewer than 3 pairs
    assert np.isnan(metrics.spearman([1.0, 2.0, 3.0], [5.0, 5.0, 5.0]))
    assert np.isnan(metrics.spearman([1.0, 2.0, 3.0], [np.inf] * 3))
    assert np.isnan(metrics.spearman([1.0, 2.0, np.nan], [1.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match="equal length"):
        metrics.spearman([1.0, 2.0, 3.0], [1.0, 2.0])
