"""Train an SSL model from a config file; resume from ``--workdir`` when run again.

Usage::

    python -m ssl_geometry.train --config experiments/configs/tiny.py --workdir /tmp/tiny \\
        [--config.train.steps=200] [--config.objective.name=byol] ...

``--config`` is a Python file with ``get_config()`` returning an
``ml_collections.ConfigDict`` (``path.py:arg`` passes ``arg`` to ``get_config``);
``--config.a.b=value`` overrides a field (``ml_collections.config_flags``: the
value is parsed to the field's type; unknown fields are an error). The run is
``ssl_geometry.trainer.train`` (below): it writes ``<workdir>/metrics.jsonl`` and
orbax checkpoints under ``<workdir>/checkpoints/``, and a second run on the same
workdir continues from the newest checkpoint.

Exit status: 0 when the run finished, stopped at ``train.stop_after`` or was already
complete; 2 for bad arguments, a bad config or a refused run (locked or mismatched
workdir); any other error during the run propagates (the process exits 1 with its traceback).
"""
from __future__ import annotations

import inspect
import sys

import jax

from ssl_geometry._src.training import workdir as _wd
from ssl_geometry._src.training.run import train

__all__ = ["parse_args", "main"]

_HELP_FLAGS = ("-h", "--help", "-help", "--helpfull")


def parse_args(argv):
    """``(config, workdir)`` from ``argv`` (``argv[0]`` is the program name).

    Uses a private ``absl.flags.FlagValues`` with ``ml_collections.config_flags``,
    so it can be called repeatedly (tests) without touching global flags.
    """
    from absl import flags  # noqa: PLC0415
    from ml_collections import config_flags  # noqa: PLC0415

    fv = flags.FlagValues()
    config_flags.DEFINE_config_file("config", None, "Training config file (get_config()).", flag_values=fv,
                                    lock_config=True, sys_argv=list(argv))
    flags.DEFINE_string("workdir", None, "Directory for metrics.jsonl and checkpoints.", flag_values=fv)
    fv(list(argv))
    if fv["config"].value is None:
        raise flags.IllegalFlagValueError("--config is required (a path to a config file with get_config()).")
    if not fv["workdir"].value:
        raise flags.IllegalFlagValueError("--workdir is required (where metrics and checkpoints go).")
    return fv["config"].value, fv["workdir"].value


def _usage() -> str:
    """The ``--help`` text: this module's usage, then :func:`ssl_geometry.trainer.train`'s documentation
    (what a run does, the workdir's rules and every config field)."""
    return f"{__doc__.rstrip()}\n\nssl_geometry.trainer.train\n--------------------------\n\n{inspect.getdoc(train)}"


def _print_summary(summary) -> None:
    if summary["status"] == "stopped":
        print(f"stopped at step {summary['step']} (train.stop_after); run again to continue.")
        return
    if summary["status"] == "finished" and summary["last"]:
        print(f"final step {summary['step']}: loss {summary['last']['loss']:.4f}, "
              f"throughput {summary['images_per_s']:.1f} images/s")
    elif summary["status"] == "finished":
        print(f"final step {summary['step']} (restored; no training step in this invocation)")
    for k, v in sorted(summary["final"].items()):
        print(f"  {k}: {v:.4f}" if isinstance(v, float) else f"  {k}: {v}")


def main(argv=None) -> int:
    """Run the CLI on ``argv`` (default ``sys.argv``) and return the exit status (``--help``: usage, 0)."""
    argv = sys.argv if argv is None else argv
    if any(a in _HELP_FLAGS for a in argv[1:]):
        print(_usage())
        return 0
    try:
        config, workdir = parse_args(argv)
    except Exception as err:  # absl flag errors: print a clear message, not a traceback
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        summary = train(config, workdir)
    except (_wd.WorkdirLockedError, ValueError, NotADirectoryError, PermissionError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if jax.process_index() == 0:
        _print_summary(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
