"""Registry-parametrized tests: every registered head and activation.

A new head is tested by adding a :class:`head_registry.HeadSpec`; a new activation
by adding it to ``ACTIVATIONS`` (and, in ``tests/test_heads.py``, its NumPy reference). Losses are
parametrized over :data:`ssl_geometry.losses.REGISTRY` in ``tests/test_losses.py`` and
``tests/test_loss_numerics.py``.
"""

import head_registry as R
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssl_geometry import activations

HEADS = list(R.HEADS)
N = 5


def _setup(name, seed=0):
    model = R.build(name)
    v = model.init(jax.random.PRNGKey(seed))
    x = jnp.asarray(np.random.default_rng(seed).normal(size=(N, *model.in_shape)))
    return model, v, x


@pytest.mark.parametrize("name", HEADS)
def test_head_output_shape_state_and_jit(name):
    model, v, x = _setup(name)
    y, state = model.apply(v, x)
    assert y.shape == (N, model.out_dim) and y.dtype == jnp.float64
    assert bool(jnp.all(jnp.isfinite(y)))
    np.testing.assert_allclose(jax.jit(model.apply)(v, x)[0], y, rtol=1e-12, atol=1e-14)
    yt, st = model.apply(v, x, train=True)
    if R.HEADS[name].batch_norm:
        assert jax.tree_util.tree_structure(st["batch_stats"]) == jax.tree_util.tree_structure(v["batch_stats"])
        assert not np.allclose(yt, y)  # batch statistics differ from the initial running ones
        with pytest.raises(ValueError, match="batch of at least 2"):
            model.apply(v, x[:1], train=True)
    else:
        assert st == {} and "batch_stats" not in v
        np.testing.assert_allclose(yt, y, rtol=1e-12)


@pytest.mark.parametrize("name", HEADS)
def test_head_gradient_matches_finite_differences(name):
    model, v, x = _setup(name, seed=1)
    d = jnp.asarray(np.random.default_rng(2).normal(size=x.shape))
    f = lambda x: jnp.sum(jnp.sin(model.apply(v, x)[0]))
    g = jax.grad(f)(x)
    h = 1e-6
    fd = (f(x + h * d) - f(x - h * d)) / (2 * h)
    np.testing.assert_allclose(float(jnp.vdot(g, d)), float(fd), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("name", HEADS)
def test_head_apply_rejects_variables_of_a_different_width(name):
    model, _, x = _setup(name)
    wider = R.build(name, wider=True).init(jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match=r"has shape \(.*\), but .* expects \("):
        model.apply(wider, x)
    with pytest.raises(ValueError, match="has shape"):
        jax.jit(model.apply)(wider, x)


def test_head_registry_errors():
    with pytest.raises(ValueError, match="Unknown head name 'nope'"):
        R.build("nope")


ACTS = list(activations.ACTIVATIONS)
_GRID = np.linspace(-3.0, 3.0, 6001)  # spacing 1e-3


def _derivatives(fn):
    d1 = jax.vmap(jax.grad(fn))
    return d1, jax.vmap(jax.grad(jax.grad(fn)))


@pytest.mark.parametrize("act", ACTS)
def test_every_registered_activation_has_a_class(act):
    record = activations.ACTIVATIONS[act]
    assert record.name == act and record.smoothness in activations.SMOOTHNESS, record
    assert activations.smoothness(act) == record.smoothness == activations.smoothness(act.upper())
    assert activations.get(act) is record.fn and activations.lookup(record.fn).smoothness == record.smoothness


@pytest.mark.parametrize("act", ACTS)
def test_activation_class_holds_numerically(act):
    """Each class checked on a grid of [-3, 3] (float64): affine sigma'' = 0 identically; piecewise
    linear sigma'' = 0 away from its kinks and sigma' jumping at each; c1 sigma' continuous and sigma''
    jumping at each kink; c2 sigma'' non-zero, without jumps, and equal to the finite difference of sigma'."""
    record = activations.ACTIVATIONS[act]
    d1, d2 = _derivatives(record.fn)
    x = jnp.asarray(_GRID)
    away = jnp.asarray(_GRID[np.all([np.abs(_GRID - c) > 1e-3 for c in record.kinks or (np.inf,)], axis=0)])
    s1, s2 = np.asarray(d1(x)), np.asarray(d2(away))
    jump = lambda f, c: float(abs(f(jnp.asarray([c + 1e-7]))[0] - f(jnp.asarray([c - 1e-7]))[0]))
    cls = record.smoothness
    if cls == "affine":
        assert np.max(np.abs(np.asarray(d2(x)))) == 0.0 and np.ptp(s1) == 0.0
    elif cls == "piecewise_linear":
        assert np.max(np.abs(s2)) == 0.0 and all(jump(d1, c) > 1e-3 for c in record.kinks)
    elif cls == "c1":
        assert np.max(np.abs(s2)) > 1e-2 and np.max(np.abs(np.diff(s1))) < 1e-2
        assert all(jump(d1, c) < 1e-5 and jump(d2, c) > 1e-2 for c in record.kinks)
    else:
        assert cls == "c2" and not record.kinks
        assert np.max(np.abs(s2)) > 1e-2 and np.max(np.abs(np.diff(s2))) < 1e-2
        fd = (s1[2:] - s1[:-2]) / (2e-3)
        np.testing.assert_allclose(s2[1:-1], fd, atol=1e-5)


def test_activation_records_refuse_a_missing_or_wrong_class():
    for bad in (None, "smooth", ""):
        with pytest.raises((ValueError, TypeError), match="smoothness|str"):
            activations.Activation("mine", jnp.sin, bad)
    with pytest.raises(ValueError, match="kinks"):
        activations.Activation("mine", jax.nn.relu, "piecewise_linear")
    with pytest.raises(ValueError, match="no kinks"):
        activations.Activation("mine", jnp.sin, "c2", kinks=(0.0,))
    assert activations.smoothness(lambda t: t**3) == activations.UNKNOWN
    assert activations.smoothness(activations.Activation("cube", lambda t: t**3, "c2")) == "c2"
    with pytest.raises(ValueError, match="Unknown activation 'swishy'"):
        activations.lookup("swishy")


def test_class_constants_come_from_the_table():
    table = activations.ACTIVATIONS
    assert activations.C2_ACTIVATIONS == {n for n, a in table.items() if a.smoothness == "c2"}
    assert activations.AFFINE_ACTIVATIONS == {"identity", "linear"}
    assert activations.NON_C2_ACTIVATIONS == {"relu", "leaky_relu", "elu"}
    assert activations.PIECEWISE_LINEAR == {"identity", "linear", "relu", "leaky_relu"}
    assert set(table) == (activations.C2_ACTIVATIONS | activations.NON_C2_ACTIVATIONS | activations.AFFINE_ACTIVATIONS)
