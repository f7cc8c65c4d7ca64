"""Experiment 6 (guillotine) end to end on its tiny config, plus exact checks of its geometry code."""

import math

import chex
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from experiments import claims, common, configs, guillotine, rules, suite
from experiments.configs import guillotine as gconfig
from experiments.guillotine import dry_run as D
from experiments.guillotine import geometry as G
from experiments.guillotine import probing
from experiments.guillotine import runs as R
from experiments.guillotine import training as T
from ssl_geometry import backbones, heads


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("guillotine")
    res = suite.run_one("guillotine", "tiny", out)
    return out / "guillotine", res


def _finite(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


@pytest.mark.slow  # an end-to-end run (the slow tier of .ci/run)
def test_schema_finiteness_and_figures(tiny):
    out, r = tiny
    common.check_verdict(r)
    m = r["measurements"]
    assert all(_finite(v) for v in r["headline"].values()), r["headline"]
    assert [c["id"] for c in r["claims"]] == ["sec5-metric-degeneracy", "guillotine-probe-gap"]
    assert all(c["scale"] == "toy" for c in r["claims"])  # the runner labels the verdict by the variant's scale
    for k in ("rot_lin_backbone", "rot_lin_head", "curvature_ratio_paper", "spread_shrink_paper"):
        assert k in r["paper"] and k in r["headline"]
    assert r["paper"] == guillotine.PAPER_NUMBERS[("cifar10", "resnet18_cifar")] and not m["setting"]["paper_setting"]
    for kind in ("linear", "mlp"):
        for w in ("backbone", "head", "head_untrained"):
            assert 0.0 <= m["probes"]["rotation"][w][kind] <= 1.0
        for w in ("backbone", "head"):
            assert 0.0 <= m["probes"]["class"][w][kind] <= 1.0
    assert m["setting"]["analysis_dtype"] == "float64"
    for name in ("probes", "curvature", "orbits_degeneracy"):
        assert (out / f"{name}.png").stat().st_size > 1000
    cfg = gconfig.get_config("tiny")
    assert len(m["loss_curve"]) == cfg.train.steps
    assert [row["head_depth"] for row in m["depth_ablation"]] == sorted(cfg.ablation.depths)
    # one random rotation per probe image: as many examples as images (the authors' RotationDataset)
    assert m["setting"]["rotation_probe_test_images"] <= cfg.probes.test_images


@pytest.mark.slow  # an end-to-end run (the slow tier of .ci/run)
def test_stored_ratios_recomputed_independently(tiny):
    """D from the stored per-image gains by hand, the rule's inputs as stored, and the verdict of the shared rule."""
    _, r = tiny
    m = r["measurements"]
    n = gconfig.get_config("tiny").analysis.degeneracy_images
    for aug, heads_ in m["degeneracy"]["gains"].items():
        for hs, g in heads_.items():
            assert len(g["tangent"]) == n
            for c in guillotine.CONTROLS:
                D = float(np.exp(np.mean(np.log(np.asarray(g["tangent"]) / np.asarray(g[c])))))
                rec = m["degeneracy"]["ratios"][aug][hs][c]
                assert rec["D"] == pytest.approx(D, rel=1e-12) and rec["lo"] <= rec["D"] <= rec["hi"]
    comp = m["orbits"]["compression"]
    for h in ("head", "head_untrained"):
        sz, sh = (np.asarray(m["orbits"]["paper_spreads"][w]) for w in ("backbone", h))
        assert comp[h]["S"] == pytest.approx(sz.mean() / sh.mean(), rel=1e-12)
        assert np.mean(sh) == pytest.approx(m["orbits"]["paper"][h]["spread"], rel=1e-12)
    # tiny trains with rotation only (jitter off): rotation is the one training augmentation, blur the negative
    assert m["setting"]["trained_augmentations"] == {"rotation": True, "hue": False, "blur": False}
    assert set(m["sec5"]["training"]) == {"rotation"} and set(m["sec5"]["negative"]) == {"blur"}
    sec5, gap = r["claims"]
    pv = m["premise_values"]
    t5 = claims.CLAIMS["sec5-metric-degeneracy"].thresholds
    sp = m["orbits"]["paper_spreads"]
    vs0 = m["sec5"]["orbits_vs_untrained"]
    assert vs0["S"] == pytest.approx(np.mean(sp["head_untrained"]) / np.mean(sp["head"]), rel=1e-12)
    assert vs0["S"] == pytest.approx(comp["head"]["S"] / comp["head_untrained"]["S"], rel=1e-12)
    expected = rules.decide_sec5(
        m["sec5"]["training"],
        comp["head"],
        negative=m["sec5"]["negative"],
        premises={
            "loss": pv["loss_last_10pct"] < pv["loss_first_10pct"],
            "rank": pv["erank_rankme_backbone"] >= t5["min_effective_rank"],
        },
        orbits_vs_untrained=vs0,
    )
    assert sec5["verdict"] == expected["verdict"] and sec5["deciding"] == expected["deciding"]
    # the gap: the mean over the training seeds (tiny: the main run and one more) of each seed's probe gaps
    rot = m["probes"]["rotation"]
    seeds = [rot] + [e["rotation"] for e in m["probes"]["gap_seeds"]]
    assert [e["seed"] for e in m["probes"]["gap_seeds"]] == [1] and gap["deciding"]["seeds"] == 2
    gap_of = lambda r, h: 0.5 * sum(r["backbone"][k] - r[h][k] for k in ("linear", "mlp"))
    g, g0 = (np.mean([gap_of(r, h) for r in seeds]) for h in ("head", "head_untrained"))
    assert gap["deciding"]["rotation_gap_mean"] == pytest.approx(g, abs=1e-12)
    assert gap["deciding"]["rotation_gap_mean_untrained_head"] == pytest.approx(g0, abs=1e-12)
    assert gap["deciding"]["rotation_gap_difference"] == pytest.approx(g - g0, abs=1e-12)
    lo, hi = gap["deciding"]["rotation_gap_difference_ci"]
    assert lo <= g - g0 <= hi
    # the stored per-image outcomes are the accuracies' own
    for r in seeds:
        for w in ("backbone", "head", "head_untrained"):
            for k in ("linear", "mlp"):
                c = r[w][f"{k}_test_correct"]
                assert len(c) == m["setting"]["rotation_probe_test_images"] and np.mean(c) == pytest.approx(r[w][k])


def _ratios(trained, untrained=1.0, width=0.05):
    return {
        h: {c: {"D": v, "lo": v - width, "hi": v + width} for c in guillotine.CONTROLS}
        for h, v in (("trained", trained), ("untrained", untrained))
    }


N_TEST = 400  # rotation-probe test images of the hand-made measurements


def _outcomes(acc):
    """0/1 outcomes over N_TEST images, the first round(acc N_TEST) right: nested sets, so the per-image
    differences of two representations are 0 or 1 and the gap's interval is narrow (binomial, about
    +-2 sqrt(p(1-p)/400))."""
    c = [0] * N_TEST
    c[: round(acc * N_TEST)] = [1] * round(acc * N_TEST)
    return c


def _rep(acc):
    return {"linear": acc, "mlp": acc, "linear_test_correct": _outcomes(acc), "mlp_test_correct": _outcomes(acc)}


def _fake(
    gap=0.1,
    rot=0.5,
    hue=0.5,
    blur=1.2,
    S=(3.0, 2.0, 4.0),
    gap0=0.0,
    loss=(5.0, 3.0),
    erank=10.0,
    z_rot=0.6,
    R=(2.0, 1.5, 2.5),
):
    """Measurements with given probe gaps (trained and untrained head), trained-head ratios (untrained: 1), orbit
    compression ``S`` and its ratio to the untrained head's ``R`` (each ``(value, lo, hi)``)."""
    probes_ = {
        "rotation": {"backbone": _rep(z_rot), "head": _rep(z_rot - gap), "head_untrained": _rep(z_rot - gap0)},
        "class": {w: {"linear": 0.5, "mlp": 0.5} for w in ("backbone", "head")},
    }
    ratios = {"rotation": _ratios(rot), "hue": _ratios(hue), "blur": _ratios(blur)}
    comp = {"head": dict(zip(("S", "lo", "hi"), S)), "head_untrained": {"S": 1.0, "lo": 0.9, "hi": 1.1}}
    return {
        "premise_values": {
            "loss_first_10pct": loss[0],
            "loss_last_10pct": loss[1],
            "backbone_rotation_acc": z_rot,
            "erank_rankme_backbone": erank,
        },
        "probes": probes_,
        "degeneracy": {"ratios": ratios},
        "orbits": {"compression": comp},
        "sec5": {
            "training": {a: ratios[a] for a in ("rotation", "hue")},
            "negative": {"blur": ratios["blur"]},
            "orbits": comp,
            "orbits_vs_untrained": dict(zip(("S", "lo", "hi"), R)),
        },
        "curvature": {"summary": {k: 1.0 for k in ("ratio_paper", "ratio_exact_raw", "ratio_exact_normalised")}},
        "depth_ablation": [],
    }


@pytest.mark.parametrize(
    "kwargs, sec5, gap",
    [
        ({}, "supported", "supported"),
        ({"blur": 0.5}, "inconclusive", "supported"),  # the negative control passes too
        ({"hue": 1.3}, "not supported", "supported"),  # a training augmentation >= 1 with confidence
        ({"S": (0.7, 0.6, 0.8)}, "not supported", "supported"),  # orbits expand through the head
        ({"S": (1.1, 0.9, 1.3)}, "inconclusive", "supported"),  # compression not established
        ({"R": (0.144, 0.11, 0.19)}, "inconclusive", "supported"),  # compresses less than the untrained head
        ({"gap": 0.01}, "supported", "inconclusive"),  # gap below the margin
        ({"gap": -0.05}, "supported", "not supported"),
        # the untrained head's gap alone passes the margin; training adds 0.03, its interval [0.013, 0.047] reaches 0.02
        ({"gap": 0.1, "gap0": 0.07}, "supported", "inconclusive"),
        ({"gap": 0.05, "gap0": 0.15}, "supported", "not supported"),  # training leaves h(z) more decodable than h_0(z)
        ({"gap": -0.05, "gap0": -0.05}, "supported", "not supported"),  # h(z) more decodable than z, as at init
        ({"loss": (3.0, 3.5)}, "premise violated", "premise violated"),
        ({"erank": 1.5}, "premise violated", "premise violated"),
        ({"z_rot": 0.26}, "supported", "premise violated"),  # rotation not in z: only the probe claim's premise
    ],
)
def test_decide_each_verdict_on_hand_made_measurements(kwargs, sec5, gap):
    out = guillotine.decide(_fake(**kwargs), gconfig.get_config("tiny"))
    got = {c["id"]: c for c in out["claims"]}
    assert got["sec5-metric-degeneracy"]["verdict"] == sec5, got["sec5-metric-degeneracy"]["reason"]
    assert got["guillotine-probe-gap"]["verdict"] == gap, got["guillotine-probe-gap"]["reason"]
    assert "untrained head's gap" in got["guillotine-probe-gap"]["reason"]


@pytest.mark.parametrize(
    "gap, gap0, verdict", [(0.1, 0.0, "supported"), (0.1, 0.07, "inconclusive"), (0.05, 0.15, "not supported")]
)
def test_gap_interval_is_the_paired_bootstrap_of_the_per_image_differences(gap, gap0, verdict):
    """Hand-made outcomes with known answers: the difference is acc(h_0) - acc(h), its interval the binomial one
    of the images where the two heads differ, and the verdict the rule's."""
    rot = _fake(gap=gap, gap0=gap0)["probes"]["rotation"]
    st = guillotine.probe_gap_interval([guillotine.gap_outcomes(rot)], reps=2000)
    d = gap - gap0
    assert st["difference"] == pytest.approx(d, abs=1e-12) and st["gap"] == pytest.approx(gap, abs=1e-12)
    assert st["gap_untrained"] == pytest.approx(gap0, abs=1e-12) and st["seeds"] == 1 and st["test_images"] == [400]
    half = 1.96 * math.sqrt(abs(d) * (1 - abs(d)) / N_TEST)  # the normal approximation of the binomial interval
    assert st["difference_ci"][0] == pytest.approx(d - half, abs=0.006)
    assert st["difference_ci"][1] == pytest.approx(d + half, abs=0.006)
    assert guillotine.gap_verdict(st, claims.CLAIMS["guillotine-probe-gap"].thresholds["probe_margin"])[0] == verdict


def test_gap_interval_over_seeds_resamples_the_seeds():
    """Two seeds whose differences are 0.0 and 0.2 exactly on every image: no image spread, so the interval comes
    from the seeds alone (resampled: both, either twice), 0.0 .. 0.2 around the mean 0.1."""

    def seed(d):
        z = [1] * N_TEST
        return {
            "backbone": {"linear": z, "mlp": z},
            "head": {"linear": [0] * N_TEST, "mlp": [0] * N_TEST},
            "head_untrained": {
                k: [1 if i < round(d * N_TEST) else 0 for i in range(N_TEST)] for k in ("linear", "mlp")
            },
        }

    one = guillotine.probe_gap_interval([seed(0.0)], reps=500)
    assert one["difference"] == 0.0 and one["difference_ci"] == [0.0, 0.0]
    st = guillotine.probe_gap_interval([seed(0.0), seed(0.2)], reps=2000)
    assert st["seeds"] == 2 and st["difference"] == pytest.approx(0.1, abs=1e-12)
    assert st["difference_ci"][0] < 0.01 and st["difference_ci"][1] > 0.19


def test_gap_interval_rejects_bad_outcomes():
    rot = _fake()["probes"]["rotation"]
    good = guillotine.gap_outcomes(rot)
    with pytest.raises(ValueError, match="reps"):
        guillotine.probe_gap_interval([good], reps=10)
    with pytest.raises(ValueError, match="at least one seed"):
        guillotine.probe_gap_interval([], reps=200)
    with pytest.raises(ValueError, match="head_untrained"):
        guillotine.probe_gap_interval([{k: v for k, v in good.items() if k != "head_untrained"}], reps=200)
    bad = {**good, "head": {"linear": [0.5] * N_TEST, "mlp": [0] * N_TEST}}
    with pytest.raises(ValueError, match="0/1"):
        guillotine.probe_gap_interval([bad], reps=200)
    short = {**good, "head": {"linear": [0] * 3, "mlp": [0] * 3}}
    with pytest.raises(ValueError, match="same test images"):
        guillotine.probe_gap_interval([short], reps=200)


def test_untrained_head_that_already_passes_makes_it_inconclusive():
    m = _fake()
    m["sec5"]["training"]["rotation"] = _ratios(0.5, untrained=0.4)  # the head at init is lower still
    assert guillotine.decide(m, None)["claims"][0]["verdict"] == "inconclusive"


def test_config_checks_are_in_measure_not_decide():
    bad = gconfig.get_config("tiny")
    bad.analysis.negative = ("rotation",)  # a training augmentation cannot be the negative control
    with pytest.raises(ValueError, match="negative"):
        guillotine.measure(bad)
    bad.analysis.negative = ("shear",)
    with pytest.raises(ValueError, match="negative"):
        guillotine.measure(bad)
    assert "verdict" not in gconfig.get_config("smoke")


@pytest.mark.slow  # an end-to-end run (the slow tier of .ci/run)
def test_scale_free_and_paper_numbers_are_consistent(tiny):
    _, r = tiny
    m = r["measurements"]
    s_z, s_h = m["representation"]["scale_backbone"], m["representation"]["scale_head"]
    cs = m["curvature"]["summary"]
    assert cs["ratio_exact_normalised"] == pytest.approx(cs["ratio_exact_raw"] * s_z / s_h, rel=1e-12)
    assert cs["ratio_paper"] == pytest.approx(cs["paper_kappa_head"] / (cs["paper_kappa_backbone"] + 1e-8), rel=1e-9)
    rows = {(x["rep"], x["scale"]): x for x in m["orbits"]["rows"]}
    for w, s in (("backbone", s_z), ("head", s_h)):
        raw, nrm = rows[(w, "raw")], rows[(w, "normalised")]
        assert nrm["orbit_spread"] == pytest.approx(raw["orbit_spread"] / s, rel=1e-10)
        assert nrm["class_orbit_ratio"] == pytest.approx(raw["class_orbit_ratio"], rel=1e-10)
        assert raw["intra_orbit_distance"] <= 2 * raw["orbit_spread"] * (1 + 1e-12)
        # the paper's reps are unit vectors: squared spread <= 1 - |centroid|^2 <= 1, distances <= 2
        assert 0 <= m["orbits"]["paper"][w]["spread"] <= 1 and m["orbits"]["paper"][w]["inter"] <= 2
    sh = m["orbits"]["summary"]
    assert sh["spread_shrink_normalised"] == pytest.approx(sh["spread_shrink_raw"] * s_h / s_z, rel=1e-10)
    pb, ph = m["orbits"]["paper"]["backbone"]["spread"], m["orbits"]["paper"]["head"]["spread"]
    assert r["headline"]["spread_shrink_paper"] == pytest.approx(pb / ph, rel=1e-12)


@pytest.mark.slow  # an end-to-end run (the slow tier of .ci/run)
def test_fd_curvature_converges_to_exact_on_the_stored_run(tiny):
    _, r = tiny
    conv = r["measurements"]["curvature"]["convergence"]
    for w in ("backbone", "head"):
        rows = sorted((x for x in conv if x["rep"] == w), key=lambda x: -x["h_deg"])
        best = min(x["median_rel_err"] for x in rows)
        assert best < 1e-4, rows  # FD meets the exact second derivative once h is below the kink spacing
        assert rows[0]["median_rel_err"] > 100 * best  # at the paper's 5 deg spacing it does not
        assert r["measurements"]["curvature"]["by_rep"][w]["exact_mean"] > 0


@pytest.fixture(scope="module")
def smooth_geometry():
    """A C^inf path: Gaussian blur in sigma through a swish CNN and a swish MLP head, float64."""
    bb = backbones.small_cnn((6, 6, 3), widths=(3, 4), activation="swish", dtype=jnp.float64)
    hd = heads.mlp(4, (5,), 3, activation="swish", dtype=jnp.float64)
    v = {"backbone": bb.init(jax.random.PRNGKey(1)), "head": hd.init(jax.random.PRNGKey(2))}
    cfg = ml_collections.ConfigDict({"analysis": {"tangent_blur_radius": 3}})
    geo = G.Geometry(bb, hd, G.augmentation_fn(cfg, "blur"))
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
    dirs = jax.random.normal(jax.random.PRNGKey(5), (zs.shape[0], 3, zs.shape[1]), jnp.float64)
    along, other = geo.degeneracy(v, x, t0, dirs)
    # Independent: the dense head Jacobians J and the tangents dz/dt, both by jacfwd.
    Js = np.asarray(jax.jit(jax.vmap(jax.jacfwd(lambda z: geo.head.apply(v["head"], z[None])[0][0])))(zs))
    dzs = np.asarray(jax.jit(jax.vmap(lambda xi: jax.jacfwd(lambda a: geo.rep(v, xi, a, "backbone"))(t0)))(x))
    for i in range(x.shape[0]):
        J, dz = Js[i], dzs[i]
        assert along[i] == pytest.approx(np.linalg.norm(J @ dz) / np.linalg.norm(dz), rel=1e-10)
        d = np.asarray(dirs[i])  # (K, d): the RMS of |J r| / |r| over the K directions
        rms = np.sqrt(np.mean(np.linalg.norm(d @ J.T, axis=1) ** 2 / np.linalg.norm(d, axis=1) ** 2))
        assert other[i] == pytest.approx(rms, rel=1e-10)


def test_control_directions_are_what_they_say(smooth_geometry):
    """between: differences to another sample (never itself); data: in the span of the centred z; random: N(0, I)."""
    zs = jax.random.normal(jax.random.PRNGKey(0), (6, 4), jnp.float64)
    dirs = G._control_directions(zs, 5, jax.random.PRNGKey(1))
    assert all(d.shape == (6, 5, 4) for d in dirs.values())
    for i in range(6):
        for k in range(5):
            diffs = np.asarray(zs) - np.asarray(zs[i])
            j = [q for q in range(6) if np.allclose(diffs[q], dirs["between"][i, k])]
            assert j and j[0] != i
    c = np.asarray(zs - zs.mean(0))
    coef = np.linalg.lstsq(c.T, np.asarray(dirs["data"]).reshape(-1, 4).T, rcond=None)[0]
    np.testing.assert_allclose(c.T @ coef, np.asarray(dirs["data"]).reshape(-1, 4).T, atol=1e-12)


def test_paper_orbit_spreads_and_compression_on_a_hand_made_model(smooth_geometry):
    """orbit_analysis' paper-way spreads equal a NumPy recomputation from the model's own outputs."""
    geo, v, x = smooth_geometry
    cfg = ml_collections.ConfigDict(
        {"seed": 0, "analysis": {"orbit_max_angle_deg": 45.0, "orbit_steps": 3, "paper_orbit_steps": 4}}
    )
    imgs = jnp.stack([x, x[::-1] * 0.5])  # 2 classes x 2 images
    v0 = {"backbone": v["backbone"], "head": geo.head.init(jax.random.PRNGKey(9))}
    o = G.orbit_analysis(cfg, geo, v, imgs, {"backbone": 1.0, "head": 1.0}, v_init=v0)
    ts = jnp.asarray(np.radians([0.0, 90.0, 180.0, 270.0]), jnp.float64)
    flat = imgs.reshape((4,) + imgs.shape[2:])
    for name, vv in (("head", v), ("head_untrained", v0)):
        z = np.asarray(jax.vmap(lambda im: jax.vmap(lambda t: geo.rep(vv, im, t, "backbone"))(ts))(flat))
        zn = z / np.linalg.norm(z, axis=-1, keepdims=True)
        h = np.asarray(jax.vmap(jax.vmap(lambda q: geo.head.apply(vv["head"], q[None])[0][0]))(jnp.asarray(zn)))
        hn = h / np.linalg.norm(h, axis=-1, keepdims=True)
        spread = lambda r: np.mean(np.sum((r - r.mean(1, keepdims=True)) ** 2, -1), 1)
        np.testing.assert_allclose(o["paper_spreads"]["backbone"], spread(zn), rtol=1e-10)
        np.testing.assert_allclose(o["paper_spreads"][name], spread(hn), rtol=1e-10)
        assert o["compression"][name]["S"] == pytest.approx(spread(zn).mean() / spread(hn).mean(), rel=1e-10)


def test_paper_orbit_reps_apply_the_head_to_normalised_z(smooth_geometry):
    geo, v, x = smooth_geometry
    ts = jnp.asarray([0.5, 1.5], jnp.float64)
    zp, hp = geo.paper_grid(v, x, ts)
    z = np.asarray(geo.grid(v, x, ts, which="backbone"))
    zn = z / np.linalg.norm(z, axis=-1, keepdims=True)
    np.testing.assert_allclose(np.asarray(zp), zn, rtol=1e-12)
    h = np.asarray(jax.vmap(jax.vmap(lambda zz: geo.head.apply(v["head"], zz[None])[0][0]))(jnp.asarray(zn)))
    np.testing.assert_allclose(np.asarray(hp), h / np.linalg.norm(h, axis=-1, keepdims=True), rtol=1e-12)


@pytest.mark.slow  # an end-to-end run (the slow tier of .ci/run)
def test_report_has_tables_and_figure_links(tiny):
    _, r = tiny
    text = guillotine.report(r, "figs")
    for name in ("probes", "curvature", "orbits_degeneracy"):
        assert f"(figs/{name}.png)" in text
    assert text.count("|---|") >= 8  # probes, sec5, orbits, curvature, convergence, 2 orbit tables, depth
    assert "rotation linear" in text and "spread shrink" in text.lower() and "negative control" in text
    assert "(toy)" in text and "untrained head h_0(z)" in text


# One process: the guillotine's tiny main run trained from scratch, then its rotation probes on z, h(z) and h_0(z);
# prints a SHA-256 over the trained parameters and statistics, every step's loss and every probe outcome.
_RUN_AND_HASH = """
import hashlib, json
import jax, numpy as np
jax.config.update("jax_enable_x64", True)
from experiments import guillotine
from experiments.configs import guillotine as gconfig
from experiments.guillotine import probing, training as T
c = gconfig.get_config("tiny")
run = T.train_simclr(c, c.model.head_depth)
train_ds, test_ds = T.load_data(c)
k_probe = jax.random.split(jax.random.PRNGKey(c.seed), 3)[1]
sets = probing.probe_sets(c, train_ds, test_ds, guillotine._sizes(c))
rot = probing.probe_suite(c, run, *sets, k_probe, class_probes=False, untrained=True)["rotation"]
h = hashlib.sha256()
for leaf in jax.tree_util.tree_leaves((run["params"], run["state"])):
    h.update(np.asarray(leaf).tobytes())
h.update(np.asarray(run["losses"]).tobytes() + json.dumps(rot, sort_keys=True).encode())
print(h.hexdigest(), float(run["losses"][-1]), guillotine.probe_gap_interval([guillotine.gap_outcomes(rot)], reps=200))
"""


@pytest.mark.slow  # two fresh processes, each compiling the tiny run (about 30 s on 2 cores)
def test_tiny_training_and_probes_are_bitwise_reproducible_run_to_run():
    """Two fresh processes (own compiles, own data rendering) train the same tiny run and probe it: the parameters,
    every loss and every probe outcome are bitwise the same (issue 32: the guillotine's gap was not reproducible)."""
    import pathlib
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parents[1]
    outs = [
        subprocess.run([sys.executable, "-c", _RUN_AND_HASH], cwd=root, capture_output=True, text=True, timeout=900)
        for _ in range(2)
    ]
    for o in outs:
        assert o.returncode == 0, o.stderr[-3000:]
    first, second = (o.stdout.strip().splitlines()[-1] for o in outs)
    assert len(first.split()[0]) == 64 and first == second


def test_bad_arguments_raise_clear_errors():
    cfg = gconfig.get_config("tiny")
    with pytest.raises(ValueError, match="depth"):
        T.make_head(cfg, 8, 0, jnp.float32)
    with pytest.raises(ValueError, match="augmentation"):
        G.augmentation_fn(cfg, "shear")
    bad = gconfig.get_config("tiny")
    bad.train.batch_size, bad.data.n_train = 128, 64
    with pytest.raises(
        ValueError, match=r"data\.num_train`: 64 examples cannot fill one batch of `data\.batch_size` = 128"
    ):
        T.train_simclr(bad, 2)
    bad = gconfig.get_config("tiny")
    bad.model.backbone = "alexnet"
    with pytest.raises(ValueError, match="backbone"):
        T.make_backbone(bad, jnp.float32)
    with pytest.raises(ValueError, match="variant"):
        gconfig.get_config("huge")


def test_paper_variants_are_the_authors_recipe():
    for v, (name, backbone) in {
        "paper": ("cifar10", "resnet18_cifar"),
        "paper_vit_tiny": ("cifar10", "vit_tiny"),
        "paper_cifar100": ("cifar100", "resnet18_cifar"),
    }.items():
        c = gconfig.get_config(v)
        assert (c.data.name, c.model.backbone) == (name, backbone)
        assert c.augment.rotation_deg == 45.0 and tuple(c.augment.crop_scale) == (0.08, 1.0)
        assert c.augment.gray_prob == 0.0 and c.augment.blur_prob == 0.0
        assert (c.model.head_hidden, c.model.head_out, c.model.head_final_bn, c.model.head_bias) == (
            2048,
            2048,
            True,
            False,
        )
        assert (c.train.batch_size, c.train.lr, c.train.temperature, c.probes.epochs) == (256, 1e-3, 0.1, 5)
        assert c.objective.name == "simclr_one_way"  # the authors' CE(z1 z2^T / 0.1), n - 1 negatives
        assert tuple(c.ablation.depths) == (1, 2, 3) and c.train.steps == 50 * (50000 // 256)
        # head_depth_ablations.py trains at ExperimentConfig.batch_size = 512 for 50 epochs (drop_last)
        assert (c.ablation.batch_size, c.ablation.steps) == (512, 50 * (50000 // 512))
        assert T.trained_augmentations(c) == {"rotation": True, "hue": True, "blur": False}
        assert (c.model.head_activation, c.ablation.activation) == ("relu", "swish")
        # the authors' probes: one random rotation per image, MLP hidden 256 on z and 512 on h(z)
        assert (c.probes.rotations, c.probes.hidden, c.probes.hidden_head) == ("random", 256, 512)
        assert tuple(c.analysis.negative) == ("blur",)
    # the smoke variant keeps the authors' views (the base's) and the symmetric NT-Xent
    s = gconfig.get_config("smoke")
    assert s.augment.to_dict() == gconfig.get_config("paper").augment.to_dict() and s.objective.name == "simclr"


def test_ablation_runs_at_its_own_batch_and_steps(tmp_path):
    c = gconfig.get_config("paper")
    c.train.checkpoint_dir = str(tmp_path)
    ab = R.ablation_config(c)
    assert (ab.train.batch_size, ab.train.steps) == (512, 4850) and ab.train.checkpoint_dir == f"{tmp_path}/ablation"
    assert (c.train.batch_size, c.train.steps) == (256, 9750)  # the main run's are untouched
    s = gconfig.get_config("smoke")
    assert (R.ablation_config(s).train.batch_size, R.ablation_config(s).train.steps) == (128, 300)


def test_training_goes_through_the_cli_trainer_with_the_authors_views():
    """The trainer config of a paper run is the authors' recipe, and the CLI builds the same models and views."""
    from ssl_geometry import augment, trainer

    c = gconfig.get_config("paper")
    tc = T.trainer_config(c, 3, "swish")
    assert (tc.objective.name, tc.objective.temperature) == (
        "simclr_one_way",
        0.1,
    )  # the authors' one-way CE in the paper variant
    assert (tc.optimizer.name, tc.optimizer.lr, tc.optimizer.schedule, tc.optimizer.weight_decay) == (
        "adam",
        1e-3,
        "constant",
        0.0,
    )
    assert tc.data.batch_size == 256 and tc.train.steps == c.train.steps and tc.model.backbone == "resnet18_cifar"
    assert tuple(tc.model.projector.hidden) == (2048, 2048) and tc.model.projector.activation == "swish"
    conf = trainer.augment_config(tc.augment)
    assert conf == augment.AugmentConfig(
        size=32,
        crop_scale=(0.08, 1.0),
        rotation_deg=45.0,
        jitter=(0.4, 0.4, 0.4, 0.1),
        jitter_prob=0.8,
        gray_prob=0.0,
        blur_prob=0.0,
    )
    head = trainer.build_head(tc.model.projector, 512, jnp.float32)
    assert head.name == T.make_head(c, 512, 3, jnp.float32, "swish").name
    with pytest.raises(ValueError, match=r"\['rotate'\]"):
        trainer.augment_config(ml_collections.ConfigDict({"name": "simclr_custom", "rotate": 45.0}))
    c.dry_run = True
    assert T.trainer_config(c, 2).train.steps == c.train.dry_run_steps == 4 and T.trainer_config(
        c, 2
    ).data.batch_size == 8 == T.dry_batch(c)
    assert T.trainer_config(c, 2, batch=16).data.batch_size == 16


def test_train_simclr_is_the_trainers_step():
    """Two steps of train_simclr equal two steps of trainer.make_train_step on the same state and batches."""
    from ssl_geometry import trainer

    c = gconfig.get_config("tiny")
    c.train.steps, c.train.batch_size, c.data.n_train = 2, 8, 16
    train_ds, _ = T.load_data(c)
    images, labels = train_ds.images, train_ds.labels
    run = T.train_simclr(c, 2)
    tc = T.trainer_config(c, 2)
    obj = trainer.build_objective(tc, images.shape[1:], 2)
    tx, sched = trainer.make_optimizer(tc.optimizer, 2, 8, probe_lr=float(tc.optimizer.probe_lr))
    step = jax.jit(trainer.make_train_step(obj, tx, sched))
    state = trainer.init_train_state(obj, tx, jax.random.PRNGKey(c.seed), int(labels.max()) + 1)
    np.testing.assert_array_equal(
        jax.tree_util.tree_leaves(run["init_params"])[0], jax.tree_util.tree_leaves(state["params"])[0]
    )
    losses = []
    for s in range(2):
        idx = trainer.batch_indices(c.seed, s, 16, 8)
        state, m = step(state, {"images": jnp.asarray(images[idx]), "labels": jnp.asarray(labels[idx])})
        losses.append(float(m["loss"]))
    np.testing.assert_allclose(run["losses"], losses, rtol=1e-5)
    for a, b in zip(
        jax.tree_util.tree_leaves(run["params"]["projector"]), jax.tree_util.tree_leaves(state["params"]["projector"])
    ):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def _bitwise_equal(a, b):
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    return len(la) == len(lb) and all(
        np.asarray(x).dtype == np.asarray(y).dtype and np.array_equal(x, y) for x, y in zip(la, lb)
    )


def test_train_simclr_checkpoints_resume_and_never_mix_runs(tmp_path):
    """An interrupted run resumes from its newest checkpoint to the same numbers; another run's directory is refused."""
    import shutil

    c = gconfig.get_config("tiny")
    c.train.steps, c.train.batch_size, c.data.n_train = 3, 8, 16
    c.train.checkpoint_every, c.train.checkpoint_dir = 1, str(tmp_path)
    full = T.train_simclr(c, 2)
    assert full["resumed_from"] is None and len(full["losses"]) == 3
    run_dir = tmp_path / f"depth2_{c.model.head_activation}"
    shutil.rmtree(run_dir / "checkpoints" / "3")  # interrupted after step 2
    again = T.train_simclr(c, 2)
    assert again["resumed_from"] == 2
    np.testing.assert_allclose(again["losses"], full["losses"], rtol=1e-6)
    chex.assert_trees_all_close(again["params"], full["params"], rtol=1e-5, atol=1e-7)
    other = gconfig.get_config("tiny")
    other.train.steps, other.train.batch_size, other.train.lr, other.data.n_train = 3, 8, 5e-4, 16
    other.train.checkpoint_every, other.train.checkpoint_dir = 1, str(tmp_path)
    with pytest.raises(ValueError, match="another run"):
        T.train_simclr(other, 2)
    other.train.checkpoint_dir = ""
    with pytest.raises(ValueError, match="checkpoint_dir"):
        T.train_simclr(other, 2)


@pytest.mark.slow  # end to end (subprocesses, full runs): the slow tier of .ci/run keeps README command 2 under 15 minutes
def test_guillotine_run_stopped_and_resumed_by_the_shared_loop_is_bitwise_the_uninterrupted_one(tmp_path):
    """The guillotine's trainer config through trainer.train: stop_after 2, rerun to 4 == 4 steps at once, bit for bit
    (state and every step's loss), and the losses train_simclr reads are the loop's logged ones."""
    from ssl_geometry import trainer

    c = gconfig.get_config("tiny")
    c.train.steps, c.train.batch_size, c.data.n_train = 4, 8, 16
    tc = T.trainer_config(c, 2)
    assert tc.train.log_every == 1 and tc.seed == c.seed and tc.data.shapes_max_angle_deg == c.data.shapes_max_angle_deg
    whole = trainer.train(tc, tmp_path / "whole", verbose=False)
    tc.train.stop_after = 2
    first = trainer.train(tc, tmp_path / "split", verbose=False)
    assert (first["status"], first["step"], first["resumed_from"]) == ("stopped", 2, None)
    tc.train.stop_after = 0  # a runtime field: the resume accepts the change
    second = trainer.train(tc, tmp_path / "split", verbose=False)
    assert (second["status"], second["step"], second["resumed_from"]) == ("finished", 4, 2)
    assert _bitwise_equal(whole["state"], second["state"])
    loss = lambda wd: [r["loss"] for r in trainer.read_metrics(wd) if "event" not in r]
    assert loss(tmp_path / "whole") == loss(tmp_path / "split") and len(loss(tmp_path / "whole")) == 4
    c.train.checkpoint_every, c.train.checkpoint_dir = 2, str(tmp_path / "ckpt")
    run = T.train_simclr(c, 2)
    assert run["losses"].tolist() == loss(tmp_path / "whole") and _bitwise_equal(
        run["params"], whole["state"]["params"]
    )


def test_dry_run_sizes_keep_every_step_small():
    c = gconfig.get_config("paper")
    assert guillotine._sizes(c)["curvature"] == c.analysis.curvature_images
    c.dry_run = True
    sz = guillotine._sizes(c)
    assert all(v <= 16 for v in sz.values()) and sz["degeneracy"] >= 2  # a permutation without fixed points needs 2
    # Each count is the paper's scaled by one fraction per part (16 / 50000 probe images; 8 / 256 geometry images).
    assert (sz["probe_train"], sz["probe_test"], sz["degeneracy"], sz["curvature"], sz["convergence"]) == (
        16,
        3,
        8,
        3,
        1,
    )
    big = guillotine._sizes(c, probe_images=32, geometry_images=16)
    assert (big["probe_train"], big["probe_test"], big["degeneracy"], big["curvature"], big["convergence"]) == (
        32,
        6,
        16,
        6,
        2,
    )
    assert (c.model.backbone, c.data.image_size, c.model.head_out) == ("resnet18_cifar", 32, 2048)  # the paper's models


def test_dry_run_projects_the_schedules_mean_update_and_each_analysis_part_from_two_sizes(monkeypatch, fake_clock):
    """Paper: the main run (9750 updates at 256) at batches 8 and 16, the ablation (3 runs of 4850 at 512) timed by
    its deepest head at 16 and 32: with a step time linear in the batch the training projection is every update at
    its own batch, ``9750 t(256) + 14550 t(512)``. Each analysis part is timed at its two sizes (probe images 512,
    1024 of 50000, a backbone pass and the heads on its z, 5 1/6 passes; probe fits at 4096 and 8192 images, each
    kind once through the analysis' own fit functions at the paper's 5 epochs and weighted by its count: rotation
    on z x 4 runs, on h(z) x 5 (the untrained head too), class on z and h(z) once; degeneracy images 8, 16 of 256)
    and projected apart; the analysis total is their sum, its points the costliest part's. The analysis stand-ins
    advance a fake clock that the timer reads (``harness.interleave``'s ``clock``) instead of sleeping, so every part
    is projected exactly whatever the load."""

    c = gconfig.get_config("paper")
    c.dry_run = True
    ab = R.ablation_config(c)
    t = lambda b: 1e-3 * b
    calls, sizes, clock = [], {"probes": [], "geometry": []}, fake_clock

    def fake_train(cfg, depth, activation=None, batch=None):  # a timing run: a temporary workdir
        calls.append((depth, activation, batch, cfg.train.checkpoint_every))
        return {"step_time_s": t(batch)}

    def unit(part, seconds_per_image):
        def make(n):
            sizes[part].append(n)

            def run():
                clock[0] += seconds_per_image * n

            return run

        return make

    fits = []

    def fake_fit(task):  # seconds per training row: 1e-6 x width (the MLP's cost grows with the feature width)
        def fit(feats, hidden, key, epochs, num_classes=None):
            (f_tr, y_tr), (f_te, _) = feats
            classes = int(y_tr.max()) + 1
            fits.append((task, f_tr.shape, f_te.shape[0], hidden, epochs, classes, num_classes))
            clock[0] += 1e-7 * f_tr.size
            return {}

        return fit

    monkeypatch.setattr(T, "train_simclr", fake_train)
    monkeypatch.setattr(probing, "rotation_fit", fake_fit("rotation"))
    monkeypatch.setattr(probing, "class_fit", fake_fit("class"))
    runs = {"main": {"step_time_s": t(8)}, **{d: {"step_time_s": t(16)} for d in c.ablation.depths}}
    widths = {"backbone": 16, "head": 64}
    d = D.dry_run(c, ab, runs, unit("probes", 2e-4), unit("geometry", 1e-3), widths, 100)
    assert calls == [(2, "relu", 16, 0), (3, "swish", 32, 0)]
    tr = d["training"]
    assert [n for n, _ in tr["points"]] == [8, 16] and tr["exponent"] == pytest.approx(1.0)
    assert tr["count"] == 9750 + 3 * 4850 and tr["projected_s"] == pytest.approx(9750 * t(256) + 14550 * t(512))
    assert tr["paths"]["ablation"]["points"] == [[16, t(16)], [32, t(32)]] and tr["paths"]["main"]["batch_full"] == 256
    assert sizes == {"probes": [512, 1024], "geometry": [8, 16]}
    an = d["analysis"]
    probes, geometry = an["parts"]["probes"], an["parts"]["geometry"]
    passes = 2 + 3 + 10000 / 60000  # main: rotation, class; 3 ablation runs: rotation; statistics (test share)
    assert D.probe_passes(c, 4) == pytest.approx(passes)
    assert [n for n, _ in probes["points"]] == [512, 1024] and (probes["full_size"], probes["count"]) == (50000, passes)
    assert [n for n, _ in geometry["points"]] == [8, 16] and (geometry["full_size"], geometry["count"]) == (256, 1)
    # 2e-4 s a probe image: 5 1/6 passes of 50000 images; 1e-3 s a degeneracy image: one analysis of 256
    assert [p[1] for p in probes["points"]] == pytest.approx([2e-4 * 512, 2e-4 * 1024], rel=1e-9)
    assert [p[1] for p in geometry["points"]] == pytest.approx([1e-3 * 8, 1e-3 * 16], rel=1e-9)
    assert probes["exponent"] == pytest.approx(1.0, rel=1e-9) and geometry["exponent"] == pytest.approx(1.0, rel=1e-9)
    assert probes["projected_s"] == pytest.approx(passes * 2e-4 * 50000, rel=1e-9)
    assert geometry["projected_s"] == pytest.approx(1e-3 * 256, rel=1e-9)
    # the fits: each kind at 4096 and 8192 images (test set 1/5 of that), once untimed and once timed per size
    assert D.fit_timing_sizes(c) == [4096, 8192]
    kinds = {
        ("rotation", 16, 256, 4, None): 4,
        ("rotation", 64, 512, 4, None): 5,
        ("class", 16, 256, 100, 100): 1,
        ("class", 64, 512, 100, 100): 1,
    }
    want = [
        (task, (n, w), round(n / 5), h, 5, k, nc)
        for n in (4096, 8192)
        for (task, w, h, k, nc) in kinds
        for _ in range(2)
    ]
    assert sorted(fits) == sorted(want)
    f = an["parts"]["fits"]
    assert [n for n, _ in f["points"]] == [4096, 8192] and (f["full_size"], f["count"]) == (50000, 1)
    assert {k: v["fits"] for k, v in f["kinds"].items()} == {
        "rotation/backbone": 4,
        "rotation/head": 5,
        "class/backbone": 1,
        "class/head": 1,
    }
    for i in range(2):  # each point is the sum of every kind's time weighted by its count
        assert f["points"][i][1] == pytest.approx(sum(k["fits"] * k["points"][i][1] for k in f["kinds"].values()))
    # 1e-7 s a feature: per image 4 x 16 + 5 x 64 (rotation) + 16 + 64 (class) weighted features; 50000 images
    assert [p[1] for p in f["points"]] == pytest.approx(
        [n * 1e-7 * (4 * 16 + 5 * 64 + 16 + 64) for n in (4096, 8192)], rel=1e-9
    )
    assert f["exponent"] == pytest.approx(1.0, rel=1e-9)
    assert f["projected_s"] == pytest.approx(50000 * 1e-7 * (4 * 16 + 5 * 64 + 16 + 64), rel=1e-9)
    assert an["projected_s"] == pytest.approx(probes["projected_s"] + f["projected_s"] + geometry["projected_s"])
    assert an["projected_s"] == pytest.approx(passes * 10 + 2.32 + 0.256, rel=1e-9)  # 51.67 + 2.32 + 0.256 s
    assert an["part_shown"] == "probes" and an["points"] == probes["points"]  # about 52 s against 2 s and 0.26 s
    assert d["projected_wall_time_s"] == d["training_s"] + d["analysis_s"] and d["step_time_s"] == tr["points"][1][1]
    with pytest.raises(ValueError, match="dry_run_examples"):
        D.run_batch(
            configs.apply_overrides(ml_collections.ConfigDict(c.to_dict()), {"data.dry_run_examples": 16}), ab, 1
        )


def test_probe_timing_sizes_are_an_eighth_and_a_quarter_capped_and_tile_repeats_the_images():
    """The probe part is timed at 1/8 and 1/4 of ``probes.train_images``, at most 512 and 1024 (the paper's 50,000;
    a smoke run's 2,000 at 250 and 500; the tiny 96 at 12 and 24), the probe fits at most at 4096 and 8192;
    ``tile`` cycles the generated images."""
    assert D.probe_timing_sizes(gconfig.get_config("paper")) == [512, 1024]
    assert D.probe_timing_sizes(gconfig.get_config("smoke")) == [250, 500]
    assert D.probe_timing_sizes(gconfig.get_config("tiny")) == [12, 24]
    assert D.fit_timing_sizes(gconfig.get_config("paper")) == [4096, 8192]
    assert D.fit_timing_sizes(gconfig.get_config("tiny")) == [12, 24]
    # the real fits at the tiny sizes: every kind timed at both, the unit their count-weighted sum
    f = D.fit_projection(gconfig.get_config("tiny"), 2, {"backbone": 8, "head": 6}, 10)
    assert [n for n, _ in f["points"]] == [12, 24] and f["full_size"] == 96 and f["projected_s"] > 0
    assert {k: v["fits"] for k, v in f["kinds"].items()} == {
        "rotation/backbone": 2,
        "rotation/head": 3,
        "class/backbone": 1,
        "class/head": 1,
    }
    imgs = np.arange(3 * 2).reshape(3, 2)
    np.testing.assert_array_equal(D.tile(imgs, 7), imgs[[0, 1, 2, 0, 1, 2, 0]])
    with pytest.raises(ValueError, match="`n` >= 1"):
        D.tile(imgs, 0)


def test_probe_suite_runs_the_backbone_once_per_image_set_and_equals_each_representations_own_probe(monkeypatch):
    """The probes of z, h(z) and h_0(z) from one backbone pass per image set (rotation train and test, class train
    and test: 4 passes, where a pass per representation took 10) equal ``probes.rotation_probe`` of each
    representation's own images -> features function with the suite's key, and the class probes equal the
    probes on ``obj.embed``/``obj.features`` of the class images."""
    from experiments.guillotine import probing
    from ssl_geometry import probes

    c = gconfig.get_config("tiny")
    c.train.steps, c.train.batch_size, c.data.n_train = 2, 8, 16
    train_ds, test_ds = T.load_data(c)
    run = T.train_simclr(c, 2)
    sets = probing.probe_sets(c, train_ds, test_ds, guillotine._sizes(c))
    key = jax.random.PRNGKey(11)
    passes, feature_fns = [], T.feature_fns

    def counting(r):
        fz, fh = feature_fns(r)
        return (lambda x: passes.append(x.shape[0]) or fz(x)), fh

    monkeypatch.setattr(T, "feature_fns", counting)
    got = probing.probe_suite(c, run, *sets, key, untrained=True)
    assert passes == [len(sets[0]), len(sets[1]), len(sets[2][0]), len(sets[3][0])]

    obj, p, s = run["objective"], run["params"], run["state"]
    p0, s0 = probing.untrained_head_run(run)["params"], probing.untrained_head_run(run)["state"]
    fns = {
        "backbone": lambda x: obj.features(p, s, x),
        "head": lambda x: obj.embed(p, s, x),
        "head_untrained": lambda x: obj.embed(p0, s0, x),
    }
    hidden = {"backbone": c.probes.hidden, "head": c.probes.hidden_head, "head_untrained": c.probes.hidden_head}
    k_rot, k_cls = jax.random.split(key)
    for name, fn in fns.items():
        want = probes.rotation_probe(
            fn, sets[0], sets[1], epochs=c.probes.epochs, hidden=hidden[name], rotations=c.probes.rotations, key=k_rot
        )
        assert got["rotation"][name] == {
            k: want[k]
            for k in ("linear", "mlp", "linear_train", "mlp_train", "linear_test_correct", "mlp_test_correct")
        }, name
    (xtr, ytr), (xte, yte) = sets[2], sets[3]
    for i, name in enumerate(("backbone", "head")):
        ftr, fte = probes.features_in_batches(fns[name], xtr), probes.features_in_batches(fns[name], xte)
        k = jax.random.fold_in(k_cls, i)
        want = {
            "linear": probes.logistic_probe(ftr, ytr, fte, yte, epochs=c.probes.epochs, key=k)["acc"],
            "mlp": probes.mlp_probe(ftr, ytr, fte, yte, hidden=hidden[name], epochs=c.probes.epochs, key=k)["acc"],
        }
        assert got["class"][name] == want, name
    # the untrained head really is another head: its features differ from the trained head's
    z = probes.features_in_batches(fns["backbone"], sets[1])
    assert not np.allclose(
        probes.features_in_batches(fns["head"], sets[1]), probes.features_in_batches(fns["head_untrained"], sets[1])
    )
    assert z.shape[0] == len(sets[1])
