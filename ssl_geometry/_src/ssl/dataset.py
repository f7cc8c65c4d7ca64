"""The in-memory data set type, on its own so that every loader (digits, shapes, tfds) can build one."""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["Dataset"]


@dataclasses.dataclass(frozen=True)
class Dataset:
    """An in-memory image data set.

    Attributes:
      images: uint8 ``(n, H, W, 3)``.
      labels: int32 ``(n,)``.
      factors: ``{name: float (n,)}`` per-image nuisance factors (``{}`` when none are known).
      num_classes: the number of classes.
      name: the data set's name.

    A frozen dataclass, not a tuple: ``len(ds)`` is an error (use :attr:`num_examples`), so the
    number of fields can never be mistaken for the number of examples, and
    ``dataclasses.replace(ds, ...)`` derives a modified copy.
    """

    images: np.ndarray
    labels: np.ndarray
    factors: dict
    num_classes: int
    name: str

    @property
    def num_examples(self) -> int:
        """``n``, the number of images."""
        return int(self.labels.shape[0])
