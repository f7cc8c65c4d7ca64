"""Offline evaluation probes on frozen features.

Implementation of :mod:`ssl_geometry.probes`; the conventions and formulas are in its docstring.
"""

from __future__ import annotations

import functools
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ssl_geometry._src.checks import (
    check_choice,
    check_finite,
    check_positive,
    check_rank,
)

__all__ = [
    "standardize",
    "ridge_probe",
    "knn_probe",
    "logistic_probe",
    "mlp_probe",
    "rotate_images",
    "rotation_dataset",
    "features_in_batches",
    "rotation_views",
    "fit_rotation_probes",
    "rotation_probe",
]


def _check_xy(x, y, name: str, num_classes: int | None = None):
    check_rank(x, f"{name}_x", 2)
    check_rank(y, f"{name}_y", 1)
    if x.shape[0] != y.shape[0]:
        raise ValueError(
            f"`{name}_x` and `{name}_y` must have the same number of rows; got {x.shape[0]} and {y.shape[0]}."
        )
    if not np.issubdtype(np.asarray(y).dtype, np.integer):
        raise TypeError(f"`{name}_y` must hold integer class labels; got dtype {np.asarray(y).dtype}.")
    if num_classes is not None and y.size and (int(np.min(y)) < 0 or int(np.max(y)) >= num_classes):
        raise ValueError(
            f"`{name}_y` labels must lie in [0, {num_classes}); got range [{int(np.min(y))}, {int(np.max(y))}]."
        )
    check_finite(x, f"{name}_x")


def _prepare(train_x, train_y, test_x, test_y, num_classes):
    train_x, test_x = np.asarray(train_x), np.asarray(test_x)
    train_y, test_y = np.asarray(train_y), np.asarray(test_y)
    if num_classes is None:
        num_classes = int(max(train_y.max(), test_y.max())) + 1
    _check_xy(train_x, train_y, "train", num_classes)
    _check_xy(test_x, test_y, "test", num_classes)
    if train_x.shape[1] != test_x.shape[1]:
        raise ValueError(
            f"`train_x` and `test_x` must have the same feature dimension; got {train_x.shape[1]} and "
            f"{test_x.shape[1]}."
        )
    return train_x, train_y, test_x, test_y, num_classes


def standardize(train_x, test_x, eps: float = 1e-8):
    """``(x - mu) / (sigma + eps)`` with ``mu, sigma`` per feature from ``train_x``."""
    mu = train_x.mean(0)
    sd = train_x.std(0) + eps
    return (train_x - mu) / sd, (test_x - mu) / sd


def ridge_probe(train_x, train_y, test_x, test_y, *, num_classes: int | None = None, l2: float = 1e-3) -> dict:
    """Closed-form ridge classifier.

    With standardised training features ``X`` (n, d) and centred one-hot targets
    ``Y``, ``W = (X^T X + l2 * n * I)^{-1} X^T Y`` (solved in float64 by Cholesky),
    bias = mean one-hot row; prediction ``argmax(x W + b)``.
    """
    check_positive(l2, "l2")
    train_x, train_y, test_x, test_y, c = _prepare(train_x, train_y, test_x, test_y, num_classes)
    xtr, xte = standardize(train_x.astype(np.float64), test_x.astype(np.float64))
    y = np.eye(c)[train_y]
    b = y.mean(0)
    n, d = xtr.shape
    gram = xtr.T @ xtr + l2 * n * np.eye(d)
    w = np.linalg.solve(gram, xtr.T @ (y - b))
    pred_tr = np.argmax(xtr @ w + b, -1)
    pred = np.argmax(xte @ w + b, -1)
    return {
        "acc": float(np.mean(pred == test_y)),
        "train_acc": float(np.mean(pred_tr == train_y)),
        "l2": l2,
        "num_classes": c,
    }


def knn_probe(
    train_x,
    train_y,
    test_x,
    test_y,
    *,
    k: int = 20,
    num_classes: int | None = None,
    weighting: str = "uniform",
    temperature: float = 0.07,
    chunk: int = 1024,
) -> dict:
    """k-NN classifier under cosine similarity ``s(a, b) = a.b / (|a| |b|)``.

    Each test point takes its ``k`` most similar training points; ``weighting=
    "uniform"`` votes one per neighbour (ties go to the smallest class index),
    ``"similarity"`` weighs each vote by ``exp(s / temperature)``.
    """
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"`k` must be a positive int; got {k!r}.")
    check_choice(weighting, "weighting", ("uniform", "similarity"))
    check_positive(temperature, "temperature")
    train_x, train_y, test_x, test_y, c = _prepare(train_x, train_y, test_x, test_y, num_classes)
    if k > train_x.shape[0]:
        raise ValueError(f"`k` = {k} exceeds the number of training points {train_x.shape[0]}.")

    def unit(a):
        return a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)

    tr = jnp.asarray(unit(train_x.astype(np.float32)))
    ytr = jnp.asarray(train_y)
    te = unit(test_x.astype(np.float32))
    preds = np.concatenate(
        [
            np.asarray(
                _knn_predict(
                    jnp.asarray(te[i : i + chunk]),
                    tr,
                    ytr,
                    k=k,
                    num_classes=c,
                    weighting=weighting,
                    temperature=float(temperature),
                )
            )
            for i in range(0, len(te), chunk)
        ]
    )
    return {"acc": float(np.mean(preds == test_y)), "k": k, "weighting": weighting, "num_classes": c}


@functools.partial(jax.jit, static_argnames=("k", "num_classes", "weighting", "temperature"))
def _knn_predict(q, tr, ytr, *, k: int, num_classes: int, weighting: str, temperature: float):
    """Predicted classes of the unit rows ``q`` from the unit training rows ``tr`` (compiled once per shape and
    setting; the arrays are arguments)."""
    sims = q @ tr.T
    top, idx = jax.lax.top_k(sims, k)
    votes = jax.nn.one_hot(ytr[idx], num_classes, dtype=jnp.float32)
    w = jnp.ones_like(top) if weighting == "uniform" else jnp.exp(top / temperature)
    return jnp.argmax(jnp.einsum("qk,qkc->qc", w, votes), -1)


def _fit_classifier(kind: str, params, x, y, *, epochs: int, batch_size: int, lr: float, weight_decay: float, key):
    """Adam(W) on mean cross-entropy over shuffled minibatches; all epochs in one ``lax.scan``
    (:func:`_fit`, compiled once per shape and setting)."""
    bs = min(batch_size, x.shape[0])
    params, losses = _fit(
        params,
        key,
        jnp.asarray(x),
        jnp.asarray(y),
        kind=kind,
        epochs=epochs,
        batch_size=bs,
        lr=float(lr),
        weight_decay=float(weight_decay),
    )
    losses = np.asarray(losses)
    if not np.all(np.isfinite(losses)):
        raise FloatingPointError(f"probe training diverged: epoch losses {losses.tolist()}.")
    return params, losses


@functools.partial(jax.jit, static_argnames=("kind", "epochs", "batch_size", "lr", "weight_decay"))
def _fit(params, key, x, y, *, kind: str, epochs: int, batch_size: int, lr: float, weight_decay: float):
    """``(params, mean loss per epoch)``: ``epochs`` epochs of AdamW(``lr``, ``weight_decay``) on
    ``mean_i CE(apply(params, x_i), y_i)`` over a fresh permutation of the rows each epoch, cut into
    ``n // batch_size`` minibatches (the remainder left out), ``apply`` the probe ``kind``.

    One function at module level, the data and parameters its arguments and the rest static: every probe of the
    same shapes and setting reuses one compilation (a function defined per call would compile per call).
    """
    n = x.shape[0]
    steps_per_epoch = n // batch_size
    tx = optax.adamw(lr, weight_decay=weight_decay)
    apply = _APPLY[kind]

    def loss_fn(p, xb, yb):
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(apply(p, xb), yb))

    def epoch(carry, ek):
        params, opt = carry
        perm = jax.random.permutation(ek, n)[: steps_per_epoch * batch_size].reshape(steps_per_epoch, batch_size)

        def step(carry, idx):
            params, opt = carry
            loss, g = jax.value_and_grad(loss_fn)(params, x[idx], y[idx])
            upd, opt = tx.update(g, opt, params)
            return (optax.apply_updates(params, upd), opt), loss

        (params, opt), losses = jax.lax.scan(step, (params, opt), perm)
        return (params, opt), jnp.mean(losses)

    (params, _), losses = jax.lax.scan(epoch, (params, tx.init(params)), jax.random.split(key, epochs))
    return params, losses


def _linear_apply(p, x):
    return x @ p["w"] + p["b"]


def _mlp_apply(p, x):
    return jax.nn.relu(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]


_APPLY = {"linear": _linear_apply, "mlp": _mlp_apply}


def _train_eval(
    kind, train_x, train_y, test_x, test_y, num_classes, *, hidden, epochs, batch_size, lr, weight_decay, key
):
    if not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"`epochs` must be a positive int; got {epochs!r}.")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"`batch_size` must be a positive int; got {batch_size!r}.")
    check_positive(lr, "lr")
    check_positive(weight_decay, "weight_decay", strict=False)
    train_x, train_y, test_x, test_y, c = _prepare(train_x, train_y, test_x, test_y, num_classes)
    xtr, xte = standardize(train_x.astype(np.float32), test_x.astype(np.float32))
    d = xtr.shape[1]
    k1, k2, kfit = jax.random.split(key, 3)
    if kind == "linear":
        params = {"w": jnp.zeros((d, c), jnp.float32), "b": jnp.zeros((c,), jnp.float32)}
    else:
        if not isinstance(hidden, int) or hidden < 1:
            raise ValueError(f"`hidden` must be a positive int; got {hidden!r}.")
        params = {
            "w1": jax.random.normal(k1, (d, hidden), jnp.float32) * np.sqrt(2.0 / d),
            "b1": jnp.zeros((hidden,), jnp.float32),
            "w2": jax.random.normal(k2, (hidden, c), jnp.float32) * np.sqrt(1.0 / hidden),
            "b2": jnp.zeros((c,), jnp.float32),
        }
    params, losses = _fit_classifier(
        kind, params, xtr, train_y, epochs=epochs, batch_size=batch_size, lr=lr, weight_decay=weight_decay, key=kfit
    )
    apply = _APPLY[kind]
    pred = np.asarray(jnp.argmax(apply(params, jnp.asarray(xte)), -1))
    pred_tr = np.asarray(jnp.argmax(apply(params, jnp.asarray(xtr)), -1))
    return {
        "acc": float(np.mean(pred == test_y)),
        "train_acc": float(np.mean(pred_tr == train_y)),
        "final_loss": float(losses[-1]),
        "epochs": epochs,
        "num_classes": c,
        "test_correct": (pred == test_y).astype(int).tolist(),
    }


def logistic_probe(
    train_x,
    train_y,
    test_x,
    test_y,
    *,
    num_classes: int | None = None,
    epochs: int = 20,
    batch_size: int = 256,
    lr: float = 1e-2,
    weight_decay: float = 0.0,
    key=None,
) -> dict:
    """Multinomial logistic regression ``softmax(x W + b)`` trained by AdamW (optax).

    Returns ``{"acc", "train_acc", "final_loss", "epochs", "num_classes", "test_correct"}``; ``test_correct`` is
    ``[1 if the test example is predicted right else 0, ...]`` in the test order (``acc`` is its mean)."""
    key = jax.random.PRNGKey(0) if key is None else key
    return _train_eval(
        "linear",
        train_x,
        train_y,
        test_x,
        test_y,
        num_classes,
        hidden=None,
        epochs=epochs,
        batch_size=batch_size,
        lr=lr,
        weight_decay=weight_decay,
        key=key,
    )


def mlp_probe(
    train_x,
    train_y,
    test_x,
    test_y,
    *,
    num_classes: int | None = None,
    hidden: int = 512,
    epochs: int = 20,
    batch_size: int = 256,
    lr: float = 1e-3,
    weight_decay: float = 0.0,
    key=None,
) -> dict:
    """2-layer MLP probe ``softmax(relu(x W1 + b1) W2 + b2)`` trained by AdamW (optax); returns the fields of
    :func:`logistic_probe`."""
    key = jax.random.PRNGKey(0) if key is None else key
    return _train_eval(
        "mlp",
        train_x,
        train_y,
        test_x,
        test_y,
        num_classes,
        hidden=hidden,
        epochs=epochs,
        batch_size=batch_size,
        lr=lr,
        weight_decay=weight_decay,
        key=key,
    )


def rotate_images(images, k: int):
    """Rotate NHWC ``images`` by ``k * 90`` degrees counter-clockwise (``jnp.rot90`` on H, W)."""
    return jnp.rot90(images, k=k, axes=(1, 2))


def rotation_dataset(images, *, key=None):
    """Rotated images and their labels ``k`` in {0, 1, 2, 3} (``k * 90`` degrees).

    ``key=None``: all four rotations of each image, ``(4n, H, W, C)`` with labels ``[0]*n + [1]*n + ...``.
    With a ``key``: one rotation per image, ``k_i`` uniform on {0, 1, 2, 3} drawn from ``key``
    (the authors' ``RotationDataset``), ``(n, H, W, C)`` in the images' order. Images must be
    square (rotating by 90 degrees keeps the shape)."""
    images = jnp.asarray(images)
    check_rank(images, "images", 4)
    if images.shape[1] != images.shape[2]:
        raise ValueError(f"`images` must be square to rotate by 90 degrees; got shape {tuple(images.shape)}.")
    if key is None:
        rot = jnp.concatenate([rotate_images(images, k) for k in range(4)], 0)
        return rot, np.repeat(np.arange(4), images.shape[0])
    labels = np.asarray(jax.random.randint(key, (images.shape[0],), 0, 4))
    rot = images
    for k in range(1, 4):
        rot = jnp.where(jnp.asarray(labels == k)[:, None, None, None], rotate_images(images, k), rot)
    return rot, labels


def features_in_batches(feature_fn: Callable, images, batch_size: int = 512) -> np.ndarray:
    """``feature_fn`` over ``images`` in chunks of ``batch_size``, concatenated as NumPy."""
    out = [np.asarray(feature_fn(images[i : i + batch_size])) for i in range(0, images.shape[0], batch_size)]
    return np.concatenate(out, 0)


def rotation_views(train_images, test_images, *, rotations: str = "all", key=None):
    """The rotation probe's data: ``((x_train, k_train), (x_test, k_test))``, :func:`rotation_dataset` of each split.

    ``rotations="all"``: each image under all four rotations; ``"random"``: each image once, under a
    rotation drawn uniformly per image from ``fold_in(key, 1)`` (train) and ``fold_in(key, 2)`` (test), the
    authors' ``RotationDataset``. :func:`rotation_probe` with the same ``key`` sees exactly these images, so
    features computed once here serve several representations (:func:`fit_rotation_probes`).
    """
    if rotations not in ("all", "random"):
        raise ValueError(f"`rotations` must be 'all' or 'random'; got {rotations!r}.")
    key = jax.random.PRNGKey(0) if key is None else key
    draw = rotations == "random"
    train = rotation_dataset(train_images, key=jax.random.fold_in(key, 1) if draw else None)
    test = rotation_dataset(test_images, key=jax.random.fold_in(key, 2) if draw else None)
    return train, test


def fit_rotation_probes(
    train_features,
    train_labels,
    test_features,
    test_labels,
    *,
    epochs: int = 5,
    hidden: int = 512,
    batch_size: int = 256,
    lr: float = 1e-3,
    key=None,
) -> dict:
    """The rotation probes on given features: a linear probe (key ``split(key)[0]``) and a 2-layer MLP of width
    ``hidden`` (key ``split(key)[1]``), 4 classes, Adam ``lr``, ``epochs`` epochs; test accuracy.

    Returns ``{"linear": acc, "mlp": acc, "linear_train": ..., "mlp_train": ..., "linear_test_correct": [0/1 per
    test example], "mlp_test_correct": [...], "epochs"}`` (the per-example outcomes give paired intervals over
    the test set).
    """
    key = jax.random.PRNGKey(0) if key is None else key
    k1, k2 = jax.random.split(key)
    lin = logistic_probe(
        train_features,
        train_labels,
        test_features,
        test_labels,
        num_classes=4,
        epochs=epochs,
        batch_size=batch_size,
        lr=lr,
        key=k1,
    )
    mlp = mlp_probe(
        train_features,
        train_labels,
        test_features,
        test_labels,
        num_classes=4,
        hidden=hidden,
        epochs=epochs,
        batch_size=batch_size,
        lr=lr,
        key=k2,
    )
    return {
        "linear": lin["acc"],
        "mlp": mlp["acc"],
        "linear_train": lin["train_acc"],
        "mlp_train": mlp["train_acc"],
        "linear_test_correct": lin["test_correct"],
        "mlp_test_correct": mlp["test_correct"],
        "epochs": epochs,
    }


def rotation_probe(
    feature_fn: Callable,
    train_images,
    test_images,
    *,
    epochs: int = 5,
    hidden: int = 512,
    batch_size: int = 256,
    lr: float = 1e-3,
    rotations: str = "all",
    key=None,
) -> dict:
    """The guillotine experiment's rotation-prediction probe.

    The probes (linear and a 2-layer MLP of width ``hidden``) are trained on ``(feature_fn(R_k x), k)``,
    ``R_k`` the rotation by ``k * 90`` degrees, for ``epochs`` epochs (the paper: 5) and evaluated on
    the rotated test images. ``rotations="all"``: each image under all four rotations;
    ``"random"``: each image once, under a rotation drawn uniformly per image (the authors'
    ``RotationDataset``; the train and test draws come from ``key``). Chance is 0.25. Returns
    ``{"linear": acc, "mlp": acc, "linear_train": ..., "mlp_train": ..., "epochs"}``.

    It is :func:`rotation_views`, ``feature_fn`` over each split (:func:`features_in_batches`), then
    :func:`fit_rotation_probes`, all with ``key``.

    Args:
      feature_fn: ``images (b, H, W, C) -> features (b, d)`` (e.g. backbone ``z`` or head ``h(z)``).
      train_images, test_images: square NHWC images (unrotated).
    """
    key = jax.random.PRNGKey(0) if key is None else key
    (xr_tr, y_tr), (xr_te, y_te) = rotation_views(train_images, test_images, rotations=rotations, key=key)
    return fit_rotation_probes(
        features_in_batches(feature_fn, xr_tr),
        y_tr,
        features_in_batches(feature_fn, xr_te),
        y_te,
        epochs=epochs,
        hidden=hidden,
        batch_size=batch_size,
        lr=lr,
        key=key,
    )
