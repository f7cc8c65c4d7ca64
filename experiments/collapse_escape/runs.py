"""Experiment 4's runs: the linearised predictions, the flows of the timescale sweep and SGD, per state.

One certified equilibrium and one perturbation ``y0`` per state (:func:`run_state`); from it

* a gradient flow at every head rate ``tau`` of ``dynamics.head_rates`` (``tau = 0``: the head frozen,
  the regime of ``H_eff``; registry claims ``thm4.1-frozen-head-flow``, ``flow-linear-relu-no-escape``,
  ``flow-smooth-escape``);
* SGD with momentum at each lr of ``dynamics.lrs`` and head rate ``dynamics.sgd_head_rate``
  (``finite-step-escape``).

Horizons (the rules of experiments/claims/): with the head frozen ``T0 = horizon_decades ln 10 /
|lambda_min(H_eff)|``; a flow whose linearised rate ``r`` (leading eigenvalue of the field's
Jacobian among the modes the spread sees) is positive runs to ``horizon_margin ln(escape_growth) / r``,
any other to ``T0``; every horizon is capped at ``horizon_max``. SGD runs the horizon of the flow at
its head rate in flow time: step ``k`` sits at ``t = k lr / (1 - momentum)``.

Every run reports its growth ``G = spread(T) / spread(0)`` (``spread``: RMS of ``z - mean z``), its
outcome (:func:`outcome`) and its measured rate against the linearised system's own rate over the
same window (:func:`fit_rate`, :func:`fit_on`; ``linearised-rate-prediction``).
"""
from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

from experiments import claims
from experiments.collapse_escape import problem as P
from ssl_geometry import dynamics, geometry

#: The registry claims whose thresholds fix the horizons and the outcomes.
FROZEN, NO_ESCAPE = "thm4.1-frozen-head-flow", "flow-linear-relu-no-escape"
OUTCOMES = ("escaped", "stayed", "grew", "diverged", "censored")

_SGD = {}


def _optimizer(momentum: float):
    """One optax SGD object per momentum (lr enters as a loss scale: exact for SGD + momentum)."""
    if momentum not in _SGD:
        _SGD[momentum] = optax.sgd(1.0, momentum=momentum or None)
    return _SGD[momentum]


def threshold(claim_id: str, name: str) -> float:
    return float(claims.CLAIMS[claim_id].thresholds[name])


def fit_rate(ts, s, s0, linear_factor, dev=None, stop=float("inf"), min_points=3):
    """``(slope, t_a, t_b, points)``: least-squares slope of ``log s`` against ``t`` in the linear regime.

    The regime is the leading stretch of save times ``t < stop`` (the divergence time, if any) with
    ``s <= linear_factor * s0`` and, when ``dev`` is given, ``dev <= linear_factor * dev[0]`` (the whole
    state's deviation); its second half is fitted (the leading mode has outgrown the others by then). NaN
    with fewer than ``min_points`` points there.
    """
    ts, s = np.asarray(ts, float), np.asarray(s, float)
    good = np.isfinite(s) & (s > 0) & (s <= linear_factor * s0) & (ts < stop)
    if dev is not None:
        dev = np.asarray(dev, float)
        good &= np.isfinite(dev) & (dev <= linear_factor * dev[0])
    end = int(np.argmin(good)) if not good.all() else len(good)
    idx = np.arange(end)[end // 2:]
    if idx.size < min_points:
        return float("nan"), float("nan"), float("nan"), int(idx.size)
    slope = np.polyfit(ts[idx], np.log(s[idx]), 1)[0]
    return float(slope), float(ts[idx[0]]), float(ts[idx[-1]]), int(idx.size)


def fit_on(ts, s, window):
    """Slope of ``log s`` against ``t`` over the time window ``[t_a, t_b]`` (NaN if it holds fewer than 2 points)."""
    ts, s = np.asarray(ts, float), np.asarray(s, float)
    sel = (ts >= window[0]) & (ts <= window[1]) & np.isfinite(s) & (s > 0)
    if sel.sum() < 2:
        return float("nan")
    return float(np.polyfit(ts[sel], np.log(s[sel]), 1)[0])


def frozen_horizon(lambda_min_h_eff: float) -> float:
    """``T0 = horizon_decades ln 10 / |lambda_min(H_eff)|``, capped at ``horizon_max`` (thm4.1-frozen-head-flow)."""
    cap = threshold(FROZEN, "horizon_max")
    lam = abs(lambda_min_h_eff)
    return cap if lam == 0 else float(min(cap, threshold(FROZEN, "horizon_decades") * math.log(10.0) / lam))


def flow_horizon(rate: float, t0: float) -> float:
    """``horizon_margin ln(escape_growth) / rate`` for a positive linearised rate, else ``t0``; capped."""
    cap = threshold(NO_ESCAPE, "horizon_max")
    if not rate > 0:
        return float(min(cap, t0))
    return float(min(cap, threshold(NO_ESCAPE, "horizon_margin") * math.log(threshold(NO_ESCAPE, "escape_growth"))
                     / rate))


def outcome(growth: float, status: str) -> str:
    """``diverged`` (non-finite), ``censored`` (stopped before its horizon), else by the growth ``G``:
    ``escaped`` (``G >= escape_growth``), ``stayed`` (``G <= no_growth``), ``grew`` (in between)."""
    if status == "non_finite":
        return "diverged"
    if status != "successful":
        return "censored"
    if growth >= threshold(NO_ESCAPE, "escape_growth"):
        return "escaped"
    return "stayed" if growth <= threshold(FROZEN, "no_growth") else "grew"


def predictions(problem, eq, tau):
    """``(lin, O, w_eq, data)``: the linearised field at the equilibrium in ``w`` coordinates (head rate ``tau``)."""
    data = P.flow_data(eq.data, eq.y, tau)
    w = P.to_w(eq.y, tau)
    lin = dynamics.linearise(dynamics.gradient_field(problem.loss_w), w, data)
    return lin, P.spread_observable(problem, w, data), w, data


def flow_solver(cfg, lin, activation: str, T: float):
    """``(solver, dt0)`` for one flow: ``dynamics.solver``, or for ``"auto"``:

    * ReLU heads: fixed-step classical RK4 with ``dt = rk4_safety / max|lambda(J)|`` -- the field
      is discontinuous where a pre-activation crosses 0 (ReLU' jumps), and adaptive controllers
      grind to a halt there; RK4 steps through a kink with a local error -- unless that needs more
      than ``rk4_max_steps`` steps (a stiff ReLU flow): then as below;
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
    return dynamics.gradient_flow(loss, w0, t1=T, save_at=ts, observe=obs, args=data,
                                  solver=solver, rtol=dcfg.rtol, atol=dcfg.atol, max_steps=max_steps, dt0=dt0,
                                  throw=False)


def run_sgd(loss_scaled, w0, data, lr, T, cfg, obs):
    mom = cfg.dynamics.momentum
    lr_eff = lr / (1.0 - mom)
    steps = max(1, int(round(T / lr_eff)))
    return dynamics.discrete(loss_scaled, w0, _optimizer(mom), steps=steps, observe=obs, observe_every=1,
                             args={**data, "scale": jnp.asarray(lr, jnp.float64)}, lr=lr_eff, throw=False)


def _spread_rms(O, deltas):
    """RMS of the centred representation of linearised deviations (``inf`` where they overflowed)."""
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.linalg.norm(deltas @ O.T, axis=1) / math.sqrt(O.shape[0])
    return np.where(np.isfinite(out), out, np.inf)


def summarise(tr, predicted_spread, stop, status):
    """Growth, outcome and measured against predicted rate of one trajectory (module docstring).

    ``measured_rate``/``predicted_rate_window``: in the linear regime of :func:`fit_rate` (spread and the
    whole state's deviation, before ``stop``), the measured slope and the linearised system's slope
    ``predicted_spread`` (same ``ts``, same start) over the same window. ``frozen_rate`` and
    ``frozen_predicted_rate``: the slopes the frozen-head rule reads (the window from the spread only),
    measured and of the linearised system.
    """
    lf = threshold(FROZEN, "linear_factor")
    spread = np.asarray(tr.observed["spread_z"], float)
    dev = np.asarray(tr.observed["dev"], float)
    last = np.nonzero(tr.saved & np.isfinite(spread))[0][-1]
    rate, t_a, t_b, points = fit_rate(tr.ts, spread, spread[0], lf, dev=dev, stop=stop)
    frozen, f_a, f_b, _ = fit_rate(tr.ts, spread, spread[0], lf)
    growth = float(spread[last] / spread[0])
    return {"ok": bool(tr.ok), "status": status, "t_final": float(tr.t_final), "n_steps": int(tr.n_steps),
            "spread_0": float(spread[0]), "spread_T": float(spread[last]), "growth": growth,
            "outcome": outcome(growth, status), "measured_rate": rate,
            "predicted_rate_window": fit_on(tr.ts, predicted_spread, (t_a, t_b)), "fit_window": [t_a, t_b],
            "fit_points": points, "frozen_rate": frozen, "frozen_window": [f_a, f_b],
            "frozen_predicted_rate": fit_on(tr.ts, predicted_spread, (f_a, f_b))}


def _delta(w, w_eq):
    return np.asarray(ravel_pytree(w)[0] - ravel_pytree(w_eq)[0])


def _flow_row(problem, cfg, y0, tau, t0, base):
    lin, O, w_eq, data = predictions(problem, base["eq"], tau)
    r = dynamics.visible_rate(lin, O)
    T = t0 if tau == 0 else flow_horizon(r, t0)
    solver, dt0 = flow_solver(cfg, lin, problem.activation, T)
    w0 = P.to_w(y0, tau)
    tr = run_flow(problem.loss_w, w0, data, T, cfg, problem.observe, solver, dt0)
    pred = _spread_rms(O, dynamics.predict_flow(lin.jacobian, _delta(w0, w_eq), tr.ts))
    status = "successful" if tr.ok else tr.status
    row = {**base["info"], "dynamics": "flow", "tau": float(tau), "lr": 0.0, "horizon": T, "predicted_rate": r,
           "leading_rate": lin.rate, "stiffness": lin.stiffness, "field_norm_eq": lin.field_norm,
           "solver": solver if dt0 is None else f"{solver} dt={dt0:.3g}",
           **summarise(tr, pred, tr.t_final if not tr.ok else float("inf"), status)}
    return row, tr, (lin, O, w_eq, data)


def _sgd_row(problem, cfg, y0, lr, T, lin_pack, base):
    lin, O, w_eq, data = lin_pack
    mom = cfg.dynamics.momentum
    lr_eff = lr / (1.0 - mom)
    w0 = P.to_w(y0, cfg.dynamics.sgd_head_rate)
    tr = run_sgd(problem.loss_w_scaled, w0, data, lr, T, cfg, problem.observe)
    with np.errstate(over="ignore", invalid="ignore"):  # an unstable map overflows: read as inf
        path = dynamics.predict_sgd(lin.jacobian, _delta(w0, w_eq), lr, mom, len(tr.ts) - 1)
    growth = dynamics.sgd_growth(lin.jacobian, lr, mom, observable=O)
    t_div = float(tr.first_bad_step) * lr_eff if tr.first_bad_step is not None else float("inf")
    status = "successful" if tr.ok else "non_finite"  # fit stops only on a non-finite step
    row = {**base["info"], "dynamics": "sgd", "tau": float(cfg.dynamics.sgd_head_rate), "lr": float(lr),
           "lr_eff": lr_eff, "horizon": T, "predicted_rate": math.log(max(growth, 1e-300)) / lr_eff,
           "predicted_growth_per_step": growth, "t_diverged": t_div if np.isfinite(t_div) else float("nan"),
           **summarise(tr, _spread_rms(O, path), t_div, status)}
    row["t_final"] = float(len(tr.ts) - 1) * lr_eff  # on the clock to T; a diverged run is frozen from then on
    return row, tr


def run_state(problem, eq, cfg, y0, info, lambda_min_h_eff):
    """Every run from one perturbed equilibrium: ``(rows, curves)`` (module docstring)."""
    base = {"eq": eq, "info": info}
    t0 = frozen_horizon(lambda_min_h_eff)
    rows, curves, packs = [], [], {}
    for tau in cfg.dynamics.head_rates:
        row, tr, pack = _flow_row(problem, cfg, y0, float(tau), t0, base)
        packs[float(tau)] = (pack, row["horizon"])
        rows.append(row)
        curves.append(_curve(row, tr))
    tau_sgd = float(cfg.dynamics.sgd_head_rate)
    if tau_sgd not in packs:
        raise ValueError(f"`dynamics.sgd_head_rate` {tau_sgd} must be one of `dynamics.head_rates` (SGD runs that "
                         "flow's horizon).")
    pack, T = packs[tau_sgd]
    for lr in cfg.dynamics.lrs:
        row, tr = _sgd_row(problem, cfg, y0, float(lr), T, pack, base)
        rows.append(row)
        curves.append(_curve(row, tr))
    return rows, curves


def _curve(row, tr, max_points=300):
    """A thinned copy of a trajectory's spread for the figures."""
    ts = np.asarray(tr.ts)
    keep = np.unique(np.linspace(0, len(ts) - 1, min(len(ts), max_points)).round().astype(int))
    meta = {k: row[k] for k in ("objective", "activation", "representation", "seed", "dynamics", "tau", "lr",
                                "predicted_rate", "measured_rate", "fit_window")}
    return {**meta, "t": ts[keep].tolist(), "spread_z": np.asarray(tr.observed["spread_z"])[keep].tolist()}
