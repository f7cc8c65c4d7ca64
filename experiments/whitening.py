"""Experiment 1: linear heads whiten a subspace (Thm 3.1).

Part A, the construction (exact): at a point ``u0`` of a batch-coupled loss, take
``H_L = hess_u L(u0)`` and a random r-dimensional subspace S of the representation
space; Thm 3.1's head ``W = U_r Lambda_r^{-1/2} B^T`` must give
``v^T H_eff v = |v|^2`` on S (checked to rounding) and ``H_eff = 0`` on S-perp.
For a non-quadratic loss the statement is local: we also report the error when
``H_L`` is evaluated at other points (the construction was made for ``u0``).

Part B, training: linear heads ``u = z @ W`` trained (Adam, fresh batches each step)
with decorrelation and contrastive losses on Gaussian representations with an
anisotropic covariance Sigma and two noisy views. A head whitens when the output
covariance ``C = W^T Sigma W`` is a multiple of the identity, i.e. when
``P = Sigma^{1/2} W W^T Sigma^{1/2}`` is a multiple of a rank-k projector (P and C
share their non-zero eigenvalues). We report ``max_i |lambda_i(C)/mean(lambda) - 1|``
at initialisation and after training, and the condition number of C.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from experiments import common
from ssl_geometry import geometry, heads, losses
from ssl_geometry import fit

NAME = "whitening"
TITLE = "Whitening (Thm 3.1)"
#: The registry claims (experiments/claims.py) this experiment decides.
CLAIMS = ("thm3.1-construction", "linear-heads-whiten")
CLAIM = ("Thm 3.1 (local subspace whitening): at a point with r = rank H_L, for every r-dimensional subspace S "
         "of the representation space there is a linear head W (k >= r) with v^T H_eff v = |v|^2 for all v in S. "
         "(The paper has no experiment for it; part B, trained linear heads, is this suite's check of the "
         "'linear heads whiten a subspace' reading.)")
#: Honours ``config.dry_run`` (2 training steps per head, the slowest loss's step time projected).
DRY_RUN = True
RULE = ("supported if the construction whitens S to < {verdict[construction_tolerance]:g} (and is 0 off S) and every "
        "decorrelation-trained head reaches decorrelation error < {verdict[whitening_tolerance]} and 5x below its "
        "initialisation at view noise {data[view_noise]:g} (the strong-noise rows, {data[high_noise]:g}, are reported "
        "beside it and not used); not supported if the construction fails (it would refute the theorem); "
        "inconclusive if only training falls short")


def construction(cfg, key):
    """Part A: Thm 3.1's W for H_L of the VICReg loss at a batch point (flattened), exact check."""
    k1, k2, k3 = jax.random.split(key, 3)
    # A small batch-coupled problem: u is (m, q) flattened, H_L is (m*q, m*q).
    m, q = 4, max(2, cfg.model.k // 2)
    u0 = jax.random.normal(k1, (m, q), jnp.float64)
    u2 = u0 + 0.3 * jax.random.normal(k2, (m, q), jnp.float64)
    loss_flat = lambda uf: losses.vicreg(uf.reshape(m, q), u2)
    H = np.asarray(jax.hessian(loss_flat)(u0.reshape(-1)))
    evals = np.linalg.eigvalsh(H)
    tol = H.shape[0] * np.finfo(float).eps * np.max(np.abs(evals))
    r = int(min(cfg.model.r, np.sum(evals > tol)))
    D = m * q + 3  # representation dimension (the head maps R^D -> R^{m q})
    B = np.linalg.qr(np.asarray(jax.random.normal(k3, (D, r), jnp.float64)))[0]
    wh = geometry.whitening_head(H, B)
    # The head's own effective Hessian at z0 with h(z0) = u0 (bias = u0 - W z0 with z0 = 0).
    head_fn = lambda z: z @ wh.weight + u0.reshape(-1)
    eh = geometry.effective_hessian(head_fn, loss_flat, jnp.zeros(D))
    chk = geometry.check_whitening(eh, B)
    # Away from the base point: H_L at u = h(z) for random z changes; the head was built for u0.
    off = []
    for i in range(5):
        z = jax.random.normal(jax.random.fold_in(key, 100 + i), (D,), jnp.float64)
        off.append(geometry.check_whitening(geometry.effective_hessian(head_fn, loss_flat, z), B).max_rel_error)
    return {
        "loss": "vicreg (batch-coupled, m=%d, q=%d)" % (m, q), "rank_H_L": int(wh.loss_hessian_rank), "r": r,
        "negative_eigenvalues_H_L": int(np.sum(evals < -tol)),
        "max_rel_error_on_S": chk.max_rel_error,
        "max_abs_eig_off_S": float(np.max(np.abs(chk.complement_eigenvalues))) if chk.complement_eigenvalues.size else 0.0,
        "cross_norm": chk.cross_norm, "max_rel_error_on_S_at_other_points": float(np.max(off)),
    }


def _whitening_error(W, sigma):
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
    return (float(np.max(np.abs(er - 1.0))), float(np.max(np.abs(ev / np.mean(ev) - 1.0))),
            float(ev[-1] / max(ev[0], 1e-300)))


def _two_views(cfg, sigma_sqrt, noise, key):
    """A fresh batch ``z ~ N(0, Sigma)`` and its two views ``z + noise * N(0, I)``."""
    kz, k1, k2 = jax.random.split(key, 3)
    z = jax.random.normal(kz, (cfg.data.n, cfg.data.d), jnp.float64) @ sigma_sqrt
    return (z + noise * jax.random.normal(k1, z.shape, jnp.float64),
            z + noise * jax.random.normal(k2, z.shape, jnp.float64))


def _objective(cfg, loss_name, noise):
    """``(model, objective)``: the linear head and ``objective(params, key, sigma_sqrt)`` on fresh views
    (``fit``'s ``(params, batch, args)``: the step's key is the batch, ``sigma_sqrt`` the args)."""
    model = heads.linear(cfg.data.d, cfg.model.k, dtype=jnp.float64)
    loss_fn = losses.get(loss_name)

    def objective(params, k, sigma_sqrt):
        z1, z2 = _two_views(cfg, sigma_sqrt, noise, k)
        v = {"params": params}
        return loss_fn(model.apply(v, z1)[0], model.apply(v, z2)[0])

    return model, objective


def train_head(cfg, loss_name, sigma_sqrt, key, view_noise=None, steps=None):
    """Part B: Adam on a linear head, a fresh batch of two views each step (:func:`fit`)."""
    noise = cfg.data.view_noise if view_noise is None else view_noise
    model, objective = _objective(cfg, loss_name, noise)
    k_init, k_data = jax.random.split(key)
    variables = model.init(k_init)
    steps = cfg.train.steps if steps is None else steps
    res = fit(objective, variables["params"], optax.adam(cfg.train.lr), steps=steps,
              batches=jax.random.split(k_data, steps), args=sigma_sqrt)
    return np.asarray(variables["params"]["layers"][0]["w"]), np.asarray(res.params["layers"][0]["w"]), res.losses


def step_time(cfg, loss_name, sigma_sqrt, key) -> float:
    """Wall time of one training step (value and gradient of the objective) on this device."""
    model, objective = _objective(cfg, loss_name, cfg.data.view_noise)
    grad = jax.jit(jax.value_and_grad(objective))
    return common.time_call(grad, model.init(key)["params"], key, sigma_sqrt)


def _kind(config, name):
    if name in config.train.decorrelation_losses:
        return "decorrelation"
    if name == "wmse":  # W-MSE whitens inside the loss: the head itself need not whiten
        return "whitening in the loss"
    return "contrastive"


def measure(config) -> dict:
    key = jax.random.PRNGKey(config.seed)
    kA, kB, kS = jax.random.split(key, 3)
    A = construction(config, kA)
    lo, hi = config.data.spectrum
    d = config.data.d
    eig = np.exp(np.linspace(np.log(lo), np.log(hi), d))
    Q = np.linalg.qr(np.asarray(jax.random.normal(kS, (d, d), jnp.float64)))[0]
    sigma_sqrt = (Q * np.sqrt(eig)) @ Q.T
    # Cross-view covariance E[z1 z2^T] = Sigma (the view noise is independent): the shared signal
    # that the losses correlate across views.
    sigma_shared = Q @ np.diag(eig) @ Q.T
    rows, curves = [], {}
    runs = [(name, config.data.view_noise) for name in config.train.losses]
    runs += [(name, config.data.high_noise) for name in config.train.high_noise_losses]
    steps = 2 if config.dry_run else config.train.steps
    for i, (name, noise) in enumerate(runs):
        W0, W, vals = train_head(config, name, jnp.asarray(sigma_sqrt), jax.random.fold_in(kB, i), noise, steps)
        d0, i0, c0 = _whitening_error(W0, sigma_shared)
        d1, i1, c1 = _whitening_error(W, sigma_shared)
        rows.append({"loss": name, "view_noise": noise, "kind": _kind(config, name),
                     "decorrelation_error_init": d0, "decorrelation_error_trained": d1,
                     "isotropy_error_init": i0, "isotropy_error_trained": i1,
                     "cond_C_init": c0, "cond_C_trained": c1, "final_loss": float(vals[-1])})
        curves[f"{name} (noise {noise:g})"] = [float(v) for v in vals]
    out = {"construction": A, "trained": rows, "curves": curves}
    if config.dry_run:
        t = max(step_time(config, name, jnp.asarray(sigma_sqrt), kB) for name, _ in runs)
        out["dry_run"] = common.dry_run_record(t, len(runs) * config.train.steps, losses_timed=len(runs))
    return out


def decide(m, config) -> dict:
    A, v = m["construction"], config.verdict
    dec = [r for r in m["trained"] if r["kind"] == "decorrelation" and r["view_noise"] == config.data.view_noise]
    dec_ok = all(r["decorrelation_error_trained"] < v.whitening_tolerance and
                 r["decorrelation_error_trained"] < r["decorrelation_error_init"] / 5 for r in dec)
    constr_ok = A["max_rel_error_on_S"] < v.construction_tolerance and A["max_abs_eig_off_S"] < 1e-8
    verdict = "not supported" if not constr_ok else ("supported" if dec_ok else "inconclusive")
    headline = {
        "construction_max_rel_error_on_S": A["max_rel_error_on_S"],
        "construction_error_at_other_points": A["max_rel_error_on_S_at_other_points"],
        "rank_H_L": A["rank_H_L"],
    }
    for r in dec:
        headline[f"{r['loss']}_decorrelation_error"] = r["decorrelation_error_trained"]
    return {"verdict": verdict, "headline": headline, "paper": {}}


def figures(results, out_dir) -> None:
    plt = common.pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.2))
    common.plot_normalised_curves(ax, results["measurements"]["curves"])
    common.save_figure(fig, out_dir, "training_curves")


def report(results, rel_dir) -> str:
    m = results["measurements"]
    A = m["construction"]
    return "\n".join([
        f"Construction ({A['loss']}, rank H_L = {A['rank_H_L']}, {A['negative_eigenvalues_H_L']} negative eigenvalues "
        f"of H_L, r = {A['r']}): max |v^T H_eff v - |v|^2|/|v|^2 on S = {A['max_rel_error_on_S']:.3g}; "
        f"largest |eigenvalue| of H_eff on S-perp = {A['max_abs_eig_off_S']:.3g}; coupling |B^T H P| = "
        f"{A['cross_norm']:.3g}. At other points z the same head gives error {A['max_rel_error_on_S_at_other_points']:.3g}: "
        "the whitening is local, as the theorem states.",
        "",
        "Trained linear heads, measured on the shared (cross-view) covariance Sigma: decorrelation error = "
        "max_i |lambda_i(R) - 1| for the correlation matrix R of C = W^T Sigma W (0 = outputs uncorrelated); "
        "isotropy error = max_i |lambda_i(C)/mean - 1| (0 = Sigma^{1/2} W W^T Sigma^{1/2} is a multiple of a "
        "rank-k projector):",
        "",
        common.markdown_table(m["trained"]),
        "",
        f"![training curves]({rel_dir}/training_curves.png)",
    ])


def run(config, out_dir) -> dict:
    """The old entry point, for the transition: :func:`experiments.common.run_experiment` on this module."""
    import sys

    return common.run_experiment(sys.modules[__name__], config, out_dir)
