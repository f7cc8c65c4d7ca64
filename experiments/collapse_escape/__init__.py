"""Experiment 4: predicted against measured escape from certified collapsed equilibria (Thm 4.1).

Model (:mod:`.problem`): a representation ``z`` (trained itself, or a small MLP backbone of fixed
inputs) and a bias-free MLP head with linear, ReLU or Swish activation, trained on a fixed-target
objective -- stop-gradient MSE (``H_L = (2/n) I``), DINO's cross-entropy with a fixed teacher and
centre (``H_L`` PSD), or SimSiam's negative cosine (``H_L`` indefinite: the paper's own case, which
Thm 4.1's premise excludes). The start is a certified collapsed equilibrium (all ``z_i = c``,
stationary in every variable, ``rho != 0``: :func:`ssl_geometry.geometry.collapsed_equilibrium`)
plus a perturbation of relative size ``dynamics.perturbation``; Thm 4.1's premises come from
:func:`ssl_geometry.geometry.thm41_premises` with the measured timescale ratio.

Per case (:mod:`.runs`): the exact Jacobian of the flow's field in (representation, head)
(:mod:`ssl_geometry.dynamics`) gives the predicted rate, reported beside
``lambda_min`` of ``H_eff``, ``G`` and ``M``; the gradient flow (head ``tau`` times faster; and
with the head frozen, where ``H_eff`` alone is the linearisation) and SGD with momentum at each lr
(predicted per-step growth from the linearised SGD map) are run to one horizon chosen from the
predicted rates. BatchNorm: the amplification of the perturbation by the batch statistics of a
BN head (:func:`~ssl_geometry.dynamics.amplification`) and the normalised std of its
outputs at ``t = 0`` (the "escape at t = 0" artefact, never counted: escape is read on ``z``).
"""
from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from experiments import common
from experiments.collapse_escape import problem as P
from experiments.collapse_escape import runs as R
from experiments.collapse_escape.reporting import figures, report
from experiments.collapse_escape.verdict import RULE, decide
from ssl_geometry import geometry
from ssl_geometry import dynamics
from ssl_geometry import metrics
from ssl_geometry import heads

__all__ = ["NAME", "TITLE", "CLAIM", "RULE", "measure", "decide", "report", "figures"]

NAME = "collapse_escape"
TITLE = "Collapse escape: predicted against measured rates (Thm 4.1)"
#: The registry claims (experiments/claims.py) this experiment decides.
CLAIMS = ("flow-linear-relu-no-escape", "thm4.1-frozen-head-flow", "flow-smooth-escape",
          "finite-step-escape", "linearised-rate-prediction")
CLAIM = ("At a collapsed state with non-zero residual and H_L PSD, smooth (e.g. Swish) heads make the state strictly "
         "unstable, while linear and ReLU heads cannot escape under continuous-time gradient flow and rely on finite "
         "step size and BatchNorm.")


def _timescale_ratio(problem, y0, data):
    """(|F_head| / |theta|) / (|F_rep| / |rep|) at the perturbed start, ``F = -(grad_rep, tau grad_head) L``."""
    g = jax.grad(problem.loss_y)(y0, data)
    norm = lambda t: float(jnp.sqrt(sum(jnp.sum(x ** 2) for x in jax.tree_util.tree_leaves(t))))
    head = float(data["tau"]) * norm(g["head"]) / norm(y0["head"])
    rep = norm(g["rep"]) / norm(y0["rep"])
    return head / rep if rep > 0 else float("inf")


def _spectra(problem, eq):
    """``lambda_min`` of ``H_eff``, ``G``, ``M`` (dense, in ``z``) at the equilibrium."""
    z, _ = problem.outputs(eq.y, eq.data["x"])
    eh = geometry.effective_hessian(lambda zz: problem.head.apply({"params": eq.y["head"]}, zz)[0],
                                    lambda uu: problem.loss(uu, eq.data["targets"]), z)
    lmin = lambda a: float(np.linalg.eigvalsh(0.5 * (np.asarray(a) + np.asarray(a).T))[0])
    return {"lambda_min_H_eff": lmin(eh.full), "lambda_min_G": lmin(eh.metric), "lambda_min_M": lmin(eh.interaction),
            "lambda_min_H_L": lmin(eh.loss_hessian)}


def _batchnorm(problem, cfg, eq, y0):
    """BN mechanism: amplification of the perturbation by a BN head's batch statistics, and its t = 0 std."""
    m = cfg.model
    bn = heads.mlp(m.d, (m.head_hidden,), m.k, activation=problem.activation, bias=False, batch_norm=True,
                   bn_eps=cfg.analysis.bn_eps, dtype=jnp.float64)
    v = bn.init(jax.random.PRNGKey(0))
    v = {**v, "params": {**v["params"], "layers": eq.y["head"]["layers"]}}
    z_eq, _ = problem.outputs(eq.y, eq.data["x"])
    z0, _ = problem.outputs(y0, eq.data["x"])
    delta = z0 - z_eq
    plain = dynamics.amplification(lambda zz: problem.head.apply({"params": eq.y["head"]}, zz)[0], z0, delta)
    with_bn = dynamics.amplification(lambda zz: bn.apply(v, zz, train=True)[0], z0, delta)
    return {"bn_amplification": with_bn / plain,
            "bn_std_u_init": float(metrics.normalized_std(bn.apply(v, z0, train=True)[0]))}


def _case(cfg, problem, seed):
    key = jax.random.fold_in(jax.random.PRNGKey(cfg.seed), seed)
    eq = P.equilibrium(problem, cfg, key)
    if not eq.certified:
        return [], [], {"objective": problem.objective, "activation": problem.activation,
                        "representation": problem.representation, "seed": seed, "certified": False}
    k_pert = jax.random.fold_in(key, 2)
    rows, curves = R.run_case(problem, eq, cfg, k_pert)
    y0 = P.perturb(problem, eq.y, cfg, k_pert)
    tau = float(cfg.dynamics.head_rate)
    ratio = _timescale_ratio(problem, y0, P.flow_data(eq.data, eq.y, tau))
    z, _ = problem.outputs(eq.y, eq.data["x"])
    prem = geometry.thm41_premises(problem.head, {"params": eq.y["head"]},
                                   lambda uu: problem.loss(uu, eq.data["targets"]), z,
                                   timescale_ratio=max(ratio, 1e-300), activation=problem.activation)
    hold = prem.holds if prem.head_kind != "piecewise" else prem.holds_except_smoothness
    extra = {"seed": seed, "head_kind": prem.head_kind, "premises_hold": bool(hold),
             "premises_violated": ", ".join(prem.violated()) or "-", "H_L_psd": bool(prem.loss_hessian_psd),
             "timescale_ratio": ratio, "grad_z_ratio": prem.grad_z_ratio, "grad_head_ratio": prem.grad_head_ratio,
             **_spectra(problem, eq), **_batchnorm(problem, cfg, eq, y0)}
    for r in rows:  # the frozen-head flow violates the timescale premise by construction
        r.update(extra)
        if r["dynamics"] == "flow_frozen_head":
            r["premises_hold"] = False
    for c in curves:
        c["seed"] = seed
    return rows, curves, {"objective": problem.objective, "activation": problem.activation,
                          "representation": problem.representation, "seed": seed, "certified": True,
                          "null_dim": eq.null_dim}


def _problems(cfg):
    m = cfg.model
    for rep in m.representations:
        for obj in (m.objectives if rep == "free" else [o for o in m.mlp_objectives if o in m.objectives]):
            for act in m.activations:
                yield P.make_problem(cfg, obj, act, rep)


def measure(config) -> dict:
    """Every (representation, objective, head, seed) case: rows of numbers and thinned curves."""
    common.require_x64(NAME)
    from threadpoolctl import threadpool_limits

    # The dense eigenproblems here are small (a few hundred); multithreaded BLAS on a loaded machine
    # spins (50x slower measured on 2 shared cores), one thread does not.
    with threadpool_limits(1):
        return _measure(config)


def _measure(config) -> dict:
    rows, curves, cases = [], [], []
    t0 = time.perf_counter()
    problems = list(_problems(config))
    for problem in problems:
        for s in range(1 if config.dry_run else config.seeds):
            r, c, case = _case(config, problem, s)
            rows += r
            curves += c
            cases.append(case)
        if config.dry_run:
            break
    out = {"rows": rows, "curves": curves, "cases": cases}
    if config.dry_run:
        wall = time.perf_counter() - t0
        out["dry_run"] = common.dry_run_record(wall, len(problems) * config.seeds)  # a "step": one case
    return out
