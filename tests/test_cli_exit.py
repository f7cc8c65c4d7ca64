"""Failures a script can see: ``python -m ssl_geometry.train`` exits 0 only on success, 2 for bad input or
a refused run, 1 for a failure during the run, always with one ``error: ...`` line and no traceback; the
whole config is checked before anything is built."""

import json
import math
import os
import pathlib
import subprocess
import sys
import time
import warnings

import ml_collections
import pytest

from ssl_geometry import internal, trainer

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "experiments" / "configs"
TINY = CONFIGS / "tiny.py"
#: The trainer configs shipped for ``python -m ssl_geometry.train`` (every field of each is walked below).
SHIPPED = ("tiny", "small", "simsiam_cifar10")
#: Fields whose every value is valid, with the reason.
FREE_TEXT = {"expected_runtime": "a note for the reader of the config, never read by the run"}


def _cli(*args, timeout=600):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "ssl_geometry.train", *map(str, args)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _assert_one_line_error(r, status, *needles):
    assert r.returncode == status, (r.returncode, r.stderr[-2000:])
    errors = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout, r.stderr[-2000:]
    for needle in needles:
        assert needle in errors[0], errors[0]


#: Bad input through the real entry point (a subprocess, as a user or a scheduler runs it).
_THROUGH_THE_ENTRY_POINT = {
    "missing-file": (["--config", "/no/such/config.py"], ["/no/such/config.py", "no such file"]),
    "unknown-field": (["--config", TINY, "--config.model.projector.foo=1"], ["config.model.projector.foo"]),
    "unknown-variant": (["--config", f"{CONFIGS / 'simsiam_cifar10.py'}:bogus"], ["'bogus'", "'relu'", "'swish'"]),
    "seed": (["--config", TINY, "--config.seed=-1"], ["seed: expected an integer >= 0, got -1"]),
}
#: The same path in process (``train.main``, which the entry point exits with), to keep the suite fast.
_IN_PROCESS = {
    "variant-of-a-file-without": (["--config", f"{TINY}:paper"], ["'paper'", "defines none"]),
    "probe_lr": (["--config", TINY, "--config.optimizer.probe_lr=-1"], ["optimizer.probe_lr"]),
    "knn_k": (["--config", TINY, "--config.eval.knn_k=0"], ["eval.knn_k"]),
    "metrics_images": (["--config", TINY, "--config.eval.metrics_images=0"], ["eval.metrics_images"]),
    "out_dim": (["--config", TINY, "--config.model.projector.out_dim=0"], ["model.projector.out_dim"]),
    "num_train": (["--config", TINY, "--config.data.num_train=10"], ["data.num_train", "batch_size"]),
}


@pytest.mark.parametrize("case", sorted(_THROUGH_THE_ENTRY_POINT))
def test_bad_input_exits_2_naming_it(tmp_path, case):
    args, needles = _THROUGH_THE_ENTRY_POINT[case]
    r = _cli(*args, "--workdir", tmp_path / "w", timeout=300)
    _assert_one_line_error(r, 2, *needles)
    assert not (tmp_path / "w").exists()  # refused before the workdir is touched


@pytest.mark.parametrize("case", sorted(_IN_PROCESS))
def test_bad_input_returns_2_naming_it(tmp_path, case, capsys):
    from ssl_geometry import train

    args, needles = _IN_PROCESS[case]
    status = train.main(["train", *map(str, args), "--workdir", str(tmp_path / "w")])
    err = capsys.readouterr().err
    _assert_one_line_error(subprocess.CompletedProcess([], status, "", err), 2, *needles)
    assert not (tmp_path / "w").exists()


def test_metrics_file_that_is_a_directory_exits_2_naming_it(tmp_path):
    (tmp_path / "w" / "metrics.jsonl").mkdir(parents=True)
    r = _cli("--config", TINY, "--workdir", tmp_path / "w", timeout=300)
    _assert_one_line_error(r, 2, str(tmp_path / "w" / "metrics.jsonl"), "must be a file")


@pytest.mark.slow
def test_divergence_inside_jit_exits_1_with_the_trainers_message(tmp_path):
    """Spectral contrastive at lr 50 overflows float32: the loss's in-jit check fires inside the
    update; the CLI reports the trainer's FloatingPointError (update, last checkpoint, advice)."""
    r = _cli(
        "--config",
        TINY,
        "--workdir",
        tmp_path / "w",
        "--config.objective.name=spectral_contrastive",
        "--config.optimizer.lr=50.0",
        "--config.train.steps=20",
        "--config.train.log_every=1",
        "--config.train.metrics_every=0",
        "--config.train.checkpoint_every=5",
        "--config.train.progress=False",
    )
    _assert_one_line_error(
        r, 1, "FloatingPointError", "spectral_contrastive", "checkpoint", "lower optimizer.lr", "float64"
    )
    assert "equinox.filter_jit" not in r.stderr and "CpuCallback" not in r.stderr


# ----------------------------------------------------------------------------- the whole config, in process


def _shipped(name):
    sys.path.insert(0, str(CONFIGS))
    try:
        module = __import__(name)
    finally:
        sys.path.remove(str(CONFIGS))
    return module.get_config().to_dict()


def _invalid(value):
    """A value of the wrong type or out of every field's range, chosen from the value's type alone."""
    if isinstance(value, bool):
        return "maybe"
    if isinstance(value, int):
        return -5
    if isinstance(value, float):
        return math.nan
    if isinstance(value, str):
        return "__bogus__"
    if isinstance(value, (list, tuple)):
        return ["__bogus__"]
    if value is None:
        return -1.0
    raise AssertionError(f"no invalid value for {value!r}")


def _set(d, field, value):
    *parents, leaf = field.split(".")
    for p in parents:
        d = d[p]
    d[leaf] = value


def _walk():
    for name in SHIPPED:
        flat = internal.flatten_config(ml_collections.ConfigDict(_shipped(name)))
        for field, value in flat.items():
            if field not in FREE_TEXT and not field.startswith("model.backbone_kwargs."):
                yield name, field, value


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_configs_validate(name):
    trainer.validate_config(ml_collections.ConfigDict(_shipped(name)))


@pytest.mark.parametrize("name, field, value", list(_walk()))
def test_every_field_of_every_shipped_config_is_checked(name, field, value):
    d = _shipped(name)
    _set(d, field, _invalid(value))
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        trainer.validate_config(ml_collections.ConfigDict(d))


def test_a_field_the_trainer_does_not_read_is_refused():
    d = _shipped("tiny")
    d["train"]["epochs"] = 3
    with pytest.raises(ValueError, match=r"train\.epochs.*reads no such config field"):
        trainer.validate_config(ml_collections.ConfigDict(d))


def test_data_dir_and_stream_are_refused_for_an_embedded_set(tmp_path):
    for field, value in (("data_dir", str(tmp_path)), ("stream", True)):
        d = _shipped("tiny")
        d["data"][field] = value
        with pytest.raises(ValueError, match=rf"data\.{field}.*embedded"):
            trainer.validate_config(ml_collections.ConfigDict(d))


# ----------------------------------------------------------------------------- the workdir's files


def test_an_empty_lock_is_stale_after_its_grace_period(tmp_path):
    lock = tmp_path / ".lock"
    lock.write_text("")
    with pytest.raises(trainer.WorkdirLockedError):  # a run may be between creating and writing it
        internal.Lock(tmp_path).acquire()
    old = time.time() - 60
    os.utime(lock, (old, old))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with internal.Lock(tmp_path):
            assert json.loads(lock.read_text())["pid"] == os.getpid()
    assert any("stale empty lock" in str(w.message) for w in caught)
    assert not lock.exists()


def test_a_metrics_line_with_a_non_integer_step_is_named(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "loss": 0.5}\n{"step": "ten", "loss": 0.4}\n')
    with pytest.raises(ValueError, match=r"metrics\.jsonl line 2: expected .*integer \"step\""):
        internal.truncate_metrics(path, 1)


@pytest.mark.parametrize("name", ["digits", "shapes"])
def test_num_train_and_num_test_are_honoured_by_every_embedded_set(name):
    d = _shipped("tiny")
    d["data"].update(name=name, image_size=8, num_train=100, num_test=50)
    cfg = ml_collections.ConfigDict(d)
    trainer.validate_config(cfg)
    assert len(trainer.load_split(cfg.data, "train").labels) == 100
    assert len(trainer.load_split(cfg.data, "test").labels) == 50


def test_a_stray_positional_argument_is_refused(tmp_path, capsys):
    from ssl_geometry import train

    rc = train.main(
        ["train", "--config", str(ROOT / "experiments/configs/tiny.py"), "--workdir", str(tmp_path), "extra"]
    )
    assert rc == 2 and "unexpected argument(s) ['extra']" in capsys.readouterr().err


def test_num_train_beyond_the_split_is_refused_naming_the_field():
    d = _shipped("tiny")
    d["data"].update(num_train=100_000)
    cfg = ml_collections.ConfigDict(d)
    with pytest.raises(ValueError, match=r"`data.num_train` = 100000, but the 'digits' 'train' split has only"):
        trainer.load_split(cfg.data, "train")


# ----------------------------------------------------------------------------- issue 34: nothing lost, nothing silent


def _tiny(**over):
    """The tiny config with a short, quiet run (``over``: dotted field -> value)."""
    d = _shipped("tiny")
    d["train"].update(steps=4, log_every=1, metrics_every=0, checkpoint_every=2, progress=False)
    d["eval"].update(final_probes=False)
    for field, value in over.items():
        _set(d, field, value)
    return ml_collections.ConfigDict(d)


def _main(tmp_path, capsys, *args, workdir=None):
    from ssl_geometry import train

    status = train.main(["train", "--config", str(TINY), "--workdir", str(workdir or tmp_path / "w"), *map(str, args)])
    out = capsys.readouterr()
    return subprocess.CompletedProcess([], status, out.out, out.err)


_QUICK = (
    "--config.train.steps=2",
    "--config.train.checkpoint_every=2",
    "--config.train.progress=False",
    "--config.train.metrics_every=0",
    "--config.eval.max_train=100",
    "--config.eval.max_test=50",
)


@pytest.mark.slow
def test_old_metrics_without_a_checkpoint_are_moved_aside_byte_for_byte(tmp_path, capsys):
    w = tmp_path / "w"
    w.mkdir()
    old = b"".join(json.dumps({"step": s, "loss": 0.1 * s}).encode() + b"\n" for s in (1, 2, 3, 50, 100))
    (w / "metrics.jsonl").write_bytes(old)
    r = _cli("--config", TINY, "--workdir", w, *_QUICK)  # the real entry point: warnings are one line each
    assert r.returncode == 0, r.stderr
    kept = w / "metrics.orphaned-1.jsonl"
    assert kept.read_bytes() == old
    warned = [line for line in r.stderr.splitlines() if line.startswith("warning: ") and "metrics" in line]
    assert len(warned) == 1 and str(kept) in warned[0] and "no checkpoint" in warned[0], r.stderr
    assert [json.loads(x)["step"] for x in (w / "metrics.jsonl").read_text().splitlines()] == [2, 2]  # log, final
    # a second fresh start over another orphan takes the next name and keeps the first
    import shutil

    shutil.rmtree(w / "checkpoints")
    second = (w / "metrics.jsonl").read_bytes()
    with pytest.warns(UserWarning, match="moved it to .*metrics.orphaned-2.jsonl"):
        assert _main(tmp_path, capsys, *_QUICK).returncode == 0
    assert kept.read_bytes() == old and (w / "metrics.orphaned-2.jsonl").read_bytes() == second


def test_set_aside_leaves_a_missing_or_blank_file_alone(tmp_path):
    assert internal.set_aside(tmp_path / "metrics.jsonl") is None
    (tmp_path / "metrics.jsonl").write_text("\n  \n")
    assert internal.set_aside(tmp_path / "metrics.jsonl") is None and (tmp_path / "metrics.jsonl").exists()


@pytest.mark.slow
def test_resume_from_a_checkpoint_without_a_saved_config_warns_and_records_a_config_change(tmp_path):
    w = tmp_path / "w"
    assert trainer.train(_tiny(**{"train.stop_after": 2}), w, verbose=False)["status"] == "stopped"
    meta_file = w / "checkpoints" / "2" / "meta" / "metadata"
    meta = json.loads(meta_file.read_text())
    del meta["config"]
    meta_file.write_text(json.dumps(meta))
    with pytest.warns(UserWarning, match=r"checkpoint step 2 .* stores no config.*config_change"):
        out = trainer.train(_tiny(**{"optimizer.lr": 0.1}), w, verbose=False)
    assert out["status"] == "finished" and out["resumed_from"] == 2
    changes = [r for r in trainer.read_metrics(w) if r.get("event") == "config_change"]
    assert len(changes) == 1 and changes[0]["step"] == 2
    assert changes[0]["fields"]["optimizer.lr"] == {"saved": internal.NOT_SAVED, "now": 0.1}
    assert changes[0]["fields"]["train.steps"] == {"saved": internal.NOT_SAVED, "now": 4}


def test_check_resume_reports_every_field_of_a_meta_without_config():
    cfg = _tiny()
    changed = internal.check_resume({}, cfg, {}, allow_config_change=False)
    assert changed == {k: (internal.NOT_SAVED, v) for k, v in internal.config_record(cfg).items()}
    assert internal.check_resume({"config": internal.config_record(cfg)}, cfg, {}) == {}


@pytest.mark.parametrize(
    "over, needles",
    [
        (
            {"eval.final_probes": True, "eval.max_train": 5},
            ["eval.knn_k: 20 neighbours", "5 training examples", "eval.knn_k <= 5"],
        ),
        ({"eval.final_probes": True, "data.num_train": 64, "eval.knn_k": 65}, ["eval.knn_k: 65", "64 training"]),
        ({"data.image_size": 100_000}, ["`data.image_size`: 100000 px", "GiB in memory", "host's"]),
        (
            {"objective.name": "wmse", "data.batch_size": 32},
            ["`data.batch_size`", "at least 65", "got 32", "model.projector.out_dim <= 31"],
        ),
        (
            {"distributed.num_processes": 2, "distributed.process_id": 5},
            ["`distributed.process_id`", "[0, 1]", "got 5"],
        ),
    ],
)
def test_values_the_run_would_adjust_or_cannot_hold_are_refused_by_name(over, needles):
    cfg = _tiny(**over)
    with pytest.raises(ValueError) as err:
        trainer.validate_config(cfg, devices=False)
    for needle in needles:
        assert needle in str(err.value), str(err.value)


def test_knn_k_within_the_probe_set_is_accepted_and_used_as_given():
    trainer.validate_config(_tiny(**{"eval.max_train": 20, "eval.knn_k": 20, "eval.final_probes": True}))
    internal.check_knn_k(20, 20)
    with pytest.raises(ValueError, match="eval.knn_k: 21 neighbours .* 20 training images"):
        internal.check_knn_k(21, 20)


def test_knn_k_20_with_max_train_5_exits_2_naming_it(tmp_path, capsys):
    r = _main(tmp_path, capsys, "--config.eval.max_train=5")
    _assert_one_line_error(r, 2, "eval.knn_k: 20 neighbours", "eval.max_train = 5")
    assert not (tmp_path / "w").exists()


def test_image_size_beyond_memory_exits_2_naming_it(tmp_path, capsys):
    r = _main(tmp_path, capsys, "--config.data.image_size=100000")
    _assert_one_line_error(r, 2, "`data.image_size`: 100000 px", "GiB")
    assert "Unable to allocate" not in r.stderr


@pytest.mark.parametrize(
    "override, field, suggestion",
    [
        ("--config.optimizer.lrr=0.1", "config.optimizer.lrr", "--config.optimizer.lr?"),
        ("--config.optimiser.lr=0.1", "config.optimiser.lr", "--config.optimizer.lr?"),
    ],
)
def test_a_misspelt_field_names_it_and_the_suggestion_on_one_clean_line(tmp_path, capsys, override, field, suggestion):
    r = _main(tmp_path, capsys, override)
    _assert_one_line_error(r, 2, f"unknown config field '{field}'", f"did you mean {suggestion}")
    assert "\\'" not in r.stderr and "\\n" not in r.stderr


@pytest.mark.parametrize(
    "body, needles",
    [
        ("def get_config():\n    raise KeyError('missing')\n", ["get_config() raised KeyError: 'missing'"]),
        ("def get_config():\n    return None\n", ["get_config returned NoneType None", "ConfigDict"]),
        ("x = 1\n", ["defines no get_config() function"]),
        ("import no_such_module_h7\n", ["running the file raised ModuleNotFoundError", "no_such_module_h7"]),
    ],
)
def test_config_file_failures_name_the_file_and_what_get_config_did(tmp_path, capsys, body, needles):
    cfg = tmp_path / "cfg.py"
    cfg.write_text(body)
    from ssl_geometry import train

    status = train.main(["train", "--config", str(cfg), "--workdir", str(tmp_path / "w")])
    err = capsys.readouterr().err
    _assert_one_line_error(subprocess.CompletedProcess([], status, "", err), 2, str(cfg), *needles)


def _free_port():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


_DIST = ("--config.distributed.initialize=True", "--config.distributed.num_processes=2")


@pytest.mark.parametrize(
    "extra, needles",
    [
        (
            ["--config.distributed.process_id=5", "--config.distributed.coordinator_address=127.0.0.1:1"],
            ["`distributed.process_id`", "got 5"],
        ),
        (
            ["--config.distributed.process_id=0", "--config.distributed.coordinator_address=localhost"],
            ["distributed.coordinator_address", "'host:port'", "'localhost'"],
        ),
    ],
)
def test_distributed_fields_are_refused_before_initialize(tmp_path, extra, needles):
    t0 = time.monotonic()
    r = _cli("--config", TINY, "--workdir", tmp_path / "w", *_DIST, *extra, timeout=120)
    _assert_one_line_error(r, 2, *needles)
    assert "jax.distributed.initialize:" not in r.stderr  # never waited
    assert time.monotonic() - t0 < 60


@pytest.mark.slow
@pytest.mark.parametrize("process_id", [0, 1])
def test_a_missing_peer_exits_1_with_one_line_within_the_timeout(tmp_path, process_id):
    """Process ``process_id`` of 2, alone: the watchdog ends it with exit 1 and one ``error:`` line once
    ``distributed.timeout_s`` passed, before jax's coordination client can abort with a C++ trace."""
    timeout_s = 3
    t0 = time.monotonic()
    r = _cli(
        "--config",
        TINY,
        "--workdir",
        tmp_path / "w",
        *_DIST,
        f"--config.distributed.process_id={process_id}",
        f"--config.distributed.coordinator_address=127.0.0.1:{_free_port()}",
        f"--config.distributed.timeout_s={timeout_s}",
        timeout=120,
    )
    took = time.monotonic() - t0
    _assert_one_line_error(
        r,
        1,
        f"within distributed.timeout_s = {timeout_s} s",
        f"process {process_id} of 2",
        f"waiting for process(es) [{1 - process_id}]",
    )
    assert "client.h" not in r.stderr and "Check failure" not in r.stderr and "*** " not in r.stderr
    assert took < timeout_s + 10 + 15  # + 15: starting Python and importing jax on a loaded 2-core machine


class _SignalAt:
    """A hook that sends ``signum`` to this process right after update ``step``."""

    def __init__(self, step, signum):
        self.step, self.signum = step, signum

    def after_step(self, step, state, metrics):
        if step == self.step:
            os.kill(os.getpid(), self.signum)


@pytest.mark.slow
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
def test_a_signal_stops_at_the_next_step_checkpointed_and_the_resume_is_bitwise(tmp_path, signame):
    import signal

    signum = getattr(signal, signame)
    cfg = _tiny(**{"train.steps": 8, "train.checkpoint_every": 4})
    ref = trainer.train(cfg, tmp_path / "ref", verbose=False)
    before = signal.getsignal(signum)
    out = trainer.train(cfg, tmp_path / "w", verbose=False, hooks=[_SignalAt(3, signum)])
    assert signal.getsignal(signum) is before  # handlers restored
    assert (out["status"], out["step"], out["signal"]) == ("interrupted", 3, signame)
    assert not (tmp_path / "w" / ".lock").exists()
    assert sorted(int(p.name) for p in (tmp_path / "w" / "checkpoints").iterdir() if p.name.isdigit()) == [3]
    resumed = trainer.train(cfg, tmp_path / "w", verbose=False)
    assert (resumed["status"], resumed["resumed_from"]) == ("finished", 3)
    from ssl_geometry import checkpoint

    assert checkpoint.fingerprint(resumed["state"]) == checkpoint.fingerprint(ref["state"])
    losses = {r["step"]: r["loss"] for r in trainer.read_metrics(tmp_path / "w") if "loss" in r}
    ref_losses = {r["step"]: r["loss"] for r in trainer.read_metrics(tmp_path / "ref") if "loss" in r}
    assert losses == ref_losses and sorted(losses) == list(range(1, 9))


@pytest.mark.slow
def test_sigterm_through_the_entry_point_exits_143_and_leaves_no_lock(tmp_path):
    """A real SIGTERM from outside, mid-run: exit status 143 (documented), one line saying where it stopped,
    a checkpoint there, no lock; the same command then finishes the run."""
    import signal

    w = tmp_path / "w"
    args = [
        "--config",
        TINY,
        "--workdir",
        w,
        "--config.train.steps=100000",
        "--config.train.log_every=10",
        "--config.train.checkpoint_every=100000",
        "--config.train.metrics_every=0",
        "--config.train.progress=False",
    ]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen(
        [sys.executable, "-m", "ssl_geometry.train", *map(str, args)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 240
    while not ((w / "metrics.jsonl").exists() and (w / "metrics.jsonl").read_text().count("\n") >= 2):
        assert p.poll() is None and time.monotonic() < deadline, p.communicate()
        time.sleep(0.2)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 128 + signal.SIGTERM, (p.returncode, err[-2000:])
    assert "Traceback" not in err and not (w / ".lock").exists()
    line = out.strip().splitlines()[-1]
    assert line.startswith("stopped at step ") and "by SIGTERM" in line and "run again to continue" in line
    step = int(line.split()[3])
    assert (w / "checkpoints" / str(step)).is_dir()


def _orbax_save_failing_at(step, make_error):
    """An ``orbax.checkpoint.CheckpointManager.save`` that raises ``make_error()`` for ``step``."""
    import orbax.checkpoint as ocp

    real = ocp.CheckpointManager.save

    def save(self, s, *args, **kw):
        if int(s) == step:
            raise make_error()
        return real(self, s, *args, **kw)

    return save


def _wrapped_no_space():
    import errno

    try:
        raise OSError(errno.ENOSPC, "No space left on device")
    except OSError as inner:
        try:
            raise RuntimeError("tensorstore write failed") from inner
        except RuntimeError as outer:
            return outer


@pytest.mark.parametrize(
    "make_error",
    [
        lambda: OSError(__import__("errno").ENOSPC, "No space left on device"),
        _wrapped_no_space,  # orbax/tensorstore wrap the writer's OSError
    ],
    ids=["bare", "wrapped"],
)
def test_a_full_disk_during_a_checkpoint_exits_1_with_one_line(tmp_path, capsys, monkeypatch, make_error):
    import orbax.checkpoint as ocp

    monkeypatch.setattr(ocp.CheckpointManager, "save", _orbax_save_failing_at(4, make_error))
    r = _main(
        tmp_path,
        capsys,
        "--config.train.steps=6",
        "--config.train.checkpoint_every=2",
        "--config.train.progress=False",
        "--config.train.metrics_every=0",
    )
    _assert_one_line_error(
        r,
        1,
        "no space left on the device while writing checkpoint step 4",
        "the last complete checkpoint is step 2",
        "run the same command again",
    )
    assert not (tmp_path / "w" / ".lock").exists()


def test_another_os_error_during_a_checkpoint_is_not_called_a_full_disk(tmp_path, capsys, monkeypatch):
    import errno

    import orbax.checkpoint as ocp

    monkeypatch.setattr(
        ocp.CheckpointManager, "save", _orbax_save_failing_at(2, lambda: OSError(errno.EIO, "Input/output error"))
    )
    r = _main(tmp_path, capsys, *_QUICK)
    _assert_one_line_error(r, 1, "OSError: [Errno 5] Input/output error")
    assert "no space" not in r.stderr


@pytest.mark.parametrize(
    "make, needle",
    [
        (lambda d: d, "is a directory"),
        (lambda d: (d / "c.json", (d / "c.json").write_text("{}"))[0], "is not a Python file (.py)"),
    ],
)
def test_a_config_that_is_a_directory_or_not_python_is_named(tmp_path, capsys, make, needle):
    from ssl_geometry import train

    path = make(tmp_path)
    status = train.main(["train", "--config", str(path), "--workdir", str(tmp_path / "w")])
    err = capsys.readouterr().err
    _assert_one_line_error(subprocess.CompletedProcess([], status, "", err), 2, str(path), needle)
