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

Also exported, by kind:

* pixel operations -- :func:`normalize`, :func:`grayscale` (weights :data:`GRAY_WEIGHTS`),
  :func:`rgb_to_hsv`, :func:`hsv_to_rgb`, :func:`solarize`, :func:`hflip`, :func:`crop_and_resize`, and the
  blur's :func:`gaussian_kernel1d` and :func:`blur_radius`;
* random augmentations -- :func:`random_apply`, :func:`random_flip`, :func:`random_crop_window`,
  :func:`random_resized_crop`, :func:`random_color_jitter`, :func:`random_grayscale`,
  :func:`random_gaussian_blur`, :func:`random_solarize`, :func:`random_rotation`;
* views as configs -- :class:`AugmentConfig` applied by :func:`augment_image`, the presets
  :data:`SIMCLR_IMAGENET`, :data:`SIMCLR_CIFAR`, :data:`BYOL_VIEW1`, :data:`BYOL_VIEW2`, and the channel
  statistics :data:`IMAGENET_MEAN`, :data:`IMAGENET_STD`, :data:`CIFAR10_MEAN`, :data:`CIFAR10_STD`.
"""

from ssl_geometry._src.ssl.augment.pipelines import BYOL_VIEW1 as BYOL_VIEW1
from ssl_geometry._src.ssl.augment.pipelines import BYOL_VIEW2 as BYOL_VIEW2
from ssl_geometry._src.ssl.augment.pipelines import SIMCLR_CIFAR as SIMCLR_CIFAR
from ssl_geometry._src.ssl.augment.pipelines import SIMCLR_IMAGENET as SIMCLR_IMAGENET
from ssl_geometry._src.ssl.augment.pipelines import AugmentConfig as AugmentConfig
from ssl_geometry._src.ssl.augment.pipelines import augment_image as augment_image
from ssl_geometry._src.ssl.augment.pipelines import orbit as orbit
from ssl_geometry._src.ssl.augment.pipelines import orbit_tangents as orbit_tangents
from ssl_geometry._src.ssl.augment.pipelines import simclr_augment as simclr_augment
from ssl_geometry._src.ssl.augment.pipelines import simsiam_cifar_augment as simsiam_cifar_augment
from ssl_geometry._src.ssl.augment.pipelines import two_views as two_views
from ssl_geometry._src.ssl.augment.primitives import CIFAR10_MEAN as CIFAR10_MEAN
from ssl_geometry._src.ssl.augment.primitives import CIFAR10_STD as CIFAR10_STD
from ssl_geometry._src.ssl.augment.primitives import GRAY_WEIGHTS as GRAY_WEIGHTS
from ssl_geometry._src.ssl.augment.primitives import IMAGENET_MEAN as IMAGENET_MEAN
from ssl_geometry._src.ssl.augment.primitives import IMAGENET_STD as IMAGENET_STD
from ssl_geometry._src.ssl.augment.primitives import adjust_brightness as adjust_brightness
from ssl_geometry._src.ssl.augment.primitives import adjust_contrast as adjust_contrast
from ssl_geometry._src.ssl.augment.primitives import adjust_hue as adjust_hue
from ssl_geometry._src.ssl.augment.primitives import adjust_saturation as adjust_saturation
from ssl_geometry._src.ssl.augment.primitives import batch_augment as batch_augment
from ssl_geometry._src.ssl.augment.primitives import blur_radius as blur_radius
from ssl_geometry._src.ssl.augment.primitives import crop_and_resize as crop_and_resize
from ssl_geometry._src.ssl.augment.primitives import gaussian_blur as gaussian_blur
from ssl_geometry._src.ssl.augment.primitives import gaussian_kernel1d as gaussian_kernel1d
from ssl_geometry._src.ssl.augment.primitives import grayscale as grayscale
from ssl_geometry._src.ssl.augment.primitives import hflip as hflip
from ssl_geometry._src.ssl.augment.primitives import hsv_to_rgb as hsv_to_rgb
from ssl_geometry._src.ssl.augment.primitives import normalize as normalize
from ssl_geometry._src.ssl.augment.primitives import random_apply as random_apply
from ssl_geometry._src.ssl.augment.primitives import random_color_jitter as random_color_jitter
from ssl_geometry._src.ssl.augment.primitives import random_crop_window as random_crop_window
from ssl_geometry._src.ssl.augment.primitives import random_flip as random_flip
from ssl_geometry._src.ssl.augment.primitives import random_gaussian_blur as random_gaussian_blur
from ssl_geometry._src.ssl.augment.primitives import random_grayscale as random_grayscale
from ssl_geometry._src.ssl.augment.primitives import random_resized_crop as random_resized_crop
from ssl_geometry._src.ssl.augment.primitives import random_rotation as random_rotation
from ssl_geometry._src.ssl.augment.primitives import random_solarize as random_solarize
from ssl_geometry._src.ssl.augment.primitives import rgb_to_hsv as rgb_to_hsv
from ssl_geometry._src.ssl.augment.primitives import rotate as rotate
from ssl_geometry._src.ssl.augment.primitives import solarize as solarize
from ssl_geometry._src.ssl.augment.primitives import to_float as to_float

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
