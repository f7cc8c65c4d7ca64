"""Checkpoints of a long measurement, one file per part: a resumed run reuses the parts its own code and config
computed, never another run's.

``runner = parts(directory, name, config)`` returns ``runner(tag, fn)``, which stands for ``fn()``:

* ``directory`` empty: ``fn()`` is called and nothing is stored;
* otherwise, when ``directory/<tag>.json`` holds a part stamped with this run's stamp -- the code digest of
  experiment ``name`` (:func:`experiments.claims.code_digest`) and the config (``checkpoint_dir`` left out, so a
  moved directory still resumes) -- its stored value is returned and ``fn`` is not called; a part stamped by other
  code or another config, or a file cut short by an interrupted write, is computed again and overwritten.

Every value goes through the JSON form of the results file (:func:`experiments.common.to_jsonable`, then
:func:`experiments.common.from_jsonable`) before it is returned, whether computed now or read back, so a resumed
run decides from exactly the values a run without interruption would have: the round trip of a float through
``repr`` is exact. Each file is written to a temporary name and renamed, so an interrupted run leaves whole parts.
A file also holds ``seconds``, the wall time ``fn`` took: a run that spans interruptions is timed part by part.
"""

from __future__ import annotations

import json
import os
import pathlib
import time
from collections.abc import Callable
from typing import Any

from experiments import claims, common

__all__ = ["parts"]


def _stamp(name: str, config) -> str:
    cfg = common.to_jsonable(config)
    if isinstance(cfg, dict):
        cfg = {k: v for k, v in cfg.items() if k != "checkpoint_dir"}
    return json.dumps({"code_digest": claims.code_digest(name), "config": cfg}, sort_keys=True)


def parts(directory, name: str, config) -> Callable[[str, Callable[[], Any]], Any]:
    """``runner(tag, fn)``: ``fn()``'s value, stored as ``directory/<tag>.json`` and reused by a resumed run of the
    same code and config (module docstring); ``directory`` empty or ``None``: nothing stored.

    Raises:
      ValueError: a ``tag`` that is not a plain file name (letters, digits, ``-``, ``_``, ``.``).
    """
    if not directory:
        return lambda tag, fn: common.from_jsonable(json.loads(json.dumps(common.to_jsonable(fn()))))
    root = pathlib.Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    stamp = _stamp(name, config)

    def run(tag: str, fn: Callable[[], Any]) -> Any:
        if not tag or tag.startswith(".") or not all(ch.isalnum() or ch in "-_." for ch in tag):
            raise ValueError(f"`tag` must be a plain file name (letters, digits, '-', '_', '.'); got {tag!r}.")
        path = root / f"{tag}.json"
        try:
            stored = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):  # absent, or cut short by an interrupted write
            stored = None
        if isinstance(stored, dict) and stored.get("stamp") == stamp:
            return common.from_jsonable(stored["value"])
        t0 = time.perf_counter()
        value = common.to_jsonable(fn())
        text = json.dumps({"stamp": stamp, "seconds": time.perf_counter() - t0, "value": value})
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
        return common.from_jsonable(json.loads(text)["value"])

    return run
