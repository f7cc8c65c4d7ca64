"""The states of experiment 3 and one row per state: the head, its certified equilibrium or Siamese collapsed state,
and Thm 4.1's premises and conclusion there (the package docstring describes the states)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from experiments import stationary_heads
from ssl_geometry import as_function, curvature, geometry, heads, losses


def online_head(cfg, activation, batch_norm, scale, predictor):
    proj = heads.mlp(
        cfg.data.d,
        (cfg.model.hidden,),
        cfg.model.k,
        activation=activation,
        batch_norm=batch_norm,
        bias=False,
        scale=scale,
        dtype=jnp.float64,
    )
    if not predictor:
        return proj
    pred = heads.mlp(
        cfg.model.k,
        (cfg.model.pred_hidden,),
        cfg.model.k,
        activation=activation,
        batch_norm=batch_norm,
        bias=False,
        dtype=jnp.float64,
    )
    return heads.compose(proj, pred)


def siamese_problem(cfg, objective, activation, batch_norm, state, key):
    """``(model, variables, loss_fn, z1, train, fixed)`` for a Siamese objective at a collapsed/pseudo-collapsed
    state; ``fixed`` holds the held-fixed arrays (``u2``: second view's projection, BYOL's ``t2``)."""
    k_head, k_c, k_z, k_v, k_t = jax.random.split(key, 5)
    scale = cfg.model.pseudo_collapse_scale if state == "pseudo_collapsed" else 1.0
    predictor = objective in cfg.analysis.predictor_objectives
    model = online_head(cfg, activation, batch_norm, 1.0, predictor)
    variables = model.init(k_head)
    if scale != 1.0:  # pseudo-collapse: the projector's weights x 0.1, the predictor unchanged
        if predictor:
            p = dict(variables["params"])
            p["0"] = heads.scale_weights({"params": p["0"]}, scale)["params"]
            variables = {**variables, "params": p}
        else:
            variables = heads.scale_weights(variables, scale)
    n, d = cfg.data.n, cfg.data.d
    if state == "collapsed":
        z1 = jnp.tile(jax.random.normal(k_c, (1, d), jnp.float64), (n, 1))
        z2 = z1
    else:
        z1 = jax.random.normal(k_z, (n, d), jnp.float64)
        z2 = z1 + cfg.data.view_noise * jax.random.normal(k_v, z1.shape, jnp.float64)
    train = bool(batch_norm)
    online = as_function(model, variables, train=train)
    proj_model = online_head(cfg, activation, batch_norm, 1.0, False)
    proj_vars = variables
    if predictor:  # the projector's part of the composed variables
        proj_vars = {
            "params": variables["params"]["0"],
            **({"batch_stats": variables["batch_stats"]["0"]} if "batch_stats" in variables else {}),
        }
    u2 = as_function(proj_model, proj_vars, train=train)(z2)  # the second view's projection (stop-gradient)
    if objective == "simsiam":  # L = D(p1, sg z2)/2 + D(p2, sg z1)/2: only the first term depends on z1
        loss_fn = lambda p: 0.5 * losses.negative_cosine(p, u2)
    elif objective == "byol":  # L = l(p1, sg t2) + l(p2, sg t1): only l(p1, sg t2) depends on p1
        target = proj_model.init(k_t)  # the target projector: an independent draw (a lagging EMA)
        t_fn = as_function(proj_model, target, train=train)
        t1, t2, p2 = t_fn(z1), t_fn(z2), online(z2)
        loss_fn = lambda p: losses.byol(p, p2, t1, t2)
    else:
        fn = losses.get(objective)
        loss_fn = lambda u: fn(u, u2)
    fixed = {"u2": u2, **({"t2": t2} if objective == "byol" else {})}
    return model, variables, loss_fn, z1, train, fixed


def margin(lambda_min_h_eff: float, lambda_min_m: float) -> float:
    """``lambda_min(H_eff) / |lambda_min(M)|``: how far ``G`` holds off ``M``'s negative curvature (NaN when
    ``lambda_min(M) = 0``, e.g. a linear head). Below 0: unstable; above 0: stable with that margin."""
    return lambda_min_h_eff / abs(lambda_min_m) if lambda_min_m != 0 else float("nan")


def _row(cfg, res, key_info):
    p = res.premises
    return {
        **key_info,
        "head_kind": ("batchnorm/" + res.head_kind) if key_info["batch_norm"] else res.head_kind,
        "conclusion": res.conclusion,
        "predicted": res.predicted,
        "method": res.method,
        "eig_tol": res.eig_tol,
        "holds": bool(p.holds_except_smoothness),
        "stationary": bool(p.stationary_z and p.stationary_head),
        "grad_z_ratio": p.grad_z_ratio,
        "grad_head_ratio": p.grad_head_ratio,
        "H_L_psd": p.loss_hessian_psd,
        "lambda_min_H_L": res.lambda_min["loss_hessian"],
        "rho_norm": p.residual_norm,
        "rho_nonzero": p.residual_nonzero,
        "lambda_min_H_eff": res.lambda_min["full"],
        "lambda_max_H_eff": res.lambda_max["full"],
        "lambda_min_G": res.lambda_min["metric"],
        "lambda_min_M": res.lambda_min["interaction"],
        "lambda_max_M": res.lambda_max["interaction"],
        "violated": list(p.violated()),
        "margin": margin(res.lambda_min["full"], res.lambda_min["interaction"]),
    }


def equilibrium_state(cfg, objective, activation, key, residual_scale):
    """``(model, variables, eq)``: the certified collapsed equilibrium of case ``key`` at ``residual_scale`` -- the
    projector drawn from ``key``, ``c ~ N(0, I_d)`` from ``fold_in(key, 1)``, the residual from ``fold_in(key, 2)``
    (:func:`ssl_geometry.geometry.collapsed_equilibrium`), with Thm 4.1's premises at it (``eq.premises``: the
    activation and the variant's dense threshold; ``H_L``'s Lanczos run the library's, 100 steps from ``PRNGKey(0)``,
    since ``H_L`` only has to be PSD). :func:`run_case`, its certificate and the sweeps build it alike."""
    model = online_head(cfg, activation, False, 1.0, False)
    variables = model.init(key)
    c = jax.random.normal(jax.random.fold_in(key, 1), (cfg.data.d,), jnp.float64)
    eq = geometry.collapsed_equilibrium(
        model,
        variables,
        objective,
        c,
        cfg.data.n,
        key=jax.random.fold_in(key, 2),
        residual_scale=residual_scale,
        activation=activation,
        max_dense_dim=cfg.analysis.max_dense_dim,
    )
    return model, variables, eq


def spectrum(cfg, model, variables, eq, key, steps, parts=geometry.SPECTRUM_PARTS):
    """:func:`ssl_geometry.geometry.collapse_spectrum` of ``parts`` at equilibrium ``eq``: ``H_eff`` (``"full"``) with
    the Lanczos budget ``steps``, ``G`` and ``M`` with ``analysis.metric_interaction_lanczos_steps`` (their extremes
    are reported, only the sign of ``lambda_min(H_eff)`` decides)."""
    side = curvature.SolverOptions(num_steps=int(cfg.analysis.metric_interaction_lanczos_steps))
    opts = {p: curvature.SolverOptions(num_steps=steps) if p == "full" else side for p in parts}
    head_fn = as_function(model, variables, train=False)
    return geometry.collapse_spectrum(
        head_fn, eq.loss_fn, eq.z, max_dense_dim=cfg.analysis.max_dense_dim, key=key, options=opts, parts=parts
    )


def classify_resolved(cfg, model, variables, eq, key):
    """``(classification, steps)``: Thm 4.1's conclusion (:func:`ssl_geometry.geometry.thm41_conclusion`) from the
    premises the construction measured (``eq.premises``) and :func:`spectrum`, ``H_eff`` with the Lanczos budget
    ``steps = analysis.equilibrium_lanczos_steps``, measured again with ``2 steps`` (up to
    ``analysis.equilibrium_lanczos_max_steps``; ``H_eff`` alone, ``G`` and ``M`` are kept) while a Lanczos measurement
    leaves the sign of ``lambda_min(H_eff)`` unresolved, ``|lambda_min| <= tol``.

    Only the measurement is read, never a certificate. A dense result is exact and is never measured again (its
    ``0`` is a zero eigenvalue); a measurement still unresolved at the cap is returned as it is.
    """
    a = cfg.analysis
    steps, cap = int(a.equilibrium_lanczos_steps), int(a.equilibrium_lanczos_max_steps)
    if not 0 < steps <= cap:
        raise ValueError(
            f"need 0 < analysis.equilibrium_lanczos_steps <= analysis.equilibrium_lanczos_max_steps; got {steps} "
            f"and {cap}."
        )
    side = spectrum(cfg, model, variables, eq, key, steps, parts=("metric", "interaction"))
    while True:
        full = spectrum(cfg, model, variables, eq, key, steps, parts=("full",))
        unresolved = abs(full.lambda_min["full"]) <= full.sign_tol["full"]
        if full.method != "lanczos" or not unresolved or 2 * steps > cap:
            break
        steps *= 2
    merged = full._replace(
        **{
            f: {**getattr(side, f), **getattr(full, f)}
            for f in ("lambda_min", "lambda_max", "sign_tol", "residual_norms")
        },
        notes=tuple(dict.fromkeys(side.notes + full.notes)),
    )
    return geometry.thm41_conclusion(eq.premises, merged), steps


def run_case(cfg, objective, activation, batch_norm, state, key, residual_scale=float("nan"), built=None):
    """One row: the state, its Thm 4.1 premises and conclusion (a certified equilibrium: measured by
    :func:`classify_resolved`, the state from ``built()`` where given, the run's one build of it shared with its
    certificate, else :func:`equilibrium_state`; a collapsed state: also the head driven to stationarity there,
    :func:`experiments.stationary_heads.stationary_head_state`)."""
    info = {
        "objective": objective,
        "activation": activation,
        "batch_norm": bool(batch_norm),
        "state": state,
        "residual_scale": residual_scale,
    }
    opts = dict(activation=activation, max_dense_dim=cfg.analysis.max_dense_dim, key=key)
    if state == "equilibrium":
        model, variables, eq = built() if built else equilibrium_state(cfg, objective, activation, key, residual_scale)
        res, steps = classify_resolved(cfg, model, variables, eq, key)
        return {
            **_row(cfg, res, info),
            "lanczos_steps": steps,
            "certified": eq.certified,
            "null_dim": eq.null_dim,
            "construction_error": eq.residual_error,
        }
    model, variables, loss_fn, z1, train, _ = siamese_problem(cfg, objective, activation, batch_norm, state, key)
    res = geometry.classify_collapse(model, loss_fn, z1, variables=variables, train=train, **opts)
    row = {**_row(cfg, res, info), "certified": False, "null_dim": -1, "construction_error": float("nan")}
    if state == "collapsed":
        f = geometry.identical_rows_finding(model, variables, loss_fn, z1, train=train)
        row.update(
            rows_identical=f["rows_identical"],
            forces_zero_residual=f["forces_zero_residual"],
            sigma_min_head_jacobian=f["sigma_min_head_jacobian"],
            rho_bound=f["rho_bound"],
        )
        st = stationary_heads.stationary_head_state(
            model,
            variables,
            loss_fn,
            z1,
            key=jax.random.fold_in(key, 3),
            train=train,
            max_iter=cfg.analysis.stationarity_max_iter,
        )
        row.update({f"st_{k}": v for k, v in st.items()})
    return row


def all_cases(cfg):
    a = cfg.analysis
    for state in a.states:
        objectives = a.equilibrium_objectives if state == "equilibrium" else a.siamese_objectives
        for bn in cfg.model.batch_norm:
            if bn and state != "pseudo_collapsed":
                continue  # train-mode BN at exact collapse maps every row to beta: no state to evaluate
            for objective in objectives:
                for act in cfg.model.activations:
                    scales = a.residual_scales[objective] if state == "equilibrium" else [float("nan")]
                    for s in scales:
                        yield objective, act, bn, state, s
