"""The jaxtyping annotations are checked in tests (root conftest's import hook with beartype).

A shape or dtype mistake in a call to a type-checked module raises ``jaxtyping.TypeCheckError``
before the function runs. If this file fails with "not type-checked", the hook is not
installed: ``pip install -e '.[test]'`` (beartype) and run pytest from the repository root.
"""

import inspect

import jax
import jax.numpy as jnp
import jaxtyping
import numpy as np
import pytest

from ssl_geometry import activations, heads, ops
from ssl_geometry import losses as L

TypeCheckError = jaxtyping.TypeCheckError


def _raises_type_error(fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except TypeCheckError as err:
        return str(err)
    except Exception as err:  # noqa: BLE001 - any other failure means the type check did not run
        pytest.fail(f"not type-checked: {type(err).__name__}: {err} (is the jaxtyping hook installed?)")
    pytest.fail("not type-checked: the call was accepted")


def test_mismatched_loss_shapes_raise_a_jaxtyping_error():
    msg = _raises_type_error(L.info_nce, jnp.ones((4, 3)), jnp.ones((4, 2)))
    assert "z2" in msg and "n k" in msg
    _raises_type_error(L.barlow_twins, jnp.ones((4, 3)), jnp.ones((5, 3)))  # n differs
    _raises_type_error(L.simsiam, *(jnp.ones(3),) * 4)  # rank 1, not (n, k)
    _raises_type_error(L.mse, jnp.ones((2, 3), jnp.int32), jnp.ones((2, 3), jnp.int32))  # Float expected
    _raises_type_error(L.moco, jnp.ones((2, 3)), jnp.ones((2, 3)), jnp.ones((5, 4)))  # queue width k
    _raises_type_error(L.dino, jnp.ones((2, 4, 3)), jnp.ones((1, 4, 3)), jnp.zeros(5))  # centre size k


def test_heads_activations_and_ops_are_checked():
    _raises_type_error(
        heads.batchnorm, jnp.ones((4, 3)), jnp.ones(2), jnp.zeros(3), jnp.zeros(3), jnp.ones(3), train=True
    )
    _raises_type_error(activations.get("gelu"), jnp.ones(3, jnp.int32))
    _raises_type_error(ops.l2_normalize, [[1.0, 2.0]])  # a list, not an array
    head = heads.mlp(3, (), 2)
    _raises_type_error(head.apply, head.init(jax.random.PRNGKey(0)), jnp.ones((2, 3), jnp.int32))


def test_annotations_accept_numpy_tracers_and_python_scalars():
    a = np.ones((4, 3))
    assert np.isfinite(float(L.info_nce(a, a, temperature=1)))  # int temperature: ScalarLike
    assert np.isfinite(float(jax.jit(L.info_nce)(a, a, temperature=0.5)))
    jax.vmap(lambda z: L.negative_cosine(z, z))(jnp.ones((2, 4, 3)))


@pytest.mark.parametrize("name", list(L.REGISTRY))
def test_every_registered_loss_is_annotated(name):
    """A new loss must carry jaxtyping annotations on its array arguments."""
    sig = inspect.signature(L.REGISTRY[name].fn)
    for arg in L.REGISTRY[name].args:
        ann = str(sig.parameters[arg].annotation)
        assert "Float[" in ann, (name, arg, ann)


def test_no_shape_checks_fixture_shows_the_library_error(no_shape_checks):
    with pytest.raises(ValueError, match="must have the same shape"):
        L.info_nce(jnp.ones((4, 3)), jnp.ones((4, 2)))  # the library's own message, as users see it
