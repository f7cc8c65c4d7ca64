"""What a run measures and writes into its workdir: tracked representation metrics, the offline
probes at the end, and the ``metrics.jsonl`` logger.

* :func:`representation_metrics` / :func:`make_eval_metrics`: collapse diagnostics of backbone
  features and projector outputs on fixed test images (the run's ``"event": "tracked"`` records);
* :func:`evaluate`: the offline probes (ridge, kNN, optionally the rotation probe) of the final
  ``"event": "final"`` record;
* :class:`MetricLogger` / :func:`read_metrics`: one JSON record per line in ``<workdir>/metrics.jsonl``.
"""

from __future__ import annotations

import json
import math
import pathlib
import warnings
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ssl_geometry._src.instrument import metrics as _metrics
from ssl_geometry._src.ssl.objectives import Objective
from ssl_geometry._src.training import probes as _probes

__all__ = ["representation_metrics", "make_eval_metrics", "check_knn_k", "evaluate", "MetricLogger", "read_metrics"]


def representation_metrics(z) -> dict:
    """Collapse diagnostics of a batch of outputs ``z`` (n, k)
    (docs/theory.md, section "Collapse monitor and timescale ratio"),
    computed by :mod:`ssl_geometry.metrics`:

    * ``std_norm``: ``mean_j std_i (z_i / |z_i|)_j`` (``ddof=1``; collapse -> 0, uniform
      directions about ``1 / sqrt(k)``), :func:`~ssl_geometry.metrics.normalized_std`;
    * ``cond``: ``lambda_max / lambda_min`` of the covariance of ``z`` (``inf`` when it is
      singular, e.g. ``n <= k``), :func:`~ssl_geometry.metrics.covariance_condition_number`;
    * ``erank_rankme`` / ``erank_squared``: ``exp(H(p))`` with ``p_i`` proportional to
      the singular values ``s_i`` of ``z`` (RankMe) or to ``s_i^2`` (the paper's code),
      :func:`~ssl_geometry.metrics.effective_rank`.
    """
    return {
        "std_norm": _metrics.normalized_std(z),
        "cond": _metrics.covariance_condition_number(z),
        "erank_rankme": _metrics.effective_rank(z, "rankme"),
        "erank_squared": _metrics.effective_rank(z, "squared"),
    }


def make_eval_metrics(objective: Objective) -> Callable:
    """``eval_metrics(params, obj_state, images) -> dict``: :func:`representation_metrics` of
    the backbone features (``backbone/...``) and the projector outputs (``head/...``), eval mode."""

    def eval_metrics(params, obj_state, images):
        h = objective.features(params, obj_state, images)
        z = objective.embed(params, obj_state, images)
        out = {f"backbone/{k}": v for k, v in representation_metrics(h).items()}
        out.update({f"head/{k}": v for k, v in representation_metrics(z).items()})
        return out

    return eval_metrics


def _apply_in_batches(fn, params, obj_state, images, batch_size=512):
    out = [
        np.asarray(fn(params, obj_state, jnp.asarray(images[i : i + batch_size])))
        for i in range(0, len(images), batch_size)
    ]
    return np.concatenate(out, 0)


def check_knn_k(knn_k, num_train: int) -> None:
    """Raise ``ValueError`` naming ``eval.knn_k`` when the kNN probe has fewer than ``knn_k`` training images."""
    if int(knn_k) > int(num_train):
        raise ValueError(
            f"eval.knn_k: {knn_k} neighbours cannot be found among the kNN probe's {num_train} "
            f"training images; use eval.knn_k <= {num_train} or more examples (eval.max_train, "
            "data.num_train)."
        )


def evaluate(objective, params, obj_state, train_data, test_data, cfg, *, key=None) -> dict:
    """Offline probes on frozen backbone features and projector outputs.

    Ridge (closed form) and cosine kNN (``k = cfg.knn_k`` exactly: fewer training images than that is a
    ``ValueError``, never a smaller k) on ``backbone`` and ``head`` outputs of up to
    ``cfg.max_train`` / ``cfg.max_test`` images; with ``cfg.rotation`` also the
    rotation probe (linear and MLP) on both.
    """
    (xtr, ytr), (xte, yte) = train_data, test_data
    xtr, ytr = xtr[: cfg.max_train], ytr[: cfg.max_train]
    check_knn_k(cfg.knn_k, len(xtr))
    xte, yte = xte[: cfg.max_test], yte[: cfg.max_test]
    feat = jax.jit(objective.features)
    emb = jax.jit(objective.embed)
    out = {}
    for where, fn in (("backbone", feat), ("head", emb)):
        ftr = _apply_in_batches(fn, params, obj_state, xtr)
        fte = _apply_in_batches(fn, params, obj_state, xte)
        out[f"{where}/ridge_acc"] = _probes.ridge_probe(ftr, ytr, fte, yte, l2=cfg.ridge_l2)["acc"]
        out[f"{where}/knn_acc"] = _probes.knn_probe(ftr, ytr, fte, yte, k=cfg.knn_k)["acc"]
        if cfg.get("rotation", False):
            if xtr.shape[1] != xtr.shape[2]:
                raise ValueError("eval.rotation needs square images.")
            r = _probes.rotation_probe(
                lambda x, fn=fn: fn(params, obj_state, x), xtr, xte, epochs=cfg.get("rotation_epochs", 5), key=key
            )
            out[f"{where}/rotation_linear"] = r["linear"]
            out[f"{where}/rotation_mlp"] = r["mlp"]
    return out


class MetricLogger:
    """Append JSON lines to ``workdir/metrics.jsonl`` (and TensorBoard scalars when
    ``tensorboard=True`` and ``tensorflow`` is importable). Only process 0 writes."""

    def __init__(self, workdir, *, tensorboard: bool = False):
        self.active = jax.process_index() == 0
        self.path = pathlib.Path(workdir) / "metrics.jsonl"
        self._tb = None
        if self.active and tensorboard:
            try:
                import tensorflow as tf

                self._tb = tf.summary.create_file_writer(str(pathlib.Path(workdir) / "tensorboard"))
            except Exception as err:  # noqa: BLE001 - optional dependency: any failure disables TB  # pragma: no cover
                warnings.warn(f"TensorBoard logging disabled: {err}", stacklevel=2)

    def write(self, record: dict) -> None:
        if not self.active:
            return
        clean = {}
        for k, v in record.items():
            if hasattr(v, "shape"):
                v = np.asarray(v).item()
            if isinstance(v, float) and not math.isfinite(v):
                v = str(v)  # "nan" / "inf": kept visible in JSON
            clean[k] = v
        with open(self.path, "a") as f:
            f.write(json.dumps(clean, sort_keys=True) + "\n")
        if self._tb is not None and "step" in clean:
            import tensorflow as tf

            with self._tb.as_default():
                for k, v in clean.items():
                    if isinstance(v, (int, float)) and k != "step":
                        tf.summary.scalar(k, v, step=int(clean["step"]))
            self._tb.flush()


def read_metrics(workdir) -> list[dict]:
    """All records of ``workdir/metrics.jsonl``."""
    path = pathlib.Path(workdir) / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
