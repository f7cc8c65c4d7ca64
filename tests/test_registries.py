"""Registry-parametrized tests: every registered head and activation.

A new head is tested by adding a :class:`head_registry.HeadSpec`; a new activation
by adding it to ``ACTIVATIONS`` (and, in ``tests/test_heads.py``, its NumPy reference). Losses are
parametrized over :data:`ssl_geometry.losses.REGISTRY` in ``tests/test_losses.py`` and
``tests/test_loss_numerics.py``.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssl_geometry import activations
import head_registry as R

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
    f = lambda x: jnp.sum(jnp.sin(model.apply(v, x)[0]))  # noqa: E731
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


@pytest.mark.parametrize("act", list(activations.ACTIVATIONS))
def test_activation_piecewise_linear_flag(act):
    """``PIECEWISE_LINEAR`` holds exactly the activations with zero second derivative off the kinks."""
    fn = activations.get(act)
    x = jnp.asarray(np.random.default_rng(0).uniform(0.2, 2.0, size=8) * np.array([1, -1] * 4))
    d2 = jax.vmap(jax.grad(jax.grad(lambda t: fn(t))))(x)
    assert (float(jnp.max(jnp.abs(d2))) == 0.0) == (act in activations.PIECEWISE_LINEAR), act
    assert activations.get(act.upper()) is fn
