"""The repaired Thm 4.1 certificate (``geometry.collapse_certificate``) against dense eigensolves.

docs/theory.md, section "Thm 4.1 repaired: when a collapsed equilibrium is unstable". The reference is
always the library's independent dense ``H_eff`` (``geometry.effective_hessian(...).full``, the
Hessian of the composition by ``jax.hessian``), never the certificate's own blocks:

* hand-made quadratic heads ``h(z) = A z + (1/2) z^T B_a z`` with ``L = sum_i r_i . u_i + |u|^2 / 2``
  (``rho_i = r_i``, ``H_L = I``, ``G_i = A^T A``, ``M_i = sum_a r_ia B_a``) with known ``s*``, one per
  branch of the certificate;
* the constant-rank bottleneck (4 -> 3 -> 8 and 4 -> 12 -> 2 -> 8): degenerate, not unstable;
* the rank drop at swish' = 0 (4 -> 4 -> 8, one hidden unit exactly at the zero): unstable at every
  residual scale, ``lambda_min(H_eff) / s -> min_i q^T M_i q``;
* three full-rank expanding heads (MSE/Swish, MSE/tanh, DINO/Swish): the predicted ``s*`` against the
  measured sign change of ``lambda_min(H_eff)`` along ``rho -> s rho`` (bisection, 1e-6 relative).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssl_geometry import as_function, geometry, heads, losses

jax.config.update("jax_enable_x64", True)
C = geometry.CERTIFICATE_CONCLUSIONS


def _lmin_dense(head_fn, loss_fn, z):
    """``(lambda_min, eigenvalues, tolerance)`` of the library's dense ``H_eff`` (the reference).

    The tolerance is :func:`geometry.sign_tolerance` plus the rounding of ``M``, whose terms
    ``rho_ia hess h_a`` can cancel exactly (``M = 0`` at a bottleneck equilibrium):
    ``dim eps max_i sum_a |rho_ia| |hess h_a(z_i)|_F``.
    """
    eh = geometry.effective_hessian(head_fn, loss_fn, z)
    e = np.linalg.eigvalsh(np.asarray(eh.full))
    n, d = z.shape
    hess = jax.vmap(jax.hessian(lambda x: head_fn(x[None])[0]))(z)  # (n, k, d, d)
    terms = np.abs(np.asarray(eh.residual).reshape(n, -1)) * np.sqrt(np.sum(np.asarray(hess) ** 2, axis=(2, 3)))
    cancel = n * d * np.finfo(np.float64).eps * float(np.max(terms.sum(axis=1)))
    return float(e[0]), e, geometry.sign_tolerance(e, np.float64) + cancel


# ----------------------------------------------------------------------------- hand-made quadratic heads


def _quadratic(A, B, r):
    """``(head_fn, loss_fn(s), z)`` for ``h(z) = A z + (1/2) (z^T B_a z)_a`` at ``c = 0`` with ``rho_i = s r_i``."""
    A, B, r = (jnp.asarray(x, jnp.float64) for x in (A, B, r))
    n, d = r.shape[0], A.shape[1]

    def head_fn(z):
        return z @ A.T + 0.5 * jnp.einsum("nd,ade,ne->na", z, B, z)

    def loss(s):
        return lambda u: jnp.sum(s * r * u) + 0.5 * jnp.sum(u**2)

    return head_fn, loss, jnp.zeros((n, d), jnp.float64)


E12 = [[0.0, 1.0], [1.0, 0.0]]
ZERO = [[0.0, 0.0], [0.0, 0.0]]


def test_full_rank_blocks_give_the_generalised_eigenvalue_and_its_bracket():
    # G_i = diag(2, 1); M_1 = diag(-1, 1/4), M_2 = -M_1: s*_1 = 2 (2 - s = 0), s*_2 = 4 (1 - s/4 = 0)
    head_fn, loss, z = _quadratic(
        np.diag([np.sqrt(2.0), 1.0]), [np.diag([1.0, 0.0]), np.diag([0.0, 1.0])], [[-1.0, 0.25], [1.0, -0.25]]
    )
    cert = geometry.collapse_certificate(head_fn, loss(1.0), z)
    assert cert.critical_scale == pytest.approx(2.0, rel=1e-14)
    assert cert.conclusion == "stable (residual below critical)" and cert.predicted_sign == 1
    # Weyl below: min_i lambda_min(G_i)/|lambda_min(M_i)| = min(1/1, 1/0.25) = 1; Rayleigh above: 2
    assert cert.critical_bounds == pytest.approx((1.0, 2.0), rel=1e-14)
    assert cert.null_dim == 0 and cert.zero_dim == 0 and cert.blocks == 2 and cert.block_dim == 2
    assert cert.interaction_sum == pytest.approx(0.0, abs=1e-15)
    assert _lmin_dense(head_fn, loss(1.0), z)[0] == pytest.approx(
        0.75, rel=1e-12
    )  # min(2 - 1, 1 + 1/4, 2 + 1, 1 - 1/4)
    for scale, word, sign in ((3.0, "unstable (residual above critical)", -1), (2.0, "degenerate", 0)):
        cert = geometry.collapse_certificate(head_fn, loss(scale), z)
        assert (cert.conclusion, cert.predicted_sign) == (word, sign)
        assert cert.critical_scale == pytest.approx(2.0 / scale, rel=1e-14)
    lmin, _, tol = _lmin_dense(head_fn, loss(3.0), z)
    assert lmin == pytest.approx(-1.0, rel=1e-12) and lmin < -tol
    lmin, _, tol = _lmin_dense(head_fn, loss(2.0), z)
    assert abs(lmin) <= tol


def test_negative_curvature_of_m_on_null_g_is_unstable_at_every_scale():
    # A = diag(1, 0): null(G_i) = e2; M_i = r_i2 diag(0, 1), r_2 = -r_1: q^T M_2 q = -1
    head_fn, loss, z = _quadratic([[1.0, 0.0], [0.0, 0.0]], [ZERO, np.diag([0.0, 1.0])], [[0.0, 1.0], [0.0, -1.0]])
    cert = geometry.collapse_certificate(head_fn, loss(1.0), z)
    assert cert.conclusion == "unstable (M on null(G))" and cert.critical_scale == 0.0 and cert.predicted_sign == -1
    assert cert.null_dim == 2 and cert.block_null_dims == (1, 1)
    assert cert.null_curvature == pytest.approx(1.0) and cert.null_curvature_min == pytest.approx(-1.0)
    for s in (1e-6, 1e-3, 1.0):
        lmin, _, tol = _lmin_dense(head_fn, loss(s), z)
        assert lmin == pytest.approx(-s, rel=1e-9) and lmin < -tol


def test_m_coupling_null_g_out_of_itself_is_unstable_at_every_scale():
    # q^T M_i q = 0 on null(G) = e2, but M_i e2 = r_i1 e1 != 0: lambda_min([[1, s], [s, 0]]) = -s^2 + O(s^4)
    head_fn, loss, z = _quadratic([[1.0, 0.0], [0.0, 0.0]], [E12, ZERO], [[1.0, 0.0], [-1.0, 0.0]])
    cert = geometry.collapse_certificate(head_fn, loss(1.0), z)
    assert cert.conclusion == "unstable (M on null(G))" and cert.critical_scale == 0.0
    assert cert.null_curvature <= cert.interaction_tol and cert.null_coupling == pytest.approx(1.0)
    for s in (1e-3, 1.0):
        lmin, _, tol = _lmin_dense(head_fn, loss(s), z)
        assert lmin == pytest.approx(0.5 - np.sqrt(0.25 + s * s), rel=1e-6) and lmin < -tol


def test_g_and_m_vanishing_together_is_degenerate_and_the_rest_decides_s_star():
    # A = diag(1, 0), M_i = -r_i1 diag(1, 0): G = M = 0 on e2 in every block; s* = 1 / max_i r_i1 = 2
    head_fn, loss, z = _quadratic([[1.0, 0.0], [0.0, 0.0]], [np.diag([-1.0, 0.0]), ZERO], [[0.5, 0.0], [-0.5, 0.0]])
    cert = geometry.collapse_certificate(head_fn, loss(1.0), z)
    assert cert.conclusion == "degenerate" and cert.predicted_sign == 0
    assert cert.zero_dim == 2 and cert.null_curvature == 0.0 and cert.critical_scale == pytest.approx(2.0, rel=1e-14)
    lmin, e, tol = _lmin_dense(head_fn, loss(1.0), z)
    assert abs(lmin) <= tol and int(np.sum(np.abs(e) <= tol)) == 2 and e[2] == pytest.approx(0.5)
    cert = geometry.collapse_certificate(head_fn, loss(4.0), z)
    assert cert.conclusion == "unstable (residual above critical)" and cert.critical_scale == pytest.approx(0.5)
    assert _lmin_dense(head_fn, loss(4.0), z)[0] == pytest.approx(-1.0, rel=1e-12)


def test_singular_g_with_positive_m_on_its_null_space_goes_through_newton():
    # one block (n = 1): G = diag(1, 0), M = [[-1, 1/2], [1/2, 1]]; det(G + s M) = s (1 - 5 s / 4): s* = 4/5
    head_fn, loss, z = _quadratic([[1.0, 0.0], [0.0, 0.0]], [[[-1.0, 0.5], [0.5, 1.0]], ZERO], [[1.0, 0.0]])
    cert = geometry.collapse_certificate(head_fn, loss(1.0), z)
    assert cert.critical_scale == pytest.approx(0.8, rel=1e-13)
    assert cert.conclusion == "unstable (residual above critical)" and cert.zero_dim == 0 and cert.null_dim == 1
    lo, hi = cert.critical_bounds
    assert lo <= 0.8 <= hi < np.inf
    assert any("Newton" in note for note in cert.notes)
    assert _lmin_dense(head_fn, loss(0.79), z)[0] > 0 > _lmin_dense(head_fn, loss(0.81), z)[0]


def test_a_loss_hessian_that_is_not_psd_violates_the_premise():
    A = np.diag([np.sqrt(2.0), 1.0])
    head_fn, _, z = _quadratic(A, [ZERO, ZERO], [[0.0, 0.0], [0.0, 0.0]])
    for max_dense_dim in (2048, 1):  # dense, then matrix-free
        cert = geometry.collapse_certificate(head_fn, lambda u: -0.5 * jnp.sum(u**2), z, max_dense_dim=max_dense_dim)
        assert cert.conclusion == "premise violated (G not PSD)" and np.isnan(cert.critical_scale)
        assert cert.lambda_min_metric == pytest.approx(-2.0)


def test_a_zero_residual_is_stable_with_full_rank_and_degenerate_without():
    head_fn, loss, z = _quadratic(np.diag([np.sqrt(2.0), 1.0]), [np.diag([1.0, 0.0]), ZERO], [[0.0, 0.0], [0.0, 0.0]])
    cert = geometry.collapse_certificate(head_fn, loss(1.0), z)
    assert cert.conclusion == "stable (residual below critical)" and cert.critical_scale == np.inf
    head_fn, loss, z = _quadratic([[1.0, 0.0], [0.0, 0.0]], [ZERO, ZERO], [[0.0, 0.0], [0.0, 0.0]])
    assert geometry.collapse_certificate(head_fn, loss(1.0), z).conclusion == "degenerate"


# ----------------------------------------------------------------------------- equilibria of MLP heads


def _equilibrium(hidden, k, activation, objective="mse_target", residual_scale=1.0, seed=0, n=6, d=4):
    head = heads.mlp(d, hidden, k, activation=activation, bias=False, scale=0.1, dtype=jnp.float64)
    v = head.init(jax.random.PRNGKey(seed))
    c = jax.random.normal(jax.random.PRNGKey(seed + 1), (d,), jnp.float64)
    eq = geometry.collapsed_equilibrium(
        head, v, objective, c, n, key=jax.random.PRNGKey(seed + 2), residual_scale=residual_scale, activation=activation
    )
    assert eq.certified, eq.premises.notes
    return head, v, c, eq


@pytest.mark.parametrize("hidden,k", [((3,), 8), ((12, 2), 8)])
def test_constant_rank_bottleneck_is_degenerate_not_unstable(hidden, k):
    head, v, _, eq = _equilibrium(hidden, k, "swish")
    n, d, width = eq.z.shape[0], eq.z.shape[1], min(hidden)
    cert = geometry.collapse_certificate(head, eq.loss_fn, eq.z, variables=v)
    assert cert.conclusion == "degenerate" and cert.predicted_sign == 0
    assert cert.null_dim == n * (d - width) and cert.block_null_dims == (d - width,) * n
    assert cert.null_curvature <= cert.interaction_tol and cert.null_coupling <= cert.interaction_tol
    assert cert.zero_dim == cert.null_dim and cert.critical_scale > 1.0
    lmin, e, tol = _lmin_dense(as_function(head, v), eq.loss_fn, eq.z)
    assert abs(lmin) <= tol  # not unstable
    assert int(np.sum(np.abs(e) <= tol)) == cert.null_dim  # exactly dim null(G) zero directions
    assert e[cert.null_dim] > tol


def _swish_zero() -> float:
    """The zero of swish'(x) = sigma(x) (1 + x (1 - sigma(x))), by Newton in float64."""
    x = -1.28
    f = jax.grad(jax.grad(jax.nn.silu))
    for _ in range(50):
        x = x - float(jax.grad(jax.nn.silu)(x)) / float(f(x))
    return x


def test_rank_drop_at_the_zero_of_swish_prime_is_unstable_at_every_residual_scale():
    a_star = _swish_zero()
    assert a_star == pytest.approx(-1.2784645, abs=1e-6) and abs(float(jax.grad(jax.nn.silu)(a_star))) < 1e-16
    d, k, n = 4, 8, 6
    head = heads.mlp(d, (4,), k, activation="swish", bias=False, dtype=jnp.float64)
    v = head.init(jax.random.PRNGKey(3))
    W1 = np.array(v["params"]["layers"][0]["w"])
    W1[:, 0] = [a_star, 0.0, 0.0, 0.0]  # unit 0 sees c @ W1[:, 0] = a_star exactly
    v = {"params": {"layers": [{"w": jnp.asarray(W1)}, v["params"]["layers"][1]]}}
    c = jnp.asarray([1.0, 0.3, -0.7, 0.5])
    eq = geometry.collapsed_equilibrium(head, v, "mse_target", c, n, key=jax.random.PRNGKey(4), activation="swish")
    assert eq.certified
    cert = geometry.collapse_certificate(head, eq.loss_fn, eq.z, variables=v)
    assert cert.conclusion == "unstable (M on null(G))" and cert.critical_scale == 0.0
    assert cert.block_null_dims == (1,) * n and cert.null_curvature_min < -100 * cert.interaction_tol
    assert cert.interaction_sum < 1e-12  # sum_i M_i = 0 at the equilibrium
    h = as_function(head, v)
    u = h(c[None])[0]
    for s in (1e-4, 1e-2, 1.0):  # rho -> s rho through the MSE targets
        targets = u[None] - s * 0.5 * n * eq.residual
        lmin, _, tol = _lmin_dense(h, lambda x, t=targets: losses.mse(x, t), eq.z)
        assert lmin < -tol
        if s <= 1e-2:  # lambda_min(H_eff) = s min_i q^T M_i q + O(s^2)
            assert lmin / s == pytest.approx(cert.null_curvature_min, rel=s)


def _residual_family(objective, head_fn, c, eq, n):
    """``s -> loss`` whose residual at the collapsed state is ``s rho`` (head, ``c`` and ``H_L`` fixed)."""
    u, R = head_fn(c[None])[0], eq.residual
    if objective == "mse_target":
        return lambda s: lambda x: losses.mse(x, u[None] - s * 0.5 * n * R)
    q = jax.nn.softmax(u / 0.1)

    def loss(s):
        T = 0.04 * jnp.log(q[None] - s * n * 0.1 * R)
        return lambda x: losses.dino(
            jnp.stack([x, x]), jnp.stack([T, T]), jnp.zeros_like(u), student_temp=0.1, teacher_temp=0.04
        )[0]

    return loss


@pytest.mark.parametrize(
    "objective,activation,residual_scale,s_star",
    [
        ("mse_target", "swish", 0.02, 2.2619894720),
        ("mse_target", "tanh", 0.3, 4.4067597548),
        ("dino_fixed_teacher", "swish", 0.3, 1.6716734029),
    ],
)
def test_predicted_critical_scale_is_the_measured_sign_change(objective, activation, residual_scale, s_star):
    n = 6
    head, v, c, eq = _equilibrium((16,), 12, activation, objective, residual_scale, n=n)
    h = as_function(head, v)
    cert = geometry.collapse_certificate(head, eq.loss_fn, eq.z, variables=v)
    assert cert.null_dim == 0 and cert.critical_scale == pytest.approx(s_star, rel=1e-9)
    assert cert.conclusion == "stable (residual below critical)" and cert.predicted_sign == 1
    lo_b, hi_b = cert.critical_bounds
    assert 0 < lo_b <= cert.critical_scale <= hi_b
    family = _residual_family(objective, h, c, eq, n)
    # the family passes through the stored state, with the residual scaled
    rho1 = jax.grad(family(1.0))(h(eq.z))
    assert float(jnp.max(jnp.abs(rho1 - eq.residual))) < 1e-12 * float(jnp.max(jnp.abs(eq.residual)))
    lmin = jax.jit(lambda s: jnp.linalg.eigvalsh(geometry.effective_hessian(h, family(s), eq.z).full)[0])
    assert float(lmin(1.0)) == pytest.approx(_lmin_dense(h, eq.loss_fn, eq.z)[0], rel=1e-9)
    assert float(lmin(1.0)) > 0 and float(lmin(0.5 * s_star)) > 0 and float(lmin(1.5 * s_star)) < 0
    lo, hi = 0.5 * s_star, 1.5 * s_star
    while hi - lo > 1e-9 * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if float(lmin(mid)) > 0 else (lo, mid)
    assert 0.5 * (lo + hi) == pytest.approx(cert.critical_scale, rel=1e-6)
    # the matrix-free path (Lanczos on the whole operators, Newton on lambda_min(G + s M)) agrees with the dense one
    mf = geometry.collapse_certificate(head, eq.loss_fn, eq.z, variables=v, max_dense_dim=1)
    assert mf.method == "lanczos" and mf.conclusion == cert.conclusion and mf.predicted_sign == 1
    assert mf.critical_scale == pytest.approx(cert.critical_scale, rel=1e-9)
    assert mf.critical_bounds[0] <= mf.critical_scale <= mf.critical_bounds[1]
    assert mf.lambda_min_metric == pytest.approx(cert.lambda_min_metric, rel=1e-9)
    # the same state with the residual beyond critical: predicted and measured unstable
    cert2 = geometry.collapse_certificate(h, family(2.0 * s_star), eq.z)
    assert cert2.conclusion == "unstable (residual above critical)" and cert2.critical_scale == pytest.approx(
        0.5, rel=1e-9
    )


# ----------------------------------------------------------------------------- bad input


def test_bad_input_is_refused_by_name():
    head_fn, loss, z = _quadratic(np.eye(2), [ZERO, ZERO], [[0.0, 1.0], [0.0, -1.0]])
    with pytest.raises(TypeError, match="`head`"):
        geometry.collapse_certificate("swish", loss(1.0), z)
    with pytest.raises(ValueError, match="`variables` must be None"):
        geometry.collapse_certificate(head_fn, loss(1.0), z, variables={"params": {}})
    with pytest.raises(ValueError, match="`z` must have rank 2"):
        geometry.collapse_certificate(head_fn, loss(1.0), z[0])
    with pytest.raises(ValueError, match="`z` must be a collapsed state"):
        geometry.collapse_certificate(head_fn, loss(1.0), z.at[0, 0].set(1.0))
    with pytest.raises(ValueError, match="`critical_rtol`"):
        geometry.collapse_certificate(head_fn, loss(1.0), z, critical_rtol=0.0)
    with pytest.raises(ValueError, match="`max_dense_dim`"):
        geometry.collapse_certificate(head_fn, loss(1.0), z, max_dense_dim=0)
    with pytest.raises(ValueError, match="`lanczos_steps`"):
        geometry.collapse_certificate(head_fn, loss(1.0), z, lanczos_steps=1)
    # the matrix-free path needs G > 0: a non-trivial null(G) is refused, not guessed
    head_null, loss_null, z_null = _quadratic(
        [[1.0, 0.0], [0.0, 0.0]], [ZERO, np.diag([0.0, 1.0])], [[0.0, 1.0], [0.0, -1.0]]
    )
    with pytest.raises(ValueError, match="null"):
        geometry.collapse_certificate(head_null, loss_null(1.0), z_null, max_dense_dim=1)
    head = heads.mlp(2, (3,), 4, activation="swish", dtype=jnp.float64)
    with pytest.raises(ValueError, match="`variables` must be the head's variables"):
        geometry.collapse_certificate(head, lambda u: jnp.sum(u**2), z)
    with pytest.raises(FloatingPointError, match="residual"):
        geometry.collapse_certificate(head_fn, lambda u: jnp.sum(jnp.sqrt(u)), z)


# ----------------------------------------------------------------------------- compiled once per shape


@pytest.mark.parametrize("max_dense_dim", [geometry.MATRIX_FREE_ABOVE, 1])
def test_a_second_state_of_fresh_closures_compiles_nothing(max_dense_dim):
    """``collapsed_equilibrium`` builds a fresh loss closure per state and ``heads.mlp`` a fresh head: the second
    state (new head, new arrays, the same shapes and loss kind) reuses every compiled kernel, on the dense and on
    the matrix-free path, and its certificate is its own state's (against the independent dense ``H_eff``)."""
    from compilations import compilations

    first = _equilibrium((16,), 12, "swish", "mse_target", 0.3, seed=0)
    head, v, _, eq = first
    geometry.collapse_certificate(head, eq.loss_fn, eq.z, variables=v, max_dense_dim=max_dense_dim)
    head, v, _, eq = _equilibrium((16,), 12, "swish", "mse_target", 3.0, seed=7)
    out = {}
    assert (
        compilations(
            lambda: out.update(
                c=geometry.collapse_certificate(head, eq.loss_fn, eq.z, variables=v, max_dense_dim=max_dense_dim)
            )
        )
        == []
    )
    cert = out["c"]
    eh = geometry.effective_hessian(as_function(head, v), eq.loss_fn, eq.z)
    n, d = eq.z.shape
    G = np.asarray(eh.metric).reshape(n, d, n, d)
    g_min = min(np.linalg.eigvalsh(G[i, :, i, :])[0] for i in range(n))
    assert cert.lambda_min_metric == pytest.approx(g_min, rel=1e-9)
    lmin, _, tol = _lmin_dense(as_function(head, v), eq.loss_fn, eq.z)
    assert cert.predicted_sign == (-1 if lmin < -tol else 1) and cert.predicted_sign == -1
