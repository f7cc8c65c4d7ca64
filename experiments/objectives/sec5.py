"""Experiment 7's Sec. 5 measurement: degeneracy ratios against every control, the negative control, orbits.

In the synthetic two-view setting of :mod:`experiments.objectives.problem` the training
augmentation is the subspace ``A`` (the views are ``z + aug_scale A xi + iso_noise xi'``): its
tangent at a sample is ``v = A xi``. Per sample ``i`` of an evaluation batch and per direction
kind, ``g_i = mean_k |J_h(z_i) v_ik| / |v_ik|`` over ``K`` directions (:func:`gains`), for

* ``aug`` -- ``v = A xi`` (the training augmentation);
* ``negative`` -- ``v = B xi`` with ``B`` an orthonormal basis of a subspace orthogonal to ``A``
  of the same dimension (an augmentation the head was not trained on: the negative control,
  ``analysis.negative_control`` in the config);
* ``random`` -- ``v ~ N(0, I)``; ``between`` -- ``v = z_j - z_i`` for other samples ``j``;
  ``data`` -- ``v ~ N(0, Sigma_hat)``, the representations' sample covariance (the controls of
  the registry claim ``sec5-metric-degeneracy``).

:func:`experiments.rules.degeneracy_ratio` turns the gains into the ratios the rule reads, for the
trained head and the head at initialisation. Orbits (:func:`orbit_spreads`): ``K_o`` views of
each of ``n_orbits`` samples, drawn as the training views are; the spread of an orbit is the
paper's (mean squared distance of the L2-normalised points to their centroid,
:func:`ssl_geometry.paper.orbit_metrics`), of ``z`` and of ``h(z)``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from experiments import rules
from ssl_geometry import metrics

__all__ = ["DIRECTIONS", "negative_basis", "directions", "gains", "orbit_spreads", "sec5_inputs"]

#: The direction kinds of :func:`directions` (``aug`` and ``negative`` are augmentations, the rest controls).
DIRECTIONS = ("aug", "negative", *rules.SEC5_RATIO_CONTROLS)


def negative_basis(aug_basis, key) -> jnp.ndarray:
    """An orthonormal ``(d, a)`` basis of a random subspace orthogonal to ``span(aug_basis)`` (``a`` its columns)."""
    A = np.asarray(aug_basis)
    d, a = A.shape
    if 2 * a > d:
        raise ValueError(
            f"the negative control needs a {a}-dimensional complement of the augmentation subspace; "
            f"d = {d} leaves {d - a}."
        )
    X = np.asarray(jax.random.normal(key, (d, a), jnp.float64))
    X = X - A @ (A.T @ X)
    return jnp.asarray(np.linalg.qr(X)[0])


def directions(z, aug_basis, neg_basis, key, k: int) -> dict:
    """``{kind: (n, k, d)}`` directions per sample for every kind of :data:`DIRECTIONS` (module docstring)."""
    n, d = z.shape
    ka, kn, kr, kb, kd = jax.random.split(key, 5)
    a = aug_basis.shape[1]
    others = (jnp.arange(n)[:, None] + jax.random.randint(kb, (n, k), 1, n)) % n  # j != i
    cov = jnp.cov(z, rowvar=False)
    chol = jnp.linalg.cholesky(cov + 1e-12 * jnp.trace(cov) / d * jnp.eye(d))
    return {
        "aug": jax.random.normal(ka, (n, k, a), z.dtype) @ aug_basis.T,
        "negative": jax.random.normal(kn, (n, k, a), z.dtype) @ neg_basis.T,
        "random": jax.random.normal(kr, (n, k, d), z.dtype),
        "between": z[others] - z[:, None, :],
        "data": jax.random.normal(kd, (n, k, d), z.dtype) @ chol.T,
    }


def gains(head_fn, z, dirs) -> np.ndarray:
    """``g_i = mean_k |J_h(z_i) v_ik| / |v_ik|`` for ``dirs`` ``(n, k, d)`` (per-sample head on a row)."""
    row = lambda x: head_fn(x[None, :])[0]
    per = jax.vmap(jax.vmap(lambda zz, vv: metrics.metric_degeneracy(row, zz, vv), in_axes=(None, 0)))(z, dirs)
    return np.asarray(jnp.mean(per, axis=1), np.float64)


def orbit_spreads(head_fn, orbits) -> tuple[np.ndarray, np.ndarray]:
    """Per-orbit spread (the paper's: mean squared distance of L2-normalised points to the centroid) of the orbits
    ``(n_orbits, K, d)`` and of their images under the head."""

    def spread(x):
        x = x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-12)
        return jnp.mean(jnp.sum((x - jnp.mean(x, axis=1, keepdims=True)) ** 2, axis=-1), axis=1)

    h = jax.vmap(head_fn)(orbits)
    return np.asarray(spread(orbits), np.float64), np.asarray(spread(h), np.float64)


def sec5_inputs(trained_fn, untrained_fn, z, dirs, orbits) -> tuple[dict, dict, dict, dict]:
    """``(augmentations, negative, orbit_compression, gains)`` as :func:`experiments.rules.decide_sec5` reads them.

    ``orbit_compression`` is the trained head's, with ``"vs_untrained"``: the trained head's compression over
    the untrained head's on the same orbits (:func:`experiments.rules.orbit_gain_over_untrained`, the rule's
    ``orbits_vs_untrained``). ``gains``: ``{head: {kind: mean gain}}`` for the report.
    """
    g = {
        head: {kind: gains(fn, z, dirs[kind]) for kind in DIRECTIONS}
        for head, fn in (("trained", trained_fn), ("untrained", untrained_fn))
    }

    def ratios(kind):
        return {
            head: {c: rules.degeneracy_ratio(g[head][kind], g[head][c]) for c in rules.SEC5_RATIO_CONTROLS}
            for head in ("trained", "untrained")
        }

    sz, sh = orbit_spreads(trained_fn, orbits)
    sh0 = orbit_spreads(untrained_fn, orbits)[1]
    comp = {**rules.orbit_compression(sz, sh), "vs_untrained": rules.orbit_gain_over_untrained(sh, sh0)}
    mean_gains = {head: {kind: float(np.mean(v)) for kind, v in gk.items()} for head, gk in g.items()}
    return ({"subspace": ratios("aug")}, {"orthogonal": ratios("negative")}, comp, mean_gains)
