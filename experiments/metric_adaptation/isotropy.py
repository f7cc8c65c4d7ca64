"""Experiment 2, parts A and B: pullback-metric variation and Thm 3.2 isotropy fits along a helix."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ssl_geometry import as_function, fit, geometry, heads, param_count


def softmax_dot_loss(u, keys, tau):
    """``L(u) = -u.k_0/tau + logsumexp(K u / tau)``: contrastive CE with dot-product logits.

    ``keys``: ``(m, k)``, row 0 is the positive. Convex in ``u``:
    ``hess L = K^T (diag p - p p^T) K / tau^2`` with ``p = softmax(K u / tau)``.
    """
    logits = keys @ u / tau
    return -logits[0] + jax.nn.logsumexp(logits)


def coefficient_of_variation(G) -> float:
    """``sqrt(mean_i |G_i - Gbar|_F^2) / |Gbar|_F`` of a stack ``(n, d, d)``."""
    G = np.asarray(G)
    mean = G.mean(axis=0)
    dev = np.sqrt(np.mean(np.sum((G - mean) ** 2, axis=(1, 2))))
    return float(dev / np.linalg.norm(mean))


def _head(d, depth, width, k, activation, dtype=jnp.float64):
    return heads.mlp(d, (width,) * (depth - 1), k, activation=activation, bias=True, dtype=dtype)


@functools.lru_cache(maxsize=None)
def _variation_program(d, depth, width, k, activation):
    """``(model, metrics)`` for one head shape: ``metrics(variables, z, keys, tau) -> (J^T J, J^T H_L J)`` per sample,
    jitted (cached: one compilation per head shape and batch size)."""
    model = _head(d, depth, width, k, activation)

    @jax.jit
    def metrics(variables, z, keys, tau):
        head_fn = as_function(model, variables)
        hess_L = jax.vmap(jax.hessian(lambda u: softmax_dot_loss(u, keys, tau)))
        pm = geometry.pullback_metric(head_fn, z, hess_L(head_fn(z)))
        return pm.euclidean, pm.loss

    return model, metrics


def sample_variation(cfg, keys, key):
    """Part A rows: CV of ``J^T J`` and ``J^T H_L J`` over ``data.n_samples`` samples, heads at initialisation."""
    kz, kh = jax.random.split(key)
    z = jax.random.normal(kz, (cfg.data.n_samples, cfg.model.d), jnp.float64)
    rows = []
    i = 0
    for act in cfg.model.activations:
        for depth in cfg.model.depths:
            model, metrics = _variation_program(cfg.model.d, depth, cfg.model.width, cfg.model.k, act)
            euclid, loss = metrics(model.init(jax.random.fold_in(kh, i)), z, keys, cfg.data.tau)
            i += 1
            rows.append(
                {
                    "activation": act,
                    "depth": depth,
                    "cv_JtJ": coefficient_of_variation(euclid),
                    "cv_JtHJ": coefficient_of_variation(loss),
                }
            )
    return rows


# ---------------------------------------------------------------- Part B: Thm 3.2 fit


def helix(t, d, radius, turns, pitch):
    """``z(t) = radius (cos(2 pi turns t), sin(2 pi turns t), pitch t, 0, ...)``, t in [0, 1].

    Non-self-intersecting for ``pitch != 0`` or ``turns < 1``.
    """
    w = 2 * jnp.pi * turns
    base = jnp.stack([radius * jnp.cos(w * t), radius * jnp.sin(w * t), pitch * t], axis=-1)
    if d < 3:
        raise ValueError(f"`d` must be >= 3 for the helix trajectory; got {d}.")
    return jnp.concatenate([base, jnp.zeros(t.shape + (d - 3,), base.dtype)], axis=-1)


def _h_eff_fn(model):
    """``(params, z, keys, tau) -> H_eff(z) = hess_z L(h(z))`` for one sample."""

    def h_eff(params, z, keys, tau):
        return jax.hessian(lambda x: softmax_dot_loss(model.apply({"params": params}, x)[0], keys, tau))(z)

    return h_eff


@functools.lru_cache(maxsize=None)
def _fit_program(d, depth, width, k, activation):
    """The isotropy objective and its evaluation for one head shape (cached: one compile per shape)."""
    model = _head(d, depth, width, k, activation)
    h_eff = _h_eff_fn(model)
    eye = jnp.eye(d)

    def objective(params, batch, data):
        del batch  # full batch: the curve, keys and temperature are `data` (fit's args)
        zs, keys, tau = data
        H = jax.vmap(h_eff, in_axes=(None, 0, None, None))(params, zs, keys, tau)
        return jnp.mean(jnp.sum((H - eye) ** 2, axis=(1, 2))) / d

    @jax.jit
    def evaluate(params, zs, keys, tau):
        H = jax.vmap(h_eff, in_axes=(None, 0, None, None))(params, zs, keys, tau)
        return jnp.linalg.eigvalsh(H - eye)

    return model, objective, evaluate


def head_params(d: int, k: int, depth: int, width: int) -> int:
    """Parameter count of a biased MLP head ``R^d -> R^k`` with ``depth - 1`` hidden layers of ``width``:
    ``d k + k`` for ``depth = 1``, else ``(d + 1) w + (depth - 2)(w + 1) w + (w + 1) k``."""
    if depth == 1:
        return d * k + k
    return (d + 1) * width + (depth - 2) * (width + 1) * width + (width + 1) * k


def matched_width(d: int, k: int, depth: int, target: int) -> int:
    """The width whose depth-``depth`` head's parameter count is nearest ``target`` (ties: the smaller width)."""
    if depth < 2:
        raise ValueError(f"`depth` must be >= 2 (a depth-1 head has no width); got {depth}.")
    return min(range(1, target + 1), key=lambda w: (abs(head_params(d, k, depth, w) - target), w))


def isotropy_fit(cfg, keys, activation, depth, key, width=None):
    """Fit one head (best of ``fit_restarts``; ``width`` default ``model.width``); returns the row and its eps(t) curve."""
    width = cfg.model.width if width is None else width
    t_fit = jnp.linspace(0.0, 1.0, cfg.data.n_curve)
    t_eval = jnp.linspace(0.0, 1.0, 4 * (cfg.data.n_curve - 1) + 1)
    z_fit = helix(t_fit, cfg.model.d, cfg.data.radius, cfg.data.turns, cfg.data.pitch)
    z_eval = helix(t_eval, cfg.model.d, cfg.data.radius, cfg.data.turns, cfg.data.pitch)
    model, objective, evaluate = _fit_program(cfg.model.d, depth, width, cfg.model.k, activation)
    best = None
    steps, restarts = (2, 1) if cfg.dry_run else (cfg.train.fit_steps, cfg.train.fit_restarts)
    for r in range(restarts):
        params = model.init(jax.random.fold_in(key, r))["params"]
        res = fit(
            objective, params, optax.adam(cfg.train.lr), steps=steps, args=(z_fit, keys, jnp.asarray(cfg.data.tau))
        )
        params, vals = res.params, res.losses
        ev = np.asarray(evaluate(params, z_eval, keys, cfg.data.tau))
        eps_t = np.max(np.abs(ev), axis=1)
        if best is None or eps_t.max() < best[0].max():
            best = (eps_t, vals, params)
    eps_t, vals, params = best
    head_fn = as_function(model, {"params": params})
    pm = geometry.pullback_metric(head_fn, z_eval)
    kind = "linear" if depth == 1 or activation in ("identity", "linear") else activation
    n_params = param_count({"params": params})
    if n_params != head_params(cfg.model.d, cfg.model.k, depth, width):  # the widths were chosen by this formula
        raise RuntimeError(
            f"head_params({cfg.model.d}, {cfg.model.k}, {depth}, {width}) = "
            f"{head_params(cfg.model.d, cfg.model.k, depth, width)} but the head has {n_params}."
        )
    return (
        {
            "activation": activation if depth > 1 else "affine",
            "depth": depth,
            "head": kind,
            "width": width if depth > 1 else 0,
            "params": n_params,
            "eps_max": float(eps_t.max()),
            "eps_mean": float(eps_t.mean()),
            "final_objective": float(vals[-1]),
            "cv_JtJ_along_curve": coefficient_of_variation(pm.euclidean),
        },
        eps_t,
        np.asarray(t_eval),
    )


def fit_step(cfg, keys, activation, depth, key, width):
    """One step of the isotropy fit of a head at ``cfg.data.n_curve`` curve points, as a thunk: the jitted value and
    gradient of the objective (Adam's update, elementwise, is left out)."""
    model, objective, _ = _fit_program(cfg.model.d, depth, width, cfg.model.k, activation)
    z_fit = helix(
        jnp.linspace(0.0, 1.0, cfg.data.n_curve), cfg.model.d, cfg.data.radius, cfg.data.turns, cfg.data.pitch
    )
    grad = jax.jit(jax.value_and_grad(objective))
    params, data = model.init(key)["params"], (z_fit, keys, jnp.asarray(cfg.data.tau))
    return lambda: grad(params, None, data)
