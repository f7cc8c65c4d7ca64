"""What every experiment of the suite shares: the module contract and result I/O.

An experiment is a module ``experiments/<name>.py`` with a config module
``experiments/configs/<name>.py``:

* ``configs/<name>.py`` defines ``get_config(variant: str = "smoke") -> ml_collections.ConfigDict``
  for ``variant`` in ``{"tiny", "smoke", "paper"}``: ``tiny`` runs in seconds (tests),
  ``smoke`` in minutes on 2 CPU cores on the embedded data set, ``paper`` with the
  paper's settings for a GPU/TPU (its ``expected_runtime`` field says how long, on what).
* ``<name>.py`` defines ``NAME``, ``TITLE``, ``CLAIM`` (the paper's statement it tests),
  ``run(config, out_dir) -> dict`` and ``report(results, out_dir) -> str`` (a markdown section).

``run`` writes ``out_dir/results.json`` through :func:`write_results` and PNG figures
into ``out_dir``; the returned dict has at least

* ``"verdict"``: one of :data:`VERDICTS`,
* ``"verdict_rule"``: the rule, stated in words, that maps the numbers to the verdict,
* ``"headline"``: a flat ``{name: number}`` dict of the numbers that decide it,
* ``"paper"``: the paper's numbers for the same quantities where they exist (else ``{}``).
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import pathlib
import platform
from typing import Any

import numpy as np

VERDICTS = ("supported", "not supported", "premise violated", "inconclusive")


def environment() -> dict:
    """Library versions and the device the run used."""
    import jax

    versions = {"python": platform.python_version()}
    for mod in ("jax", "jaxlib", "flax", "optax", "diffrax", "orbax.checkpoint", "numpy"):
        try:
            m = __import__(mod, fromlist=["__version__"])
            versions[mod] = getattr(m, "__version__", "?")
        except Exception:  # pragma: no cover - optional package missing
            versions[mod] = None
    devs = jax.devices()
    return {
        "versions": versions,
        "backend": jax.default_backend(),
        "devices": [str(d) for d in devs],
        "device_kind": devs[0].device_kind if devs else None,
        "x64": bool(jax.config.read("jax_enable_x64")),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def require_x64(experiment: str) -> None:
    """Raise ``RuntimeError`` unless float64 is enabled (exact Hessians and eigenvalues need it).

    ``python -m experiments.reproduce`` enables it; a caller running an experiment's ``run``
    directly must call ``jax.config.update("jax_enable_x64", True)`` first.
    """
    import jax

    if not jax.config.read("jax_enable_x64"):
        raise RuntimeError(f"{experiment} computes exact Hessians in float64: call "
                           "jax.config.update('jax_enable_x64', True) first (experiments.reproduce does).")


def to_jsonable(obj: Any) -> Any:
    """Convert numpy/jax scalars and arrays, tuples and ConfigDicts into JSON types.

    Non-finite floats become the strings ``"nan"``, ``"inf"``, ``"-inf"`` (JSON has no
    such numbers; they are kept visible, never dropped).
    """
    if hasattr(obj, "to_dict") and callable(obj.to_dict):
        obj = obj.to_dict()
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if hasattr(obj, "shape") and hasattr(obj, "dtype"):
        arr = np.asarray(obj)
        return to_jsonable(arr.item() if arr.ndim == 0 else arr.tolist())
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        f = float(obj)
        if math.isnan(f):
            return "nan"
        if math.isinf(f):
            return "inf" if f > 0 else "-inf"
        return f
    return obj


def check_verdict(results: dict) -> None:
    """Raise ``ValueError`` unless ``results`` carries the keys the contract requires."""
    for key in ("verdict", "verdict_rule", "headline", "paper"):
        if key not in results:
            raise ValueError(f"experiment results lack the required key {key!r}.")
    if results["verdict"] not in VERDICTS:
        raise ValueError(f"verdict {results['verdict']!r} is not one of {VERDICTS}.")


def write_results(out_dir, results: dict, config=None) -> pathlib.Path:
    """Write ``results`` (plus config and environment) to ``out_dir/results.json``."""
    check_verdict(results)
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    payload = dict(results)
    if config is not None:
        payload["config"] = config
    payload["environment"] = environment()
    path = out / "results.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(to_jsonable(payload), indent=2))  # insertion order: headline keys keep their order
    tmp.replace(path)  # atomic: a killed run never leaves a half-written results.json
    return path


def read_results(out_dir) -> dict:
    """Read ``out_dir/results.json``."""
    return json.loads((pathlib.Path(out_dir) / "results.json").read_text())


def markdown_table(rows: list[dict], columns: list[str] | None = None, floatfmt: str = ".4g") -> str:
    """A GitHub markdown table from a list of dicts (numbers formatted with ``floatfmt``)."""
    if not rows:
        return ""
    columns = columns or list(rows[0].keys())

    def fmt(v):
        if isinstance(v, (float, np.floating)):
            return format(float(v), floatfmt)
        return str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def plot_normalised_curves(ax, curves: dict, *, fontsize: int = 7) -> None:
    """Plot each loss curve as ``(v - min) / range + 1e-6`` on a log axis (shapes comparable)."""
    for name, vals in curves.items():
        v = np.asarray(vals)
        ax.plot((v - v.min()) / max(v.max() - v.min(), 1e-300) + 1e-6, label=name)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("(loss - min) / range")
    ax.legend(fontsize=fontsize)


def save_figure(fig, out_dir, name: str) -> pathlib.Path:
    """Save a matplotlib figure as ``out_dir/name.png`` (100 dpi) and close it."""
    import matplotlib.pyplot as plt

    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.png"
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path
