"""Data sets: embedded sets, tfds loaders under mock data, sharding, resume."""

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssl_geometry import data as D

tfds = pytest.importorskip("tensorflow_datasets")


@pytest.fixture(scope="module")
def shapes():
    return D.load("shapes", "train", num_examples=96, seed=3)


# ------------------------------------------------------------------- shapes


def test_shapes_deterministic_balanced_and_factors_consistent(shapes):
    assert shapes.images.shape == (96, 32, 32, 3) and shapes.images.dtype == np.uint8
    assert shapes.labels.dtype == np.int32 and shapes.num_classes == 8
    np.testing.assert_array_equal(np.bincount(shapes.labels, minlength=8), np.full(8, 12))
    assert set(shapes.factors) == set(D.FACTOR_NAMES)
    again = D.load("shapes", "train", num_examples=96, seed=3)
    np.testing.assert_array_equal(again.images, shapes.images)
    other = D.load("shapes", "train", num_examples=96, seed=4)
    assert not np.array_equal(other.images, shapes.images)
    test = D.load("shapes", "test", num_examples=96, seed=3)
    assert not np.array_equal(test.images, shapes.images)
    # Re-rendering from (label, factors) reproduces every image (up to uint8 rounding).
    re = np.asarray(D.render_shapes(shapes.labels[:16], {k: v[:16] for k, v in shapes.factors.items()}))
    assert np.abs(re * 255 - shapes.images[:16]).max() <= 0.5 + 1e-3
    # Factors are the ones the images were rendered from: change the angle, the image changes
    # (except for the rotation-invariant disk, class 0).
    i = int(np.flatnonzero(shapes.labels == 1)[0])  # a square
    f = {k: v[i : i + 1] for k, v in shapes.factors.items()}
    f_rot = dict(f, angle=f["angle"] + np.float32(0.4))
    rotated = np.asarray(D.render_shapes(shapes.labels[i : i + 1], f_rot))[0]
    assert np.abs(rotated * 255 - shapes.images[i]).max() > 50
    j = int(np.flatnonzero(shapes.labels == 0)[0])
    fj = {k: v[j : j + 1] for k, v in shapes.factors.items()}
    np.testing.assert_allclose(
        D.render_shapes(shapes.labels[j : j + 1], dict(fj, angle=fj["angle"] + 1.0)),
        D.render_shapes(shapes.labels[j : j + 1], fj),
        atol=1e-5,
    )


def test_shapes_not_separable_by_mean_colour(shapes):
    # Mean colour per class overlaps: nearest-class-centroid on mean RGB is near chance (1/8).
    x = shapes.images.reshape(96, -1, 3).mean(1)
    cents = np.stack([x[shapes.labels == c].mean(0) for c in range(8)])
    pred = np.argmin(((x[:, None] - cents[None]) ** 2).sum(-1), 1)
    assert np.mean(pred == shapes.labels) < 0.5


def test_shapes_factor_tangent_matches_finite_differences(shapes):
    lab = shapes.labels[:2]
    f = {k: jnp.asarray(v[:2], jnp.float64) for k, v in shapes.factors.items()}

    def render(angle):
        return D.render_shapes(lab, dict(f, angle=f["angle"] + angle), image_size=16)

    t = jax.jvp(render, (0.0,), (1.0,))[1]
    fd = (render(1e-6) - render(-1e-6)) / 2e-6
    np.testing.assert_allclose(t, fd, atol=1e-5)
    assert float(jnp.abs(t).max()) > 0.1


# ------------------------------------------------------------------- digits


def test_digits_shapes_range_and_split():
    tr, te = D.load("digits", "train", image_size=24), D.load("digits", "test", image_size=24)
    assert tr.images.shape == (1438, 24, 24, 3) and te.images.shape == (359, 24, 24, 3)
    assert tr.images.dtype == np.uint8 and tr.images.min() == 0 and tr.images.max() == 255
    np.testing.assert_array_equal(tr.images[..., 0], tr.images[..., 2])
    assert sorted(np.unique(tr.labels)) == list(range(10)) and tr.num_classes == 10
    from sklearn.datasets import load_digits

    d = load_digits()
    # At the native size 8 the images are the digits scaled to 0..255; train/test partition them.
    tr8, te8 = D.load("digits", "train", image_size=8), D.load("digits", "test", image_size=8)
    ref = np.round(d.images / 16 * 255).astype(np.uint8)
    got = np.concatenate([tr8.images[..., 0], te8.images[..., 0]])
    key = lambda a: sorted(map(bytes, a.reshape(len(a), -1)))
    assert key(got) == key(ref)


# ----------------------------------------------------------------- iterators


def test_in_memory_iterator_resume_and_process_shards(shapes):
    it = D.batches(shapes, batch_size=10, seed=7, num_epochs=3)
    assert it.steps_per_epoch == 9
    full = list(it)
    assert len(full) == 27 and it.position == D.Position(3, 0)
    assert full[0]["image"].shape == (10, 32, 32, 3) and full[0]["label"].dtype == np.int32
    # Each epoch visits distinct examples, in a seed- and epoch-dependent order.
    assert len(set(np.concatenate([b["index"] for b in full[:9]]))) == 90
    assert not np.array_equal(full[0]["index"], full[9]["index"])
    # Resume from a saved position continues identically.
    it2 = D.batches(shapes, batch_size=10, seed=7, num_epochs=3)
    for _ in range(13):
        next(it2)
    saved = it2.state()
    assert saved == {"epoch": 1, "step": 4}
    resumed = list(D.batches(shapes, batch_size=10, seed=7, num_epochs=3, position=D.Position(**saved)))
    assert len(resumed) == 14
    for a, b in zip(resumed, full[13:]):
        np.testing.assert_array_equal(a["image"], b["image"])
    # Two processes: disjoint halves of every global batch, covering it.
    p0 = list(D.batches(shapes, batch_size=5, seed=7, num_epochs=1, process_index=0, process_count=2))
    p1 = list(D.batches(shapes, batch_size=5, seed=7, num_epochs=1, process_index=1, process_count=2))
    for a, b, g in zip(p0, p1, full[:9]):
        np.testing.assert_array_equal(np.concatenate([a["index"], b["index"]]), g["index"])
    with pytest.raises(ValueError, match="batch_size"):
        D.batches(shapes, batch_size=200)


# ---------------------------------------------------------------------- tfds


def test_tfds_mock_shapes_dtypes_resize_and_order(tmp_path):
    with tfds.testing.mock_data(num_examples=12):
        for name, size in [("cifar10", 32), ("stl10", 96), ("imagenet2012", 40)]:
            it = D.tfds_batches(
                name, batch_size=4, seed=1, data_dir=str(tmp_path), image_size=40 if name == "imagenet2012" else None
            )
            b = next(it)
            assert b["image"].shape == (4, size, size, 3) and b["image"].dtype == np.uint8
            assert b["label"].shape == (4,) and b["label"].dtype == np.int32
        run = lambda seed, pos=D.Position(): [
            b["image"]
            for b in D.tfds_batches(
                "cifar10", batch_size=4, seed=seed, num_epochs=2, data_dir=str(tmp_path), position=pos
            )
        ]
        a, b, c = run(1), run(1), run(2)
        assert len(a) == 6
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
        assert not np.array_equal(a[0], c[0]) and not np.array_equal(a[0], a[3])
        resumed = run(1, D.Position(1, 1))
        assert len(resumed) == 2
        for x, y in zip(resumed, a[4:]):
            np.testing.assert_array_equal(x, y)


def _indexed_as_dataset(n):
    """A mock ``_as_dataset`` that honours (sub)splits: label = example index in 'train'."""
    import tensorflow as tf

    def as_dataset(self, split, decoders=None, read_config=None, shuffle_files=False, **kwargs):
        splits = tfds.core.SplitDict([tfds.core.SplitInfo(name="train", shard_lengths=[n], num_bytes=0)])
        spec = split if hasattr(split, "to_absolute") else tfds.core.ReadInstruction.from_spec(split)
        idx = np.concatenate([np.arange(n)[r.from_ : r.to] for r in spec.to_absolute(splits)])
        png = [tf.io.encode_png(np.full((32, 32, 3), i % 256, np.uint8)).numpy() for i in idx]
        return tf.data.Dataset.from_tensor_slices(
            {"image": png, "label": idx.astype(np.int64), "id": [str(i) for i in idx]}
        )

    return as_dataset


def test_tfds_process_shards_disjoint_and_cover(tmp_path):
    n = 22
    with tfds.testing.mock_data(as_dataset_fn=_indexed_as_dataset(n)):
        seen = []
        for p in range(2):
            it = D.tfds_batches(
                "cifar10",
                "train",
                batch_size=5,
                seed=0,
                num_epochs=1,
                data_dir=str(tmp_path),
                process_index=p,
                process_count=2,
            )
            labels = np.concatenate([b["label"] for b in it])
            assert len(labels) == 10  # 11 examples per process, drop_remainder batches of 5
            seen.append(labels)
        assert not set(seen[0]) & set(seen[1])
        assert set(seen[0]) <= set(range(11)) and set(seen[1]) <= set(range(11, 22))
        full = D.load("cifar10", "train", data_dir=str(tmp_path), process_index=0, process_count=2)
        np.testing.assert_array_equal(full.labels, np.arange(11))  # load: file order, whole shard
        np.testing.assert_array_equal(full.images[:, 0, 0, 0], np.arange(11))


def test_missing_tfds_data_gives_instructions(tmp_path):
    with pytest.raises(D.DataNotFoundError, match="tfds build cifar10"):
        D.tfds_batches("cifar10", batch_size=4, data_dir=str(tmp_path))
    with pytest.raises(D.DataNotFoundError, match="downloads/manual"):
        D.tfds_batches("imagenet2012", batch_size=4, data_dir=str(tmp_path))
    with pytest.raises(ValueError, match="dataset name"):
        D.load("mnist-typo")
    with pytest.raises(ValueError, match="split"):
        D.make_batches("cifar10", "validation", batch_size=4, data_dir=str(tmp_path))


# ---------------------------------------------------------------------- streaming into the trainer


def _random_as_dataset(n):
    """A mock ``_as_dataset``: example i is a seeded random 32x32 image with label i % 10."""
    import tensorflow as tf

    def as_dataset(self, split, decoders=None, read_config=None, shuffle_files=False, **kwargs):
        splits = tfds.core.SplitDict(
            [tfds.core.SplitInfo(name=s, shard_lengths=[n], num_bytes=0) for s in ("train", "test")]
        )
        spec = split if hasattr(split, "to_absolute") else tfds.core.ReadInstruction.from_spec(split)
        idx = np.concatenate([np.arange(n)[r.from_ : r.to] for r in spec.to_absolute(splits)])
        png = [
            tf.io.encode_png(np.random.default_rng(int(i)).integers(0, 256, (32, 32, 3), dtype=np.uint8)).numpy()
            for i in idx
        ]
        return tf.data.Dataset.from_tensor_slices(
            {"image": png, "label": (idx % 10).astype(np.int64), "id": [str(i) for i in idx]}
        )

    return as_dataset


@pytest.mark.slow  # end to end (subprocesses, full runs): the slow tier of .ci/run keeps README command 2 under 15 minutes
def test_trainer_streams_tfds_and_resumes_its_position(tmp_path):
    """data.stream=True: the trainer reads batches from tf.data (not memory); a run stopped
    mid-epoch and resumed from the stored stream position ends bitwise equal to one run."""
    import json

    from ssl_geometry import train

    root = pathlib.Path(__file__).resolve().parents[1]
    argv = lambda wd, *x: [
        "train",
        "--config",
        str(root / "experiments/configs/small.py"),
        "--workdir",
        str(wd),
        "--config.data.name=cifar10",
        "--config.data.stream=True",
        "--config.data.image_size=8",
        f"--config.data.data_dir={tmp_path / 'tfds'}",
        "--config.data.batch_size=16",
        "--config.data.shuffle_buffer=64",
        "--config.train.steps=6",
        "--config.train.checkpoint_every=2",
        "--config.train.log_every=1",
        "--config.train.metrics_every=0",
        "--config.train.progress=False",
        "--config.optimizer.warmup_steps=1",
        "--config.eval.max_train=48",
        "--config.eval.max_test=32",
        "--config.eval.knn_k=5",
        "--config.eval.rotation=False",
        "--config.model.backbone_kwargs.hidden=(16,)",
        "--config.model.projector.hidden=(16,)",
        *x,
    ]
    meta = lambda wd, s: json.loads((wd / "checkpoints" / str(s) / "meta" / "metadata").read_text())
    (tmp_path / "tfds").mkdir()  # data.data_dir must exist (the mock reads nothing from it)
    with tfds.testing.mock_data(as_dataset_fn=_random_as_dataset(40)):  # 2 batches of 16 per epoch
        assert train.main(argv(tmp_path / "full")) == 0
        assert train.main(argv(tmp_path / "cut", "--config.train.stop_after=4")) == 0
        # after 4 batches = 2 epochs (the end of epoch 1 is seen when the next batch is asked for)
        assert meta(tmp_path / "cut", 4)["data_position"] in ({"epoch": 2, "step": 0}, {"epoch": 1, "step": 2})
        assert train.main(argv(tmp_path / "cut")) == 0
    assert meta(tmp_path / "cut", 6)["fingerprint"] == meta(tmp_path / "full", 6)["fingerprint"]
    with pytest.raises(ValueError, match="data.stream"):
        from ssl_geometry import trainer

        cfg, _ = train.parse_args(argv(tmp_path / "x", "--config.data.name=digits"))
        trainer.make_feed(cfg)
