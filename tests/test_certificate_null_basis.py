"""The certificate's basis of ``null(G)`` and the tolerance on ``M`` restricted to it (``_null_basis``).

``geometry.collapse_certificate`` decides whether ``Q^T M Q`` (``Q`` a computed orthonormal basis of
``null(G)``) is zero. Where ``null(J) = null(G)`` it takes ``Q`` from the SVD of ``J`` and bounds the
error of ``Q`` by Wedin's theorem, ``sin theta <= e_J / (sigma_r - sigma_{r+1} - e_J)``,
``e_J = max(k, d) eps |J|``: the square root of the Davis-Kahan bound on ``G``'s eigenvectors,
``dim eps |G| / gap``, which it keeps where the two null spaces differ. Hand-made quadratic heads
``h(z) = A z + (1/2) (z^T B_a z)_a`` at ``c = 0`` with ``L = sum_i r_i . u_i + (1/2) u^T D u`` give
``J = A``, ``G_i = A^T D A``, ``M_i = sum_a r_ia B_a`` and ``m_scale_i = sum_a |r_ia| |B_a|_F`` exactly;
the reference ``lambda_min`` is the library's dense ``H_eff``.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssl_geometry import geometry

jax.config.update("jax_enable_x64", True)
EPS = np.finfo(np.float64).eps


def _state(A, B, r, D=None):
    """``(head_fn, loss_fn, z)``: ``h(z) = A z + (1/2) (z^T B_a z)_a``, ``L = sum r . u + (1/2) sum_i u_i^T D u_i``."""
    A, B, r = (jnp.asarray(x, jnp.float64) for x in (A, B, r))
    D = jnp.eye(A.shape[0], dtype=jnp.float64) if D is None else jnp.asarray(D, jnp.float64)

    def head_fn(z):
        return z @ A.T + 0.5 * jnp.einsum("nd,ade,ne->na", z, B, z)

    def loss_fn(u):
        return jnp.sum(r * u) + 0.5 * jnp.einsum("na,ab,nb->", u, D, u)

    return head_fn, loss_fn, jnp.zeros((r.shape[0], A.shape[1]), jnp.float64)


def _lmin_dense(head_fn, loss_fn, z):
    e = np.linalg.eigvalsh(np.asarray(geometry.effective_hessian(head_fn, loss_fn, z).full))
    return float(e[0]), geometry.sign_tolerance(e, np.float64)


# G_i = diag(1, 1e-12, 0): gap 1e-12, |G| / gap = 1e12; J = diag(1, 1e-6, 0), |J| / sigma_r = 1e6.
# M_i = r_i1 diag(1, 0, 0) + r_i3 diag(0, 0, 1): size m_scale = 1/2 + 1e-4, curvature +-1e-4 on null(G) = e3.
SIGMA = 1e-6
A_ILL = np.diag([1.0, SIGMA, 0.0])
B_ILL = [np.diag([1.0, 0.0, 0.0]), np.zeros((3, 3)), np.diag([0.0, 0.0, 1.0])]
R_ILL = [[0.5, 0.0, 1e-4], [-0.5, 0.0, -1e-4]]


def test_ill_conditioned_null_space_is_resolved_from_the_jacobian():
    head_fn, loss_fn, z = _state(A_ILL, B_ILL, R_ILL)
    cert = geometry.collapse_certificate(head_fn, loss_fn, z)
    m_scale = 0.5 + 1e-4
    # the Davis-Kahan tolerance on G's eigenvectors would swallow the null curvature 1e-4 ...
    davis_kahan = 3 * EPS * m_scale * (1.0 + 2.0 * 1.0 / SIGMA**2)
    assert davis_kahan > 5e-4  # > 5 x the null curvature
    # ... the one from J's SVD: Wedin with e_J = 3 eps |J| = 3 eps, delta = sigma_r - 0 - e_J
    e_j = 3 * EPS
    t = 2.0 * np.sin(0.5 * np.arcsin(e_j / (SIGMA - e_j)))
    assert cert.interaction_tol == pytest.approx(m_scale * (3 * EPS + t * (2.0 + t)), rel=1e-9)
    assert cert.interaction_tol < 1e-8
    assert cert.block_null_dims == (1, 1)
    assert cert.null_curvature == pytest.approx(1e-4, rel=1e-9) and cert.null_curvature_min == pytest.approx(-1e-4)
    assert cert.conclusion == "unstable (M on null(G))" and cert.critical_scale == 0.0 and cert.predicted_sign == -1
    lmin, tol = _lmin_dense(head_fn, loss_fn, z)  # block 2: diag(1 - 1/2, 1e-12, -1e-4)
    assert lmin == pytest.approx(-1e-4, rel=1e-9) and lmin < -tol


def test_null_curvature_below_the_jacobian_bound_stays_degenerate():
    # the same head with the null curvature at 1e-13, below the tolerance (~1.3e-10): M counted as zero on e3
    head_fn, loss_fn, z = _state(A_ILL, B_ILL, [[0.5, 0.0, 1e-13], [-0.5, 0.0, -1e-13]])
    cert = geometry.collapse_certificate(head_fn, loss_fn, z)
    assert cert.null_curvature == pytest.approx(1e-13, rel=1e-6) and cert.null_curvature < cert.interaction_tol
    assert cert.conclusion == "degenerate" and cert.zero_dim == 2 and cert.predicted_sign == 0


def test_null_space_of_g_wider_than_that_of_j_keeps_the_davis_kahan_bound():
    # D = diag(1, 0): H_L is singular on range(J) = R^2, so null(G) = e2 while null(J) = {0}
    head_fn, loss_fn, z = _state(
        np.eye(2), [np.zeros((2, 2)), np.diag([0.0, 1.0])], [[0.0, 1.0], [0.0, -1.0]], D=np.diag([1.0, 0.0])
    )
    cert = geometry.collapse_certificate(head_fn, loss_fn, z)
    assert cert.block_null_dims == (1, 1)
    # G_i = diag(1, 0): |G| = gap = 1, m_scale = 1: dim eps m_scale (1 + 2 |G| / gap)
    assert cert.interaction_tol == pytest.approx(2 * EPS * 3.0, rel=1e-12)
    assert cert.conclusion == "unstable (M on null(G))" and cert.null_curvature_min == pytest.approx(-1.0)
    lmin, tol = _lmin_dense(head_fn, loss_fn, z)
    assert lmin == pytest.approx(-1.0, rel=1e-12) and lmin < -tol


def test_m_on_null_g_in_one_block_skips_the_other_blocks_critical_scale():
    # block 1: M = +diag(0, 1) on null(G) = e2 (alone it would need Newton on the singular G); block 2: -diag(0, 1)
    head_fn, loss_fn, z = _state(
        [[1.0, 0.0], [0.0, 0.0]], [np.zeros((2, 2)), np.diag([0.0, 1.0])], [[0.0, 1.0], [0.0, -1.0]]
    )
    cert = geometry.collapse_certificate(head_fn, loss_fn, z)
    assert cert.conclusion == "unstable (M on null(G))" and cert.critical_bounds == (0.0, 0.0)
    assert cert.null_curvature_min == pytest.approx(-1.0) and cert.zero_dim == 0
    assert not any("Newton" in note for note in cert.notes)
    # block 1 alone: the critical scale of G + s M with G = diag(1, 0), M = diag(0, 1) is inf (stable, s* by Newton)
    head_fn, loss_fn, z = _state([[1.0, 0.0], [0.0, 0.0]], [np.zeros((2, 2)), np.diag([0.0, 1.0])], [[0.0, 1.0]])
    alone = geometry.collapse_certificate(head_fn, loss_fn, z)
    assert alone.critical_scale == np.inf and alone.null_curvature_min == pytest.approx(1.0)


def _per_sample_state(A, B, r, D):
    """:func:`_state` with a per-sample ``H_L,ii = D_i`` (``D``: ``(n, k, k)``): ``G_i = A^T D_i A`` differ by sample."""
    head_fn, _, z = _state(A, B, r)
    r, D = jnp.asarray(r, jnp.float64), jnp.asarray(D, jnp.float64)

    def loss_fn(u):
        return jnp.sum(r * u) + 0.5 * jnp.einsum("na,nab,nb->", u, D, u)

    return head_fn, loss_fn, z


@pytest.mark.parametrize("rank", [5, 3])
def test_blocks_that_differ_by_sample_are_each_solved_and_equal_ones_shared_exactly(monkeypatch, rank):
    # 12 samples, G_i in 3 distinct classes (D_i periodic 3) and M_i in 4 (r_i periodic 4), interleaved: the
    # certificate shares one eigh among bitwise equal blocks; it must equal the block-by-block dense reference
    # and, bit for bit, the certificate with no block shared
    import importlib

    cert_mod = importlib.import_module("ssl_geometry._src.instrument.certificate")
    rng = np.random.default_rng(0)
    n, d, k = 12, 5, 7
    A = rng.standard_normal((k, d))
    B = rng.standard_normal((k, d, d))
    B = B + B.transpose(0, 2, 1)
    A[:, rank:], B[:, rank:, :], B[:, :, rank:] = 0.0, 0.0, 0.0  # rank < d: G = M = 0 on e_rank.. (degenerate)
    D = np.stack([np.diag(rng.uniform(0.5, 2.0, k)) for _ in range(3)])[np.arange(n) % 3]
    r = 0.05 * rng.standard_normal((4, k))[np.arange(n) % 4]
    head_fn, loss_fn, z = _per_sample_state(A, B, r, D)
    distinct, counts = cert_mod._distinct, []
    monkeypatch.setattr(cert_mod, "_distinct", lambda X: counts.append(len(distinct(X)[0])) or distinct(X))
    cert = geometry.collapse_certificate(head_fn, loss_fn, z)
    assert counts == [3, 4]  # the certificate's G_i and M_i: 3 and 4 distinct blocks
    # the reference, block by block on the range of J (where G_i > 0): s*_i = 1 / lambda_max(-L^-1 M_i L^-T)
    s_ref, lmin_g, lmin_m = [], [], []
    for i in range(n):
        G = (A.T @ D[i] @ A)[:rank, :rank]
        M = np.einsum("a,ade->de", r[i], B)[:rank, :rank]
        Li = np.linalg.inv(np.linalg.cholesky(G))
        mu = np.linalg.eigvalsh(-Li @ M @ Li.T)[-1]
        s_ref.append(1.0 / mu if mu > 0 else np.inf)
        lmin_g.append(np.linalg.eigvalsh(G)[0] if rank == d else 0.0)
        lmin_m.append(np.linalg.eigvalsh(M)[0] if rank == d else min(np.linalg.eigvalsh(M)[0], 0.0))
    assert len(set(np.round(s_ref, 12))) == 12  # every block has its own s*_i: a block given another's would show
    assert cert.critical_scale == pytest.approx(min(s_ref), rel=1e-12)
    assert cert.lambda_min_metric == pytest.approx(min(lmin_g), abs=1e-12)
    assert cert.lambda_min_interaction == pytest.approx(min(lmin_m), rel=1e-12)
    assert cert.null_dim == n * (d - rank) and cert.zero_dim == n * (d - rank)
    assert cert.conclusion == ("degenerate" if rank < d else "unstable (residual above critical)")
    monkeypatch.setattr(cert_mod, "_distinct", lambda X: (X, np.arange(len(X))))  # nothing shared
    alone = geometry.collapse_certificate(head_fn, loss_fn, z)
    assert repr(alone) == repr(cert)


def test_distinct_blocks_are_equal_bit_for_bit():
    import importlib

    distinct = importlib.import_module("ssl_geometry._src.instrument.certificate")._distinct
    x = np.random.default_rng(1).standard_normal((3, 4, 4))
    y = x[[0, 1, 0, 2, 1]].copy()
    y[4, 2, 3] = np.nextafter(y[4, 2, 3], np.inf)  # one ulp away from block 1
    y[2, 0, 0] = 0.0
    y[0, 0, 0] = -0.0  # == 0.0, but not the same bits
    u, of = distinct(y)
    assert of.tolist() == [0, 1, 2, 3, 4] and len(u) == 5
    u, of = distinct(x[[2, 0, 2, 2, 1, 0]])
    assert of.tolist() == [0, 1, 0, 0, 2, 1] and np.array_equal(u, x[[2, 0, 1]])
