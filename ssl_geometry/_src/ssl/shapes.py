"""The embedded ``"shapes"`` data set: procedurally rendered shapes with known nuisance factors.

``num_classes`` (<= 8) shape classes (:data:`SHAPE_NAMES`, signed-distance functions)
rendered at a random rotation angle, scale, position, foreground hue, background hue and
blur (:data:`FACTOR_NAMES`, ranges in :class:`ShapesConfig`). :func:`render_shapes`
re-renders any image from its label and factors, differentiably in the factors, so
tangents of the true nuisance orbits are available (``jax.jvp`` in a factor).
Split out of :mod:`ssl_geometry.data`, which re-exports every public name.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ssl_geometry._src.checks import check_int
from ssl_geometry._src.ssl.augment import primitives as _aug
from ssl_geometry._src.ssl.dataset import Dataset

__all__ = [
    "SHAPE_NAMES",
    "FACTOR_NAMES",
    "ShapesConfig",
    "render_shape",
    "render_shapes",
    "shapes_factors",
    "to_uint8",
    "make_shapes",
]


SHAPE_NAMES = ("disk", "square", "triangle", "plus", "ring", "ell", "bar", "half_disk")
FACTOR_NAMES = ("angle", "scale", "tx", "ty", "hue", "bg_hue", "blur")


class ShapesConfig(NamedTuple):
    """Ranges of the uniform nuisance factors of ``"shapes"``.

    ``angle`` in radians (counter-clockwise); ``scale``: shape radius as a fraction of
    the half image side; ``shift``: centre offset, same unit, in ``[-shift, shift]``;
    foreground / background hues uniform in ``[0, 1)`` (saturation, value fixed at
    (0.85, 0.95) and (0.35, 0.3)); ``blur``: Gaussian sigma in pixels.
    """

    angle: tuple = (-math.pi / 4, math.pi / 4)
    scale: tuple = (0.45, 0.75)
    shift: float = 0.2
    blur: tuple = (0.0, 1.0)
    fg_sv: tuple = (0.85, 0.95)
    bg_sv: tuple = (0.35, 0.3)


def _norm2(x, y):
    """``sqrt(x^2 + y^2)`` with a finite gradient at the origin."""
    r2 = x * x + y * y
    return jnp.where(r2 > 0, jnp.sqrt(jnp.where(r2 > 0, r2, 1.0)), 0.0)


def _box(x, y, bx, by):
    dx, dy = jnp.abs(x) - bx, jnp.abs(y) - by
    return _norm2(jnp.maximum(dx, 0.0), jnp.maximum(dy, 0.0)) + jnp.minimum(jnp.maximum(dx, dy), 0.0)


def _triangle(x, y, r=0.85):
    """Signed distance to the equilateral triangle with vertices (+-r, -r/sqrt3), (0, 2r/sqrt3)."""
    k = math.sqrt(3.0)
    px, py = jnp.abs(x) - r, y + r / k
    fold = px + k * py > 0
    px, py = jnp.where(fold, (px - k * py) / 2, px), jnp.where(fold, (-k * px - py) / 2, py)
    px = px - jnp.clip(px, -2 * r, 0.0)
    return -_norm2(px, py) * jnp.sign(py)


def _sdf(label, x, y):
    """Signed distance (shape units, radius ~1) of every class; selects ``label``."""
    sdfs = jnp.stack(
        [
            _norm2(x, y) - 0.9,
            _box(x, y, 0.75, 0.75),
            _triangle(x, y),
            jnp.minimum(_box(x, y, 0.9, 0.3), _box(x, y, 0.3, 0.9)),
            jnp.abs(_norm2(x, y) - 0.7) - 0.22,
            jnp.minimum(_box(x + 0.45, y, 0.3, 0.9), _box(x, y + 0.6, 0.75, 0.3)),
            _box(x, y, 0.95, 0.35),
            jnp.maximum(_norm2(x, y + 0.4) - 0.95, -(y + 0.4)),
        ]
    )
    return jnp.take(sdfs, label, axis=0)


def _hsv_color(h, s, v):
    return _aug.hsv_to_rgb(jnp.stack([h, jnp.full_like(h, s), jnp.full_like(h, v)], -1))


def render_shape(
    label, factors: dict, image_size: int = 32, *, config: ShapesConfig = ShapesConfig(), max_blur: float | None = None
):
    """Render one image (float ``(S, S, 3)`` in ``[0, 1]``) from a label and its factors.

    Pixel centres ``p`` in ``[-1, 1]^2`` (x right, y up); shape coordinates
    ``q = R(-angle) (p - (tx, ty)) / scale``; coverage ``clip(1/2 - d S scale / 2, 0, 1)``
    with ``d`` the signed distance of the class's shape at ``q`` (one-pixel
    anti-aliasing ramp); colour ``bg + coverage (fg - bg)`` with
    ``fg = hsv(hue, *fg_sv)``, ``bg = hsv(bg_hue, *bg_sv)``; then
    :func:`ssl_geometry.augment.gaussian_blur` with sigma ``blur`` (kernel radius
    fixed by ``max_blur``, default ``config.blur[1]``). Smooth almost everywhere in
    every factor, so ``jax.jvp`` in a factor gives the true orbit tangent.
    """
    dt = jnp.result_type(factors["angle"])
    dt = dt if jnp.issubdtype(dt, jnp.floating) else jnp.float32
    S = int(image_size)
    c = (jnp.arange(S, dtype=dt) + 0.5) / S * 2 - 1
    px, py = jnp.meshgrid(c, -c, indexing="xy")  # py: +1 at the top row
    ang, sc = factors["angle"], factors["scale"]
    dx, dy = px - factors["tx"], py - factors["ty"]
    cos, sin = jnp.cos(ang), jnp.sin(ang)
    qx, qy = (cos * dx + sin * dy) / sc, (-sin * dx + cos * dy) / sc
    d = _sdf(label, qx, qy)
    cover = jnp.clip(0.5 - d * sc * S / 2, 0.0, 1.0)[..., None]
    fg = _hsv_color(factors["hue"], *config.fg_sv)
    bg = _hsv_color(factors["bg_hue"], *config.bg_sv)
    img = bg + cover * (fg - bg)
    max_blur = config.blur[1] if max_blur is None else max_blur
    radius = _aug.blur_radius(max_blur)
    if radius > 0:
        img = _aug.gaussian_blur(img, factors["blur"], radius=radius, mode="nearest")
    return img


@functools.partial(jax.jit, static_argnames=("image_size", "config"))
def _render_batch(labels, factors, image_size, config):
    return jax.vmap(lambda lab, f: render_shape(lab, f, image_size, config=config))(labels, factors)


def render_shapes(labels, factors: dict, image_size: int = 32, *, config: ShapesConfig = ShapesConfig()):
    """:func:`render_shape` vmapped over a batch (jitted): float ``(n, S, S, 3)`` in ``[0, 1]``.

    ``factors`` maps every name of :data:`FACTOR_NAMES` to an ``(n,)`` array; the
    dtype of ``factors["angle"]`` sets the rendering precision.
    """
    missing = [k for k in FACTOR_NAMES if k not in factors]
    if missing:
        raise ValueError(f"`factors` lacks {missing}; expected the keys {list(FACTOR_NAMES)}.")
    return _render_batch(
        jnp.asarray(labels), {k: jnp.asarray(factors[k]) for k in FACTOR_NAMES}, int(image_size), config
    )


def shapes_factors(num_examples: int, num_classes: int = 8, *, seed: int = 0, config: ShapesConfig = ShapesConfig()):
    """Labels (balanced: ``i mod K``, shuffled) and factors ``{name: float64 (n,)}`` from ``seed``."""
    rng = np.random.default_rng(np.random.SeedSequence([int(seed) & 0xFFFFFFFF, 0x5A4E]))
    labels = rng.permutation(np.arange(num_examples) % num_classes).astype(np.int32)
    u = lambda lo, hi: rng.uniform(lo, hi, num_examples)
    factors = {
        "angle": u(*config.angle),
        "scale": u(*config.scale),
        "tx": u(-config.shift, config.shift),
        "ty": u(-config.shift, config.shift),
        "hue": u(0.0, 1.0),
        "bg_hue": u(0.0, 1.0),
        "blur": u(*config.blur),
    }
    return labels, factors


def to_uint8(images) -> np.ndarray:
    """Float images in ``[0, 1]`` -> uint8 by ``round(255 x)`` (clipped)."""
    return np.asarray(np.clip(np.round(np.asarray(images, np.float64) * 255.0), 0, 255), np.uint8)


def make_shapes(
    num_examples: int = 10_000,
    *,
    num_classes: int = 8,
    image_size: int = 32,
    seed: int = 0,
    config: ShapesConfig = ShapesConfig(),
    chunk: int = 2048,
):
    """The procedural ``"shapes"`` set: deterministic in ``seed`` (rendered in float32 on CPU).

    Classes are the first ``num_classes`` of :data:`SHAPE_NAMES`, balanced; the
    factors of :func:`shapes_factors` are returned in ``Dataset.factors`` (float32,
    the values the images were rendered from).
    """
    num_examples = check_int(num_examples, "num_examples", 1)
    image_size = check_int(image_size, "image_size", 4)
    if not 2 <= num_classes <= len(SHAPE_NAMES):
        raise ValueError(f"`num_classes` must be in [2, {len(SHAPE_NAMES)}]; got {num_classes}.")
    labels, factors = shapes_factors(num_examples, num_classes, seed=seed, config=config)
    factors = {k: v.astype(np.float32) for k, v in factors.items()}
    out = np.empty((num_examples, image_size, image_size, 3), np.uint8)
    cpu = jax.local_devices(backend="cpu")[0]  # this process's own (multi-process safe)
    with jax.default_device(cpu):
        for s in range(0, num_examples, chunk):
            sl = slice(s, s + chunk)
            n = labels[sl].shape[0]
            pad = chunk - n if num_examples > chunk else 0  # one compiled shape for all chunks
            lab = np.pad(labels[sl], (0, pad))
            fac = {k: np.pad(v[sl], (0, pad), mode="edge") for k, v in factors.items()}
            imgs = render_shapes(lab, fac, image_size, config=config)
            out[sl] = to_uint8(imgs)[:n]
    return Dataset(out, labels, factors, num_classes, "shapes")
