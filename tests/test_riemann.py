"""Riemann curvature from exact derivatives: spheres, flat metrics, hyperbolic plane, loss metrics."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssl_geometry import riemann

R = 2.0


def sphere2(x):
    """Round 2-sphere of radius R in spherical coordinates (theta, phi)."""
    return jnp.diag(jnp.stack([R**2 + 0 * x[0], R**2 * jnp.sin(x[0]) ** 2]))


def stereo(x):
    """Round n-sphere of radius R in stereographic coordinates: 4 R^2 / (1 + |x|^2)^2 I."""
    return 4 * R**2 / (1 + jnp.sum(x**2)) ** 2 * jnp.eye(x.shape[0], dtype=x.dtype)


def hyperbolic(x):
    """Upper half-plane, curvature -1."""
    return jnp.eye(2, dtype=x.dtype) / x[1] ** 2


def polar(x):
    """Euclidean plane in polar coordinates (r, t): diag(1, r^2)."""
    return jnp.diag(jnp.stack([1.0 + 0 * x[0], x[0] ** 2]))


def test_sphere2_spherical_coordinates():
    pts = jnp.array([[0.7, 0.1], [1.2, 2.0], [2.5, -1.0]])
    S = jax.vmap(lambda p: riemann.scalar_curvature(sphere2, p))(pts)
    np.testing.assert_allclose(np.asarray(S), 2 / R**2, rtol=1e-12)
    K = riemann.sectional_curvature(sphere2, pts[0], jnp.array([1.0, 0.2]), jnp.array([-0.3, 1.0]))
    assert float(K) == pytest.approx(1 / R**2, rel=1e-12)


def test_sphere3_stereographic_ricci_and_sections():
    n = 3
    x = jnp.array([0.3, -0.2, 0.5])
    assert float(riemann.scalar_curvature(stereo, x)) == pytest.approx(n * (n - 1) / R**2, rel=1e-12)
    ric = riemann.ricci_tensor(stereo, x)
    np.testing.assert_allclose(np.asarray(ric), (n - 1) / R**2 * np.asarray(stereo(x)), atol=1e-12)
    rng = np.random.default_rng(0)
    for _ in range(2):
        u, v = rng.normal(size=(2, n))
        assert float(riemann.sectional_curvature(stereo, x, u, v)) == pytest.approx(1 / R**2, rel=1e-11)
    with pytest.raises(ValueError, match="linearly independent"):
        riemann.sectional_curvature(stereo, x, jnp.asarray(u), 2.0 * jnp.asarray(u))


def test_flat_metrics_have_zero_curvature():
    rng = np.random.default_rng(1)
    A = rng.normal(size=(3, 3))
    const = jnp.asarray(A @ A.T + 3 * np.eye(3))
    Rc = riemann.riemann_tensor(lambda x: const + 0.0 * x[0], jnp.array([0.1, 0.2, 0.3]))
    assert float(jnp.max(jnp.abs(Rc))) == 0.0
    x = jnp.array([1.3, 0.4])
    Rp = riemann.riemann_tensor(polar, x)
    assert float(jnp.max(jnp.abs(Rp))) < 1e-14
    G = riemann.christoffel(polar, x)  # Gamma^r_tt = -r, Gamma^t_rt = Gamma^t_tr = 1/r, others 0
    ref = np.zeros((2, 2, 2))
    ref[0, 1, 1] = -1.3
    ref[1, 0, 1] = ref[1, 1, 0] = 1 / 1.3
    np.testing.assert_allclose(np.asarray(G), ref, atol=1e-15)
    # the same metric as the pullback of the Euclidean one through (r, t) -> (r cos t, r sin t)
    pb = riemann.pullback(
        lambda y: jnp.eye(2, dtype=y.dtype), lambda p: jnp.stack([p[0] * jnp.cos(p[1]), p[0] * jnp.sin(p[1])])
    )
    np.testing.assert_allclose(np.asarray(pb(x)), np.asarray(polar(x)), atol=1e-15)


def test_hyperbolic_plane():
    x = jnp.array([0.3, 1.7])
    assert float(riemann.scalar_curvature(hyperbolic, x)) == pytest.approx(-2.0, rel=1e-12)
    K = riemann.sectional_curvature(hyperbolic, x, jnp.array([1.0, 0.5]), jnp.array([0.0, 1.0]))
    assert float(K) == pytest.approx(-1.0, rel=1e-12)


def _lse_metric_loss(u):
    """Softmax cross-entropy-like loss with weight decay: hess = diag(p) - p p^T + 0.1 I (SPD)."""
    return jax.nn.logsumexp(u) + 0.05 * jnp.sum(u**2)


def test_riemann_symmetries_generic_metric():
    """Rm_ijkl = -Rm_jikl = -Rm_ijlk = Rm_klij and the first Bianchi identity (index convention)."""
    g = riemann.loss_metric(_lse_metric_loss)
    Rm = np.asarray(riemann.lowered_riemann(g, jnp.array([0.3, -0.4, 1.0])))
    scale = np.max(np.abs(Rm))
    assert scale > 1e-3
    tol = 1e-12 * scale
    np.testing.assert_allclose(Rm, -Rm.transpose(1, 0, 2, 3), atol=tol)
    np.testing.assert_allclose(Rm, -Rm.transpose(0, 1, 3, 2), atol=tol)
    np.testing.assert_allclose(Rm, Rm.transpose(2, 3, 0, 1), atol=tol)
    bianchi = Rm + Rm.transpose(1, 2, 0, 3) + Rm.transpose(2, 0, 1, 3)  # R_ijkl + R_jkil + R_kijl
    np.testing.assert_allclose(bianchi, 0.0, atol=tol)


def test_loss_metric_quadratic_flat_nonquadratic_curved():
    """Prop 3.3's premise: a quadratic loss is flat; softmax-CE + weight decay is curved."""
    rng = np.random.default_rng(2)
    A = rng.normal(size=(3, 3))
    A = jnp.asarray(A @ A.T + np.eye(3))
    b = jnp.asarray(rng.normal(size=3))
    quad = riemann.loss_metric(lambda u: 0.5 * u @ A @ u + b @ u)
    pts = jnp.asarray(rng.normal(size=(3, 3)))
    Rq = jax.vmap(lambda p: riemann.riemann_tensor(quad, p))(pts)
    assert float(jnp.max(jnp.abs(Rq))) == 0.0
    g = riemann.loss_metric(_lse_metric_loss)
    u = jnp.array([0.3, -0.4, 1.0])
    assert np.linalg.eigvalsh(np.asarray(g(u)))[0] > 0.09  # SPD: a metric
    S = float(riemann.scalar_curvature(g, u))
    # measured: S = 0.15542880988763... at u = (0.3, -0.4, 1.0) (non-zero: Prop 3.3 applies)
    assert abs(S) > 0.1
    assert S == pytest.approx(_fd_scalar_curvature(_np_lse_metric, np.asarray(u)), rel=1e-5)


def _np_lse_metric(u):
    p = np.exp(u - u.max())
    p /= p.sum()
    return np.diag(p) - np.outer(p, p) + 0.1 * np.eye(len(u))


def _fd_scalar_curvature(metric, x, h1=1e-5, h2=1e-3):
    """Independent NumPy reference: central differences of g and of Gamma, textbook formulas."""
    m = len(x)
    E = np.eye(m)

    def gamma(y):
        dg = np.stack([(metric(y + h1 * E[c]) - metric(y - h1 * E[c])) / (2 * h1) for c in range(m)], -1)
        first = 0.5 * (np.einsum("jli->lij", dg) + np.einsum("ilj->lij", dg) - np.einsum("ijl->lij", dg))
        return np.einsum("kl,lij->kij", np.linalg.inv(metric(y)), first)

    G = gamma(x)
    dG = np.stack([(gamma(x + h2 * E[c]) - gamma(x - h2 * E[c])) / (2 * h2) for c in range(m)], -1)
    Rt = (
        np.einsum("ljki->lijk", dG)
        - np.einsum("likj->lijk", dG)
        + np.einsum("lim,mjk->lijk", G, G)
        - np.einsum("ljm,mik->lijk", G, G)
    )
    ric = np.einsum("iijk->jk", Rt)
    return float(np.trace(np.linalg.inv(metric(x)) @ ric))
