"""Experiment 4's rate windows: the slopes of log spread over the linear regime and the linearised solution's
modal split that says where the leading mode dominates (registry claims ``thm4.1-frozen-head-flow`` and
``linearised-rate-prediction``; the runs that use them are in :mod:`experiments.collapse_escape.runs`).

:func:`fit_rate` / :func:`fit_on`: the frozen-head rule's slope over the second half of the leading stretch
within ``linear_factor``. :func:`linear_modes`: the linearised solution from a run's start split into its
leading mode group and the rest; :func:`rate_window`: the saves from which the rest is at most ``dominance``
times the leading part until the run leaves the linear regime (or its spread falls below ``decay_floor``
times its start, where float64 resolves it no longer); :func:`window_rate`: the slope there.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


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
    idx = np.arange(end)[end // 2 :]
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


class LinearModes(NamedTuple):
    """The linearised solution from one start, split by mode, at the save points (:func:`linear_modes`).

    ``rate``: the leading rate ``r`` among the modes the observable sees (flow: ``max Re lambda_i(J)``;
    SGD: ``ln rho / lr_eff``, ``rho`` the largest root modulus of the companion map, per unit of flow
    time). ``lead`` and ``rest``: the spread (RMS) of the leading group's part and of every other
    visible mode's part of the linearised solution, each divided by ``exp(r t)``; ``log_spread``: the
    log spread of the whole linearised solution. ``ok``: the modal expansion reproduces the start to
    1e-8 (else the eigenvectors are too ill-conditioned to split, and no window is found).
    """

    rate: float
    lead: np.ndarray
    rest: np.ndarray
    log_spread: np.ndarray
    ok: bool


def _visible(O, vec, tol):
    """Mask of the eigenvectors (columns of ``vec``) the observable ``O`` sees (:func:`dynamics.visible_rate`)."""
    return np.linalg.norm(O @ vec, axis=0) > tol * np.linalg.norm(O, 2) * np.linalg.norm(vec, axis=0)


def linear_modes(J, O, delta0, ts, *, lr=None, momentum=0.0, lead_rtol=0.05, vis_tol=1e-6) -> LinearModes:
    """The linearised solution ``delta(t)`` from ``delta0`` split into its leading modes and the rest.

    ``J = sum_j lambda_j v_j w_j^T``, ``delta0 = sum_j a_j v_j`` (``a = V^{-1} delta0``). Flow
    (``lr=None``): ``delta(t) = sum_j a_j exp(lambda_j t) v_j``, unit rates ``sigma_j = Re lambda_j``.
    SGD with momentum ``mu`` at ``lr`` (``delta_k``, zero initial velocity, step ``k`` at ``t_k = k
    lr_eff``, ``lr_eff = lr / (1 - mu)``): mode ``j`` evolves by the 2 x 2 block ``M_j = [[1 + lr
    lambda_j, -lr mu], [-lambda_j, mu]]`` of :func:`ssl_geometry.dynamics.sgd_map`, ``delta_k = sum_j a_j
    [M_j^k]_00 v_j``, and each of its two roots ``x`` is a unit of rate ``ln|x| / lr_eff`` (a double
    root, one unit). Only visible modes (``|O v_j| > vis_tol |O| |v_j|``) enter; ``r`` is the largest
    visible unit rate, and the leading group is every visible unit with ``sigma >= r - lead_rtol |r| -
    1e-8 max|sigma|`` (the last term: the eigensolver's roundoff, so that a rate of 0 has a group).
    """
    J, O, delta0, ts = np.asarray(J), np.asarray(O), np.asarray(delta0, float), np.asarray(ts, float)
    ev, vec = np.linalg.eig(J)
    seen = _visible(O, vec, vis_tol)
    if not np.any(seen):
        raise ValueError("`O` sees no mode of `J`: no leading rate to test.")
    a = np.linalg.solve(vec, delta0.astype(complex))
    ok = bool(np.linalg.norm(vec @ a - delta0) <= 1e-8 * max(np.linalg.norm(delta0), 1e-300))
    ev, vec, a = ev[seen], vec[:, seen], a[seen]
    W = (O @ vec) * a  # (q, u): each visible mode's observed direction times its weight
    if lr is None:  # units: the modes of J
        sig = ev.real
        units = [(j, None) for j in range(len(ev))]
    else:
        lr_eff = lr / (1.0 - momentum)
        sig, units = [], []
        for j, lam in enumerate(ev):
            M = np.array([[1.0 + lr * lam, -lr * momentum], [-lam, momentum]], complex)
            x, E = np.linalg.eig(M)
            if abs(x[0] - x[1]) > 1e-8 * max(abs(x[0]), abs(x[1]), 1e-300) and np.linalg.cond(E) < 1e8:
                c = np.linalg.solve(E, np.array([1.0, 0.0], complex))
                for i in range(2):  # [M^k]_00 = sum_i E_0i c_i x_i^k
                    units.append((j, (x[i], E[0, i] * c[i])))
                    sig.append(np.log(max(abs(x[i]), 1e-300)) / lr_eff)
            else:  # a double root: one unit, its matrix power
                units.append((j, (M, None)))
                sig.append(np.log(max(np.max(np.abs(x)), 1e-300)) / lr_eff)
        sig = np.asarray(sig)
    r = float(np.max(sig))
    group = sig >= r - lead_rtol * abs(r) - 1e-8 * np.max(np.abs(sig))
    q = O.shape[0]
    lead = np.zeros((len(ts), q), complex)
    rest = np.zeros((len(ts), q), complex)
    for u, (j, spec) in enumerate(units):
        if spec is None:  # flow: exp((lambda_j - r) t)
            path = np.exp((ev[j] - r) * ts)
        elif spec[1] is not None:  # SGD root x: coef (x / rho)^k
            ratio = spec[0] / np.exp(r * (lr / (1.0 - momentum)))
            path = spec[1] * ratio ** np.arange(len(ts))
        else:  # SGD double root: [(M / rho)^k]_00
            Mn, path, P = spec[0] / np.exp(r * (lr / (1.0 - momentum))), np.empty(len(ts), complex), np.eye(2)
            for k in range(len(ts)):
                path[k], P = P[0, 0], P @ Mn
        target = lead if group[u] else rest
        target += np.outer(path, W[:, j])
    norm = lambda x: np.linalg.norm(x, axis=1) / np.sqrt(q)
    tot = norm(lead + rest)
    with np.errstate(divide="ignore"):
        log_spread = np.log(tot) + r * ts
    return LinearModes(r, norm(lead), norm(rest), log_spread, ok)


def rate_window(
    ts, lead, rest, spread, dev, *, dominance, linear_factor, decay_floor=0.0, stop=float("inf")
) -> tuple[int, int]:
    """``(k_a, k_b)``: the save indices ``k_a <= k < k_b`` of a run's rate window (``linearised-rate-prediction``).

    End ``k_b``: the first save at which the run has left the linear regime -- ``spread > linear_factor
    spread[0]``, ``dev > linear_factor dev[0]`` (the whole state's deviation), ``spread < decay_floor
    spread[0]`` (a decaying spread near float64 resolution), a non-finite value, or ``t >= stop`` (a
    divergence) -- else the number of saves. Start ``k_a``: the first save from which on
    (up to ``k_b``) the linearised solution's non-leading part is at most ``dominance`` times its leading
    part (``rest <= dominance lead``, :func:`linear_modes`): the subleading modes have decayed by then.
    ``k_a = k_b`` (an empty window) when that never holds before ``k_b``.
    """
    ts, spread, dev = (np.asarray(x, float) for x in (ts, spread, dev))
    lead, rest = np.asarray(lead, float), np.asarray(rest, float)
    if not (ts.shape == spread.shape == dev.shape == lead.shape == rest.shape and ts.ndim == 1):
        raise ValueError(
            "`ts`, `lead`, `rest`, `spread` and `dev` must be 1-D arrays of one length; got "
            f"{[np.shape(x) for x in (ts, lead, rest, spread, dev)]}."
        )
    with np.errstate(invalid="ignore"):
        inside = (
            np.isfinite(spread)
            & np.isfinite(dev)
            & (spread <= linear_factor * spread[0])
            & (dev <= linear_factor * dev[0])
            & (spread >= decay_floor * spread[0])
            & (ts < stop)
        )
    k_b = int(np.argmin(inside)) if not inside.all() else len(ts)
    dominated = rest[:k_b] <= dominance * lead[:k_b]
    bad = np.nonzero(~dominated)[0]
    k_a = int(bad[-1]) + 1 if bad.size else 0
    return k_a, k_b


def window_rate(ts, spread, window, min_points) -> tuple[float, int]:
    """``(slope, points)``: least-squares slope of ``log spread`` against ``t`` over the saves ``k_a <= k < k_b``;
    NaN when the window holds fewer than ``min_points`` saves."""
    k_a, k_b = window
    n = max(0, k_b - k_a)
    if n < min_points:
        return float("nan"), n
    return float(np.polyfit(np.asarray(ts, float)[k_a:k_b], np.log(np.asarray(spread, float)[k_a:k_b]), 1)[0]), n
