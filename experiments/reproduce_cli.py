"""The command line of ``python -m experiments.reproduce``: its arguments (:func:`parse`) and where a run writes
(the committed tree, ``runs/<variant>`` or ``dry_run/<variant>``, :func:`paths`), with the refusals that keep a
partial, non-default or dry run out of the committed results. The rules are in :mod:`experiments.reproduce`'s
docstring ("Where it writes"); the names it uses are re-exported there.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import tempfile

from experiments import suite

__all__ = [
    "parse",
    "COMMITTED_OUT",
    "COMMITTED_REPORT",
    "DEFAULT_VARIANT",
    "DRY_RUN_DIR",
    "README",
    "ROOT",
    "RUNS_DIR",
    "Refused",
    "check_writable",
    "is_within",
    "paths",
    "shown",
]

#: The variant of the committed run.
DEFAULT_VARIANT = "smoke"
#: The repository whose code runs; the committed results and report are its ``results/`` and ``REPORT.md``.
ROOT = pathlib.Path(__file__).resolve().parent.parent
COMMITTED_OUT, COMMITTED_REPORT = ROOT / "results", ROOT / "REPORT.md"
#: README.md, whose "What the suite finds" table is rewritten with the committed REPORT.md.
README = ROOT / "README.md"
#: Where a partial or non-default run writes (``runs/<variant>``) and where a dry run does (``dry_run/<variant>``).
RUNS_DIR, DRY_RUN_DIR = ROOT / "runs", ROOT / "dry_run"


class Refused(Exception):
    """Bad input or a refused run (exit status 2): the message names the argument or path and what to do."""


def shown(path: pathlib.Path) -> str:
    """``path`` as the user reads it: relative to the current directory where it lies below it."""
    try:
        return str(pathlib.Path(path).resolve().relative_to(pathlib.Path.cwd().resolve()))
    except ValueError:
        return str(path)


def is_within(path: pathlib.Path, target: pathlib.Path) -> bool:
    """``path`` is ``target`` or lies below it (a directory inside ``results/`` writes the committed tree too)."""
    path, target = pathlib.Path(path).resolve(), target.resolve()
    return path == target or target in path.parents


def paths(args, names) -> tuple[pathlib.Path, pathlib.Path, bool]:
    """``(output directory, report path, whether this is the committed run)`` or :class:`Refused`."""
    if args.dry_run:
        out_root = pathlib.Path(args.out) if args.out else DRY_RUN_DIR / args.variant
        report_path = pathlib.Path(args.report) if args.report else out_root / "DRY_RUN.md"
        if is_within(out_root, COMMITTED_OUT) or is_within(report_path, COMMITTED_REPORT):
            raise Refused(
                f"--dry-run never writes {shown(COMMITTED_OUT)}/ or {shown(COMMITTED_REPORT)}; choose "
                "another --out/--report (or leave them out: dry_run/<variant>/)"
            )
        return out_root, report_path, False
    if args.stale:  # rewrites only what is stale, in the committed tree by default (at the default variant)
        out_root = (
            pathlib.Path(args.out)
            if args.out
            else (COMMITTED_OUT if args.variant == DEFAULT_VARIANT else RUNS_DIR / args.variant)
        )
        report_path = (
            pathlib.Path(args.report)
            if args.report
            else (COMMITTED_REPORT if out_root.resolve() == COMMITTED_OUT.resolve() else out_root / "REPORT.md")
        )
        if args.variant != DEFAULT_VARIANT and (
            is_within(out_root, COMMITTED_OUT) or is_within(report_path, COMMITTED_REPORT)
        ):
            raise Refused(
                f"--stale --variant {args.variant}: the committed results are variant {DEFAULT_VARIANT!r}; "
                f"choose another --out/--report for a {args.variant!r} run"
            )
        return out_root, report_path, is_within(out_root, COMMITTED_OUT)
    committed_run = set(names) == set(suite.NAMES) and args.variant == DEFAULT_VARIANT and args.seed is None
    default_out = COMMITTED_OUT if committed_run else RUNS_DIR / args.variant
    out_root = pathlib.Path(args.out) if args.out else default_out
    report_path = (
        pathlib.Path(args.report)
        if args.report
        else (COMMITTED_REPORT if out_root.resolve() == COMMITTED_OUT.resolve() else out_root / "REPORT.md")
    )
    if not committed_run and not args.force:
        for flag, path, target in (("--out", out_root, COMMITTED_OUT), ("--report", report_path, COMMITTED_REPORT)):
            if is_within(path, target):
                raise Refused(
                    f"{flag} {shown(path)}: a partial (--only), non-default --variant or --seed run never "
                    f"writes the committed results; leave {flag} out (it then writes "
                    f"{shown(RUNS_DIR / args.variant)}/), or add --force to write them all the same"
                )
    return out_root, report_path, committed_run


def check_writable(out_root: pathlib.Path, report_path: pathlib.Path) -> None:
    """:class:`Refused` naming ``--out`` or ``--report`` unless files can be created there."""
    for flag, directory in (("--out", out_root), ("--report", report_path.parent)):
        try:
            directory.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=directory, prefix=".reproduce_write_check"):
                pass
        except OSError as err:
            raise Refused(
                f"{flag} {shown(directory if flag == '--out' else report_path)}: cannot write there "
                f"({err.strerror or err}); choose a writable path"
            ) from None
    if report_path.is_dir() or (report_path.exists() and not os.access(report_path, os.W_OK)):
        raise Refused(f"--report {shown(report_path)}: is a directory or not writable; choose a file path")


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line naming the problem, exit status 2 (argparse prints the usage too)
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def parse(argv, description: str):
    """``(args, experiment names)`` of ``python -m experiments.reproduce``; a bad argument exits with status 2 and
    one line naming it."""
    parser = _Parser(prog="python -m experiments.reproduce", description=description)
    parser.add_argument(
        "--out",
        default=None,
        help="output directory (default: results for the full default run, "
        "runs/<variant> for any other, dry_run/<variant> with --dry-run)",
    )
    parser.add_argument("--only", default=None, help=f"comma-separated subset of {suite.NAMES}")
    parser.add_argument(
        "--variant",
        default=DEFAULT_VARIANT,
        type=suite.parse_variant,
        help="tiny, smoke, paper (with its sibling paper_* variants) or one sibling alone (paper_widths)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="rerun every experiment, even when resuming; with --out results, let a partial run write results/",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="reuse stored results with the same config even if no interrupted run is marked",
    )
    parser.add_argument("--seed", type=int, default=None, help="override every experiment's seed")
    parser.add_argument(
        "--data-dir",
        default=None,
        help="tfds data directory, set as data.data_dir in every config "
        "that has the field (the paper variants read CIFAR from it)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="run each experiment end to end with config.dry_run = True (the paper's models, mock "
        "or generated data, reduced batches, a few steps per training phase) and project the "
        "full variant's training and analysis apart, each from units timed at two reduced sizes",
    )
    parser.add_argument(
        "--stale",
        action="store_true",
        help="rerun exactly the experiments whose stored results under --out are stale (code or rule "
        "digest differs from the current one, or no results), each at its stored variant and "
        "seed, then rewrite the report",
    )
    parser.add_argument(
        "--report",
        default=None,
        help="where to write the report (default: REPORT.md for the full "
        "default run, DIR/REPORT.md otherwise, DIR/DRY_RUN.md with --dry-run)",
    )
    args = parser.parse_args(argv)
    if args.seed is not None and args.seed < 0:
        parser.error(f"--seed: expected an integer >= 0, got {args.seed}")
    if args.data_dir is not None and not (args.data_dir and pathlib.Path(args.data_dir).is_dir()):
        parser.error(
            f"--data-dir {args.data_dir!r}: not an existing directory; expected the tfds data directory "
            "(the one holding the prepared data sets)"
        )
    if args.stale:
        clash = [
            flag
            for flag, on in (
                ("--dry-run", args.dry_run),
                ("--seed", args.seed is not None),
                ("--force", args.force),
                ("--resume", args.resume),
            )
            if on
        ]
        if clash:
            parser.error(
                f"--stale cannot be combined with {', '.join(clash)}: it reruns each stale experiment afresh "
                "at its stored variant and seed"
            )
    if args.only is None:
        return args, list(suite.NAMES)
    names = list(dict.fromkeys(n.strip() for n in args.only.split(",") if n.strip()))  # each once, in order
    if not names:
        parser.error(f"--only: no experiment named; expected comma-separated names from {suite.NAMES}")
    for n in names:
        if n not in suite.NAMES:
            parser.error(f"--only: unknown experiment {n!r}; expected names from {suite.NAMES}")
    return args, names
