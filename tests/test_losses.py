"""Tests for ssl_geometry.losses against independent NumPy float64 references."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import log_softmax as np_log_softmax
from scipy.special import logsumexp as np_logsumexp
from scipy.special import softmax as np_softmax

from ssl_geometry import losses as L

N, K = 6, 4  # batch, features (wmse with eps=0 needs N >= K + 1)


# ----------------------------------------------------------------------------- NumPy references


def np_unit(x, eps):
    """Row-wise x / max(|x|, eps) with an explicit loop."""
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] / max(np.sqrt(np.dot(x[i], x[i])), eps)
    return out


def np_negative_cosine(p, z):
    pn, zn = np_unit(p, 1e-8), np_unit(z, 1e-8)
    return -np.mean([pn[i] @ zn[i] for i in range(len(p))])


def np_simsiam(p1, p2, z1, z2):
    return 0.5 * np_negative_cosine(p1, z2) + 0.5 * np_negative_cosine(p2, z1)


def np_byol(p1, p2, t1, t2):
    def reg(p, t):
        pn, tn = np_unit(p, 1e-6), np_unit(t, 1e-6)
        return np.mean([np.sum((pn[i] - tn[i]) ** 2) for i in range(len(p))])

    return reg(p1, t2) + reg(p2, t1)


def np_mse(u1, u2):
    return np.mean([np.sum((u1[i] - u2[i]) ** 2) for i in range(len(u1))])


def np_info_nce(z1, z2, tau=0.1):
    u = np_unit(np.concatenate([z1, z2]), 1e-6)
    n2 = len(u)
    n = n2 // 2
    total = 0.0
    for a in range(n2):
        pos = (a + n) % n2
        others = [u[a] @ u[b] / tau for b in range(n2) if b != a]
        total += -u[a] @ u[pos] / tau + np_logsumexp(others)
    return total / n2


def np_info_nce_one_way(u1, u2, tau=0.1):
    """The authors' guillotine loss: CE(a b^T / tau, arange(n)) with F.normalize'd rows, one direction."""
    a, b = np_unit(u1, 1e-12), np_unit(u2, 1e-12)
    return np.mean(
        [-a[i] @ b[i] / tau + np_logsumexp([a[i] @ b[j] / tau for j in range(len(b))]) for i in range(len(a))]
    )


def np_moco(q, k, queue, tau=0.2):
    qn, kn = np_unit(q, 1e-12), np_unit(k, 1e-12)
    total = 0.0
    for i in range(len(q)):
        logits = np.array([qn[i] @ kn[i]] + [qn[i] @ m for m in queue]) / tau
        total += -np_log_softmax(logits)[0]
    return total / len(q), np.concatenate([queue[len(q) :], kn])


def np_moco_v3(q1, q2, k1, k2, tau=0.2):
    def ctr(q, k):
        qn, kn = np_unit(q, 1e-12), np_unit(k, 1e-12)
        logits = np.array([[qn[i] @ kn[j] for j in range(len(k))] for i in range(len(q))]) / tau
        return np.mean([-np_log_softmax(logits[i])[i] for i in range(len(q))]) * 2 * tau

    return ctr(q1, k2) + ctr(q2, k1)


def np_spectral(z1, z2):
    n = len(z1)
    pos = -2.0 * np.mean([z1[i] @ z2[i] for i in range(n)])
    neg = np.mean([(z1[i] @ z2[j]) ** 2 for i in range(n) for j in range(n) if i != j])
    return pos + neg


def np_barlow(z1, z2, lambd=5e-3, eps=1e-5):
    def bn(z):
        return (z - z.mean(0)) / np.sqrt(z.var(0) + eps)  # np.var: biased

    a, b = bn(z1), bn(z2)
    n, k = z1.shape
    c = np.array([[np.sum(a[:, i] * b[:, j]) / n for j in range(k)] for i in range(k)])
    on = sum((1 - c[i, i]) ** 2 for i in range(k))
    off = sum(c[i, j] ** 2 for i in range(k) for j in range(k) if i != j)
    return on + lambd * off


def np_vicreg(x, y, sim=25.0, std=25.0, cov=1.0, eps=1e-4):
    k = x.shape[1]
    repr_loss = np.mean((x - y) ** 2)
    std_x = np.sqrt(np.var(x, axis=0, ddof=1) + eps)
    std_y = np.sqrt(np.var(y, axis=0, ddof=1) + eps)
    std_loss = np.mean(np.maximum(0, 1 - std_x)) / 2 + np.mean(np.maximum(0, 1 - std_y)) / 2
    cx, cy = np.cov(x, rowvar=False), np.cov(y, rowvar=False)
    off = ~np.eye(k, dtype=bool)
    cov_loss = np.sum(cx[off] ** 2) / k + np.sum(cy[off] ** 2) / k
    return sim * repr_loss + std * std_loss + cov * cov_loss


def np_wmse(z1, z2, eps=0.0):
    def whiten(z):
        k = z.shape[1]
        s = (1 - eps) * np.cov(z, rowvar=False) + eps * np.eye(k)
        lo = np.linalg.cholesky(s)
        return (z - z.mean(0)) @ np.linalg.inv(lo).T

    w1, w2 = np_unit(whiten(z1), 1e-12), np_unit(whiten(z2), 1e-12)
    return np.mean([np.sum((w1[i] - w2[i]) ** 2) for i in range(len(z1))])


def np_dino(student, teacher, center, st=0.1, tt=0.04, m=0.9):
    vs, n, _ = student.shape
    vt = teacher.shape[0]
    total, terms = 0.0, 0
    for t in range(vt):
        p = np_softmax((teacher[t] - center) / tt, axis=-1)
        for s in range(vs):
            if s == t:
                continue
            logq = np_log_softmax(student[s] / st, axis=-1)
            total += np.mean([-p[i] @ logq[i] for i in range(n)])
            terms += 1
    new_center = m * center + (1 - m) * teacher.reshape(-1, teacher.shape[-1]).mean(0)
    return total / terms, new_center


# ----------------------------------------------------------------------------- cases


def loss_inputs(name, seed=0, n=N, k=K):
    rng = np.random.default_rng(seed)
    r = lambda *s: rng.standard_normal(s)
    if name in ("simsiam", "byol", "moco_v3"):
        return [r(n, k) for _ in range(4)]
    if name == "moco":
        return [r(n, k), r(n, k), np_unit(r(n + 3, k), 1e-12)]
    if name == "vicreg":  # some features below the std hinge, some above: both branches active
        scale = np.linspace(0.3, 2.5, k)
        return [r(n, k) * scale, r(n, k) * scale]
    if name == "dino":
        return [r(4, n, k), r(2, n, k), r(k) * 0.1]
    return [r(n, k), r(n, k)]


# name -> (jax loss on a list of args, numpy reference, differentiable arg indices, stop-gradient indices)
CASES = {
    "negative_cosine": (lambda a: L.negative_cosine(*a), np_negative_cosine, (0,), (1,)),
    "simsiam": (lambda a: L.simsiam(*a), np_simsiam, (0, 1), (2, 3)),
    "byol": (lambda a: L.byol(*a), np_byol, (0, 1), (2, 3)),
    "mse": (lambda a: L.mse(*a), np_mse, (0, 1), ()),
    "moco": (lambda a: L.moco(*a)[0], lambda *a: np_moco(*a)[0], (0,), (1, 2)),
    "info_nce": (lambda a: L.info_nce(*a), np_info_nce, (0, 1), ()),
    "info_nce_one_way": (lambda a: L.info_nce_one_way(*a), np_info_nce_one_way, (0, 1), ()),
    "moco_v3": (lambda a: L.moco_v3(*a), np_moco_v3, (0, 1), (2, 3)),
    "spectral_contrastive": (lambda a: L.spectral_contrastive(*a), np_spectral, (0, 1), ()),
    "barlow_twins": (lambda a: L.barlow_twins(*a), np_barlow, (0, 1), ()),
    "vicreg": (lambda a: L.vicreg(*a), np_vicreg, (0, 1), ()),
    "wmse": (lambda a: L.wmse(*a), np_wmse, (0, 1), ()),
    "dino": (lambda a: L.dino(*a)[0], lambda *a: np_dino(*a)[0], (0,), (1, 2)),
}
NAMES = list(CASES)


def _grad_fn(name):
    fn, _, diff, _ = CASES[name]

    def loss_of(dargs, others):
        args = list(others)
        for i, a in zip(diff, dargs):
            args[i] = a
        return fn(args)

    return jax.jit(jax.grad(loss_of))


# ----------------------------------------------------------------------------- values and gradients


@pytest.mark.parametrize("name", NAMES)
def test_value_matches_numpy(name):
    fn, ref, _, _ = CASES[name]
    args = loss_inputs(name)
    got = float(fn([jnp.asarray(a) for a in args]))
    np.testing.assert_allclose(got, ref(*args), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_gradient_matches_finite_differences(name):
    """jax.grad of every differentiable argument against central differences of the NumPy reference."""
    _, ref, diff, _ = CASES[name]
    args = loss_inputs(name, seed=1)
    grads = _grad_fn(name)([jnp.asarray(args[i]) for i in diff], [jnp.asarray(a) for a in args])
    h = 1e-6
    for i, g in zip(diff, grads):
        fd = np.zeros_like(args[i])
        for idx in np.ndindex(args[i].shape):
            plus = [a.copy() for a in args]
            minus = [a.copy() for a in args]
            plus[i][idx] += h
            minus[i][idx] -= h
            fd[idx] = (ref(*plus) - ref(*minus)) / (2 * h)
        np.testing.assert_allclose(np.asarray(g), fd, rtol=1e-6, atol=1e-7, err_msg=f"{name} arg {i}")


@pytest.mark.parametrize("name", [n for n in NAMES if CASES[n][3]])
def test_stop_gradient_arguments_get_zero_gradient(name):
    """Targets/keys/teacher/centre/queue are stop-gradient: exactly zero gradient although the value depends on them."""
    fn, _, _, sg = CASES[name]
    args = [jnp.asarray(a) for a in loss_inputs(name, seed=2)]
    for i in sg:

        def f(x, i=i):
            a = list(args)
            a[i] = x
            return fn(a)

        g = jax.grad(f)(args[i])
        assert np.all(np.asarray(g) == 0.0), f"{name}: argument {i} receives gradient"
        assert abs(float(f(args[i] * 1.7 + 0.3)) - float(f(args[i]))) > 1e-6  # but the value depends on it


def test_simsiam_gradient_only_through_predictions_and_zero_vector_safe():
    p1, p2, z1, z2 = (jnp.asarray(a) for a in loss_inputs("simsiam"))
    gz = jax.grad(lambda z: L.simsiam(p1, p2, z, z2))(z1)
    assert np.all(np.asarray(gz) == 0.0)
    # a dead (exactly zero) prediction gives the finite gradient -z^_i / (eps n) of the norm floor, not NaN
    p = p1.at[0].set(0.0)
    g = jax.grad(L.negative_cosine)(p, z2)
    zn0 = np.asarray(z2[0]) / np.linalg.norm(np.asarray(z2[0]))
    np.testing.assert_allclose(np.asarray(g[0]), -zn0 / (1e-8 * N), rtol=1e-10)
    assert np.all(np.isfinite(np.asarray(g)))


# ----------------------------------------------------------------------------- invariances


def _permute_batch(name, args, perm):
    if name == "dino":
        return [args[0][:, perm], args[1][:, perm], args[2]]
    if name == "moco":
        return [args[0][perm], args[1][perm], args[2]]
    return [a[perm] for a in args]


@pytest.mark.parametrize("name", NAMES)
def test_batch_permutation_invariance(name):
    fn = CASES[name][0]
    args = [jnp.asarray(a) for a in loss_inputs(name, seed=3)]
    perm = np.random.default_rng(0).permutation(N)
    np.testing.assert_allclose(float(fn(_permute_batch(name, args, perm))), float(fn(args)), rtol=1e-12)


def test_cosine_losses_invariant_to_positive_row_rescaling_and_odd_in_sign():
    rng = np.random.default_rng(4)
    p1, p2, z1, z2 = (jnp.asarray(a) for a in loss_inputs("simsiam", seed=4))
    s = lambda: jnp.asarray(rng.uniform(0.1, 10.0, (N, 1)))
    base = float(L.simsiam(p1, p2, z1, z2))
    np.testing.assert_allclose(float(L.simsiam(p1 * s(), p2 * s(), z1 * s(), z2 * s())), base, rtol=1e-12)
    np.testing.assert_allclose(float(L.negative_cosine(-p1, z2)), -float(L.negative_cosine(p1, z2)), rtol=1e-12)
    bb = float(L.byol(p1, p2, z1, z2))
    np.testing.assert_allclose(float(L.byol(p1 * s(), p2 * s(), z1 * s(), z2 * s())), bb, rtol=1e-12)
    # byol = 2 * (2 + 2 * simsiam-with-same-pairing), as 2 - 2cos summed over two directions
    np.testing.assert_allclose(bb, 4.0 + 4.0 * base, rtol=1e-12)
    a, b = (jnp.asarray(x) for x in loss_inputs("info_nce", seed=4))
    np.testing.assert_allclose(float(L.info_nce(a * s(), b * s())), float(L.info_nce(a, b)), rtol=1e-12)


def test_rotation_invariance_of_inner_product_losses():
    q, _ = np.linalg.qr(np.random.default_rng(5).standard_normal((K, K)))
    q = jnp.asarray(q)
    for name in ("info_nce", "spectral_contrastive", "mse", "moco_v3", "simsiam", "byol"):
        fn = CASES[name][0]
        args = [jnp.asarray(a) for a in loss_inputs(name, seed=5)]
        np.testing.assert_allclose(float(fn([a @ q for a in args])), float(fn(args)), rtol=1e-11, err_msg=name)


def test_barlow_twins_invariant_to_per_feature_affine_maps():
    z1, z2 = (jnp.asarray(a) for a in loss_inputs("barlow_twins", seed=6))
    rng = np.random.default_rng(6)
    a = jnp.asarray(rng.uniform(0.2, 5.0, K) * rng.choice([-1.0, 1.0], K))
    b = jnp.asarray(rng.standard_normal(K))
    base = float(L.barlow_twins(z1, z2, eps=0.0))
    np.testing.assert_allclose(float(L.barlow_twins(a * z1 + b, a * z2 - b, eps=0.0)), base, rtol=1e-11)
    # with the default eps the invariance is only approximate (O(eps/var))
    assert abs(float(L.barlow_twins(100 * z1, 100 * z2)) - base) < 1e-4
    assert abs(float(L.barlow_twins(0.01 * z1, 0.01 * z2)) - base) > 1e-2


def test_wmse_invariant_to_upper_triangular_maps_per_view_but_not_rotations():
    z1, z2 = (jnp.asarray(a) for a in loss_inputs("wmse", seed=7))
    rng = np.random.default_rng(7)
    a = np.triu(rng.standard_normal((K, K)))
    np.fill_diagonal(a, rng.uniform(0.5, 2.0, K))
    base = float(L.wmse(z1, z2))
    np.testing.assert_allclose(float(L.wmse(z1 @ jnp.asarray(a) + 3.0, z2)), base, rtol=1e-10)
    q, _ = np.linalg.qr(rng.standard_normal((K, K)))
    assert abs(float(L.wmse(z1 @ jnp.asarray(q), z2)) - base) > 1e-3
    # whitened batch really is white: covariance of w equals I
    w = L.cholesky_whiten(z1, 0.0)
    np.testing.assert_allclose(np.cov(np.asarray(w), rowvar=False), np.eye(K), atol=1e-12)


def test_mse_translation_invariance_and_quadratic_hessian():
    u1, u2 = (jnp.asarray(a) for a in loss_inputs("mse", seed=8))
    np.testing.assert_allclose(float(L.mse(u1 + 2.5, u2 + 2.5)), float(L.mse(u1, u2)), rtol=1e-12)
    h = jax.hessian(lambda x: L.mse(x[:N], x[N:]))(jnp.concatenate([u1, u2]))
    h = np.asarray(h).reshape(2 * N * K, 2 * N * K)
    eye = np.eye(N * K)
    np.testing.assert_allclose(h, (2.0 / N) * np.block([[eye, -eye], [-eye, eye]]), atol=1e-14)


# ----------------------------------------------------------------------------- state: MoCo queue, DINO centre, EMA


def test_moco_queue_is_fifo_and_matches_reference():
    rng = np.random.default_rng(9)
    n, cap = 2, 6
    queue = jnp.asarray(np_unit(rng.standard_normal((cap, K)), 1e-12))
    pushed = []
    ref_queue = np.asarray(queue)
    for step in range(4):
        q, k = rng.standard_normal((n, K)), rng.standard_normal((n, K)) * 3.0
        loss, queue = L.moco(jnp.asarray(q), jnp.asarray(k), queue)
        ref_loss, ref_queue_next = np_moco(q, k, ref_queue)
        np.testing.assert_allclose(float(loss), ref_loss, rtol=1e-10)
        np.testing.assert_allclose(np.asarray(queue), ref_queue_next, rtol=1e-12)
        ref_queue = ref_queue_next
        pushed.append(np_unit(k, 1e-12))
        assert queue.shape == (cap, K)
    # after 4 pushes of 2 keys into a queue of 6: the last 3 batches, oldest first
    np.testing.assert_allclose(np.asarray(queue), np.concatenate(pushed[-3:]), rtol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(np.asarray(queue), axis=1), 1.0, rtol=1e-12)
    # the loss is invariant to the order of the queue rows (ring buffer == FIFO up to permutation)
    q = jnp.asarray(rng.standard_normal((n, K)))
    perm = rng.permutation(cap)
    np.testing.assert_allclose(float(L.moco(q, q, queue[perm])[0]), float(L.moco(q, q, queue)[0]), rtol=1e-12)


def test_dino_centre_update_and_view_pairs():
    student, teacher, center = (jnp.asarray(a) for a in loss_inputs("dino", seed=10))
    loss, new_center = L.dino(student, teacher, center, center_momentum=0.8)
    ref_loss, ref_center = np_dino(*map(np.asarray, (student, teacher, center)), m=0.8)
    np.testing.assert_allclose(float(loss), ref_loss, rtol=1e-10)
    np.testing.assert_allclose(np.asarray(new_center), ref_center, rtol=1e-12)
    expected = 0.8 * np.asarray(center) + 0.2 * np.asarray(teacher).mean(axis=(0, 1))
    np.testing.assert_allclose(np.asarray(new_center), expected, rtol=1e-12)
    # same-view pairs are excluded: V_s = V_t = 2 leaves exactly the 2 cross-view terms
    s2 = student[:2]
    l2, _ = L.dino(s2, teacher, center)
    pt = np_softmax((np.asarray(teacher) - np.asarray(center)) / 0.04, axis=-1)
    lq = np_log_softmax(np.asarray(s2) / 0.1, axis=-1)
    manual = 0.5 * (-(pt[0] * lq[1]).sum(-1).mean() - (pt[1] * lq[0]).sum(-1).mean())
    np.testing.assert_allclose(float(l2), manual, rtol=1e-10)


def test_ema_update_and_byol_schedule():
    target = {"w": jnp.ones((3,), jnp.float32), "b": [jnp.zeros((2,), jnp.float32)]}
    online = {"w": jnp.full((3,), 5.0, jnp.float32), "b": [jnp.ones((2,), jnp.float32)]}
    out = L.ema_update(target, online, 0.9)
    np.testing.assert_allclose(np.asarray(out["w"]), 0.9 + 0.1 * 5.0, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(out["b"][0]), 0.1, rtol=1e-6)
    assert out["w"].dtype == jnp.float32 and out["b"][0].dtype == jnp.float32
    sched = L.byol_decay_schedule(100, base_decay=0.996)
    # traced decay works inside jit
    out2 = jax.jit(lambda t, o, k: L.ema_update(t, o, sched(k)))(target, online, 30)
    tau30 = 1 - 0.004 * (np.cos(np.pi * 0.3) + 1) / 2
    np.testing.assert_allclose(np.asarray(out2["w"]), tau30 + (1 - tau30) * 5.0, rtol=1e-6)
    for k in (0, 1, 25, 50, 99, 100, 150):
        kk = min(k, 100)
        np.testing.assert_allclose(float(sched(k)), 1 - 0.004 * (np.cos(np.pi * kk / 100) + 1) / 2, rtol=1e-12)
    with pytest.raises(ValueError, match="decay"):
        L.ema_update(target, online, 1.5)
    with pytest.raises(ValueError, match="tree structure"):
        L.ema_update(target, {"w": online["w"]}, 0.5)


# ----------------------------------------------------------------------------- Hessians, float32


@pytest.mark.parametrize("name", NAMES)
def test_hessian_symmetric_finite_and_matches_fd_of_gradient(name):
    """jax.hessian over all differentiable arguments jointly (float64, small shapes)."""
    fn, _, diff, _ = CASES[name]
    args = [jnp.asarray(a) for a in loss_inputs(name, seed=11, n=5, k=3)]
    shapes = [args[i].shape for i in diff]
    sizes = [int(np.prod(s)) for s in shapes]

    def f(x):
        a = list(args)
        off = 0
        for i, s, m in zip(diff, shapes, sizes):
            a[i] = x[off : off + m].reshape(s)
            off += m
        return fn(a)

    x0 = jnp.concatenate([args[i].ravel() for i in diff])
    eps = 1e-5

    @jax.jit
    def hess_and_fd(x):
        g = jax.grad(f)
        steps = eps * jnp.eye(x.size, dtype=x.dtype)
        fd = jax.vmap(lambda e: (g(x + e) - g(x - e)) / (2 * eps))(steps)  # row j: d grad / d x_j
        return jax.hessian(f)(x), fd.T

    h, fd = (np.asarray(t) for t in hess_and_fd(x0))
    assert np.all(np.isfinite(h))
    scale = np.abs(h).max()
    np.testing.assert_allclose(h, h.T, atol=1e-12 * max(scale, 1.0))
    np.testing.assert_allclose(h, fd, rtol=1e-5, atol=1e-6 * max(scale, 1.0))


@pytest.mark.parametrize("name", NAMES)
def test_float32_value_and_jit_grad(name):
    fn, ref, diff, _ = CASES[name]
    args64 = loss_inputs(name, seed=12)
    args = [jnp.asarray(a, jnp.float32) for a in args64]
    val = jax.jit(fn)(args)
    assert val.dtype == jnp.float32
    np.testing.assert_allclose(float(val), ref(*[np.asarray(a, np.float64) for a in args]), rtol=2e-4, atol=1e-5)
    grads = _grad_fn(name)([args[i] for i in diff], args)
    assert all(g.dtype == jnp.float32 and np.all(np.isfinite(np.asarray(g))) for g in grads)


# ----------------------------------------------------------------------------- registry and errors


def test_info_nce_one_way_is_torch_cross_entropy_of_the_authors_logits():
    """The authors' line, run in torch on the same float64 inputs: ``z = F.normalize(u)``,
    ``F.cross_entropy(z1 @ z2.T / 0.1, arange(n))``; value and both gradients agree. It differs from
    the symmetric NT-Xent (2n - 2 negatives), and swapping the views changes it."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    u1, u2 = loss_inputs("info_nce_one_way", seed=21, n=7, k=4)
    for tau in (0.1, 0.5):
        t1, t2 = (torch.tensor(u, dtype=torch.float64, requires_grad=True) for u in (u1, u2))
        ref = F.cross_entropy(F.normalize(t1, dim=1) @ F.normalize(t2, dim=1).T / tau, torch.arange(7))
        ref.backward()
        got = L.info_nce_one_way(jnp.asarray(u1), jnp.asarray(u2), temperature=tau)
        g1, g2 = jax.grad(lambda a, b: L.info_nce_one_way(a, b, temperature=tau), argnums=(0, 1))(
            jnp.asarray(u1), jnp.asarray(u2)
        )
        np.testing.assert_allclose(float(got), ref.item(), rtol=1e-13)
        np.testing.assert_allclose(g1, t1.grad.numpy(), rtol=1e-10, atol=1e-13)
        np.testing.assert_allclose(g2, t2.grad.numpy(), rtol=1e-10, atol=1e-13)
    one_way = float(L.info_nce_one_way(jnp.asarray(u1), jnp.asarray(u2)))
    assert abs(one_way - float(L.info_nce(jnp.asarray(u1), jnp.asarray(u2)))) > 1e-3
    assert abs(one_way - float(L.info_nce_one_way(jnp.asarray(u2), jnp.asarray(u1)))) > 1e-3
    assert L.get("simclr_one_way") is L.info_nce_one_way and L.spec("info_nce_one_way").args == ("u1", "u2")


def test_get_names_and_aliases():
    for name in NAMES:
        assert L.get(name) is L.LOSSES[name]
    assert L.get("SimCLR") is L.info_nce and L.get("nt-xent") is L.info_nce
    assert L.get("barlow") is L.barlow_twins and L.get("moco_v2") is L.moco
    assert set(L.NEEDS_BATCH) == set(L.LOSSES)
    with pytest.raises(ValueError, match="Unknown loss name 'swav'"):
        L.get("swav")
    assert L.min_batch_size("wmse", 64) == 65 and L.min_batch_size("info_nce") == 2


@pytest.mark.parametrize("name", NAMES)
def test_min_batch_table_is_enforced(name):
    """Every loss accepts its table minimum and (for batch-statistics losses) rejects one less."""
    fn = CASES[name][0]
    need, least = L.NEEDS_BATCH[name], L.min_batch_size(name, K)  # wmse: K + 1 (its spec's batch_above_dim)
    m = max(least, 2)
    assert np.isfinite(float(fn([jnp.asarray(a) for a in loss_inputs(name, n=m)])))
    if need.batch_statistics:
        small = [jnp.asarray(a) for a in loss_inputs(name, n=least - 1)]
        with pytest.raises(ValueError, match="batch of at least"):
            fn(small)
    else:
        assert need.min_batch == 1
        assert np.isfinite(float(fn([jnp.asarray(a) for a in loss_inputs(name, n=1)])))


def test_bad_inputs_raise_clear_errors(no_shape_checks):
    a = jnp.ones((4, 3))
    with pytest.raises(ValueError, match="`z1` and `z2` must have the same shape"):
        L.info_nce(a, jnp.ones((4, 2)))
    with pytest.raises(ValueError, match="`u1` and `u2` must have the same shape"):
        L.info_nce_one_way(a, jnp.ones((4, 2)))
    with pytest.raises(ValueError, match="`u1` needs a batch of at least 2"):
        L.info_nce_one_way(jnp.ones((1, 3)), jnp.ones((1, 3)))
    with pytest.raises(ValueError, match="temperature"):
        L.info_nce_one_way(a, a, temperature=0.0)
    with pytest.raises(ValueError, match="`p1` must have rank 2"):
        L.simsiam(jnp.ones(3), jnp.ones(3), jnp.ones(3), jnp.ones(3))
    with pytest.raises(ValueError, match="`p1` and `z1` must have the same shape"):
        L.simsiam(a, a, jnp.ones((4, 2)), jnp.ones((4, 2)))
    with pytest.raises(ValueError, match="`z1` needs a batch of at least 2"):
        L.barlow_twins(jnp.ones((1, 3)), jnp.ones((1, 3)))
    with pytest.raises(ValueError, match="temperature"):
        L.info_nce(a, a, temperature=0.0)
    with pytest.raises(ValueError, match="`queue` must have shape"):
        L.moco(a, a, jnp.ones((8, 5)))
    with pytest.raises(ValueError, match="at least as many keys"):
        L.moco(a, a, jnp.ones((2, 3)))
    with pytest.raises(ValueError, match="V_t"):
        L.dino(jnp.ones((2, 4, 3)), jnp.ones((3, 4, 3)), jnp.zeros(3))
    with pytest.raises(ValueError, match="`center` must have shape"):
        L.dino(jnp.ones((2, 4, 3)), jnp.ones((2, 4, 3)), jnp.zeros(4))
    with pytest.raises(ValueError, match="at least 2 views"):
        L.dino(jnp.ones((1, 4, 3)), jnp.ones((1, 4, 3)), jnp.zeros(3))
    with pytest.raises(ValueError, match="k \\+ 1 = 4"):
        L.wmse(jnp.ones((3, 3)), jnp.ones((3, 3)))
    # rank-deficient batch: the Cholesky failure is reported, not returned as NaN
    rng = np.random.default_rng(13)
    z = rng.standard_normal((8, 3))
    z[:, 2] = z[:, 0] - z[:, 1]
    with pytest.raises(FloatingPointError, match="not positive definite"):
        L.wmse(jnp.asarray(z), jnp.asarray(rng.standard_normal((8, 3))))
    assert np.isfinite(float(L.wmse(jnp.asarray(z), jnp.asarray(z), eps=1e-3)))


@pytest.mark.parametrize(
    "name", ["simsiam", "byol", "info_nce", "barlow_twins", "vicreg", "mse", "spectral_contrastive"]
)
def test_non_finite_concrete_input_is_a_clear_error(name):
    a = np.random.default_rng(0).normal(size=(4, 3))
    b = a.copy()
    b[1, 2] = np.nan
    fn = L.get(name)
    args = (a, a, a, b) if name in ("simsiam", "byol") else (a, b)
    with pytest.raises(FloatingPointError, match="non-finite"):
        fn(*map(jnp.asarray, args))
    # Under jit the check is skipped (values are unknown at trace time) and NaN propagates.
    assert not bool(jnp.isfinite(jax.jit(fn)(*map(jnp.asarray, args))))
