"""Experiment 4's paper variant: the registry rule on hand-made runs, the released runs, and the curvature solver."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import claims, paper_simsiam
from experiments import collapse_escape_paper as cep
from experiments.configs import collapse_escape_paper as cfg_module
from ssl_geometry import trainer

T = 0.01  # the hand-made runs' escape threshold
UP = [0.002, 0.001] + [0.001] * 14 + [0.02]  # collapsed at start, above T at epoch 16: escaped
FLAT = [0.002] + [0.001] * 16  # collapsed throughout: stayed
HIGH = [0.12] * 17  # above T from epoch 0: never collapsed


def _run(act, bn, lr, series, diverged=False):
    """A hand-made run as train_one stores it: its outcome from the rule's own definition, and its epochs."""
    return {
        "activation": act,
        "batch_norm": bn,
        "lr_name": lr,
        "outcome": cep.run_outcome(series, T, diverged),
        "epochs_run": len(series),
        "diverged_at_step": 12 if diverged else None,
    }


GOOD = [
    _run("swish", False, "base", UP),
    _run("gelu", False, "base", FLAT),
    _run("linear", False, "base", FLAT),
    _run("relu", False, "small", FLAT),
    _run("relu", True, "base", UP),
]


def test_run_outcome_each_way_and_a_never_collapsed_run_is_not_an_escape():
    assert cep.run_outcome(UP, T) == "escaped" and cep.run_outcome(FLAT, T) == "stayed"
    assert cep.run_outcome(HIGH, T) == "not collapsed at start"  # the committed ReLU+BN smoke run: 0.121 > 0.0625
    assert cep.run_outcome([0.121, 0.119, 0.119, 0.119], 0.0625) == "not collapsed at start"
    assert cep.run_outcome([T, 2 * T], T) == "escaped"  # s(0) = t is collapsed (escape is s > t)
    assert cep.run_outcome([float("nan")], T, diverged=True) == "diverged"
    with pytest.raises(ValueError, match="series"):
        cep.run_outcome([0.001, float("nan")], T)
    with pytest.raises(ValueError, match="series"):
        cep.run_outcome([], T)


def test_ablation_rule_comes_out_each_way():
    assert cep.CLAIMS == (cep.ABLATION,) and cep.apply_rule(GOOD)[0] == "supported"  # E_smooth = 1/2
    # Supported needs the horizon: the same runs cut to 4 epochs say nothing yet.
    short = [{**r, "epochs_run": 4} for r in GOOD]
    verdict, reason, d = cep.apply_rule(short)
    assert verdict == "inconclusive" and reason.startswith("horizon:") and "4 epochs" in reason and "16" in reason
    assert (d["epochs_run"], d["horizon_epochs"]) == (4, 16)
    # A forbidden escape refutes at any horizon; E_smooth = 0 refutes only at the horizon.
    assert cep.apply_rule(GOOD + [_run("linear", False, "base", UP)])[0] == "not supported"
    assert cep.apply_rule(short + [_run("linear", False, "base", UP[:4] + [0.02])])[0] == "not supported"
    assert cep.apply_rule(GOOD + [_run("relu", False, "small", UP)])[0] == "not supported"
    no_smooth = [r for r in GOOD if r["activation"] not in ("swish", "gelu")] + [_run("swish", False, "base", FLAT)]
    verdict, reason, _ = cep.apply_rule(no_smooth)
    assert verdict == "not supported" and reason.startswith("no smooth run escapes")
    assert cep.apply_rule([{**r, "epochs_run": 15} for r in no_smooth])[0] == "inconclusive"
    # A group the rule reads that was not run (or only diverged) leaves it open; a diverged run never counts.
    assert cep.apply_rule(GOOD[:4])[0] == "inconclusive"
    verdict, _, d = cep.apply_rule(GOOD[:4] + [_run("relu", True, "base", UP, diverged=True)])
    assert verdict == "inconclusive" and d["diverged_runs"] == 1 and d["relu_bn_or_large_lr_runs"] == 0
    # Both of the last group stayed: E_smooth passes but no ReLU escape through BN or lr 0.5.
    stayed = GOOD[:4] + [_run("relu", True, "base", FLAT), _run("relu", False, "large", FLAT)]
    verdict, reason, _ = cep.apply_rule(stayed)
    assert verdict == "inconclusive" and "relu_bn_or_large_lr 0/2 escaped" in reason
    assert cep.escaped([0.001, 0.02, 0.001], 0.011) and not cep.escaped([0.001, 0.011], 0.011)


def test_a_never_collapsed_run_is_not_counted_as_escaped():
    """The committed smoke case: ReLU+BN above the threshold from epoch 0 was the group's only 'escape'."""
    runs = GOOD[:4] + [_run("relu", True, "base", HIGH), _run("relu", False, "large", FLAT)]
    verdict, reason, d = cep.apply_rule(runs)
    assert d["relu_bn_or_large_lr_escaped"] == 0 and d["relu_bn_or_large_lr_runs"] == 1
    assert d["not_collapsed_at_start_runs"] == 1 and "1 not collapsed at start" in reason
    assert verdict == "inconclusive"  # would be "supported" if the never-collapsed run counted as an escape
    only_high = GOOD[:4] + [_run("relu", True, "base", HIGH)]
    verdict, reason, _ = cep.apply_rule(only_high)
    assert verdict == "inconclusive" and "relu_bn_or_large_lr" in reason.split("(")[0]
    with pytest.raises(ValueError, match="outcome"):
        cep.apply_rule([{"activation": "relu", "batch_norm": True, "lr_name": "base", "escaped": True}])


def test_horizon_is_the_earliest_peak_of_the_released_smooth_runs():
    assert cep.horizon_epochs([[3, 1, 2, 5, 4], [3, 2, 4, 1, 0]]) == 3  # peaks at epochs 3 and 2: 1 + 2
    with pytest.raises(ValueError, match="smooth_series"):
        cep.horizon_epochs([])
    arrays = cep.released_collapse_arrays()
    peaks = {k: [cep.peak_epoch(r) for r in arrays[k]] for k in cep.HORIZON_KEYS}
    # The released Swish runs peak at epochs 32, 32, 22 and GELU at 27, 15, 16 (0-based), after falling first.
    assert peaks == {"swish_bn_False_lr_base/raw": [32, 32, 22], "gelu_bn_False_lr_base/raw": [27, 15, 16]}
    assert cep.released_horizon(arrays) == 16 == claims.CLAIMS[cep.ABLATION].thresholds["horizon_epochs"]
    # No released smooth run crosses the escape threshold 0.5 / sqrt(2048), which is why the peak is read instead.
    thr = cep.escape_threshold(cep.PAPER_OUT_DIM)
    assert all(np.max(arrays[k]) < thr for k in cep.HORIZON_KEYS)
    with pytest.raises(KeyError, match="swish"):
        cep.released_horizon({})


def test_released_runs_are_the_authors_fourteen_settings_and_the_rule_reads_them_alike():
    rows = cep.released_runs(cep.escape_threshold(cep.PAPER_OUT_DIM))
    settings = {(r["activation"], r["batch_norm"], r["lr_name"]) for r in rows}
    assert settings == {(a, bool(bn) and a != "linear", lr) for a, bn, lr in cfg_module.PAPER_RUNS}
    assert len(rows) == 3 * len(cfg_module.PAPER_RUNS)
    # Released BN runs start above the threshold (the batch statistics undo the x 0.1): not collapsed at start,
    # except the ReLU+BN lr 0.05 seed 2 (0.0106 < 0.0110, above from epoch 4); linear never reaches it.
    bn = [r for r in rows if r["batch_norm"]]
    assert sum(r["outcome"] == "not collapsed at start" for r in bn) == 17
    assert [(r["activation"], r["lr_name"], r["seed"]) for r in bn if r["outcome"] == "escaped"] == [
        ("relu", "base", 2)
    ]
    assert not any(r["escaped"] for r in rows if r["activation"] == "linear")
    verdict, reason, d = cep.apply_rule(rows)
    assert verdict == "not supported" and reason.startswith("no smooth run escapes") and d["E_smooth"] == 0
    assert (d["smooth_runs"], d["epochs_run"], d["not_collapsed_at_start_runs"]) == (6, 50, 17)


@pytest.mark.parametrize("bn", [False, True])
def test_head_curvature_matches_the_dense_hessian_and_picks_the_coupled_operator_under_batchnorm(bn):
    cfg = cfg_module.get_config("tiny")
    m = cfg.model
    tc = paper_simsiam.trainer_config(
        activation="swish",
        batch_norm=bn,
        lr=0.05,
        batch_size=8,
        projector_scale=0.1,
        backbone=m.backbone,
        backbone_kwargs=m.backbone_kwargs,
        hidden=m.hidden,
        out_dim=m.out_dim,
        pred_hidden=m.pred_hidden,
        data=cfg.data,
    )
    images, labels = paper_simsiam.load_images(cfg.data, seed=0, dry_run=True, dry_examples=8)
    run = paper_simsiam.build(tc, images.shape[1:])
    heads64 = cep.float64_heads(tc, run.backbone.out_dim)
    state = trainer.init_train_state(run.objective, run.tx, jax.random.PRNGKey(0), int(labels.max()) + 1)
    batch = jnp.asarray(images[:8])
    out = cep.head_curvature(run, heads64, state, batch, cfg, jax.random.PRNGKey(1))
    assert out["solver"] == ("coupled" if bn else "blockwise") and (out["block_coupling"] > 1e-3) == bn
    # The reference: the dense Hessian of the same first-view loss in z1, eigendecomposed.
    f = cep._first_view_loss(*heads64)
    z1, z2 = run.features(state, batch)
    cast = lambda t: jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64), t)
    hp = cast({k: state["params"][k] for k in ("projector", "predictor")})
    bs = cast({k: state["obj_state"].get(k, {}) for k in ("projector", "predictor")})
    z1 = jnp.asarray(z1, jnp.float64)
    u2 = heads64[0].apply({"params": hp["projector"], **bs["projector"]}, jnp.asarray(z2, jnp.float64), train=True)[0]
    n, d = z1.shape
    H = np.asarray(jax.hessian(lambda x: f(x.reshape(n, d), hp, u2, bs))(z1.reshape(-1)))
    ev = np.linalg.eigvalsh(0.5 * (H + H.T))
    scale = max(abs(ev[0]), abs(ev[-1]))
    assert out["lambda_min"] == pytest.approx(ev[0], abs=1e-8 * scale)
    assert out["lambda_max"] == pytest.approx(ev[-1], abs=1e-8 * scale)


def test_dry_run_times_the_costliest_path_at_two_batches_and_projects_every_run(monkeypatch):
    """The tiny dry run: each head path once at 1/8 of the batch, the BN path (the costliest) also at 1/4; its
    trainer step and curvature time fitted as ``a n^p`` and projected to every run, seed and epoch of the variant."""
    cfg = cfg_module.get_config("tiny")
    cfg.dry_run = True
    calls, t_step, t_curv = [], (lambda b: 1e-3 * b**1.2), (lambda b: 5e-2 * b**2)

    def fake_train_one(config, act, bn, lr, seed, images, batch=None):  # a run's row as train_one returns it
        calls.append((act, bn, batch))
        return {
            "activation": act,
            "batch_norm": bn and act != "linear",
            "lr_name": lr,
            "seed": seed,
            "batch": batch,
            "step_time_s": t_step(batch) * (3 if act == "linear" else 1),
            "curvature_time_s": t_curv(batch),
        }

    monkeypatch.setattr(cep, "train_one", fake_train_one)
    m = cep.measure(cfg)
    d = m["dry_run"]
    assert calls == [("linear", False, 2), ("swish", True, 2), ("swish", True, 4)]
    assert [r["batch"] for r in m["rows"]] == [2, 2] and d["timed_path"] == "bn" and d["paths_run"] == ["bn", "linear"]
    images, _ = paper_simsiam.load_images(cfg.data, seed=cfg.seed, dry_run=True, dry_examples=cfg.dry.examples)
    runs = len(cfg.runs) * cfg.seeds
    steps = runs * cfg.train.epochs * min(len(images) // cfg.train.batch_size, cfg.train.steps_per_epoch)
    assert (d["steps_full"], d["curvatures_full"], d["batch_full"]) == (steps, 2 * runs, 16)
    for part, t, p, count in (("training", t_step, 1.2, steps), ("analysis", t_curv, 2.0, 2 * runs)):
        r = d[part]  # the BN path's times only (the linear path's, three times slower here, are not in the fit)
        assert [n for n, _ in r["points"]] == [2.0, 4.0] and r["exponent"] == pytest.approx(p)
        assert r["projected_s"] == pytest.approx(count * t(16)) and r["projected_s"] > 0
    assert d["projected_wall_time_s"] == d["training_s"] + d["analysis_s"] and d["step_time_s"] == t_step(4)
    assert d["path_times_s"]["linear"] == [3 * t_step(2), t_curv(2)]
