"""The dry run of every paper variant (``reproduce --variant paper --dry-run``): each paper path executes.

Each test runs one of the paper variants ``reproduce --variant paper`` runs (``paper`` of every
experiment and the sibling ``paper_*`` variants) end to end with ``config.dry_run = True`` (the
paper's models and image shapes, tfds mock data, reduced batches, a few steps per training phase plus
every analysis step) and checks the projection it reports. A paper variant that cannot dry-run fails.
The ResNet-18 paper variants compile the full model on CPU: each of these tests takes about a minute
on 2 cores (compilation dominates; the 2 steps themselves take seconds).
"""

import math

import numpy as np
import pytest

from experiments import claims, projection, suite

#: Every paper variant's dry run builds the paper's models (ResNet-18, ViT-T, ResNet-50, paper widths): on a
#: 2-core CPU each takes 2 to 15 minutes (about an hour and a half in all), more than CI's 90 minutes leave after
#: the suite and the slow tier. They are the ``paper`` tier (marked ``slow`` and ``paper``, so neither the suite
#: nor ``.ci/run``'s slow tier runs them): ``python -m pytest -n 2 -q -m paper``, by hand or on an accelerator.


#: Every (experiment, paper variant) pair ``reproduce --variant paper`` runs.
PAPER_RUNS = [(name, v) for name in suite.NAMES for v in suite.variants_of(name, "paper")]


def test_every_paper_variant_is_run_by_reproduce():
    """``--variant paper`` covers the guillotine's ViT-T and CIFAR-100 variants, each in a directory of its own."""
    assert ("guillotine", "paper_vit_tiny") in PAPER_RUNS and ("guillotine", "paper_cifar100") in PAPER_RUNS
    dirs = [suite.run_dir(n, v) for n, v in PAPER_RUNS]
    assert len(set(dirs)) == len(dirs) and "guillotine-paper_vit_tiny" in dirs
    assert ("collapse_escape_paper", "paper") in PAPER_RUNS and not any(n == "collapse_escape" for n, _ in PAPER_RUNS)
    assert suite.variants_of("guillotine", "smoke") == ["smoke"]


@pytest.mark.slow
@pytest.mark.paper
@pytest.mark.parametrize("name,variant", PAPER_RUNS, ids=[suite.run_dir(n, v) for n, v in PAPER_RUNS])
def test_paper_variant_dry_run(name, variant, tmp_path):
    module, cfg_module = suite.load(name)
    assert getattr(module, "DRY_RUN", False) and "dry_run" in cfg_module.get_config(variant), (
        f"{name}: every paper path must dry-run ({module.__name__} does not declare DRY_RUN = True)"
    )
    res = suite.run_one(name, variant, tmp_path, force=True, dry_run=True)
    assert res["config"]["dry_run"] is True and res["variant"] == variant
    assert (tmp_path / suite.run_dir(name, variant) / "results.json").exists()
    d = res["measurements"]["dry_run"]
    assert d["step_time_s"] > 0 and math.isfinite(d["step_time_s"])
    # The full variant takes many steps: its projection must exceed the 2 measured steps.
    assert d["projected_wall_time_s"] > 2 * d["step_time_s"] and math.isfinite(d["projected_wall_time_s"])
    assert isinstance(d["device"], str) and d["device"]
    # Projected from measurements: training and/or analysis each timed at two reduced sizes, with a fitted exponent.
    parts = {p: d[p] for p in ("training", "analysis") if p in d}
    assert parts, f"{name}/{variant}: the dry run must project from units timed at two sizes (training=/analysis=)"
    for part, r in parts.items():
        assert len({n for n, _ in r["points"]}) >= 2 and math.isfinite(r["exponent"]) and r["projected_s"] > 0, part
    assert d["projected_wall_time_s"] == pytest.approx(sum(r["projected_s"] for r in parts.values()))
    assert res["claims"] and all(c["verdict"] in claims.VERDICTS for c in res["claims"])


@pytest.mark.slow
@pytest.mark.paper
def test_simsiam_cifar10_recipe_trains_two_steps_on_mock_cifar(tmp_path):
    """The trainer config of the paper's SimSiam (``configs/simsiam_cifar10.py``) through ``trainer.train``."""
    import tensorflow_datasets as tfds

    from experiments.configs import simsiam_cifar10
    from ssl_geometry import trainer

    c = simsiam_cifar10.get_config("swish")
    # The authors' recipe: no weight decay, constant lr, BN on every head layer (predictor output too).
    assert c.optimizer.weight_decay == 0.0 and c.optimizer.schedule == "constant" and c.optimizer.lr == 0.05
    assert c.model.predictor.final_batch_norm and c.model.projector.final_batch_norm and c.data.batch_size == 512
    assert not simsiam_cifar10.get_config("linear").model.projector.batch_norm
    c.data.batch_size, c.train.steps, c.train.log_every = 8, 2, 1
    c.train.checkpoint_every, c.train.progress = 2, False
    # (data.num_train is left at 0: ssl_geometry.data.subset fails on tfds sets, see the report.)
    c.eval.update({"max_train": 16, "max_test": 16, "knn_k": 4, "rotation_epochs": 1, "metrics_images": 16})
    with tfds.testing.mock_data(num_examples=16):
        out = trainer.train(c, tmp_path / "run", verbose=False)
    assert out["step"] == 2 and math.isfinite(out["last"]["loss"])


def test_tracked_step_observes_the_views_the_trainer_trains_on():
    """The paper statistics are taken on the very views the trainer's step trains on (independent recompute)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from experiments import paper_simsiam
    from ssl_geometry import losses, metrics, trainer

    tc = paper_simsiam.trainer_config(
        activation="swish",
        batch_norm=True,
        lr=0.05,
        batch_size=8,
        projector_scale=0.1,
        backbone="small_cnn",
        backbone_kwargs={"widths": (4, 8)},
        hidden=8,
        out_dim=8,
        pred_hidden=4,
        epochs=1,
        steps_per_epoch=2,
    )
    assert tc.optimizer.weight_decay == 0.0 and tc.model.predictor.final_batch_norm
    run = paper_simsiam.build(tc, (8, 8, 3))
    state = trainer.init_train_state(run.objective, run.tx, jax.random.PRNGKey(0), 10)
    images = jnp.asarray(np.random.default_rng(0).integers(0, 256, (8, 8, 8, 3)), jnp.uint8)
    batch = {"images": images, "labels": jnp.zeros(8, jnp.int32)}
    # The step the run loop jits: the trainer's step with run.observe traced into it.
    tracked = jax.jit(
        trainer.make_train_step(run.objective, run.tx, trainer.build_optimizer(tc)[1], observe=run.observe)
    )

    def run_step(st, b):
        new, metrics = tracked(st, b)
        return new, metrics, {k: metrics[k] for k in paper_simsiam.OBSERVED}

    new_state, m, obs = run_step(state, batch)
    # Recompute the SimSiam loss from paper_simsiam.views and the models in train mode.
    p, s = state["params"], state["obj_state"]
    x1, x2 = paper_simsiam.views(run.augment, state, images, jnp.float32)

    def fwd(x):
        z, _ = run.backbone.apply({"params": p["backbone"], **s["backbone"]}, x, train=True)
        u, _ = run.projector.apply({"params": p["projector"], **s["projector"]}, z, train=True)
        q, _ = run.predictor.apply({"params": p["predictor"], **s["predictor"]}, u, train=True)
        return z, u, q

    (z1, u1, q1), (z2, u2, q2) = fwd(x1), fwd(x2)
    assert float(losses.simsiam(q1, q2, u1, u2)) == pytest.approx(float(m["loss"]), rel=1e-5)
    assert float(obs["std_head"]) == pytest.approx(float(metrics.normalized_std(jnp.concatenate([u1, u2]))), rel=1e-5)
    # The authors' clamped condition number: lambda_max / max(lambda_min, 1e-7) of the normalised rows' covariance.
    zn = np.asarray(jnp.concatenate([z1, z2]), np.float64)
    zn = zn / np.linalg.norm(zn, axis=1, keepdims=True)
    ev = np.linalg.eigvalsh(np.cov(zn, rowvar=False))
    assert float(obs["cond_backbone"]) == pytest.approx(ev[-1] / max(ev[0], 1e-7), rel=1e-3)
    assert int(new_state["step"]) == 1
    # The authors' relative update size lr |g| / (|theta| + 1e-7), g read off the momentum buffer: against
    # jax.grad of the SSL loss, at the second step (non-zero buffer from the first).
    state2 = new_state
    _, _, obs2 = run_step(state2, batch)
    rng = jax.random.fold_in(state2["rng"], state2["step"])
    g = jax.grad(lambda q: run.objective.loss_fn(q, state2["obj_state"], rng, batch)[0])(state2["params"])
    norm = lambda t: float(
        np.sqrt(sum(np.sum(np.square(np.asarray(a, np.float64))) for a in jax.tree_util.tree_leaves(t)))
    )
    for grp in ("projector", "backbone"):
        want = 0.05 * norm(g[grp]) / (norm(state2["params"][grp]) + 1e-7)
        assert float(obs2[f"rel_update_{grp}"]) == pytest.approx(want, rel=1e-3)


@pytest.mark.parametrize("m,k", [(6, 10), (12, 5)])
def test_paper_condition_number_equals_the_clamped_covariance_ratio(m, k):
    import jax.numpy as jnp
    import numpy as np

    from experiments import paper_simsiam
    from ssl_geometry import metrics

    z = np.random.default_rng(m).normal(size=(m, k))
    zn = jnp.asarray(z / np.linalg.norm(z, axis=1, keepdims=True))
    want = float(metrics.covariance_condition_number(zn, eig_floor=1e-7))
    ev = np.linalg.eigvalsh(np.cov(np.asarray(zn), rowvar=False))
    assert want == pytest.approx(ev[-1] / max(ev[0], 1e-7), rel=1e-9)
    assert float(paper_simsiam.paper_condition_number(zn)) == pytest.approx(want, rel=1e-9)


def test_train_run_reports_divergence_and_keeps_only_finished_epochs():
    import jax.numpy as jnp
    import numpy as np

    from experiments import paper_simsiam

    def metrics(s):  # a stand-in trainer step's metrics whose loss turns NaN at update 5 (epoch 2 of 3 x 3 steps)
        loss = jnp.where(s == 5, jnp.nan, 1.0 / (1.0 + s))
        return {
            "loss": loss,
            "rel_update/backbone": jnp.float32(0.1),
            "rel_update/head": jnp.float32(0.2),
            "std_head": jnp.float32(s),
        }

    # The hook train_run gives the run loop, called as the loop calls it: after update s with the step count s + 1.
    out = paper_simsiam.EpochMeans(3, names=("std_head",))
    with pytest.raises(paper_simsiam.Diverged):
        for s in range(9):
            out.after_step(s + 1, None, metrics(s))
    assert out.diverged_at_step == 5
    assert out.series["std_head"] == [1.0]  # epoch 0 (steps 0, 1, 2) only; epoch 1 held the NaN
    assert out.series["loss"] == pytest.approx([np.mean([1.0, 0.5, 1 / 3])])


def test_train_run_stops_a_diverging_run_of_the_run_loop_at_its_epoch():
    """Through trainer.train: lr 1e8 makes the loss non-finite within a few updates; the run ends at the end of
    that epoch with only the finished epochs (all finite) in the series."""
    import ml_collections
    import numpy as np

    from experiments import paper_simsiam

    data = ml_collections.ConfigDict({"name": "digits", "image_size": 8, "data_dir": "", "num_train": 0})
    tc = paper_simsiam.trainer_config(
        activation="linear",
        batch_norm=False,
        lr=1e8,
        batch_size=16,
        projector_scale=1.0,
        backbone="small_cnn",
        backbone_kwargs={"widths": (4, 8)},
        hidden=8,
        out_dim=8,
        pred_hidden=4,
        epochs=4,
        steps_per_epoch=1,
        data=data,
    )
    rec = paper_simsiam.train_run(paper_simsiam.build(tc, (8, 8, 3)), tc)
    d = rec["diverged_at_step"]
    assert d is not None and 0 < d < 4 and rec["state"] is None
    assert len(rec["epochs"]["loss"]) == d and np.all(np.isfinite(rec["epochs"]["std_head"]))


def test_power_law_projection_recovers_a_known_exponent_from_synthetic_timings():
    """Times ``t(n) = 3e-4 n^1.7`` at n = 32 and 64 project n = 512 exactly; 10 units cost 10 times one."""
    t = lambda n: 3e-4 * n**1.7
    rec = projection.power_law_projection([[32, t(32)], [64, t(64)]], full_size=512, count=10)
    assert rec["exponent"] == pytest.approx(1.7, rel=1e-12)
    assert rec["unit_time_s"] == pytest.approx(t(512), rel=1e-12)
    assert rec["projected_s"] == pytest.approx(10 * t(512), rel=1e-12)
    assert rec["points"] == [[32.0, t(32)], [64.0, t(64)]] and rec["full_size"] == 512.0 and "note" not in rec
    # Three noisy points: the least-squares exponent, not the first pair's.
    noisy = [[16, t(16) * 1.1], [32, t(32) / 1.1], [64, t(64) * 1.1]]
    assert projection.power_law_projection(noisy, 512)["exponent"] == pytest.approx(
        float(np.polyfit(np.log([16, 32, 64]), np.log([p[1] for p in noisy]), 1)[0]), rel=1e-12
    )


def test_power_law_projection_names_bad_points_and_flags_a_negative_exponent():
    for bad in ([[32, 1.0]], [[32, 1.0], [32, 2.0]], [[32, 1.0], [64, float("nan")]], [[0, 1.0], [64, 2.0]]):
        with pytest.raises(ValueError, match="`points`"):
            projection.power_law_projection(bad, 512)
    with pytest.raises(ValueError, match="`full_size`"):
        projection.power_law_projection([[32, 1.0], [64, 2.0]], 0)
    rec = projection.power_law_projection([[32, 2.0], [64, 1.0]], 512, count=3)
    assert rec["exponent"] == pytest.approx(-1.0) and "noise" in rec["note"] and rec["projected_s"] == 3.0


def test_time_at_sizes_excludes_the_first_call(fake_clock):
    """The first call of each size costs 0.2 s (a compilation); the timed calls cost 0.01 * n / 8 s. The calls
    advance a fake clock that the timer reads (``harness.interleave``'s ``clock``) instead of sleeping, so the times
    are exact whatever the load: 0.01 and 0.02 s (0.21 and 0.22 s with the first call counted in)."""
    clock, calls = fake_clock, []

    def make_step(n):
        def step():
            clock[0] += 0.01 * n / 8 if n in calls else 0.2
            calls.append(n)

        return step

    (n1, t1), (n2, t2) = projection.time_at_sizes(make_step, (8, 16), repeats=1)
    assert calls == [8, 8, 16, 16]  # per size: the untimed first call, then the timed one
    assert (n1, n2) == (8, 16) and t1 == pytest.approx(0.01, rel=1e-9) and t2 == pytest.approx(0.02, rel=1e-9)


def test_dry_run_record_projects_training_and_analysis_apart():
    from experiments import report_md

    train = projection.power_law_projection([[32, 0.1], [64, 0.2]], 256, count=36000)  # p = 1: 0.8 s a step
    ana = projection.power_law_projection([[32, 1.0], [64, 4.0]], 256, count=5)  # p = 2: 64 s a case
    rec = projection.dry_run_record(0.2, training=train, analysis=ana)
    assert rec["training_s"] == pytest.approx(36000 * 0.8) and rec["analysis_s"] == pytest.approx(5 * 64)
    assert rec["projected_wall_time_s"] == pytest.approx(36000 * 0.8 + 320)
    assert rec["training_device_hours"] == pytest.approx(8.0)
    with pytest.raises(ValueError, match="exactly one"):
        projection.dry_run_record(0.2, 10, analysis=ana)
    assert "analysis_s" not in projection.dry_run_record(0.2, 10)

    class E:
        label, results = "x", {"measurements": {"dry_run": rec}, "wall_time_s": 1.0}

    row = report_md.dry_run_table([E()]).splitlines()[2]
    assert "8 h (p = 1;" in row and "0.08889 h (p = 2; 32: 1 s, 64: 4 s; full 256)" in row
    # an analysis that is a sum of parts projected apart shows each part's hours, exponent and points
    it = projection.power_law_projection([[32, 0.5], [64, 1.0]], 256, count=450)  # p = 1: 4 s each, 0.5 h
    summed = {**ana, "projected_s": ana["projected_s"] + it["projected_s"], "parts": {"cases": ana, "iterations": it}}
    E.results = {"measurements": {"dry_run": projection.dry_run_record(0.2, analysis=summed)}, "wall_time_s": 1.0}
    row = report_md.dry_run_table([E()]).splitlines()[2]
    assert (
        "0.5889 h (cases: 0.08889 h, p = 2, 32: 1 s, 64: 4 s, full 256; iterations: 0.5 h, p = 1, 32: 0.5 s, "
        "64: 1 s, full 256)"
    ) in row


def test_reduced_sizes_are_an_eighth_and_a_quarter_then_half_and_full_and_refuse_a_size_too_small_to_fit():
    assert projection.reduced_sizes(512) == [64, 128] and projection.reduced_sizes(2048) == [256, 512]
    assert projection.reduced_sizes(12) == [2, 3] and projection.reduced_sizes(100, minimum=16) == [16, 25]
    # a toy size (the tiny variants' dry run): half and full
    assert projection.reduced_sizes(8) == [4, 8] and projection.reduced_sizes(3) == [2, 3]
    with pytest.raises(ValueError, match="`full_size` = 2"):
        projection.reduced_sizes(2)


def test_project_at_sizes_fits_a_unit_whose_time_grows_as_n_squared(fake_clock):
    """A unit costing 1e-5 n^2 s (n = 64 and 128 of 512: 40.96 and 163.84 ms) projects 10 units at 512 to
    10 * 1e-5 * 512^2 = 26.2144 s, exponent 2. The unit advances a fake clock that the timer reads
    (``harness.interleave``'s ``clock``) instead of sleeping, so the fit is exact whatever the load."""
    clock = fake_clock

    def make_unit(n):
        def unit():
            clock[0] += 1e-5 * n * n

        return unit

    rec = projection.project_at_sizes(make_unit, 512, 10, repeats=1)
    assert [p[0] for p in rec["points"]] == [64.0, 128.0] and rec["full_size"] == 512.0
    assert [p[1] for p in rec["points"]] == pytest.approx([1e-5 * 64**2, 1e-5 * 128**2], rel=1e-9)
    assert rec["exponent"] == pytest.approx(2.0, rel=1e-9)
    assert rec["projected_s"] == pytest.approx(10 * 1e-5 * 512**2, rel=1e-9)
