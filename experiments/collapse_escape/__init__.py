"""Experiment 4: collapse escape dynamics -- gradient flow against SGD (Thm 4.1, dynamical reading).

Model (DESIGN.md s.3, at toy size): backbone ``f`` = MLP on flattened 8x8 digits,
projector ``g`` (``d -> k -> k``, bias-free, BN on hidden and output when on) and predictor
``q`` (``k -> k_p -> k``), the same activation in both. Objective: SimSiam's symmetric
negative cosine with stop-gradient (Chen & He 2021, Eq. 3)::

    L(theta) = 1/2 D(q(g(f(x1))), sg g(f(x2))) + 1/2 D(q(g(f(x2))), sg g(f(x1))),
    D(p, z) = -(1/n) sum_i cos(p_i, z_i),

on one fixed pair of views ``x_v = x + sigma xi_v`` (full batch, so the flow and SGD minimise
the same deterministic function; BatchNorm in train mode uses batch statistics only).

Dynamics from each initial state: the gradient flow ``d theta/dt = -grad L``
(:func:`ssl_geometry.dynamics.gradient_flow`, adaptive Tsit5) and SGD with momentum 0.9
(:func:`ssl_geometry.dynamics.discrete`) at each learning rate, on the clock
``t = step * lr / (1 - momentum)``. Along the way (every save time):

* ``std``: mean per-dimension std of L2-normalised projector outputs (SimSiam's monitor);
* ``cond``: covariance condition number of the projector outputs;
* effective rank of the projector outputs, both definitions (``rankme``, ``squared``);
* relative update sizes ``|Delta theta_g| / |theta_g|`` of head (projector + predictor) and
  backbone between saves; their ratio is the timescale-separation premise;
* ``lambda_min`` / ``lambda_max`` of ``H_eff = hess_{z1} [1/2 D(q(g(z1)), sg g(z2))]``, the
  Hessian of the loss w.r.t. the first view's backbone features with the second view fixed
  (dense ``(n d) x (n d)`` eigendecomposition).

Escape: :func:`ssl_geometry.dynamics.escape_time` with the named criterion
``"std_threshold"`` (``std > escape_fraction / sqrt(k)``). Premises of Thm 4.1 at the initial
state (``H_L`` PSD?, ``|rho|``, timescale ratio) come from
:func:`ssl_geometry.geometry.classify_collapse`. Dead heads (gradient of the loss w.r.t.
every parameter exactly zero at the start: no dynamics can move them) are detected and
reported (DESIGN.md s.4).
"""
from __future__ import annotations

import collections
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import scipy.stats

from experiments import common
from ssl_geometry import activations as _act
from ssl_geometry import backbones, data, dynamics, geometry, heads, losses, metrics

NAME = "collapse_escape"
TITLE = "Collapse escape dynamics (Thm 4.1)"
CLAIM = ("From a collapsed state, under continuous-time gradient flow smooth (Swish/GELU) heads escape while "
         "linear/ReLU heads stay (no second-order escape direction); ReLU/linear heads escape only through "
         "finite step size or BatchNorm.")

SMOOTH = ("swish", "gelu", "tanh", "softplus", "gelu_tanh")
PAPER_SPEARMAN = {"normal init, Swish": 0.339, "collapsed init, Swish": 0.609, "collapsed init, ReLU": 0.669}


def _dtype(cfg):
    dt = jnp.dtype(cfg.dtype)
    if dt == jnp.float64 and not jax.config.read("jax_enable_x64"):
        raise ValueError("config.dtype = 'float64' needs jax_enable_x64 (experiments.reproduce enables it); "
                         "set config.dtype = 'float32' otherwise.")
    return dt


def load_inputs(cfg, dtype):
    """``(N, 64)`` standardised pixels of the first channel of the digits train split."""
    ds = data.load(cfg.dataset, "train", seed=cfg.seed, image_size=cfg.image_size)
    x = ds.images[..., 0].reshape(len(ds.images), -1).astype(np.float64) / 255.0
    x = (x - x.mean(0)) / (x.std(0) + 1e-3)
    return np.asarray(x, dtype)


def head_kind(activation: str) -> str:
    return geometry.head_smoothness(activation)


def switch_activation(names, index):
    """``x -> ACTIVATIONS[names[index]](x)`` by ``lax.switch`` on a traced ``index``.

    The activation is a runtime argument, so one compiled flow/SGD/statistics program serves
    every head activation (each branch is the library's activation, derivatives included).
    """
    fns = [_act.get(n) for n in names]
    return lambda x: jax.lax.switch(index, fns, x)


class Problem:
    """Models, loss and jitted statistics for one BatchNorm setting (compiled once).

    Data tuples ``d = (x1, x2, stats, scale, act_index)``: the two views, BatchNorm state,
    a loss scale and the index of the head activation in ``cfg.activations``.
    """

    def __init__(self, cfg, batch_norm: bool, in_dim: int, dtype):
        self.batch_norm, self.dtype, self.names = batch_norm, dtype, tuple(cfg.activations)
        self.backbone = backbones.mlp(in_dim, (cfg.backbone_hidden,), cfg.d, activation=cfg.backbone_activation,
                                      dtype=dtype)
        bb, names = self.backbone, self.names

        def models(activation):
            proj = heads.simsiam_projector(cfg.d, cfg.k, activation=activation, batch_norm=batch_norm, dtype=dtype)
            pred = heads.simsiam_predictor(cfg.k, cfg.pred_hidden, activation=activation, batch_norm=batch_norm,
                                           dtype=dtype)
            return proj, pred

        self.models = models

        def head(params, stats, z, a):
            proj, pred = models(switch_activation(names, a))
            u, _ = proj.apply({"params": params["proj"], **stats["proj"]}, z, train=True)
            p, _ = pred.apply({"params": params["pred"], **stats["pred"]}, u, train=True)
            return u, p

        def forward(params, stats, x, a):
            z, _ = bb.apply({"params": params["backbone"]}, x)
            return (z, *head(params, stats, z, a))

        def loss(params, d):
            """``scale * simsiam``; ``scale = 1`` for the flow, ``lr`` for SGD run at optax lr 1."""
            x1, x2, stats, scale, a = d
            _, u1, p1 = forward(params, stats, x1, a)
            _, u2, p2 = forward(params, stats, x2, a)
            return scale * losses.simsiam(p1, p2, u1, u2)

        def observe(params, t, d):
            x1, _, stats, _, a = d
            _, u1, _ = forward(params, stats, x1, a)
            return {"std": metrics.normalized_std(u1), "params": params}

        def first_view_loss(z1, params, stats, u2, a):
            _, p1 = head(params, stats, z1, a)
            return 0.5 * losses.negative_cosine(p1, u2)

        def stats_fn(params, d):
            x1, x2, stats, _, a = d
            z1, u1, _ = forward(params, stats, x1, a)
            _, u2, _ = forward(params, stats, x2, a)
            g = jax.grad(loss)(params, d)
            sq = lambda tree: sum(jnp.sum(jnp.square(x)) for x in jax.tree_util.tree_leaves(tree))
            gz = jnp.concatenate([jnp.abs(x).ravel() for x in jax.tree_util.tree_leaves(g)])
            shape = z1.shape
            H = jax.hessian(lambda zf: first_view_loss(zf.reshape(shape), params, stats, u2, a))(z1.reshape(-1))
            ev = jnp.linalg.eigvalsh(0.5 * (H + H.T))
            return {
                "loss": loss(params, d) / d[3],
                "std": metrics.normalized_std(u1),
                "cond": metrics.covariance_condition_number(u1),
                "erank_rankme": metrics.effective_rank(u1, "rankme"),
                "erank_squared": metrics.effective_rank(u1, "squared"),
                "grad_norm_head": jnp.sqrt(sq(g["proj"]) + sq(g["pred"])),
                "grad_norm_backbone": jnp.sqrt(sq(g["backbone"])),
                "grad_max_abs": jnp.max(gz),
                "lambda_min_H_eff": ev[0], "lambda_max_H_eff": ev[-1],
            }

        @jax.jit
        def effective_fn(params, d):
            """Dense ``H_eff = G + M`` of the first-view term at ``z1`` (:func:`geometry.effective_hessian`)."""
            x1, x2, stats, _, a = d
            z1, _, _ = forward(params, stats, x1, a)
            _, u2, _ = forward(params, stats, x2, a)
            return geometry.effective_hessian(lambda z: head(params, stats, z, a)[1],
                                              lambda p: 0.5 * losses.negative_cosine(p, u2), z1)

        # optax SGD with momentum at lr 1 on the loss scaled by lr: v <- mu v + lr g, theta <- theta - v is
        # exactly SGD+momentum at lr (the update is linear in the gradient), with one compiled optimiser.
        self.optimizer = optax.sgd(1.0, momentum=cfg.momentum)
        self.head, self.forward, self.loss, self.observe = head, forward, loss, observe
        def update_ratio(a, b):
            return metrics.relative_update_size(a, b, _GROUPS)

        # All save points of a trajectory at once (vmap over the leading snapshot axis).
        self.stats_fn = jax.jit(jax.vmap(stats_fn, in_axes=(0, None)))
        self.update_fn = jax.jit(jax.vmap(update_ratio))
        self.effective_fn = effective_fn

    def init(self, cfg, key, init: str):
        """Initial ``(params, stats)`` for ``init`` in ``{"normal", "pseudo", "collapsed"}``."""
        kb, kp, kq = jax.random.split(key, 3)
        proj, pred = self.models("identity")  # initialisation does not depend on the activation
        vb, vp, vq = self.backbone.init(kb), proj.init(kp), pred.init(kq)
        if init == "pseudo":
            vp = heads.scale_weights(vp, cfg.pseudo_collapse_scale)
        elif init == "collapsed":
            layers = list(vb["params"]["layers"])
            layers[-1] = {**layers[-1], "w": layers[-1]["w"] * cfg.collapse_scale}
            vb = {**vb, "params": {**vb["params"], "layers": layers}}
        elif init != "normal":
            raise ValueError(f"`init` must be 'normal', 'pseudo' or 'collapsed'; got {init!r}.")
        params = {"backbone": vb["params"], "proj": vp["params"], "pred": vq["params"]}
        stats = {"proj": {k: v for k, v in vp.items() if k != "params"},
                 "pred": {k: v for k, v in vq.items() if k != "params"}}
        return params, stats


_GROUPS = {"head": lambda p: p.startswith(("proj/", "pred/")), "backbone": "backbone"}


def _series(problem, traj, d):
    """Statistics at every saved parameter snapshot of a trajectory (one vmapped call)."""
    snaps = traj.observed["params"]
    saved = np.asarray(traj.saved)
    out = {k: np.where(saved, np.asarray(v, np.float64), np.nan)
           for k, v in jax.device_get(problem.stats_fn(snaps, d)).items()}
    first = jax.tree_util.tree_map(lambda x: x[:-1], snaps)
    second = jax.tree_util.tree_map(lambda x: x[1:], snaps)
    r = {k: np.asarray(v, np.float64) for k, v in jax.device_get(problem.update_fn(first, second)).items()}
    both = saved[1:] & saved[:-1]
    head = np.where(both, r["head"], np.nan)
    bb = np.where(both, r["backbone"], np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = head / bb
    out["rel_update_head"] = np.concatenate([[np.nan], head])
    out["rel_update_backbone"] = np.concatenate([[np.nan], bb])
    out["timescale_ratio"] = np.concatenate([[np.nan], ratio])
    return out


def _spearman(x, y):
    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = np.isfinite(x) & ~np.isnan(y)
    if ok.sum() < 3 or np.ptp(x[ok]) == 0 or np.ptp(np.nan_to_num(y[ok], posinf=1e300)) == 0:
        return float("nan")
    return float(scipy.stats.spearmanr(x[ok], y[ok]).statistic)


def _premises(problem, d, activation, timescale_ratio, min_ratio=1.0):
    """Thm 4.1's premises at a state: :func:`geometry.premises` of the dense effective Hessian.

    ``H_L`` PSD (``lambda_min(H_L) >= -dim eps max|lambda|``), ``|rho| > sqrt(eps) max(1, |L|)``
    (the tolerance :func:`geometry.classify_collapse` uses), the timescale ratio
    (head/backbone relative update rate) ``> min_ratio``, and the sign structure of
    ``H_eff``, ``G`` and ``M`` at the state.
    """
    eh = jax.device_get(problem.effective_fn(*d))
    p = geometry.premises(eh)
    eps = float(np.finfo(np.asarray(eh.full).dtype).eps)
    r_tol = math.sqrt(eps) * max(1.0, abs(float(eh.loss)))
    ratio_ok = None if not np.isfinite(timescale_ratio) else bool(timescale_ratio > min_ratio)
    kind = head_kind(activation)
    h_tol = p.tolerances["full"]
    lmin = p.extremes["full"][0]
    conclusion = ("premise violated" if (not p.loss_hessian_psd or p.residual_norm <= r_tol or ratio_ok is False)
                  else ("strict instability" if lmin < -h_tol else "no second-order escape"))
    return {
        "H_L_psd": bool(p.loss_hessian_psd), "lambda_min_H_L": p.extremes["loss_hessian"][0],
        "rho_norm": p.residual_norm, "rho_nonzero": bool(p.residual_norm > r_tol),
        "timescale_ok": ratio_ok, "conclusion_at_init": conclusion,
        "lambda_min_G_init": p.extremes["metric"][0], "lambda_min_M_init": p.extremes["interaction"][0],
        "H_eff_sign_init": p.signs["full"], "c2_head": kind in ("linear", "smooth"),
    }


def run_case(cfg, problem, activation, init, x_all, seed, key, dtype):
    """Flow + SGD at every lr from one initial state; returns (rows, curves)."""
    a = jnp.asarray(problem.names.index(activation))
    k_init, k_data, k_noise = jax.random.split(key, 3)
    idx = np.asarray(jax.random.choice(k_data, x_all.shape[0], (cfg.n,), replace=False))
    x = jnp.asarray(x_all[idx], dtype)
    n1, n2 = jax.random.split(k_noise)
    x1 = x + cfg.view_noise * jax.random.normal(n1, x.shape, dtype)
    x2 = x + cfg.view_noise * jax.random.normal(n2, x.shape, dtype)
    params0, stats = problem.init(cfg, k_init, init)
    one = jnp.ones((), dtype)
    d_flow = (x1, x2, stats, one, a)
    T = float(cfg.horizon)
    save_at = np.linspace(0.0, T, cfg.num_saves + 1)
    threshold = cfg.escape_fraction / math.sqrt(cfg.k)
    g0 = jax.grad(problem.loss)(params0, d_flow)
    dead = bool(all(np.all(np.asarray(leaf) == 0) for leaf in jax.tree_util.tree_leaves(
        {"proj": g0["proj"], "pred": g0["pred"]})))
    runs = []
    tr = dynamics.gradient_flow(problem.loss, params0, t1=T, save_at=save_at, observe=problem.observe,
                                observe_args=True, args=d_flow, solver=cfg.solver, rtol=cfg.rtol, atol=cfg.atol,
                                max_steps=cfg.max_steps, throw=False)
    runs.append(("flow", None, tr))
    opt = problem.optimizer  # one optimiser object (one compile): lr enters as a loss scale, exact for SGD+momentum
    for lr in cfg.lrs:
        eff = lr / (1.0 - cfg.momentum)
        every = max(1, int(round(T / cfg.num_saves / eff)))
        tr = dynamics.discrete(problem.loss, params0, opt, steps=every * cfg.num_saves, observe=problem.observe,
                               observe_every=every, args=(x1, x2, stats, jnp.asarray(lr, dtype), a), lr=eff,
                               observe_args=True, throw=False)
        runs.append(("sgd", lr, tr))
    rows, curves = [], []
    premise = None
    for kind, lr, tr in runs:
        s = _series(problem, tr, d_flow)
        if premise is None:  # premises at the initial state, timescale ratio of the flow's first interval
            premise = _premises(problem, (params0, d_flow), activation, s["timescale_ratio"][1])
        esc = dynamics.escape_time(tr, "std_threshold", threshold=threshold, key="std")
        ratio = s["timescale_ratio"][np.isfinite(s["timescale_ratio"])]
        row = {
            "init": init, "activation": activation, "head_kind": head_kind(activation),
            "batch_norm": problem.batch_norm, "seed": seed, "dynamics": kind,
            "lr": lr if lr is not None else 0.0, "ok": bool(tr.ok), "status": tr.status,
            "n_steps": int(tr.n_steps), "t_final": float(tr.t_final),
            # held_initially: outputs already above the threshold at t = 0 (e.g. BatchNorm rescales a
            # collapsed spread at once); counted as an escape at t = 0 and flagged.
            "escaped": bool(esc.escaped), "held_initially": bool(esc.held_initially),
            "escape_time": esc.time if esc.escaped else float("nan"), "escape_threshold": threshold,
            "dead_head_init": dead,
            "std_init": s["std"][0], "std_final": s["std"][np.where(tr.saved)[0][-1]],
            "cond_init": s["cond"][0], "cond_final": s["cond"][np.where(tr.saved)[0][-1]],
            "erank_rankme_final": s["erank_rankme"][np.where(tr.saved)[0][-1]],
            "erank_squared_final": s["erank_squared"][np.where(tr.saved)[0][-1]],
            "lambda_min_H_eff_init": s["lambda_min_H_eff"][0],
            "lambda_max_H_eff_init": s["lambda_max_H_eff"][0],
            "lambda_min_H_eff_min": float(np.nanmin(s["lambda_min_H_eff"])),
            "timescale_ratio_first": s["timescale_ratio"][1] if len(s["timescale_ratio"]) > 1 else float("nan"),
            "timescale_ratio_median": float(np.median(ratio)) if ratio.size else float("nan"),
            "spearman_std_cond": _spearman(s["std"], s["cond"]),
            "loss_final": s["loss"][np.where(tr.saved)[0][-1]],
            **premise,
        }
        rows.append(row)
        curves.append({"init": init, "activation": activation, "batch_norm": problem.batch_norm,
                       "seed": seed, "dynamics": kind, "lr": row["lr"], "t": tr.ts,
                       **{k: s[k] for k in ("std", "cond", "lambda_min_H_eff", "timescale_ratio",
                                            "erank_rankme", "erank_squared")}})
    return rows, curves


def _frac(rows):
    return (sum(r["escaped"] for r in rows) / len(rows)) if rows else float("nan")


def verdict(rows, escape_init="collapsed"):
    """Rule: only runs from the constructed collapsed state (or the pseudo-collapse when no
    collapsed init was run) count; runs whose head is dead at the start (every head gradient
    exactly zero) or whose integration failed are excluded and counted. Premise: if H_L is
    indefinite (lambda_min(H_L) < -tol) at the initial state of every counted run, the verdict
    is 'premise violated' (Thm 4.1 then says nothing) and the pattern below is reported only.
    Otherwise, with E_smooth = fraction of smooth-head (Swish/GELU) gradient-flow runs without BN
    that escape (std criterion met at a save time <= T; at t = 0 when BN un-collapses the outputs at once, flagged held_initially), E_lin = the same for linear/ReLU heads, and
    E_fin = fraction of linear/ReLU runs with SGD or BN that escape: supported if E_smooth >= 0.5,
    E_lin = 0 and E_fin > 0; not supported if E_lin > 0 or E_smooth = 0; inconclusive otherwise."""
    inits = {r["init"] for r in rows}
    use = escape_init if escape_init in inits else ("pseudo" if "pseudo" in inits else sorted(inits)[0])
    rows = [r for r in rows if r["init"] == use]
    dead = [r for r in rows if r["dead_head_init"]]
    failed = [r for r in rows if not r["ok"] and r["dynamics"] == "flow"]
    counted = [r for r in rows if not r["dead_head_init"] and not (r["dynamics"] == "flow" and not r["ok"])]
    flow = [r for r in counted if r["dynamics"] == "flow" and not r["batch_norm"]]
    smooth_flow = [r for r in flow if r["head_kind"] == "smooth"]
    lin_flow = [r for r in flow if r["head_kind"] in ("linear", "piecewise")]
    lin_fin = [r for r in counted if r["head_kind"] in ("linear", "piecewise")
               and (r["dynamics"] == "sgd" or r["batch_norm"])]
    e_s, e_l, e_f = _frac(smooth_flow), _frac(lin_flow), _frac(lin_fin)
    pattern = bool(smooth_flow and lin_flow and lin_fin and e_s >= 0.5 and e_l == 0 and e_f > 0)
    stats = {
        "init_used": use, "runs_counted": len(counted), "dead_head_runs": len(dead), "failed_flow_runs": len(failed),
        "E_smooth_flow": e_s, "E_linear_relu_flow": e_l, "E_linear_relu_sgd_or_bn": e_f,
        "dynamical_pattern_holds": int(pattern),
        "H_L_psd_fraction": (sum(r["H_L_psd"] for r in counted) / len(counted)) if counted else float("nan"),
        "timescale_ratio_median": float(np.nanmedian([r["timescale_ratio_median"] for r in counted]))
        if counted else float("nan"),
    }
    if not counted or not smooth_flow or not lin_flow:
        return "inconclusive", stats
    if not any(r["H_L_psd"] for r in counted):
        return "premise violated", stats
    if pattern:
        return "supported", stats
    if e_l > 0 or e_s == 0:
        return "not supported", stats
    return "inconclusive", stats


def spearman_table(rows, base_lr):
    """Mean over seeds of Spearman(std, cond) along SGD runs at the paper's lr, without BN."""
    out = []
    keyed = collections.defaultdict(list)
    for r in rows:
        if r["dynamics"] == "sgd" and abs(r["lr"] - base_lr) < 1e-12 and not r["batch_norm"]:
            keyed[(r["init"], r["activation"])].append(r["spearman_std_cond"])
    paper_map = {("normal", "swish"): PAPER_SPEARMAN["normal init, Swish"],
                 ("pseudo", "swish"): PAPER_SPEARMAN["collapsed init, Swish"],
                 ("pseudo", "relu"): PAPER_SPEARMAN["collapsed init, ReLU"]}
    for (init, act), vals in sorted(keyed.items()):
        v = np.asarray(vals, float)
        out.append({"init": init, "activation": act, "spearman_std_cond": float(np.nanmean(v)) if np.any(np.isfinite(v)) else float("nan"),
                    "seeds": len(vals), "paper": paper_map.get((init, act), float("nan"))})
    return out


def run(config, out_dir) -> dict:
    dtype = _dtype(config)
    x_all = load_inputs(config, dtype)
    rows, curves = [], []
    for bn in config.batch_norm:
        problem = Problem(config, bn, x_all.shape[1], dtype)
        for act in config.activations:
            for ii, init in enumerate(config.inits):
                for s in range(config.seeds):
                    seed = config.seed + s
                    # The same seed gives the same data, views and initial weights across heads.
                    k = jax.random.fold_in(jax.random.PRNGKey(seed), ii)
                    r, c = run_case(config, problem, act, init, x_all, seed, k, dtype)
                    rows += r
                    curves += c
    v, stats = verdict(rows)
    sp = spearman_table(rows, config.base_lr)
    headline = dict(stats)
    for r in sp:
        headline[f"spearman_{r['init']}_{r['activation']}"] = r["spearman_std_cond"]
    paper = {f"spearman_{k.replace(' init, ', '_').replace('collapsed', 'pseudo').lower()}": val
             for k, val in PAPER_SPEARMAN.items()}
    _figures(curves, out_dir, stats["init_used"])
    return {"verdict": v, "verdict_rule": verdict.__doc__.split("Rule: ")[1].replace("\n    ", " "),
            "headline": headline, "paper": paper, "rows": rows, "spearman": sp,
            "premises_note": ("Thm 4.1 needs H_L PSD; SimSiam's negative cosine has an indefinite H_L "
                              "(DESIGN.md s.4). H_L_psd_fraction says how often the premise held at t = 0.")}


def _figures(curves, out_dir, init_used):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sel = [c for c in curves if c["init"] == init_used]
    acts = sorted({c["activation"] for c in sel})
    bns = sorted({c["batch_norm"] for c in sel})
    lrs = sorted({c["lr"] for c in sel if c["dynamics"] == "sgd"})
    colors = dict(zip(lrs, ["tab:red", "tab:orange", "tab:green", "tab:purple", "tab:brown"]))
    for name, ylabel, fname in (("std", "std of L2-normalised outputs", "escape_std"),
                                ("lambda_min_H_eff", "lambda_min(H_eff)", "lambda_min_heff")):
        fig, axes = plt.subplots(len(bns), len(acts), figsize=(3.2 * len(acts), 2.6 * len(bns)), squeeze=False)
        for i, bn in enumerate(bns):
            for j, act in enumerate(acts):
                ax = axes[i, j]
                for c in sel:
                    if c["activation"] != act or c["batch_norm"] != bn:
                        continue
                    style = dict(color="k", lw=1.5) if c["dynamics"] == "flow" else dict(color=colors[c["lr"]], lw=0.9, ls="--")
                    ax.plot(c["t"], c[name], **style)
                ax.set_title(f"{act}, BN={bn}", fontsize=8)
                ax.set_xlabel("t", fontsize=7)
                if j == 0:
                    ax.set_ylabel(ylabel, fontsize=7)
                if name == "lambda_min_H_eff":
                    ax.axhline(0, color="gray", lw=0.5)
                ax.tick_params(labelsize=6)
        handles = [plt.Line2D([], [], color="k", lw=1.5, label="gradient flow")]
        handles += [plt.Line2D([], [], color=colors[lr], ls="--", label=f"SGD+mom lr={lr:g}") for lr in lrs]
        fig.legend(handles=handles, loc="upper center", ncol=len(handles), fontsize=7, frameon=False)
        fig.suptitle(f"init: {init_used}", y=1.04, fontsize=8)
        common.save_figure(fig, out_dir, fname)


def _floats(d: dict) -> dict:
    """JSON round trip stores non-finite floats as "nan"/"inf"/"-inf" strings: turn them back."""
    return {k: (float(v) if isinstance(v, str) and v in ("nan", "inf", "-inf") else v) for k, v in d.items()}


def report(results, rel_dir) -> str:
    h = _floats(results["headline"])
    rows = [_floats(r) for r in results["rows"]]
    table = []
    groups = collections.OrderedDict()
    for r in rows:
        groups.setdefault((r["init"], r["activation"], r["batch_norm"], r["dynamics"], r["lr"]), []).append(r)
    for (init, act, bn, dyn, lr), rs in groups.items():
        esc_t = [r["escape_time"] for r in rs if r["escaped"]]
        table.append({
            "init": init, "head": act, "BN": bn, "dynamics": dyn if dyn == "flow" else f"SGD lr={lr:g}",
            "escaped": f"{sum(r['escaped'] for r in rs)}/{len(rs)}",
            "t_escape": float(np.mean(esc_t)) if esc_t else "-",
            "dead": sum(r["dead_head_init"] for r in rs), "ok": f"{sum(r['ok'] for r in rs)}/{len(rs)}",
            "std t=0": float(np.mean([r["std_init"] for r in rs])),
            "std end": float(np.nanmean([r["std_final"] for r in rs])),
            "lmin H_eff t=0": float(np.mean([r["lambda_min_H_eff_init"] for r in rs])),
            "H_L PSD": f"{sum(r['H_L_psd'] for r in rs)}/{len(rs)}",
            "head/bb rate": float(np.nanmedian([r["timescale_ratio_median"] for r in rs])),
        })
    sp = [_floats(r) for r in results["spearman"]]
    text = [
        f"Counted runs from the `{h['init_used']}` init: {h['runs_counted']} (dead heads excluded: "
        f"{h['dead_head_runs']}; failed flows: {h['failed_flow_runs']}). Escape fractions: smooth heads under "
        f"gradient flow (no BN) {h['E_smooth_flow']:.3g}; linear/ReLU heads under gradient flow (no BN) "
        f"{h['E_linear_relu_flow']:.3g}; linear/ReLU heads with SGD or BN {h['E_linear_relu_sgd_or_bn']:.3g}. "
        f"The theorem's dynamical pattern {'holds' if h['dynamical_pattern_holds'] else 'does not hold'} here. "
        f"Premise H_L PSD held at t = 0 in a fraction {h['H_L_psd_fraction']:.3g} of the counted runs "
        f"(SimSiam's negative cosine; DESIGN.md s.4); median head/backbone relative-update ratio "
        f"{h['timescale_ratio_median']:.3g} (timescale separation needs > 1).",
        "",
        common.markdown_table(table),
        "",
        "Spearman(std of normalised outputs, covariance condition number) along SGD at the paper's lr, "
        "no BN, mean over seeds (`pseudo` is the paper's 'collapsed' init):",
        "",
        common.markdown_table(sp),
        "",
        f"![std of normalised outputs]({rel_dir}/escape_std.png)",
        f"![lambda_min of H_eff]({rel_dir}/lambda_min_heff.png)",
    ]
    return "\n".join(text)
