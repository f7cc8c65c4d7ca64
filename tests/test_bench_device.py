"""experiments/bench_device.sh: its backend check (fast), and its CPU dry run (slow tier).

The dry run runs every step end to end at shrunk sizes, so the first GPU run does not fail on a typo
(about a minute on a quiet 2-core machine). The backend check refuses a device run on a CPU backend,
where no MFU can be reported.
"""

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.skipif(sys.platform == "win32", reason="bash script")
def test_bench_device_refuses_a_device_run_on_a_cpu_backend(tmp_path):
    md = tmp_path / "report" / "bench_device.md"
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        ["bash", str(ROOT / "experiments" / "bench_device.sh"), "--out", str(md)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    assert "JAX backend: cpu" in proc.stderr
    assert "error: the JAX backend is cpu" in proc.stderr and "--cpu-smoke" in proc.stderr
    assert not md.parent.exists()  # refused before anything ran or was written


#: The slow tier (``-m slow``, run by ``.ci/run`` after the suite): the device script end to end on CPU (--cpu-smoke).
@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="bash script")
def test_bench_device_cpu_smoke_runs_every_step(tmp_path):
    md = tmp_path / "bench_device.md"
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        ["bash", str(ROOT / "experiments" / "bench_device.sh"), "--cpu-smoke", "--out", str(md)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=2400,
    )
    text = md.read_text()
    assert proc.returncode == 0, proc.stderr[-3000:] + text[-3000:]
    for section in ("## environment", "## train", "## lanczos", "## dry_run", "## scaling"):
        assert section in text, f"{section} missing from the device report"
    assert "TIMED OUT" not in text and "**At least one step failed" not in text
    # the backend is printed, and a CPU backend reports no MFU
    assert "JAX backend: cpu" in proc.stderr and "JAX backend: cpu (" in text
    assert "MFU: not reported (CPU backend" in text and "mfu_vs" not in text
    # the tables each step writes are included: training rows, the Lanczos criteria, fitted exponents
    assert "images_per_s" in text and "fitted exponents" in text
    assert "Criteria for `" in text and "ratio_le_0.5" in text  # bench_hessian's criteria line of each problem
    assert (tmp_path / "bench_device_scaling.md").exists()
