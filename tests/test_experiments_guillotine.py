"""Experiment 6 (guillotine) end to end on its tiny config, plus exact checks of its geometry code."""
import math

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from experiments import common, guillotine, reproduce
from experiments.configs import guillotine as gconfig
from ssl_geometry import backbones, heads


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("guillotine")
    res = reproduce.run_one("guillotine", "tiny", out)
    return out / "guillotine", res


def _finite(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def test_schema_finiteness_and_figures(tiny):
    out, r = tiny
    common.check_verdict(r)
    assert all(_finite(v) for v in r["headline"].values()), r["headline"]
    for k in ("rot_lin_backbone", "rot_lin_head", "curvature_ratio_fd_raw", "spread_shrink_raw"):
        assert k in r["paper"] and k in r["headline"]
    for kind in ("linear", "mlp"):
        for task in ("rotation", "class"):
            for w in ("backbone", "head"):
                assert 0.0 <= r["probes"][task][w][kind] <= 1.0
    assert set(r["premises"]) == {"ssl_loss_decreased", "backbone_encodes_rotation", "backbone_not_collapsed"}
    assert r["setting"]["analysis_dtype"] == "float64"
    for name in ("probes", "curvature", "orbits_degeneracy"):
        assert (out / f"{name}.png").stat().st_size > 1000
    assert len(r["loss_curve"]) == gconfig.get_config("tiny").steps
    assert [row["head_depth"] for row in r["depth_ablation"]] == sorted(gconfig.get_config("tiny").depths)


def test_verdict_follows_from_stored_numbers(tiny):
    _, r = tiny
    cfg = gconfig.get_config("tiny")
    rot = r["probes"]["rotation"]
    gap = 0.5 * ((rot["backbone"]["linear"] - rot["head"]["linear"]) + (rot["backbone"]["mlp"] - rot["head"]["mlp"]))
    assert r["headline"]["rotation_gap_mean"] == pytest.approx(gap, abs=1e-12)
    ratios = {}
    for row in r["degeneracy"]:
        assert row["ratio_vs_random"] == pytest.approx(row["tangent"] / row["random"], rel=1e-12)
        assert row["ratio_vs_data"] == pytest.approx(row["tangent"] / row["data"], rel=1e-12)
        if row["head"] == "trained":
            ratios[row["augmentation"]] = row["ratio_vs_random"]
    assert set(ratios) == set(guillotine.AUGMENTATIONS)
    # The rule, recomputed independently of guillotine.verdict.
    p = r["premises"]
    z_rot = 0.5 * (rot["backbone"]["linear"] + rot["backbone"]["mlp"])
    assert p["backbone_encodes_rotation"]["met"] == (z_rot >= cfg.min_backbone_rotation_acc)
    assert p["ssl_loss_decreased"]["met"] == (p["ssl_loss_decreased"]["value"]["last_10pct"]
                                              < p["ssl_loss_decreased"]["value"]["first_10pct"])
    if not all(x["met"] for x in p.values()):
        expected = "premise violated"
    elif gap >= cfg.probe_margin and all(v < 1 for v in ratios.values()):
        expected = "supported"
    elif gap <= 0 and all(v >= 1 for v in ratios.values()):
        expected = "not supported"
    else:
        expected = "inconclusive"
    assert r["verdict"] == expected
    assert guillotine.verdict(r["headline"], r["premises"], cfg) == expected


def test_verdict_rule_cases():
    cfg = gconfig.get_config("tiny")
    ok = {k: {"met": True, "value": 1.0} for k in ("a", "b")}
    base = {f"degeneracy_ratio_{a}": 0.5 for a in guillotine.AUGMENTATIONS}
    assert guillotine.verdict({**base, "rotation_gap_mean": 0.1}, ok, cfg) == "supported"
    assert guillotine.verdict({**base, "rotation_gap_mean": cfg.probe_margin / 2}, ok, cfg) == "inconclusive"
    worse = {f"degeneracy_ratio_{a}": 1.2 for a in guillotine.AUGMENTATIONS}
    assert guillotine.verdict({**worse, "rotation_gap_mean": -0.05}, ok, cfg) == "not supported"
    assert guillotine.verdict({**worse, "rotation_gap_mean": 0.1}, ok, cfg) == "inconclusive"
    bad = {**ok, "c": {"met": False, "value": 0.0}}
    assert guillotine.verdict({**base, "rotation_gap_mean": 0.1}, bad, cfg) == "premise violated"


def test_scale_free_numbers_are_consistent(tiny):
    _, r = tiny
    s_z, s_h = r["representation"]["scale_backbone"], r["representation"]["scale_head"]
    cs = r["curvature"]["summary"]
    assert cs["ratio_exact_normalised"] == pytest.approx(cs["ratio_exact_raw"] * s_z / s_h, rel=1e-12)
    rows = {(x["rep"], x["scale"]): x for x in r["orbits"]["rows"]}
    for w, s in (("backbone", s_z), ("head", s_h)):
        raw, nrm = rows[(w, "raw")], rows[(w, "normalised")]
        # Distances scale with the representation; their ratio does not.
        assert nrm["orbit_spread"] == pytest.approx(raw["orbit_spread"] / s, rel=1e-10)
        assert nrm["class_orbit_ratio"] == pytest.approx(raw["class_orbit_ratio"], rel=1e-10)
        # Mean pairwise distance within an orbit <= 2 x mean distance to its centroid (triangle inequality).
        assert raw["intra_orbit_distance"] <= 2 * raw["orbit_spread"] * (1 + 1e-12)
    sh = r["orbits"]["summary"]
    assert sh["spread_shrink_normalised"] == pytest.approx(sh["spread_shrink_raw"] * s_h / s_z, rel=1e-10)


def test_fd_curvature_converges_to_exact_on_the_stored_run(tiny):
    _, r = tiny
    conv = r["curvature"]["convergence"]
    for w in ("backbone", "head"):
        rows = sorted((x for x in conv if x["rep"] == w), key=lambda x: -x["h_deg"])
        best = min(x["median_rel_err"] for x in rows)
        assert best < 1e-4, rows  # FD meets the exact second derivative once h is below the kink spacing
        assert rows[0]["median_rel_err"] > 100 * best  # at the paper's 5 deg spacing it does not
        assert r["curvature"]["by_rep"][w]["exact_mean"] > 0


@pytest.fixture(scope="module")
def smooth_geometry():
    """A C^inf path: Gaussian blur in sigma through a swish CNN and a swish MLP head, float64."""
    bb = backbones.small_cnn((6, 6, 3), widths=(3, 4), activation="swish", dtype=jnp.float64)
    hd = heads.mlp(4, (5,), 3, activation="swish", dtype=jnp.float64)
    v = {"backbone": bb.init(jax.random.PRNGKey(1)), "head": hd.init(jax.random.PRNGKey(2))}
    cfg = ml_collections.ConfigDict({"tangent_blur_radius": 3})
    geo = guillotine.Geometry(bb, hd, guillotine.augmentation_fn(cfg, "blur"))
    x = jax.random.uniform(jax.random.PRNGKey(3), (2, 6, 6, 3), jnp.float64)
    return geo, v, x


def test_exact_curvature_is_the_fd_limit_on_a_smooth_path(smooth_geometry):
    geo, v, x = smooth_geometry
    t = jnp.asarray([0.9], jnp.float64)
    for which in ("head",):  # the full path f then h (the backbone alone is the same code, minus h)
        ex = np.asarray(geo.exact(v, x, t, which=which))[:, 0]
        # Independent of jvp: central second differences of the path converge to it as O(h^2).
        errs = []
        for h in (0.05, 0.005):
            reps = geo.grid(v, x, jnp.asarray([0.9 - h, 0.9, 0.9 + h]), which=which)
            fd = np.linalg.norm(np.asarray(reps[:, 2] - 2 * reps[:, 1] + reps[:, 0]), axis=-1) / h**2
            errs.append(np.max(np.abs(fd - ex) / ex))
        assert errs[1] < 1e-4 and errs[0] / errs[1] > 30  # O(h^2): 10x smaller h, ~100x smaller error


def test_degeneracy_is_the_ratio_of_jvp_norms(smooth_geometry):
    geo, v, x = smooth_geometry
    t0 = jnp.asarray(0.9, jnp.float64)
    zs = geo.z_at(v, x, t0)
    dirs = jax.random.normal(jax.random.PRNGKey(5), zs.shape, jnp.float64)
    along, other = geo.degeneracy(v, x, t0, dirs)
    # Independent: the dense head Jacobians J and the tangents dz/dt, both by jacfwd.
    Js = np.asarray(jax.jit(jax.vmap(jax.jacfwd(lambda z: geo.head.apply(v["head"], z[None])[0][0])))(zs))
    dzs = np.asarray(jax.jit(jax.vmap(lambda xi: jax.jacfwd(lambda a: geo.rep(v, xi, a, "backbone"))(t0)))(x))
    for i in range(x.shape[0]):
        J, dz = Js[i], dzs[i]
        assert along[i] == pytest.approx(np.linalg.norm(J @ dz) / np.linalg.norm(dz), rel=1e-10)
        d = np.asarray(dirs[i])
        assert other[i] == pytest.approx(np.linalg.norm(J @ d) / np.linalg.norm(d), rel=1e-10)


def test_report_has_tables_and_figure_links(tiny):
    _, r = tiny
    text = guillotine.report(r, "figs")
    for name in ("probes", "curvature", "orbits_degeneracy"):
        assert f"(figs/{name}.png)" in text
    assert text.count("|---|") >= 6  # probes, curvature, convergence, orbits, degeneracy, depth tables
    assert "rotation linear" in text and "spread shrink" in text.lower()


def test_bad_arguments_raise_clear_errors():
    cfg = gconfig.get_config("tiny")
    with pytest.raises(ValueError, match="depth"):
        guillotine.make_head(cfg, 8, 0, jnp.float32)
    with pytest.raises(ValueError, match="augmentation"):
        guillotine.augmentation_fn(cfg, "shear")
    bad = gconfig.get_config("tiny")
    bad.steps, bad.steps_per_call = 3, 2
    with pytest.raises(ValueError, match="steps_per_call"):
        guillotine.train_simclr(bad, 2, np.zeros((64, 8, 8, 3), np.uint8), jax.random.PRNGKey(0))
    bad = gconfig.get_config("tiny")
    bad.backbone = "alexnet"
    with pytest.raises(ValueError, match="backbone"):
        guillotine.make_backbone(bad, jnp.float32)
    with pytest.raises(ValueError, match="variant"):
        gconfig.get_config("huge")
