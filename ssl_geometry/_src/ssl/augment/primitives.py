"""Augmentation primitives (deterministic, differentiable in their parameter) and their random draws.

See :mod:`ssl_geometry.augment` for the conventions.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import jax
import jax.numpy as jnp

from ssl_geometry._src.checks import check_choice, check_last_dim, check_positive, check_rank, is_concrete

GRAY_WEIGHTS = (0.2989, 0.587, 0.114)

# Per-channel statistics commonly used to normalise inputs (RGB, [0, 1] scale).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)

# scipy.ndimage boundary modes -> numpy/jnp.pad modes.
_PAD_MODES = {
    "reflect": "symmetric",  # d c b a | a b c d | d c b a
    "mirror": "reflect",  # d c b | a b c d | c b a
    "nearest": "edge",  # a a a | a b c d | d d d
    "wrap": "wrap",  # a b c d | a b c d | a b c d
    "constant": "constant",  # 0 0 0 | a b c d | 0 0 0
}


# --------------------------------------------------------------------------- helpers


def _check_image(image, name="image"):
    check_rank(image, name, 3)


def check_rgb(image, name="image"):
    check_rank(image, name, 3)
    check_last_dim(image, name, 3)


def float_dtype(x):
    dt = jnp.result_type(x)
    return dt if jnp.issubdtype(dt, jnp.floating) else jnp.float32


def to_float(images, dtype=jnp.float32):
    """Convert images to floats in ``[0, 1]``: integers are divided by 255, floats cast.

    >>> import numpy as np
    >>> x = to_float(np.array([[[0, 255, 51]]], np.uint8))
    >>> x.dtype, np.round(np.asarray(x, np.float64), 6).tolist()
    (dtype('float32'), [[[0.0, 1.0, 0.2]]])
    """
    x = jnp.asarray(images)
    if jnp.issubdtype(x.dtype, jnp.integer):
        return x.astype(dtype) / jnp.asarray(255.0, dtype)
    return x.astype(dtype)


def normalize(images, mean=IMAGENET_MEAN, std=IMAGENET_STD):
    """Per-channel standardisation ``(x - mean) / std`` over the trailing axis."""
    x = jnp.asarray(images)
    check_last_dim(x, "images", len(mean))
    return (x - jnp.asarray(mean, x.dtype)) / jnp.asarray(std, x.dtype)


def grayscale(image):
    """Luma ``0.2989 R + 0.587 G + 0.114 B`` (torchvision), shape ``(..., H, W, 1)``."""
    check_last_dim(image, "image", 3)
    w = jnp.asarray(GRAY_WEIGHTS, float_dtype(image))
    return jnp.sum(image * w, axis=-1, keepdims=True)


def _blend(a, b, factor):
    """torchvision ``_blend``: ``clip(f a + (1 - f) b, 0, 1)``."""
    return jnp.clip(factor * a + (1 - factor) * b, 0.0, 1.0)


# ---------------------------------------------------------------------- colour space


def rgb_to_hsv(image):
    """RGB in ``[0, 1]`` -> HSV in ``[0, 1]`` (the formulas of Python's ``colorsys``).

    ``v = max``, ``s = (max - min) / max`` (0 when ``max = 0``), hue from the
    channel holding the maximum, ``h = (h6 / 6) mod 1`` (0 for grey pixels).
    """
    check_last_dim(image, "image", 3)
    r, g, b = image[..., 0], image[..., 1], image[..., 2]
    maxc = jnp.max(image, axis=-1)
    minc = jnp.min(image, axis=-1)
    c = maxc - minc
    v = maxc
    s = jnp.where(maxc > 0, c / jnp.where(maxc > 0, maxc, 1.0), 0.0)
    safe_c = jnp.where(c > 0, c, 1.0)
    rc, gc, bc = (maxc - r) / safe_c, (maxc - g) / safe_c, (maxc - b) / safe_c
    h6 = jnp.where(r == maxc, bc - gc, jnp.where(g == maxc, 2.0 + rc - bc, 4.0 + gc - rc))
    h = jnp.where(c > 0, jnp.mod(h6 / 6.0, 1.0), 0.0)
    return jnp.stack([h, s, v], axis=-1)


def hsv_to_rgb(hsv):
    """HSV -> RGB, ``f(n) = v - v s clip(min(k, 4 - k), 0, 1)``, ``k = (n + 6 h) mod 6``.

    ``(R, G, B) = (f(5), f(3), f(1))``; equal to ``colorsys.hsv_to_rgb`` and
    continuous (piecewise linear) in ``h``, so hue shifts are differentiable.
    """
    check_last_dim(hsv, "hsv", 3)
    h, s, v = hsv[..., 0], hsv[..., 1], hsv[..., 2]

    def f(n):
        k = jnp.mod(n + 6.0 * h, 6.0)
        return v - v * s * jnp.clip(jnp.minimum(k, 4.0 - k), 0.0, 1.0)

    return jnp.stack([f(5.0), f(3.0), f(1.0)], axis=-1)


# ------------------------------------------------- deterministic, differentiable ops


def adjust_brightness(image, factor):
    """``clip(factor * x, 0, 1)`` (torchvision ``adjust_brightness``)."""
    _check_image(image)
    return _blend(image, jnp.zeros_like(image), factor)


def adjust_contrast(image, factor):
    """``clip(f x + (1 - f) m, 0, 1)`` with ``m`` the mean grey level of the image."""
    check_rgb(image)
    mean = jnp.mean(grayscale(image))
    return _blend(image, mean, factor)


def adjust_saturation(image, factor):
    """``clip(f x + (1 - f) gray(x), 0, 1)``: 0 gives the grey image, 1 the identity."""
    check_rgb(image)
    return _blend(image, grayscale(image), factor)


def adjust_hue(image, delta):
    """Shift the HSV hue by ``delta`` turns: ``h -> (h + delta) mod 1``.

    ``delta = 0`` and ``delta = 1`` are the identity; torchvision's ``hue_factor``
    in ``[-0.5, 0.5]`` has the same meaning.

    >>> import numpy as np
    >>> red = np.array([[[1.0, 0.0, 0.0]]])
    >>> np.round(np.asarray(adjust_hue(red, 1 / 3)), 6).tolist()  # red -> green
    [[[0.0, 1.0, 0.0]]]
    """
    check_rgb(image)
    hsv = rgb_to_hsv(image)
    h = jnp.mod(hsv[..., 0] + delta, 1.0)
    return hsv_to_rgb(jnp.stack([h, hsv[..., 1], hsv[..., 2]], axis=-1))


def solarize(image, threshold=0.5):
    """Invert the pixels at or above ``threshold``: ``x if x < t else 1 - x`` (torchvision)."""
    _check_image(image)
    return jnp.where(image >= threshold, 1.0 - image, image)


def hflip(image):
    """Mirror left-right (the width axis of an ``HWC`` image)."""
    _check_image(image)
    return image[:, ::-1, :]


def blur_radius(sigma: float, truncate: float = 4.0) -> int:
    """``scipy.ndimage``'s kernel radius ``int(truncate * sigma + 0.5)``."""
    return int(truncate * float(sigma) + 0.5)


def gaussian_kernel1d(sigma, radius: int):
    """Normalised taps ``exp(-k^2 / (2 sigma^2)) / Z`` for ``k = -radius..radius``.

    ``sigma`` may be traced; it is floored at ``1e-3`` so that ``sigma -> 0`` gives
    the delta kernel (the identity) instead of ``0/0``.
    """
    dt = float_dtype(sigma)
    k = jnp.arange(-radius, radius + 1, dtype=dt)
    s = jnp.maximum(jnp.asarray(sigma, dt), 1e-3)
    w = jnp.exp(-0.5 * jnp.square(k / s))
    return w / jnp.sum(w)


def _conv1d_axis(x, w, axis, radius, mode, cval):
    pad = [(0, 0)] * x.ndim
    pad[axis] = (radius, radius)
    if mode == "constant":
        xp = jnp.pad(x, pad, mode="constant", constant_values=cval)
    else:
        xp = jnp.pad(x, pad, mode=_PAD_MODES[mode])
    n = x.shape[axis]
    out = jnp.zeros_like(x)
    for t in range(2 * radius + 1):  # static, small: XLA fuses the shifted sum
        out = out + w[t] * jax.lax.slice_in_dim(xp, t, t + n, axis=axis)
    return out


def gaussian_blur(
    image, sigma, *, radius: int | None = None, truncate: float = 4.0, mode: str = "reflect", cval: float = 0.0
):
    """Separable Gaussian blur of an ``HWC`` image over ``H`` and ``W``.

    ``y[i, j] = sum_{a, b} w_a w_b x[i - a, j - b]`` with ``w`` from
    :func:`gaussian_kernel1d`; boundaries extended as ``scipy.ndimage`` ``mode``
    (``"reflect"``, ``"mirror"``, ``"nearest"``, ``"wrap"``, ``"constant"``), so
    ``gaussian_blur(x, s)`` equals ``scipy.ndimage.gaussian_filter(x, (s, s, 0))``.
    ``radius`` defaults to scipy's ``int(truncate * sigma + 0.5)``, which needs a
    concrete ``sigma``; pass ``radius`` explicitly when ``sigma`` is traced (inside
    ``jit``, ``vmap`` or ``jax.jvp`` in ``sigma``). Differentiable in ``sigma``.
    """
    _check_image(image)
    check_choice(mode, "mode", tuple(_PAD_MODES))
    if radius is None:
        if not is_concrete(sigma):
            raise ValueError(
                "`radius` must be given when `sigma` is traced (jit/vmap/jvp): the kernel "
                "size must be static, e.g. radius=blur_radius(max_sigma)."
            )
        check_positive(sigma, "sigma", strict=False)
        radius = blur_radius(sigma, truncate)
    if int(radius) < 0:
        raise ValueError(f"`radius` must be >= 0; got {radius}.")
    radius = int(radius)
    if radius == 0:
        return image
    w = gaussian_kernel1d(sigma, radius).astype(float_dtype(image))
    y = _conv1d_axis(image, w, 0, radius, mode, cval)
    return _conv1d_axis(y, w, 1, radius, mode, cval)


def rotate(image, angle, *, mode: str = "constant", cval: float = 0.0):
    """Rotate an ``HWC`` image by ``angle`` radians counter-clockwise (as displayed).

    Output pixel ``(r, c)`` samples the input bilinearly at
    ``(r', c') = centre + R(-angle)`` applied to ``(r, c) - centre`` in the
    display frame (x right, y up), centre ``((H-1)/2, (W-1)/2)``. Points outside
    the input are filled as ``jax.scipy.ndimage.map_coordinates`` ``mode``
    (``"constant"`` with ``cval``, ``"nearest"``, ``"reflect"``, ``"mirror"``,
    ``"wrap"``). ``rotate(x, 0) == x`` and, for a square image,
    ``rotate(x, pi/2) == np.rot90(x)``. Differentiable in ``angle``.
    """
    _check_image(image)
    check_choice(mode, "mode", ("constant", "nearest", "reflect", "mirror", "wrap"))
    H, W, _ = image.shape
    dt = float_dtype(image)
    angle = jnp.asarray(angle, dt)
    cy, cx = (H - 1) / 2.0, (W - 1) / 2.0
    rr, cc = jnp.meshgrid(jnp.arange(H, dtype=dt), jnp.arange(W, dtype=dt), indexing="ij")
    x, y = cc - cx, cy - rr  # display frame
    cos, sin = jnp.cos(angle), jnp.sin(angle)
    xs = cos * x + sin * y  # R(-angle) (x, y)
    ys = -sin * x + cos * y
    src_r, src_c = cy - ys, cx + xs

    def one_channel(ch):
        return jax.scipy.ndimage.map_coordinates(ch, [src_r, src_c], order=1, mode=mode, cval=cval)

    return jax.vmap(one_channel, in_axes=2, out_axes=2)(image)


def resample_matrix(out_size: int, in_size: int, start, length, antialias: bool, dtype):
    """Row-stochastic ``(out_size, in_size)`` linear-interpolation weights.

    Output pixel ``o`` has its centre at input coordinate
    ``u_o = start + (o + 1/2) length / out_size`` (pixel ``i`` covers ``[i, i+1)``);
    ``w[o, i] = k((i + 1/2 - u_o) a)`` with the triangle kernel ``k(t) = max(0, 1-|t|)``
    and ``a = min(1, out_size / length)`` when ``antialias`` (the kernel widens when
    downscaling, as ``jax.image.scale_and_translate`` and PIL), else ``a = 1``; rows
    are normalised to sum to one.
    """
    s = out_size / length
    u = start + (jnp.arange(out_size, dtype=dtype) + 0.5) / s
    a = jnp.minimum(s, 1.0) if antialias else jnp.ones_like(s)
    t = (jnp.arange(in_size, dtype=dtype)[None, :] + 0.5 - u[:, None]) * a
    w = jnp.maximum(0.0, 1.0 - jnp.abs(t))
    total = jnp.sum(w, axis=1, keepdims=True)
    return w / jnp.where(total > 0, total, 1.0)


def crop_and_resize(image, top, left, height, width, size: Sequence[int], *, antialias: bool = True):
    """Resample the window ``[top, top+height) x [left, left+width)`` to ``size``.

    Separable bilinear resampling ``y = R_y x R_x^T`` (see ``resample_matrix``;
    the same weights as ``jax.image.scale_and_translate(..., method="linear")``),
    antialiased when downscaling. The window may be traced (per-sample crops under
    ``vmap``); a window equal to the image and ``size`` equal to its size is the
    identity.
    """
    _check_image(image)
    oh, ow = int(size[0]), int(size[1])
    H, W, _ = image.shape
    dt = float_dtype(image)
    ry = resample_matrix(oh, H, jnp.asarray(top, dt), jnp.asarray(height, dt), antialias, dt)
    rx = resample_matrix(ow, W, jnp.asarray(left, dt), jnp.asarray(width, dt), antialias, dt)
    hi = jax.lax.Precision.HIGHEST
    y = jnp.einsum("oh,hwc->owc", ry, image, precision=hi)
    return jnp.einsum("pw,owc->opc", rx, y, precision=hi)


# ------------------------------------------------------------- random augmentations
#
# Each random operation draws all its randomness with ONE ``jax.random.uniform``
# call (the apply/skip decision included): every threefry call is inlined into the
# compiled program, so fewer calls compile markedly faster.


def _u(key, n):
    return jax.random.uniform(key, (n,), jnp.float32)


def _lerp(u, lo, hi, dtype):
    return jnp.asarray(lo, dtype) + u.astype(dtype) * jnp.asarray(hi - lo, dtype)


def random_flip(key, image, p: float = 0.5):
    """Horizontal flip with probability ``p``."""
    _check_image(image)
    return jnp.where(_u(key, 1)[0] < p, hflip(image), image)


def random_crop_window(key, height: int, width: int, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), trials: int = 10):
    """torchvision's ``RandomResizedCrop.get_params``: ``(top, left, h, w)`` int32.

    ``trials`` candidates with area ``H W U(scale)`` and aspect ``exp(U(log ratio))``;
    ``w = round(sqrt(area * aspect))``, ``h = round(sqrt(area / aspect))``; the first
    that fits is placed uniformly; if none fits, the whole image with the aspect
    clamped to ``ratio`` is centred.
    """
    if not (0 < scale[0] <= scale[1]):
        raise ValueError(f"`scale` must satisfy 0 < scale[0] <= scale[1]; got {scale}.")
    if not (0 < ratio[0] <= ratio[1]):
        raise ValueError(f"`ratio` must satisfy 0 < ratio[0] <= ratio[1]; got {ratio}.")
    u = _u(key, 2 * trials + 2)
    area = height * width * _lerp(u[:trials], scale[0], scale[1], jnp.float32)
    aspect = jnp.exp(_lerp(u[trials : 2 * trials], math.log(ratio[0]), math.log(ratio[1]), jnp.float32))
    w = jnp.round(jnp.sqrt(area * aspect)).astype(jnp.int32)
    h = jnp.round(jnp.sqrt(area / aspect)).astype(jnp.int32)
    ok = (w > 0) & (w <= width) & (h > 0) & (h <= height)
    idx = jnp.argmax(ok)
    h_t, w_t = h[idx], w[idx]
    top_t = jnp.minimum(jnp.floor(u[-2] * (height - h_t + 1)).astype(jnp.int32), height - h_t)
    left_t = jnp.minimum(jnp.floor(u[-1] * (width - w_t + 1)).astype(jnp.int32), width - w_t)
    # Fallback (static arithmetic on the static image size).
    in_ratio = width / height
    if in_ratio < ratio[0]:
        fw, fh = width, int(round(width / ratio[0]))
    elif in_ratio > ratio[1]:
        fh, fw = height, int(round(height * ratio[1]))
    else:
        fw, fh = width, height
    ftop, fleft = (height - fh) // 2, (width - fw) // 2
    any_ok = jnp.any(ok)
    pick = lambda a, b: jnp.where(any_ok, a, jnp.int32(b))
    return pick(top_t, ftop), pick(left_t, fleft), pick(h_t, fh), pick(w_t, fw)


def random_resized_crop(key, image, size: Sequence[int] | int | None = None, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """RandomResizedCrop: a :func:`random_crop_window` resampled bilinearly to ``size``.

    ``size`` defaults to the input size. With ``scale=(1, 1)`` and ``ratio=(1, 1)`` on
    a square image it is the identity.
    """
    _check_image(image)
    H, W, _ = image.shape
    if size is None:
        size = (H, W)
    elif isinstance(size, int):
        size = (size, size)
    top, left, h, w = random_crop_window(key, H, W, scale, ratio)
    return crop_and_resize(image, top, left, h, w, size)


def random_color_jitter(
    key, image, brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1, *, random_order: bool = True, p: float = 1.0
):
    """torchvision ``ColorJitter`` applied with probability ``p``.

    Factors ``~ U[max(0, 1-s), 1+s]`` for brightness, contrast and saturation, hue
    shift ``~ U[-h, h]``. With ``random_order`` the four operations run in a
    uniformly random order (``torch.randperm(4)`` in torchvision; here the argsort
    of four uniforms); otherwise brightness, contrast, saturation, hue. A strength
    of 0 skips that operation.
    """
    check_rgb(image)
    if not 0 <= hue <= 0.5:
        raise ValueError(f"`hue` must be in [0, 0.5]; got {hue}.")
    for name, s in (("brightness", brightness), ("contrast", contrast), ("saturation", saturation)):
        if s < 0:
            raise ValueError(f"`{name}` must be >= 0; got {s}.")
    dt = float_dtype(image)
    u = _u(key, 9)
    fb = _lerp(u[0], max(0.0, 1 - brightness), 1 + brightness, dt)
    fc = _lerp(u[1], max(0.0, 1 - contrast), 1 + contrast, dt)
    fs = _lerp(u[2], max(0.0, 1 - saturation), 1 + saturation, dt)
    fh = _lerp(u[3], -hue, hue, dt)
    ops = [
        lambda x: adjust_brightness(x, fb),
        lambda x: adjust_contrast(x, fc),
        lambda x: adjust_saturation(x, fs),
        lambda x: adjust_hue(x, fh),
    ]
    strengths = (brightness, contrast, saturation, hue)
    out = image
    if not random_order:
        for op, s in zip(ops, strengths):
            if s > 0:
                out = op(out)
    else:
        order = jnp.argsort(u[4:8])
        branches = [op if s > 0 else (lambda x: x) for op, s in zip(ops, strengths)]
        # One loop body (compiled once) applying operation order[t].
        out = jax.lax.fori_loop(0, 4, lambda t, x: jax.lax.switch(order[t], branches, x), out)
    if p >= 1:
        return out
    return jnp.where(u[8] < p, out, image)


def random_apply(key, image, fn: Callable, p: float):
    """``fn(k, image)`` with probability ``p`` (``k`` a fresh key), else ``image``."""
    if p <= 0:
        return image
    k_apply, k_fn = jax.random.split(key)
    out = fn(k_fn, image)
    if p >= 1:
        return out
    return jnp.where(_u(k_apply, 1)[0] < p, out, image)


def random_grayscale(key, image, p: float = 0.2):
    """Replace the image by its grey level (replicated to 3 channels) with probability ``p``."""
    check_rgb(image)
    gray = jnp.broadcast_to(grayscale(image), image.shape)
    return jnp.where(_u(key, 1)[0] < p, gray, image)


def random_gaussian_blur(key, image, sigma=(0.1, 2.0), *, radius: int | None = None, p: float = 0.5):
    """Gaussian blur with ``sigma ~ U(sigma)`` with probability ``p``.

    ``radius`` defaults to SimCLR's kernel of 10% of the image side:
    ``max(1, int(0.1 min(H, W)) // 2)`` (torchvision ``GaussianBlur(23)`` at 224).
    """
    _check_image(image)
    if radius is None:
        radius = max(1, int(0.1 * min(image.shape[0], image.shape[1])) // 2)
    u = _u(key, 2)
    out = gaussian_blur(image, _lerp(u[0], sigma[0], sigma[1], float_dtype(image)), radius=radius)
    if p >= 1:
        return out
    return jnp.where(u[1] < p, out, image)


def random_solarize(key, image, threshold: float = 0.5, p: float = 0.2):
    """:func:`solarize` with probability ``p`` (BYOL: threshold 0.5, p 0.2 on view 2)."""
    return jnp.where(_u(key, 1)[0] < p, solarize(image, threshold), image)


def random_rotation(key, image, max_angle: float, *, mode: str = "constant", cval: float = 0.0):
    """:func:`rotate` by ``angle ~ U[-max_angle, max_angle]`` radians."""
    angle = _lerp(_u(key, 1)[0], -max_angle, max_angle, float_dtype(image))
    return rotate(image, angle, mode=mode, cval=cval)


def batch_augment(key, images, fn: Callable, *args, **kwargs):
    """Apply the single-image ``fn(k, image, *args, **kwargs)`` to every image of ``images``.

    Sample ``i`` uses key ``jax.random.split(key, N)[i]``, so results are
    deterministic in ``key`` and differ across the batch.
    """
    check_rank(images, "images", 4)
    keys = jax.random.split(key, images.shape[0])
    return jax.vmap(lambda k, x: fn(k, x, *args, **kwargs))(keys, images)


__all__ = [
    "to_float",
    "normalize",
    "grayscale",
    "rgb_to_hsv",
    "hsv_to_rgb",
    "adjust_brightness",
    "adjust_contrast",
    "adjust_saturation",
    "adjust_hue",
    "solarize",
    "hflip",
    "blur_radius",
    "gaussian_kernel1d",
    "gaussian_blur",
    "rotate",
    "crop_and_resize",
    "random_flip",
    "random_crop_window",
    "random_resized_crop",
    "random_color_jitter",
    "random_apply",
    "random_grayscale",
    "random_gaussian_blur",
    "random_solarize",
    "random_rotation",
    "batch_augment",
    "GRAY_WEIGHTS",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "CIFAR10_MEAN",
    "CIFAR10_STD",
]
