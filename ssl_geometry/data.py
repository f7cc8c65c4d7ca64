"""Data sets as ``uint8`` NHWC numpy batches, with resumable, seed-deterministic order.

Two kinds of source, one name space (:data:`DATASETS`, :func:`info`):

* **Embedded, offline** (no download, generated or shipped with an installed package),
  loaded into memory as a :class:`Dataset`:

  - ``"shapes"``: procedurally rendered shapes (:func:`make_shapes`): ``num_classes``
    (<= 8) shape classes rendered at a random rotation angle, scale, position,
    foreground hue, background hue and blur. The per-image nuisance factors are
    returned (``Dataset.factors``) and :func:`render_shapes` re-renders any image
    from its label and factors -- differentiably in the factors, so tangents of
    the *true* nuisance orbits are available (``jax.jvp`` in a factor). Colour is
    drawn independently of the class, so classes are not separable by colour.
  - ``"digits"``: scikit-learn's 8x8 handwritten digits (1797 images,
    ``sklearn.datasets.load_digits``), resized bilinearly to ``image_size`` and
    replicated to 3 channels, with a fixed stratified-by-permutation train/test split.

* **tensorflow-datasets** (must be prepared on disk beforehand; never downloaded
  implicitly): ``"cifar10"``, ``"cifar100"``, ``"stl10"``, ``"imagenette"``
  (tfds ``imagenette/320px-v2``), ``"imagenet2012"``. Read from ``data_dir`` (default:
  tfds's, ``$TFDS_DATA_DIR`` or ``~/tensorflow_datasets``). Images are resized so
  that the shorter side is ``image_size`` and centre-cropped to a square (bilinear,
  antialiased); a data set's default ``image_size`` is its native size for CIFAR/STL,
  160 for Imagenette, 224 for ImageNet. When the data is absent a
  :class:`DataNotFoundError` says how to prepare it.

By name: :func:`load` (an in-memory :class:`Dataset`), :func:`make_batches` (a :class:`BatchIterator`),
:class:`DatasetInfo` (via :func:`info`); the sources :func:`make_digits`, :func:`load_tfds` and the shapes
renderer's parts (:class:`ShapesConfig`, :func:`shapes_factors`, :func:`render_shape`, the names
:data:`SHAPE_NAMES` and :data:`FACTOR_NAMES`); :func:`subset`, :func:`to_uint8`, :func:`epoch_order`
(the order of one epoch) and :func:`process_split` (this process's part of a tfds split).

Iteration and resume
--------------------
:func:`batches` (in-memory) and :func:`tfds_batches` (tfds) return a
:class:`BatchIterator` that yields dicts ``{"image": uint8 (B, H, W, 3),
"label": int32 (B,)}`` (in-memory sets add ``"index"``: positions in the
:class:`Dataset`, to look up ``factors``); every batch has exactly ``batch_size``
examples (``drop_remainder``). Its :attr:`BatchIterator.position` is a
:class:`Position` ``(epoch, step)``: the epoch and the number of batches of that
epoch already yielded, i.e. the position of the *next* batch. The order of an
epoch is a pure function of ``(seed, epoch, process_index)``, so
``batches(..., position=it.position)`` (or ``Position(**saved_dict)``) re-creates
the iterator exactly where it was: checkpoint ``it.position._asdict()`` next to the
model and pass it back as ``position=`` on resume. (tfds: the epoch pipeline is
rebuilt with the same shuffle seeds and the first ``step * batch_size`` examples are
skipped before image decoding, so resuming costs reading, not decoding, them.)

Multi-host: with ``process_count > 1`` each process reads a disjoint part --
``tfds.even_splits(split, process_count, drop_remainder=True)[process_index]`` for
tfds (what ``tfds.split_for_jax_process`` does), and for in-memory sets the slice
``[p B, (p+1) B)`` of every global batch of ``process_count * B`` examples drawn from
one permutation shared by all processes. ``process_index`` / ``process_count``
default to ``jax.process_index()`` / ``jax.process_count()``; ``batch_size`` is per
process.
"""

from ssl_geometry._src.ssl.data import DATASETS as DATASETS
from ssl_geometry._src.ssl.data import BatchIterator as BatchIterator
from ssl_geometry._src.ssl.data import DataNotFoundError as DataNotFoundError
from ssl_geometry._src.ssl.data import DatasetInfo as DatasetInfo
from ssl_geometry._src.ssl.data import Position as Position
from ssl_geometry._src.ssl.data import batches as batches
from ssl_geometry._src.ssl.data import epoch_order as epoch_order
from ssl_geometry._src.ssl.data import info as info
from ssl_geometry._src.ssl.data import load as load
from ssl_geometry._src.ssl.data import load_tfds as load_tfds
from ssl_geometry._src.ssl.data import make_batches as make_batches
from ssl_geometry._src.ssl.data import process_split as process_split
from ssl_geometry._src.ssl.data import subset as subset
from ssl_geometry._src.ssl.data import tfds_batches as tfds_batches
from ssl_geometry._src.ssl.dataset import Dataset as Dataset
from ssl_geometry._src.ssl.digits import make_digits as make_digits
from ssl_geometry._src.ssl.shapes import FACTOR_NAMES as FACTOR_NAMES
from ssl_geometry._src.ssl.shapes import SHAPE_NAMES as SHAPE_NAMES
from ssl_geometry._src.ssl.shapes import ShapesConfig as ShapesConfig
from ssl_geometry._src.ssl.shapes import make_shapes as make_shapes
from ssl_geometry._src.ssl.shapes import render_shape as render_shape
from ssl_geometry._src.ssl.shapes import render_shapes as render_shapes
from ssl_geometry._src.ssl.shapes import shapes_factors as shapes_factors
from ssl_geometry._src.ssl.shapes import to_uint8 as to_uint8

__all__ = [
    "Dataset",
    "BatchIterator",
    "DATASETS",
    "DataNotFoundError",
    "DatasetInfo",
    "Position",
    "batches",
    "epoch_order",
    "info",
    "load",
    "load_tfds",
    "make_batches",
    "make_digits",
    "process_split",
    "subset",
    "tfds_batches",
    "SHAPE_NAMES",
    "FACTOR_NAMES",
    "ShapesConfig",
    "render_shape",
    "render_shapes",
    "shapes_factors",
    "to_uint8",
    "make_shapes",
]
