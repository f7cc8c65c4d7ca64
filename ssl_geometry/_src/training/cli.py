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
complete; 2 for bad input or a refused run (bad arguments, a missing or bad config file, a bad
config field, missing data, an unusable, locked or mismatched workdir); 1 for a failure during the
run (a diverged loss, unreadable checkpoints, a full disk). Every failure is one line on stderr,
``error: ...`` naming the problem and what to do, without a traceback.
"""
from __future__ import annotations

import importlib.util
import inspect
import logging
import pathlib
import sys

import jax

from ssl_geometry._src.training import workdir as _wd
from ssl_geometry._src.training.run import train

__all__ = ["parse_args", "main"]

_HELP_FLAGS = ("-h", "--help", "-help", "--helpfull")


def parse_args(argv):
    """``(config, workdir)`` from ``argv`` (``argv[0]`` is the program name).

    Uses a private ``absl.flags.FlagValues`` with ``ml_collections.config_flags``,
    so it can be called repeatedly (tests) without touching global flags. Raises ``ValueError``
    naming the problem for a missing config file, a variant (``path.py:variant``) that the file's
    ``VARIANTS`` does not list, or an override ``--config.a.b=...`` of a field the config lacks.
    """
    from absl import flags  # noqa: PLC0415
    from ml_collections import config_flags  # noqa: PLC0415

    _check_config_file(_flag_value(argv, "--config"))
    fv = flags.FlagValues()
    config_flags.DEFINE_config_file("config", None, "Training config file (get_config()).", flag_values=fv,
                                    lock_config=True, sys_argv=list(argv))
    flags.DEFINE_string("workdir", None, "Directory for metrics.jsonl and checkpoints.", flag_values=fv)
    try:
        rest = fv(list(argv))[1:]  # absl returns the program name and the arguments it did not parse
    except (flags.Error, AttributeError, KeyError) as err:  # an unknown field: AttributeError(KeyError)
        field = _unknown_override(argv, err)
        if field is None:
            raise
        raise ValueError(f"unknown config field {field!r} (in --{field}=...): the config file defines no such "
                         "field; see --help for the fields.") from None
    if rest:
        raise flags.IllegalFlagValueError(f"unexpected argument(s) {rest}: every setting is a flag "
                                          "(--config, --workdir, --config.a.b=value).")
    if fv["config"].value is None:
        raise flags.IllegalFlagValueError("--config is required (a path to a config file with get_config()).")
    if not fv["workdir"].value:
        raise flags.IllegalFlagValueError("--workdir is required (where metrics and checkpoints go).")
    return fv["config"].value, fv["workdir"].value


def _flag_value(argv, name: str) -> str | None:
    """The value of ``name`` in ``argv`` (``--name=v`` or ``--name v``), or ``None``."""
    for i, a in enumerate(argv[1:], 1):
        if a.startswith(name + "="):
            return a[len(name) + 1:]
        if a == name and i + 1 < len(argv):
            return argv[i + 1]
    return None


def _check_config_file(spec: str | None) -> None:
    """Refuse a ``--config`` file that does not exist, and a variant (after ``:``) that the file's
    ``VARIANTS`` (the ``get_config`` arguments it defines; ``()``: none) does not list."""
    if spec is None:
        return
    path, _, variant = spec.partition(":")
    if not pathlib.Path(path).is_file():
        raise ValueError(f"--config {path!r}: no such file (a Python file with get_config()).")
    mod_spec = importlib.util.spec_from_file_location("_ssl_geometry_config_check", path)
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    known = getattr(module, "VARIANTS", None)
    if variant and known is not None and variant not in known:
        listed = ", ".join(repr(v) for v in known) if known else "none (drop the ':...')"
        raise ValueError(f"--config {spec!r}: unknown variant {variant!r}; {path} defines {listed}.")


def _unknown_override(argv, err) -> str | None:
    """The dotted field (``config.a.b``) of the first ``--config.*`` override that ``err`` (absl's
    error for a missing key ``'k'``) is about, or ``None`` when ``err`` is another error."""
    text = str(err)
    for a in argv[1:]:
        if a.startswith("--config."):
            field = a[2:].split("=", 1)[0]
            if any(f"'{part}'" in text for part in field.split(".")[1:]):
                return field
    return None


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


#: Errors of bad input or a refused run (exit status 2: a bad config, missing data, an unusable, locked or
#: mismatched workdir); any other exception (a diverged loss, unreadable checkpoints, a full disk, peers
#: that never connected) is a failure during the run (1).
_REFUSED = (ValueError, FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError,
            _wd.WorkdirLockedError)


def _one_line(err: BaseException) -> str:
    """``err``'s message on one line (its type named when the message alone does not say what failed)."""
    msg = " ".join(str(err).split())
    if not msg:
        msg = type(err).__name__
    elif isinstance(err, (FloatingPointError, RuntimeError, OSError)) and not isinstance(err, _wd.WorkdirLockedError):
        msg = f"{type(err).__name__}: {msg}"
    return msg


def _fail(err: BaseException, status: int) -> int:
    print(f"error: {_one_line(err)}", file=sys.stderr, flush=True)
    return status


def main(argv=None) -> int:
    """Run the CLI on ``argv`` (default ``sys.argv``) and return the exit status (``--help``: usage, 0)."""
    argv = sys.argv if argv is None else argv
    if any(a in _HELP_FLAGS for a in argv[1:]):
        print(_usage())
        return 0
    try:
        config, workdir = parse_args(argv)
    except Exception as err:  # absl flag errors, a missing config file, an unknown field: one line, no traceback
        return _fail(err, 2)
    # The trainer turns a failed in-jit check into one FloatingPointError; jax's log of the callback's
    # traceback would only repeat it.
    logging.getLogger("jax._src.callback").setLevel(logging.CRITICAL)
    try:
        summary = train(config, workdir)
    except _REFUSED as err:
        return _fail(err, 2)
    except Exception as err:  # a failure during the run
        return _fail(err, 1)
    if jax.process_index() == 0:
        _print_summary(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
