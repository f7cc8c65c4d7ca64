"""Experiment 7's problem: the heads, the objectives, their first-view parts, the views, the training."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from experiments.objectives import sec5
from ssl_geometry import fit, heads, losses

__all__ = [
    "FAMILIES",
    "PREDICTOR",
    "TARGET",
    "first_view_problem",
    "objective_loss",
    "online_head",
    "problem_data",
    "sample_views",
    "train",
    "training_step",
]

FAMILIES = {
    "info_nce": "contrastive",
    "moco_v3": "contrastive",
    "spectral_contrastive": "contrastive",
    "barlow_twins": "decorrelation",
    "vicreg": "decorrelation",
    "byol": "distillation",
    "simsiam": "distillation",
    "dino": "distillation",
}
PREDICTOR = ("simsiam", "byol", "moco_v3")
TARGET = ("byol", "moco_v3", "dino")


def build_heads(cfg, name):
    m = cfg.model
    proj = heads.mlp(cfg.data.d, (m.hidden,), m.k, activation=m.activation, bias=True, dtype=jnp.float64)
    pred = (
        heads.mlp(m.k, (m.pred_hidden,), m.k, activation=m.activation, bias=True, dtype=jnp.float64)
        if name in PREDICTOR
        else None
    )
    return proj, pred


def online_head(cfg, name, params):
    """``(model, variables)`` of the online branch (projector, then predictor where there is one)."""
    proj, pred = build_heads(cfg, name)
    if pred is None:
        return proj, {"params": params["proj"]}
    return heads.compose(proj, pred), {"params": {"0": params["proj"], "1": params["pred"]}}


def apply_heads(model, params, x):
    return model.apply({"params": params}, x)[0]


def objective_loss(cfg, name, proj, pred):
    """``loss(params, target, center, z1, z2) -> (L, new_center)`` for objective ``name``."""
    temp = cfg.train.temperature

    def loss(params, target, center, z1, z2):
        u1, u2 = apply_heads(proj, params["proj"], z1), apply_heads(proj, params["proj"], z2)
        if pred is not None:
            p1, p2 = apply_heads(pred, params["pred"], u1), apply_heads(pred, params["pred"], u2)
        if name in TARGET:
            t1 = jax.lax.stop_gradient(apply_heads(proj, target, z1))
            t2 = jax.lax.stop_gradient(apply_heads(proj, target, z2))
        if name == "simsiam":
            return losses.simsiam(p1, p2, u1, u2), center
        if name == "byol":
            return losses.byol(p1, p2, t1, t2), center
        if name == "moco_v3":
            return losses.moco_v3(p1, p2, t1, t2, temperature=temp), center
        if name == "dino":
            return losses.dino(jnp.stack([u1, u2]), jnp.stack([t1, t2]), center)
        if name == "info_nce":
            return losses.info_nce(u1, u2, temperature=temp), center
        return losses.get(name)(u1, u2), center

    return loss


@functools.lru_cache(maxsize=None)
def _first_view_loss(name, temperature):
    """Jitted ``loss(u, fixed)``: the part of the objective that depends on the first view's online outputs
    (compiled once per objective and shape; every state passes its arrays as arguments)."""

    @jax.jit
    def loss(u, f):
        if name == "simsiam":  # only D(p1, sg z2)/2 depends on z1 (z1's projection enters through sg)
            return 0.5 * losses.negative_cosine(u, f["u2"])
        if name == "byol":
            return losses.byol(u, f["p2"], f["t1"], f["t2"])
        if name == "moco_v3":
            return losses.moco_v3(u, f["p2"], f["t1"], f["t2"], temperature=temperature)
        if name == "dino":
            return losses.dino(jnp.stack([u, f["u2"]]), jnp.stack([f["t1"], f["t2"]]), f["center"])[0]
        if name == "info_nce":
            return losses.info_nce(u, f["u2"], temperature=temperature)
        return losses.get(name)(u, f["u2"])

    return loss


def first_view_problem(cfg, name, params, target, center, z1, z2):
    """``(model, variables, loss_fn)`` with ``loss_fn(model(z1))`` = the part of L that depends on ``z1``.

    The model is the online branch (projector, then predictor where there is one); the second
    view's outputs, the targets and the DINO centre are fixed arrays (the stop-gradient branches of
    the objective, and the other view's online branch as in experiment 3).
    """
    loss = _first_view_loss(name, cfg.train.temperature)
    proj, _ = build_heads(cfg, name)
    model, variables = online_head(cfg, name, params)
    fixed = {"u2": apply_heads(proj, params["proj"], z2), "p2": model.apply(variables, z2)[0], "center": center}
    if name in TARGET:
        fixed["t1"], fixed["t2"] = apply_heads(proj, target, z1), apply_heads(proj, target, z2)
    return model, variables, (lambda u: loss(u, fixed))


def sample_views(cfg, key, n, sigma_sqrt, aug_basis, clean=None):
    """``(z, z1, z2)``: clean representations and two views (module docstring); ``clean`` (``(d,)``): ``n`` views
    of that one sample (an orbit) instead of ``n`` samples."""
    kz, k1, k2, k3, k4 = jax.random.split(key, 5)
    d = cfg.data
    z = (
        jax.random.normal(kz, (n, d.d), jnp.float64) @ sigma_sqrt
        if clean is None
        else jnp.tile(jnp.asarray(clean)[None, :], (n, 1))
    )
    a = aug_basis.shape[1]

    def view(ka, ki):
        return (
            z
            + d.aug_scale * jax.random.normal(ka, (n, a), jnp.float64) @ aug_basis.T
            + d.iso_noise * jax.random.normal(ki, (n, d.d), jnp.float64)
        )

    return z, view(k1, k2), view(k3, k4)


def _training_problem(cfg, name, key, sigma_sqrt, aug_basis, steps):
    """``(models, params, (target, center), step_loss, k_data)``: the heads at initialisation, the loss state and
    ``fit``'s stateful loss on fresh views of ``cfg.data.n`` samples (the EMA target, BYOL's schedule over
    ``steps``, and the DINO centre updated from the parameters before each step)."""
    proj, pred = build_heads(cfg, name)
    k_p, k_q, k_d = jax.random.split(key, 3)
    params = {"proj": proj.init(k_p)["params"]}
    if pred is not None:
        params["pred"] = pred.init(k_q)["params"]
    center = jnp.zeros((cfg.model.k,), jnp.float64)
    loss = objective_loss(cfg, name, proj, pred)
    tau = losses.byol_decay_schedule(steps, cfg.train.ema)
    n = cfg.data.n

    def step_loss(p, state, batch, args):
        del args
        tgt, c = state
        _, z1, z2 = sample_views(cfg, batch["key"], n, sigma_sqrt, aug_basis)
        val, c_new = loss(p, tgt, c, z1, z2)
        if name in TARGET:
            tgt = losses.ema_update(tgt, jax.lax.stop_gradient(p["proj"]), tau(batch["i"]))
        return val, (tgt, jax.lax.stop_gradient(c_new))

    return (proj, pred), params, (params["proj"], center), step_loss, k_d


def train(cfg, name, key, sigma_sqrt, aug_basis, steps):
    """Adam on the head (and predictor) by :func:`fit`; the EMA target (BYOL's schedule) and the DINO
    centre are the loss state, updated from the parameters before each step. Returns the state and
    loss curve."""
    models, params, (target, center), step_loss, k_d = _training_problem(cfg, name, key, sigma_sqrt, aug_basis, steps)
    batches = {"i": jnp.arange(steps), "key": jax.random.split(k_d, steps)}
    res = fit(step_loss, params, optax.adam(cfg.train.lr), steps=steps, batches=batches, state=(target, center))
    tgt, c = res.state
    return models, (params, target, center), (res.params, tgt, c), np.asarray(res.losses), step_loss


def training_step(cfg, name, key, sigma_sqrt, aug_basis, steps):
    """One step of :func:`train` at ``cfg.data.n``, as a thunk: the jitted loss and gradient of ``step_loss`` at
    initialisation (the Adam update, elementwise, is left out)."""
    _, params, state, step_loss, k_d = _training_problem(cfg, name, key, sigma_sqrt, aug_basis, steps)
    vg = jax.jit(jax.value_and_grad(step_loss, has_aux=True))
    return lambda: vg(params, state, {"i": jnp.asarray(0), "key": k_d}, None)


def problem_data(cfg):
    """``(sigma_sqrt, A, B)``: the representation covariance's square root, the augmentation basis and the negative
    control's basis (orthogonal to ``A``, :func:`experiments.objectives.sec5.negative_basis`), all from
    ``cfg.seed``."""
    k_s, k_a, k_n = jax.random.split(jax.random.PRNGKey(cfg.seed), 3)
    lo, hi = cfg.data.spectrum
    d = cfg.data.d
    eig = np.exp(np.linspace(np.log(lo), np.log(hi), d))
    Q = np.linalg.qr(np.asarray(jax.random.normal(k_s, (d, d), jnp.float64)))[0]
    sigma_sqrt = jnp.asarray((Q * np.sqrt(eig)) @ Q.T)
    A = jnp.asarray(np.linalg.qr(np.asarray(jax.random.normal(k_a, (d, cfg.data.aug_dim), jnp.float64)))[0])
    return sigma_sqrt, A, sec5.negative_basis(A, k_n)


def scale_projector(params, target, alpha):
    """Pseudo-collapse: every projector weight matrix (online and target) times ``alpha``; biases and the
    predictor unchanged."""
    p = dict(params)
    p["proj"] = heads.scale_weights({"params": params["proj"]}, alpha)["params"]
    return p, heads.scale_weights({"params": target}, alpha)["params"]
