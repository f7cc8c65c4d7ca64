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
run (a diverged loss, unreadable checkpoints, a full disk, a peer that never connected); 128 + the
signal's number (143 for SIGTERM, 130 for SIGINT) when a signal stopped the run at the next step
boundary, after writing a checkpoint there and releasing the lock (run again to continue; a second
signal interrupts at once). Every failure is one line on stderr, ``error: ...`` naming the problem
and what to do, without a traceback; a warning is one line ``warning: ...``.
"""

from __future__ import annotations

import importlib.util
import inspect
import logging
import pathlib
import signal
import sys
import warnings

import jax

from ssl_geometry._src.checks import optional_import
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
    from absl import flags

    config_flags = optional_import("ml_collections.config_flags")

    _check_config_file(_flag_value(argv, "--config"))
    fv = flags.FlagValues()
    config_flags.DEFINE_config_file(
        "config", None, "Training config file (get_config()).", flag_values=fv, lock_config=True, sys_argv=list(argv)
    )
    flags.DEFINE_string("workdir", None, "Directory for metrics.jsonl and checkpoints.", flag_values=fv)
    try:
        rest = fv(list(argv))[1:]  # absl returns the program name and the arguments it did not parse
    except (flags.Error, AttributeError, KeyError) as err:  # an unknown field: AttributeError(KeyError)
        found = _unknown_override(argv, err)
        if found is None:
            raise
        field, suggestion = found
        hint = f" (did you mean --{suggestion}?)" if suggestion else ""
        raise ValueError(
            f"unknown config field {field!r} (in --{field}=...): the config file defines no such "
            f"field{hint}; see --help for the fields."
        ) from None
    if rest:
        raise flags.IllegalFlagValueError(
            f"unexpected argument(s) {rest}: every setting is a flag (--config, --workdir, --config.a.b=value)."
        )
    if fv["config"].value is None:
        raise flags.IllegalFlagValueError("--config is required (a path to a config file with get_config()).")
    if not fv["workdir"].value:
        raise flags.IllegalFlagValueError("--workdir is required (where metrics and checkpoints go).")
    return fv["config"].value, fv["workdir"].value


def _flag_value(argv, name: str) -> str | None:
    """The value of ``name`` in ``argv`` (``--name=v`` or ``--name v``), or ``None``."""
    for i, a in enumerate(argv[1:], 1):
        if a.startswith(name + "="):
            return a[len(name) + 1 :]
        if a == name and i + 1 < len(argv):
            return argv[i + 1]
    return None


def _check_config_file(spec: str | None) -> None:
    """Refuse a ``--config`` file that does not exist, and a variant (after ``:``) that the file's
    ``VARIANTS`` (the ``get_config`` arguments it defines; ``()``: none) does not list."""
    if spec is None:
        return
    path, _, variant = spec.partition(":")
    if pathlib.Path(path).is_dir():
        raise ValueError(f"--config {path!r} is a directory; give a Python file with get_config() in it.")
    if not pathlib.Path(path).is_file():
        raise ValueError(f"--config {path!r}: no such file (a Python file with get_config()).")
    mod_spec = importlib.util.spec_from_file_location("_ssl_geometry_config_check", path)
    if mod_spec is None or mod_spec.loader is None or not path.endswith(".py"):
        raise ValueError(f"--config {path!r} is not a Python file (.py): give a file with get_config().")
    module = importlib.util.module_from_spec(mod_spec)
    try:
        mod_spec.loader.exec_module(module)
    except Exception as err:  # noqa: BLE001 - a syntax error, a failed import: the file is not a config
        raise ValueError(f"--config {path!r}: running the file raised {_named(err)}.") from None
    known = getattr(module, "VARIANTS", None)
    if variant and known is not None and variant not in known:
        listed = ", ".join(repr(v) for v in known) if known else "none (drop the ':...')"
        raise ValueError(f"--config {spec!r}: unknown variant {variant!r}; {path} defines {listed}.")
    get_config = getattr(module, "get_config", None)
    if not callable(get_config):
        raise ValueError(f"--config {path!r}: the file defines no get_config() function.")
    try:
        config = get_config(variant) if variant else get_config()
    except Exception as err:  # noqa: BLE001 - whatever the user's get_config raises, named in one line
        call = f"get_config({variant!r})" if variant else "get_config()"
        raise ValueError(f"--config {spec!r}: {call} raised {_named(err)}.") from None
    if not hasattr(config, "items"):
        raise ValueError(
            f"--config {spec!r}: get_config returned {type(config).__name__} {config!r:.60}, "
            "not an ml_collections.ConfigDict."
        )


def _named(err: BaseException) -> str:
    """``"KeyError: 'missing'"``: an exception's type and its message on one line."""
    return f"{type(err).__name__}: {' '.join(str(err).split())}" if str(err) else type(err).__name__


def _unknown_override(argv, err) -> tuple[str, str | None] | None:
    """``(field, suggestion)``: the dotted field (``config.a.b``) of the first ``--config.*`` override that
    ``err`` (absl's error for a missing key ``'k'``) is about, and the same field with ml_collections'
    "Did you mean" key in place of ``k`` (``None`` without one); ``None`` when ``err`` is another error."""
    found = _missing_key(err)
    if found is None:
        return None
    key, suggestion = found
    for a in argv[1:]:
        if a.startswith("--config."):
            field = a[2:].split("=", 1)[0]
            parts = field.split(".")
            if key in parts[1:]:
                if suggestion is None:
                    return field, None
                parts[parts.index(key, 1)] = suggestion
                return field, ".".join(parts)
    return None


def _missing_key(err) -> tuple[str, str | None] | None:
    """``(key, suggestion or None)`` of absl/ml_collections' error for a missing config key: a ``KeyError``
    (possibly wrapped in an ``AttributeError`` or a flags error) whose message is ``'key'`` optionally
    followed by ``Did you mean "other" instead of "key"?``; ``None`` for any other error."""
    import re

    seen = 0
    while err is not None and seen < 5:
        if isinstance(err, KeyError) and err.args and isinstance(err.args[0], str):
            text = err.args[0]
            m = re.match(r"'([^']+)'", text)
            if m is None:
                return None
            hint = re.search(r'Did you mean "([^"]+)" instead of', text)
            return m.group(1), hint.group(1) if hint else None
        nxt = err.args[0] if err.args and isinstance(err.args[0], BaseException) else None
        err = nxt or err.__cause__ or err.__context__
        seen += 1
    return None


def _usage() -> str:
    """The ``--help`` text: this module's usage, then :func:`ssl_geometry.trainer.train`'s documentation
    (what a run does, the workdir's rules and every config field)."""
    return f"{__doc__.rstrip()}\n\nssl_geometry.trainer.train\n--------------------------\n\n{inspect.getdoc(train)}"


def _print_summary(summary) -> None:
    if summary["status"] == "interrupted":
        print(
            f"stopped at step {summary['step']} by {summary['signal']} (checkpointed, lock released); run again "
            "to continue.",
            flush=True,
        )
        return
    if summary["status"] == "stopped":
        print(f"stopped at step {summary['step']} (train.stop_after); run again to continue.")
        return
    if summary["status"] == "finished" and summary["last"]:
        print(
            f"final step {summary['step']}: loss {summary['last']['loss']:.4f}, "
            f"throughput {summary['images_per_s']:.1f} images/s"
        )
    elif summary["status"] == "finished":
        print(f"final step {summary['step']} (restored; no training step in this invocation)")
    for k, v in sorted(summary["final"].items()):
        print(f"  {k}: {v:.4f}" if isinstance(v, float) else f"  {k}: {v}")


#: Errors of bad input or a refused run (exit status 2: a bad config, missing data, an unusable, locked or
#: mismatched workdir); any other exception (a diverged loss, unreadable checkpoints, a full disk, peers
#: that never connected) is a failure during the run (1).
_REFUSED = (
    ValueError,
    FileNotFoundError,
    NotADirectoryError,
    IsADirectoryError,
    PermissionError,
    _wd.WorkdirLockedError,
)


def _one_line(err: BaseException) -> str:
    """``err``'s message on one line (its type named when the message alone does not say what failed)."""
    msg = " ".join(str(err).split())
    if not msg:
        msg = type(err).__name__
    elif isinstance(err, (FloatingPointError, RuntimeError, OSError)) and not isinstance(err, _wd.WorkdirLockedError):
        msg = f"{type(err).__name__}: {msg}"
    return msg


def _format_warning(message, category, filename, lineno, line=None) -> str:
    """A warning during a CLI run as one line ``warning: ...`` (no source location; recording is unaffected)."""
    del category, filename, lineno, line
    return f"warning: {' '.join(str(message).split())}\n"


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
    except Exception as err:  # noqa: BLE001 - absl flag errors, a missing config file, an unknown field: one line, no traceback
        return _fail(err, 2)
    # The trainer turns a failed in-jit check into one FloatingPointError; jax's log of the callback's
    # traceback would only repeat it.
    logging.getLogger("jax._src.callback").setLevel(logging.CRITICAL)
    formatwarning, warnings.formatwarning = warnings.formatwarning, _format_warning
    try:
        summary = train(config, workdir)
    except _REFUSED as err:
        return _fail(err, 2)
    except Exception as err:  # noqa: BLE001 - a failure during the run: one line, exit 1
        return _fail(err, 1)
    finally:
        warnings.formatwarning = formatwarning
    if jax.process_index() == 0:
        _print_summary(summary)
    if summary["status"] == "interrupted":
        return 128 + int(signal.Signals[summary["signal"]])
    return 0


if __name__ == "__main__":
    sys.exit(main())
