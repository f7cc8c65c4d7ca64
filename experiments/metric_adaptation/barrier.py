"""Experiment 2, part C: Prop 3.3, the curvature barrier of the loss metric against constant whiteners."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize

from experiments.metric_adaptation.isotropy import coefficient_of_variation, softmax_dot_loss
from ssl_geometry import riemann

#: Per-sample losses of Part C; ``chart`` marks the scale-invariant ones (restricted to u0^perp).
SCALE_INVARIANT = ("negative_cosine", "byol", "info_nce")
FLAT_CONTROL = "mse"


def _unit(x):
    return x / jnp.linalg.norm(x, axis=-1, keepdims=True)


def make_per_sample_loss(name: str, target, keys, tau: float):
    """The per-sample loss ``u -> L(u)`` of Part C (``u`` of shape ``(k,)``).

    * ``mse``: ``|u - t|^2`` (``g_L = 2 I``: flat control);
    * ``negative_cosine``: ``-cos(u, t)`` (SimSiam's D for one sample);
    * ``byol``: ``|u/|u| - t/|t||^2 = 2 - 2 cos(u, t)``;
    * ``info_nce``: ``-log softmax_j(cos(u, k_j)/tau)_0`` (one anchor, fixed keys);
    * ``softmax_dot``: :func:`softmax_dot_loss`.
    """
    t = None if target is None else jnp.asarray(target)
    if name == "mse":
        return lambda u: jnp.sum((u - t) ** 2)
    if name == "negative_cosine":
        return lambda u: -jnp.dot(u, t) / (jnp.linalg.norm(u) * jnp.linalg.norm(t))
    if name == "byol":
        return lambda u: jnp.sum((_unit(u) - _unit(t)) ** 2)
    if name == "info_nce":
        kn = _unit(jnp.asarray(keys))
        return lambda u: -jax.nn.log_softmax(kn @ _unit(u) / tau)[0]
    if name == "softmax_dot":
        K = jnp.asarray(keys)
        return lambda u: softmax_dot_loss(u, K, tau)
    raise ValueError(
        f"Unknown per-sample loss {name!r}; expected one of "
        f"{['mse', 'negative_cosine', 'byol', 'info_nce', 'softmax_dot']}."
    )


def _chart(name, u0):
    """``(P, chart)``: ``P`` orthonormal basis of ``u0^perp`` for scale-invariant losses, else ``I``."""
    k = u0.shape[0]
    if name in SCALE_INVARIANT:
        q = np.linalg.qr(np.concatenate([np.asarray(u0)[:, None], np.eye(k)], axis=1))[0]
        return q[:, 1:k], "u0-perp chart"
    return np.eye(k), "full"


@jax.jit
def _whitener_objective(wflat, g_j):
    """Value and gradient of ``f(W) = mean_s |W^T g_s W - I|_F^2`` (``W`` flattened; one compilation per shape)."""
    m = g_j.shape[-1]

    def f(w):
        W = w.reshape(m, m)
        A = jnp.einsum("ai,sab,bj->sij", W, g_j, W) - jnp.eye(m, dtype=g_j.dtype)
        return jnp.mean(jnp.sum(A**2, axis=(1, 2)))

    return jax.value_and_grad(f)(wflat)


def best_constant_whitener(gs):
    """Least-squares constant whitener: BFGS on ``f(W) = mean_s |W^T g_s W - I|_F^2`` from ``W0 = gbar^{-1/2}``.

    Returns ``(residual_init, residual_fit, rms_fit, W)`` with residual = ``max_s |W^T g_s W - I|_2``
    at ``W0`` and at the BFGS optimum, and ``rms_fit = sqrt(f(W) / m)``. For a constant metric
    ``W0`` is exact (residual 0 to rounding).
    """
    gs = np.asarray(gs)
    m = gs.shape[-1]
    gbar = gs.mean(axis=0)
    lam, V = np.linalg.eigh(gbar)
    W0 = (V / np.sqrt(lam)) @ V.T
    fg = _whitener_objective

    def resid(W):
        A = np.einsum("ai,sab,bj->sij", W, gs, W) - np.eye(m)
        return float(np.max(np.abs(np.linalg.eigvalsh(A)))), float(np.sqrt(np.mean(np.sum(A**2, axis=(1, 2))) / m))

    g_j = jnp.asarray(gs)
    sol = scipy.optimize.minimize(
        lambda w: tuple(np.asarray(x, float) for x in fg(jnp.asarray(w), g_j)),
        W0.ravel(),
        jac=True,
        method="BFGS",
        options={"gtol": 1e-12, "maxiter": 2000},
    )
    W = sol.x.reshape(m, m)
    r_fit, rms = resid(W)
    return resid(W0)[0], r_fit, rms, W


def scalar_from_riemann(Rm, g) -> float:
    """Scalar curvature ``S = g^{jk} g^{il} Rm[i, j, k, l]`` from the lowered tensor (``Ric_jk = g^{il} Rm_ijkl``)."""
    gi = np.linalg.inv(g)
    return float(np.einsum("il,jk,ijkl->", gi, gi, Rm))


def sectional_from_riemann(Rm, g, u, v) -> float:
    """``K(u, v) = Rm(u, v, v, u) / (g(u,u) g(v,v) - g(u,v)^2)`` from the lowered tensor ``Rm[i, j, k, l]``."""
    num = np.einsum("ijkl,i,j,k,l->", Rm, u, v, v, u)
    return float(num / ((u @ g @ u) * (v @ g @ v) - (u @ g @ v) ** 2))


@functools.lru_cache(maxsize=None)
def _chart_metrics(key_words: tuple, k: int, n_keys: int, tau: float, base_offset: float, names: tuple) -> tuple:
    """Per loss of ``names``: ``(name, domain, m, metric)``, the jitted metric ``x -> P^T g_L(u0 + P x) P`` on its
    ``m``-dimensional chart (:func:`_chart`), target, keys and ``u0`` drawn from the key ``key_words`` (a
    ``PRNGKey``'s words) as :func:`curvature_rows` splits it. Cached, so that calls differing only in the sampled
    points (a dry run's two sizes) reuse one compilation per loss (:mod:`ssl_geometry.riemann` compiles once per
    metric function)."""
    k_t, k_k, k_u, _, _ = jax.random.split(jnp.asarray(key_words, jnp.uint32), 5)
    target = jax.random.normal(k_t, (k,), jnp.float64)
    keys = jax.random.normal(k_k, (n_keys, k), jnp.float64)
    keys = keys.at[0].set(target)  # the positive key points at the target
    out = []
    for li, name in enumerate(names):
        g_L = riemann.loss_metric(make_per_sample_loss(name, target, keys, tau))
        u0 = target + base_offset * jax.random.normal(jax.random.fold_in(k_u, li), (k,), jnp.float64)
        P, domain = _chart(name, u0)
        P = jnp.asarray(P)
        out.append((name, domain, P.shape[1], jax.jit(lambda x, P=P, u0=u0, g_L=g_L: P.T @ g_L(u0 + P @ x) @ P)))
    return tuple(out)


def curvature_rows(cfg, key):
    """Part C: premises, scalar/sectional curvature and the constant-W residual per loss, at ``data.n_points``
    points ``x = spread * N(0, I)`` of each loss's chart."""
    _, _, _, k_x, k_p = jax.random.split(key, 5)
    charts = _chart_metrics(
        tuple(np.asarray(key).tolist()),
        cfg.model.k,
        cfg.data.n_keys,
        float(cfg.data.tau),
        float(cfg.data.base_offset),
        tuple(cfg.data.curvature_losses),
    )
    rows, per_point = [], {}
    for li, (name, domain, m, metric) in enumerate(charts):
        xs = cfg.data.spread * jax.random.normal(jax.random.fold_in(k_x, li), (cfg.data.n_points, m), jnp.float64)
        gs = np.stack([np.asarray(metric(x)) for x in xs])
        eig = np.linalg.eigvalsh(gs)
        tol = m * np.finfo(float).eps * np.max(np.abs(eig))
        definite = eig[:, 0] > tol
        S, K = [], []
        for s, x in enumerate(xs):
            if not definite[s]:
                continue
            Rm = np.asarray(riemann.lowered_riemann(metric, x))
            S.append(scalar_from_riemann(Rm, gs[s]))
            planes = np.asarray(
                jax.random.normal(
                    jax.random.fold_in(jax.random.fold_in(k_p, li), s), (cfg.data.n_planes, 2, m), jnp.float64
                )
            )
            K += [sectional_from_riemann(Rm, gs[s], a, b) for a, b in planes] if m >= 2 else []
        S, K = np.asarray(S), np.asarray(K)
        for arr, what in ((S, "scalar"), (K, "sectional")):
            if arr.size and not np.all(np.isfinite(arr)):
                raise FloatingPointError(f"{name}: non-finite {what} curvature.")
        if definite.any():
            r0, r1, rms, _ = best_constant_whitener(gs[definite])
        else:
            r0 = r1 = rms = float("nan")
        rows.append(
            {
                "loss": name,
                "domain": domain,
                "metric_dim": m,
                "points": int(cfg.data.n_points),
                "definite_points": int(definite.sum()),
                "min_eig_ratio": float(np.min(eig[:, 0] / eig[:, -1])),
                "max_abs_scalar_curvature": float(np.max(np.abs(S))) if S.size else float("nan"),
                "mean_scalar_curvature": float(np.mean(S)) if S.size else float("nan"),
                "max_abs_sectional_curvature": float(np.max(np.abs(K))) if K.size else float("nan"),
                "metric_cv": coefficient_of_variation(gs[definite]) if definite.any() else float("nan"),
                "constant_W_residual_init": r0,
                "constant_W_residual": r1,
                "constant_W_rms": rms,
            }
        )
        per_point[name] = S.tolist()
    return rows, per_point


def curved(row, tol) -> bool:
    return bool(max(row["max_abs_scalar_curvature"], np.nan_to_num(row["max_abs_sectional_curvature"])) > tol)
