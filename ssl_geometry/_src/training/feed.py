"""The trainer's input: an in-memory feed (embedded and small tfds sets) or a streaming one.

Both give the trainer the same interface: ``image_shape``, ``num_classes``, ``test``
and ``eval_train`` (``(images, labels)`` NumPy pairs for the offline probes and the
tracked metrics), ``attach(mesh)``, ``seek(step, position)`` (resume),
``batch(step)`` (the global batch of ``step`` as sharded ``jax.Array``s, built from
this process's share only) and ``position(done)`` (what the checkpoint stores as the
data position after ``done`` steps).

* :class:`MemoryFeed` (``data.stream = False``, the default): the splits named by the ``data``
  section (:func:`ssl_geometry.trainer.load_split`, e.g. the nuisance rotation range of ``"shapes"``) are
  held in host memory and the global batch of step ``s`` is
  :func:`ssl_geometry.trainer.batch_indices` ``(seed, s)``; each process
  gathers only its contiguous slice of it (:func:`~ssl_geometry.internal.host_slice`).
  The data position is the step itself, and the result does not depend on the number
  of processes or devices (same global batch).
* :class:`StreamFeed` (``data.stream = True``, tfds sets only): the training split is
  streamed with :func:`ssl_geometry.data.tfds_batches` (tf.data; each process reads
  its own ``tfds.even_splits`` part, order seeded by ``(seed, epoch, process)``, per-process
  batch ``batch_size / process_count``), so data sets larger than host memory train.
  The position is the iterator's ``{"epoch", "step"}``; a resume re-creates the
  iterator there (skipping already-read examples before decoding). The global batch
  order depends on the process count (each process owns a shard), unlike the
  in-memory feed.

Why tfds + tf.data and not grain: both are in the dependency set already
(``tensorflow-datasets``, ``tensorflow-cpu``), the paper's data sets (CIFAR, STL,
ImageNet) are tfds builders, and ``tfds.even_splits`` / deterministic tf.data with
seeded shuffles give per-host sharding and an exactly resumable order without a new
dependency (grain is not installed here and would add one).
"""

from __future__ import annotations

import jax
import numpy as np

from ssl_geometry._src.ssl import data as _data
from ssl_geometry._src.training.builders import load_split
from ssl_geometry._src.training.data_order import batch_indices, host_slice
from ssl_geometry._src.training.state import place_batch

__all__ = ["MemoryFeed", "StreamFeed", "make_feed"]


def _sizes(config):
    return {"image_size": config.data.get("image_size") or None, "data_dir": config.data.get("data_dir") or None}


def _load(config, split):
    ds = load_split(config.data, split)
    return np.asarray(ds.images), np.asarray(ds.labels, np.int32)


class MemoryFeed:
    """Training split in host memory; batch of step ``s`` from ``batch_indices(seed, s)``."""

    def __init__(self, config):
        self.seed, self.batch_size = int(config.seed), int(config.data.batch_size)
        self.train = _load(config, "train")
        self.test = _load(config, _data.info(config.data.name).splits[1])  # "test" (or "validation")
        self.eval_train = self.train
        self.image_shape = self.train[0].shape[1:]
        self.num_classes = int(max(self.train[1].max(), self.test[1].max())) + 1
        self.mesh = None

    def attach(self, mesh):
        self.mesh = mesh

    def seek(self, step: int, position) -> None:
        if position is not None and int(position) != int(step):
            raise ValueError(f"checkpoint data position {position} does not match its step {step}.")

    def position(self, done: int) -> int:
        return int(done)

    def batch(self, step: int) -> dict:
        xtr, ytr = self.train
        idx = host_slice(batch_indices(self.seed, step, len(xtr), self.batch_size))
        return place_batch({"images": xtr[idx], "labels": ytr[idx]}, self.mesh)


def _take(it, limit: int):
    """Concatenate ``image``/``label`` of the batches of ``it`` up to ``limit`` examples."""
    xs, ys, n = [], [], 0
    for b in it:
        xs.append(b["image"])
        ys.append(b["label"])
        n += len(b["label"])
        if n >= limit:
            break
    if not xs:
        raise ValueError("the evaluation split yielded no examples.")
    return np.concatenate(xs)[:limit], np.concatenate(ys)[:limit].astype(np.int32)


class StreamFeed:
    """Training split streamed by :func:`ssl_geometry.data.tfds_batches` (per-process shard)."""

    def __init__(self, config):
        name = config.data.name
        if _data.info(name).source == "embedded":
            raise ValueError(
                f"`data.stream=True` streams tfds data sets; {name!r} is embedded (in memory): set data.stream=False."
            )
        self.config, self.seed = config, int(config.seed)
        pc = jax.process_count()
        if int(config.data.batch_size) % pc:
            raise ValueError(f"`data.batch_size` {config.data.batch_size} must divide by the process count {pc}.")
        self.local_batch = int(config.data.batch_size) // pc
        splits = _data.info(name).splits
        self.eval_train = self._first(config, "train", int(config.eval.max_train))
        self.test = self._first(config, splits[1], int(config.eval.max_test))
        self.image_shape = self.eval_train[0].shape[1:]
        self.num_classes = _data.info(name).num_classes
        self.mesh, self.it = None, None

    @staticmethod
    def _first(config, split, limit):
        """The first ``limit`` examples of ``split`` in file order (offline probes, tracked metrics);
        tf.data reads lazily, so only those are decoded."""
        kw = _sizes(config)
        _, it = _data._tfds_pipeline(
            config.data.name,
            split,
            data_dir=kw["data_dir"],
            image_size=_data._default_size(config.data.name, kw["image_size"]),
            batch_size=min(256, limit),
            shuffle=False,
            shuffle_seed=None,
            shuffle_buffer=1,
            skip_examples=0,
            drop_remainder=False,
        )
        return _take(it, limit)

    def attach(self, mesh):
        self.mesh = mesh

    def seek(self, step: int, position) -> None:
        pos = _data.Position(**position) if isinstance(position, dict) else _data.Position()
        if position is None and step:
            raise ValueError(f"checkpoint at step {step} has no stream position.")
        c = self.config
        self.it = _data.tfds_batches(
            c.data.name,
            "train",
            batch_size=self.local_batch,
            seed=self.seed,
            position=pos,
            shuffle_buffer=int(c.data.get("shuffle_buffer", 10_000)),
            **_sizes(c),
        )

    def position(self, done: int) -> dict:
        del done
        return self.it.state()

    def batch(self, step: int) -> dict:
        del step
        b = next(self.it)
        return place_batch({"images": b["image"], "labels": b["label"]}, self.mesh)


def make_feed(config):
    """:class:`StreamFeed` when ``config.data.stream`` else :class:`MemoryFeed`."""
    return StreamFeed(config) if config.data.get("stream", False) else MemoryFeed(config)
