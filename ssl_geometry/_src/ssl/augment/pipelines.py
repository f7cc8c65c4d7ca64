"""Augmentation pipelines (SimCLR, SimSiam CIFAR, two views) and orbits of a continuous augmentation."""

from __future__ import annotations

import functools
import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from ssl_geometry._src.checks import check_rank
from ssl_geometry._src.ssl.augment.primitives import (
    batch_augment,
    check_rgb,
    float_dtype,
    random_color_jitter,
    random_flip,
    random_gaussian_blur,
    random_grayscale,
    random_resized_crop,
    random_rotation,
    random_solarize,
    to_float,
)

__all__ = [
    "AugmentConfig",
    "augment_image",
    "simclr_augment",
    "simsiam_cifar_augment",
    "two_views",
    "orbit",
    "orbit_tangents",
    "SIMCLR_IMAGENET",
    "SIMCLR_CIFAR",
    "BYOL_VIEW1",
    "BYOL_VIEW2",
]


class AugmentConfig(NamedTuple):
    """A SimCLR/BYOL-style view (torchvision order: crop, flip, rotation, jitter, gray, blur, solarise).

    ``size``: output side (None: input size). ``rotation_deg``: ``RandomRotation(rotation_deg)``,
    an angle ``U[-rotation_deg, rotation_deg]`` degrees, bilinear, zero fill (0: off; the paper's
    guillotine views use 45). ``jitter``: (brightness, contrast, saturation, hue) strengths
    applied with probability ``jitter_prob``. ``blur_radius`` None: 10% of the image side (see
    :func:`random_gaussian_blur`). Hashable, so it can be a static argument of ``jit``.
    """

    size: int | None = None
    crop_scale: tuple = (0.08, 1.0)
    crop_ratio: tuple = (3 / 4, 4 / 3)
    flip_prob: float = 0.5
    rotation_deg: float = 0.0
    jitter: tuple = (0.8, 0.8, 0.8, 0.2)
    jitter_prob: float = 0.8
    jitter_random_order: bool = True
    gray_prob: float = 0.2
    blur_prob: float = 0.5
    blur_sigma: tuple = (0.1, 2.0)
    blur_radius: int | None = None
    solarize_prob: float = 0.0
    solarize_threshold: float = 0.5


#: SimCLR ImageNet (Chen et al. 2020, App. A): jitter strength 1.0, blur p 0.5.
SIMCLR_IMAGENET = AugmentConfig()
#: The common CIFAR SimCLR recipe: crop scale (0.2, 1), ColorJitter(0.4, 0.4, 0.4, 0.1), no blur.
SIMCLR_CIFAR = AugmentConfig(crop_scale=(0.2, 1.0), jitter=(0.4, 0.4, 0.4, 0.1), blur_prob=0.0)
#: BYOL (Grill et al. 2020, Table 6), view 1 and view 2.
BYOL_VIEW1 = AugmentConfig(jitter=(0.4, 0.4, 0.2, 0.1), blur_prob=1.0, solarize_prob=0.0)
BYOL_VIEW2 = AugmentConfig(jitter=(0.4, 0.4, 0.2, 0.1), blur_prob=0.1, solarize_prob=0.2)


def augment_image(key, image, config: AugmentConfig = SIMCLR_IMAGENET):
    """One view of one float ``HWC`` image under ``config`` (see :class:`AugmentConfig`)."""
    check_rgb(image)
    k_crop, k_flip, k_jit, k_gray, k_blur, k_sol = jax.random.split(key, 6)
    x = random_resized_crop(k_crop, image, config.size, config.crop_scale, config.crop_ratio)
    x = random_flip(k_flip, x, config.flip_prob)
    if config.rotation_deg > 0:  # its own key (fold_in), so the other factors' draws do not depend on it
        x = random_rotation(jax.random.fold_in(key, 7), x, math.radians(config.rotation_deg))
    b, c, s, h = config.jitter
    if config.jitter_prob > 0:
        x = random_color_jitter(k_jit, x, b, c, s, h, random_order=config.jitter_random_order, p=config.jitter_prob)
    if config.gray_prob > 0:
        x = random_grayscale(k_gray, x, config.gray_prob)
    if config.blur_prob > 0:
        x = random_gaussian_blur(k_blur, x, config.blur_sigma, radius=config.blur_radius, p=config.blur_prob)
    if config.solarize_prob > 0:
        x = random_solarize(k_sol, x, config.solarize_threshold, config.solarize_prob)
    return x


@functools.partial(jax.jit, static_argnames=("config",))
def simclr_augment(key, images, config: AugmentConfig = SIMCLR_IMAGENET):
    """SimCLR view of a batch: ``uint8`` or float ``NHWC`` -> float ``[0, 1]`` ``NHWC``.

    Crop (``config.crop_scale``), flip, colour jitter, grayscale, blur, solarise, per
    sample with keys ``jax.random.split(key, N)``. Integer input becomes float32.
    """
    check_rank(images, "images", 4)
    x = to_float(images, float_dtype(images))
    return batch_augment(key, x, augment_image, config)


def _simsiam_single(key, image, size):
    k_crop, k_flip = jax.random.split(key)
    x = random_resized_crop(k_crop, image, size, (0.2, 1.0), (3 / 4, 4 / 3))
    return random_flip(k_flip, x, 0.5)


@functools.partial(jax.jit, static_argnames=("size",))
def simsiam_cifar_augment(key, images, size: int = 32):
    """The paper's SimSiam setting: RandomResizedCrop(size, scale=(0.2, 1)) + flip (p=0.5).

    ``uint8`` or float ``NHWC`` in, float ``[0, 1]`` ``(N, size, size, C)`` out.
    """
    check_rank(images, "images", 4)
    x = to_float(images, float_dtype(images))
    return batch_augment(key, x, _simsiam_single, size)


def two_views(key, images, pipeline: Callable = simsiam_cifar_augment, **kwargs):
    """Two independent views ``(pipeline(k1, images), pipeline(k2, images))``."""
    k1, k2 = jax.random.split(key)
    return pipeline(k1, images, **kwargs), pipeline(k2, images, **kwargs)


# ------------------------------------------------------------------------- orbits


def orbit(image, fn: Callable, params):
    """``stack([fn(image, t) for t in params])`` by ``vmap``: shape ``(T, *image.shape)``.

    E.g. ``orbit(x, rotate, jnp.linspace(0, jnp.pi / 4, 12))`` is 12 rotations in
    ``[0, 45 deg]``.
    """
    params = jnp.asarray(params, float_dtype(image))
    check_rank(params, "params", 1)
    return jax.vmap(lambda t: fn(image, t))(params)


def orbit_tangents(image, fn: Callable, params):
    """Tangents ``d/dt fn(image, t)`` at every ``t`` of ``params`` (forward mode, ``jax.jvp``)."""
    params = jnp.asarray(params, float_dtype(image))
    check_rank(params, "params", 1)

    def tangent(t):
        return jax.jvp(lambda s: fn(image, s), (t,), (jnp.ones_like(t),))[1]

    return jax.vmap(tangent)(params)
