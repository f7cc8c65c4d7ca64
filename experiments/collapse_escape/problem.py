"""Experiment 4's model: objectives with fixed targets, heads, representations, certified collapsed equilibria.

State ``y = {"rep": ..., "head": theta}``: ``rep`` is the representation ``z`` itself
(``representation = "free"``, ``(n, d)``) or the parameters ``phi`` of a small MLP backbone
``z = f_phi(x)`` on fixed inputs ``x`` (``"mlp"``). The head ``u = h_theta(z)`` is a bias-free MLP
``d -> hidden -> k``. Objectives act on head outputs ``U (n, k)`` against fixed (stop-gradient)
targets -- a frozen teacher:

* ``mse``:     ``L = (1/n) sum_i |u_i - t_i|^2``           ``rho_i = (2/n)(u_i - t_i)``, ``H_L = (2/n) I``;
* ``dino``:    ``L = (1/n) sum_i -P_i . log softmax(u_i / tau_s)``, ``P_i = softmax((t_i - C) / tau_t)``
  (fixed teacher logits ``t`` and centre ``C``): ``rho_i = (q_i - P_i) / (n tau_s)``, ``H_L`` PSD;
* ``simsiam``: ``L = -(1/n) sum_i cos(u_i, t_i)`` (SimSiam's ``D(p, sg z)``): ``H_L`` indefinite.

Timescale separation: the flow is ``dz/dt = -grad_rep L``, ``dtheta/dt = -tau grad_theta L``. It
is run in the coordinates ``w = (rep, theta / sqrt(tau))`` where it is the plain gradient flow of
``L~(w) = L(rep, sqrt(tau) w_head)`` (exactly the preconditioned flow; SGD on ``w`` is SGD with a
head learning rate ``tau`` times the representation's). ``tau = 0`` freezes the head.

**Collapsed equilibrium** (:func:`equilibrium`): all ``z_i = c``; residual rows ``rho_i`` in
``null(J^T)`` with ``sum_i rho_i = 0`` make the state stationary in ``z`` and in the head, and the
targets are solved from the residual map (MSE, DINO:
:func:`ssl_geometry.geometry.collapsed_equilibrium`; the cosine: the same null space, also
orthogonal to ``u*``, then :func:`_cosine_targets`). With the MLP backbone collapsed by a zero last
layer every backbone gradient is a contraction of ``J^T rho_i``, so it is stationary too; the
gradient in every variable is checked (``Equilibrium.grad_norm``) and the certificate comes from
:func:`ssl_geometry.geometry.thm41_premises`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from ssl_geometry import backbones, geometry, heads, losses

OBJECTIVES = ("mse", "dino", "simsiam")


def objective(name: str, cfg):
    """``loss(U, targets) -> scalar`` of the named objective (targets are constants)."""
    if name == "mse":
        return lambda U, tg: losses.mse(U, tg["t"])
    if name == "dino":
        ts, tt = cfg.model.dino_student_temp, cfg.model.dino_teacher_temp
        return lambda U, tg: losses.dino(
            jnp.stack([U, U]), jnp.stack([tg["t"], tg["t"]]), tg["center"], student_temp=ts, teacher_temp=tt
        )[0]
    if name == "simsiam":
        return lambda U, tg: losses.negative_cosine(U, tg["t"])
    raise ValueError(f"`objective` must be one of {OBJECTIVES}; got {name!r}.")


def _cosine_targets(U: np.ndarray, rho: np.ndarray) -> np.ndarray:
    """Targets ``t_i`` with ``grad_{u_i} [-(1/n) sum cos(u_i, t_i)] = rho_i`` (``rho_i`` orthogonal to ``u_i``).

    ``t_i = u_i/|u_i| + w_i``, ``w_i = -rho_i/|rho_i| * c_i / sqrt(1 - c_i^2)``, ``c_i = n |u_i| |rho_i| < 1``.
    """
    n = U.shape[0]
    c = n * np.linalg.norm(U, axis=1) * np.linalg.norm(rho, axis=1)
    if np.max(c) >= 1:
        raise ValueError("cosine equilibrium: residual too large (n |u_i| |rho_i| must be < 1).")
    rn = np.linalg.norm(rho, axis=1, keepdims=True)
    w = -rho / np.where(rn > 0, rn, 1.0) * (c / np.sqrt(1 - c**2))[:, None]
    return U / np.linalg.norm(U, axis=1, keepdims=True) + w


class Problem(NamedTuple):
    """One (objective, head, representation) case; functions are closed over configuration only."""

    objective: str
    activation: str
    representation: str
    head: heads.Model
    backbone: object  # backbones.mlp Model or None (free representation)
    loss: callable  # loss(U, targets)

    def z_of(self, rep, x):
        """The representation ``z`` (n, d)."""
        if self.backbone is None:
            return rep
        return self.backbone.apply({"params": rep}, x)[0]

    def outputs(self, y, x):
        """``(z, U)`` at state ``y = {"rep", "head"}``."""
        z = self.z_of(y["rep"], x)
        return z, self.head.apply({"params": y["head"]}, z)[0]

    def loss_y(self, y, data):
        """``L(y)`` with ``data = {"x", "targets"}``."""
        return self.loss(self.outputs(y, data["x"])[1], data["targets"])

    def loss_w(self, w, batch, data):
        """``L~(w) = L(rep, sqrt(tau) w_head)`` (the flow/SGD coordinates; see :func:`to_y`); full batch, the
        dynamics' ``loss(params, batch, args)`` with ``batch=None``."""
        return self.loss_y(to_y(w, data), data)

    def loss_w_scaled(self, w, batch, data):
        """``data["scale"] * L~(w)``: SGD at lr ``scale`` as optax SGD at lr 1 (exact, also with momentum)."""
        return data["scale"] * self.loss_w(w, batch, data)

    def observe(self, w, t, data):
        """Monitors (scalars): ``spread_z``, the RMS of ``z - mean z`` (the collapse observable every claim reads),
        and ``dev``, the norm of the whole state's deviation ``|w - w_eq|`` (the linear regime's second check)."""
        z = self.z_of(to_y(w, data)["rep"], data["x"])
        zc = z - jnp.mean(z, axis=0)
        diff = jax.tree_util.tree_map(lambda a, b: jnp.sum((a - b) ** 2), w, data["w_eq"])
        return {"spread_z": jnp.sqrt(jnp.mean(zc**2)), "dev": jnp.sqrt(sum(jax.tree_util.tree_leaves(diff)))}


def to_y(w, data):
    """State ``y`` of flow coordinates ``w``: head ``sqrt(tau) w_head``, or ``data["head0"]`` when frozen."""
    if "head" not in w:
        return {"rep": w["rep"], "head": data["head0"]}
    return {"rep": w["rep"], "head": jax.tree_util.tree_map(lambda a: jnp.sqrt(data["tau"]) * a, w["head"])}


def to_w(y, tau):
    """Flow coordinates of ``y`` for head rate ``tau`` (``tau = 0``: the head is frozen, not a coordinate)."""
    if tau == 0:
        return {"rep": y["rep"]}
    return {"rep": y["rep"], "head": jax.tree_util.tree_map(lambda a: a / math.sqrt(tau), y["head"])}


def flow_data(eq_data, y, tau):
    """Data of the flow with head rate ``tau`` from the equilibrium ``y``: its flow coordinates ``w_eq`` (the
    deviation monitor's reference) and, with the head frozen (``tau = 0``), the head's parameters."""
    d = {**eq_data, "tau": jnp.asarray(float(tau), jnp.float64), "w_eq": to_w(y, tau)}
    if tau == 0:
        d["head0"] = y["head"]
    return d


def make_problem(cfg, objective_name: str, activation: str, representation: str) -> Problem:
    m, dt = cfg.model, jnp.float64
    head = heads.mlp(m.d, (m.head_hidden,), m.k, activation=activation, bias=False, dtype=dt)
    if representation == "free":
        bb = None
    elif representation == "mlp":
        bb = backbones.mlp(m.in_dim, (m.backbone_hidden,), m.d, activation=m.backbone_activation, dtype=dt)
    else:
        raise ValueError(f"`representation` must be 'free' or 'mlp'; got {representation!r}.")
    return Problem(objective_name, activation, representation, head, bb, objective(objective_name, cfg))


class Equilibrium(NamedTuple):
    """A certified collapsed state and its data."""

    y: dict
    data: dict
    null_dim: int
    rho_norm: float
    grad_norm: float  # max |dL/dy| over every variable (rep, head; backbone included)
    certified: bool  # residual != 0, stationary in z and in the head (thm41_premises)
    premises: object  # the Thm41Premises of the state (the one premises computation)


def collapsed_state(problem: Problem, cfg, key):
    """``(y, x, c)``: all ``z_i = c`` (free: ``z`` itself; mlp: last backbone layer ``W = 0``, bias ``c``)."""
    m = cfg.model
    kc, kh, kb, kx = jax.random.split(key, 4)
    c = jax.random.normal(kc, (m.d,), jnp.float64)
    c = m.z_scale * c / jnp.linalg.norm(c)
    theta = jax.tree_util.tree_map(lambda a: m.head_init_scale * a, problem.head.init(kh)["params"])
    x = jax.random.normal(kx, (m.n, m.in_dim), jnp.float64)
    if problem.backbone is None:
        rep = jnp.tile(c, (m.n, 1))
    else:
        phi = problem.backbone.init(kb)["params"]
        layers = list(phi["layers"])
        layers[-1] = {"w": jnp.zeros_like(layers[-1]["w"]), "b": c}
        rep = {**phi, "layers": layers}
    return {"rep": rep, "head": theta}, x, c


def _targets(problem: Problem, cfg, theta, c, key):
    """``(targets, null_dim)`` of a collapsed equilibrium at ``z_i = c`` with ``rho != 0``.

    MSE and DINO: :func:`ssl_geometry.geometry.collapsed_equilibrium` (``rho_i`` in ``null(J^T)``,
    ``sum_i rho_i = 0``). Cosine: the same construction with ``rho_i`` also orthogonal to ``u*``
    (:func:`~ssl_geometry.geometry.null_space_residuals` of ``[J, u*]``), targets from
    :func:`_cosine_targets`. With a collapsed backbone (``W_f = 0``) stationarity in ``z`` implies
    stationarity in the backbone parameters (every backbone gradient is a contraction of ``J^T rho_i``).
    """
    m = cfg.model
    variables = {"params": theta}
    if problem.objective in ("mse", "dino"):
        eq = geometry.collapsed_equilibrium(
            problem.head,
            variables,
            _B1_NAMES[problem.objective],
            c,
            m.n,
            key=key,
            residual_scale=m.residual_scale,
            student_temp=m.dino_student_temp,
            teacher_temp=m.dino_teacher_temp,
        )
        tg = {"t": eq.targets}
        if problem.objective == "dino":
            tg["center"] = jnp.zeros((m.k,), jnp.float64)
        return tg, eq.null_dim
    h = lambda zz: problem.head.apply(variables, zz)[0]
    u_star = np.asarray(h(c))
    J = np.asarray(jax.jacfwd(h)(c))
    R = np.asarray(geometry.null_space_residuals(np.column_stack([J, u_star]), m.n, key=key, scale=1.0))
    R = R * 0.5 * m.residual_scale / float(np.max(m.n * np.linalg.norm(u_star) * np.linalg.norm(R, axis=1)))
    U = np.tile(u_star, (m.n, 1))
    null_dim = J.shape[0] - np.linalg.matrix_rank(np.column_stack([J, u_star]))
    return {"t": jnp.asarray(_cosine_targets(U, R))}, int(null_dim)


_B1_NAMES = {"mse": "mse_target", "dino": "dino_fixed_teacher"}


def equilibrium(problem: Problem, cfg, key) -> Equilibrium:
    """Certified collapsed equilibrium with ``rho != 0`` (:func:`_targets`), checked on every variable."""
    y, x, c = collapsed_state(problem, cfg, key)
    targets, null_dim = _targets(problem, cfg, y["head"], c, jax.random.fold_in(key, 1))
    data = {"x": x, "targets": targets}
    z, U = problem.outputs(y, x)
    g = ravel_pytree(jax.grad(problem.loss_y)(y, data))[0]
    rho = jax.grad(lambda uu: problem.loss(uu, targets))(U)
    prem = geometry.thm41_premises(
        problem.head, {"params": y["head"]}, lambda uu: problem.loss(uu, targets), z, activation=problem.activation
    )
    return Equilibrium(
        y,
        data,
        null_dim,
        float(jnp.linalg.norm(rho)),
        float(jnp.max(jnp.abs(g))),
        bool(prem.residual_nonzero and prem.stationary_z and prem.stationary_head),
        prem,
    )


def perturb(problem: Problem, y, cfg, key):
    """``y`` with the representation's spread set to ``cfg.dynamics.perturbation * |c|`` (random)."""
    eps = cfg.dynamics.perturbation * cfg.model.z_scale
    if problem.backbone is None:
        d = jax.random.normal(key, y["rep"].shape, jnp.float64)
        return {**y, "rep": y["rep"] + eps * d / jnp.sqrt(jnp.mean(d**2))}
    layers = list(y["rep"]["layers"])
    w = jax.random.normal(key, layers[-1]["w"].shape, jnp.float64)
    layers[-1] = {**layers[-1], "w": eps * w / jnp.sqrt(jnp.mean(w**2) * layers[-1]["w"].shape[0])}
    return {**y, "rep": {**y["rep"], "layers": layers}}


def spread_observable(problem: Problem, w, data) -> np.ndarray:
    """Linear map (Jacobian) from the ravelled ``w`` to the centred representation ``z - mean z``."""
    flat, unravel = ravel_pytree(w)

    def spread(v):
        z = problem.z_of(unravel(v)["rep"], data["x"])
        return (z - jnp.mean(z, axis=0)).ravel()

    return np.asarray(jax.jit(jax.jacfwd(spread))(flat))
