"""Experiment 2: local metric adaptation and depth (Thm 3.2), the curvature barrier (Prop 3.3).

Part A, sample variation (descriptive): for heads of depth 1/2/3 and several
activations at initialisation, the per-sample pullback metrics
``G_E(z) = J^T J`` and ``G_L(z) = J^T H_L(h(z)) J`` (``J = dh/dz``) over ``n`` samples
``z ~ N(0, I)``, summarised by the coefficient of variation

    CV(G) = sqrt(mean_i |G_i - Gbar|_F^2) / |Gbar|_F,   Gbar = mean_i G_i.

A linear head has a constant ``J`` (``CV(G_E) = 0`` exactly); ``G_L`` varies with
``H_L`` even then.

Part B, Thm 3.2 (an MLP head can make ``H_eff`` epsilon-isotropic along a smooth,
non-self-intersecting trajectory): along a helix segment ``z(t)`` in R^d, heads of
depth 1 (affine: constant metric), 2 and 3 are fitted (Adam, ``lax.scan``) to

    F(theta) = mean_t |H_eff(z(t); theta) - I|_F^2 / d,   H_eff(z) = hess_z L(h_theta(z)),

for a per-sample contrastive loss ``L(u) = -u.k_0/tau + logsumexp(K u / tau)``
(keys ``K`` fixed; ``H_L = K^T (diag p - p p^T) K / tau^2`` is PSD and not constant).
The target is ``I`` itself, not ``c(t) I``: with a free per-point (or global) scale a
head could shrink the curve's image to a point, where every metric is constant to
first order. We report ``eps = max_t |H_eff(z(t)) - I|_2`` on a grid four times finer
than the fitting grid (so it measures the trajectory, not only the fitted points).

Part C, Prop 3.3: the loss metric ``g_L(u) = hess_u L(u)`` of per-sample losses
(MSE to a target: the flat control; negative cosine; BYOL normalised MSE; InfoNCE
of one anchor against fixed cosine keys; dot-product softmax cross-entropy).
Scale-invariant losses (``L(c u) = L(u)``) have ``u^T g_L u = 0`` (``g_L u = -grad L``),
so ``g_L`` is degenerate/indefinite on R^k. For them we restrict to the affine chart
``u = u0 + P x`` (``P``: orthonormal basis of ``u0^perp``), a transversal slice of
the scale orbits, on which ``g(x) = P^T g_L(u0 + P x) P`` is the Hessian of the
restricted loss; the other losses use ``g = g_L`` on R^k. At every sample point we
report the premise (``g`` positive definite?), and compute the scalar curvature
and the sectional curvature of random planes (:mod:`ssl_geometry.riemann`, exact
derivatives) where ``g`` is definite. Barrier check: the best constant ``W``
(BFGS on ``mean_s |W^T g(x_s) W - I|_F^2`` from ``W = gbar^{-1/2}``) leaves a
residual anisotropy ``max_s |W^T g(x_s) W - I|_2``: 0 (to rounding) for the flat
control, ``> 0`` where ``g`` varies. (A non-constant *flat* metric would also leave a
residual for a constant ``W``; curvature is the obstruction for every map, so the
residual is a necessary consequence of Prop 3.3, reported next to the curvature.)
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import scipy.optimize

from experiments import common
from ssl_geometry import geometry, heads, riemann
from ssl_geometry.models import as_function

NAME = "metric_adaptation"
TITLE = "Local metric adaptation and depth (Thm 3.2, Prop 3.3)"
CLAIM = ("An MLP head can make H_eff epsilon-isotropic along a smooth trajectory (depth buys local adaptation; "
         "a constant linear head cannot); a loss metric with non-zero Riemann curvature cannot be made isotropic "
         "everywhere by a constant W, while the flat quadratic loss can.")

#: Per-sample losses of Part C; ``chart`` marks the scale-invariant ones (restricted to u0^perp).
SCALE_INVARIANT = ("negative_cosine", "byol", "info_nce")
FLAT_CONTROL = "mse"


def _unit(x):
    return x / jnp.linalg.norm(x, axis=-1, keepdims=True)


# ----------------------------------------------------------------- per-sample losses


def softmax_dot_loss(u, keys, tau):
    """``L(u) = -u.k_0/tau + logsumexp(K u / tau)``: contrastive CE with dot-product logits.

    ``keys``: ``(m, k)``, row 0 is the positive. Convex in ``u``:
    ``hess L = K^T (diag p - p p^T) K / tau^2`` with ``p = softmax(K u / tau)``.
    """
    logits = keys @ u / tau
    return -logits[0] + jax.nn.logsumexp(logits)


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
    raise ValueError(f"Unknown per-sample loss {name!r}; expected one of "
                     f"{['mse', 'negative_cosine', 'byol', 'info_nce', 'softmax_dot']}.")


def coefficient_of_variation(G) -> float:
    """``sqrt(mean_i |G_i - Gbar|_F^2) / |Gbar|_F`` of a stack ``(n, d, d)``."""
    G = np.asarray(G)
    mean = G.mean(axis=0)
    dev = np.sqrt(np.mean(np.sum((G - mean) ** 2, axis=(1, 2))))
    return float(dev / np.linalg.norm(mean))


# ------------------------------------------------------------------- Part A: variation


def _head(d, depth, width, k, activation, dtype=jnp.float64):
    return heads.mlp(d, (width,) * (depth - 1), k, activation=activation, bias=True, dtype=dtype)


def sample_variation(cfg, keys, key):
    """Part A rows: CV of ``J^T J`` and ``J^T H_L J`` over samples, heads at initialisation."""
    kz, kh = jax.random.split(key)
    z = jax.random.normal(kz, (cfg.n_samples, cfg.d), jnp.float64)
    hess_L = jax.vmap(jax.hessian(lambda u: softmax_dot_loss(u, keys, cfg.tau)))
    rows = []
    i = 0
    for act in cfg.activations:
        for depth in cfg.depths:
            model = _head(cfg.d, depth, cfg.width, cfg.k, act)
            head_fn = as_function(model, model.init(jax.random.fold_in(kh, i)))
            i += 1
            u = head_fn(z)
            pm = geometry.pullback_metric(head_fn, z, hess_L(u))
            rows.append({"activation": act, "depth": depth, "cv_JtJ": coefficient_of_variation(pm.euclidean),
                         "cv_JtHJ": coefficient_of_variation(pm.loss)})
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
def _fit_program(d, depth, width, k, activation, lr, steps):
    """Compiled Adam fit of the isotropy objective (one program per head shape)."""
    model = _head(d, depth, width, k, activation)
    h_eff = _h_eff_fn(model)
    opt = optax.adam(lr)
    eye = jnp.eye(d)

    def objective(params, zs, keys, tau):
        H = jax.vmap(h_eff, in_axes=(None, 0, None, None))(params, zs, keys, tau)
        return jnp.mean(jnp.sum((H - eye) ** 2, axis=(1, 2))) / d

    @jax.jit
    def fit(params, zs, keys, tau):
        def step(carry, _):
            p, s = carry
            val, g = jax.value_and_grad(objective)(p, zs, keys, tau)
            upd, s = opt.update(g, s, p)
            return (optax.apply_updates(p, upd), s), val

        (params, _), vals = jax.lax.scan(step, (params, opt.init(params)), None, length=steps)
        return params, vals

    @jax.jit
    def evaluate(params, zs, keys, tau):
        H = jax.vmap(h_eff, in_axes=(None, 0, None, None))(params, zs, keys, tau)
        return jnp.linalg.eigvalsh(H - eye)

    return model, fit, evaluate


def isotropy_fit(cfg, keys, activation, depth, key):
    """Fit one head (best of ``fit_restarts``); returns the row and its eps(t) curve."""
    t_fit = jnp.linspace(0.0, 1.0, cfg.n_curve)
    t_eval = jnp.linspace(0.0, 1.0, 4 * (cfg.n_curve - 1) + 1)
    z_fit = helix(t_fit, cfg.d, cfg.radius, cfg.turns, cfg.pitch)
    z_eval = helix(t_eval, cfg.d, cfg.radius, cfg.turns, cfg.pitch)
    model, fit, evaluate = _fit_program(cfg.d, depth, cfg.width, cfg.k, activation, cfg.lr, cfg.fit_steps)
    best = None
    for r in range(cfg.fit_restarts):
        params = model.init(jax.random.fold_in(key, r))["params"]
        params, vals = fit(params, z_fit, keys, cfg.tau)
        vals = np.asarray(vals)
        if not np.all(np.isfinite(vals)):
            raise FloatingPointError(f"isotropy fit ({activation}, depth {depth}): non-finite objective at step "
                                     f"{int(np.argmin(np.isfinite(vals)))}.")
        ev = np.asarray(evaluate(params, z_eval, keys, cfg.tau))
        eps_t = np.max(np.abs(ev), axis=1)
        if best is None or eps_t.max() < best[0].max():
            best = (eps_t, vals, params)
    eps_t, vals, params = best
    head_fn = as_function(model, {"params": params})
    pm = geometry.pullback_metric(head_fn, z_eval)
    kind = "linear" if depth == 1 or activation in ("identity", "linear") else activation
    return {"activation": activation if depth > 1 else "affine", "depth": depth, "head": kind,
            "width": cfg.width if depth > 1 else 0, "params": int(sum(x.size for x in jax.tree_util.tree_leaves(params))),
            "eps_max": float(eps_t.max()), "eps_mean": float(eps_t.mean()), "final_objective": float(vals[-1]),
            "cv_JtJ_along_curve": coefficient_of_variation(pm.euclidean)}, eps_t, np.asarray(t_eval)


# ------------------------------------------------------------- Part C: Prop 3.3 barrier


def _chart(name, u0):
    """``(P, chart)``: ``P`` orthonormal basis of ``u0^perp`` for scale-invariant losses, else ``I``."""
    k = u0.shape[0]
    if name in SCALE_INVARIANT:
        q = np.linalg.qr(np.concatenate([np.asarray(u0)[:, None], np.eye(k)], axis=1))[0]
        return q[:, 1:k], "u0-perp chart"
    return np.eye(k), "full"


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
    eye = jnp.eye(m)

    @jax.jit
    def fg(wflat, g_j):
        def f(w):
            W = w.reshape(m, m)
            A = jnp.einsum("ai,sab,bj->sij", W, g_j, W) - eye
            return jnp.mean(jnp.sum(A**2, axis=(1, 2)))
        return jax.value_and_grad(f)(wflat)

    def resid(W):
        A = np.einsum("ai,sab,bj->sij", W, gs, W) - np.eye(m)
        return float(np.max(np.abs(np.linalg.eigvalsh(A)))), float(np.sqrt(np.mean(np.sum(A**2, axis=(1, 2))) / m))

    g_j = jnp.asarray(gs)
    sol = scipy.optimize.minimize(lambda w: tuple(np.asarray(x, float) for x in fg(jnp.asarray(w), g_j)),
                                  W0.ravel(), jac=True, method="BFGS", options={"gtol": 1e-12, "maxiter": 2000})
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


def curvature_rows(cfg, key):
    """Part C: premises, scalar/sectional curvature and the constant-W residual per loss."""
    k = cfg.k
    k_t, k_k, k_u, k_x, k_p = jax.random.split(key, 5)
    target = jax.random.normal(k_t, (k,), jnp.float64)
    keys = jax.random.normal(k_k, (cfg.n_keys, k), jnp.float64)
    keys = keys.at[0].set(target)  # the positive key points at the target
    rows, per_point = [], {}
    for li, name in enumerate(cfg.curvature_losses):
        loss = make_per_sample_loss(name, target, keys, cfg.tau)
        g_L = riemann.loss_metric(loss)
        u0 = target + cfg.base_offset * jax.random.normal(jax.random.fold_in(k_u, li), (k,), jnp.float64)
        P, domain = _chart(name, u0)
        P = jnp.asarray(P)
        m = P.shape[1]
        metric = jax.jit(lambda x, P=P, u0=u0, g_L=g_L: P.T @ g_L(u0 + P @ x) @ P)
        xs = cfg.spread * jax.random.normal(jax.random.fold_in(k_x, li), (cfg.n_points, m), jnp.float64)
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
            planes = np.asarray(jax.random.normal(jax.random.fold_in(jax.random.fold_in(k_p, li), s),
                                                  (cfg.n_planes, 2, m), jnp.float64))
            K += [sectional_from_riemann(Rm, gs[s], a, b) for a, b in planes] if m >= 2 else []
        S, K = np.asarray(S), np.asarray(K)
        for arr, what in ((S, "scalar"), (K, "sectional")):
            if arr.size and not np.all(np.isfinite(arr)):
                raise FloatingPointError(f"{name}: non-finite {what} curvature.")
        if definite.any():
            r0, r1, rms, _ = best_constant_whitener(gs[definite])
        else:
            r0 = r1 = rms = float("nan")
        rows.append({
            "loss": name, "domain": domain, "metric_dim": m, "points": int(cfg.n_points),
            "definite_points": int(definite.sum()),
            "min_eig_ratio": float(np.min(eig[:, 0] / eig[:, -1])),
            "max_abs_scalar_curvature": float(np.max(np.abs(S))) if S.size else float("nan"),
            "mean_scalar_curvature": float(np.mean(S)) if S.size else float("nan"),
            "max_abs_sectional_curvature": float(np.max(np.abs(K))) if K.size else float("nan"),
            "metric_cv": coefficient_of_variation(gs[definite]) if definite.any() else float("nan"),
            "constant_W_residual_init": r0, "constant_W_residual": r1, "constant_W_rms": rms,
        })
        per_point[name] = S.tolist()
    return rows, per_point


# --------------------------------------------------------------------------- verdict


def curved(row, tol) -> bool:
    return bool(max(row["max_abs_scalar_curvature"], np.nan_to_num(row["max_abs_sectional_curvature"])) > tol)


def verdict(curv_rows, fit_rows, cfg):
    """Rule (Prop 3.3 part): the flat control (mse) must give curvature <= curvature_tol and constant-W residual
    <= flat_residual_tol (else the computation is broken: not supported); any loss with curvature > curvature_tol
    (at points where its metric is definite) whose best constant W reaches residual <= flat_residual_tol
    contradicts Prop 3.3 -> not supported; no non-flat loss with a definite metric at >= 1 point -> premise
    violated. (Thm 3.2 part): the best depth>=2 head must reach eps_max <= eps_target and be at least
    depth_factor times below the best affine (depth-1) head -> supported; otherwise inconclusive (Thm 3.2 is an
    existence statement: a fit that falls short at this scale does not refute it)."""
    ctrl = [r for r in curv_rows if r["loss"] == FLAT_CONTROL]
    others = [r for r in curv_rows if r["loss"] != FLAT_CONTROL and r["definite_points"] > 0]
    lin = [r for r in fit_rows if r["depth"] == 1]
    deep = [r for r in fit_rows if r["depth"] >= 2 and r["head"] != "linear"]
    eps_lin = min((r["eps_max"] for r in lin), default=float("nan"))
    eps_deep = min((r["eps_max"] for r in deep), default=float("nan"))
    stats = {
        "eps_max_affine_head": eps_lin, "eps_max_best_mlp_head": eps_deep,
        "depth_gain": eps_lin / eps_deep if eps_deep > 0 else float("inf"),
        "flat_control_max_abs_curvature": ctrl[0]["max_abs_scalar_curvature"] if ctrl else float("nan"),
        "flat_control_constant_W_residual": ctrl[0]["constant_W_residual"] if ctrl else float("nan"),
        "min_constant_W_residual_curved": min((r["constant_W_residual"] for r in others
                                               if curved(r, cfg.curvature_tol)), default=float("nan")),
        "curved_losses": sum(curved(r, cfg.curvature_tol) for r in others),
        "nonflat_losses_checked": len(others),
    }
    if ctrl and (ctrl[0]["max_abs_scalar_curvature"] > cfg.curvature_tol
                 or ctrl[0]["constant_W_residual"] > cfg.flat_residual_tol):
        return "not supported", stats
    if any(curved(r, cfg.curvature_tol) and r["constant_W_residual"] <= cfg.flat_residual_tol for r in others):
        return "not supported", stats
    if not others:
        return "premise violated", stats
    if deep and lin and eps_deep <= cfg.eps_target and eps_deep * cfg.depth_factor <= eps_lin:
        return "supported", stats
    return "inconclusive", stats


def run(config, out_dir) -> dict:
    common.require_x64(NAME)
    key = jax.random.PRNGKey(config.seed)
    kA, kB, kC, kK = jax.random.split(key, 4)
    fit_keys = jax.random.normal(kK, (config.n_keys, config.k), jnp.float64)
    var_rows = sample_variation(config, fit_keys, kA)
    fit_rows, curves = [], {}
    cases = [("identity", 1)] + [(a, dep) for a in config.fit_activations for dep in config.depths if dep >= 2]
    for i, (act, depth) in enumerate(cases):
        row, eps_t, t = isotropy_fit(config, fit_keys, act, depth, jax.random.fold_in(kB, i))
        fit_rows.append(row)
        curves[f"{row['activation']} depth {depth}"] = (t, eps_t)
    curv_rows, per_point = curvature_rows(config, kC)
    v, stats = verdict(curv_rows, fit_rows, config)
    _figure(curves, curv_rows, per_point, out_dir)
    return {"verdict": v, "verdict_rule": verdict.__doc__.split("Rule ")[1].replace("\n    ", " "),
            "headline": stats, "paper": {}, "variation": var_rows, "isotropy_fits": fit_rows,
            "curvature": curv_rows, "scalar_curvature_per_point": per_point}


def _figure(curves, curv_rows, per_point, out_dir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.8))
    for label, (t, e) in curves.items():
        a1.plot(t, e, label=label)
    a1.set_yscale("log")
    a1.set_xlabel("t (trajectory parameter)")
    a1.set_ylabel("|H_eff(z(t)) - I|_2")
    a1.set_title("Thm 3.2: isotropy along the helix")
    a1.legend(fontsize=7)
    names = [r["loss"] for r in curv_rows]
    for i, n in enumerate(names):
        vals = np.abs(np.asarray(per_point.get(n, []), float))
        a2.scatter(np.full(vals.shape, i), np.maximum(vals, 1e-18), s=12)
    a2.set_yscale("log")
    a2.set_xticks(range(len(names)), names, rotation=30, ha="right")
    a2.set_ylabel("|S(g_L)| (0 drawn at 1e-18)")
    a2.set_title("Prop 3.3: curvature of the loss metric")
    fig.tight_layout()
    common.save_figure(fig, out_dir, "metric_adaptation")


def report(results, rel_dir) -> str:
    h = results["headline"]
    fit_cols = ["activation", "depth", "width", "params", "eps_max", "eps_mean", "cv_JtJ_along_curve"]
    curv_cols = ["loss", "domain", "metric_dim", "definite_points", "points", "min_eig_ratio",
                 "max_abs_scalar_curvature", "max_abs_sectional_curvature", "metric_cv",
                 "constant_W_residual_init", "constant_W_residual", "constant_W_rms"]
    return "\n".join([
        f"Thm 3.2: fitted to H_eff(z(t)) = I along a helix, the best affine head reaches max_t |H_eff - I|_2 = "
        f"{h['eps_max_affine_head']:.3g}, the best MLP head {h['eps_max_best_mlp_head']:.3g} "
        f"(gain {h['depth_gain']:.3g}x; eps on a grid 4x finer than the fitted points).",
        "",
        common.markdown_table(results["isotropy_fits"], fit_cols),
        "",
        f"Prop 3.3: the flat control (MSE) has |curvature| = {h['flat_control_max_abs_curvature']:.3g} and "
        f"constant-W residual {h['flat_control_constant_W_residual']:.3g}; {h['curved_losses']} of "
        f"{h['nonflat_losses_checked']} other losses have non-zero curvature, and the smallest constant-W residual "
        f"among them is {h['min_constant_W_residual_curved']:.3g}. Scale-invariant losses (negative cosine, BYOL, "
        "InfoNCE) are measured on the chart u0 + u0^perp (their g_L has u^T g_L u = 0); curvature only at points "
        "where the metric is positive definite (premise column `definite_points`).",
        "",
        common.markdown_table(results["curvature"], curv_cols),
        "",
        "Sample variation of the pullback metrics at initialisation (CV = relative Frobenius deviation from the "
        "mean metric; J^T H_L J with the dot-product softmax loss):",
        "",
        common.markdown_table(results["variation"]),
        "",
        f"![metric adaptation]({rel_dir}/metric_adaptation.png)",
    ])
