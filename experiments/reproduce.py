"""Run every experiment of the suite and assemble ``REPORT.md``.

    python -m experiments.reproduce [--out DIR] [--only NAME[,NAME]] [--variant smoke|tiny|paper|paper_*]
                                    [--force] [--resume] [--seed N] [--report PATH] [--data-dir DIR] [--dry-run]
                                    [--stale]

**Where it writes.** The full default run (every experiment, variant ``smoke``, no ``--seed``) writes
``results/<name>/`` and ``REPORT.md``, the committed results. Any other run -- a partial one
(``--only``), another variant (``--variant``) or another seed (``--seed``) -- writes
``runs/<variant>/<name>/`` and ``runs/<variant>/REPORT.md`` (git-ignored) and says so: a stray
command never overwrites the committed results. ``--out results --force`` writes such a run into
``results/`` and ``REPORT.md`` all the same; the report's header then names the variant and date of
each section. ``--dry-run`` writes ``dry_run/<variant>/`` and its ``DRY_RUN.md``, never ``results/``
or ``REPORT.md``. ``--out`` and ``--report`` are checked writable before any experiment runs.

**Stale results.** ``--stale`` reruns exactly the experiments whose stored results under the output
directory (default ``results/``) no longer stand for the current code and registry -- a code digest or
a rule digest that differs from the current one, or no results at all (:func:`experiments.suite.stale_runs`)
-- each at its stored variant and seed (a missing one at ``--variant``), prints which and why, then
rewrites the report from every stored result. ``tests/test_claims.py`` fails, naming them, while the
committed results are stale. Writing the committed ``REPORT.md`` also rewrites README.md's table of
claim-level verdicts (:func:`experiments.report_md.update_readme`).

**Exit status.** 0: every requested experiment ran (or was skipped with its reason) and the report
was written. 2: bad input or a refused run, with one line naming the argument or path and what to do.
1: a failure during the run: one line per failed experiment (its traceback in
``DIR/.reproduce_errors.log``); the other experiments still run, the report is still written, and
the next run on ``DIR`` resumes. 130: interrupted (Ctrl-C); the same command resumes. Each experiment
runs in a child process of its own (:mod:`experiments.job`): one killed by a signal (a segfault in native
code) is a failure whose line names the signal and its faulthandler trace, ``DIR/<name>/crash.log``.

**Which module runs what.** :data:`experiments.suite.EXPERIMENTS` lists the suite: each experiment is one module
``experiments/<name>`` with its config ``experiments/configs/<name>.py``, and ``--variant V`` runs
variant ``V`` of every config that defines it (an experiment without it is listed as skipped).
``--variant paper`` also runs each sibling ``paper_*`` variant a config defines (the guillotine's ``paper_vit_tiny``,
collapse_hessians' ``paper_widths``; ``--variant paper_widths`` runs that one alone); every paper variant runs in
``DIR/<name>-<variant>/``, so a paper-scale run stored in ``results/`` sits beside the smoke run's ``results/<name>/``
(:func:`experiments.suite.variants_of`, :func:`~experiments.suite.run_dir`). ``--data-dir DIR`` sets
``data.data_dir`` in every config that has the field (the paper variants read prepared tfds CIFAR from it).
``--dry-run`` runs each variant end to end with ``config.dry_run = True`` (the paper's models and image shapes, mock
or generated data, reduced batches and image counts, a few steps per training phase plus every analysis step) and
reports the full variant's training and analysis projected apart from two measured sizes each; a module that does not
declare ``DRY_RUN = True`` is listed as skipped, because running it would run its full variant.

**Resuming.** While a run is in progress ``DIR/.reproduce_in_progress.json`` marks it; if the run is interrupted or an
experiment fails the marker stays, and the next run on ``DIR`` reuses every stored result whose config equals the
requested one and whose code digest is the current code's. Without a marker every requested experiment is computed
afresh, so the numbers come from the code being run. ``--resume`` reuses stored results even without a marker;
``--force`` never does.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import pathlib
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import jax

from experiments import common, job, report_md, suite
from experiments.benchmarks import harness
from experiments.reproduce_cli import COMMITTED_OUT as COMMITTED_OUT
from experiments.reproduce_cli import COMMITTED_REPORT as COMMITTED_REPORT
from experiments.reproduce_cli import DEFAULT_VARIANT as DEFAULT_VARIANT
from experiments.reproduce_cli import DRY_RUN_DIR as DRY_RUN_DIR
from experiments.reproduce_cli import README as README
from experiments.reproduce_cli import ROOT as ROOT
from experiments.reproduce_cli import RUNS_DIR as RUNS_DIR
from experiments.reproduce_cli import Refused as Refused
from experiments.reproduce_cli import check_writable as _check_writable
from experiments.reproduce_cli import parse
from experiments.reproduce_cli import paths as _paths
from experiments.reproduce_cli import shown as _shown

#: File that marks an unfinished run in the output directory (its presence means "resume").
MARKER = ".reproduce_in_progress.json"
#: The tracebacks of the experiments that failed in the last run on the output directory.
ERROR_LOG = ".reproduce_errors.log"
#: A dry run's projection table with the benchmark harness's header, beside its DRY_RUN.md (BENCHMARKS.md includes
#: the paper variants' one as ``docs/dry_run_paper.md``).
PROJECTION = "PROJECTION.md"


def collect(out_root: pathlib.Path, names=None) -> list[report_md.Entry]:
    """Every stored results file under ``out_root`` (of ``names``, default all), in suite order."""
    entries = []
    for name, label in suite.EXPERIMENTS:
        if names is not None and name not in names:
            continue
        for out_dir in suite.stored_dirs(out_root, name):
            res = common.read_results(out_dir)
            label_v = label if out_dir.name == name else f"{label} [{res.get('variant')}]"
            entries.append(report_md.Entry(name, label_v, res, suite.load(name)[0], out_dir))
    return entries


def assemble_report(
    out_root: pathlib.Path,
    report_path: pathlib.Path,
    command: str,
    names=None,
    dry_run: bool = False,
    skipped: dict | None = None,
) -> str:
    """Write ``report_path`` from the stored results under ``out_root`` (:func:`experiments.report_md.render`)."""
    out_root, report_path = pathlib.Path(out_root), pathlib.Path(report_path)
    text = report_md.render(
        collect(out_root, names), report_path, command, source=_shown(out_root), dry_run=dry_run, skipped=skipped
    )
    report_path.write_text(text)
    if not dry_run and report_path.resolve() == COMMITTED_REPORT.resolve() and README.exists():
        readme = README.read_text()
        updated = report_md.update_readme(readme, text)
        if updated != readme:  # README's table is REPORT's claim-level table (tests/test_report_md.py checks it)
            README.write_text(updated)
    return text


def write_projection(
    out_root: pathlib.Path,
    command: str,
    names,
    skipped: dict,
    load_before: float,
    cpu_start: harness.CpuSample | None = None,
) -> str:
    """``out_root/PROJECTION.md``: the dry run's projection table (:func:`experiments.report_md.dry_run_table`)
    under the benchmark harness's header -- the command, the 1-minute load average before and after the whole dry
    run, the share of the CPU other processes used during it (from ``cpu_start``) and the environment -- written
    whatever the load (a loaded machine is marked, not refused)."""
    body = (
        "Each paper variant ran end to end with `config.dry_run = True`; its training and its analysis were each "
        "timed at two reduced sizes (compilation excluded), fitted as t = a n^p and projected to the paper's "
        "size and counts. The full dry-run report (every section) is DRY_RUN.md beside this file.\n\n"
        + report_md.dry_run_table(collect(out_root, names), skipped)
    )
    return harness.write_table(
        pathlib.Path(out_root) / PROJECTION,
        "Projected wall time of the paper variants (dry runs)",
        body,
        command=command,
        load_before=load_before,
        cpu_start=cpu_start,
        force=True,
    )


def _parse(argv):
    """``(args, experiment names)`` of the command line (:func:`experiments.reproduce_cli.parse`)."""
    return parse(argv, __doc__.split("\n")[0])


def _dry_line(tag: str, res: dict) -> str:
    d = res.get("measurements", {}).get("dry_run")
    if not d:
        return f"[{tag}] dry run finished but reported no dry_run timing"
    return (
        f"[{tag}] dry run: step {d.get('step_time_s', float('nan')):.3g} s; projected full variant "
        f"{d.get('projected_wall_time_s', float('nan')) / 3600:.3g} h on {d.get('device')}"
    )


_one_line = job.one_line


def _run_all(args, jobs, skipped: dict, out_root: pathlib.Path, resuming: bool) -> tuple[dict, dict]:
    """Run every (experiment, variant, seed) of ``jobs``, each in a child process of its own (:func:`experiments.job.run`);
    returns ``(failures, skipped)``, each ``{tag: one line}``."""
    from tqdm.auto import tqdm

    failures, skipped, log = {}, dict(skipped), out_root / ERROR_LOG
    log.unlink(missing_ok=True)
    for name, why in skipped.items():
        tqdm.write(f"[{name}] {why}")
    bar = tqdm(
        jobs, desc="reproduce" + (" --dry-run" if args.dry_run else " --stale" if args.stale else ""), unit="run"
    )
    for name, variant, seed in bar:
        tag = suite.run_dir(name, variant)
        bar.set_postfix_str(tag)
        bar.clear()  # the child's output starts on a line of its own
        try:
            got = job.run(
                name,
                variant,
                out_root,
                force=not resuming,
                seed=seed,
                data_dir=args.data_dir,
                dry_run=args.dry_run,
                shown=_shown,
            )
        except Exception as err:  # noqa: BLE001 - the child could not be started or read back: one line, go on
            got = job.Outcome("failed", _one_line(err), f"{type(err).__name__}: {err}", None)
        res = got.results or {}
        if got.status == "ok" and args.dry_run:  # 2 steps on mock data: the verdict decides nothing, the timing is
            tqdm.write(f"{_dry_line(tag, res)} (dry run took {res.get('wall_time_s', 0):.1f} s)")  # the result
        elif got.status == "ok":
            tqdm.write(f"[{tag}] {report_md.verdict_line(res)} ({res.get('wall_time_s', 0):.1f} s)")
        elif got.status == "skipped":  # a dry run of an experiment that cannot dry-run
            skipped[tag] = got.line
            tqdm.write(f"[{tag}] {skipped[tag]}")
        else:  # failed (it raised: its traceback) or crashed (a signal: its faulthandler trace); the others go on
            failures[tag] = got.line
            with log.open("a") as f:
                f.write(f"===== {tag} ({args.variant}) {got.status}: {got.line}\n{got.detail}\n")
            where = "" if got.status == "crashed" else f" (traceback in {_shown(log)})"
            tqdm.write(f"[{tag}] FAILED: {failures[tag]}{where}")
    return failures, skipped


def main(argv=None) -> int:
    """The command line (see the module docstring); returns the exit status."""
    prog = "python -m experiments.reproduce"
    try:
        args, names = _parse(argv)
        out_root, report_path, committed_run = _paths(args, names)
        _check_writable(out_root, report_path)
    except SystemExit as exit_:  # argparse: --help (0) or bad input (2), its one line already printed
        return int(exit_.code or 0)
    except Refused as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    if args.stale:
        jobs, skipped, stale = suite.stale_jobs(out_root, names, args.variant)
        if jobs:
            print(
                f"--stale: rerunning {len(jobs)} experiment run(s) in {_shown(out_root)}/: "
                + "; ".join(f"{suite.run_dir(n, v)} (variant {v}, seed {s})" for n, v, s in jobs)
            )
            for s in stale:
                print(f"  {s.run_dir}: {s.why}")
        else:
            print(f"--stale: nothing under {_shown(out_root)}/ is stale; rewriting {_shown(report_path)}")
    else:
        jobs, skipped = suite.jobs(names, args.variant, args.seed)
    if not committed_run and not args.dry_run and not args.stale:
        print(
            f"a partial or non-default run: writing {_shown(out_root)}/ and {_shown(report_path)} (results/ and "
            "REPORT.md are written by the full default run only, or with --out results --force)"
        )
    jax.config.update("jax_enable_x64", True)  # exact checks; training code states float32 explicitly
    marker = out_root / MARKER
    resuming = (marker.exists() or args.resume) and not args.force and not args.stale
    if resuming and marker.exists():
        print(f"resuming the interrupted run recorded in {_shown(marker)}")
    marker.write_text(
        json.dumps(
            {
                "variant": args.variant,
                "only": names,
                "seed": args.seed,
                "dry_run": args.dry_run,
                "data_dir": args.data_dir,
                "stale": args.stale,
                "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            }
        )
    )
    load_before, cpu_start = harness.load_average(), harness.cpu_sample()
    try:
        failures, skipped = _run_all(args, jobs, skipped, out_root, resuming)
    except KeyboardInterrupt:  # the marker stays: the same command resumes
        print(f"{prog}: interrupted; rerun the same command to resume from {_shown(out_root)}", file=sys.stderr)
        return 130
    command = " ".join([prog, *(sys.argv[1:] if argv is None else argv)])
    try:
        assemble_report(
            out_root, report_path, command, names=names if args.dry_run else None, dry_run=args.dry_run, skipped=skipped
        )
        if args.dry_run:
            write_projection(out_root, command, names, skipped, load_before, cpu_start)
    except Exception as err:  # noqa: BLE001 - a report that cannot be assembled is a failed run, in one line
        print(
            f"{prog}: error: the report {_shown(report_path)} could not be assembled from {_shown(out_root)}: "
            f"{_one_line(err)}",
            file=sys.stderr,
        )
        return 1
    print(f"wrote {_shown(report_path)}")
    if skipped:
        print(f"{len(skipped)} experiment(s) skipped: {sorted(skipped)}", file=sys.stderr)
    if failures:  # the marker stays: the next run resumes and retries the failed experiments
        print(
            f"{prog}: error: {len(failures)} experiment(s) failed: {sorted(failures)} (tracebacks in "
            f"{_shown(out_root / ERROR_LOG)}; fix and rerun the same command to resume)",
            file=sys.stderr,
        )
        return 1
    marker.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
