"""Orbax checkpointing: round trip, keep-last-N, fallback from a damaged latest step."""

import json
import os
import pathlib
import subprocess
import sys
import warnings

import jax.numpy as jnp
import numpy as np
import pytest
from test_train_objectives import cli_argv, read_records

from ssl_geometry import checkpoint as ckpt
from ssl_geometry import internal, train


def _state(v):
    return {
        "params": {"w": jnp.full((4, 3), float(v), jnp.float32), "b": jnp.arange(3, dtype=jnp.float32) + v},
        "step": jnp.asarray(v, jnp.int32),
    }


def _fill(tmp_path, steps, keep=5):
    mngr = ckpt.manager(tmp_path / "ck", max_to_keep=keep)
    for s in steps:
        assert ckpt.save(mngr, s, _state(s), {"data_position": s})
    mngr.wait_until_finished()
    return mngr


def test_round_trip_and_retention(tmp_path):
    mngr = _fill(tmp_path, [1, 2, 3, 4], keep=2)
    assert sorted(mngr.all_steps()) == [3, 4]  # keep-last-N
    r = ckpt.restore_latest(mngr, _state(0))
    assert r.step == 4 and r.meta["data_position"] == 4
    np.testing.assert_array_equal(np.asarray(r.state["params"]["w"]), np.full((4, 3), 4.0, np.float32))
    assert r.state["params"]["w"].dtype == jnp.float32 and int(r.state["step"]) == 4
    assert r.meta["fingerprint"] == ckpt.fingerprint(_state(4))
    mngr.close()


def test_empty_directory_gives_none(tmp_path):
    mngr = ckpt.manager(tmp_path / "empty")
    assert ckpt.restore_latest(mngr, _state(0)) is None
    mngr.close()


def _step_files(root: pathlib.Path, step: int):
    return [p for p in (root / "ck" / str(step)).rglob("*") if p.is_file() and p.stat().st_size > 0]


def test_truncated_latest_step_falls_back_with_warning(tmp_path):
    mngr = _fill(tmp_path, [10, 20, 30])
    files = _step_files(tmp_path, 30)
    assert files
    for f in files:  # truncate every file of the latest step to half its size
        data = f.read_bytes()
        f.write_bytes(data[: len(data) // 2])
    with pytest.warns(ckpt.CheckpointWarning, match="step 30"):
        r = ckpt.restore_latest(mngr, _state(0))
    assert r.step == 20 and r.meta["data_position"] == 20
    np.testing.assert_array_equal(np.asarray(r.state["params"]["b"]), np.arange(3, dtype=np.float32) + 20)
    mngr.close()


def test_flipped_bytes_detected_by_fingerprint_or_reader(tmp_path):
    mngr = _fill(tmp_path, [1, 2])
    # Damage the array payload of step 2 without changing any file size.
    data_files = [f for f in _step_files(tmp_path, 2) if f.parent.name == "d"]
    assert data_files
    for f in data_files:
        b = bytearray(f.read_bytes())
        for i in range(len(b) // 2, len(b)):
            b[i] ^= 0xFF
        f.write_bytes(bytes(b))
    with pytest.warns(ckpt.CheckpointWarning, match="step 2"):
        r = ckpt.restore_latest(mngr, _state(0))
    assert r.step == 1
    mngr.close()


def test_all_steps_damaged_raises(tmp_path):
    mngr = _fill(tmp_path, [1])
    for f in _step_files(tmp_path, 1):
        f.write_bytes(b"")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ckpt.CheckpointWarning)
        with pytest.raises(RuntimeError, match="could be restored"):
            ckpt.restore_latest(mngr, _state(0))
    mngr.close()


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="max_to_keep"):
        ckpt.manager(tmp_path / "x", max_to_keep=0)
    mngr = ckpt.manager(tmp_path / "y")
    with pytest.raises(ValueError, match="step"):
        ckpt.save(mngr, -1, _state(0))
    mngr.close()


def test_all_steps_damaged_moves_nothing(tmp_path):
    mngr = _fill(tmp_path, [1, 2])
    for s in (1, 2):
        for f in _step_files(tmp_path, s):
            f.write_bytes(b"")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ckpt.CheckpointWarning)
        with pytest.raises(RuntimeError):
            ckpt.restore_latest(mngr, _state(0))
    assert sorted(mngr.all_steps()) == [1, 2] and not (tmp_path / "ck.damaged").exists()
    mngr.close()


# ----------------------------------------------------------------------------- workdirs through the CLI
# Tiny SimCLR runs (MLP backbone, 4-6 steps) through ssl_geometry.train.main.


def _run(wd, *extra, name="simclr"):
    return train.main(cli_argv(wd, name, "--config.train.steps=6", *extra))


def test_damaged_latest_step_is_moved_aside_and_the_run_finishes(tmp_path, capsys):
    wd = tmp_path / "w"
    assert _run(wd, "--config.train.stop_after=4") == 0
    assert sorted(int(p.name) for p in (wd / "checkpoints").iterdir()) == [2, 4]
    for f in (wd / "checkpoints" / "4").rglob("*"):
        if f.is_file() and f.stat().st_size:
            f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    with pytest.warns(ckpt.CheckpointWarning, match="step 4"):
        assert _run(wd) == 0  # used to die with StepAlreadyExistsError at step 4, on every rerun
    assert "resumed from checkpoint step 2" in capsys.readouterr().out
    assert (wd / "checkpoints.damaged" / "4.0").is_dir()
    recs = read_records(wd)
    steps = [r["step"] for r in recs if "loss" in r]
    assert steps == sorted(set(steps)) and steps[-1] == 6  # no duplicate steps after the resume
    assert sum(r.get("event") == "final" for r in recs) == 1
    # A rerun of the finished workdir: "already complete", nothing appended.
    assert _run(wd) == 0
    assert "already complete" in capsys.readouterr().out
    assert read_records(wd) == recs


def test_mismatched_resume_is_refused_naming_the_fields(tmp_path, capsys):
    wd = tmp_path / "w"
    assert _run(wd, "--config.train.stop_after=2") == 0
    capsys.readouterr()
    assert _run(wd, "--config.optimizer.lr=0.01") == 2
    err = capsys.readouterr().err
    assert "optimizer.lr" in err and "allow_config_change" in err
    # a different projector width: state shapes differ, refused even with the escape hatch
    assert _run(wd, "--config.model.projector.out_dim=24", "--config.train.allow_config_change=True") == 2
    err = capsys.readouterr().err
    assert "model.projector.out_dim" in err and "shapes" in err
    # train.steps below the restored step: refused with the step numbers
    assert _run(wd, "--config.train.steps=1", "--config.train.allow_config_change=True") == 2
    assert "beyond `train.steps` = 1" in capsys.readouterr().err
    # runtime fields (logging, checkpoint cadence, probes) never count; the lr change with the hatch resumes
    assert (
        _run(
            wd,
            "--config.optimizer.lr=0.01",
            "--config.train.allow_config_change=True",
            "--config.train.log_every=3",
            "--config.eval.knn_k=5",
        )
        == 0
    )
    change = [r for r in read_records(wd) if r.get("event") == "config_change"]
    assert len(change) == 1 and change[0]["step"] == 2
    assert change[0]["fields"] == {"optimizer.lr": {"saved": 3e-3, "now": 0.01}}


def test_workdir_lock_and_stale_lock(tmp_path, capsys):
    wd = tmp_path / "w"
    wd.mkdir()
    (wd / ".lock").write_text(
        json.dumps({"pid": os.getpid(), "host": __import__("socket").gethostname(), "since": "now"})
    )
    assert _run(wd) == 2
    assert "in use by another run" in capsys.readouterr().err and not (wd / "checkpoints").exists()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (wd / ".lock").write_text(
        json.dumps({"pid": dead.pid, "host": __import__("socket").gethostname(), "since": "then"})
    )
    with pytest.warns(UserWarning, match="stale lock"):
        assert _run(wd, "--config.train.stop_after=2") == 0
    assert not (wd / ".lock").exists()  # released at the end


def test_workdir_that_is_a_file_is_a_clear_error(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    assert _run(f) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert _run(f / "sub") == 2
    assert "is not a directory" in capsys.readouterr().err
    with pytest.raises(NotADirectoryError, match="workdir"):
        internal.prepare(f)


def test_truncate_metrics_drops_later_and_half_written_records(tmp_path):
    p = tmp_path / "metrics.jsonl"
    p.write_text("\n".join(json.dumps({"step": s, "loss": float(s)}) for s in (1, 2, 3, 4)) + '\n{"step": 5, "lo')
    assert internal.truncate_metrics(p, 2) == 3
    assert [json.loads(x)["step"] for x in p.read_text().splitlines()] == [1, 2]
    assert internal.truncate_metrics(tmp_path / "absent.jsonl", 3) == 0


def test_config_record_ignores_runtime_fields():
    import ml_collections

    c = ml_collections.ConfigDict(
        {
            "seed": 0,
            "train": {"steps": 3, "log_every": 1, "stop_after": 0},
            "eval": {"knn_k": 3},
            "optimizer": {"lr": 0.1},
        }
    )
    assert internal.config_record(c) == {"seed": 0, "train.steps": 3, "optimizer.lr": 0.1}
