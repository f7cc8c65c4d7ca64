"""``python -m experiments.reproduce`` as a user runs it: exit status, the named argument or path, where it writes.

Exit status is the contract: 0 success, 2 bad input or a refused run, 1 a failure during the run, each
with one line naming the problem and what to do, never a traceback. A partial or non-default run never
writes the committed ``results/`` or ``REPORT.md``.
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from experiments import claims, common, reproduce, suite

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _run(*args, cwd=ROOT, code=None, timeout=600):
    """Run the CLI (or ``python -c code``) in a subprocess; returns ``(rc, stdout, stderr)``."""
    cmd = [sys.executable, "-c", code] if code else [sys.executable, "-m", "experiments.reproduce", *args]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    return p.returncode, p.stdout, p.stderr


def _one_line_error(stderr: str) -> str:
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    assert "Traceback" not in stderr, stderr
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.mark.parametrize(
    "args, named",
    [
        (["--only", ""], "--only: no experiment named"),
        (["--only", " , "], "--only: no experiment named"),
        (["--only", "whitening,nope"], "'nope'"),
        (["--variant", "huge"], "--variant"),
        (["--seed", "x"], "--seed"),
        (["--seed", "-1"], "--seed: expected an integer >= 0"),
        (["--stale", "--seed", "1"], "--stale cannot be combined with --seed"),
        (["--stale", "--dry-run", "--force"], "--stale cannot be combined with --dry-run, --force"),
    ],
)
def test_bad_arguments_exit_2_naming_the_argument(args, named):
    rc, out, err = _run(*args)
    assert rc == 2 and named in _one_line_error(err)


@pytest.mark.parametrize("data_dir", ["/nonexistent/tfds", "", "a_file"])
def test_a_data_dir_that_is_not_a_directory_is_refused_before_anything_runs(tmp_path, data_dir):
    """Issue 34: ``--data-dir /nonexistent`` was silently ignored. (A tiny partial run into tmp_path, so that a
    broken check could never start the committed run.)"""
    (tmp_path / "a_file").write_text("x")
    data_dir = str(tmp_path / data_dir) if data_dir == "a_file" else data_dir
    rc, _, err = _run("--only", "paper_data", "--variant", "tiny", "--out", str(tmp_path / "o"), "--data-dir", data_dir)
    line = _one_line_error(err)
    assert rc == 2 and f"--data-dir {data_dir!r}: not an existing directory" in line, line
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "args, flag",
    [
        (["--only", "whitening", "--variant", "tiny", "--out", "results"], "--out results"),
        (["--variant", "tiny", "--out", "results"], "--out results"),
        (["--variant", "tiny", "--out", "results/tiny"], "--out results/tiny"),
        (["--only", "paper_data", "--report", "REPORT.md"], "--report REPORT.md"),
        (["--seed", "3", "--out", "results"], "--out results"),
        (["--dry-run", "--variant", "tiny", "--out", "results"], "--dry-run never writes"),
        (["--dry-run", "--variant", "tiny", "--only", "paper_data", "--report", "REPORT.md"], "--dry-run never writes"),
    ],
)
def test_a_partial_or_non_default_run_is_refused_the_committed_results(args, flag):
    before = {p: p.stat().st_mtime_ns for p in [ROOT / "REPORT.md", *(ROOT / "results").glob("*/results.json")]}
    rc, out, err = _run(*args)
    line = _one_line_error(err)
    assert rc == 2 and flag in line, line
    assert {p: p.stat().st_mtime_ns for p in before} == before


def test_unwritable_out_or_report_is_refused_before_any_experiment_runs(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")  # a path below a regular file cannot be created, whoever runs the test
    rc, _, err = _run(
        "--only", "whitening", "--variant", "tiny", "--out", str(tmp_path / "o"), "--report", str(blocker / "R.md")
    )
    line = _one_line_error(err)
    assert rc == 2 and line.startswith("python -m experiments.reproduce: error: --report") and "R.md" in line
    assert not (tmp_path / "o" / "whitening").exists()  # refused before anything ran
    rc, _, err = _run("--only", "whitening", "--variant", "tiny", "--out", str(blocker / "out"))
    line = _one_line_error(err)
    assert rc == 2 and "--out" in line and "a_file/out" in line


def test_help_exits_0():
    rc, out, _ = _run("--help")
    assert rc == 0 and "runs/<variant>" in out


def test_a_failure_during_the_run_exits_1_in_one_line_with_the_traceback_logged(tmp_path):
    """An experiment that raises: the others' results and the report are still written, status 1. (Each experiment
    runs in a child process: the child, a script that breaks paper_data and then runs :func:`experiments.job.main`,
    stands in for ``python -m experiments.job``.)"""
    child = tmp_path / "child.py"
    child.write_text(
        "import sys\nfrom experiments import job, paper_data\n"
        "def boom(config):\n    raise ValueError('config.data.root: broken on purpose')\n"
        "paper_data.measure = boom\nsys.exit(job.main())\n"
    )
    code = (
        f"import sys\nfrom experiments import job, reproduce\njob.CHILD = ({str(child)!r},)\n"
        f"sys.exit(reproduce.main(['--only', 'paper_data', '--variant', 'tiny', '--out', {str(tmp_path)!r}]))\n"
    )
    rc, out, err = _run(code=code)
    assert rc == 1 and "Traceback" not in out + err
    assert "[paper_data] FAILED: ValueError: config.data.root: broken on purpose" in out + err
    assert "1 experiment(s) failed: ['paper_data']" in err
    log = (tmp_path / reproduce.ERROR_LOG).read_text()
    assert "Traceback" in log and "broken on purpose" in log
    assert (tmp_path / "REPORT.md").exists() and (tmp_path / reproduce.MARKER).exists()  # the next run resumes


@pytest.mark.slow  # end to end (subprocesses, full runs): the slow tier of .ci/run keeps README command 2 under 15 minutes
def test_partial_run_in_a_clean_clone_writes_runs_and_leaves_git_status_clean(tmp_path):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    rc, out, err = _run("--only", "whitening", "--variant", "tiny", cwd=clone)
    assert rc == 0, err[-2000:]
    assert "writing runs/tiny/ and runs/tiny/REPORT.md" in out
    assert (clone / "runs" / "tiny" / "whitening" / "results.json").exists()
    assert (clone / "runs" / "tiny" / "REPORT.md").exists()
    status = subprocess.run(["git", "status", "--porcelain"], cwd=clone, capture_output=True, text=True, check=True)
    assert status.stdout == ""


def test_paths_of_each_kind_of_run(monkeypatch, tmp_path):
    """Where each run writes (no subprocess: the path logic of ``main``)."""
    paths = lambda *a: reproduce._paths(*reproduce._parse(list(a)))
    assert paths() == (reproduce.COMMITTED_OUT, reproduce.COMMITTED_REPORT, True)
    assert paths("--only", ",".join(suite.NAMES)) == (reproduce.COMMITTED_OUT, reproduce.COMMITTED_REPORT, True)
    out, report, committed = paths("--only", "whitening")
    assert out == reproduce.RUNS_DIR / "smoke" and report == out / "REPORT.md" and not committed
    out, report, _ = paths("--variant", "tiny")
    assert out == reproduce.RUNS_DIR / "tiny"
    monkeypatch.chdir(reproduce.ROOT)
    out, report, _ = paths("--only", "whitening", "--out", "results", "--force")  # the lead's explicit choice
    assert out.resolve() == reproduce.COMMITTED_OUT and report == reproduce.COMMITTED_REPORT
    out, report, _ = paths("--dry-run", "--variant", "paper")
    assert out == reproduce.DRY_RUN_DIR / "paper" and report == out / "DRY_RUN.md"
    with pytest.raises(reproduce.Refused, match="--report"):
        paths("--variant", "tiny", "--report", str(reproduce.COMMITTED_REPORT))
    # --stale repairs the committed results by default, and a tiny run elsewhere
    assert paths("--stale") == (reproduce.COMMITTED_OUT, reproduce.COMMITTED_REPORT, True)
    assert paths("--stale", "--only", "whitening")[:2] == (reproduce.COMMITTED_OUT, reproduce.COMMITTED_REPORT)
    assert paths("--stale", "--variant", "tiny")[:2] == (
        reproduce.RUNS_DIR / "tiny",
        reproduce.RUNS_DIR / "tiny" / "REPORT.md",
    )
    with pytest.raises(reproduce.Refused, match="--stale --variant tiny: the committed results are variant 'smoke'"):
        paths("--stale", "--variant", "tiny", "--out", str(reproduce.COMMITTED_OUT))


def test_a_dry_run_writes_its_projection_table_under_the_harness_header(tmp_path):
    """``--dry-run`` writes DRY_RUN.md and, beside it, PROJECTION.md: the projection table with the command, the load
    before and after the whole run and the environment (the section BENCHMARKS.md includes for the paper variants)."""
    rc, out, err = _run("--only", "paper_data", "--variant", "tiny", "--dry-run", "--out", str(tmp_path))
    assert rc == 0, err
    text = (tmp_path / reproduce.PROJECTION).read_text()
    assert text.startswith("# Projected wall time of the paper variants (dry runs)\n")
    assert (
        f"Command: `python -m experiments.reproduce --only paper_data --variant tiny --dry-run --out {tmp_path}`"
        in text
    )
    assert "1-minute load average " in text and "device cpu:cpu" in text
    row = next(line for line in text.splitlines() if line.startswith("| 0. "))
    assert "| ran |" in row and row.count("|") == 9
    assert (tmp_path / "DRY_RUN.md").exists()


def _seed5_whitening(out: pathlib.Path) -> None:
    """A --seed 5 whitening result in ``out`` (the committed one, its seed set to 5)."""
    res = json.loads((ROOT / "results" / "whitening" / "results.json").read_text())
    res["seed"] = res["config"]["seed"] = 5
    (out / "whitening").mkdir(parents=True)
    (out / "whitening" / "results.json").write_text(json.dumps(res))


def test_a_report_over_results_of_different_seeds_names_the_seed_of_each_section(tmp_path):
    """Issue 34: ``--only paper_data --out DIR`` where DIR holds a --seed 5 whitening result: the report's header and
    each section name the seed the section comes from."""
    _seed5_whitening(tmp_path)
    rc, out, err = _run("--only", "paper_data", "--variant", "tiny", "--out", str(tmp_path))
    assert rc == 0, err[-2000:]
    text = (tmp_path / "REPORT.md").read_text()
    assert "**The sections below come from different runs** (variant, seed and date of each)" in text
    rows = [ln for ln in text.splitlines() if ln.startswith("| 0. ") or ln.startswith("| 1. ")]
    assert rows[0].split(" | ")[1:3] == ["`tiny`", "0"] and rows[1].split(" | ")[1:3] == ["`smoke`", "5"]
    assert "variant `smoke` (smoke scale), seed 5, finished" in text
    assert "variant `tiny` (paper scale), seed 0, finished" in text  # paper_data's scale is the paper's
    res = common.read_results(tmp_path / "paper_data")
    assert res["seed"] == 0 and res["code_digest"] == claims.code_digest("paper_data")


@pytest.mark.slow  # end to end (subprocesses, full runs): the slow tier of .ci/run keeps README command 2 under 15 minutes
def test_stale_reruns_exactly_the_stale_experiment_and_says_so(tmp_path):
    _seed5_whitening(tmp_path)  # stale (another seed's code), but outside --only: left alone
    whitening = (tmp_path / "whitening" / "results.json").read_bytes()
    rc, out, err = _run("--only", "paper_data", "--variant", "tiny", "--out", str(tmp_path))
    assert rc == 0, err[-2000:]
    stamp = (tmp_path / "paper_data" / "results.json").stat().st_mtime_ns
    rc, out, err = _run("--stale", "--only", "paper_data", "--variant", "tiny", "--out", str(tmp_path))
    assert rc == 0 and f"--stale: nothing under {tmp_path}/ is stale" in out, err[-2000:]
    assert (tmp_path / "paper_data" / "results.json").stat().st_mtime_ns == stamp
    res = common.read_results(tmp_path / "paper_data")
    common.write_results(tmp_path / "paper_data", {**res, "code_digest": "0" * 16})
    rc, out, err = _run("--stale", "--only", "paper_data", "--variant", "tiny", "--out", str(tmp_path))
    assert rc == 0, err[-2000:]
    assert f"--stale: rerunning 1 experiment run(s) in {tmp_path}/: paper_data (variant tiny, seed 0)" in out
    assert "paper_data: code digest 0000000000000000 != current" in out
    assert common.read_results(tmp_path / "paper_data")["code_digest"] == claims.code_digest("paper_data")
    assert (tmp_path / "whitening" / "results.json").read_bytes() == whitening  # not asked for: untouched
