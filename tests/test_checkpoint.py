"""Orbax checkpointing: round trip, keep-last-N, fallback from a damaged latest step."""
import pathlib
import warnings

import jax.numpy as jnp
import numpy as np
import pytest

from ssl_geometry import checkpoint as ckpt


def _state(v):
    return {"params": {"w": jnp.full((4, 3), float(v), jnp.float32), "b": jnp.arange(3, dtype=jnp.float32) + v},
            "step": jnp.asarray(v, jnp.int32)}


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
