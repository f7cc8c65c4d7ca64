"""The data order of a training run: the global batch of each step and this process's share of it.

The batch at step ``s`` is a pure function of ``(seed, s)`` (a per-epoch permutation from
``numpy.random.default_rng([seed, epoch])``), so the data position is the step itself and a resumed
run reads the batches the uninterrupted one reads. Every process computes the same global indices
and reads only its contiguous slice (:func:`host_slice`).
"""

from __future__ import annotations

import jax
import numpy as np

__all__ = ["batch_indices", "host_slice"]


def batch_indices(seed: int, step: int, num_examples: int, batch_size: int) -> np.ndarray:
    """Indices of the global batch at ``step``: epoch ``e = step // (N // B)`` is a
    permutation from ``default_rng([seed, e])``; incomplete last batches are dropped."""
    per_epoch = num_examples // batch_size
    if per_epoch < 1:
        raise ValueError(f"`data.batch_size` {batch_size} exceeds the number of training examples {num_examples}.")
    epoch, pos = divmod(int(step), per_epoch)
    perm = np.random.default_rng([int(seed), epoch]).permutation(num_examples)
    return perm[pos * batch_size : (pos + 1) * batch_size]


def host_slice(indices: np.ndarray) -> np.ndarray:
    """This process's contiguous share of the global batch indices."""
    n_proc, pid = jax.process_count(), jax.process_index()
    if len(indices) % n_proc:
        raise ValueError(f"global batch {len(indices)} must divide by the process count {n_proc}.")
    per = len(indices) // n_proc
    return indices[pid * per : (pid + 1) * per]
