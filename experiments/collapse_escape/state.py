"""Experiment 4, one state's runs: the flow at every head rate and SGD at every lr from one perturbed equilibrium.

Each run's row is assembled from the pieces of :mod:`experiments.collapse_escape.runs` (horizons, solvers, the
linearised predictions, the rate window); its module docstring states the rules.
"""

from __future__ import annotations

import math

import numpy as np
from jax.flatten_util import ravel_pytree

from experiments.collapse_escape import problem as P
from experiments.collapse_escape.runs import (
    RATES,
    flow_horizon,
    flow_solver,
    frozen_horizon,
    predictions,
    rate_fields,
    rate_run_saves,
    run_flow,
    run_sgd,
    spread_rms,
    summarise,
    threshold,
)
from experiments.collapse_escape.windows import LinearModes, linear_modes
from ssl_geometry import dynamics

__all__ = ["run_state"]


def _check_rate(modes: LinearModes, predicted: float, what: str) -> None:
    """The modal split's leading rate must be the library's (``visible_rate`` / ``sgd_growth``): one definition."""
    if not abs(modes.rate - predicted) <= 1e-9 * max(abs(predicted), 1e-12):
        raise RuntimeError(
            f"{what}: the modal split's leading rate {modes.rate!r} differs from the predicted rate {predicted!r}"
        )


def _delta(w, w_eq):
    return np.asarray(ravel_pytree(w)[0] - ravel_pytree(w_eq)[0])


def _flow_row(problem, cfg, y0, tau, t0, base):
    lin, O, w_eq, data = predictions(problem, base["eq"], tau)
    r = dynamics.visible_rate(lin, O)
    T = t0 if tau == 0 else flow_horizon(r, t0)
    solver, dt0 = flow_solver(cfg, lin, problem.activation, T)
    w0 = P.to_w(y0, tau)
    d0 = _delta(w0, w_eq)
    tr = run_flow(problem.loss_w, w0, data, T, cfg, problem.observe, solver, dt0)
    pred = spread_rms(O, dynamics.predict_flow(lin.jacobian, d0, tr.ts))
    status = "successful" if tr.ok else tr.status
    modes = linear_modes(lin.jacobian, O, d0, tr.ts, lead_rtol=threshold(RATES, "lead_rtol"))
    _check_rate(modes, r, f"flow tau = {tau:g}")
    rate = rate_fields(tr, modes, tr.t_final if not tr.ok else float("inf"))
    rate["rate_run"] = "horizon"
    if rate["rate_points"] < threshold(RATES, "min_points") and tr.ok:
        # the horizon ended before the window: the rate run continues on the same spacing (the outcome stays T's)
        dt = float(tr.ts[1] - tr.ts[0])
        n = rate_run_saves(lin.jacobian, O, d0, dt)
        if n is None:
            rate["rate_run"] = "horizon (the linearised solution has no window within max_saves)"
        elif n > len(tr.ts) - 1:
            ts = dt * np.arange(n + 1)
            solver_r, dt0_r = flow_solver(cfg, lin, problem.activation, float(ts[-1]))
            tr_r = run_flow(problem.loss_w, w0, data, float(ts[-1]), cfg, problem.observe, solver_r, dt0_r, ts=ts)
            modes_r = linear_modes(lin.jacobian, O, d0, tr_r.ts, lead_rtol=threshold(RATES, "lead_rtol"))
            rate = {
                **rate_fields(tr_r, modes_r, tr_r.t_final if not tr_r.ok else float("inf")),
                "rate_run": f"extended to t = {ts[-1]:.4g} ({tr_r.status})",
            }
    row = {
        **base["info"],
        "dynamics": "flow",
        "tau": float(tau),
        "lr": 0.0,
        "horizon": T,
        "predicted_rate": r,
        "leading_rate": lin.rate,
        "jacobian_scale": float(np.max(np.abs(lin.eigenvalues))),
        "stiffness": lin.stiffness,
        "field_norm_eq": lin.field_norm,
        "solver": solver if dt0 is None else f"{solver} dt={dt0:.3g}",
        **summarise(tr, pred, status),
        **rate,
    }
    return row, tr, (lin, O, w_eq, data)


def _sgd_row(problem, cfg, y0, lr, T, lin_pack, base):
    lin, O, w_eq, data = lin_pack
    mom = cfg.dynamics.momentum
    lr_eff = lr / (1.0 - mom)
    w0 = P.to_w(y0, cfg.dynamics.sgd_head_rate)
    d0 = _delta(w0, w_eq)
    tr = run_sgd(problem.loss_w_scaled, w0, data, lr, T, cfg, problem.observe)
    with np.errstate(over="ignore", invalid="ignore"):  # an unstable map overflows: read as inf
        path = dynamics.predict_sgd(lin.jacobian, d0, lr, mom, len(tr.ts) - 1)
    growth = dynamics.sgd_growth(lin.jacobian, lr, mom, observable=O)
    t_div = float(tr.first_bad_step) * lr_eff if tr.first_bad_step is not None else float("inf")
    status = "successful" if tr.ok else "non_finite"  # the window stops only on a non-finite step
    predicted = math.log(max(growth, 1e-300)) / lr_eff
    lead_rtol = threshold(RATES, "lead_rtol")
    modes = linear_modes(lin.jacobian, O, d0, tr.ts, lr=lr, momentum=mom, lead_rtol=lead_rtol)
    _check_rate(modes, predicted, f"SGD lr = {lr:g}")
    rate = {**rate_fields(tr, modes, t_div), "rate_run": "horizon"}
    if rate["rate_points"] < threshold(RATES, "min_points") and tr.ok:
        n = rate_run_saves(lin.jacobian, O, d0, lr_eff, lr=lr, momentum=mom)
        if n is None:
            rate["rate_run"] = "horizon (the linearised solution has no window within max_saves)"
        elif n > len(tr.ts) - 1:
            tr_r = run_sgd(problem.loss_w_scaled, w0, data, lr, n * lr_eff, cfg, problem.observe)
            t_div_r = float(tr_r.first_bad_step) * lr_eff if tr_r.first_bad_step is not None else float("inf")
            modes_r = linear_modes(lin.jacobian, O, d0, tr_r.ts, lr=lr, momentum=mom, lead_rtol=lead_rtol)
            rate = {**rate_fields(tr_r, modes_r, t_div_r), "rate_run": f"extended to {len(tr_r.ts) - 1} steps"}
    row = {
        **base["info"],
        "dynamics": "sgd",
        "tau": float(cfg.dynamics.sgd_head_rate),
        "lr": float(lr),
        "lr_eff": lr_eff,
        "horizon": T,
        "predicted_rate": predicted,
        "predicted_growth_per_step": growth,
        "t_diverged": t_div if np.isfinite(t_div) else float("nan"),
        **summarise(tr, spread_rms(O, path), status),
        **rate,
    }
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
        raise ValueError(
            f"`dynamics.sgd_head_rate` {tau_sgd} must be one of `dynamics.head_rates` (SGD runs that flow's horizon)."
        )
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
    meta = {
        k: row[k]
        for k in (
            "objective",
            "activation",
            "representation",
            "seed",
            "dynamics",
            "tau",
            "lr",
            "predicted_rate",
            "measured_rate",
            "rate_window",
        )
    }
    return {**meta, "t": ts[keep].tolist(), "spread_z": np.asarray(tr.observed["spread_z"])[keep].tolist()}
