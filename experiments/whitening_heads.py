"""Experiment 1's two parts: Thm 3.1's construction at a point (:func:`construction`, part A) and linear heads
trained on two noisy views (:func:`train_head`, part B) with the whitening errors of their output covariance
(:func:`whitening_error`). The claims, the dry run and the report are in :mod:`experiments.whitening`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ssl_geometry import fit, geometry, heads, losses

__all__ = ["construction", "head_objective", "train_head", "training_step", "two_views", "whitening_error"]


def construction(cfg, key):
    """Part A: Thm 3.1's W for H_L of the VICReg loss at a batch point (flattened), exact check."""
    k1, k2, k3 = jax.random.split(key, 3)
    # A small batch-coupled problem: u is (m, q) flattened, H_L is (m*q, m*q).
    m, q = 4, max(2, cfg.model.k // 2)
    u0 = jax.random.normal(k1, (m, q), jnp.float64)
    u2 = u0 + 0.3 * jax.random.normal(k2, (m, q), jnp.float64)
    loss_flat = lambda uf: losses.vicreg(uf.reshape(m, q), u2)
    H = np.asarray(jax.jit(jax.hessian(loss_flat))(u0.reshape(-1)))
    evals = np.linalg.eigvalsh(H)
    tol = H.shape[0] * np.finfo(float).eps * np.max(np.abs(evals))
    r = int(min(cfg.model.r, np.sum(evals > tol)))
    D = m * q + 3  # representation dimension (the head maps R^D -> R^{m q})
    B = np.linalg.qr(np.asarray(jax.random.normal(k3, (D, r), jnp.float64)))[0]
    wh = geometry.whitening_head(H, B)
    # The head's own effective Hessian at z0 with h(z0) = u0 (bias = u0 - W z0 with z0 = 0).
    head_fn = lambda z: z @ wh.weight + u0.reshape(-1)
    eh_jit = jax.jit(lambda z: geometry.effective_hessian(head_fn, loss_flat, z))  # one compilation, six points

    def eh_at(z):  # under jit effective_hessian cannot check its pieces: the dense H_eff is checked here
        eh = eh_jit(z)
        if not np.all(np.isfinite(np.asarray(eh.full))):
            raise FloatingPointError(f"construction: H_eff is non-finite at z = {np.asarray(z)[:3]}...")
        return eh

    eh = eh_at(jnp.zeros(D))
    chk = geometry.check_whitening(eh, B)
    H_eff = np.asarray(eh.full)
    off_S = float(np.linalg.norm(H_eff - H_eff @ B @ B.T, 2))  # |H_eff P|_2, P = I - B B^T: max |H_eff v| / |v| off S
    # Away from the base point: H_L at u = h(z) for random z changes; the head was built for u0.
    off = []
    for i in range(5):
        z = jax.random.normal(jax.random.fold_in(key, 100 + i), (D,), jnp.float64)
        off.append(geometry.check_whitening(eh_at(z), B).max_rel_error)
    return {
        "loss": "vicreg (batch-coupled, m=%d, q=%d)" % (m, q),
        "rank_H_L": int(wh.loss_hessian_rank),
        "r": r,
        "negative_eigenvalues_H_L": int(np.sum(evals < -tol)),
        "max_rel_error_on_S": chk.max_rel_error,
        "max_abs_eig_off_S": float(np.max(np.abs(chk.complement_eigenvalues)))
        if chk.complement_eigenvalues.size
        else 0.0,
        "max_norm_off_S": off_S,
        "cross_norm": chk.cross_norm,
        "max_rel_error_on_S_at_other_points": float(np.max(off)),
    }


def whitening_error(W, sigma):
    """(decorrelation error, isotropy error, cond C) of the output covariance ``C = W^T Sigma W``.

    decorrelation error = ``max_i |lambda_i(R) - 1|`` for the correlation matrix
    ``R = diag(C)^{-1/2} C diag(C)^{-1/2}`` (0 when the outputs are uncorrelated, which
    is what batch-standardising losses enforce); isotropy error =
    ``max_i |lambda_i(C)/mean(lambda) - 1|`` (0 when C is a multiple of I, i.e.
    ``Sigma^{1/2} W W^T Sigma^{1/2}`` is a multiple of a rank-k projector).
    """
    C = W.T @ sigma @ W
    C = 0.5 * (C + C.T)
    ev = np.linalg.eigvalsh(C)
    s = 1.0 / np.sqrt(np.diag(C))
    er = np.linalg.eigvalsh(C * s[:, None] * s[None, :])
    return (
        float(np.max(np.abs(er - 1.0))),
        float(np.max(np.abs(ev / np.mean(ev) - 1.0))),
        float(ev[-1] / max(ev[0], 1e-300)),
    )


def two_views(cfg, sigma_sqrt, noise, key):
    """A fresh batch ``z ~ N(0, Sigma)`` and its two views ``z + noise * N(0, I)``."""
    kz, k1, k2 = jax.random.split(key, 3)
    z = jax.random.normal(kz, (cfg.data.n, cfg.data.d), jnp.float64) @ sigma_sqrt
    return (
        z + noise * jax.random.normal(k1, z.shape, jnp.float64),
        z + noise * jax.random.normal(k2, z.shape, jnp.float64),
    )


def head_objective(cfg, loss_name, noise):
    """``(model, objective)``: the linear head and ``objective(params, key, sigma_sqrt)`` on fresh views
    (``fit``'s ``(params, batch, args)``: the step's key is the batch, ``sigma_sqrt`` the args)."""
    model = heads.linear(cfg.data.d, cfg.model.k, dtype=jnp.float64)
    loss_fn = losses.get(loss_name)

    def objective(params, k, sigma_sqrt):
        z1, z2 = two_views(cfg, sigma_sqrt, noise, k)
        v = {"params": params}
        return loss_fn(model.apply(v, z1)[0], model.apply(v, z2)[0])

    return model, objective


def train_head(cfg, loss_name, sigma_sqrt, key, view_noise=None, steps=None):
    """Part B: Adam on a linear head, a fresh batch of two views each step (:func:`fit`)."""
    noise = cfg.data.view_noise if view_noise is None else view_noise
    model, objective = head_objective(cfg, loss_name, noise)
    k_init, k_data = jax.random.split(key)
    variables = model.init(k_init)
    steps = cfg.train.steps if steps is None else steps
    res = fit(
        objective,
        variables["params"],
        optax.adam(cfg.train.lr),
        steps=steps,
        batches=jax.random.split(k_data, steps),
        args=sigma_sqrt,
    )
    return np.asarray(variables["params"]["layers"][0]["w"]), np.asarray(res.params["layers"][0]["w"]), res.losses


def training_step(cfg, loss_name, noise, sigma_sqrt, key):
    """One step of :func:`train_head` at ``cfg.data.n``, as a thunk: the jitted value and gradient of the objective
    on a fresh batch of two views (Adam's update, elementwise, is left out)."""
    model, objective = head_objective(cfg, loss_name, noise)
    grad = jax.jit(jax.value_and_grad(objective))
    params = model.init(key)["params"]
    return lambda: grad(params, key, sigma_sqrt)
