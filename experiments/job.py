"""One experiment run in a child process of its own, so that a crash of one never takes the suite down with it.

``python -m experiments.reproduce`` runs each (experiment, variant, seed) job through :func:`run`: a child
``python -X faulthandler -m experiments.job SPEC`` calls :func:`experiments.suite.run_one` exactly as the
suite did in one process (the child writes ``results.json``; its output streams through to the terminal)
and reports its outcome in a small JSON file the parent reads back. The parent sees one of four outcomes
(:class:`Outcome`):

* ``ok``: the results, read back from ``<out>/<run_dir>/results.json``;
* ``skipped``: the experiment cannot dry-run (``NotImplementedError``), with the reason;
* ``failed``: the experiment raised; one line (:func:`one_line`) and its traceback;
* ``crashed``: the child was killed by a signal (a segfault in native code, an abort, the out-of-memory
  killer) or exited without reporting; one line naming the signal and where the trace is. The child sends
  :mod:`faulthandler`'s trace of every Python thread to ``<out>/<run_dir>/crash.log`` (:data:`CRASH_LOG`),
  opened before anything but the standard library is imported; it is removed again when the child
  survives.
"""

from __future__ import annotations

import faulthandler
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import traceback
from typing import NamedTuple

#: The faulthandler trace of a crashed child, in the run's output directory.
CRASH_LOG = "crash.log"
#: What the child interpreter runs after ``-X faulthandler`` (this module; a test substitutes a script).
CHILD: tuple[str, ...] = ("-m", "experiments.job")
#: The repository whose code the child imports (put first on its ``PYTHONPATH``: the parent's code).
ROOT = pathlib.Path(__file__).resolve().parent.parent
#: Exit status of a child interrupted by Ctrl-C: the parent stops as if it had been interrupted itself.
INTERRUPTED = 130
#: Why a child killed by a signal left no trace.
NO_TRACE = (
    "no faulthandler trace (it catches SIGSEGV, SIGFPE, SIGABRT, SIGBUS and SIGILL; SIGKILL, which the "
    "out-of-memory killer sends, cannot be caught)"
)


class Outcome(NamedTuple):
    """How one job ended (see the module docstring)."""

    status: str  #: ``ok``, ``skipped``, ``failed`` or ``crashed``
    line: str  #: one line: the reason (skipped), the error (failed), the signal and the trace's path (crashed)
    detail: str  #: the traceback (failed) or the faulthandler trace (crashed); ``""`` otherwise
    results: dict | None  #: the stored results (ok), else ``None``


def one_line(err: BaseException) -> str:
    """``Type: message`` on one line, whitespace collapsed, cut at 300 characters."""
    text = " ".join(str(err).split()) or "(no message)"
    return f"{type(err).__name__}: {text[:300]}{'...' if len(text) > 300 else ''}"


def signal_name(signum: int) -> str:
    """``SIGSEGV (Segmentation fault)`` for 11; ``signal N`` for a number Python does not name."""
    try:
        name = signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
    described = signal.strsignal(signum)
    return f"{name} ({described})" if described else name


def run(
    name: str, variant: str, out_root, *, force: bool, seed: int | None, data_dir: str | None, dry_run: bool, shown=str
) -> Outcome:
    """Run :func:`experiments.suite.run_one` ``(name, variant, out_root, force, seed, data_dir, dry_run)`` in a
    child process and return its :class:`Outcome`; ``shown`` formats the crash log's path for the one line.
    ``KeyboardInterrupt`` when the child was interrupted (its status :data:`INTERRUPTED`)."""
    from experiments import common, suite

    out_dir = pathlib.Path(out_root) / suite.run_dir(name, variant)
    out_dir.mkdir(parents=True, exist_ok=True)
    crash = out_dir / CRASH_LOG
    crash.unlink(missing_ok=True)  # a trace left by an earlier run is not this one's
    fd, report = tempfile.mkstemp(dir=out_root, prefix=".reproduce_job_", suffix=".json")
    os.close(fd)
    spec = {
        "name": name,
        "variant": variant,
        "out_root": str(out_root),
        "force": force,
        "seed": seed,
        "data_dir": data_dir,
        "dry_run": dry_run,
        "crash_log": str(crash),
        "report": report,
    }
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",  # its lines interleave with the parent's in order
        "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
    }
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        rc = subprocess.run([sys.executable, "-X", "faulthandler", *CHILD, json.dumps(spec)], env=env).returncode
        text = pathlib.Path(report).read_text()
    finally:  # also when interrupted: no outcome file, no empty trace file left behind
        pathlib.Path(report).unlink(missing_ok=True)
        trace = crash.read_text(errors="replace") if crash.exists() else ""
        if not trace.strip():
            crash.unlink(missing_ok=True)
        if not any(out_dir.iterdir()):  # as before: an experiment that wrote nothing leaves no directory
            out_dir.rmdir()
    if rc < 0:
        where = f"faulthandler trace in {shown(crash)}" if trace.strip() else NO_TRACE
        return Outcome("crashed", f"killed by {signal_name(-rc)} in its child process; {where}", trace, None)
    if rc == INTERRUPTED:
        raise KeyboardInterrupt
    if not text.strip():
        return Outcome(
            "crashed",
            f"its child process exited with status {rc} without reporting an outcome (its output is above)",
            "",
            None,
        )
    got = json.loads(text)
    results = common.read_results(out_dir) if got["status"] == "ok" else None
    return Outcome(got["status"], got.get("line", ""), got.get("detail", ""), results)


def main(argv=None) -> int:
    """The child: run the job of ``argv[0]`` (the JSON spec :func:`run` writes) and write its outcome."""
    spec = json.loads((sys.argv[1:] if argv is None else argv)[0])
    crash = open(spec["crash_log"], "w")  # open until the process ends: faulthandler writes here when it dies
    faulthandler.enable(file=crash, all_threads=True)
    try:
        import jax

        from experiments import suite

        jax.config.update("jax_enable_x64", True)  # as reproduce sets it: exact checks; training states float32
        suite.run_one(
            spec["name"],
            spec["variant"],
            pathlib.Path(spec["out_root"]),
            force=spec["force"],
            seed=spec["seed"],
            data_dir=spec["data_dir"],
            dry_run=spec["dry_run"],
        )
        outcome = {"status": "ok"}
    except KeyboardInterrupt:
        return INTERRUPTED
    except NotImplementedError as err:  # a dry run of an experiment that cannot dry-run
        outcome = {"status": "skipped", "line": f"skipped: {err}"}
    except Exception as err:  # noqa: BLE001 - reported to the parent, which goes on with the next experiment
        outcome = {"status": "failed", "line": one_line(err), "detail": traceback.format_exc()}
    pathlib.Path(spec["report"]).write_text(json.dumps(outcome))
    return 0


if __name__ == "__main__":
    sys.exit(main())
