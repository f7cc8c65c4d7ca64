"""``collapse_certificate`` above ``DENSE_METRIC_MAX``: chunked diagonal blocks and the probe test of coupling.

``ssl_geometry._src.instrument.diagonal_blocks`` forms only ``G_ii = J_i^T H_L,ii J_i`` (in chunks) and decides
whether ``H_L`` couples the samples by Gaussian probes of ``J^T H_L J``. At small sizes the threshold is
monkeypatched to 0 so that the chunked path runs, and every result is compared with the dense path
(``effective.sample_blocks``, the whole ``(n, d, n, d)`` metric).
"""

import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssl_geometry import geometry, heads, losses

# The chunked path and the dense blocks it is checked against are not public API: this test of the library's own
# internals reaches their modules by name (as monkeypatch's dotted targets do), not by an import of a private path.
cert_mod = importlib.import_module("ssl_geometry._src.instrument.certificate")
diagonal_blocks = importlib.import_module("ssl_geometry._src.instrument.diagonal_blocks")
sample_blocks = importlib.import_module("ssl_geometry._src.instrument.effective").sample_blocks

jax.config.update("jax_enable_x64", True)

N, D, HIDDEN, K = 12, 6, (16,), 10


def _equilibrium(hidden=HIDDEN, objective="mse_target", activation="swish"):
    head = heads.mlp(D, hidden, K, activation=activation, bias=False, scale=0.1, dtype=jnp.float64)
    v = head.init(jax.random.PRNGKey(0))
    c = jax.random.normal(jax.random.PRNGKey(1), (D,), jnp.float64)
    eq = geometry.collapsed_equilibrium(head, v, objective, c, N, key=jax.random.PRNGKey(2), activation=activation)
    assert eq.certified, eq.premises.notes
    return head, v, eq


def _head_fn(head, v):
    from ssl_geometry import as_function

    return as_function(head, v, train=False)


def test_diagonal_blocks_equal_the_dense_ones_on_a_per_sample_loss():
    head, v, eq = _equilibrium()
    f = _head_fn(head, v)
    dense = sample_blocks(f, eq.loss_fn, eq.z)
    chunked = diagonal_sample_blocks_checked(f, eq.loss_fn, eq.z)
    i = np.arange(N)
    G = np.asarray(dense.metric)
    off = G.copy()
    off[i, :, i, :] = 0.0
    assert np.max(np.abs(off)) == 0.0  # mse_target is per sample: the dense path has no coupling blocks
    Gd = G[i, :, i, :]
    assert np.max(np.abs(Gd)) > 1e-7  # not a trivial comparison (G ~ 1e-6 with the 0.1-scaled head)
    rel = np.max(np.abs(np.asarray(chunked.metric) - Gd)) / np.max(np.abs(Gd))
    assert rel <= 1e-12
    for name in ("jacobian", "interaction", "residual"):
        a, b = np.asarray(getattr(chunked, name)), np.asarray(getattr(dense, name))
        assert np.max(np.abs(a - b)) <= 1e-12 * max(np.max(np.abs(b)), 1e-300), name
    assert chunked.coupled is False and chunked.coupling < 1.0


def diagonal_sample_blocks_checked(f, loss_fn, z):
    out = diagonal_blocks.diagonal_sample_blocks(f, loss_fn, z)
    assert out.metric.shape == (z.shape[0], z.shape[1], z.shape[1])
    return out


def test_a_sample_coupling_loss_reads_as_coupled():
    head, v, _ = _equilibrium()
    f = _head_fn(head, v)
    z = jax.random.normal(jax.random.PRNGKey(5), (N, D), jnp.float64)
    u2 = jax.random.normal(jax.random.PRNGKey(6), (N, K), jnp.float64)

    def loss_fn(u):
        return losses.info_nce(u, u2)

    G = np.asarray(sample_blocks(f, loss_fn, z).metric)
    i = np.arange(N)
    off = G.copy()
    off[i, :, i, :] = 0.0
    assert np.max(np.abs(off)) > 1e-3 * np.max(np.abs(G))  # the dense path sees the coupling
    out = diagonal_blocks.diagonal_sample_blocks(f, loss_fn, z)
    assert out.coupled is True and out.coupling > 1e6


def test_zero_diagonal_blocks_would_read_as_coupled(monkeypatch):
    # the probe compares J^T H_L J v with (C_i v_i)_i: blocks computed wrong (here: zeros) leave the whole product
    head, v, eq = _equilibrium()
    f = _head_fn(head, v)
    real = diagonal_blocks._metric_blocks
    monkeypatch.setattr(diagonal_blocks, "_metric_blocks", lambda Jb, hvp: 0.0 * real(Jb, hvp))
    diagonal_blocks._diagonal_blocks.clear_cache()
    try:
        out = diagonal_blocks.diagonal_sample_blocks(f, eq.loss_fn, eq.z)
    finally:
        monkeypatch.undo()
        diagonal_blocks._diagonal_blocks.clear_cache()
    assert np.max(np.abs(np.asarray(out.metric))) == 0.0 and out.coupled is True


def _quadratic_state():
    """``h(z) = A z + (1/2)(z^T B_a z)_a`` at ``c = 0``, ``L = sum_i r_i . u_i + |u|^2 / 2``: ``G_i = diag(2, 1)``,
    ``M_i = +-diag(-1, 1/4)`` alternately, so ``s* = min(2, 4) = 2`` (tests/test_thm41_certificate.py)."""
    A = jnp.diag(jnp.array([np.sqrt(2.0), 1.0]))
    B = jnp.array([np.diag([1.0, 0.0]), np.diag([0.0, 1.0])])
    r = jnp.tile(jnp.array([[-1.0, 0.25], [1.0, -0.25]]), (N // 2, 1))

    def head_fn(z):
        return z @ A.T + 0.5 * jnp.einsum("nd,ade,ne->na", z, B, z)

    def loss_fn(u):
        return jnp.sum(r * u) + 0.5 * jnp.sum(u**2)

    return head_fn, loss_fn, jnp.zeros((N, 2), jnp.float64)


def _fields(c):
    return (c.conclusion, c.null_dim, c.block_null_dims, c.predicted_sign, c.zero_dim, c.blocks, c.block_dim, c.method)


@pytest.mark.parametrize("state", ["quadratic", "swish", "bottleneck"])
def test_chunked_certificate_equals_the_dense_one(monkeypatch, state):
    if state == "quadratic":
        head_fn, loss_fn, z = _quadratic_state()
        kw = {}
    else:
        head, v, eq = _equilibrium(hidden=HIDDEN if state == "swish" else (4,))
        head_fn, loss_fn, z, kw = head, eq.loss_fn, eq.z, {"variables": v}
    dense = geometry.collapse_certificate(head_fn, loss_fn, z, **kw)
    monkeypatch.setattr(cert_mod, "DENSE_METRIC_MAX", 0)
    chunked = geometry.collapse_certificate(head_fn, loss_fn, z, **kw)
    assert _fields(chunked) == _fields(dense)
    assert chunked.critical_scale == pytest.approx(dense.critical_scale, rel=1e-10, abs=0.0)
    assert np.allclose(chunked.critical_bounds, dense.critical_bounds, rtol=1e-10, atol=0.0)
    if state == "quadratic":
        assert chunked.critical_scale == pytest.approx(2.0, rel=1e-14) and chunked.blocks == N
    if state == "bottleneck":
        assert chunked.null_dim == N * (D - 4) and chunked.conclusion == "degenerate"


def test_a_coupled_loss_at_scale_goes_matrix_free_as_the_dense_path_does(monkeypatch):
    # collapsed state, InfoNCE against fixed second views: coupled; above the dense limit (max_dense_dim < n d)
    # the dense path forms G, finds the coupling and goes to Lanczos; the chunked path must reach the same place
    head, v, _ = _equilibrium()
    c = jax.random.normal(jax.random.PRNGKey(1), (D,), jnp.float64)
    z = jnp.tile(c, (N, 1))
    u2 = jax.random.normal(jax.random.PRNGKey(6), (N, K), jnp.float64)

    def loss_fn(u):
        return losses.info_nce(u, u2)

    def run():
        try:
            return geometry.collapse_certificate(head, loss_fn, z, variables=v, max_dense_dim=2 * D)
        except ValueError as e:
            return str(e)

    dense = run()
    monkeypatch.setattr(cert_mod, "DENSE_METRIC_MAX", 0)
    chunked = run()
    if isinstance(dense, str):
        assert chunked == dense and "null(G) is not trivial" in dense
    else:
        assert _fields(chunked) == _fields(dense) and dense.method == "lanczos" and dense.blocks == 1
        assert any("couples the samples" in note for note in chunked.notes)
        np.testing.assert_allclose(chunked.critical_scale, dense.critical_scale, rtol=1e-10, atol=0.0)
