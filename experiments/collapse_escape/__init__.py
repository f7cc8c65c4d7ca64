"""Experiment 4: collapse escape from certified collapsed equilibria, predicted against measured (Thm 4.1).

Model (:mod:`.problem`): a representation ``z`` (trained itself, or a small MLP backbone of fixed
inputs) and a bias-free MLP head with linear, ReLU or Swish activation, trained on a fixed-target
objective -- stop-gradient MSE (``H_L = (2/n) I``), DINO's cross-entropy with a fixed teacher and
centre (``H_L`` PSD), or SimSiam's negative cosine (``H_L`` indefinite: the paper's own case, which
Thm 4.1's premise excludes). Per state (objective, head, representation, seed): one certified
collapsed equilibrium (all ``z_i = c``, stationary in every variable, ``rho != 0``:
:func:`ssl_geometry.geometry.collapsed_equilibrium`), one premises computation
(:func:`ssl_geometry.geometry.thm41_premises` at the equilibrium; the timescale ratio of each run is
measured at its start), one spectrum of ``H_eff``, ``G``, ``M`` and one perturbation of relative size
``dynamics.perturbation`` from which every run starts (:mod:`.runs`: the flows of the timescale sweep,
head frozen included, and SGD). The registry claims it decides (experiments/claims/):
``thm4.1-frozen-head-flow`` (Thm 4.1's ``H_eff`` statement in its own regime), the abstract's
dynamical reading ``flow-linear-relu-no-escape`` / ``flow-smooth-escape`` over the sweep,
``finite-step-escape`` (SGD) and ``linearised-rate-prediction`` (:mod:`.verdict`).

BatchNorm (reported): the amplification of the perturbation by the batch statistics of a BN head
(:func:`~ssl_geometry.dynamics.amplification`) and the normalised std of its outputs at ``t = 0``
(the "escape at t = 0" artefact; escape is read on ``z``).
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from experiments import common, projection
from experiments.collapse_escape import problem as P
from experiments.collapse_escape import state as S
from experiments.collapse_escape.reporting import figures, report
from experiments.collapse_escape.verdict import decide
from ssl_geometry import dynamics, geometry, heads, metrics

__all__ = ["NAME", "TITLE", "CLAIM", "CLAIMS", "measure", "decide", "report", "figures", "run_case"]

NAME = "collapse_escape"
TITLE = "Collapse escape: predicted against measured (Thm 4.1 and the abstract's dynamical reading)"
#: The registry claims (experiments/claims/) this experiment decides.
CLAIMS = (
    "flow-linear-relu-no-escape",
    "thm4.1-frozen-head-flow",
    "flow-smooth-escape",
    "finite-step-escape",
    "linearised-rate-prediction",
)
CLAIM = (
    "Thm 4.1 with the head frozen: from a collapsed equilibrium with non-zero residual and H_L PSD, the flow in z "
    "leaves at the rate -lambda_min(H_eff) for a smooth head and does not grow for a linear or ReLU head. The "
    "abstract's dynamical reading: smooth heads escape collapse, linear and ReLU heads cannot escape under "
    "continuous-time gradient flow and rely on finite step size and BatchNorm."
)


def _timescale_ratio(problem, y0, data):
    """(|F_head| / |theta|) / (|F_rep| / |rep|) at the perturbed start, ``F = -(grad_rep, tau grad_head) L``."""
    g = jax.grad(problem.loss_y)(y0, data)
    norm = lambda t: float(jnp.sqrt(sum(jnp.sum(x**2) for x in jax.tree_util.tree_leaves(t))))
    head = float(data["tau"]) * norm(g["head"]) / norm(y0["head"])
    rep = norm(g["rep"]) / norm(y0["rep"])
    return head / rep if rep > 0 else float("inf")


def _spectra(problem, eq):
    """``lambda_min`` of ``H_eff``, ``G``, ``M`` (dense, in ``z``) at the equilibrium."""
    z, _ = problem.outputs(eq.y, eq.data["x"])
    eh = geometry.effective_hessian(
        lambda zz: problem.head.apply({"params": eq.y["head"]}, zz)[0],
        lambda uu: problem.loss(uu, eq.data["targets"]),
        z,
    )
    lmin = lambda a: float(np.linalg.eigvalsh(0.5 * (np.asarray(a) + np.asarray(a).T))[0])
    return {
        "lambda_min_H_eff": lmin(eh.full),
        "lambda_min_G": lmin(eh.metric),
        "lambda_min_M": lmin(eh.interaction),
        "lambda_min_H_L": lmin(eh.loss_hessian),
    }


def _batchnorm(problem, cfg, eq, y0):
    """BN mechanism: amplification of the perturbation by a BN head's batch statistics, and its t = 0 std."""
    m = cfg.model
    bn = heads.mlp(
        m.d,
        (m.head_hidden,),
        m.k,
        activation=problem.activation,
        bias=False,
        batch_norm=True,
        bn_eps=cfg.analysis.bn_eps,
        dtype=jnp.float64,
    )
    v = bn.init(jax.random.PRNGKey(0))
    v = {**v, "params": {**v["params"], "layers": eq.y["head"]["layers"]}}
    z_eq, _ = problem.outputs(eq.y, eq.data["x"])
    z0, _ = problem.outputs(y0, eq.data["x"])
    delta = z0 - z_eq
    plain = dynamics.amplification(lambda zz: problem.head.apply({"params": eq.y["head"]}, zz)[0], z0, delta)
    with_bn = dynamics.amplification(lambda zz: bn.apply(v, zz, train=True)[0], z0, delta)
    return {
        "bn_amplification": with_bn / plain,
        "bn_std_u_init": float(metrics.normalized_std(bn.apply(v, z0, train=True)[0])),
    }


def run_case(cfg, problem, seed):
    """One state: its equilibrium, premises, spectrum and perturbation, then every run from it (:func:`state.run_state`)."""
    key = jax.random.fold_in(jax.random.PRNGKey(cfg.seed), seed)
    eq = P.equilibrium(problem, cfg, key)
    info = {
        "objective": problem.objective,
        "activation": problem.activation,
        "representation": problem.representation,
        "seed": seed,
        "certified": bool(eq.certified),
    }
    if not eq.certified:
        return [], [], info
    y0 = P.perturb(problem, eq.y, cfg, jax.random.fold_in(key, 2))
    prem = eq.premises
    spectra = _spectra(problem, eq)
    state = {
        **info,
        "head_kind": prem.head_kind,
        "H_L_psd": bool(prem.loss_hessian_psd),
        "rho_nonzero": bool(prem.residual_nonzero),
        "stationary": bool(prem.stationary_z and prem.stationary_head),
        "premises_violated": ", ".join(prem.violated()) or "-",
        "grad_z_ratio": prem.grad_z_ratio,
        "grad_head_ratio": prem.grad_head_ratio,
        "null_dim": eq.null_dim,
        "rho_norm": eq.rho_norm,
        "grad_norm_eq": eq.grad_norm,
        **spectra,
    }
    state["state_premises"] = bool(state["H_L_psd"] and state["rho_nonzero"] and state["stationary"])
    rows, curves = S.run_state(problem, eq, cfg, y0, state, spectra["lambda_min_H_eff"])
    for r in rows:
        r["timescale_ratio"] = _timescale_ratio(problem, y0, P.flow_data(eq.data, eq.y, r["tau"])) if r["tau"] else 0.0
    return rows, curves, {**state, **_batchnorm(problem, cfg, eq, y0)}


def _problems(cfg):
    m = cfg.model
    for rep in m.representations:
        for obj in m.objectives if rep == "free" else [o for o in m.mlp_objectives if o in m.objectives]:
            for act in m.activations:
                yield P.make_problem(cfg, obj, act, rep)


def measure(config) -> dict:
    """Every (representation, objective, head, seed) state: rows of numbers per run, thinned curves, the states."""
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
            r, c, case = run_case(config, problem, s)
            rows += r
            curves += c
            cases.append(case)
        if config.dry_run:
            break
    out = {"rows": rows, "curves": curves, "cases": cases}
    if config.dry_run:
        wall = time.perf_counter() - t0
        out["dry_run"] = projection.dry_run_record(wall, len(problems) * config.seeds)  # a "step": one case
    return out
