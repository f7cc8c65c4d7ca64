"""Offline probes: ridge, kNN, logistic/MLP and the rotation probe against references."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from compilations import compilations

from ssl_geometry import probes


def _blobs(seed, n_per, centers, noise):
    rng = np.random.default_rng(seed)
    x = np.concatenate([c + noise * rng.standard_normal((n_per, len(c))) for c in centers])
    y = np.repeat(np.arange(len(centers)), n_per).astype(np.int32)
    return x, y


def test_ridge_matches_normal_equations_and_separates():
    rng = np.random.default_rng(0)
    centers = 3.0 * rng.standard_normal((4, 6))
    xtr, ytr = _blobs(1, 30, centers, 0.5)
    xte, yte = _blobs(2, 20, centers, 0.5)
    out = probes.ridge_probe(xtr, ytr, xte, yte, l2=1e-2)
    assert out["acc"] == 1.0 and out["train_acc"] == 1.0
    # Independent reference on noisy data (accuracy < 1): augmented least squares
    # [X; sqrt(l2 n) I] w = [Y - b; 0] on standardised features; same accuracy.
    xtr, ytr = _blobs(3, 30, centers, 3.0)
    xte, yte = _blobs(4, 50, centers, 3.0)
    l2 = 0.1
    mu, sd = xtr.mean(0), xtr.std(0) + 1e-8
    xs, xt = (xtr - mu) / sd, (xte - mu) / sd
    y = np.eye(4)[ytr]
    b = y.mean(0)
    a = np.vstack([xs, np.sqrt(l2 * len(xs)) * np.eye(6)])
    w = np.linalg.lstsq(a, np.vstack([y - b, np.zeros((6, 4))]), rcond=None)[0]
    ref = float(np.mean(np.argmax(xt @ w + b, -1) == yte))
    got = probes.ridge_probe(xtr, ytr, xte, yte, l2=l2)["acc"]
    assert 0.3 < ref < 1.0
    assert got == pytest.approx(ref, abs=1e-12)


def _knn_reference(xtr, ytr, xte, k, c):
    a = xtr / np.linalg.norm(xtr, axis=1, keepdims=True)
    q = xte / np.linalg.norm(xte, axis=1, keepdims=True)
    s = q @ a.T
    preds = []
    for row in s:
        idx = np.argsort(-row, kind="stable")[:k]
        preds.append(np.argmax(np.bincount(ytr[idx], minlength=c)))
    return np.array(preds)


def test_knn_cosine_matches_bruteforce():
    rng = np.random.default_rng(3)
    # Directions matter for cosine: classes are rays with angular noise, radii arbitrary.
    dirs = rng.standard_normal((3, 5))
    xtr, ytr = _blobs(4, 40, dirs, 0.6)
    xte, yte = _blobs(5, 25, dirs, 0.6)
    xtr *= rng.uniform(0.1, 10, (len(xtr), 1))
    for k in (1, 5, 15):
        out = probes.knn_probe(xtr, ytr, xte, yte, k=k, num_classes=3)
        ref = _knn_reference(xtr, ytr, xte, k, 3)
        assert out["acc"] == pytest.approx(float(np.mean(ref == yte)), abs=1e-12)
    sep = probes.knn_probe(*_blobs(6, 20, 10 * np.eye(3), 0.1), *_blobs(7, 10, 10 * np.eye(3), 0.1), k=3)
    assert sep["acc"] == 1.0


def test_knn_is_scale_invariant_and_validates():
    xtr, ytr = _blobs(8, 20, np.eye(3) * 4, 0.8)
    xte, yte = _blobs(9, 20, np.eye(3) * 4, 0.8)
    a = probes.knn_probe(xtr, ytr, xte, yte, k=7, weighting="similarity")["acc"]
    b = probes.knn_probe(xtr * 13.0, ytr, xte * 0.01, yte, k=7, weighting="similarity")["acc"]
    assert a == b
    with pytest.raises(ValueError, match="`k`"):
        probes.knn_probe(xtr, ytr, xte, yte, k=0)
    with pytest.raises(ValueError, match="exceeds"):
        probes.knn_probe(xtr, ytr, xte, yte, k=1000)
    with pytest.raises(ValueError, match="weighting"):
        probes.knn_probe(xtr, ytr, xte, yte, weighting="bogus")
    with pytest.raises(ValueError, match="same number of rows"):
        probes.knn_probe(xtr, ytr[:-1], xte, yte)
    with pytest.raises(TypeError, match="integer"):
        probes.ridge_probe(xtr, ytr.astype(float), xte, yte)
    with pytest.raises(FloatingPointError, match="train_x"):
        probes.ridge_probe(np.where(xtr > 3, np.nan, xtr), ytr, xte, yte)


def test_logistic_and_mlp_probes_on_linear_and_xor_data():
    xtr, ytr = _blobs(10, 50, 5 * np.eye(4), 0.5)
    xte, yte = _blobs(11, 30, 5 * np.eye(4), 0.5)
    lin = probes.logistic_probe(xtr, ytr, xte, yte, epochs=30, batch_size=64, lr=0.05)
    assert lin["acc"] == 1.0
    # XOR: not linearly separable; the 2-layer MLP must solve what the linear probe cannot.
    rng = np.random.default_rng(12)
    x = rng.uniform(-1, 1, (800, 2))
    y = ((x[:, 0] > 0) ^ (x[:, 1] > 0)).astype(np.int32)
    lin = probes.logistic_probe(x[:600], y[:600], x[600:], y[600:], epochs=30, lr=0.05)
    mlp = probes.mlp_probe(x[:600], y[:600], x[600:], y[600:], hidden=64, epochs=60, lr=1e-2)
    assert lin["acc"] < 0.7
    assert mlp["acc"] > 0.9


def test_probe_fits_and_knn_compile_once_per_shape_with_the_data_as_arguments():
    """A second probe of the same shapes and setting compiles nothing (the fit and the kNN vote are module-level
    jitted functions, the data their arguments), and its result is the one a first call on that data gives."""
    rng = np.random.default_rng(21)
    data = [(rng.standard_normal((300, 12)).astype(np.float32), rng.integers(0, 3, 300)) for _ in range(2)]
    test = (rng.standard_normal((90, 12)).astype(np.float32), rng.integers(0, 3, 90))
    key = jax.random.PRNGKey(5)
    calls = {
        "linear": lambda x, y: probes.logistic_probe(x, y, *test, num_classes=3, epochs=2, batch_size=32, key=key),
        "mlp": lambda x, y: probes.mlp_probe(x, y, *test, num_classes=3, hidden=16, epochs=2, batch_size=32, key=key),
        "knn": lambda x, y: probes.knn_probe(x, y, *test, k=7, num_classes=3, weighting="similarity"),
    }
    for name, call in calls.items():
        call(*data[0])
        out = {}
        msgs = compilations(lambda: out.update(r=call(*data[1])))
        assert msgs == [], (name, msgs)
        assert out["r"] == call(*data[1]), name  # deterministic: the same data and key give the same probe
    # a new setting (here the epochs) is a new compilation of the fit, not a silent reuse
    assert any(
        "_fit" in m
        for m in compilations(
            lambda: probes.logistic_probe(*data[1], *test, num_classes=3, epochs=3, batch_size=32, key=key)
        )
    )
    with pytest.raises(ValueError, match="batch_size"):
        probes.logistic_probe(*data[1], *test, batch_size=0)


def test_rotation_probe_constructed_case():
    rng = np.random.default_rng(13)
    imgs = np.zeros((120, 6, 6, 1), np.float32)
    imgs[:, :2, :3, 0] = 1.0  # a bright block in the top-left corner: rotation moves it to another corner
    imgs += 0.3 * rng.standard_normal(imgs.shape).astype(np.float32)
    train, test = imgs[:80], imgs[80:]

    def flat(x):
        return jnp.reshape(x, (x.shape[0], -1))

    def invariant(x):  # sum over the rotation group orbit: identical features for all 4 rotations
        return flat(sum(jnp.rot90(x, k, axes=(1, 2)) for k in range(4)))

    sensitive = probes.rotation_probe(flat, train, test, epochs=20, hidden=32, lr=1e-2, batch_size=64)
    blind = probes.rotation_probe(invariant, train, test, epochs=20, hidden=32, lr=1e-2, batch_size=64)
    assert sensitive["linear"] > 0.95 and sensitive["mlp"] > 0.95
    # Invariant features carry no rotation information: at most chance (0.25) up to tie-breaking.
    assert blind["linear"] <= 0.3 and blind["mlp"] <= 0.3
    rot, labels = probes.rotation_dataset(test[:2])
    np.testing.assert_array_equal(labels, [0, 0, 1, 1, 2, 2, 3, 3])
    np.testing.assert_array_equal(np.asarray(rot[2]), np.rot90(test[0], 1, axes=(0, 1)))
    with pytest.raises(ValueError, match="square"):
        probes.rotation_dataset(np.zeros((2, 4, 6, 1)))


def test_rotation_probe_one_random_rotation_per_image():
    """``rotations="random"`` (the authors' RotationDataset): each image once, rotated by its drawn label."""
    rng = np.random.default_rng(5)
    imgs = rng.standard_normal((200, 4, 4, 1)).astype(np.float32)
    rot, labels = probes.rotation_dataset(imgs, key=jax.random.PRNGKey(3))
    assert rot.shape == imgs.shape and labels.shape == (200,)
    assert set(np.unique(labels)) == {0, 1, 2, 3} and 30 < np.sum(labels == 2) < 70
    for i in (0, 7, 199):
        np.testing.assert_array_equal(np.asarray(rot[i]), np.rot90(imgs[i], labels[i], axes=(0, 1)))
    # the probe sees n training and n test examples (not 4n) and still reads a rotation-sensitive feature
    imgs = np.zeros((400, 6, 6, 1), np.float32)
    imgs[:, :2, :3, 0] = 1.0
    imgs += 0.3 * rng.standard_normal(imgs.shape).astype(np.float32)
    seen = []

    def flat(x):
        seen.append(x.shape[0])
        return jnp.reshape(x, (x.shape[0], -1))

    r = probes.rotation_probe(
        flat,
        imgs[:300],
        imgs[300:],
        epochs=20,
        hidden=32,
        lr=1e-2,
        batch_size=64,
        rotations="random",
        key=jax.random.PRNGKey(1),
    )
    assert seen == [300, 100] and r["linear"] > 0.9
    with pytest.raises(ValueError, match="rotations"):
        probes.rotation_probe(flat, imgs[:8], imgs[8:16], rotations="four")


def test_rotation_probe_is_its_views_then_its_fit_with_one_key():
    """``rotation_probe(fn, key=k)`` is ``rotation_views(key=k)``, ``fn`` over each split, then
    ``fit_rotation_probes(key=k)``: the same draws and the same probe keys, so a feature pass computed once
    (a backbone z, heads applied to it) gives each representation's probe exactly."""
    rng = np.random.default_rng(7)
    imgs = np.zeros((160, 6, 6, 1), np.float32)
    imgs[:, :2, :3, 0] = 1.0
    imgs += 0.5 * rng.standard_normal(imgs.shape).astype(np.float32)
    key = jax.random.PRNGKey(4)

    def flat(x):
        return jnp.reshape(x, (x.shape[0], -1))

    whole = probes.rotation_probe(
        flat, imgs[:120], imgs[120:], epochs=3, hidden=16, lr=1e-2, batch_size=32, rotations="random", key=key
    )
    (x_tr, y_tr), (x_te, y_te) = probes.rotation_views(imgs[:120], imgs[120:], rotations="random", key=key)
    halves = probes.fit_rotation_probes(
        np.asarray(flat(x_tr)), y_tr, np.asarray(flat(x_te)), y_te, epochs=3, hidden=16, lr=1e-2, batch_size=32, key=key
    )
    assert whole == halves and whole["linear"] > 0.3
    # the draws are the key's: another key draws other rotations
    (_, y_other), _ = probes.rotation_views(imgs[:120], imgs[120:], rotations="random", key=jax.random.PRNGKey(5))
    assert not np.array_equal(y_tr, y_other)
    (x_all, y_all), _ = probes.rotation_views(imgs[:3], imgs[3:5])  # "all": four rotations of each image
    assert x_all.shape[0] == 12 and list(y_all) == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    with pytest.raises(ValueError, match="`rotations`"):
        probes.rotation_views(imgs[:3], imgs[3:5], rotations="four")
