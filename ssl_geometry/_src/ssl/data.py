"""Data sets as ``uint8`` NHWC numpy batches, with resumable, seed-deterministic order.

Implementation of :mod:`ssl_geometry.data`; the conventions and formulas are in its docstring.
"""

from __future__ import annotations

import os
from typing import Callable, Iterator, NamedTuple

import jax
import numpy as np

from ssl_geometry._src.checks import check_choice, check_int, optional_import
from ssl_geometry._src.ssl.dataset import Dataset
from ssl_geometry._src.ssl.digits import make_digits
from ssl_geometry._src.ssl.shapes import make_shapes

__all__ = [
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
    "process_split",
    "subset",
    "tfds_batches",
]


class DataNotFoundError(FileNotFoundError):
    """A tfds data set is not prepared in ``data_dir`` (nothing is downloaded implicitly)."""


class Position(NamedTuple):
    """Position of the next batch: ``epoch`` and batches already yielded in it (``step``)."""

    epoch: int = 0
    step: int = 0


class DatasetInfo(NamedTuple):
    """Static description of a named data set."""

    name: str
    num_classes: int
    image_size: int | None  # default output side (None: native size kept)
    splits: tuple
    source: str  # "embedded" or "tfds:<tfds name>"


DATASETS = {
    "shapes": DatasetInfo("shapes", 8, 32, ("train", "test"), "embedded"),
    "digits": DatasetInfo("digits", 10, 32, ("train", "test"), "embedded"),
    "cifar10": DatasetInfo("cifar10", 10, None, ("train", "test"), "tfds:cifar10"),
    "cifar100": DatasetInfo("cifar100", 100, None, ("train", "test"), "tfds:cifar100"),
    "stl10": DatasetInfo("stl10", 10, None, ("train", "test", "unlabelled"), "tfds:stl10"),
    "imagenette": DatasetInfo("imagenette", 10, 160, ("train", "validation"), "tfds:imagenette/320px-v2"),
    "imagenet2012": DatasetInfo("imagenet2012", 1000, 224, ("train", "validation"), "tfds:imagenet2012"),
}


def info(name: str) -> DatasetInfo:
    """The :class:`DatasetInfo` of a named data set (see :data:`DATASETS`)."""
    check_choice(name, "dataset name", tuple(DATASETS))
    return DATASETS[name]


def _check_split(name: str, split: str) -> None:
    base = split.split("[")[0].split("+")[0]
    if DATASETS[name].source == "embedded":
        check_choice(split, f"split of {name!r}", DATASETS[name].splits)
    elif base not in DATASETS[name].splits:
        raise ValueError(
            f"Unknown split {split!r} of {name!r}; expected one of {list(DATASETS[name].splits)} "
            "(tfds slicing such as 'train[:90%]' is allowed)."
        )


def _processes(process_index, process_count):
    pi = jax.process_index() if process_index is None else process_index
    pc = jax.process_count() if process_count is None else process_count
    pc = check_int(pc, "process_count", 1)
    pi = check_int(pi, "process_index", 0)
    if pi >= pc:
        raise ValueError(f"`process_index` must be < process_count={pc}; got {pi}.")
    return pi, pc


def _epoch_seed(seed: int, epoch: int, process_index: int = 0) -> int:
    """A 31-bit seed that is a pure function of ``(seed, epoch, process_index)``."""
    state = np.random.SeedSequence([int(seed) & 0xFFFFFFFF, int(epoch), int(process_index)])
    return int(state.generate_state(1)[0] & 0x7FFFFFFF)


# ------------------------------------------------------------------ the iterator


class BatchIterator:
    """Resumable iterator over ``(epoch, step)`` positions.

    ``make_epoch(epoch, start_step)`` returns an iterator over the batches of
    ``epoch`` starting at batch ``start_step``; it must be a pure function of its
    arguments (the data order is fixed by the seed). Iteration stops after
    ``num_epochs`` epochs (``None``: never). :attr:`position` is the position of
    the next batch; re-create the iterator with ``position=`` to resume.
    """

    def __init__(
        self,
        make_epoch: Callable[[int, int], Iterator[dict]],
        *,
        position: Position = Position(),
        num_epochs: int | None = None,
        steps_per_epoch: int | None = None,
        description: str = "",
    ):
        position = Position(*position) if not isinstance(position, Position) else position
        check_int(position.epoch, "position.epoch", 0)
        check_int(position.step, "position.step", 0)
        if num_epochs is not None:
            check_int(num_epochs, "num_epochs", 1)
        self._make_epoch = make_epoch
        self._num_epochs = num_epochs
        self.steps_per_epoch = steps_per_epoch
        self.description = description
        self._position = self._normalise(position)
        self._it: Iterator[dict] | None = None

    def _normalise(self, pos: Position) -> Position:
        spe = self.steps_per_epoch
        if spe and pos.step >= spe:
            return Position(pos.epoch + pos.step // spe, pos.step % spe)
        return pos

    @property
    def position(self) -> Position:
        """``(epoch, step)`` of the next batch."""
        return self._position

    def state(self) -> dict:
        """``{"epoch": int, "step": int}``: the position as a JSON/orbax-friendly dict."""
        return dict(self._position._asdict())

    def __iter__(self):
        return self

    def __next__(self) -> dict:
        empty_epochs = 0
        while True:
            epoch, step = self._position
            if self._num_epochs is not None and epoch >= self._num_epochs:
                raise StopIteration
            if self._it is None:
                self._it = iter(self._make_epoch(epoch, step))
            try:
                batch = next(self._it)
            except StopIteration:
                self._it = None
                if step == 0:
                    empty_epochs += 1
                    if empty_epochs > 1:
                        raise ValueError(
                            f"{self.description or 'the data'} yields no full batch in an epoch "
                            "(fewer examples per process than batch_size)."
                        ) from None
                self._position = Position(epoch + 1, 0)
                continue
            self._position = self._normalise(Position(epoch, step + 1))
            if self._position.step == 0:
                self._it = None  # epoch finished: the next call builds the next one
            return batch


# ----------------------------------------------------------- in-memory iteration


def epoch_order(n: int, seed: int, epoch: int, shuffle: bool = True) -> np.ndarray:
    """Example order of an epoch: ``default_rng(SeedSequence([seed, epoch])).permutation(n)``."""
    if not shuffle:
        return np.arange(n)
    return np.random.default_rng(_epoch_seed(seed, epoch)).permutation(n)


def batches(
    data: Dataset,
    *,
    batch_size: int,
    seed: int = 0,
    position: Position = Position(),
    num_epochs: int | None = None,
    shuffle: bool = True,
    process_index: int | None = None,
    process_count: int | None = None,
) -> BatchIterator:
    """Batches of an in-memory :class:`Dataset` (see the module docstring for semantics).

    Epoch ``e`` visits ``epoch_order(n, seed, e)``; global batch ``k`` is
    ``order[k G : (k+1) G]`` with ``G = process_count * batch_size`` and this process
    takes its slice ``[p B, (p+1) B)``; ``n // G`` steps per epoch (remainder dropped).
    """
    batch_size = check_int(batch_size, "batch_size", 1)
    pi, pc = _processes(process_index, process_count)
    n = data.num_examples
    G = batch_size * pc
    steps = n // G
    if steps == 0:
        raise ValueError(f"`batch_size`={batch_size} x process_count={pc} exceeds the {n} examples of {data.name!r}.")

    def make_epoch(epoch, start):
        order = epoch_order(n, seed, epoch, shuffle)
        for k in range(start, steps):
            idx = order[k * G + pi * batch_size : k * G + (pi + 1) * batch_size]
            yield {"image": data.images[idx], "label": data.labels[idx], "index": idx}

    return BatchIterator(
        make_epoch, position=position, num_epochs=num_epochs, steps_per_epoch=steps, description=data.name
    )


# ------------------------------------------------------------------------ shapes: see ssl_geometry.data
# ------------------------------------------------------------------------ digits: see ssl_geometry._src.ssl.digits

# -------------------------------------------------------------------------- tfds


def _tf():
    """Import TensorFlow for the input pipeline only (hidden from GPUs/TPUs)."""
    tf = optional_import("tensorflow")

    try:
        tf.config.set_visible_devices([], "GPU")
    except RuntimeError:  # already initialised: visibility can no longer change
        pass
    return tf


def _prepare_instructions(name: str, data_dir) -> str:
    tname = DATASETS[name].source.split(":", 1)[1]
    dd = data_dir or os.environ.get("TFDS_DATA_DIR", "~/tensorflow_datasets")
    if name == "imagenet2012":
        return (
            "ImageNet needs a manual download: put ILSVRC2012_img_train.tar and "
            f"ILSVRC2012_img_val.tar (from image-net.org) into {dd}/downloads/manual/, then run\n"
            f"    tfds build imagenet2012 --data_dir={dd} --manual_dir={dd}/downloads/manual\n"
            "(or, in Python, tfds.builder('imagenet2012', data_dir=...).download_and_prepare("
            "download_config=tfds.download.DownloadConfig(manual_dir=...)))."
        )
    return (
        "Prepare it once on a machine with network access:\n"
        f"    tfds build {tname} --data_dir={dd}\n"
        f"(or, in Python, tfds.builder({tname!r}, data_dir={dd!r}).download_and_prepare()) "
        "and copy the directory here if needed."
    )


def _builder(name: str, data_dir):
    tfds = optional_import("tensorflow_datasets")

    return tfds.builder(DATASETS[name].source.split(":", 1)[1], data_dir=data_dir)


def _as_dataset(builder, name, data_dir, **kwargs):
    try:
        return builder.as_dataset(**kwargs)
    except AssertionError as err:  # tfds: "Dataset X: could not find data in ..."
        raise DataNotFoundError(
            f"Data set {name!r} is not prepared in data_dir={str(builder.data_dir)!r} "
            f"(nothing is downloaded implicitly). {_prepare_instructions(name, data_dir)}"
        ) from err


def process_split(split: str, process_index: int | None = None, process_count: int | None = None):
    """This process's part of a tfds ``split``: ``tfds.even_splits(split, count, drop_remainder=True)[index]``.

    The same as ``tfds.split_for_jax_process(split, drop_remainder=True)`` with the
    process index/count given explicitly (defaults: ``jax.process_index()/count()``).
    """
    tfds = optional_import("tensorflow_datasets")

    pi, pc = _processes(process_index, process_count)
    if pc == 1:
        return split
    return tfds.even_splits(split, n=pc, drop_remainder=True)[pi]


def _resize_fn(tf, image_size):
    """Resize the shorter side to ``image_size`` (bilinear, antialiased), centre-crop square."""

    def resize(img):
        if image_size is None:
            return img
        shape = tf.shape(img)
        h, w = tf.cast(shape[0], tf.float32), tf.cast(shape[1], tf.float32)
        s = tf.cast(image_size, tf.float32) / tf.minimum(h, w)
        nh = tf.maximum(image_size, tf.cast(tf.round(h * s), tf.int32))
        nw = tf.maximum(image_size, tf.cast(tf.round(w * s), tf.int32))
        out = tf.image.resize(img, tf.stack([nh, nw]), method="bilinear", antialias=True)
        top, left = (nh - image_size) // 2, (nw - image_size) // 2
        out = out[top : top + image_size, left : left + image_size, :]
        out = tf.cast(tf.clip_by_value(tf.round(out), 0.0, 255.0), tf.uint8)
        return tf.ensure_shape(out, [image_size, image_size, 3])

    return resize


def _tfds_pipeline(
    name,
    split,
    *,
    data_dir,
    image_size,
    batch_size,
    shuffle,
    shuffle_seed,
    shuffle_buffer,
    skip_examples,
    drop_remainder,
):
    tfds = optional_import("tensorflow_datasets")

    tf = _tf()
    builder = _builder(name, data_dir)
    read_config = tfds.ReadConfig(shuffle_seed=shuffle_seed, try_autocache=False)
    ds = _as_dataset(
        builder,
        name,
        data_dir,
        split=split,
        shuffle_files=shuffle,
        read_config=read_config,
        decoders={"image": tfds.decode.SkipDecoding()},
    )
    options = tf.data.Options()
    options.deterministic = True
    ds = ds.with_options(options)
    if shuffle:
        ds = ds.shuffle(shuffle_buffer, seed=shuffle_seed, reshuffle_each_iteration=False)
    if skip_examples:
        ds = ds.skip(skip_examples)  # before decoding: resuming reads but does not decode
    image_feature = builder.info.features["image"]
    resize = _resize_fn(tf, image_size)

    def decode(ex):
        img = image_feature.decode_example(ex["image"])
        return {"image": resize(img), "label": tf.cast(ex["label"], tf.int32)}

    ds = ds.map(decode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    ds = ds.batch(batch_size, drop_remainder=drop_remainder).prefetch(2)
    return builder, tfds.as_numpy(ds)


def _default_size(name, image_size):
    return DATASETS[name].image_size if image_size is None else check_int(image_size, "image_size", 1)


def tfds_batches(
    name: str,
    split: str = "train",
    *,
    batch_size: int,
    seed: int = 0,
    position: Position = Position(),
    num_epochs: int | None = None,
    shuffle: bool = True,
    shuffle_buffer: int = 10_000,
    data_dir: str | None = None,
    image_size: int | None = None,
    process_index: int | None = None,
    process_count: int | None = None,
) -> BatchIterator:
    """Batches of a prepared tfds data set (``uint8`` NHWC ``"image"``, int32 ``"label"``).

    Epoch ``e`` of process ``p`` reads :func:`process_split` with file order and a
    ``shuffle_buffer``-example shuffle both seeded by ``SeedSequence([seed, e, p])``
    (``reshuffle_each_iteration=False``, deterministic tf.data), so the order is a
    pure function of ``(seed, e, p)`` and :class:`Position` resumes exactly (module
    docstring). Raises :class:`DataNotFoundError` when the data is not prepared.
    """
    check_choice(name, "tfds dataset", tuple(k for k, v in DATASETS.items() if v.source != "embedded"))
    _check_split(name, split)
    batch_size = check_int(batch_size, "batch_size", 1)
    shuffle_buffer = check_int(shuffle_buffer, "shuffle_buffer", 1)
    pi, pc = _processes(process_index, process_count)
    size = _default_size(name, image_size)
    sub = process_split(split, pi, pc)
    tfds = optional_import("tensorflow_datasets")

    # Fail now, not at the first batch, when the data is not prepared.
    _as_dataset(_builder(name, data_dir), name, data_dir, split=sub, decoders={"image": tfds.decode.SkipDecoding()})

    def make_epoch(epoch, start):
        _, it = _tfds_pipeline(
            name,
            sub,
            data_dir=data_dir,
            image_size=size,
            batch_size=batch_size,
            shuffle=shuffle,
            shuffle_seed=_epoch_seed(seed, epoch, pi),
            shuffle_buffer=shuffle_buffer,
            skip_examples=start * batch_size,
            drop_remainder=True,
        )
        return iter(it)

    steps = None
    try:  # known when the data is really prepared (not under tfds.testing.mock_data)
        n = _builder(name, data_dir).info.splits[sub].num_examples
        steps = n // batch_size if n else None
    except Exception:  # noqa: BLE001 - split sizes unknown: the epoch ends when the data does
        steps = None
    return BatchIterator(
        make_epoch,
        position=position,
        num_epochs=num_epochs,
        steps_per_epoch=steps or None,
        description=f"{name}[{split}]",
    )


def load_tfds(
    name: str,
    split: str = "train",
    *,
    data_dir: str | None = None,
    image_size: int | None = None,
    process_index: int | None = 0,
    process_count: int | None = 1,
    chunk: int = 1024,
) -> Dataset:
    """A whole tfds split in memory, in file order (CIFAR/STL/Imagenette; not ImageNet)."""
    check_choice(name, "tfds dataset", tuple(k for k, v in DATASETS.items() if v.source != "embedded"))
    if name == "imagenet2012":
        raise ValueError("imagenet2012 does not fit in memory; iterate it with tfds_batches(...).")
    _check_split(name, split)
    pi, pc = _processes(process_index, process_count)
    _, it = _tfds_pipeline(
        name,
        process_split(split, pi, pc),
        data_dir=data_dir,
        image_size=_default_size(name, image_size),
        batch_size=chunk,
        shuffle=False,
        shuffle_seed=None,
        shuffle_buffer=1,
        skip_examples=0,
        drop_remainder=False,
    )
    parts = list(it)
    if not parts:
        raise ValueError(f"split {split!r} of {name!r} is empty.")
    images = np.concatenate([p["image"] for p in parts])
    labels = np.concatenate([p["label"] for p in parts]).astype(np.int32)
    return Dataset(images, labels, {}, DATASETS[name].num_classes, name)


# ---------------------------------------------------------------- by-name access


def load(
    name: str,
    split: str = "train",
    *,
    seed: int = 0,
    image_size: int | None = None,
    data_dir: str | None = None,
    num_examples: int | None = None,
    **kwargs,
) -> Dataset:
    """An in-memory :class:`Dataset` by name (the string configs use).

    ``"shapes"``: :func:`make_shapes` with ``num_examples`` (default 10000 train / 2000
    test) rendered from seed stream ``(seed, split)``, so train and test differ;
    ``"digits"``: :func:`make_digits`; tfds names: :func:`load_tfds` (``data_dir``); of these two
    the first ``num_examples`` (all when fewer). ``num_examples`` must be an integer >= 1 (``ValueError``
    naming it). Extra ``kwargs`` go to the maker (e.g. ``num_classes`` for shapes).
    """
    check_choice(name, "dataset name", tuple(DATASETS))
    _check_split(name, split)
    if num_examples is not None:
        num_examples = check_int(num_examples, "num_examples", 1)
    size = _default_size(name, image_size)
    if name == "shapes":
        n = num_examples if num_examples is not None else (10_000 if split == "train" else 2_000)
        split_seed = [int(seed) & 0xFFFFFFFF, DATASETS[name].splits.index(split)]
        stream = int(np.random.SeedSequence(split_seed).generate_state(1)[0])
        return make_shapes(n, image_size=size, seed=stream, **kwargs)
    if name == "digits":
        data = make_digits(split, image_size=size, **kwargs)
    else:
        data = load_tfds(name, split, data_dir=data_dir, image_size=image_size, **kwargs)
    if num_examples is not None:
        data = subset(data, np.arange(min(num_examples, data.num_examples)))
    return data


def subset(data: Dataset, index) -> Dataset:
    """The examples ``index`` of ``data`` (factors sliced alike)."""
    index = np.asarray(index)
    return Dataset(
        images=data.images[index],
        labels=data.labels[index],
        factors={k: v[index] for k, v in data.factors.items()},
        num_classes=data.num_classes,
        name=data.name,
    )


def make_batches(
    name: str,
    split: str = "train",
    *,
    batch_size: int,
    seed: int = 0,
    position: Position = Position(),
    num_epochs: int | None = None,
    shuffle: bool = True,
    data_dir: str | None = None,
    image_size: int | None = None,
    process_index: int | None = None,
    process_count: int | None = None,
    **load_kwargs,
) -> BatchIterator:
    """A :class:`BatchIterator` by name: embedded sets via :func:`load` + :func:`batches`,
    tfds sets streamed via :func:`tfds_batches`. Same ``(seed, position)`` semantics."""
    check_choice(name, "dataset name", tuple(DATASETS))
    if DATASETS[name].source == "embedded":
        data = load(name, split, seed=seed, image_size=image_size, **load_kwargs)
        return batches(
            data,
            batch_size=batch_size,
            seed=seed,
            position=position,
            num_epochs=num_epochs,
            shuffle=shuffle,
            process_index=process_index,
            process_count=process_count,
        )
    return tfds_batches(
        name,
        split,
        batch_size=batch_size,
        seed=seed,
        position=position,
        num_epochs=num_epochs,
        shuffle=shuffle,
        data_dir=data_dir,
        image_size=image_size,
        process_index=process_index,
        process_count=process_count,
        **load_kwargs,
    )
