"""Experiments 2 (metric adaptation, Prop 3.3) and 7 (objectives) end to end on their tiny configs,
plus exact checks of the pieces they are built from."""

import math

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from experiments import common, metric_adaptation, objectives, suite
from experiments.configs import objectives as objectives_config
from ssl_geometry import paper, riemann


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("geometry_suite")
    res = {name: suite.run_one(name, "tiny", out) for name in ("metric_adaptation", "objectives")}
    return out, res


def _finite_numbers(d):
    return all(math.isfinite(v) for v in d.values() if isinstance(v, (int, float)) and not isinstance(v, bool))


# ------------------------------------------------------------------ experiment 2


@pytest.mark.slow  # an end-to-end run (the slow tier of .ci/run)
def test_metric_adaptation_schema_rule_and_flat_control(tiny_runs):
    out, res = tiny_runs
    r = res["metric_adaptation"]
    common.check_verdict(r)
    assert _finite_numbers(r["headline"])
    cfg = ml_collections.ConfigDict(r["config"])
    m = r["measurements"]
    recs = {c["id"]: c for c in r["claims"]}
    assert set(recs) == {"thm3.2-depth", "prop3.3-barrier"} and "verdict" not in cfg
    again = metric_adaptation.decide(m, cfg)
    assert [c["verdict"] for c in again["claims"]] == [recs[c["id"]]["verdict"] for c in again["claims"]]
    # Matched sizes: every counted head within param_match of the depth-2 head; the affine control exactly it.
    ref = m["reference_params"]
    assert ref == metric_adaptation.head_params(cfg.model.d, cfg.model.k, 2, cfg.model.width)
    for f in m["isotropy_fits"]:
        assert f["matched"] == (abs(f["params"] - ref) <= 0.1 * ref)
    affine = [f for f in m["isotropy_fits"] if f["head"] == "linear" and f["matched"]]
    assert len(affine) == 1 and affine[0]["params"] == ref and affine[0]["depth"] == 2
    ctrl = next(c for c in m["curvature"] if c["loss"] == "mse")
    others = [c for c in m["curvature"] if c["loss"] != "mse" and c["definite_points"] > 0]
    # Flat control: constant metric 2I -> curvature exactly 0, a constant W whitens it to rounding.
    assert ctrl["max_abs_scalar_curvature"] < 1e-12 and ctrl["max_abs_sectional_curvature"] < 1e-12
    assert ctrl["constant_W_residual"] < 1e-12 and ctrl["metric_cv"] < 1e-12
    # Curved losses: non-zero curvature and a residual no constant W removes.
    for c in others:
        assert c["max_abs_scalar_curvature"] > 1e-3 and c["constant_W_residual"] > 1e-3
        if c["metric_dim"] == 2:  # in 2-d every plane is the tangent plane: K = S / 2 (checks the contractions)
            assert c["max_abs_sectional_curvature"] == pytest.approx(c["max_abs_scalar_curvature"] / 2, rel=1e-8)
        assert c["constant_W_rms"] <= c["constant_W_residual"] + 1e-12
    # A linear head has a constant Jacobian: CV(J^T J) = 0 to rounding; a swish MLP's varies.
    for row in m["variation"]:
        if row["depth"] == 1 or row["activation"] == "identity":
            assert row["cv_JtJ"] < 1e-12
        else:
            assert row["cv_JtJ"] > 1e-3
    for f in m["isotropy_fits"]:  # both affine heads (plain and two linear layers): a constant Jacobian
        if f["head"] == "linear":
            assert f["cv_JtJ_along_curve"] < 1e-12
    assert (out / "metric_adaptation" / "metric_adaptation.png").exists()
    text = metric_adaptation.report(r, "figs")
    assert "| loss | domain |" in text and "| activation | depth |" in text
    assert "](figs/metric_adaptation.png)" in text


def _fit(activation, depth, eps, params=132, matched=True):
    head = "linear" if activation in ("identity", "affine") else activation
    return {
        "activation": activation,
        "depth": depth,
        "head": head,
        "params": params,
        "matched": matched,
        "eps_max": eps,
    }


AFFINE_PLAIN, AFFINE_MATCHED = _fit("affine", 1, 5.0, params=16, matched=False), _fit("identity", 2, 0.8)


@pytest.mark.parametrize(
    "rows, expected",
    [
        ([AFFINE_PLAIN, AFFINE_MATCHED, _fit("tanh", 2, 0.05), _fit("tanh", 3, 0.2, params=140)], "supported"),
        ([AFFINE_PLAIN, AFFINE_MATCHED, _fit("tanh", 2, 0.15)], "inconclusive"),  # not epsilon-isotropic
        ([AFFINE_PLAIN, _fit("identity", 2, 0.12), _fit("tanh", 2, 0.05)], "inconclusive"),  # < 3x below the affine
        # A fit at an unmatched size counts for nothing, however good (nor does the plain affine head, however bad).
        (
            [AFFINE_PLAIN, AFFINE_MATCHED, _fit("tanh", 3, 0.01, params=400, matched=False), _fit("tanh", 2, 0.5)],
            "inconclusive",
        ),
        (
            [_fit("affine", 1, 0.3, params=16, matched=False), _fit("identity", 2, 0.3), _fit("swish", 2, 0.09)],
            "supported",
        ),
    ],
)
def test_depth_rule_comes_out_each_way_at_matched_sizes(rows, expected):
    item = metric_adaptation.decide_depth(rows, 132)
    assert item["id"] == "thm3.2-depth" and item["verdict"] == expected, item["reason"]


def _curv(loss, curvature, residual, definite=4):
    return {
        "loss": loss,
        "definite_points": definite,
        "max_abs_scalar_curvature": curvature,
        "max_abs_sectional_curvature": curvature,
        "constant_W_residual": residual,
    }


FLAT = _curv("mse", 0.0, 1e-15)


@pytest.mark.parametrize(
    "rows, expected",
    [
        ([FLAT, _curv("byol", 0.5, 0.3), _curv("info_nce", 2.0, 0.1)], "supported"),
        ([_curv("mse", 1e-3, 1e-15), _curv("byol", 0.5, 0.3)], "not supported"),  # flat control curved: broken
        ([_curv("mse", 0.0, 1e-3), _curv("byol", 0.5, 0.3)], "not supported"),  # flat control not whitened
        ([FLAT, _curv("byol", 0.5, 0.3), _curv("info_nce", 2.0, 1e-9)], "not supported"),  # a curved loss whitened
        ([FLAT, _curv("byol", 0.5, 0.3, definite=0)], "premise violated"),  # no definite curved metric
        ([FLAT, _curv("byol", 1e-12, 1e-9)], "premise violated"),  # no curved loss at all
    ],
)
def test_barrier_rule_comes_out_each_way(rows, expected):
    item = metric_adaptation.decide_barrier(rows)
    assert item["id"] == "prop3.3-barrier" and item["verdict"] == expected, item["reason"]


def test_widths_match_the_parameter_count_and_unmatchable_configs_are_refused():
    from experiments.configs import metric_adaptation as ma_config

    for variant in ("smoke", "paper"):
        c = ma_config.get_config(variant)
        ref = metric_adaptation.head_params(c.model.d, c.model.k, 2, c.model.width)
        hs = metric_adaptation.widths(c)
        assert {h["depth"] for h in hs if h["matched"]} == {2, 3}
        assert all(abs(h["params"] - ref) <= 0.1 * ref for h in hs if h["depth"] >= 2)
        assert [h for h in hs if h["activation"] == "identity" and h["depth"] == 2][0]["params"] == ref
    # The formula against a built head: (d + 1) w + (w + 1) w + (w + 1) k for depth 3.
    assert metric_adaptation.head_params(3, 4, 3, 8) == 4 * 8 + 9 * 8 + 9 * 4 == 140
    assert metric_adaptation.matched_width(3, 4, 3, 132) == 8
    c = ma_config.get_config("tiny")
    c.model.depths = [1, 2, 3]  # d = k = 3, width 8: the depth-2 head has 59 parameters, depth 3 only 51 or 68
    with pytest.raises(ValueError, match="config.model.width = 8: no width gives depth 3"):
        metric_adaptation.measure(c)


def test_riemann_contractions_match_closed_forms():
    # Round 2-sphere of radius 2: K = 1/4, S = 1/2 (sectional from any plane).
    g = lambda x: jnp.diag(jnp.array([4.0, 4.0 * jnp.sin(x[0]) ** 2]))
    x = jnp.array([0.7, 0.1])
    Rm = np.asarray(riemann.lowered_riemann(g, x))
    gx = np.asarray(g(x))
    assert metric_adaptation.scalar_from_riemann(Rm, gx) == pytest.approx(0.5, rel=1e-12)
    assert metric_adaptation.sectional_from_riemann(
        Rm, gx, np.array([1.0, 0.3]), np.array([0.2, 1.0])
    ) == pytest.approx(0.25, rel=1e-12)


def test_per_sample_losses_closed_forms():
    K = jax.random.normal(jax.random.PRNGKey(0), (4, 3))
    u = jnp.array([0.3, -0.2, 0.5])
    tau = 0.7
    H = np.asarray(jax.jit(jax.hessian(lambda v: metric_adaptation.softmax_dot_loss(v, K, tau)))(u))
    p = np.asarray(jax.nn.softmax(K @ u / tau))
    Kn = np.asarray(K)
    assert np.allclose(H, Kn.T @ (np.diag(p) - np.outer(p, p)) @ Kn / tau**2, atol=1e-13)
    t = jnp.array([1.0, 0.5, -0.2])
    assert np.allclose(jax.hessian(metric_adaptation.make_per_sample_loss("mse", t, None, 1.0))(u), 2 * np.eye(3))
    # Scale invariance L(c u) = L(u): u^T g_L u = 0 and g_L u = -grad L (why the chart is needed).
    for name in metric_adaptation.SCALE_INVARIANT:
        f = metric_adaptation.make_per_sample_loss(name, t, K, tau)
        gL, gr = jax.jit(lambda v, f=f: (jax.hessian(f)(v), jax.grad(f)(v)))(u)
        gL, gr = np.asarray(gL), np.asarray(gr)
        assert np.allclose(gL @ np.asarray(u), -gr, atol=1e-12)
        assert abs(float(np.asarray(u) @ gL @ np.asarray(u))) < 1e-12


def test_constant_whitener_and_cv():
    A = np.array([[2.0, 0.3], [0.3, 0.5]])
    r0, r1, rms, W = metric_adaptation.best_constant_whitener(np.stack([A] * 4))
    assert max(r0, r1, rms) < 1e-12 and np.allclose(W.T @ A @ W, np.eye(2), atol=1e-12)
    B = np.diag([1.0, 3.0])
    _, r1, rms, _ = metric_adaptation.best_constant_whitener(np.stack([A, B]))
    assert r1 > 0.05 and rms > 0.01
    G = np.stack([np.eye(2), 3 * np.eye(2)])  # mean 2I, deviations +-I: CV = sqrt(2) / sqrt(8) = 0.5
    assert metric_adaptation.coefficient_of_variation(G) == pytest.approx(0.5, rel=1e-14)


# ------------------------------------------------------------------ experiment 7


@pytest.mark.slow  # an end-to-end run (the slow tier of .ci/run)
def test_objectives_schema_rules_and_exact_relations(tiny_runs):
    out, res = tiny_runs
    r = res["objectives"]
    common.check_verdict(r)
    assert _finite_numbers(r["headline"])
    m = r["measurements"]
    rows, eqs = m["rows"], m["equilibria"]
    config = objectives_config.get_config("tiny")
    d = objectives.decide(m, config)
    assert [(i["id"], i.get("subject"), i["verdict"]) for i in d["claims"]] == [
        (c["id"], c["subject"], c["verdict"]) for c in r["claims"]
    ]
    # Every objective and seed trained with the config's head, DINO with every head of thm41_activations.
    assert {(x["objective"], x["seed"]) for x in rows} == {
        (o, s) for o in config.train.objectives for s in range(config.seeds)
    }
    assert {(e["activation"], e["seed"]) for e in eqs} == {
        (a, s) for a in config.analysis.thm41_activations for s in range(config.seeds)
    }
    for e in eqs:  # certified: stationary in z and in the head with rho != 0 (Thm 4.1's premises)
        assert e["exists"] and e["certified"] and e["stationary"] and e["rho_nonzero"] and e["grad_z_ratio"] < 1e-8
        if e["head_kind"] == "linear":
            assert e["lambda_min_M"] == 0.0 and e["lambda_min_H_eff"] == pytest.approx(e["lambda_min_G"])
    for x in rows:
        for state in ("trained", "pseudo_collapsed"):
            lmin, lmax = x[f"lambda_min_H_eff_{state}"], x[f"lambda_max_H_eff_{state}"]
            tol = 1e-10 * max(1.0, abs(lmax))
            # Weyl's inequalities for H_eff = G + M.
            assert x[f"lambda_min_G_{state}"] + x[f"lambda_min_M_{state}"] <= lmin + tol
            assert lmax <= x[f"lambda_max_G_{state}"] + x[f"lambda_max_M_{state}"] + tol
            if x[f"H_L_psd_{state}"]:  # G = J^T H_L J inherits PSD
                assert x[f"lambda_min_G_{state}"] >= -tol
        # trained and pseudo-collapsed states are not equilibria: labelled so
        assert not x["stationary_trained"] and not x["stationary_pseudo_collapsed"]
        if x["objective"] != "dino":  # collapsed: identical rows; the head driven to stationarity has rho = 0
            assert (
                x["collapsed_rows_identical"] and x["st_stationary"] and x["st_within_bound"] and x["st_full_row_rank"]
            )
        assert x["erank_squared_trained"] <= x["erank_rankme_trained"] + 1e-6
        assert 1.0 <= x["erank_rankme_trained"] <= config.model.k + 1e-6 and x["cond_trained"] >= 1.0
        aug = x["sec5"]["augmentations"]["subspace"]["trained"]
        assert all(aug[c]["lo"] <= aug[c]["D"] <= aug[c]["hi"] for c in aug)
    assert (out / "objectives" / "objectives.png").exists()
    text = objectives.report(r, "figs")
    assert "| objective | family |" in text and "D vs between [95%]" in text and "](figs/objectives.png)" in text


def test_sec5_gains_and_orbit_spreads_against_independent_computations():
    # A linear head h(z) = z W: J = W^T everywhere, so g_i = mean_k |W^T v_ik| / |v_ik| by hand.
    rng = np.random.default_rng(0)
    W = rng.normal(size=(4, 6))
    head = lambda x: x @ jnp.asarray(W)
    z = jnp.asarray(rng.normal(size=(5, 4)))
    v = jnp.asarray(rng.normal(size=(5, 3, 4)))
    expect = np.mean(np.linalg.norm(np.asarray(v) @ W, axis=-1) / np.linalg.norm(np.asarray(v), axis=-1), axis=1)
    np.testing.assert_allclose(objectives.sec5.gains(head, z, v), expect, rtol=1e-12)
    # Orbit spreads: the paper's definition (ssl_geometry.paper.orbit_metrics), orbit by orbit.
    orbits = jnp.asarray(rng.normal(size=(4, 6, 4)) + 3.0)
    sz, sh = objectives.sec5.orbit_spreads(head, orbits)
    flat = np.asarray(orbits).reshape(-1, 4)
    ids = np.repeat(np.arange(4), 6)
    assert np.mean(sz) == pytest.approx(paper.orbit_metrics(flat, ids, ids % 2)["spread"], rel=1e-12)
    assert np.mean(sh) == pytest.approx(paper.orbit_metrics(flat @ W, ids, ids % 2)["spread"], rel=1e-12)
    # sec5_inputs' orbits carry the rule's untrained comparison: S / S_0 = mean spread_h0 / mean spread_h
    W0 = rng.normal(size=(4, 6))
    head0 = lambda x: x @ jnp.asarray(W0)
    dirs = {k: jnp.asarray(rng.normal(size=(5, 3, 4))) for k in objectives.sec5.DIRECTIONS}
    comp = objectives.sec5.sec5_inputs(head, head0, z, dirs, orbits)[2]
    sh0 = objectives.sec5.orbit_spreads(head0, orbits)[1]
    assert comp["S"] == pytest.approx(np.mean(sz) / np.mean(sh), rel=1e-12)
    assert comp["vs_untrained"]["S"] == pytest.approx(np.mean(sh0) / np.mean(sh), rel=1e-12)
    # The negative control's basis: orthonormal and orthogonal to the augmentation subspace.
    A = jnp.asarray(np.linalg.qr(rng.normal(size=(6, 2)))[0])
    B = np.asarray(objectives.sec5.negative_basis(A, jax.random.PRNGKey(0)))
    np.testing.assert_allclose(B.T @ B, np.eye(2), atol=1e-12)
    np.testing.assert_allclose(np.asarray(A).T @ B, 0.0, atol=1e-12)


def _sec5(D_trained, D_untrained=1.0, S=3.0, R=2.0):
    """``R``: the trained head's orbit compression over the untrained head's (``orbits["vs_untrained"]``)."""
    ratio = lambda D: {c: {"D": D, "lo": D - 0.05, "hi": D + 0.05} for c in ("random", "between", "data")}
    return {
        "augmentations": {"subspace": {"trained": ratio(D_trained), "untrained": ratio(D_untrained)}},
        "negative": {"orthogonal": {"trained": ratio(1.2), "untrained": ratio(1.0)}},
        "orbits": {"S": S, "lo": S - 0.5, "hi": S + 0.5, "vs_untrained": {"S": R, "lo": R - 0.5, "hi": R + 0.5}},
    }


def test_objectives_decide_each_claim_each_way():
    def eq(act, lmin, kind, lmin_m=-0.1, seed=0):
        return {
            "activation": act,
            "seed": seed,
            "residual_scale": 1.8,
            "exists": True,
            "certified": True,
            "holds": True,
            "head_kind": kind,
            "lambda_min_H_eff": lmin,
            "eig_tol": 1e-12,
            "lambda_min_M": lmin_m,
        }

    def row(obj, D, stationary=True, rho=0.0, loss_fell=True):
        return {
            "objective": obj,
            "family": "contrastive",
            "activation": "swish",
            "seed": 0,
            "loss_fell": loss_fell,
            "z_full_rank": True,
            "sec5": _sec5(D),
            "st_stationary": stationary,
            "st_rho": rho,
            "st_rho_ref": 1.0,
            "st_residual_tol": 1e-8,
            "st_jac_sigma_min": 0.5,
            "st_jac_sigma_max": 2.0,
            "st_jac_rows": 4,
            "st_jac_cols": 50,
        }

    def verdicts(rows, eqs):
        d = objectives.decide({"rows": rows, "equilibria": eqs}, objectives_config.get_config("tiny"))
        return {(i["id"], i.get("subject")): i["verdict"] for i in d["claims"]}

    v = verdicts(
        [row("info_nce", 0.5), row("byol", 1.3)],
        [eq("swish", -0.1, "smooth"), eq("tanh", -0.2, "smooth", seed=1), eq("identity", 0.01, "linear", 0.0)],
    )
    assert v[("thm4.1-smooth-unstable", "dino_fixed_teacher")] == "supported"
    assert v[("thm4.1-linear-psd", None)] == "supported"
    assert v[("stationarity-forces-rho-zero", None)] == "supported"
    assert v[("sec5-metric-degeneracy", "info_nce (seed 0)")] == "supported"
    assert v[("sec5-metric-degeneracy", "byol (seed 0)")] == "not supported"
    v = verdicts(
        [row("info_nce", 0.5, rho=0.1), row("vicreg", 0.5, loss_fell=False)],
        [eq("swish", 0.01, "smooth"), eq("relu", -0.01, "piecewise", 0.0)],
    )
    assert v[("thm4.1-smooth-unstable", "dino_fixed_teacher")] == "not supported"  # a strictly stable DINO state
    assert v[("thm4.1-linear-psd", None)] == "not supported"
    assert v[("stationarity-forces-rho-zero", None)] == "not supported"
    assert v[("sec5-metric-degeneracy", "vicreg (seed 0)")] == "premise violated"
    # orbits that compress (S = 3) but no more than through the untrained head (S / S_0 = 1): inconclusive
    r = row("info_nce", 0.5)
    r["sec5"] = _sec5(0.5, R=1.0)
    assert (
        verdicts([r], [eq("swish", -0.1, "smooth")])[("sec5-metric-degeneracy", "info_nce (seed 0)")] == "inconclusive"
    )


@pytest.mark.parametrize("name", ["simsiam", "byol", "dino"])
def test_first_view_problem_gives_the_objectives_z1_gradient(name):
    """loss_fn(head_fn(z1)) has the same z1-gradient as the full two-view objective (stop-gradients included)."""
    cfg = objectives_config.get_config("tiny")
    proj, pred = objectives.build_heads(cfg, name)
    key = jax.random.PRNGKey(3)
    params = {"proj": proj.init(key)["params"]}
    if pred is not None:
        params["pred"] = pred.init(jax.random.fold_in(key, 1))["params"]
    target = jax.tree_util.tree_map(lambda w: 0.9 * w, params["proj"])
    center = 0.1 * jnp.ones((cfg.model.k,))
    z1 = jax.random.normal(jax.random.fold_in(key, 2), (6, cfg.data.d))
    z2 = z1 + 0.3 * jax.random.normal(jax.random.fold_in(key, 3), z1.shape)
    full = objectives.objective_loss(cfg, name, proj, pred)
    g_full = jax.jit(jax.grad(lambda a: full(params, target, center, a, z2)[0]))(z1)
    model, variables, loss_fn = objectives.first_view_problem(cfg, name, params, target, center, z1, z2)
    g_part = jax.jit(jax.grad(lambda a: loss_fn(model.apply(variables, a)[0])))(z1)
    assert np.allclose(g_part, g_full, atol=1e-12, rtol=1e-10)
    assert float(jnp.linalg.norm(g_full)) > 1e-6


def test_metric_adaptation_dry_run_projects_fits_and_analysis_from_two_reduced_sizes_each():
    """One fit step of each head timed at 1/8 and 1/4 of the curve points, parts A and C at 1/8 and 1/4 of their
    sample counts; the steps of every restart and the one analysis projected from each fit (tiny, one head)."""
    from experiments.configs import metric_adaptation as ma_config

    c = ma_config.get_config("tiny")
    c.dry_run, c.data.n_curve, c.data.n_points, c.data.n_samples = True, 17, 16, 32
    c.data.curvature_losses = ["mse"]
    keys = jax.random.normal(jax.random.PRNGKey(1), (c.data.n_keys, c.model.k), jnp.float64)
    rec, variation, (curvature, per_point) = metric_adaptation.dry_run(
        c, keys, metric_adaptation.widths(c)[:1], *jax.random.split(jax.random.PRNGKey(0), 3)
    )
    train, analysis = rec["training"], rec["analysis"]
    assert [p[0] for p in train["points"]] == [2.0, 4.0] and train["full_size"] == 17
    assert train["count"] == c.train.fit_restarts * c.train.fit_steps and analysis["count"] == 1
    assert [p[0] for p in analysis["points"]] == [2.0, 4.0] and analysis["full_size"] == 16
    for part in (train, analysis):
        assert math.isfinite(part["exponent"]) and part["projected_s"] > 0 and part["unit_time_s"] > 0
    assert rec["projected_wall_time_s"] == rec["training_s"] + rec["analysis_s"]
    assert rec["step_time_s"] == train["points"][-1][1] and rec["heads"] == 1
    # The rows kept are the larger analysis unit's: 4 of 16 curvature points (part A at 32 * 4 / 16 samples).
    assert [r["points"] for r in curvature] == [4] and len(per_point["mse"]) == 4
    assert len(variation) == len(c.model.activations) * len(c.model.depths)


def test_objectives_dry_run_projects_training_and_analysis_from_two_reduced_sizes_each(monkeypatch):
    """The training unit (a step of the costliest objective) timed at 1/8 and 1/4 of the batch, the analysis unit (one
    classification) at 1/8 and 1/4 of the geometry batch, every objective trained and measured once at 1/8. The
    measurements are stand-ins (the real ones compile for minutes; the paper dry run runs them): the classification
    takes 4 ms n_geom^2 on a fake clock that the timer reads (``harness.interleave``'s ``clock``) instead of sleeping,
    so the analysis exponent is 2 and its projection exact whatever the load. The training unit is the real step
    (timed on the real clock: only its sizes, count and record are asserted)."""
    from experiments.benchmarks import harness
    from experiments.objectives import dry_run

    calls, clock, fake = [], [0.0], [False]
    interleave = harness.interleave
    monkeypatch.setattr(
        harness,
        "interleave",
        lambda fns, **kw: interleave(fns, **({**kw, "clock": lambda: clock[0]} if fake[0] else kw)),
    )
    sample_views, training_step = dry_run.sample_views, dry_run.training_step

    def analysis_unit(*args, **kwargs):  # the dry run builds an analysis unit (the stand-in): timed on the fake clock
        fake[0] = True
        return sample_views(*args, **kwargs)

    def training_unit(*args, **kwargs):  # the dry run builds a training unit (a real step): timed on the real clock
        fake[0] = False
        return training_step(*args, **kwargs)

    def analysis(cfg, name, key, data, row, trained, full):
        calls.append(("analyse", name, cfg.data.n_geom, cfg.data.n_eval, full))
        return {**row, "n_geom": cfg.data.n_geom}, [{"objective": name}]

    def classification(cfg, name, params, target, center, z1, z2, key):
        calls.append(("classify", name, cfg.data.n_geom, z1.shape[0]))
        clock[0] += 4e-3 * cfg.data.n_geom**2
        return {}

    monkeypatch.setattr(dry_run, "analyse_objective", analysis)
    monkeypatch.setattr(dry_run, "geometry_row", classification)
    monkeypatch.setattr(dry_run, "sample_views", analysis_unit)
    monkeypatch.setattr(dry_run, "training_step", training_unit)
    c = objectives_config.get_config("tiny")
    c.dry_run, c.data.n, c.data.n_geom, c.train.objectives = True, 64, 32, ["byol"]
    m = objectives.measure(c)
    rec = m["dry_run"]
    train, an = rec["training"], rec["analysis"]
    extra = [a for a in c.analysis.thm41_activations if a != c.model.activation]
    assert rec["timed_objective"] == "byol" and rec["trainings"] == c.seeds * (1 + len(extra))
    assert [p[0] for p in train["points"]] == [8.0, 16.0] and train["full_size"] == 64
    assert train["count"] == rec["trainings"] * c.train.steps
    assert [p[0] for p in an["points"]] == [4.0, 8.0] and an["full_size"] == 32
    # Two states of byol, and the equilibria of the other DINO head (trained in the full variant, not here).
    scales = len(c.analysis.dino_residual_scales)
    assert an["count"] == dry_run.classifications(c) == c.seeds * (2 + len(extra) * scales) == 3
    # 4 ms n_geom^2 at 4 and 8, then 3 classifications at 32: 3 * 4e-3 * 32^2 = 12.288 s
    assert [p[1] for p in an["points"]] == pytest.approx([4e-3 * 4**2, 4e-3 * 8**2], rel=1e-9)
    assert an["exponent"] == pytest.approx(2.0, rel=1e-9)
    assert an["projected_s"] == pytest.approx(3 * 4e-3 * 32**2, rel=1e-9)
    for part in (train, an):
        assert math.isfinite(part["exponent"]) and part["projected_s"] > 0
    assert rec["projected_wall_time_s"] == rec["training_s"] + rec["analysis_s"]
    assert rec["step_time_s"] == train["points"][-1][1]
    # Each objective measured once at 1/8 (n_eval in proportion, at least the orbits), then the unit untimed and
    # timed at each size.
    assert calls == [("analyse", "byol", 4, 6, True)] + [("classify", "byol", g, g) for g in (4, 4, 8, 8)]
    assert [r["objective"] for r in m["rows"]] == ["byol"] and m["rows"][0]["n_geom"] == 4
    assert m["equilibria"] == [{"objective": "byol"}] and list(m["curves"]) == ["byol/swish/seed0"]


def test_objectives_dry_run_times_moco_v3_and_counts_every_classification_of_the_paper_variant():
    from experiments.objectives import dry_run

    c = objectives_config.get_config("paper")
    assert dry_run.costliest(c.train.objectives) == "moco_v3"
    assert dry_run.costliest(["barlow_twins", "simsiam", "byol"]) == "byol"
    assert dry_run.costliest(["barlow_twins", "simsiam"]) == "simsiam" and dry_run.costliest(["vicreg"]) == "vicreg"
    # 2 seeds x (8 objectives x 2 states + 5 DINO heads x 2 residual scales).
    assert dry_run.classifications(c) == 2 * (8 * 2 + 5 * 2) == 52
