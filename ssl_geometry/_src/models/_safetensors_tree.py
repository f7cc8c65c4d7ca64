"""Variables pytrees as flat ``/``-keyed tensor dicts, and reading them back from ``.safetensors`` files.

Part of :mod:`ssl_geometry.pretrained` (the file format of ``save_converted`` / ``load_converted``).
"""

from __future__ import annotations

import json
import pathlib
import re

import numpy as np

from ssl_geometry._src.checks import optional_import
from ssl_geometry._src.models._checkpoint_io import CorruptCheckpointError

__all__ = ["flatten", "read_safetensors", "unflatten"]

_INDEX = re.compile(r"^\[(\d+)\]$")


def flatten(tree, prefix=""):
    """Yield ``(key, array)`` for each leaf of nested dicts/lists: ``key`` joins the path with ``/``, list items as
    ``[i]``; a dict key holding ``/`` or shaped like ``[i]`` is a ``ValueError`` (it could not be read back)."""
    if isinstance(tree, dict):
        for k, v in tree.items():
            if "/" in str(k) or _INDEX.match(str(k)):
                raise ValueError(f"variable name {k!r} cannot be saved (contains '/' or looks like a list index).")
            yield from flatten(v, f"{prefix}{k}/")
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            yield from flatten(v, f"{prefix}[{i}]/")
    else:
        yield prefix[:-1], np.asarray(tree)


def unflatten(flat: dict):
    """Inverse of :func:`flatten`: the nested tree of a ``{key: array}`` dict (a dict whose keys are all ``[i]``
    becomes a list)."""
    root: dict = {}
    for key, arr in flat.items():
        node = root
        parts = key.split("/")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = arr

    def fix(node):
        if not isinstance(node, dict):
            return node
        node = {k: fix(v) for k, v in node.items()}
        if node and all(_INDEX.match(k) for k in node):
            return [node[f"[{i}]"] for i in range(len(node))]
        return node

    return fix(root)


def read_safetensors(path: pathlib.Path) -> tuple[dict, dict]:
    """``(flat tensors, config)`` of a :func:`~ssl_geometry.pretrained.save_converted` file; any read error is a
    :class:`CorruptCheckpointError` naming the file."""
    st = optional_import("safetensors")
    SafetensorError, safe_open = st.SafetensorError, st.safe_open

    where = repr(str(path))
    try:
        with safe_open(str(path), framework="numpy") as f:
            meta = f.metadata() or {}
            flat = {k: f.get_tensor(k) for k in f.keys()}
    except PermissionError:
        raise
    except (SafetensorError, OSError, ValueError, TypeError, KeyError) as err:  # the file's content is at fault
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise CorruptCheckpointError(
            f"{where} is not a readable safetensors file ({type(err).__name__}: "
            f"{first[:200]}): it is truncated, corrupted or not written by "
            "save_converted. Write it again."
        ) from None
    try:
        config = json.loads(meta.get("config", "{}"))
    except json.JSONDecodeError as err:
        raise CorruptCheckpointError(
            f"{where}: its metadata 'config' is not valid JSON ({err}); the file is "
            "corrupted. Write it again with save_converted."
        ) from None
    if not isinstance(config, dict):
        raise CorruptCheckpointError(
            f"{where}: its metadata 'config' must be a JSON object; got {type(config).__name__}."
        )
    return flat, config
