"""A training workdir that two runs, a damaged file or a changed config cannot corrupt.

* :func:`prepare` checks up front that ``workdir`` is (or can be created as) a
  writable directory, with an error naming the path and the problem.
* :class:`Lock`: ``<workdir>/.lock`` holds ``{"pid", "host", "since"}`` of the run
  that owns the workdir. A second run refuses to start; a lock whose process is gone
  (same host, ``os.kill(pid, 0)`` fails) is stale and taken over with a warning, and so is an
  empty lock file older than :data:`EMPTY_LOCK_GRACE_S` (a run killed between creating and writing it).
* :func:`config_record` / :func:`state_signature`: what each checkpoint stores so a
  resume can tell whether it continues *the same* run. :func:`check_resume` compares
  them and refuses a mismatch, naming the differing fields (``RUNTIME_FIELDS`` never
  count; other trajectory fields may differ with ``train.allow_config_change=True``
  when the state shapes still match; state shapes must always match).
* :func:`truncate_metrics` drops the ``metrics.jsonl`` records written after the
  restored step (a run killed between a log record and the next checkpoint would
  otherwise leave duplicate steps).
* :func:`set_aside`: a ``metrics.jsonl`` with records but no checkpoint to continue (another run's
  log, or a run killed before its first checkpoint) is never deleted: a fresh start renames it to
  ``metrics.orphaned-<n>.jsonl`` (byte for byte) and says so.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import socket
import time
import warnings

import jax
import numpy as np

__all__ = [
    "RUNTIME_FIELDS",
    "WorkdirLockedError",
    "ConfigMismatchError",
    "prepare",
    "Lock",
    "flatten_config",
    "config_record",
    "state_signature",
    "digest",
    "check_resume",
    "truncate_metrics",
    "set_aside",
]

#: Config fields (dotted prefixes) that do not change the trained state: how often to
#: log / evaluate / checkpoint, the probes run at the end, process set-up, where data
#: lives, and the resume controls. A resume never compares them.
RUNTIME_FIELDS = (
    "train.progress",
    "train.tensorboard",
    "train.log_every",
    "train.metrics_every",
    "train.checkpoint_every",
    "train.keep_checkpoints",
    "train.stop_after",
    "train.allow_config_change",
    "eval.",
    "distributed.",
    "data.data_dir",
)


#: Seconds after which an empty ``.lock`` (its writer killed between create and write) counts as stale.
EMPTY_LOCK_GRACE_S = 10.0


#: The "saved" value :func:`check_resume` reports for every field of a checkpoint that stored no config.
NOT_SAVED = "<not saved>"


class WorkdirLockedError(RuntimeError):
    """Another live run holds the workdir's lock."""


class ConfigMismatchError(ValueError):
    """The workdir's checkpoint was written by a run with a different config or state shapes."""


def prepare(workdir) -> pathlib.Path:
    """The absolute ``workdir``, created if missing; raises ``NotADirectoryError`` /
    ``PermissionError`` naming it when it is a file or not writable, and ``NotADirectoryError``
    naming the entry when its ``metrics.jsonl`` or ``.lock`` is a directory or ``checkpoints`` a file."""
    path = pathlib.Path(workdir).expanduser().absolute()
    for parent in (path, *path.parents):
        if parent.exists():
            if not parent.is_dir():
                raise NotADirectoryError(f"--workdir {str(path)!r}: {str(parent)!r} exists and is not a directory.")
            break
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise PermissionError(f"--workdir {str(path)!r} cannot be created: {err.strerror or err}.") from err
    for name, want_dir in (("metrics.jsonl", False), ("checkpoints", True), (".lock", False)):
        entry = path / name
        if entry.exists() and entry.is_dir() != want_dir:
            kind = "a directory" if want_dir else "a file"
            raise NotADirectoryError(
                f"--workdir {str(path)!r}: {str(entry)!r} must be {kind}; move it away or use a fresh --workdir."
            )
    probe = path / f".write_test.{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise PermissionError(f"--workdir {str(path)!r} is not writable: {err.strerror or err}.") from err
    return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


class Lock:
    """Exclusive lock on a workdir (context manager): ``<workdir>/.lock`` created with
    ``O_CREAT | O_EXCL`` holding ``{"pid", "host", "since"}``; released on exit.

    ``enabled=False`` makes it a no-op (processes other than 0 of a multi-process run,
    which share process 0's lock).
    """

    def __init__(self, workdir, *, enabled: bool = True):
        self.path = pathlib.Path(workdir) / ".lock"
        self.enabled = enabled
        self._held = False

    def _read(self) -> dict:
        try:
            return json.loads(self.path.read_text() or "{}")
        except (OSError, ValueError):
            return {}

    def _empty_for(self, seconds: float) -> bool:
        """Whether the lock file is empty and was last written more than ``seconds`` ago."""
        try:
            st = self.path.stat()
        except OSError:
            return False
        return st.st_size == 0 and time.time() - st.st_mtime > seconds

    def acquire(self) -> None:
        if not self.enabled:
            return
        me = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%dT%H:%M:%S")}
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                other = self._read()
                pid, host = other.get("pid"), other.get("host")
                if isinstance(pid, int) and host == me["host"] and not _alive(pid):
                    warnings.warn(f"removing stale lock {self.path} of pid {pid} (no such process).", stacklevel=2)
                    self.path.unlink(missing_ok=True)
                    continue
                if not other and self._empty_for(EMPTY_LOCK_GRACE_S):
                    warnings.warn(
                        f"removing stale empty lock {self.path} (its run died before writing it).", stacklevel=2
                    )
                    self.path.unlink(missing_ok=True)
                    continue
                raise WorkdirLockedError(
                    f"workdir {str(self.path.parent)!r} is in use by another run (pid {pid} on {host} since "
                    f"{other.get('since')}; lock file {self.path}). Wait for it, or delete the lock file if that "
                    "run is gone."
                ) from None
            with os.fdopen(fd, "w") as f:
                json.dump(me, f)
            self._held = True
            return
        raise WorkdirLockedError(f"could not take the lock {self.path}.")

    def release(self) -> None:
        if self._held:
            self.path.unlink(missing_ok=True)
            self._held = False

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()


def flatten_config(config, prefix: str = "") -> dict:
    """``{"a.b": value}`` of a (nested) ``ConfigDict``/dict, values made JSON-able
    (tuples -> lists)."""
    out = {}
    items = config.items() if hasattr(config, "items") else dict(config).items()
    for k, v in sorted(items):
        key = f"{prefix}{k}"
        if hasattr(v, "items"):
            out.update(flatten_config(v, key + "."))
        else:
            out[key] = json.loads(json.dumps(v, default=lambda o: list(o) if isinstance(o, tuple) else str(o)))
    return out


def _runtime(field: str) -> bool:
    return any(field == f or (f.endswith(".") and field.startswith(f)) for f in RUNTIME_FIELDS)


def config_record(config) -> dict:
    """The trajectory-defining config fields (all but :data:`RUNTIME_FIELDS`), flattened."""
    return {k: v for k, v in flatten_config(config).items() if not _runtime(k)}


def state_signature(state) -> dict:
    """``{leaf path: "dtype[shape]"}`` of the training state (what a restore must match)."""
    flat, _ = jax.tree_util.tree_flatten_with_path(state)
    return {jax.tree_util.keystr(p): f"{np.dtype(x.dtype).name}{list(np.shape(x))}" for p, x in flat}


def digest(record: dict) -> str:
    """SHA-256 of the canonical JSON of ``record``."""
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()


def _diff(saved: dict, now: dict) -> dict:
    keys = sorted(set(saved) | set(now))
    return {
        k: (saved.get(k, "<absent>"), now.get(k, "<absent>"))
        for k in keys
        if saved.get(k, "<absent>") != now.get(k, "<absent>")
    }


def check_resume(meta: dict, config, state, *, allow_config_change: bool = False) -> dict:
    """Compare a checkpoint's ``meta`` with the current ``config`` and ``state``.

    Returns the changed trajectory fields ``{field: (saved, now)}`` (empty for a
    clean resume; non-empty only with ``allow_config_change``). Raises
    :class:`ConfigMismatchError` naming the fields when the state shapes differ
    (never allowed) or trajectory fields differ without ``allow_config_change``.
    A checkpoint without a stored config (an older run, or meta edited by hand) cannot be checked:
    every current field is returned as changed from ``"<not saved>"`` (whatever
    ``allow_config_change`` says), so the caller warns and records the resume as a config change.
    """
    changed_shapes = _diff(meta.get("state_signature", {}), state_signature(state)) if "state_signature" in meta else {}
    if changed_shapes:
        fields = "; ".join(f"{k}: saved {a}, now {b}" for k, (a, b) in list(changed_shapes.items())[:8])
        cfg = _diff(meta.get("config", {}), config_record(config))
        raise ConfigMismatchError(
            f"the checkpoint's state has different shapes ({len(changed_shapes)} leaves: {fields}); config fields "
            f"that differ: {sorted(cfg) or 'none'}. This cannot be resumed; use a fresh --workdir."
        )
    if "config" not in meta:
        return {k: (NOT_SAVED, v) for k, v in config_record(config).items()}
    changed = _diff(meta["config"], config_record(config))
    if changed and not allow_config_change:
        fields = "; ".join(f"{k}: saved {a!r}, now {b!r}" for k, (a, b) in changed.items())
        raise ConfigMismatchError(
            f"the workdir holds a run with a different config ({fields}). Use a fresh --workdir, the saved "
            "values, or --config.train.allow_config_change=True to continue this state under the new values "
            "(state shapes must match; the change is recorded in metrics.jsonl)."
        )
    return changed


def truncate_metrics(path, step: int) -> int:
    """Keep only the records of ``path`` (JSON lines) with ``step <= step`` (atomically);
    return the number of records dropped. A missing file is left missing."""
    path = pathlib.Path(path)
    if not path.exists():
        return 0
    keep, dropped = [], 0
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:  # a half-written last line of a killed run
            dropped += 1
            continue
        s = rec.get("step", 0) if isinstance(rec, dict) else None
        if isinstance(s, bool) or not isinstance(s, int):
            raise ValueError(
                f'{path} line {lineno}: expected a JSON object with an integer "step", got '
                f"{line[:80]!r}; this is not a metrics file this trainer wrote (move it away)."
            )
        if s <= step:
            keep.append(line)
        else:
            dropped += 1
    if dropped:
        tmp = path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(line + "\n" for line in keep))
        os.replace(tmp, path)
    return dropped


def set_aside(path) -> pathlib.Path | None:
    """Rename a ``metrics.jsonl`` at ``path`` that holds any record to ``metrics.orphaned-<n>.jsonl`` beside it
    (``n`` = 1, 2, ...: the first name not taken) and return the new path; ``None`` (nothing done) when the file is
    missing or holds only blank lines. For a fresh start over a workdir without a checkpoint: its records belong
    to no state the run could continue, and are kept, byte for byte, instead of being deleted."""
    path = pathlib.Path(path)
    if not path.is_file() or not path.read_bytes().strip():
        return None
    n = 1
    while (dst := path.with_name(f"{path.stem}.orphaned-{n}{path.suffix}")).exists():
        n += 1
    os.replace(path, dst)
    return dst
