"""Bad input at the public boundary (issue 34): non-finite points, empty sizes, mismatched checkpoint trees and
losses of the wrong signature are refused with the exception type and a message naming the argument."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssl_geometry import checkpoint, curvature, data, dynamics, geometry, heads


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_head_apply_refuses_a_non_finite_input_naming_x(bad):
    m = heads.mlp(3, (4,), 2)
    v = m.init(jax.random.PRNGKey(0))
    x = jnp.array([[bad, 0.0, 1.0], [1.0, 2.0, 3.0]])
    with pytest.raises(FloatingPointError, match=r"`x` contains 1 non-finite value"):
        m.apply(v, x)
    y, _ = m.apply(v, jnp.nan_to_num(x, nan=0.0, posinf=0.0))  # the same finite input is fine
    assert y.shape == (2, 2) and bool(jnp.all(jnp.isfinite(y)))


def test_head_apply_under_jit_is_not_checked_by_value():
    m = heads.mlp(3, (4,), 2)
    v = m.init(jax.random.PRNGKey(0))
    y = jax.jit(lambda x: m.apply(v, x)[0])(jnp.full((2, 3), jnp.nan))  # traced: no host check, NaN flows
    assert bool(jnp.all(jnp.isnan(y)))


@pytest.mark.parametrize("act", [jax.nn.relu, jax.nn.swish])
def test_pullback_metric_refuses_a_non_finite_z(act):
    W = jnp.array([[1.0, 0.0], [1.0, 2.0]])
    with pytest.raises(FloatingPointError, match=r"`z` contains 1 non-finite value"):
        geometry.pullback_metric(lambda z: act(z @ W), jnp.array([jnp.nan, 1.0]))
    pm = geometry.pullback_metric(lambda z: z @ W, jnp.array([0.5, 1.0]))
    assert np.allclose(pm.euclidean, W @ W.T)


def test_hessian_extremes_refuses_a_point_where_the_loss_is_nan():
    # log(-1) is a NaN constant: the gradient and the Hessian are finite, the loss is not
    with pytest.raises(FloatingPointError, match=r"`loss\(x, \*args\)` contains 1 non-finite value"):
        curvature.hessian_extremes(lambda z: jnp.sum(z**2) + jnp.log(-1.0), jnp.ones((3, 2)))
    with pytest.raises(FloatingPointError, match="gradient of `loss` at `x`"):
        curvature.hessian_extremes(lambda z: jnp.sum(jnp.sqrt(z)), jnp.zeros(2))
    r = curvature.hessian_extremes(lambda z: jnp.sum(z**2), jnp.ones((3, 2)))
    assert np.allclose(r.largest, 2.0, rtol=1e-4) and np.allclose(r.smallest, 2.0, rtol=1e-4)


@pytest.mark.parametrize("n", [-5, 0, 2.5, True])
@pytest.mark.parametrize("name", ["digits", "shapes"])
def test_load_refuses_a_non_positive_num_examples(name, n):
    with pytest.raises(ValueError, match=rf"`num_examples` must be an integer >= 1; got {n!r}"):
        data.load(name, num_examples=n, image_size=8)


def test_load_takes_num_examples_as_given():
    assert data.load("digits", num_examples=3, image_size=8).images.shape == (3, 8, 8, 3)


@pytest.fixture
def saved(tmp_path):
    mngr = checkpoint.manager(tmp_path / "ck")
    for step in (1, 2):
        checkpoint.save(mngr, step, {"a": jnp.arange(3.0, dtype=jnp.float32), "b": jnp.zeros(2)})
    return mngr


@pytest.mark.parametrize(
    "target, needles",
    [
        ({"a": jnp.zeros(3, jnp.float32)}, ["leaves only in the checkpoint (1): ['b']"]),
        (
            {"a": jnp.zeros(3, jnp.float32), "c": jnp.zeros(2)},
            ["leaves only in the checkpoint (1): ['b']", "leaves only in the target (1): ['c']"],
        ),
        ({"a": jnp.zeros(3, jnp.int32), "b": jnp.zeros(2)}, ["['a']: saved float32[3], target int32[3]"]),
        ({"a": jnp.zeros(4, jnp.float32), "b": jnp.zeros(2)}, ["['a']: saved float32[3], target float32[4]"]),
    ],
)
def test_restore_latest_into_another_tree_names_the_leaves_and_moves_nothing(saved, target, needles):
    with warnings.catch_warnings():
        warnings.simplefilter("error", checkpoint.CheckpointWarning)  # no fallback to an older step
        with pytest.raises(checkpoint.CheckpointMismatchError) as err:
            checkpoint.restore_latest(saved, target)
    msg = str(err.value)
    assert msg.startswith("checkpoint step 2 in ") and "the files are intact" in msg and "corrupt" not in msg
    for needle in needles:
        assert needle in msg, msg
    assert sorted(saved.all_steps()) == [1, 2]
    good = checkpoint.restore_latest(saved, {"a": jnp.zeros(3, jnp.float32), "b": jnp.zeros(2)})
    assert good.step == 2 and good.state["a"].tolist() == [0.0, 1.0, 2.0]


def test_manager_on_a_file_names_the_path(tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    for where in (f, f / "sub"):
        with pytest.raises(NotADirectoryError, match=rf"'{f}' exists and is not a directory"):
            checkpoint.manager(where)
    assert f.read_text() == "x"


@pytest.mark.parametrize(
    "loss, needle",
    [
        (lambda p: jnp.sum(p**2), "got <lambda>(p): too many positional arguments"),
        (lambda p, batch, args: p**2, "it returned shape (2,)"),
        ("not a function", "got str"),
    ],
)
def test_gradient_flow_refuses_a_loss_of_the_wrong_signature(loss, needle):
    with pytest.raises(TypeError, match=r"`loss_fn` must be") as err:
        dynamics.gradient_flow(loss, jnp.ones(2), t1=1.0, save_at=jnp.array([0.0, 1.0]))
    assert "loss_fn(params, batch, args) -> scalar" in str(err.value) and needle in str(err.value)
