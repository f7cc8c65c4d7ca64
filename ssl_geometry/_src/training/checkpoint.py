"""Orbax checkpointing of training state, with verified restore and fallback.

Implementation of :mod:`ssl_geometry.checkpoint`; the conventions and formulas are in its docstring.
"""

from __future__ import annotations

import hashlib
import pathlib
import shutil
import warnings
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import numpy as np

from ssl_geometry._src.checks import optional_import

if TYPE_CHECKING:
    import orbax.checkpoint as ocp
else:  # the `data` extra; imported at the first checkpoint call, so the core imports without it
    ocp = optional_import("orbax.checkpoint", on_use=True)


__all__ = [
    "CheckpointWarning",
    "CheckpointMismatchError",
    "Restored",
    "tree_signature",
    "manager",
    "fingerprint",
    "save",
    "restore",
    "restore_latest",
    "latest_meta",
    "quarantine",
]


class CheckpointWarning(UserWarning):
    """A saved step could not be restored; an older step was used instead."""


class CheckpointMismatchError(ValueError):
    """A saved step holds another tree (structure, dtypes or shapes) than the restore target: not damage, so no
    older step is tried and nothing is moved aside."""


class Restored(NamedTuple):
    """Result of :func:`restore_latest`."""

    step: int
    state: Any
    meta: dict


def manager(directory, *, max_to_keep: int = 3, async_save: bool = False) -> ocp.CheckpointManager:
    """An orbax ``CheckpointManager`` for ``directory`` keeping the last ``max_to_keep`` steps.

    Args:
      directory: where the step directories live (created if missing; made absolute).
      max_to_keep: keep-last-N retention (older steps are deleted after a save).
      async_save: write in a background thread (call ``mngr.wait_until_finished()``
        before reading the files); the default writes synchronously.
    """
    if not isinstance(max_to_keep, int) or max_to_keep < 1:
        raise ValueError(f"`max_to_keep` must be a positive int; got {max_to_keep!r}.")
    path = pathlib.Path(directory).absolute()
    for entry in (path, *path.parents):
        if entry.exists():
            if not entry.is_dir():
                raise NotADirectoryError(
                    f"`directory` {str(path)!r}: {str(entry)!r} exists and is not a directory; "
                    "checkpoints need a directory."
                )
            break
    path.mkdir(parents=True, exist_ok=True)
    options = ocp.CheckpointManagerOptions(
        max_to_keep=max_to_keep,
        create=True,
        enable_async_checkpointing=async_save,
    )
    return ocp.CheckpointManager(path, options=options)


def fingerprint(state) -> str | None:
    """SHA-256 over the bytes, dtypes and shapes of every leaf of ``state`` (tree order).

    Returns ``None`` when some leaf is not fully addressable from this process
    (multi-host sharded arrays), where a host-local digest is not defined.
    """
    h = hashlib.sha256()
    for leaf in jax.tree_util.tree_leaves(state):
        if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
            return None
        if isinstance(leaf, jax.Array) and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        arr = np.ascontiguousarray(np.asarray(leaf))
        h.update(str((arr.dtype.str, arr.shape)).encode())
        h.update(arr.tobytes())
    return h.hexdigest()


def tree_signature(tree) -> dict:
    """``{leaf path: "dtype[shape]"}`` of a pytree of arrays or ``jax.ShapeDtypeStruct`` (what :func:`save` stores
    as ``meta["signature"]`` and :func:`restore` compares with its target)."""
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    out = {}
    for path, x in flat:
        dtype = getattr(x, "dtype", None)
        dtype = np.asarray(x).dtype if dtype is None else dtype
        out[jax.tree_util.keystr(path)] = f"{dtype}{list(np.shape(x))}"
    return out


def _check_signature(saved: dict, target, step, directory) -> None:
    """Raise :class:`CheckpointMismatchError` naming the leaves where ``target`` differs from the ``saved``
    signature (only in one of them, or another dtype / shape)."""
    now = tree_signature(target)
    only_saved = sorted(set(saved) - set(now))
    only_target = sorted(set(now) - set(saved))
    differ = [f"{k}: saved {saved[k]}, target {now[k]}" for k in sorted(set(saved) & set(now)) if saved[k] != now[k]]
    if not (only_saved or only_target or differ):
        return
    parts = []
    if only_saved:
        parts.append(f"leaves only in the checkpoint ({len(only_saved)}): {', '.join(only_saved[:8])}")
    if only_target:
        parts.append(f"leaves only in the target ({len(only_target)}): {', '.join(only_target[:8])}")
    if differ:
        parts.append(f"dtype or shape mismatch ({len(differ)}): {', '.join(differ[:8])}")
    raise CheckpointMismatchError(
        f"checkpoint step {step} in {directory} holds another tree than the restore target: {'; '.join(parts)}. "
        "Restore into a target of the saved structure, dtypes and shapes (the files are intact)."
    )


def save(mngr: ocp.CheckpointManager, step: int, state, meta: dict | None = None, *, force: bool = True) -> bool:
    """Save ``state`` and ``meta`` (JSON-serialisable dict) as step ``step``.

    Returns whether orbax wrote the step (``force=True`` always writes). The saved
    ``meta`` gains ``"step"``, ``"fingerprint"`` (see :func:`fingerprint`) and ``"signature"``
    (:func:`tree_signature`).
    """
    step = int(step)
    if step < 0:
        raise ValueError(f"`step` must be >= 0; got {step}.")
    meta = dict(meta or {})
    meta["step"] = step
    meta["fingerprint"] = fingerprint(state)
    meta["signature"] = tree_signature(state)
    return bool(
        mngr.save(
            step,
            args=ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)),
            force=force,
        )
    )


def _abstract(target):
    def leaf(x):
        if isinstance(x, jax.ShapeDtypeStruct):
            return x
        if isinstance(x, jax.Array):
            return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
        x = np.asarray(x)
        return jax.ShapeDtypeStruct(x.shape, x.dtype)

    return jax.tree_util.tree_map(leaf, target)


def restore(mngr: ocp.CheckpointManager, step: int, target) -> Restored:
    """Restore step ``step`` into the structure, dtypes and shardings of ``target``.

    ``target`` is a pytree of arrays or ``jax.ShapeDtypeStruct`` (with ``sharding``
    to place the leaves on a mesh). Raises :class:`CheckpointMismatchError` naming the leaves when the step's
    saved ``signature`` (steps saved by :func:`save`) differs from ``target``'s (another structure, dtype or
    shape), the orbax error when the step cannot be read and :class:`ValueError` when its bytes do not match
    the saved fingerprint.
    """
    saved = dict(mngr.restore(int(step), args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"] or {})
    if isinstance(saved.get("signature"), dict):
        _check_signature(saved["signature"], target, step, mngr.directory)
    out = mngr.restore(
        int(step),
        args=ocp.args.Composite(state=ocp.args.StandardRestore(_abstract(target)), meta=ocp.args.JsonRestore()),
    )
    state, meta = out["state"], dict(out["meta"] or {})
    want = meta.get("fingerprint")
    if want is not None:
        got = fingerprint(state)
        if got is not None and got != want:
            raise ValueError(f"restored bytes of step {step} do not match the saved fingerprint.")
    return Restored(int(step), state, meta)


def latest_meta(mngr: ocp.CheckpointManager) -> dict | None:
    """The ``meta`` JSON of the newest step whose meta is readable (``None``: none is), read
    without touching the state arrays -- to check a resume's config before restoring."""
    mngr.reload()
    for step in sorted(mngr.all_steps(), reverse=True):
        try:
            return dict(mngr.restore(int(step), args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"] or {})
        except Exception:  # noqa: BLE001 - damaged step: restore_latest reports it
            continue
    return None


def restore_latest(mngr: ocp.CheckpointManager, target, *, move_aside: bool = True) -> Restored | None:
    """Restore the newest readable step, or return ``None`` when there is no step.

    A step saved with another tree than ``target`` (:class:`CheckpointMismatchError`) is raised at once:
    the target is wrong, not the files.

    Steps that fail to restore (truncated / half-written files, fingerprint
    mismatch) are skipped with a :class:`CheckpointWarning` and, with
    ``move_aside`` (default), once an older step restores, moved out of the way by
    :func:`quarantine` so the resumed run can write those steps again; if every step fails
    (nothing is moved),
    :class:`RuntimeError` is raised listing the errors (never a silent fresh start
    over a directory that holds checkpoints).
    """
    mngr.reload()
    steps = sorted(mngr.all_steps(), reverse=True)
    if not steps:
        return None
    errors, bad = [], []
    for step in steps:
        try:
            out = restore(mngr, step, target)
        except CheckpointMismatchError:
            raise  # the caller's target is wrong, not the files: no fallback, nothing moved
        except Exception as err:  # noqa: BLE001 - orbax/tensorstore raise many types for damaged files
            msg = f"{type(err).__name__}: {' '.join(str(err).split())[:1000]}"
            errors.append(f"step {step}: {msg}")
            bad.append(step)
            warnings.warn(
                f"checkpoint step {step} in {mngr.directory} could not be restored ({msg}); "
                "falling back to the previous step.",
                CheckpointWarning,
                stacklevel=2,
            )
            continue
        for b in bad if move_aside else ():  # only once a good step is found: never leave a run with nothing
            moved = quarantine(mngr, b)
            warnings.warn(f"moved the unreadable checkpoint step {b} to {moved}.", CheckpointWarning, stacklevel=2)
        return out
    raise RuntimeError(f"no checkpoint in {mngr.directory} could be restored: " + "; ".join(errors))


def quarantine(mngr: ocp.CheckpointManager, step: int) -> pathlib.Path:
    """Move the unreadable step directory ``<dir>/<step>`` to ``<dir>.damaged/<step>.<n>``
    (kept for inspection, out of orbax's sight) so the run can save that step again.

    Multi-process: process 0 moves it, the others wait at a barrier; returns the new path.
    """
    src = pathlib.Path(str(mngr.directory)) / str(int(step))
    root = src.parent.with_name(src.parent.name + ".damaged")
    n = 0
    while (root / f"{step}.{n}").exists():
        n += 1
    dst = root / f"{step}.{n}"
    if jax.process_index() == 0 and src.exists():
        root.mkdir(parents=True, exist_ok=True)
        shutil.move(str(src), str(dst))
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(f"ssl_geometry.checkpoint.quarantine.{step}")
    mngr.reload()
    return dst
