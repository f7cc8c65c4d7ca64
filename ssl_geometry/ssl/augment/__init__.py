"""On-device image augmentations in pure JAX (jit + vmap, per-sample keys).

Modules: :mod:`.primitives` (deterministic ops and their random draws), :mod:`.pipelines`
(SimCLR / SimSiam pipelines, two views, orbits); this namespace holds every name.

Conventions
-----------
* Images are float arrays in ``[0, 1]``, layout ``HWC`` for a single image and
  ``NHWC`` for a batch; channels are RGB (``C = 3`` for the colour operations).
  :func:`to_float` turns the ``uint8`` batches of :mod:`ssl_geometry.data` into
  ``float32`` in ``[0, 1]``.
* **Deterministic, differentiable primitives** take one image and a continuous
  parameter and are smooth (almost everywhere) in that parameter, so an orbit
  ``t -> g_t(x)`` and its tangent ``d/dt g_t(x)`` (``jax.jvp`` in ``t``) come from
  the same code (:func:`orbit`, :func:`orbit_tangents`):

  - :func:`rotate` ``(image, angle)``: rotation by ``angle`` **radians**,
    counter-clockwise as displayed (row 0 at the top), about the image centre
    ``((H-1)/2, (W-1)/2)``, bilinear. ``rotate(x, pi/2)`` equals ``np.rot90(x)``.
  - :func:`adjust_hue` ``(image, delta)``: ``h -> (h + delta) mod 1`` in HSV
    (``delta`` in turns, torchvision's ``hue_factor``; ``delta = 1`` is a full turn).
  - :func:`adjust_saturation` ``(image, factor)``: ``clip(f x + (1-f) gray(x))``.
  - :func:`adjust_brightness` ``(image, factor)``: ``clip(f x)``.
  - :func:`adjust_contrast` ``(image, factor)``: ``clip(f x + (1-f) mean(gray(x)))``.
  - :func:`gaussian_blur` ``(image, sigma)``: separable Gaussian, weights
    ``exp(-k^2 / (2 sigma^2))`` normalised over ``|k| <= radius``, boundary modes
    as ``scipy.ndimage`` (default ``"reflect"``: ``d c b a | a b c d``).

  ``gray(x) = 0.2989 R + 0.587 G + 0.114 B`` (torchvision's ``rgb_to_grayscale``).
* **Random augmentations** take ``(key, image, ...)`` for one image; batch them
  with :func:`batch_augment` (``vmap`` over ``jax.random.split(key, N)``), so every
  sample of a batch gets its own key and the same key always gives the same result.
* **Pipelines** :func:`simclr_augment`, :func:`simsiam_cifar_augment` take
  ``(key, images)`` for a batch and are jitted; :func:`two_views` draws two
  independent views.

Colour jitter follows torchvision's ``ColorJitter``: the four operations are
applied in an order drawn uniformly at random per sample (``random_order=True``,
the default) or in the fixed order brightness, contrast, saturation, hue; each
factor is drawn uniformly from ``[max(0, 1 - s), 1 + s]`` (hue from ``[-h, h]``).

Random resized crop follows torchvision's ``RandomResizedCrop.get_params``
(10 trials of area fraction ``~ U(scale)`` and log-aspect ``~ U(log ratio)``,
rounded integer sizes, fallback to the centre crop with the ratio clamped) and
resamples the crop with ``jax.image.scale_and_translate`` (bilinear, antialiased
when downscaling, as torchvision's ``antialias=True``).
"""
from ssl_geometry.ssl.augment.pipelines import *  # noqa: F401,F403
from ssl_geometry.ssl.augment.pipelines import __all__ as _pipelines_all
from ssl_geometry.ssl.augment.primitives import *  # noqa: F401,F403
from ssl_geometry.ssl.augment.primitives import _resample_matrix  # noqa: F401  (used by ssl.data)
from ssl_geometry.ssl.augment.primitives import __all__ as _primitives_all

__all__ = [*_primitives_all, *_pipelines_all]
