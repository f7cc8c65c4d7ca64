"""Experiment 7: the same geometric measurements across SSL objectives, heads and seeds.

Backbone-free setting: representations ``z ~ N(0, Sigma)`` in R^d (log-uniform
spectrum, random eigenbasis) and two views

    z_a = z + aug_scale * A xi_a + iso_noise * xi'_a,     a = 1, 2,

where ``A`` (``d x aug_dim``, orthonormal columns) spans the "augmentation"
directions. Per objective, head activation and seed an MLP head (projector ``d -> hidden -> k``;
plus a predictor ``k -> pred_hidden -> k`` for SimSiam, BYOL and MoCo v3; an EMA target projector
for BYOL, MoCo v3 and DINO, with BYOL's cosine decay schedule, updated from the parameters
*before* each step) is trained with Adam on fresh batches through :func:`ssl_geometry.fit`, in
float64 (:mod:`.problem`). Every objective is trained with the config's head (``model.activation``)
for every seed; DINO also with each head of ``analysis.thm41_activations``. Then:

* **Thm 4.1** (registry claims ``thm4.1-smooth-unstable``, ``thm4.1-linear-psd``, experiment 3's
  rules): a certified collapsed equilibrium of each trained DINO projector against a fixed teacher
  (:func:`ssl_geometry.geometry.collapsed_equilibrium`, one per residual scale) -- DINO is the one
  objective here whose collapsed equilibria can have ``rho != 0``;
* **stationarity forces rho = 0** (``stationarity-forces-rho-zero``): at the collapsed state of every
  other objective's trained head (both views at one point ``c``) the head is driven to stationarity
  (:func:`experiments.stationary_heads.stationary_head_state`) and the residual read there, beside
  :func:`ssl_geometry.geometry.identical_rows_finding`'s bound;
* **Sec. 5** (``sec5-metric-degeneracy``, :mod:`.sec5`): degeneracy ratios along the augmentation
  subspace against random, between-sample and data directions, for the trained and the untrained
  head, an orthogonal subspace as the negative control, and the paper's orbit compression;
* reported, not counted: effective rank (both named definitions), covariance condition number and
  mean normalised std of the trained head's outputs; Thm 4.1's premises and spectrum at the trained
  and at a pseudo-collapsed state (every projector weight matrix times ``pseudo_collapse_scale``),
  neither of which is an equilibrium (the premises say so). As in experiment 3 the Hessian is
  ``hess_{z1} L`` of the first view's online outputs, the second view and the targets held fixed.
"""

from __future__ import annotations

import jax

from experiments import common, rules
from experiments.objectives import sec5
from experiments.objectives.analysis import (
    analyse_objective,
    collapsed_stationarity,
    dino_equilibria,
    geometry_row,
    representation_stats,
    run_objective,
    train_objective,
    with_activation,
)
from experiments.objectives.dry_run import dry_measure
from experiments.objectives.problem import (
    FAMILIES,
    PREDICTOR,
    TARGET,
    apply_heads,
    build_heads,
    first_view_problem,
    objective_loss,
    online_head,
    problem_data,
    sample_views,
    scale_projector,
    train,
    training_step,
)
from experiments.objectives.reporting import figures, report  # the reporting half

NAME = "objectives"
TITLE = "Objectives"
#: The registry claims (experiments/claims/) this experiment decides.
CLAIMS = ("thm4.1-smooth-unstable", "thm4.1-linear-psd", "stationarity-forces-rho-zero", "sec5-metric-degeneracy")
CLAIM = (
    "Across contrastive, decorrelation and distillation objectives: Thm 4.1 (a smooth head makes a collapsed "
    "equilibrium with rho != 0 and H_L PSD strictly unstable; a linear or ReLU head does not) on every head and "
    "seed; head stationarity forces rho = 0 at the Siamese, contrastive and decorrelation objectives' collapsed "
    "states; and the trained head's metric degenerates along the augmentation directions (Sec. 5)."
)
#: Honours ``config.dry_run``: the variant's widths, every objective trained 2 steps at 1/8 of the batch and measured
#: at 1/8 of the geometry batch, one seed, the config's head only; training and analysis each timed at two reduced
#: sizes and projected apart (:func:`experiments.objectives.dry_run.dry_measure`).
DRY_RUN = True


def measure(config) -> dict:
    """Every objective trained and measured per seed (module docstring); ``config.dry_run``:
    :func:`experiments.objectives.dry_run.dry_measure`."""
    common.require_x64(NAME)
    if config.dry_run:
        return dry_measure(config)
    data = problem_data(config)
    k_o = jax.random.fold_in(jax.random.PRNGKey(config.seed), 3)
    rows, equilibria, curves = [], [], {}
    for s in range(config.seeds):
        for i, name in enumerate(config.train.objectives):
            row, eqs, vals = run_objective(
                config, name, jax.random.fold_in(jax.random.fold_in(k_o, i), s), data, config.train.steps, s, full=True
            )
            rows.append(row)
            equilibria += eqs
            curves[f"{name}/{config.model.activation}/seed{s}"] = [float(v) for v in vals]
        objectives = list(config.train.objectives)
        i = objectives.index("dino") if "dino" in objectives else len(objectives)
        for act in config.analysis.thm41_activations:
            if act == config.model.activation:
                continue
            _, eqs, vals = run_objective(
                with_activation(config, act),
                "dino",
                jax.random.fold_in(jax.random.fold_in(k_o, i), s),
                data,
                config.train.steps,
                s,
                full=False,
            )
            equilibria += eqs
            curves[f"dino/{act}/seed{s}"] = [float(v) for v in vals]
    return {"rows": rows, "equilibria": equilibria, "curves": curves}


def thm41_states(equilibria) -> tuple[list, list]:
    """``(smooth, linear/ReLU)`` certified equilibria as :func:`experiments.rules.decide_smooth_unstable` and
    :func:`~experiments.rules.decide_linear_psd` read them."""
    eq = [e for e in equilibria if e["exists"] and e["certified"] and e["holds"]]
    state = lambda e: {
        "objective": "dino_fixed_teacher",
        "lambda_min": e["lambda_min_H_eff"],
        "tol": e["eig_tol"],
        "lambda_min_M": e["lambda_min_M"],
        "label": f"dino/{e['activation']}/seed {e['seed']}/scale {e['residual_scale']:g}",
    }
    return (
        [state(e) for e in eq if e["head_kind"] == "smooth"],
        [state(e) for e in eq if e["head_kind"] in ("linear", "piecewise")],
    )


def stationarity_states(rows) -> list[dict]:
    """The collapsed states as :func:`experiments.rules.decide_rho_zero` reads them."""
    return [
        {
            "label": f"{r['objective']}/{r['activation']}/seed {r['seed']}",
            "family": "siamese" if r["objective"] in ("simsiam", "byol") else r["family"],
            "stationary": r["st_stationary"],
            "rho": r["st_rho"],
            "rho_ref": r["st_rho_ref"],
            "residual_tol": r["st_residual_tol"],
            **{k: r[f"st_{k}"] for k in ("jac_sigma_min", "jac_sigma_max", "jac_rows", "jac_cols")},
        }
        for r in rows
        if "st_stationary" in r
    ]


def decide(m, config) -> dict:
    rows = m["rows"]
    smooth, lin = thm41_states(m["equilibria"])
    items = [
        *rules.decide_smooth_unstable(smooth),
        rules.decide_linear_psd(lin),
        rules.decide_rho_zero(stationarity_states(rows)),
    ]
    for r in rows:
        s = r["sec5"]
        items.append(
            rules.decide_sec5(
                s["augmentations"],
                s["orbits"],
                negative=s["negative"],
                orbits_vs_untrained=s["orbits"].get("vs_untrained"),
                premises={"loss_fell": r["loss_fell"], "z_full_rank": r["z_full_rank"]},
                subject=f"{r['objective']} (seed {r['seed']})",
            )
        )
    sec5_items = [i for i in items if i["id"] == rules.SEC5]
    headline = {
        "objectives": len({r["objective"] for r in rows}),
        "seeds": len({r["seed"] for r in rows}),
        "dino_equilibria_certified": len(smooth) + len(lin),
        "dino_smooth_equilibria": len(smooth),
        "dino_smooth_unstable": sum(s["lambda_min"] < -s["tol"] for s in smooth),
        "collapsed_states_head_stationary": sum(s["stationary"] for s in stationarity_states(rows)),
        "collapsed_states_dh_dtheta_full_row_rank": sum(
            rules.rho_zero_full_row_rank(s) for s in stationarity_states(rows)
        ),
        **{
            f"sec5_{v.replace(' ', '_')}": sum(i["verdict"] == v for i in sec5_items)
            for v in ("supported", "not supported", "inconclusive", "premise violated")
        },
        "orbit_compression_min": min(r["sec5"]["orbits"]["S"] for r in rows),
        "orbit_compression_max": max(r["sec5"]["orbits"]["S"] for r in rows),
    }
    return {"claims": items, "headline": headline}
