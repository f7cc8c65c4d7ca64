"""What every experiment of the suite shares: the module contract, the runner, result I/O, plotting.

An experiment is a module ``experiments/<name>.py`` (or a package ``experiments/<name>/``) with
a config module ``experiments/configs/<name>.py``. The module separates four things:

* **config** -- ``configs/<name>.py`` defines ``get_config(arg=None)``: a base config with sections
  (``data``, ``model``, ``train``, ``analysis``, ...) where every field is defined, and variants
  ``tiny`` (seconds, tests), ``smoke`` (default; minutes on 2 CPU cores) and ``paper`` (the
  authors' recipe, for an accelerator) applied as overrides by :func:`experiments.configs.build`.
  The config holds settings only: no rule and no threshold (those live in the registry).
* **measuring** -- ``measure(config) -> dict``: numbers only (JSON-able: floats, lists, dicts);
  no verdict, no markdown, no figures. It checks the config before computing anything, and the
  paper's numbers for comparison go in ``measurements["paper"]``.
* **deciding** -- ``decide(measurements, config) -> {"claims": [item, ...], "headline": {...}}``.
  The module declares ``CLAIMS`` (the ids of :data:`experiments.claims.CLAIMS` it decides); each
  item is ``{"id", "verdict", "deciding", "reason"[, "subject"]}``: the registry rule of that claim
  applied with the registry's thresholds (``claims.CLAIMS[id].thresholds``), ``deciding`` the
  numbers the rule read. Rules shared by several experiments are applied by
  :mod:`experiments.rules`. A module whose variants decide different claims defines
  ``measured_claims(config)``, the ids that variant decides (default ``CLAIMS``); a claim it does not
  measure gets no record, so a variant never stores a verdict about a state it did not build.
* **reporting** -- ``report(results, rel_dir) -> str`` (a markdown section) and optionally
  ``figures(results, out_dir)``; both read the *stored* results, never module state.

Besides these the module defines ``NAME``, ``TITLE`` and ``CLAIM`` (the paper's claim, as the paper
makes it). :func:`run_experiment` runs measure, then decide, then writes ``results.json`` once,
atomically, then draws the figures from what it wrote. JSON has no NaN or infinity: they are
stored as the strings ``"nan"``, ``"inf"``, ``"-inf"`` by :func:`to_jsonable` and turned back into
floats by :func:`read_results` -- here, once, for every experiment.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import pathlib
import re
import time as _time
from typing import Any

import numpy as np

from experiments import claims
from experiments.benchmarks import harness
from experiments.plotting import pyplot, save_figure  # noqa: F401 - re-exported: the figure standard lives in plotting


def require_x64(experiment: str) -> None:
    """Raise ``RuntimeError`` unless float64 is enabled (exact Hessians and eigenvalues need it).

    ``python -m experiments.reproduce`` enables it; a caller running an experiment's ``measure``
    directly must call ``jax.config.update("jax_enable_x64", True)`` first.
    """
    import jax

    if not jax.config.read("jax_enable_x64"):
        raise RuntimeError(
            f"{experiment} computes exact Hessians in float64: call "
            "jax.config.update('jax_enable_x64', True) first (experiments.reproduce does)."
        )


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
    for key in ("claims", "headline", "paper"):
        if key not in results:
            raise ValueError(f"experiment results lack the required key {key!r}.")
    for rec in results["claims"]:
        if rec.get("verdict") not in claims.VERDICTS:
            raise ValueError(
                f"claim {rec.get('id')!r}: verdict {rec.get('verdict')!r} is not one of {claims.VERDICTS}."
            )


def write_results(out_dir, results: dict, config=None) -> pathlib.Path:
    """Write ``results`` (plus config and :func:`experiments.benchmarks.harness.environment`) to
    ``out_dir/results.json``, atomically."""
    check_verdict(results)
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    payload = dict(results)
    if config is not None:
        payload["config"] = config
    payload["environment"] = harness.environment()
    path = out / "results.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(to_jsonable(payload), indent=2))  # insertion order: headline keys keep their order
    tmp.replace(path)  # atomic: a killed run never leaves a half-written results.json
    return path


_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def from_jsonable(obj: Any) -> Any:
    """Inverse of :func:`to_jsonable` for numbers: ``"nan"``, ``"inf"``, ``"-inf"`` become floats again."""
    if isinstance(obj, dict):
        return {k: from_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [from_jsonable(v) for v in obj]
    if isinstance(obj, str) and obj in _NON_FINITE:
        return _NON_FINITE[obj]
    return obj


def read_results(out_dir) -> dict:
    """Read ``out_dir/results.json``, non-finite numbers restored as floats (see :func:`from_jsonable`)."""
    return from_jsonable(json.loads((pathlib.Path(out_dir) / "results.json").read_text()))


def _claim_records(module, decision: dict, scale: str, code_digest: str | None = None, config=None) -> list[dict]:
    """The stored claim records of one ``decide`` result (see :func:`run_experiment`): one per item of its
    ``claims`` list, each decided by the registry's rule; exactly the claims ``module.measured_claims(config)``
    names where the module defines it, else exactly its ``CLAIMS``."""
    declared = tuple(getattr(module, "CLAIMS", ()))
    measured = getattr(module, "measured_claims", None)
    required = tuple(measured(config)) if measured is not None and config is not None else declared
    if not declared:
        raise ValueError(f"{module.__name__} declares no CLAIMS (the registry ids it decides).")
    if "claims" not in decision:
        raise ValueError(
            f"{module.__name__}.decide returned no 'claims' list (one item per registry claim it "
            f"decides, among {declared})."
        )
    records = []
    for item in decision["claims"]:
        unknown = set(item) - {"id", "verdict", "deciding", "reason", "subject"}
        if unknown:
            raise ValueError(f"{module.__name__}.decide: a claim item has unknown keys {sorted(unknown)}.")
        if item["id"] not in declared:
            raise ValueError(f"{module.__name__}.decide decided {item['id']!r}, which is not in its CLAIMS {declared}.")
        records.append(
            claims.record(
                item["id"],
                item["verdict"],
                scale=scale,
                deciding=item.get("deciding", {}),
                reason=item.get("reason", ""),
                subject=item.get("subject"),
                code_digest=code_digest,
            )
        )
    missing = sorted(set(required) - {r["id"] for r in records})
    if missing:
        raise ValueError(f"{module.__name__}.decide did not decide its claims {missing}.")
    unmeasured = sorted({r["id"] for r in records} - set(required))
    if unmeasured:
        raise ValueError(f"{module.__name__}.decide decided {unmeasured}, which its variant does not measure.")
    return records


def run_experiment(module, config, out_dir, *, variant: str | None = None) -> dict:
    """Measure, then decide, then write ``out_dir/results.json`` once, atomically, then draw the figures.

    ``module`` follows the contract of this module's docstring; ``variant`` names the config variant
    (default ``config.variant``; its scale, ``toy``/``smoke``/``paper``, is :func:`experiments.claims.scale_of`, unless the module
    sets ``SCALE``). ``decide`` returns ``{"claims": [{"id", "verdict", "deciding", "reason"[, "subject"]}],
    "headline": {...}}``; each item becomes a registry record (:func:`experiments.claims.record`: its
    scale, rule digest and code digest added). The paper's numbers come from ``measurements["paper"]``. The
    file holds ``variant``, ``seed`` (``config.seed``, ``None`` where the config has none), ``scale``,
    ``code_digest``, ``code_files``, ``commit`` and ``clean`` (the code that ran: :mod:`experiments.claims`
    says what is hashed; ``commit`` and ``clean`` are ``None`` without git), ``claims``, ``headline``,
    ``paper``, ``measurements``, ``wall_time_s``, ``date`` (UTC, when the run finished), ``config`` and
    ``environment``; it is written once, the figures are drawn from the file as read back, and that is
    returned. The code is digested before ``measure`` runs, so an edit during a long run makes the
    stored digest stale, never a false match.
    """
    name = module.__name__.removeprefix("experiments.")
    files = claims.file_digests(name)
    code_digest = claims.code_digest(name)
    commit, clean = claims.git_state(list(files))
    t0 = _time.perf_counter()
    measurements = module.measure(config)
    decision = module.decide(measurements, config)
    allowed = {"claims", "headline"}
    unknown = set(decision) - allowed
    if unknown or "headline" not in decision:
        raise ValueError(
            f"{module.__name__}.decide must return {sorted(allowed)}; got {sorted(decision)} (the "
            "paper's numbers belong in measurements['paper'], config checks in measure)."
        )
    variant = variant or config.variant
    scale = getattr(module, "SCALE", None) or claims.scale_of(variant)
    records = _claim_records(module, decision, scale, code_digest, config)
    seed = config.get("seed") if hasattr(config, "get") else None
    results = {
        "variant": variant,
        "seed": seed,
        "scale": scale,
        "code_digest": code_digest,
        "commit": commit,
        "clean": clean,
        "claims": records,
        "headline": decision["headline"],
        "paper": measurements.get("paper", {}),
        "measurements": measurements,
        "code_files": files,
    }
    results["wall_time_s"] = _time.perf_counter() - t0
    results["date"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    write_results(out_dir, results, config)
    stored = read_results(out_dir)
    if hasattr(module, "figures"):
        module.figures(stored, pathlib.Path(out_dir))
    return stored


def table_cell(text) -> str:
    """``text`` as one markdown table cell: every ``|`` not already escaped becomes ``\\|`` (an unescaped one
    would end the cell) and newlines become spaces (one would end the row). Every table of REPORT.md, header
    cells included, goes through here, so that it renders on GitHub and in mkdocs."""
    return re.sub(r"(?<!\\)\|", r"\\|", str(text)).replace("\r", " ").replace("\n", " ")


def markdown_table(rows: list[dict], columns: list[str] | None = None, floatfmt: str = ".4g") -> str:
    """A GitHub markdown table from a list of dicts: numbers formatted with ``floatfmt`` (4 significant digits by
    default), every cell and header escaped by :func:`table_cell`."""
    if not rows:
        return ""
    columns = columns or list(rows[0].keys())

    def fmt(v):
        if isinstance(v, (float, np.floating)):
            return format(float(v), floatfmt)
        return str(v)

    lines = ["| " + " | ".join(table_cell(c) for c in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(table_cell(fmt(r.get(c, ""))) for c in columns) + " |" for r in rows]
    return "\n".join(lines)
