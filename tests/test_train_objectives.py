"""Every objective trains through the CLI entry point, on 1 and on 8 (simulated) devices,
and a killed run resumed from its checkpoint ends bitwise equal to the uninterrupted one.

Shapes are tiny (MLP backbone 192 -> 32 -> 32, heads of width 16-32, batch 32, 4 steps)
so each objective costs one step compilation per run. The 8-device runs share one
subprocess (``XLA_FLAGS`` must be set before JAX starts) for all objectives.
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

from ssl_geometry import objectives, train

#: The slow tier (``-m slow``, run by ``.ci/run`` after the suite): every objective through the CLI on 1 and 8 devices, with resume.
pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "experiments" / "configs" / "small.py")
SMALL = [
    "--config.train.steps=4",
    "--config.train.checkpoint_every=2",
    "--config.train.keep_checkpoints=3",
    "--config.train.log_every=1",
    "--config.train.metrics_every=0",
    "--config.train.progress=False",
    "--config.eval.max_train=100",
    "--config.eval.max_test=100",
    "--config.eval.rotation=False",
    "--config.data.batch_size=32",
    "--config.optimizer.warmup_steps=1",
    "--config.objective.queue_size=64",
    "--config.model.backbone_kwargs.hidden=(32,)",
    "--config.model.projector.hidden=(32,)",
    "--config.model.projector.out_dim=16",
    "--config.model.predictor.hidden=(8,)",
    "--config.model.predictor.out_dim=16",
]


def cli_argv(workdir, name, *extra):
    return ["train", "--config", CONFIG, "--workdir", str(workdir), f"--config.objective.name={name}", *SMALL, *extra]


def read_records(workdir):
    return [json.loads(x) for x in (pathlib.Path(workdir) / "metrics.jsonl").read_text().splitlines() if x.strip()]


def _fingerprint(workdir, step):
    """The SHA-256 of every state leaf that the checkpoint of ``step`` stored (its meta)."""
    meta = pathlib.Path(workdir) / "checkpoints" / str(step) / "meta" / "metadata"
    return json.loads(meta.read_text())["fingerprint"]


_EIGHT = r"""
import json, sys
from ssl_geometry import train
out = {}
for name, wd in zip(sys.argv[1::2], sys.argv[2::2]):
    argv = json.loads(open(wd + ".argv").read())
    assert train.main(argv) == 0, name
    recs = [json.loads(x) for x in open(wd + "/metrics.jsonl") if x.strip()]
    out[name] = [r["loss"] for r in recs if "loss" in r]
print("RESULT" + json.dumps(out))
"""


@pytest.fixture(scope="module")
def eight_devices(tmp_path_factory):
    """Losses of steps 1-2 of every objective on 8 simulated devices (one subprocess)."""
    root = tmp_path_factory.mktemp("eight")
    args = []
    for name in objectives.OBJECTIVES:
        wd = root / name
        (root / f"{name}.argv").write_text(json.dumps(cli_argv(wd, name, "--config.train.stop_after=2")))
        args += [name, str(wd)]
    env = dict(
        os.environ,
        XLA_FLAGS="--xla_force_host_platform_device_count=8",
        PYTHONPATH=str(ROOT),
        JAX_PLATFORMS="cpu",
        JAX_ENABLE_X64="1" if jax.config.read("jax_enable_x64") else "0",
    )
    proc = subprocess.run(
        [sys.executable, "-c", _EIGHT, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT")][-1]
    return json.loads(line[len("RESULT") :])


@pytest.mark.parametrize("name", objectives.OBJECTIVES)
def test_objective_trains_and_resumes_bitwise(tmp_path, name, eight_devices):
    full, cut = tmp_path / "full", tmp_path / "cut"
    assert train.main(cli_argv(full, name)) == 0
    recs = read_records(full)
    losses = [r["loss"] for r in recs if "loss" in r]
    assert [r["step"] for r in recs if "loss" in r] == [1, 2, 3, 4]
    assert all(np.isfinite(losses)), losses
    final = [r for r in recs if r.get("event") == "final"]
    assert len(final) == 1 and 0.0 <= final[0]["backbone/knn_acc"] <= 1.0

    # "Kill" after the step-2 checkpoint: the workdir as a run killed just before saving step 4
    # leaves it (step-3/4 records written, no step-4 checkpoint), then resume.
    shutil.copytree(full, cut)
    shutil.rmtree(cut / "checkpoints" / "4")
    lines = (cut / "metrics.jsonl").read_text().splitlines()
    (cut / "metrics.jsonl").write_text("\n".join(x for x in lines if '"final"' not in x) + "\n")
    assert train.main(cli_argv(cut, name)) == 0
    assert _fingerprint(cut, 4) == _fingerprint(full, 4)  # every state leaf bitwise equal
    strip = lambda rs: [{k: v for k, v in r.items() if k != "images_per_s"} for r in rs]
    assert strip(read_records(cut)) == strip(recs)  # steps 3-4 re-logged once, same numbers, one final record

    # The same global batch on 8 devices: the same first losses up to float32 reduction order.
    np.testing.assert_allclose(eight_devices[name], losses[:2], rtol=2e-5)
