"""Experiment 4's runs: predicted rates at the equilibrium, gradient flow and SGD from a perturbation.

Bookkeeping: each case has one horizon ``T`` chosen from the predicted rates,
``T = margin * log(threshold / s0) / max(r_min, rate_floor)`` (``r_min`` the smallest predicted
escape rate among its dynamics; ``s0`` the initial spread), capped at ``horizon_max`` -- so a
run that grows at its predicted rate crosses the threshold and one that does not grow is
watched long enough for any rate above ``rate_floor`` to cross it. The flow is integrated to
exactly ``T``; SGD runs ``round(T / lr_eff)`` steps (``lr_eff = lr / (1 - momentum)``, one
step per ``lr_eff`` of flow time), so ``t_final`` is within half a step of ``T``. A flow that
crosses the threshold before it fails counts as escaped at that time; one that fails first is
``censored`` at the time it reached.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

from experiments.collapse_escape import problem as P
from ssl_geometry import dynamics, geometry

_SGD = {}


def _optimizer(momentum: float):
    """One optax SGD object per momentum (lr enters as a loss scale: exact for SGD + momentum)."""
    if momentum not in _SGD:
        _SGD[momentum] = optax.sgd(1.0, momentum=momentum or None)
    return _SGD[momentum]


def fit_rate(ts, s, s0, linear_factor, min_points=3):
    """Slope of ``log s`` against ``t`` in the linear regime; ``(slope, t_start, t_end)``.

    The linear regime is the leading run of recorded points with ``s <= linear_factor * s0``;
    its second half is fitted (the leading mode has then outgrown the others). NaN if fewer than
    ``min_points`` points.
    """
    ts, s = np.asarray(ts, float), np.asarray(s, float)
    good = np.isfinite(s) & (s > 0) & (s <= linear_factor * s0)
    stop = int(np.argmin(good)) if not good.all() else len(good)
    idx = np.arange(stop)[stop // 2:]
    if idx.size < min_points:
        idx = np.arange(stop)[max(0, stop - min_points):]
    if idx.size < min_points:
        return float("nan"), float("nan"), float("nan")
    slope = np.polyfit(ts[idx], np.log(s[idx]), 1)[0]
    return float(slope), float(ts[idx[0]]), float(ts[idx[-1]])


def predictions(problem, eq, tau):
    """``(lin, O, w, data)``: the linearised field at the equilibrium in ``w`` coordinates (head rate ``tau``)."""
    data = P.flow_data(eq.data, eq.y, tau)
    w = P.to_w(eq.y, tau)
    lin = dynamics.linearise(dynamics.gradient_field(problem.loss_w), w, data)
    return lin, P.spread_observable(problem, w, data), w, data


def flow_solver(cfg, lin, activation: str, T: float):
    """``(solver, dt0)`` for one flow: ``dynamics.solver``, or for ``"auto"``:

    * ReLU heads: fixed-step classical RK4 with ``dt = rk4_safety / max|lambda(J)|`` -- the field
      is discontinuous where a pre-activation crosses 0 (ReLU' jumps), and adaptive controllers
      grind to a halt there (thousands of rejected steps); RK4 steps through a kink with a local
      error, and ``|lambda dt| <= rk4_safety`` keeps it stable and accurate on the linear regime --
      unless that needs more than ``rk4_max_steps`` steps (a stiff ReLU flow): then as below;
    * stiffness ratio ``max|Re lambda| / rate > stiff_ratio``: Kvaerno5 (implicit);
    * otherwise Tsit5 (adaptive).
    """
    d = cfg.dynamics
    if d.solver != "auto":
        return d.solver, None
    if geometry.head_smoothness(activation) == "piecewise":
        dt = float(d.rk4_safety / max(np.max(np.abs(lin.eigenvalues)), 1e-12))
        if T / dt <= d.rk4_max_steps:
            return "rk4", dt
    return ("kvaerno5" if lin.stiffness > d.stiff_ratio else "tsit5"), None


def run_flow(loss, w0, data, T, cfg, obs, solver, dt0=None):
    dcfg = cfg.dynamics
    ts = np.linspace(0.0, T, dcfg.num_saves + 1)
    max_steps = dcfg.max_steps if dt0 is None else max(dcfg.max_steps, int(T / dt0) + len(ts) + 2)
    return dynamics.gradient_flow(loss, w0, t1=T, save_at=ts, observe=obs, observe_args=True, args=data,
                                  solver=solver, rtol=dcfg.rtol, atol=dcfg.atol, max_steps=max_steps, dt0=dt0,
                                  throw=False)


def run_sgd(loss_scaled, w0, data, lr, T, cfg, obs):
    mom = cfg.dynamics.momentum
    lr_eff = lr / (1.0 - mom)
    steps = max(1, int(round(T / lr_eff)))
    return dynamics.discrete(loss_scaled, w0, _optimizer(mom), steps=steps, observe=obs, observe_every=1,
                             args={**data, "scale": jnp.asarray(lr, jnp.float64)}, lr=lr_eff,
                             observe_args=True, throw=False)


def fit_on(ts, s, window):
    """Slope of ``log s`` against ``t`` over the time window ``[t_a, t_b]`` (NaN if it is empty)."""
    ts, s = np.asarray(ts, float), np.asarray(s, float)
    sel = (ts >= window[0]) & (ts <= window[1]) & np.isfinite(s) & (s > 0)
    if sel.sum() < 2:
        return float("nan")
    return float(np.polyfit(ts[sel], np.log(s[sel]), 1)[0])


def summarise(tr, threshold, cfg, horizon, predicted_spread):
    """Escape, censoring and measured against predicted rate of one trajectory.

    Escape: the normalised std of ``z`` (the paper's monitor) crosses ``threshold``; the same
    monitor on head outputs is reported (``held_initially_u``: already above at ``t = 0``, the
    BatchNorm artefact; it never counts). Rates: slope of ``log spread(z)`` (RMS of
    ``z - mean z``, the linear observable) in the linear regime (:func:`fit_rate`), against the
    slope of the linearised system's own spread ``predicted_spread`` (same ``ts``) over the same
    window -- so transients of the non-leading modes enter both sides alike.
    """
    std_z = np.asarray(tr.observed["std_z"], float)
    std_u = np.asarray(tr.observed["std_u"], float)
    spread = np.asarray(tr.observed["spread_z"], float)
    esc = dynamics.escape_time(tr, "std_threshold", threshold=threshold, key="std_z")
    esc_u = dynamics.escape_time(tr, "std_threshold", threshold=threshold, key="std_u")
    rate, t_a, t_b = fit_rate(tr.ts, spread, spread[0], cfg.dynamics.linear_factor)
    pred_window = fit_on(tr.ts, predicted_spread, (t_a, t_b))
    last = np.nonzero(tr.saved)[0][-1]
    return {
        "ok": bool(tr.ok), "status": tr.status, "t_final": float(tr.t_final), "horizon": float(horizon),
        "n_steps": int(tr.n_steps), "escaped": bool(esc.escaped),
        "escape_time": esc.time if esc.escaped else float("nan"),
        "censored": bool((not tr.ok) and not esc.escaped),
        "escaped_u": bool(esc_u.escaped and not esc_u.held_initially), "held_initially_u": bool(esc_u.held_initially),
        "std_z_init": float(std_z[0]), "std_z_final": float(std_z[last]),
        "std_u_init": float(std_u[0]), "std_u_final": float(std_u[last]),
        "measured_rate": rate, "predicted_rate_window": pred_window, "fit_window": [t_a, t_b],
        "threshold": threshold,
    }


def _spread_rms(O, deltas):
    """RMS of the centred representation of linearised deviations (``inf`` where they overflowed)."""
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.linalg.norm(deltas @ O.T, axis=1) / math.sqrt(O.shape[0])
    return np.where(np.isfinite(out), out, np.inf)


def case_horizon(cfg, threshold, s0, rates):
    """``T`` from the predicted rates (module docstring); ``dynamics.horizon > 0`` fixes it instead.

    ``T = margin * log(threshold / s0) / max(min(rates), rate_floor)``, capped at ``horizon_max``:
    long enough for the slowest of the case's dynamics to cross the threshold at its predicted rate,
    and for any rate above ``rate_floor`` when one is predicted not to grow.
    """
    d = cfg.dynamics
    if d.horizon > 0:
        return float(d.horizon)
    r = max(min(rates), d.rate_floor)
    return float(min(d.horizon_max, d.horizon_margin * math.log(threshold / s0) / r))


def run_case(problem, eq, cfg, key):
    """Every dynamics of one certified equilibrium: ``(rows, curves)``.

    ``flow`` (head rate ``tau = dynamics.head_rate``), ``flow_frozen_head`` (``tau = 0``: the
    regime in which ``H_eff`` alone is the linearisation in ``z``) and SGD with momentum at each lr.
    """
    dcfg = cfg.dynamics
    obs = problem.observe
    threshold = dcfg.escape_fraction / math.sqrt(cfg.model.d)
    y0 = P.perturb(problem, eq.y, cfg, key)
    tau = float(dcfg.head_rate)
    lin, O, w_eq, data = predictions(problem, eq, tau)
    s0 = float(jax.device_get(obs(P.to_w(y0, tau), 0.0, data)["std_z"]))
    r_flow = dynamics.visible_rate(lin, O)
    growth = {lr: dynamics.sgd_growth(lin.jacobian, lr, dcfg.momentum, observable=O) for lr in dcfg.lrs}
    lr_eff = {lr: lr / (1.0 - dcfg.momentum) for lr in dcfg.lrs}
    r_sgd = {lr: math.log(max(g, 1e-300)) / lr_eff[lr] for lr, g in growth.items()}
    T = case_horizon(cfg, threshold, s0, [r_flow, *r_sgd.values()])
    base = {"objective": problem.objective, "activation": problem.activation,
            "representation": problem.representation,
            "null_dim": eq.null_dim, "rho_norm": eq.rho_norm, "grad_norm_eq": eq.grad_norm}
    rows, curves = [], []
    flows = [("flow", tau, lin, O, data, w_eq)]
    if dcfg.frozen_head:
        lin0, O0, w_eq0, data0 = predictions(problem, eq, 0.0)
        flows.append(("flow_frozen_head", 0.0, lin0, O0, data0, w_eq0))
    for label, t_, lin_, O_, data_, weq_ in flows:
        solver, dt0 = flow_solver(cfg, lin_, problem.activation, T)
        w0 = P.to_w(y0, t_)
        tr = run_flow(problem.loss_w, w0, data_, T, cfg, obs, solver, dt0)
        pred = _spread_rms(O_, dynamics.predict_flow(lin_.jacobian, _delta(w0, weq_), tr.ts))
        row = {**base, "dynamics": label, "lr": 0.0, "head_rate": t_, "predicted_rate": dynamics.visible_rate(lin_, O_),
               "leading_rate": lin_.rate, "stiffness": lin_.stiffness,
               "solver": solver if dt0 is None else f"{solver} dt={dt0:.3g}",
               "jacobian_asymmetry": lin_.asymmetry,
               "field_norm_eq": lin_.field_norm, **summarise(tr, threshold, cfg, T, pred)}
        rows.append(row)
        curves.append(_curve(row, tr))
    for lr in dcfg.lrs:
        w0 = P.to_w(y0, tau)
        tr = run_sgd(problem.loss_w_scaled, w0, data, lr, T, cfg, obs)
        with np.errstate(over="ignore", invalid="ignore"):  # an unstable map overflows: read as inf
            path = dynamics.predict_sgd(lin.jacobian, _delta(w0, w_eq), lr, dcfg.momentum, len(tr.ts) - 1)
        pred = _spread_rms(O, path)
        row = {**base, "dynamics": "sgd", "lr": float(lr), "head_rate": tau, "predicted_rate": r_sgd[lr],
               "predicted_growth": growth[lr], "leading_rate": lin.rate, "lr_eff": lr_eff[lr],
               **summarise(tr, threshold, cfg, T, pred)}
        # fit runs every step; from a non-finite step on the state is frozen: the run is on the clock to T,
        # and the divergence is reported with its time
        row["t_diverged"] = row["t_final"] if not tr.ok else float("nan")
        row["t_final"] = float(len(tr.ts) - 1) * lr_eff[lr]
        m = row["measured_rate"]
        row["predicted_growth_window"] = math.exp(row["predicted_rate_window"] * lr_eff[lr]) \
            if np.isfinite(row["predicted_rate_window"]) else float("nan")
        row["measured_growth"] = math.exp(m * lr_eff[lr]) if np.isfinite(m) else float("nan")
        rows.append(row)
        curves.append(_curve(row, tr))
    return rows, curves


def _delta(w, w_eq):
    return np.asarray(ravel_pytree(w)[0] - ravel_pytree(w_eq)[0])


def _curve(row, tr, max_points=400):
    """A thinned copy of a trajectory's monitors for the figures."""
    ts = np.asarray(tr.ts)
    keep = np.unique(np.linspace(0, len(ts) - 1, min(len(ts), max_points)).round().astype(int))
    meta = {k: row[k] for k in ("objective", "activation", "representation", "dynamics", "lr",
                                "predicted_rate", "predicted_rate_window", "measured_rate", "fit_window",
                                "threshold")}
    return {**meta, "t": ts[keep].tolist(), "std_z": np.asarray(tr.observed["std_z"])[keep].tolist(),
            "std_u": np.asarray(tr.observed["std_u"])[keep].tolist()}
