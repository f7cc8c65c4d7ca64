"""On-device augmentations: exact checks against NumPy/SciPy/colorsys references."""

import colorsys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.ndimage as ndi

from ssl_geometry import augment as A


@pytest.fixture(scope="module")
def img():
    return np.random.default_rng(0).random((9, 9, 3))


@pytest.fixture(scope="module")
def batch_u8():
    return np.random.default_rng(1).integers(0, 256, (6, 16, 16, 3)).astype(np.uint8)


def _fd(f, t, h=1e-6):
    return (np.asarray(f(t + h)) - np.asarray(f(t - h))) / (2 * h)


# ------------------------------------------------------------------ rotation


def test_rotate_identity_and_rot90(img):
    np.testing.assert_array_equal(A.rotate(img, 0.0), img)
    np.testing.assert_allclose(A.rotate(img, np.pi / 2), np.rot90(img), atol=1e-12)
    np.testing.assert_allclose(A.rotate(img, -np.pi / 2), np.rot90(img, -1), atol=1e-12)
    # A non-grid angle: the centre pixel of an odd image is a fixed point.
    np.testing.assert_allclose(A.rotate(img, 0.3)[4, 4], img[4, 4], atol=1e-12)


def test_rotate_matches_scipy_bilinear(img):
    # scipy.ndimage.rotate(order=1, reshape=False) rotates the displayed image CCW by `angle` deg.
    ref = ndi.rotate(img, 30.0, axes=(1, 0), reshape=False, order=1, mode="constant", cval=0.0)
    out = np.asarray(A.rotate(img, np.deg2rad(30.0)))
    np.testing.assert_allclose(out[2:-2, 2:-2], ref[2:-2, 2:-2], atol=1e-10)


def test_rotate_tangent_matches_finite_differences(img):
    t = jax.jvp(lambda a: A.rotate(img, a), (0.3,), (1.0,))[1]
    np.testing.assert_allclose(t, _fd(lambda a: A.rotate(img, a), 0.3), atol=1e-7)
    assert float(jnp.abs(t).max()) > 0.1


# ----------------------------------------------------------------- colour


def test_hue_identities_and_colorsys_reference(img):
    np.testing.assert_allclose(A.adjust_hue(img, 0.0), img, atol=1e-12)
    np.testing.assert_allclose(A.adjust_hue(img, 1.0), img, atol=1e-12)
    for delta in (0.3, -0.45):
        ref = np.array(
            [
                [
                    colorsys.hsv_to_rgb(*((lambda h, s, v: ((h + delta) % 1.0, s, v))(*colorsys.rgb_to_hsv(*p))))
                    for p in row
                ]
                for row in img
            ]
        )
        np.testing.assert_allclose(A.adjust_hue(img, delta), ref, atol=1e-12)
    hsv = np.array([[colorsys.rgb_to_hsv(*p) for p in row] for row in img])
    np.testing.assert_allclose(A.rgb_to_hsv(img), hsv, atol=1e-12)


def test_hue_tangent_matches_finite_differences(img):
    t = jax.jvp(lambda d: A.adjust_hue(img, d), (0.12,), (1.0,))[1]
    np.testing.assert_allclose(t, _fd(lambda d: A.adjust_hue(img, d), 0.12), atol=1e-6)


def test_saturation_brightness_contrast(img):
    gray = img @ np.array([0.2989, 0.587, 0.114])
    np.testing.assert_allclose(A.adjust_saturation(img, 0.0), np.repeat(gray[..., None], 3, -1), atol=1e-12)
    np.testing.assert_allclose(A.adjust_saturation(img, 1.0), img, atol=1e-12)
    np.testing.assert_allclose(
        A.adjust_saturation(img, 1.7), np.clip(1.7 * img - 0.7 * gray[..., None], 0, 1), atol=1e-12
    )
    np.testing.assert_allclose(A.adjust_brightness(img, 1.3), np.clip(1.3 * img, 0, 1), atol=1e-12)
    np.testing.assert_allclose(A.adjust_contrast(img, 0.4), np.clip(0.4 * img + 0.6 * gray.mean(), 0, 1), atol=1e-12)
    np.testing.assert_allclose(A.adjust_contrast(img, 1.0), img, atol=1e-12)


# ------------------------------------------------------------------- blur


@pytest.mark.parametrize("mode", ["reflect", "mirror", "nearest", "wrap", "constant"])
def test_gaussian_blur_matches_scipy(img, mode):
    ref = ndi.gaussian_filter(img, (0.9, 0.9, 0), mode=mode, truncate=4.0)
    np.testing.assert_allclose(A.gaussian_blur(img, 0.9, mode=mode), ref, atol=1e-12)


def test_gaussian_blur_sigma_derivative_and_traced_radius(img):
    f = lambda s: A.gaussian_blur(img, s, radius=4)
    t = jax.jvp(f, (0.8,), (1.0,))[1]
    np.testing.assert_allclose(t, _fd(f, 0.8), atol=1e-7)
    # Tiny sigma is the identity; a traced sigma needs a static radius.
    np.testing.assert_allclose(A.gaussian_blur(img, 0.0, radius=2), img, atol=1e-12)
    with pytest.raises(ValueError, match="radius"):
        jax.jit(lambda s: A.gaussian_blur(img, s))(0.5)


# ------------------------------------------------------------- crop, flip


def test_crop_and_resize_matches_scale_and_translate():
    x = np.random.default_rng(2).random((12, 10, 3))
    for top, left, h, w, size in [(2, 1, 7, 6, (9, 11)), (0, 0, 12, 10, (5, 4))]:  # up- and downscaling
        scale = np.array([size[0] / h, size[1] / w])
        ref = jax.jit(
            lambda x, s, t: jax.image.scale_and_translate(x, (*size, 3), (0, 1), s, t, method="linear", antialias=True)
        )(x, scale, -scale * [top, left])
        got = jax.jit(lambda x: A.crop_and_resize(x, top, left, h, w, size))(x)
        np.testing.assert_allclose(got, ref, atol=1e-12)


def test_random_resized_crop_identity_and_window_bounds(img):
    key = jax.random.key(0)
    np.testing.assert_allclose(A.random_resized_crop(key, img, None, (1.0, 1.0), (1.0, 1.0)), img, atol=1e-12)
    keys = jax.random.split(key, 256)
    top, left, h, w = jax.jit(jax.vmap(lambda k: A.random_crop_window(k, 32, 32, (0.2, 1.0))))(keys)
    top, left, h, w = map(np.asarray, (top, left, h, w))
    assert (top >= 0).all() and (left >= 0).all() and (top + h <= 32).all() and (left + w <= 32).all()
    frac = h * w / 1024
    assert frac.min() > 0.15 and frac.max() <= 1.0 and np.std(frac) > 0.1
    assert np.all((w / h > 0.6) & (w / h < 1.6))


def test_flip_solarize_grayscale(img):
    np.testing.assert_array_equal(A.hflip(A.hflip(img)), img)
    np.testing.assert_array_equal(A.random_flip(jax.random.key(3), img, p=1.0), img[:, ::-1])
    np.testing.assert_array_equal(A.random_flip(jax.random.key(3), img, p=0.0), img)
    x = jnp.array([[[0.2, 0.5, 0.8]]])
    np.testing.assert_allclose(A.solarize(x, 0.5), [[[0.2, 0.5, 0.2]]])  # >= threshold inverted
    np.testing.assert_allclose(A.solarize(x, 0.81), x)
    g = A.random_grayscale(jax.random.key(0), img, p=1.0)
    np.testing.assert_allclose(g[..., 0], g[..., 2])
    np.testing.assert_allclose(g[..., 1], img @ np.array([0.2989, 0.587, 0.114]), atol=1e-12)


def test_color_jitter_ranges(img):
    key = jax.random.key(5)
    np.testing.assert_array_equal(A.random_color_jitter(key, img, 0, 0, 0, 0), img)
    out = np.asarray(A.random_color_jitter(key, img * 0.5, 0.4, 0, 0, 0))
    ratio = out / (img * 0.5)
    assert np.ptp(ratio) < 1e-9 and 0.6 <= ratio.mean() <= 1.4  # one brightness factor
    # Random vs fixed order give valid images; different keys give different results.
    a = A.random_color_jitter(key, img, 0.4, 0.4, 0.4, 0.1)
    b = A.random_color_jitter(jax.random.key(6), img, 0.4, 0.4, 0.4, 0.1)
    assert float(jnp.abs(a - b).max()) > 1e-3 and 0 <= float(a.min()) and float(a.max()) <= 1


# ------------------------------------------------------------- pipelines


def test_pipelines_per_sample_keys_and_determinism(batch_u8):
    key = jax.random.key(0)
    cfg = A.AugmentConfig(size=12, blur_prob=0.5, solarize_prob=0.3)
    v = A.simclr_augment(key, batch_u8, cfg)
    assert v.shape == (6, 12, 12, 3) and v.dtype == jnp.float32
    assert 0.0 <= float(v.min()) and float(v.max()) <= 1.0
    np.testing.assert_array_equal(v, A.simclr_augment(key, batch_u8, cfg))  # same key, same views
    # Same image repeated: per-sample keys make the views differ across the batch.
    same = np.repeat(batch_u8[:1], 6, axis=0)
    vs = np.asarray(A.simclr_augment(key, same, cfg))
    assert min(np.abs(vs[i] - vs[j]).max() for i in range(6) for j in range(i)) > 1e-3
    # Sample i uses key split(key, N)[i]: it equals the single-image function.
    k3 = jax.random.split(key, 6)[3]
    single = jax.jit(A.augment_image, static_argnums=2)(k3, A.to_float(batch_u8[3]), cfg)
    np.testing.assert_allclose(v[3], single, atol=1e-6)


def test_pipeline_rotation_is_random_rotation_on_its_own_key(batch_u8):
    """``rotation_deg``: RandomRotation after crop and flip, from ``fold_in(key, 7)``; 0 leaves the view as before."""
    key = jax.random.key(4)
    x = A.to_float(batch_u8[0])
    only_rot = A.AugmentConfig(
        crop_scale=(1.0, 1.0),
        crop_ratio=(1.0, 1.0),
        flip_prob=0.0,
        rotation_deg=45.0,
        jitter_prob=0.0,
        gray_prob=0.0,
        blur_prob=0.0,
    )
    got = A.augment_image(key, x, only_rot)
    want = A.random_rotation(jax.random.fold_in(key, 7), x, np.radians(45.0))
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert float(jnp.abs(got - x).max()) > 1e-2  # it did rotate
    # The other factors draw the same numbers with or without rotation (a config without it is unchanged).
    no_rot = only_rot._replace(rotation_deg=0.0, jitter_prob=1.0)
    np.testing.assert_allclose(
        A.augment_image(key, x, no_rot),
        A.augment_image(
            key,
            x,
            A.AugmentConfig(
                crop_scale=(1.0, 1.0),
                crop_ratio=(1.0, 1.0),
                flip_prob=0.0,
                jitter_prob=1.0,
                gray_prob=0.0,
                blur_prob=0.0,
            ),
        ),
        atol=0,
    )


def test_simsiam_two_views_and_orbits(batch_u8):
    v1, v2 = A.two_views(jax.random.key(1), batch_u8, A.simsiam_cifar_augment, size=16)
    assert v1.shape == v2.shape == (6, 16, 16, 3) and v1.dtype == jnp.float32
    assert float(jnp.abs(v1 - v2).mean()) > 1e-3
    x = A.to_float(batch_u8[0], jnp.float64)
    angles = jnp.linspace(0, jnp.pi / 4, 12)
    orb = A.orbit(x, A.rotate, angles)
    assert orb.shape == (12, 16, 16, 3)
    np.testing.assert_allclose(orb[0], x, atol=1e-12)
    np.testing.assert_allclose(orb[7], A.rotate(x, angles[7]), atol=1e-12)
    tan = A.orbit_tangents(x, A.adjust_saturation, jnp.array([0.5, 1.5]))
    np.testing.assert_allclose(tan[0], _fd(lambda s: A.adjust_saturation(x, s), 0.5), atol=1e-7)


def test_bad_arguments_name_the_argument(img):
    with pytest.raises(ValueError, match="`image`"):
        A.rotate(img[..., 0], 0.1)
    with pytest.raises(ValueError, match="`image`"):
        A.adjust_hue(img[..., :2], 0.1)
    with pytest.raises(ValueError, match="mode"):
        A.gaussian_blur(img, 1.0, mode="bogus")
    with pytest.raises(ValueError, match="`scale`"):
        A.random_crop_window(jax.random.key(0), 8, 8, scale=(0.5, 0.2))
    with pytest.raises(ValueError, match="`images`"):
        A.simsiam_cifar_augment(jax.random.key(0), img)
