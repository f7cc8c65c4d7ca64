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

**Collapsed equilibrium** (:func:`equilibrium`): all ``z_i = c``. With ``A = dvec(U)/d(z, theta,
phi)`` the state is stationary in every variable iff ``A^T rho = 0``. We draw ``rho`` in the null
space of ``[A^T; C_obj]`` (``C_obj``: the objective's own constraints on its residual: per-sample
zero sum for DINO, ``rho_i`` orthogonal to ``u_i`` for the cosine) and solve the residual map for
the targets that produce it. Where that null space is ``{0}`` stationarity forces ``rho = 0``
(reported as a finding, no run).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg
from jax.flatten_util import ravel_pytree

from ssl_geometry.instrument import metrics
from ssl_geometry.models import backbones, heads
from ssl_geometry.ssl import losses

OBJECTIVES = ("mse", "dino", "simsiam")


def objective(name: str, cfg):
    """``loss(U, targets) -> scalar`` of the named objective (targets are constants)."""
    if name == "mse":
        return lambda U, tg: losses.mse(U, tg["t"])
    if name == "dino":
        ts, tt = cfg.model.dino_student_temp, cfg.model.dino_teacher_temp
        return lambda U, tg: losses.dino(jnp.stack([U, U]), tg["t"][None], tg["center"],
                                         student_temp=ts, teacher_temp=tt)[0]
    if name == "simsiam":
        return lambda U, tg: losses.negative_cosine(U, tg["t"])
    raise ValueError(f"`objective` must be one of {OBJECTIVES}; got {name!r}.")


def _residual_constraints(name: str, U: np.ndarray) -> np.ndarray:
    """Rows ``C`` with ``C vec(rho) = 0`` that the objective's residual always satisfies."""
    n, k = U.shape
    if name == "mse":
        return np.zeros((0, n * k))
    C = np.zeros((n, n * k))
    for i in range(n):
        C[i, i * k:(i + 1) * k] = 1.0 if name == "dino" else U[i] / np.linalg.norm(U[i])
    return C


def _targets(name: str, U: np.ndarray, rho: np.ndarray, cfg) -> dict:
    """Targets whose residual at ``U`` is ``rho`` (inverse of the residual map; see module docstring)."""
    n, k = U.shape
    if name == "mse":
        return {"t": U - 0.5 * n * rho}
    if name == "dino":
        ts, tt = cfg.model.dino_student_temp, cfg.model.dino_teacher_temp
        q = np.asarray(jax.nn.softmax(U / ts, axis=-1))
        P = q - n * ts * rho
        if np.min(P) <= 0:
            raise ValueError("DINO equilibrium: residual too large for positive teacher probabilities.")
        center = np.zeros(k)
        return {"t": center + tt * np.log(P), "center": center}
    c = n * np.linalg.norm(U, axis=1) * np.linalg.norm(rho, axis=1)
    if np.max(c) >= 1:
        raise ValueError("cosine equilibrium: residual too large (n |u_i| |rho_i| must be < 1).")
    rn = np.linalg.norm(rho, axis=1, keepdims=True)
    w = -rho / np.where(rn > 0, rn, 1.0) * (c / np.sqrt(1 - c ** 2))[:, None]
    return {"t": U / np.linalg.norm(U, axis=1, keepdims=True) + w}


def _max_residual_scale(name: str, U: np.ndarray, rho_dir: np.ndarray, cfg) -> float:
    """Largest ``s`` for which ``s * rho_dir`` is a valid residual (half the limit, for margin)."""
    n = U.shape[0]
    if name == "dino":
        q = np.asarray(jax.nn.softmax(U / cfg.model.dino_student_temp, axis=-1))
        return 0.5 * float(np.min(q / np.maximum(n * cfg.model.dino_student_temp * np.abs(rho_dir), 1e-300)))
    if name == "simsiam":
        c = n * np.linalg.norm(U, axis=1) * np.linalg.norm(rho_dir, axis=1)
        return 0.5 / float(np.max(c))
    return math.inf


class Problem(NamedTuple):
    """One (objective, head, representation) case; functions are closed over configuration only."""

    objective: str
    activation: str
    representation: str
    head: heads.Model
    backbone: object          # backbones.mlp Model or None (free representation)
    loss: callable            # loss(U, targets)

    def z_of(self, rep, x):
        """The representation ``z`` (n, d)."""
        if self.backbone is None:
            return rep
        return self.backbone.apply({"params": rep}, x)[0]

    def outputs(self, y, x):
        """``(z, U)`` at state ``y = {"rep", "head"}``."""
        z = self.z_of(y["rep"], x)
        return z, self.head.apply({"params": y["head"]}, z, train=True)[0]

    def loss_y(self, y, data):
        """``L(y)`` with ``data = {"x", "targets"}``."""
        return self.loss(self.outputs(y, data["x"])[1], data["targets"])

    def loss_w(self, w, data):
        """``L~(w) = L(rep, sqrt(tau) w_head)`` (the flow/SGD coordinates; see :func:`to_y`)."""
        return self.loss_y(to_y(w, data), data)

    def loss_w_scaled(self, w, data):
        """``data["scale"] * L~(w)``: SGD at lr ``scale`` as optax SGD at lr 1 (exact, also with momentum)."""
        return data["scale"] * self.loss_w(w, data)

    def observe(self, w, t, data):
        """Collapse monitors (scalars): normalised std of ``z`` and of head outputs, RMS spread of ``z``."""
        z, U = self.outputs(to_y(w, data), data["x"])
        zc = z - jnp.mean(z, axis=0)
        return {"std_z": metrics.normalized_std(z), "std_u": metrics.normalized_std(U),
                "spread_z": jnp.sqrt(jnp.mean(zc ** 2))}


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
    """Data of the flow with head rate ``tau`` (the frozen head's parameters travel as data)."""
    d = {**eq_data, "tau": jnp.asarray(float(tau), jnp.float64)}
    if tau == 0:
        d["head0"] = y["head"]
    return d


def make_problem(cfg, objective_name: str, activation: str, representation: str) -> Problem:
    m, dt = cfg.model, jnp.float64
    head = heads.mlp(m.d, (m.head_hidden,), m.k, activation=activation, bias=False,
                     batch_norm=bool(m.batch_norm), dtype=dt)
    if representation == "free":
        bb = None
    elif representation == "mlp":
        bb = backbones.mlp(m.in_dim, (m.backbone_hidden,), m.d, activation=m.backbone_activation, dtype=dt)
    else:
        raise ValueError(f"`representation` must be 'free' or 'mlp'; got {representation!r}.")
    return Problem(objective_name, activation, representation, head, bb, objective(objective_name, cfg))


class Equilibrium(NamedTuple):
    """A certified collapsed state and its data (``None`` fields when no rho != 0 is stationary)."""

    y: dict | None
    data: dict | None
    null_dim: int
    rho_norm: float
    grad_norm: float          # |grad_y L| at the state (0 up to rounding when certified)


def collapsed_state(problem: Problem, cfg, key):
    """``(y, x)``: all ``z_i = c`` (free: ``z`` itself; mlp: last backbone layer ``W = 0``, bias ``c``)."""
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
    return {"rep": rep, "head": theta}, x


def equilibrium(problem: Problem, cfg, key) -> Equilibrium:
    """Certified collapsed equilibrium with ``rho != 0`` (module docstring), or the finding that none exists."""
    y, x = collapsed_state(problem, cfg, key)
    z, U = problem.outputs(y, x)
    U = np.asarray(U)
    flat, unravel = ravel_pytree({"z": z, "y": y})

    def u_of(v):
        s = unravel(v)
        zz = s["z"] if problem.backbone is None else problem.z_of(s["y"]["rep"], x)
        if problem.backbone is not None:
            zz = zz + (s["z"] - jax.lax.stop_gradient(s["z"]))  # z rows: dU/dz at z
        return problem.head.apply({"params": s["y"]["head"]}, zz, train=True)[0].ravel()

    A = np.asarray(jax.jit(jax.jacfwd(u_of))(flat))
    N = scipy.linalg.null_space(np.vstack([A.T, _residual_constraints(problem.objective, U)]))
    if N.shape[1] == 0:
        return Equilibrium(None, None, 0, 0.0, float("nan"))
    a = np.asarray(jax.random.normal(jax.random.fold_in(key, 1), (N.shape[1],), jnp.float64))
    rho = (N @ a).reshape(U.shape)
    rho = rho / np.linalg.norm(rho) * cfg.model.residual_norm
    rho = rho * min(1.0, _max_residual_scale(problem.objective, U, rho, cfg))
    targets = jax.tree_util.tree_map(jnp.asarray, _targets(problem.objective, U, rho, cfg))
    data = {"x": x, "targets": targets}
    g = jax.grad(problem.loss_y)(y, data)
    rho_chk = np.asarray(jax.grad(lambda uu: problem.loss(uu, targets))(jnp.asarray(U)))
    return Equilibrium(y, data, int(N.shape[1]), float(np.linalg.norm(rho_chk)),
                       float(ravel_pytree(g)[0].__abs__().max()))


def perturb(problem: Problem, y, cfg, key):
    """``y`` with the representation's spread set to ``cfg.dynamics.perturbation * |c|`` (random)."""
    eps = cfg.dynamics.perturbation * cfg.model.z_scale
    if problem.backbone is None:
        d = jax.random.normal(key, y["rep"].shape, jnp.float64)
        return {**y, "rep": y["rep"] + eps * d / jnp.sqrt(jnp.mean(d ** 2))}
    layers = list(y["rep"]["layers"])
    w = jax.random.normal(key, layers[-1]["w"].shape, jnp.float64)
    layers[-1] = {**layers[-1], "w": eps * w / jnp.sqrt(jnp.mean(w ** 2) * layers[-1]["w"].shape[0])}
    return {**y, "rep": {**y["rep"], "layers": layers}}


def spread_observable(problem: Problem, w, data) -> np.ndarray:
    """Linear map (Jacobian) from the ravelled ``w`` to the centred representation ``z - mean z``."""
    flat, unravel = ravel_pytree(w)

    def spread(v):
        z = problem.z_of(unravel(v)["rep"], data["x"])
        return (z - jnp.mean(z, axis=0)).ravel()

    return np.asarray(jax.jit(jax.jacfwd(spread))(flat))
