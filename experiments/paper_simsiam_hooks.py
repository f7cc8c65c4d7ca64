"""The run-loop hooks of :mod:`experiments.paper_simsiam`: per-epoch means of the tracked numbers, and a call before
each update. Re-exported there (:class:`EpochMeans`, :class:`Diverged`, :data:`OBSERVED`).
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["OBSERVED", "BeforeStep", "Diverged", "EpochMeans"]

#: The tracked numbers the ``observe`` hook of :func:`experiments.paper_simsiam.build` adds to the trainer's metrics.
OBSERVED = ("std_head", "cond_head", "std_backbone", "cond_backbone", "rel_update_projector", "rel_update_backbone")


class Diverged(FloatingPointError):
    """A run's loss became non-finite; ``step`` is the first non-finite update (0-based)."""

    def __init__(self, step: int):
        super().__init__(f"non-finite SimSiam loss at update {step}")
        self.step = step


class EpochMeans:
    """Run-loop hook (``after_step``): per-epoch means of every update's tracked numbers.

    Each update's ``loss``, the trainer's ``rel_update/backbone`` and ``rel_update/head`` (kept as
    ``rel_update_trainer_backbone`` / ``rel_update_trainer_head``) and the ``names`` of the ``observe``
    hook stay on the device until the end of each epoch of ``steps_per_epoch`` updates (no host sync
    per step, so the next batch is prepared while the device works); then ``series[name]`` gains the
    epoch's float64 mean. A non-finite loss ends the run at the end of its epoch: ``diverged_at_step``
    names the first non-finite update and :class:`Diverged` is raised, so the series hold only the
    epochs completed before it -- never NaN-filled series.
    """

    def __init__(self, steps_per_epoch: int, names=OBSERVED):
        self.steps_per_epoch, self.names = int(steps_per_epoch), tuple(names)
        self.series: dict[str, list] = {}
        self.diverged_at_step = None
        self._epoch: list[dict] = []

    def after_step(self, step, state, metrics) -> None:
        del state
        self._epoch.append(
            {
                "loss": metrics["loss"],
                "rel_update_trainer_backbone": metrics["rel_update/backbone"],
                "rel_update_trainer_head": metrics["rel_update/head"],
                **{k: metrics[k] for k in self.names},
            }
        )
        if int(step) % self.steps_per_epoch:
            return
        first, per = int(step) - len(self._epoch), self._epoch
        self._epoch = []
        per = {
            k: np.asarray(v, np.float64)
            for k, v in jax.device_get({k: jnp.stack([r[k] for r in per]) for k in per[0]}).items()
        }
        if not np.all(np.isfinite(per["loss"])):
            self.diverged_at_step = first + int(np.argmin(np.isfinite(per["loss"])))
            raise Diverged(self.diverged_at_step)
        for k, v in per.items():
            self.series.setdefault(k, []).append(float(np.mean(v)))


class BeforeStep:
    """Run-loop hook calling ``fn(epoch, i, state, batch)`` before update ``i`` of each epoch."""

    def __init__(self, fn: Callable, steps_per_epoch: int):
        self.fn, self.steps_per_epoch = fn, int(steps_per_epoch)

    def before_step(self, step, state, batch) -> None:
        self.fn(*divmod(int(step), self.steps_per_epoch), state, batch)
