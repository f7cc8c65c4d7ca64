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

from ssl_geometry import trainer

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "experiments" / "configs"
TINY = CONFIGS / "tiny.py"
#: The trainer configs shipped for ``python -m ssl_geometry.train`` (every field of each is walked below).
SHIPPED = ("tiny", "small", "simsiam_cifar10")
#: Fields whose every value is valid, with the reason.
FREE_TEXT = {"expected_runtime": "a note for the reader of the config, never read by the run"}


def _cli(*args, timeout=600):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "ssl_geometry.train", *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


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
    from ssl_geometry import train  # noqa: PLC0415

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
    r = _cli("--config", TINY, "--workdir", tmp_path / "w", "--config.objective.name=spectral_contrastive",
             "--config.optimizer.lr=50.0", "--config.train.steps=20", "--config.train.log_every=1",
             "--config.train.metrics_every=0", "--config.train.checkpoint_every=5", "--config.train.progress=False")
    _assert_one_line_error(r, 1, "FloatingPointError", "spectral_contrastive", "checkpoint",
                           "lower optimizer.lr", "float64")
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
        flat = trainer.flatten_config(ml_collections.ConfigDict(_shipped(name)))
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
        trainer.Lock(tmp_path).acquire()
    old = time.time() - 60
    os.utime(lock, (old, old))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with trainer.Lock(tmp_path):
            assert json.loads(lock.read_text())["pid"] == os.getpid()
    assert any("stale empty lock" in str(w.message) for w in caught)
    assert not lock.exists()


def test_a_metrics_line_with_a_non_integer_step_is_named(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "loss": 0.5}\n{"step": "ten", "loss": 0.4}\n')
    with pytest.raises(ValueError, match=r"metrics\.jsonl line 2: expected .*integer \"step\""):
        trainer.truncate_metrics(path, 1)


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

    rc = train.main(["train", "--config", str(ROOT / "experiments/configs/tiny.py"), "--workdir", str(tmp_path), "extra"])
    assert rc == 2 and "unexpected argument(s) ['extra']" in capsys.readouterr().err


def test_num_train_beyond_the_split_is_refused_naming_the_field():
    d = _shipped("tiny")
    d["data"].update(num_train=100_000)
    cfg = ml_collections.ConfigDict(d)
    with pytest.raises(ValueError, match=r"`data.num_train` = 100000, but the 'digits' 'train' split has only"):
        trainer.load_split(cfg.data, "train")
