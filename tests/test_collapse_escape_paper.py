"""Experiment 4's paper variant: the registry rule on hand-made runs, the released runs, and the curvature solver."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import collapse_escape_paper as cep
from experiments import paper_simsiam
from experiments.configs import collapse_escape_paper as cfg_module
from ssl_geometry import trainer


def _run(act, bn, lr, escaped, diverged=None):
    return {"activation": act, "batch_norm": bn, "lr_name": lr, "escaped": escaped, "diverged_at_step": diverged}


GOOD = [_run("swish", False, "base", True), _run("gelu", False, "base", False), _run("linear", False, "base", False),
        _run("relu", False, "small", False), _run("relu", True, "base", True)]


def test_ablation_rule_comes_out_each_way():
    assert cep.apply_rule(GOOD)[0] == "supported"  # E_smooth = 1/2 >= min_smooth_escape
    assert cep.apply_rule(GOOD + [_run("linear", False, "base", True)])[0] == "not supported"
    assert cep.apply_rule(GOOD + [_run("relu", False, "small", True)])[0] == "not supported"
    no_smooth = [r for r in GOOD if r["activation"] not in ("swish", "gelu")] + [_run("swish", False, "base", False)]
    assert cep.apply_rule(no_smooth)[0] == "not supported"
    # A group the rule reads that was not run (or only diverged) leaves it open; a diverged run never counts.
    assert cep.apply_rule(GOOD[:4])[0] == "inconclusive"
    verdict, _, deciding = cep.apply_rule(GOOD[:4] + [_run("relu", True, "base", True, diverged=12)])
    assert verdict == "inconclusive" and deciding["diverged_runs"] == 1 and deciding["relu_bn_or_large_lr_runs"] == 0
    assert cep.escaped([0.001, 0.02, 0.001], 0.011) and not cep.escaped([0.001, 0.011], 0.011)


def test_released_runs_are_the_authors_fourteen_settings_and_the_rule_reads_them_alike():
    rows = cep.released_runs(cep.escape_threshold(cep.PAPER_OUT_DIM))
    settings = {(r["activation"], r["batch_norm"], r["lr_name"]) for r in rows}
    assert settings == {(a, bool(bn) and a != "linear", lr) for a, bn, lr in cfg_module.PAPER_RUNS}
    assert len(rows) == 3 * len(cfg_module.PAPER_RUNS)
    # Released BN runs start above the threshold (the batch statistics' t = 0 artefact); linear never reaches it.
    assert all(r["escaped"] for r in rows if r["activation"] == "swish" and r["batch_norm"] and r["lr_name"] != "small")
    assert not any(r["escaped"] for r in rows if r["activation"] == "linear")


@pytest.mark.parametrize("bn", [False, True])
def test_head_curvature_matches_the_dense_hessian_and_picks_the_coupled_operator_under_batchnorm(bn):
    cfg = cfg_module.get_config("tiny")
    m = cfg.model
    tc = paper_simsiam.trainer_config(activation="swish", batch_norm=bn, lr=0.05, batch_size=8, projector_scale=0.1,
                                      backbone=m.backbone, backbone_kwargs=m.backbone_kwargs, hidden=m.hidden,
                                      out_dim=m.out_dim, pred_hidden=m.pred_hidden, data=cfg.data)
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
    cast = lambda t: jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64), t)  # noqa: E731
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
    calls, t_step, t_curv = [], (lambda b: 1e-3 * b ** 1.2), (lambda b: 5e-2 * b ** 2)

    def fake_train_one(config, act, bn, lr, seed, images, batch=None):  # a run's row as train_one returns it
        calls.append((act, bn, batch))
        return {"activation": act, "batch_norm": bn and act != "linear", "lr_name": lr, "seed": seed, "batch": batch,
                "step_time_s": t_step(batch) * (3 if act == "linear" else 1), "curvature_time_s": t_curv(batch)}

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
