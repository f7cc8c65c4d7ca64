"""Experiment 4's runs: the linearised predictions, the flows of the timescale sweep and SGD, per state.

One certified equilibrium and one perturbation ``y0`` per state (:func:`.state.run_state`, which assembles each
run's row from the pieces here); from it

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
outcome (:func:`outcome`), the frozen-head rule's slopes (:func:`fit_rate`, :func:`fit_on`) and, for
``linearised-rate-prediction``, its measured rate over its rate window against the claim's rate ``r``
(``predicted_rate``: :func:`ssl_geometry.dynamics.visible_rate` for a flow, ``ln`` of
:func:`ssl_geometry.dynamics.sgd_growth` per unit flow time for SGD). The window comes from the
linearised solution from the run's own start (:func:`linear_modes`): it opens once the non-leading
modes have fallen to ``dominance`` times the leading ones and closes when the run leaves the linear
regime (:func:`rate_window`); a run whose horizon ends before its window is continued, for the rate
alone, as far as the linearised solution says the window reaches (:func:`rate_run_saves`).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import optax

from experiments import claims
from experiments.collapse_escape import problem as P
from experiments.collapse_escape.windows import LinearModes, fit_on, fit_rate, linear_modes, rate_window, window_rate
from ssl_geometry import dynamics, geometry

#: The registry claims whose thresholds fix the horizons and the outcomes.
FROZEN, NO_ESCAPE = "thm4.1-frozen-head-flow", "flow-linear-relu-no-escape"
RATES = "linearised-rate-prediction"
OUTCOMES = ("escaped", "stayed", "grew", "diverged", "censored")

_SGD = {}


def _optimizer(momentum: float):
    """One optax SGD object per momentum (lr enters as a loss scale: exact for SGD + momentum)."""
    if momentum not in _SGD:
        _SGD[momentum] = optax.sgd(1.0, momentum=momentum or None)
    return _SGD[momentum]


def threshold(claim_id: str, name: str) -> float:
    return float(claims.CLAIMS[claim_id].thresholds[name])


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
    return float(
        min(cap, threshold(NO_ESCAPE, "horizon_margin") * math.log(threshold(NO_ESCAPE, "escape_growth")) / rate)
    )


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


def run_flow(loss, w0, data, T, cfg, obs, solver, dt0=None, ts=None):
    """The flow to ``T``, saved at ``ts`` (default: ``num_saves`` equal steps of ``[0, T]``)."""
    dcfg = cfg.dynamics
    ts = np.linspace(0.0, T, dcfg.num_saves + 1) if ts is None else np.asarray(ts, float)
    max_steps = dcfg.max_steps if dt0 is None else max(dcfg.max_steps, int(T / dt0) + len(ts) + 2)
    return dynamics.gradient_flow(
        loss,
        w0,
        t1=T,
        save_at=ts,
        observe=obs,
        args=data,
        solver=solver,
        rtol=dcfg.rtol,
        atol=dcfg.atol,
        max_steps=max_steps,
        dt0=dt0,
        throw=False,
    )


def run_sgd(loss_scaled, w0, data, lr, T, cfg, obs):
    mom = cfg.dynamics.momentum
    lr_eff = lr / (1.0 - mom)
    steps = max(1, int(round(T / lr_eff)))
    return dynamics.discrete(
        loss_scaled,
        w0,
        _optimizer(mom),
        steps=steps,
        observe=obs,
        observe_every=1,
        args={**data, "scale": jnp.asarray(lr, jnp.float64)},
        lr=lr_eff,
        throw=False,
    )


def spread_rms(O, deltas):
    """RMS of the centred representation of linearised deviations (``inf`` where they overflowed)."""
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.linalg.norm(deltas @ O.T, axis=1) / math.sqrt(O.shape[0])
    return np.where(np.isfinite(out), out, np.inf)


def summarise(tr, predicted_spread, status):
    """Growth, outcome and the frozen-head rule's slopes of one trajectory (module docstring).

    ``frozen_rate`` and ``frozen_predicted_rate``: the slopes the frozen-head rule reads (:func:`fit_rate`,
    the window from the spread only), measured and of the linearised system ``predicted_spread``.
    """
    lf = threshold(FROZEN, "linear_factor")
    spread = np.asarray(tr.observed["spread_z"], float)
    ts = np.asarray(tr.ts, float)
    last = np.nonzero(tr.saved & np.isfinite(spread))[0][-1]
    frozen, f_a, f_b, _ = fit_rate(ts, spread, spread[0], lf)
    growth = float(spread[last] / spread[0])
    return {
        "ok": bool(tr.ok),
        "status": status,
        "t_final": float(tr.t_final),
        "n_steps": int(tr.n_steps),
        "spread_0": float(spread[0]),
        "spread_T": float(spread[last]),
        "growth": growth,
        "outcome": outcome(growth, status),
        "frozen_rate": frozen,
        "frozen_window": [f_a, f_b],
        "frozen_predicted_rate": fit_on(ts, predicted_spread, (f_a, f_b)),
    }


def rate_fields(tr, modes: LinearModes, stop) -> dict:
    """The ``linearised-rate-prediction`` measurement of one trajectory: ``measured_rate``, the slope of log
    spread over its rate window (:func:`rate_window` from ``modes``, the linearised solution from the same start
    at ``tr.ts``, :func:`linear_modes`; :func:`window_rate`), its ``rate_points`` saves and the window's times.
    ``window_found`` is False when the modal split failed (``modes.ok``); the window is then empty."""
    spread = np.asarray(tr.observed["spread_z"], float)
    ts = np.asarray(tr.ts, float)
    k_a, k_b = rate_window(
        ts,
        modes.lead,
        modes.rest,
        np.where(tr.saved, spread, np.nan),
        np.asarray(tr.observed["dev"], float),
        dominance=threshold(RATES, "dominance"),
        linear_factor=threshold(RATES, "linear_factor"),
        decay_floor=threshold(RATES, "decay_floor"),
        stop=stop,
    )
    if not modes.ok:
        k_a = k_b
    rate, points = window_rate(ts, spread, (k_a, k_b), int(threshold(RATES, "min_points")))
    return {
        "measured_rate": rate,
        "rate_points": points,
        "rate_window": [
            float(ts[k_a]) if k_a < len(ts) else float("nan"),
            float(ts[k_b - 1]) if k_b > k_a else float("nan"),
        ],
        "linear_end_t": float(ts[k_b - 1]) if k_b > 0 else float("nan"),
        "window_found": bool(modes.ok),
        "rate_run_saves": len(ts) - 1,
    }


def rate_run_saves(J, O, delta0, dt, *, lr=None, momentum=0.0):
    """Save intervals a run on spacing ``dt`` needs for its rate window, from the linearised solution alone; None
    when that solution has no window of ``min_points`` saves within ``max_saves`` (``linearised-rate-prediction``).

    The linearised solution's own window (:func:`rate_window`, its spread read as spread and as deviation) is
    ``[k_a, k_b)``; the run needs ``min(k_b, k_a + max(10 min_points, k_a // 2))`` intervals (the window's start
    and enough saves after it; a decaying solution never leaves the linear regime).
    """
    n_max, n_min = int(threshold(RATES, "max_saves")), int(threshold(RATES, "min_points"))
    ts = dt * np.arange(n_max + 1)
    m = linear_modes(J, O, delta0, ts, lr=lr, momentum=momentum, lead_rtol=threshold(RATES, "lead_rtol"))
    with np.errstate(over="ignore"):  # past the linear regime the solution may overflow: inf ends the window
        spread = np.exp(m.log_spread)
    k_a, k_b = rate_window(
        ts,
        m.lead,
        m.rest,
        spread,
        spread,
        dominance=threshold(RATES, "dominance"),
        linear_factor=threshold(RATES, "linear_factor"),
        decay_floor=threshold(RATES, "decay_floor"),
    )
    if not m.ok or k_b - k_a < n_min:
        return None
    return int(min(k_b, k_a + max(10 * n_min, k_a // 2)))
