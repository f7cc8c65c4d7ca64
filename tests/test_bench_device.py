"""The device script's CPU dry run: every step of experiments/bench_device.sh runs end to end at shrunk sizes.

So the first GPU run does not fail on a typo. About a minute on a quiet 2-core machine.
"""
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

#: The slow tier (``-m slow``, run by ``.ci/run`` after the suite): the device script end to end on CPU (--cpu-smoke).
pytestmark = pytest.mark.slow


@pytest.mark.skipif(sys.platform == "win32", reason="bash script")
def test_bench_device_cpu_smoke_runs_every_step(tmp_path):
    md = tmp_path / "bench_device.md"
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(["bash", str(ROOT / "experiments" / "bench_device.sh"), "--cpu-smoke", "--out", str(md)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=2400)
    text = md.read_text()
    assert proc.returncode == 0, proc.stderr[-3000:] + text[-3000:]
    for section in ("## environment", "## train", "## lanczos", "## dry_run", "## scaling"):
        assert section in text, f"{section} missing from the device report"
    assert "TIMED OUT" not in text and "**At least one step failed" not in text
    # the tables each step writes are included: training rows, the Lanczos criteria, fitted exponents
    assert "images_per_s" in text and "Criteria: ratio" in text and "fitted exponents" in text
    assert (tmp_path / "bench_device_scaling.md").exists()
