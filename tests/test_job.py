"""Each experiment of ``python -m experiments.reproduce`` runs in a child process (:mod:`experiments.job`).

A child killed by a signal (a segfault in native code) is one line naming the experiment, the signal and the
faulthandler trace it left in ``<out>/<run_dir>/crash.log``; the next experiment still runs and the run exits 1.
A child that survives writes the same results files as the suite run in one process.
"""

import json
import os
import pathlib
import signal
import subprocess
import sys

import pytest

from experiments import common, job, reproduce, suite

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _cli(code: str):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    return p.returncode, p.stdout, p.stderr


def test_a_segfaulting_experiment_is_one_line_with_its_trace_and_the_next_one_still_runs(tmp_path):
    """whitening segfaults in native code (``ctypes.string_at(0)``); paper_data, after it, still runs."""
    child = tmp_path / "child.py"
    child.write_text(
        "import ctypes, sys\nfrom experiments import job, whitening\n"
        "def crash_in_native_code(config):\n    ctypes.string_at(0)\n"
        "whitening.measure = crash_in_native_code\nsys.exit(job.main())\n"
    )
    out = tmp_path / "out"
    rc, stdout, stderr = _cli(
        f"import sys\nfrom experiments import job, reproduce\njob.CHILD = ({str(child)!r},)\n"
        f"sys.exit(reproduce.main(['--only', 'whitening,paper_data', '--variant', 'tiny', '--out', {str(out)!r}]))\n"
    )
    crash = out / "whitening" / job.CRASH_LOG
    line = f"[whitening] FAILED: killed by SIGSEGV (Segmentation fault) in its child process; faulthandler trace in {crash}"
    assert rc == 1 and line in stdout + stderr, stdout[-2000:] + stderr[-2000:]
    assert "Traceback" not in stdout + stderr
    trace = crash.read_text()
    assert "Fatal Python error: Segmentation fault" in trace and "in crash_in_native_code" in trace, trace
    # The next experiment ran to the end in its own child; its trace file is gone with the empty trace.
    assert "[paper_data] released-arrays:" in stdout + stderr
    assert (out / "paper_data" / "results.json").exists() and not (out / "paper_data" / job.CRASH_LOG).exists()
    assert not (out / "whitening" / "results.json").exists()
    assert (
        stderr.strip()
        .splitlines()[-1]
        .endswith(
            "1 experiment(s) failed: ['whitening'] (tracebacks in "
            f"{out / reproduce.ERROR_LOG}; fix and rerun the same command to resume)"
        )
    )
    log = (out / reproduce.ERROR_LOG).read_text()
    assert "===== whitening (tiny) crashed: killed by SIGSEGV" in log and "in crash_in_native_code" in log
    assert (out / "REPORT.md").exists() and (out / reproduce.MARKER).exists()  # the next run resumes
    assert not list(out.glob(".reproduce_job_*"))  # the outcome files are removed


def test_a_child_run_writes_the_same_results_files_as_one_in_process(tmp_path):
    """paper_data tiny through the CLI (a child process) and through :func:`experiments.suite.run_one` in this one:
    the same files, and results.json equal but for the clock (wall times, date)."""
    rc, stdout, stderr = _cli(
        "import sys\nfrom experiments import reproduce\n"
        f"sys.exit(reproduce.main(['--only', 'paper_data', '--variant', 'tiny', '--out', {str(tmp_path / 'a')!r}]))\n"
    )
    assert rc == 0, stderr[-2000:]
    suite.run_one("paper_data", "tiny", tmp_path / "b", force=True)
    a, b = tmp_path / "a" / "paper_data", tmp_path / "b" / "paper_data"
    assert sorted(p.name for p in a.iterdir()) == sorted(p.name for p in b.iterdir())
    assert not (a / job.CRASH_LOG).exists()

    def unclocked(res):
        res = {k: v for k, v in res.items() if k not in ("wall_time_s", "date")}
        return json.dumps({**res, "measurements": {**res["measurements"], "wall_time_s": None}}, sort_keys=True)

    assert unclocked(common.read_results(a)) == unclocked(common.read_results(b))


@pytest.mark.parametrize(
    "code, status, line",
    [
        (
            "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
            "crashed",
            f"killed by SIGKILL (Killed) in its child process; {job.NO_TRACE}",
        ),
        ("import sys; sys.exit(5)", "crashed", "its child process exited with status 5 without reporting an outcome"),
        (
            "import json, sys; open(json.loads(sys.argv[1])['report'], 'w').write("
            "json.dumps({'status': 'failed', 'line': 'ValueError: x', 'detail': 'tb'}))",
            "failed",
            "ValueError: x",
        ),
    ],
)
def test_the_parent_reads_each_way_a_child_can_end(tmp_path, monkeypatch, code, status, line):
    monkeypatch.setattr(job, "CHILD", ("-c", code))
    got = job.run("paper_data", "tiny", tmp_path, force=True, seed=None, data_dir=None, dry_run=False)
    assert got.status == status and got.line.startswith(line) and got.results is None, got
    assert not (tmp_path / "paper_data").exists() and not list(tmp_path.glob(".reproduce_job_*"))  # nothing left


def test_an_interrupted_child_interrupts_the_parent(tmp_path, monkeypatch):
    monkeypatch.setattr(job, "CHILD", ("-c", f"import sys; sys.exit({job.INTERRUPTED})"))
    with pytest.raises(KeyboardInterrupt):
        job.run("paper_data", "tiny", tmp_path, force=True, seed=None, data_dir=None, dry_run=False)


def test_signal_names():
    assert job.signal_name(signal.SIGSEGV) == "SIGSEGV (Segmentation fault)"
    assert job.signal_name(signal.SIGABRT) == "SIGABRT (Aborted)"
    assert job.signal_name(1000) == "signal 1000"
