"""Multi-process training on a real ``jax.distributed`` runtime: 2 and 4 processes on this
machine over 127.0.0.1, CPU collectives over gloo, one shared workdir.

Each process runs :func:`ssl_geometry.train.main` with
``--config.distributed.*`` and then saves the final state it holds (every leaf is
replicated, so its first addressable shard is the whole value). Checked against one
process with the same global batch (float64, so only reduction order may differ):
equal final parameters; every process holds the same state; one metrics writer (each
step once in ``metrics.jsonl``, process 1 prints no summary); orbax's coordinated
checkpoint steps; and a run stopped at its step-2 checkpoint on all processes and
restarted on all processes ends where the uninterrupted run ends.
"""

import json
import os
import pathlib
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest

from ssl_geometry import train, trainer

#: The slow tier (``-m slow``, run by ``.ci/run`` after the suite): 2 and 4 jax.distributed processes over the loopback address.
pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "experiments" / "configs" / "small.py")
ARGS = [
    "--config.train.steps=4",
    "--config.train.checkpoint_every=2",
    "--config.train.log_every=1",
    "--config.train.metrics_every=4",
    "--config.train.progress=False",
    "--config.eval.max_train=200",
    "--config.eval.max_test=100",
    "--config.eval.rotation=False",
    "--config.data.batch_size=32",
    "--config.optimizer.warmup_steps=1",
    "--config.dtype=float64",
    "--config.model.backbone_kwargs.hidden=(32,)",
    "--config.model.projector.hidden=(32,)",
]

_WORKER = r"""
import contextlib, os, sys, numpy as np, jax
from ssl_geometry import train, trainer
out, argv = sys.argv[1], sys.argv[2:]
cfg, wd = train.parse_args(["train", *argv])
mock = contextlib.nullcontext()
if os.environ.get("MOCK_TFDS"):  # a mock tfds set: example i is a seeded image, label i % 10
    import tensorflow_datasets as tfds
    sys.path.insert(0, os.path.join(os.getcwd(), "tests"))
    from test_data import _random_as_dataset  # the one mock, shared with tests/test_data.py
    as_dataset = _random_as_dataset(int(os.environ["MOCK_TFDS"]))
    mock = tfds.testing.mock_data(as_dataset_fn=as_dataset)
with mock:
    summary = trainer.train(cfg, wd, verbose=True)
if summary["status"] != "stopped" and jax.process_index() == 0:
    print("SUMMARY-PRINTED")
flat = jax.tree_util.tree_leaves_with_path(summary["state"]["params"])
np.savez(out, **{jax.tree_util.keystr(p): np.asarray(x.addressable_data(0)) for p, x in flat})
print("DEVICES", jax.process_index(), jax.process_count(), len(jax.devices()), len(jax.local_devices()))
"""


def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(n, workdir, out, *extra, timeout=600, env_extra=None):
    port = _port()
    env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_ENABLE_X64="1", PYTHONPATH=str(ROOT), **(env_extra or {}))
    env.pop("XLA_FLAGS", None)
    procs = []
    for i in range(n):
        argv = [
            "--config",
            CONFIG,
            "--workdir",
            str(workdir),
            *ARGS,
            *extra,
            "--config.distributed.initialize=True",
            f"--config.distributed.coordinator_address=127.0.0.1:{port}",
            f"--config.distributed.num_processes={n}",
            f"--config.distributed.process_id={i}",
        ]
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", _WORKER, str(out / f"p{i}.npz"), *argv],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=timeout)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
    for i, (p, log) in enumerate(zip(procs, logs)):
        assert p.returncode == 0, f"process {i}:\n{log[-4000:]}"
    return logs, [dict(np.load(out / f"p{i}.npz")) for i in range(n)]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One process, one device, the same config and global batch."""
    assert jax.config.read("jax_enable_x64")
    cfg, _ = train.parse_args(["train", "--config", CONFIG, "--workdir", "x", *ARGS])
    summary = trainer.train(cfg, tmp_path_factory.mktemp("ref"), verbose=False)
    return {
        jax.tree_util.keystr(p): np.asarray(x)
        for p, x in jax.tree_util.tree_leaves_with_path(summary["state"]["params"])
    }


def _check_same(params, reference):
    assert params.keys() == reference.keys()
    for k in reference:
        np.testing.assert_allclose(params[k], reference[k], rtol=0, atol=1e-10, err_msg=k)
    assert max(np.abs(v).max() for v in reference.values()) > 0


def _metric_steps(workdir):
    recs = [json.loads(x) for x in (pathlib.Path(workdir) / "metrics.jsonl").read_text().splitlines() if x.strip()]
    tracked = [r for r in recs if r.get("event") == "tracked"]
    assert len(tracked) == 1 and tracked[0]["step"] == 4 and 0 < tracked[0]["head/std_norm"] < 1
    return [r["step"] for r in recs if "loss" in r], [r for r in recs if r.get("event") == "final"]


@pytest.mark.parametrize("n", [2, 4])
def test_processes_match_one_process(tmp_path, n, reference):
    logs, params = _launch(n, tmp_path / "w", tmp_path)
    for p in params:
        _check_same(p, reference)
    assert f"DEVICES 0 {n} {n} 1" in logs[0]  # one global mesh over all processes' devices
    steps, final = _metric_steps(tmp_path / "w")
    assert steps == [1, 2, 3, 4] and len(final) == 1  # one writer
    assert "SUMMARY-PRINTED" in logs[0] and all("SUMMARY-PRINTED" not in x for x in logs[1:])
    assert sorted(int(p.name) for p in (tmp_path / "w" / "checkpoints").iterdir()) == [2, 4]


def test_stop_and_resume_all_processes(tmp_path, reference):
    logs, _ = _launch(2, tmp_path / "w", tmp_path, "--config.train.stop_after=2")
    assert sorted(int(p.name) for p in (tmp_path / "w" / "checkpoints").iterdir()) == [2]
    logs, params = _launch(2, tmp_path / "w", tmp_path)
    assert "resumed from checkpoint step 2" in logs[0]
    for p in params:
        _check_same(p, reference)
    steps, final = _metric_steps(tmp_path / "w")
    assert steps == [1, 2, 3, 4] and len(final) == 1


def test_two_processes_stream_their_own_tfds_shards(tmp_path):
    """data.stream=True on 2 processes: each reads its half of the split through tf.data
    (per-process batch 8 of the global 16), the run finishes, both processes end with the
    same state, and the checkpoint stores the stream position."""
    stream = [
        "--config.data.name=cifar10",
        "--config.data.stream=True",
        "--config.data.image_size=8",
        f"--config.data.data_dir={tmp_path / 'tfds'}",
        "--config.data.batch_size=16",
        "--config.data.shuffle_buffer=64",
        "--config.eval.max_train=40",
        "--config.eval.max_test=40",
        "--config.eval.knn_k=5",
        "--config.train.metrics_every=0",
    ]
    (tmp_path / "tfds").mkdir()  # data.data_dir must exist (the mock reads nothing from it)
    logs, params = _launch(2, tmp_path / "w", tmp_path, *stream, env_extra={"MOCK_TFDS": "40"})
    for k in params[0]:
        np.testing.assert_array_equal(params[0][k], params[1][k], err_msg=k)
    meta = json.loads((tmp_path / "w" / "checkpoints" / "4" / "meta" / "metadata").read_text())
    # 20 examples per process, per-process batch 8: 2 batches per epoch, so 4 steps = 2 epochs
    assert meta["data_position"] in ({"epoch": 2, "step": 0}, {"epoch": 1, "step": 2})


def _cli_processes(tmp_path, per_process, *, n=2, timeout_s=60, wait=240):
    """``n`` processes of ``python -m ssl_geometry.train`` on tiny.py, process ``i`` with ``per_process[i]``
    extra arguments; returns ``[(returncode, stderr)]`` and the wall time until all ended."""
    import time

    port = _port()
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    env.pop("XLA_FLAGS", None)
    tiny = str(ROOT / "experiments" / "configs" / "tiny.py")
    t0, procs = time.perf_counter(), []
    for i, extra in enumerate(per_process):
        argv = [
            "--config",
            tiny,
            "--workdir",
            str(tmp_path / "w"),
            "--config.train.progress=False",
            "--config.distributed.initialize=True",
            f"--config.distributed.coordinator_address=127.0.0.1:{port}",
            f"--config.distributed.num_processes={n}",
            f"--config.distributed.process_id={i}",
            f"--config.distributed.timeout_s={timeout_s}",
            *extra,
        ]
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "ssl_geometry.train", *argv],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    out = []
    for p in procs:
        try:
            out.append((p.wait(timeout=wait), p.stderr.read()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
    return out, time.perf_counter() - t0


def test_processes_started_with_different_configs_all_refuse_naming_the_field(tmp_path):
    out, _ = _cli_processes(tmp_path, [["--config.optimizer.lr=0.05"], ["--config.optimizer.lr=0.1"]])
    for i, (rc, err) in enumerate(out):
        assert rc == 2, (i, err[-2000:])
        assert "optimizer.lr" in err and "process(es) [1]" in err and "Traceback" not in err, (i, err[-2000:])
    assert not (tmp_path / "w" / "checkpoints").exists()  # refused before anything was built


def test_a_missing_peer_is_named_within_distributed_timeout_s(tmp_path):
    """jax's coordination client aborts (SIGABRT) a process whose peer never connects; the line printed
    before the wait names the coordinator and the missing process, and the abort comes within timeout_s."""
    out, wall = _cli_processes(tmp_path, [[]], n=2, timeout_s=5, wait=120)
    ((rc, err),) = out
    assert rc != 0, err[-2000:]
    line = [x for x in err.splitlines() if x.startswith("ssl_geometry: jax.distributed.initialize")]
    assert len(line) == 1, err[-2000:]
    assert "coordinator 127.0.0.1:" in line[0] and "process 0 of 2" in line[0] and "process(es) [1]" in line[0]
    assert "distributed.timeout_s = 5 s" in line[0]
    assert wall < 90, wall
