"""The SSL trainer: update step, sharding (8 simulated devices), resume after SIGKILL, CLI, metrics."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from ssl_geometry import heads, objectives, trainer
from ssl_geometry import train as train_cli

ROOT = pathlib.Path(__file__).resolve().parents[1]
TINY = ROOT / "experiments" / "configs" / "tiny.py"


def _env(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    env.update(extra)
    return env


# ----------------------------------------------------------------------------- objectives and step


def _vec_models(dtype=jnp.float64):
    bb = heads.mlp(6, (8,), 5, activation="swish", batch_norm=True, dtype=dtype)
    proj = heads.mlp(5, (8,), 4, activation="relu", batch_norm=True, final_batch_norm=True, bias=False, dtype=dtype)
    pred = heads.mlp(4, (3,), 4, activation="relu", batch_norm=True, bias=False, dtype=dtype)
    return bb, proj, pred


def _noise_views(key, x):
    k1, k2 = jax.random.split(key)
    return x + 0.1 * jax.random.normal(k1, x.shape, x.dtype), x + 0.1 * jax.random.normal(k2, x.shape, x.dtype)


@pytest.fixture(scope="module")
def vec_batch():
    x = jax.random.normal(jax.random.PRNGKey(1), (8, 6), jnp.float64)
    return {"images": x, "labels": jnp.arange(8) % 3}


@pytest.mark.parametrize("name", objectives.OBJECTIVES)
def test_every_objective_takes_a_finite_step(name, vec_batch):
    bb, proj, pred = _vec_models()
    if name == "dino":  # a final BatchNorm would centre the teacher outputs exactly (centre stays 0)
        proj = heads.mlp(5, (8,), 4, activation="gelu", dtype=jnp.float64)
    obj = objectives.make_objective(
        name,
        bb,
        proj,
        pred if name in objectives.PREDICTOR_METHODS else None,
        augment=_noise_views,
        queue_size=16,
        ema=0.9,
        total_steps=10,
    )
    tx, sched = trainer.make_optimizer({"name": "sgd", "lr": 0.05, "momentum": 0.9}, 10, 8)
    state = trainer.init_train_state(obj, tx, jax.random.PRNGKey(0), 3)
    step = jax.jit(trainer.make_train_step(obj, tx, sched))
    new, m = step(state, vec_batch)
    assert np.isfinite(float(m["loss"])) and int(new["step"]) == 1
    assert float(m["rel_update/backbone"]) > 0 and float(m["rel_update/head"]) > 0
    if name in objectives.EMA_METHODS:
        tau = float(objectives.ema_decay(1, 10, 0.9))
        expected = jax.tree_util.tree_map(
            lambda t, o: tau * t + (1 - tau) * o,
            state["obj_state"]["target"]["params"]["projector"],
            new["params"]["projector"],
        )
        jax.tree_util.tree_map(
            lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14),
            new["obj_state"]["target"]["params"]["projector"],
            expected,
        )
    if name == "moco":
        q = new["obj_state"]["queue"]
        assert q.shape == (16, 4)
        # FIFO: the 8 oldest keys leave, the batch's 8 unit keys are appended.
        np.testing.assert_array_equal(np.asarray(q[:8]), np.asarray(state["obj_state"]["queue"][8:]))
        np.testing.assert_allclose(np.linalg.norm(np.asarray(q[8:]), axis=1), 1.0, rtol=1e-10)
    if name == "dino":
        assert np.linalg.norm(np.asarray(new["obj_state"]["center"])) > 1e-3


def test_simsiam_step_equals_hand_written_sgd(vec_batch):
    """One SGD step (no momentum) = params - lr * grad of an independently composed SimSiam loss."""
    bb, proj, pred = _vec_models()
    obj = objectives.make_objective("simsiam", bb, proj, pred)  # identity views
    lr = 0.1
    tx, sched = trainer.make_optimizer({"name": "sgd", "lr": lr, "momentum": 0.0, "schedule": "constant"}, 5, 8)
    state = trainer.init_train_state(obj, tx, jax.random.PRNGKey(0), 3)
    new, m = jax.jit(trainer.make_train_step(obj, tx, sched))(state, vec_batch)
    x = vec_batch["images"]
    st = state["obj_state"]

    def loss(p):
        h, _ = bb.apply({"params": p["backbone"], **st["backbone"]}, x, train=True)
        z, _ = proj.apply({"params": p["projector"], **st["projector"]}, h, train=True)
        q, _ = pred.apply({"params": p["predictor"], **st["predictor"]}, z, train=True)
        zs = jax.lax.stop_gradient(z)
        cos = jnp.sum(q * zs, -1) / (jnp.linalg.norm(q, axis=-1) * jnp.linalg.norm(zs, axis=-1))
        return -jnp.mean(cos)  # both views identical: -(cos + cos) / 2

    ssl = {k: state["params"][k] for k in ("backbone", "projector", "predictor")}
    val, g = jax.value_and_grad(loss)(ssl)
    assert float(m["loss"]) == pytest.approx(float(val), abs=1e-12)
    expect = jax.tree_util.tree_map(lambda p, d: p - lr * d, ssl, g)
    jax.tree_util.tree_map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12),
        {k: new["params"][k] for k in ssl},
        expect,
    )
    # The probe trained (its loss decreased the zero-init logits' CE) without touching the backbone gradient.
    assert not np.allclose(np.asarray(new["params"]["probe"]["w"]), 0.0)
    # BN running statistics advanced twice (one update per view, as two forward passes in PyTorch).
    h, s1 = bb.apply({"params": ssl["backbone"], **st["backbone"]}, x, train=True)
    _, s2 = bb.apply({"params": ssl["backbone"], **s1}, x, train=True)
    np.testing.assert_allclose(
        new["obj_state"]["backbone"]["batch_stats"]["bn"][0]["mean"], s2["batch_stats"]["bn"][0]["mean"], rtol=1e-12
    )


def test_schedule_closed_form():
    s = trainer.make_schedule({"lr": 0.4, "warmup_steps": 10, "schedule": "cosine", "lr_batch_scaling": True}, 110, 128)
    peak = 0.4 * 128 / 256
    assert float(s(5)) == pytest.approx(peak * 5 / 10, rel=1e-6)
    assert float(s(10)) == pytest.approx(peak, rel=1e-6)
    assert float(s(60)) == pytest.approx(peak * 0.5 * (1 + np.cos(np.pi * 50 / 100)), rel=1e-5)
    assert float(s(110)) == pytest.approx(0.0, abs=1e-8)
    c = trainer.make_schedule({"lr": 0.1, "schedule": "constant"}, 50, 64)
    assert float(c(0)) == float(c(49)) == pytest.approx(0.1)
    for name in trainer.OPTIMIZERS:
        tx, _ = trainer.make_optimizer({"name": name, "lr": 0.1, "weight_decay": 1e-4}, 10, 8)
        p = {"backbone": {"w": jnp.ones((3, 2))}, "probe": {"w": jnp.ones((2, 2))}}
        u, _ = tx.update(jax.tree_util.tree_map(jnp.ones_like, p), tx.init(p), p)
        assert float(jnp.abs(u["backbone"]["w"]).sum()) > 0


def test_representation_metrics_against_numpy():
    rng = np.random.default_rng(0)
    z = rng.standard_normal((40, 6)) @ np.diag([5.0, 3.0, 1.0, 1.0, 0.5, 0.1]) + 2.0
    m = {k: float(v) for k, v in trainer.representation_metrics(jnp.asarray(z)).items()}
    zn = z / np.linalg.norm(z, axis=1, keepdims=True)
    assert m["std_norm"] == pytest.approx(np.mean(np.std(zn, axis=0, ddof=1)), rel=1e-10)
    ev = np.linalg.eigvalsh(np.cov(z.T))
    assert m["cond"] == pytest.approx(ev[-1] / ev[0], rel=1e-8)
    s = np.linalg.svd(z, compute_uv=False)
    for key, w in (("erank_rankme", s), ("erank_squared", s**2)):
        p = w / w.sum() + 1e-7  # RankMe's eps
        assert m[key] == pytest.approx(np.exp(-np.sum(p * np.log(p))), rel=1e-10)
    collapsed = trainer.representation_metrics(jnp.ones((10, 4)))
    assert float(collapsed["std_norm"]) == 0.0 and float(collapsed["cond"]) == np.inf


def test_batch_indices_cover_each_epoch_once():
    idx = np.concatenate([trainer.batch_indices(3, s, 50, 10) for s in range(5)])
    assert sorted(idx.tolist()) == list(range(50))
    np.testing.assert_array_equal(trainer.batch_indices(3, 7, 50, 10), trainer.batch_indices(3, 7, 50, 10))
    assert not np.array_equal(trainer.batch_indices(3, 0, 50, 10), trainer.batch_indices(3, 5, 50, 10))
    with pytest.raises(ValueError, match="batch_size"):
        trainer.batch_indices(0, 0, 5, 10)


def test_training_beats_random_init_on_digits(tmp_path):
    """SimCLR on the embedded digits: 200 steps lift the offline probes on backbone features clearly."""
    cfg = train_cli.parse_args(["prog", f"--config={TINY}", "--workdir=x"])[0]
    with cfg.unlocked():
        cfg.objective.name = "simclr"
        cfg.objective.temperature = 0.2
        cfg.model.backbone = "mlp"
        cfg.model.backbone_kwargs = {"hidden": (128,), "out_dim": 8}
        cfg.optimizer.update(name="adam", lr=3e-3)
        cfg.data.batch_size = 128
        cfg.train.update(steps=200, log_every=50, metrics_every=0, checkpoint_every=200, progress=False)
    tr = trainer.load_dataset("digits", "train", image_size=8)
    te = trainer.load_dataset("digits", "test", image_size=8)
    obj = trainer.build_objective(cfg, tr[0].shape[1:], 200)
    init = trainer.init_train_state(obj, optax.identity(), jax.random.PRNGKey(cfg.seed), 10)  # as train() does
    before = trainer.evaluate(obj, init["params"], init["obj_state"], tr, te, cfg.eval)
    after = trainer.train(cfg, tmp_path, verbose=False)["final"]
    # Measured (seed 0, 2026-11-30): ridge 0.64 -> 0.78, kNN 0.73 -> 0.88. Required margin: +0.10 on both.
    assert after["backbone/ridge_acc"] >= before["backbone/ridge_acc"] + 0.10, (before, after)
    assert after["backbone/knn_acc"] >= before["backbone/knn_acc"] + 0.10, (before, after)


# ----------------------------------------------------------------------------- sharding

_SHARDED_SCRIPT = textwrap.dedent("""
    import sys
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P
    from ssl_geometry import trainer as T, objectives as O, backbones as B, heads as H, augment as A
    assert len(jax.devices()) == 8, jax.devices()
    f64 = jnp.float64
    bb = B.small_cnn((8, 8, 1), widths=(4, 8), batch_norm=True, dtype=f64)
    proj = H.simsiam_projector(8, 16, dtype=f64)
    pred = H.simsiam_predictor(16, 4, dtype=f64)
    aug = lambda k, x: A.two_views(k, x, A.simsiam_cifar_augment, size=8)
    obj = O.make_objective("simsiam", bb, proj, pred, augment=aug)
    tx, sched = T.make_optimizer({"name": "sgd", "lr": 0.2, "momentum": 0.9, "weight_decay": 1e-4,
                                  "warmup_steps": 1}, 6, 16)
    rng = np.random.default_rng(0)
    images = rng.uniform(0, 1, (4, 16, 8, 8, 1))
    labels = rng.integers(0, 3, (4, 16)).astype(np.int32)
    out = {}
    for tag, (d, m) in {"1": (1, 1), "8": (8, 1), "4x2": (4, 2)}.items():
        mesh = T.make_mesh(d, m, jax.devices()[: d * m])
        state = T.place_state(T.init_train_state(obj, tx, jax.random.PRNGKey(0), 3), mesh, min_model_dim=8)
        step = T.jit_train_step(T.make_train_step(obj, tx, sched), mesh, state, min_model_dim=8)
        losses = []
        for s in range(4):
            state, met = step(state, T.place_batch({"images": images[s], "labels": labels[s]}, mesh))
            losses.append(float(met["loss"]))
        leaves = jax.tree_util.tree_leaves({"params": state["params"], "obj": state["obj_state"]})
        out[tag + "_loss"] = np.array(losses)
        out[tag + "_flat"] = np.concatenate([np.ravel(np.asarray(l)) for l in leaves])
        out[tag + "_wspec"] = np.array(repr(tuple(state["params"]["projector"]["layers"][1]["w"].sharding.spec)))
    # SyncBN: BatchNorm inside jit over a batch sharded on 8 devices uses the global batch mean.
    head = H.mlp(3, (), 2, batch_norm=False, final_batch_norm=True, dtype=f64)
    v = head.init(jax.random.PRNGKey(1))
    mesh = T.make_mesh(8, 1)
    x = np.concatenate([rng.normal(i, 1.0, (2, 3)) for i in range(8)])  # shard i has mean ~ i
    xs = jax.device_put(x, NamedSharding(mesh, P("data")))
    f = jax.jit(lambda v, x: head.apply(v, x, train=True), in_shardings=(NamedSharding(mesh, P()),
                NamedSharding(mesh, P("data"))))
    y, st = f(v, xs)
    out["bn_mean"] = np.asarray(st["batch_stats"]["bn"][0]["mean"])
    out["bn_y"] = np.asarray(y)
    out["bn_x"] = x
    out["bn_w"] = np.asarray(v["params"]["layers"][0]["w"])
    out["bn_b"] = np.asarray(v["params"]["layers"][0]["b"])
    np.savez(sys.argv[1], **out)
""")


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    path = tmp_path_factory.mktemp("sharded") / "out.npz"
    env = _env(XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_ENABLE_X64="1", JAX_PLATFORMS="cpu")
    r = subprocess.run(
        [sys.executable, "-c", _SHARDED_SCRIPT, str(path)], env=env, capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return dict(np.load(path))


@pytest.mark.slow  # end to end (subprocesses, full runs): the slow tier of .ci/run keeps README command 2 under 15 minutes
def test_eight_devices_match_one_device(sharded):
    for tag in ("8", "4x2"):
        np.testing.assert_allclose(sharded[f"{tag}_loss"], sharded["1_loss"], rtol=0, atol=1e-5)
        np.testing.assert_allclose(sharded[f"{tag}_flat"], sharded["1_flat"], rtol=0, atol=1e-5)
    # the runs moved (the comparison is not between untouched initial values)
    assert np.ptp(sharded["1_loss"]) > 1e-3
    # wide head matrix sharded over the model axis in the 4x2 mesh, replicated otherwise
    assert str(sharded["4x2_wspec"]) == "(None, 'model')"
    assert str(sharded["8_wspec"]) == "()"


@pytest.mark.slow  # end to end (subprocesses, full runs): the slow tier of .ci/run keeps README command 2 under 15 minutes
def test_sharded_batchnorm_is_sync_batchnorm(sharded):
    x, w, b = sharded["bn_x"], sharded["bn_w"], sharded["bn_b"]
    a = x @ w + b
    global_mean = a.mean(0)
    np.testing.assert_allclose(sharded["bn_mean"], 0.1 * global_mean, rtol=1e-12)
    shard0_mean = a[:2].mean(0)
    assert np.max(np.abs(shard0_mean - global_mean)) > 0.1  # per-device statistics would differ visibly
    np.testing.assert_allclose(sharded["bn_y"], (a - global_mean) / np.sqrt(a.var(0) + 1e-5), rtol=1e-10)


# ----------------------------------------------------------------------------- CLI, resume


def test_cli_override_parsing(tmp_path):
    cfg, wd = train_cli.parse_args(
        [
            "prog",
            f"--config={TINY}",
            f"--workdir={tmp_path}",
            "--config.train.steps=7",
            "--config.optimizer.lr=0.25",
            "--config.objective.name=byol",
            "--config.model.projector.hidden=(32,32)",
        ]
    )
    assert wd == str(tmp_path)
    assert cfg.train.steps == 7 and isinstance(cfg.train.steps, int)
    assert cfg.optimizer.lr == 0.25 and cfg.objective.name == "byol"
    assert tuple(cfg.model.projector.hidden) == (32, 32)
    assert cfg.data.name == "digits"  # untouched fields keep the file's values
    with pytest.raises(Exception, match="nonexistent"):
        train_cli.parse_args(["prog", f"--config={TINY}", "--workdir=x", "--config.train.nonexistent=1"])
    with pytest.raises(Exception, match="steps"):
        train_cli.parse_args(["prog", f"--config={TINY}", "--workdir=x", "--config.train.steps=abc"])
    with pytest.raises(Exception, match="workdir"):
        train_cli.parse_args(["prog", f"--config={TINY}"])


@pytest.mark.parametrize(
    "field,value,match",
    [
        ("train.steps", 0, "train.steps"),
        ("data.batch_size", 1, "data.batch_size"),
        ("dtype", "float16", "dtype"),
        ("train.metrics_every", -1, "metrics_every"),
    ],
)
def test_bad_config_values_raise_clear_errors(field, value, match):
    cfg = train_cli.parse_args(["prog", f"--config={TINY}", "--workdir=x"])[0]
    sect, _, key = field.rpartition(".")
    with cfg.unlocked():
        (cfg[sect] if sect else cfg)[key] = value
    with pytest.raises(ValueError, match=match):
        trainer.validate_config(cfg)


def test_bad_builder_values_raise_clear_errors():
    cfg = train_cli.parse_args(["prog", f"--config={TINY}", "--workdir=x"])[0]
    with pytest.raises(ValueError, match="optimizer.name"):
        trainer.make_optimizer({"name": "sgdd", "lr": 0.1}, 10, 8)
    with pytest.raises(ValueError, match="optimizer.lr"):
        trainer.make_optimizer({"name": "sgd", "lr": -1.0}, 10, 8)
    with pytest.raises(ValueError, match="warmup_steps"):
        trainer.make_schedule({"lr": 0.1, "warmup_steps": 20}, 10, 8)
    with pytest.raises(ValueError, match="mesh.model"):
        trainer.make_mesh(1, 3)
    with cfg.unlocked():
        cfg.objective.name = "simclrr"
    with pytest.raises(ValueError, match="objective"):
        trainer.build_objective(cfg, (8, 8, 3), 10)
    with cfg.unlocked():
        cfg.objective.name = "simsiam"
        cfg.model.backbone = "resnet9"
    with pytest.raises(ValueError, match="model.backbone"):
        trainer.build_objective(cfg, (8, 8, 3), 10)
    bb, proj, _ = _vec_models()
    with pytest.raises(ValueError, match="predictor"):
        objectives.make_objective("simsiam", bb, proj, None)


_KILL_CONFIG = textwrap.dedent("""
    import sys
    sys.path.insert(0, {cfgdir!r})
    import tiny

    def get_config(arg=None):
        c = tiny.get_config()
        c.model.backbone = "mlp"
        c.model.backbone_kwargs = {{"hidden": (32,), "out_dim": 16, "batch_norm": True}}
        c.train.steps = 60
        c.train.checkpoint_every = 5
        c.train.log_every = 5
        c.train.metrics_every = 0
        c.train.progress = False
        c.eval.max_train = 200
        c.eval.max_test = 100
        return c
""")


def _final_state(workdir):
    import orbax.checkpoint as ocp

    step_dirs = sorted((pathlib.Path(workdir) / "checkpoints").iterdir(), key=lambda p: int(p.name))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tree = ocp.PyTreeCheckpointer().restore(str(step_dirs[-1] / "state"))
    return int(step_dirs[-1].name), {
        jax.tree_util.keystr(p): np.asarray(v) for p, v in jax.tree_util.tree_leaves_with_path(tree)
    }


@pytest.mark.slow  # end to end (subprocesses, full runs): the slow tier of .ci/run keeps README command 2 under 15 minutes
def test_sigkill_resume_is_bitwise_identical(tmp_path):
    cfg = tmp_path / "killcfg.py"
    cfg.write_text(_KILL_CONFIG.format(cfgdir=str(TINY.parent)))
    cmd = [sys.executable, "-m", "ssl_geometry.train", f"--config={cfg}"]
    env = _env(JAX_PLATFORMS="cpu")
    # Run "a" (uninterrupted) and "b" (killed after its step-10 checkpoint) at the same time.
    a_err = open(tmp_path / "a.err", "w")
    full = subprocess.Popen(
        cmd + [f"--workdir={tmp_path / 'a'}"], env=env, stdout=subprocess.DEVNULL, stderr=a_err, text=True, cwd=ROOT
    )
    proc = subprocess.Popen(
        cmd + [f"--workdir={tmp_path / 'b'}"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
    )
    killed_after = None
    for line in proc.stdout:
        if line.startswith("checkpoint saved: step 10"):
            proc.send_signal(signal.SIGKILL)
            killed_after = 10
            break
    proc.wait(timeout=60)
    assert killed_after == 10 and proc.returncode == -signal.SIGKILL
    full.wait(timeout=600)
    a_err.close()
    assert full.returncode == 0, (tmp_path / "a.err").read_text()[-3000:]
    last_step_before, _ = _final_state(tmp_path / "b")
    assert 10 <= last_step_before < 60  # killed mid-run, final step not reached

    resumed = subprocess.run(
        cmd + [f"--workdir={tmp_path / 'b'}"], env=env, capture_output=True, text=True, timeout=600, cwd=ROOT
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed from checkpoint step {last_step_before}" in resumed.stdout

    step_a, a = _final_state(tmp_path / "a")
    step_b, b = _final_state(tmp_path / "b")
    assert step_a == step_b == 60 and a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), k  # bitwise
    recs = [json.loads(x) for x in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    final = [r for r in recs if r.get("event") == "final"]
    assert final and 0.0 <= final[0]["backbone/ridge_acc"] <= 1.0


# ----------------------------------------------------------------------------- run-loop hooks


class _Recorder:
    """A caller's hook: records the steps it is called at and checks what the loop passes."""

    def __init__(self, fail_at=None):
        self.before, self.after, self.fail_at = [], [], fail_at

    def before_step(self, step, state, batch):
        assert int(state["step"]) == step and batch["images"].shape[0] == 16
        self.before.append(step)

    def after_step(self, step, state, metrics):
        assert int(state["step"]) == step
        assert int(metrics["observed_step"]) == step - 1  # observe saw the state the update started from
        self.after.append(step)
        if step == self.fail_at:
            raise KeyboardInterrupt(f"stop at {step}")


def _hook_config(steps):
    cfg = train_cli.parse_args(["prog", f"--config={TINY}", "--workdir=x"])[0]
    with cfg.unlocked():
        cfg.model.backbone = "mlp"
        cfg.model.backbone_kwargs = {"hidden": (16,), "out_dim": 8}
        cfg.data.batch_size = 16
        cfg.train.update(steps=steps, log_every=2, metrics_every=0, checkpoint_every=2, progress=False)
        cfg.eval.final_probes = False
    return cfg


@pytest.mark.slow  # end to end (subprocesses, full runs): the slow tier of .ci/run keeps README command 2 under 15 minutes
def test_run_loop_calls_hooks_at_the_documented_steps(tmp_path):
    """before_step(s) before every update s of the invocation, after_step(s + 1) after it, with the state's
    step; a resumed run from the restored step on; a complete workdir not at all; a raising hook ends the run
    with the lock released, and the run resumes from its last checkpoint."""
    cfg = _hook_config(6)
    observe = lambda state, batch, new: {"observed_step": state["step"]}
    cfg.train.stop_after = 4
    rec = _Recorder()
    assert trainer.train(cfg, tmp_path / "a", verbose=False, observe=observe, hooks=[rec])["status"] == "stopped"
    assert (rec.before, rec.after) == ([0, 1, 2, 3], [1, 2, 3, 4])
    cfg.train.stop_after = 0
    rec = _Recorder()
    out = trainer.train(cfg, tmp_path / "a", verbose=False, observe=observe, hooks=[rec])
    assert (out["status"], out["resumed_from"]) == ("finished", 4)
    assert (rec.before, rec.after) == ([4, 5], [5, 6])
    assert [r["observed_step"] for r in trainer.read_metrics(tmp_path / "a") if "event" not in r] == [1, 3, 5]
    rec = _Recorder()
    assert trainer.train(cfg, tmp_path / "a", verbose=False, hooks=[rec])["status"] == "already_complete"
    assert rec.before == rec.after == []
    rec = _Recorder(fail_at=3)
    with pytest.raises(KeyboardInterrupt, match="stop at 3"):
        trainer.train(cfg, tmp_path / "b", verbose=False, observe=observe, hooks=[rec])
    assert not (tmp_path / "b" / ".lock").exists()
    rec = _Recorder()
    out = trainer.train(cfg, tmp_path / "b", verbose=False, observe=observe, hooks=[rec])
    assert out["resumed_from"] == 2 and rec.before == [2, 3, 4, 5]


def test_observe_may_not_reuse_a_metric_name(tmp_path):
    with pytest.raises(ValueError, match=r"\['loss'\]"):
        trainer.train(_hook_config(2), tmp_path, verbose=False, observe=lambda s, b, n: {"loss": s["step"]})
