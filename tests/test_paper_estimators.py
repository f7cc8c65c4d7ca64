"""The paper's estimators (ssl_geometry.paper) on hand-made inputs with known answers (float64)."""

import jax.numpy as jnp
import numpy as np
import pytest

from ssl_geometry import metrics, paper


def test_angles_are_the_papers():
    assert paper.ROTATION_ORBIT_ANGLES == tuple(30.0 * i for i in range(12))
    assert len(paper.CURVATURE_ANGLES) == 10 and paper.CURVATURE_ANGLES[0] == 0.0 and paper.CURVATURE_ANGLES[-1] == 45.0
    assert paper.CONDITION_CLAMP == 1e-7


def test_representation_std_stacks_views_and_normalises():
    z1 = jnp.array([[3.0, 0.0], [0.0, 2.0]])
    z2 = jnp.array([[-5.0, 0.0], [0.0, -0.1]])
    # normalised rows (1,0), (0,1), (-1,0), (0,-1): each column has values (1,0,-1,0), var (ddof 1) = 2/3
    assert float(paper.representation_std(z1, z2)) == pytest.approx(np.sqrt(2.0 / 3.0), rel=1e-12)
    # one view: (1,0),(0,1) -> columns (1,0),(0,1): std ddof 1 = sqrt(1/2)
    assert float(paper.representation_std(z1)) == pytest.approx(np.sqrt(0.5), rel=1e-12)
    assert float(paper.representation_std(z1, z2)) == pytest.approx(
        float(metrics.normalized_std(jnp.concatenate([z1, z2]))), rel=1e-12
    )
    with pytest.raises(ValueError, match="feature dimension"):
        paper.representation_std(z1, jnp.ones((2, 3)))


def test_clamped_condition_number_known_and_singular():
    # normalised rows (±1, 0), (0, ±1) scaled anisotropically *before* normalisation: normalisation removes it
    z = jnp.array([[7.0, 0.0], [-7.0, 0.0], [0.0, 0.5], [0.0, -0.5]])
    assert float(paper.clamped_condition_number(z)) == pytest.approx(1.0, rel=1e-12)
    # rows on the circle at angles 0, 180, a, 180 + a: C = (2/3) [[1 + c^2, cs], [cs, s^2]]
    a = 0.3
    u = np.array([np.cos(a), np.sin(a)])
    z = jnp.array([[1.0, 0.0], [-1.0, 0.0], u, -u])
    lam = np.linalg.eigvalsh(np.array([[1 + u[0] ** 2, u[0] * u[1]], [u[0] * u[1], u[1] ** 2]]) * 2.0 / 3.0)
    assert float(paper.clamped_condition_number(z)) == pytest.approx(lam[1] / lam[0], rel=1e-10)
    # rank-deficient: 3 rows in 3-D give a centred rank <= 2, so the number is 1e7 * lambda_max
    zs = jnp.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    lam_max = float(np.linalg.eigvalsh(np.cov(np.asarray(zs).T, ddof=1))[-1])
    assert float(paper.clamped_condition_number(zs)) == pytest.approx(lam_max / 1e-7, rel=1e-9)
    # the project's estimator calls the same covariance singular (inf), with the floor it agrees
    assert np.isinf(float(metrics.covariance_condition_number(zs)))
    assert float(metrics.covariance_condition_number(zs, eig_floor=1e-7)) == pytest.approx(lam_max / 1e-7, rel=1e-9)
    with pytest.raises(ValueError, match="clamp"):
        paper.clamped_condition_number(zs, clamp=0.0)


def test_fd_curvature_undivided_and_normalised():
    h = 0.1
    t = np.arange(10) * h
    circle = np.stack([np.cos(t), np.sin(t)], axis=-1)
    exact = 2.0 * (1.0 - np.cos(h))  # |r_{t+1} - 2 r_t + r_{t-1}| on the unit circle, not divided by h^2
    assert float(paper.fd_curvature(jnp.asarray(3.0 * circle))) == pytest.approx(exact, rel=1e-12)
    assert float(paper.fd_curvature(jnp.asarray(3.0 * circle), normalize=False)) == pytest.approx(3 * exact, rel=1e-12)
    # the project's FD estimator divides by h^2 and does not normalise
    proj = metrics.fd_trajectory_curvature(jnp.asarray(3.0 * circle), h)
    assert float(jnp.mean(proj)) == pytest.approx(3 * exact / h**2, rel=1e-12)
    # a straight line has zero curvature; batch axes pass through
    line = np.stack([t, 2 * t], axis=-1)
    out = paper.fd_curvature(jnp.asarray(np.stack([line, circle])), normalize=False)
    assert out.shape == (2,) and float(out[0]) == pytest.approx(0.0, abs=1e-14)
    with pytest.raises(ValueError, match="T >= 3"):
        paper.fd_curvature(jnp.ones((2, 4)))


def test_curvature_and_timescale_ratios():
    assert float(paper.curvature_ratio(jnp.array([1.0, 3.0]), jnp.array([4.0, 4.0]))) == pytest.approx(
        2.0 / (1 + 5e-9), rel=1e-12
    )
    assert float(paper.timescale_ratio(jnp.array([2.0, 4.0]), jnp.array([1.0]))) == pytest.approx(
        3.0 / (1 + 1e-8), rel=1e-12
    )


def _two_class_orbits():
    # class 0: orbit of 4 points on the x axis at distances 1 and 3 from its centroid (0, 0);
    # class 1: the same orbit shifted by (0, 10)
    orb = np.array([[-1.0, 0.0], [1.0, 0.0], [-3.0, 0.0], [3.0, 0.0]])
    x = np.concatenate([orb, orb + np.array([0.0, 10.0])])
    ids = np.array([0] * 4 + [1] * 4)
    labels = ids.copy()
    angles = np.tile(np.arange(4) * 30.0, 2)
    return x, ids, labels, angles


def test_orbit_metrics_hand_made_and_against_project():
    x, ids, labels, angles = _two_class_orbits()
    m = paper.orbit_metrics(x, ids, labels, normalize=False)
    assert m["spread"] == pytest.approx((1 + 1 + 9 + 9) / 4, rel=1e-12)  # squared distances
    np.testing.assert_allclose(paper.orbit_spreads(x, ids, normalize=False), [5.0, 5.0], rtol=1e-12)
    # normalised: class 1's points (+-1, 10), (+-3, 10) on the unit circle, spread of that orbit by hand
    u = x[ids == ids[-1]] / np.linalg.norm(x[ids == ids[-1]], axis=1, keepdims=True)
    assert paper.orbit_spreads(x, ids)[-1] == pytest.approx(np.mean(np.sum((u - u.mean(0)) ** 2, 1)), rel=1e-12)
    # pairwise distances in the orbit: |-1-1|=2, |-1+3|=2, |-1-3|=4, |1+3|=4, |1-3|=2, |-3-3|=6 -> mean 20/6
    assert m["intra"] == pytest.approx(20.0 / 6.0, rel=1e-12)
    assert m["inter"] == pytest.approx(10.0, rel=1e-12)
    assert m["ratio"] == pytest.approx(10.0 / (20.0 / 6.0 + 1e-10), rel=1e-12)
    # the project's orbit_statistics: same intra/inter, spread as mean distance (2, not 5)
    reps = paper.orbits_by_class(x, ids, labels, angles)
    assert reps.shape == (2, 1, 4, 2)
    st = metrics.orbit_statistics(jnp.asarray(reps))
    assert float(st.orbit_spread) == pytest.approx(2.0, rel=1e-12)
    assert float(st.intra_orbit_distance) == pytest.approx(m["intra"], rel=1e-12)
    assert float(st.inter_class_distance) == pytest.approx(m["inter"], rel=1e-12)
    # compression: a head that halves every distance compresses the (squared) spread 4x
    assert paper.orbit_compression(x, 0.5 * x, ids, labels, normalize=False) == pytest.approx(4.0, rel=1e-9)
    with pytest.raises(ValueError, match="orbit_ids"):
        paper.orbit_metrics(x, ids[:3], labels)
    with pytest.raises(ValueError, match="orbit_ids"):
        paper.orbit_spreads(x, ids[:3])


def test_orbits_by_class_sorts_angles_and_rejects_ragged():
    x, ids, labels, angles = _two_class_orbits()
    perm = np.random.default_rng(0).permutation(len(x))
    reps = paper.orbits_by_class(x[perm], ids[perm], labels[perm], angles[perm])
    np.testing.assert_array_equal(reps, paper.orbits_by_class(x, ids, labels, angles))
    with pytest.raises(ValueError, match="ragged"):
        paper.orbits_by_class(x[:7], ids[:7], labels[:7], angles[:7])


def test_effective_rank_squared_is_centred():
    dev = np.array([[1.0, 0, 0], [-1.0, 0, 0], [0, 1.0, 0], [0, -1.0, 0]])
    traj = jnp.asarray(dev + np.array([0.0, 0.0, 40.0]))
    assert float(paper.effective_rank_squared(traj)) == pytest.approx(2.0, rel=1e-12)
    assert float(paper.effective_rank_squared(traj, center=False)) < 1.01
