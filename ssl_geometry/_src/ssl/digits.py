"""scikit-learn's 8x8 digits as an in-memory :class:`~ssl_geometry.data.Dataset` of uint8 images.

Implementation of :func:`ssl_geometry.data.make_digits` (by name: ``ssl_geometry.data.load("digits")``).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ssl_geometry._src.checks import check_choice, check_int, optional_import
from ssl_geometry._src.ssl.augment.primitives import resample_matrix
from ssl_geometry._src.ssl.dataset import Dataset
from ssl_geometry._src.ssl.shapes import to_uint8

__all__ = ["make_digits"]


def make_digits(
    split: str = "train", *, image_size: int = 32, test_fraction: float = 0.2, split_seed: int = 0
) -> Dataset:
    """scikit-learn's 8x8 digits as uint8 ``(n, S, S, 3)`` images.

    Pixel values ``0..16`` scaled to ``0..255``, resized bilinearly (antialiased
    when shrinking) to ``S x S``, grey replicated to RGB. The train/test split is
    a fixed permutation (``split_seed``) with ``round(test_fraction n)`` test
    images (359 of 1797 by default).
    """
    check_choice(split, "split", ("train", "test"))
    image_size = check_int(image_size, "image_size", 1)
    if not 0 < test_fraction < 1:
        raise ValueError(f"`test_fraction` must be in (0, 1); got {test_fraction}.")
    imgs, y = _digits(split, image_size, float(test_fraction), int(split_seed), bool(jax.config.read("jax_enable_x64")))
    return Dataset(imgs.copy(), y.copy(), {}, 10, "digits")


@functools.lru_cache(maxsize=8)
def _digits(split, image_size, test_fraction, split_seed, x64):
    """Cached body of :func:`make_digits` (callers get copies)."""
    load_digits = optional_import("sklearn.datasets").load_digits

    d = load_digits()
    x = d.images.astype(np.float64) / 16.0
    y = d.target.astype(np.int32)
    perm = np.random.default_rng(split_seed).permutation(len(y))
    n_test = int(round(test_fraction * len(y)))
    idx = perm[:n_test] if split == "test" else perm[n_test:]
    x, y = x[idx], y[idx]
    # The (S, 8) bilinear weights of crop_and_resize, on this process's own CPU device: in a
    # multi-process run jax.devices("cpu")[0] belongs to process 0 and cannot be read elsewhere.
    with jax.default_device(jax.local_devices(backend="cpu")[0]):
        r = np.asarray(resample_matrix(image_size, 8, 0.0, 8.0, True, jnp.float64 if x64 else jnp.float32))
    big = np.einsum("oh,nhw,pw->nop", r.astype(np.float64), x, r.astype(np.float64))
    return to_uint8(np.repeat(big[..., None], 3, axis=-1)), y
