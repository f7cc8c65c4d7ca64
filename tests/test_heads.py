"""Heads: shapes, layout, BatchNorm semantics against NumPy, composition with JAX transforms."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssl_geometry import activations, as_function, heads, merge_state, param_count

ACTS = list(activations.ACTIVATIONS)  # every registered activation (each needs a NumPy reference below)


def _np_act(name, x):
    from scipy.special import erf

    return {
        "identity": lambda v: v,
        "linear": lambda v: v,
        "gelu_tanh": lambda v: 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v**3))),
        "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
        "relu": lambda v: np.maximum(v, 0),
        "gelu": lambda v: 0.5 * v * (1 + erf(v / np.sqrt(2))),
        "swish": lambda v: v / (1 + np.exp(-v)),
        "silu": lambda v: v / (1 + np.exp(-v)),
        "tanh": np.tanh,
        "softplus": lambda v: np.log1p(np.exp(v)),
        "elu": lambda v: np.where(v > 0, v, np.expm1(v)),
        "leaky_relu": lambda v: np.where(v > 0, v, 0.01 * v),
    }[name](x)


def _np_mlp(variables, x, act, bn_layers=(), train=False, eps=1e-5):
    h = np.asarray(x)
    layers = variables["params"]["layers"]
    j = 0
    for i, layer in enumerate(layers):
        h = h @ np.asarray(layer["w"]) + (np.asarray(layer["b"]) if "b" in layer else 0.0)
        if i in bn_layers:
            p = variables["params"]["bn"][j]
            s = variables["batch_stats"]["bn"][j]
            if train:
                mu, var = h.mean(0), h.var(0)
            else:
                mu, var = np.asarray(s["mean"]), np.asarray(s["var"])
            h = (h - mu) / np.sqrt(var + eps) * np.asarray(p["scale"]) + np.asarray(p["bias"])
            j += 1
        if i < len(layers) - 1:
            h = _np_act(act, h)
    return h


@pytest.mark.parametrize("act", ACTS)
def test_mlp_matches_numpy_reference(act):
    head = heads.mlp(5, (7, 6), 3, activation=act, dtype=jnp.float64)
    v = head.init(jax.random.PRNGKey(1))
    x = np.random.default_rng(0).normal(size=(4, 5))
    y, state = head.apply(v, jnp.asarray(x))
    np.testing.assert_allclose(y, _np_mlp(v, x, act), rtol=1e-12, atol=1e-12)
    assert state == {}
    # A single sample gives the same row as the batch.
    np.testing.assert_allclose(head.apply(v, jnp.asarray(x[0]))[0], y[0], rtol=1e-12)


def test_batchnorm_train_and_eval_match_numpy_and_update_running_stats():
    head = heads.mlp(4, (6,), 3, activation="swish", batch_norm=True, final_batch_norm=True, dtype=jnp.float64)
    v = head.init(jax.random.PRNGKey(2))
    x = np.random.default_rng(1).normal(size=(8, 4))
    y, state = head.apply(v, jnp.asarray(x), train=True)
    np.testing.assert_allclose(y, _np_mlp(v, x, "swish", bn_layers=(0, 1), train=True), rtol=1e-10, atol=1e-12)
    # Running statistics: r <- 0.9 r + 0.1 * batch (unbiased variance), PyTorch semantics.
    h1 = x @ np.asarray(v["params"]["layers"][0]["w"]) + np.asarray(v["params"]["layers"][0]["b"])
    got = state["batch_stats"]["bn"][0]
    np.testing.assert_allclose(got["mean"], 0.1 * h1.mean(0), rtol=1e-12)
    np.testing.assert_allclose(got["var"], 0.9 + 0.1 * h1.var(0, ddof=1), rtol=1e-12)
    v2 = merge_state(v, state)
    y_eval, state_eval = head.apply(v2, jnp.asarray(x), train=False)
    np.testing.assert_allclose(y_eval, _np_mlp(v2, x, "swish", bn_layers=(0, 1)), rtol=1e-10, atol=1e-12)
    assert jax.tree_util.tree_all(
        jax.tree_util.tree_map(lambda a, b: bool(jnp.all(a == b)), state_eval["batch_stats"], v2["batch_stats"])
    )


def test_batchnorm_train_mode_rejects_single_sample():
    head = heads.mlp(4, (6,), 3, batch_norm=True)
    v = head.init(jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match="at least 2"):
        head.apply(v, jnp.ones((1, 4)), train=True)


def test_linear_head_second_derivative_is_exactly_zero_and_jacobian_is_W():
    head = heads.linear(5, 3, dtype=jnp.float64)
    v = head.init(jax.random.PRNGKey(3))
    fn = as_function(head, v)
    z = jnp.asarray(np.random.default_rng(2).normal(size=5))
    assert float(jnp.max(jnp.abs(jax.hessian(fn)(z)))) == 0.0
    np.testing.assert_array_equal(jax.jacfwd(fn)(z), v["params"]["layers"][0]["w"].T)


def test_swish_head_has_nonzero_second_derivative_relu_zero_away_from_kinks():
    z = jnp.asarray(np.random.default_rng(3).normal(size=4))
    for act, nonzero in [("swish", True), ("relu", False), ("gelu", True), ("tanh", True)]:
        head = heads.mlp(4, (8,), 2, activation=act, dtype=jnp.float64)
        fn = as_function(head, head.init(jax.random.PRNGKey(4)))
        hmax = float(jnp.max(jnp.abs(jax.hessian(fn)(z))))
        assert (hmax > 1e-6) == nonzero, (act, hmax)


def test_transforms_compose_float32_and_float64():
    for dtype in (jnp.float32, jnp.float64):
        head = heads.mlp(3, (4,), 2, activation="gelu", batch_norm=True, dtype=dtype)
        v = head.init(jax.random.PRNGKey(0))
        x = jnp.ones((5, 3), dtype)
        y = jax.jit(lambda v, x: head.apply(v, x, train=True)[0])(v, x)
        assert y.dtype == dtype
        g = jax.grad(lambda v: jnp.sum(head.apply(v, x, train=True)[0] ** 2))(v)
        assert jax.tree_util.tree_structure(g) == jax.tree_util.tree_structure(v)
        fn = as_function(head, v)
        yv = jax.vmap(fn)(x)
        np.testing.assert_allclose(yv, fn(x), rtol=1e-5)
        _, tangent = jax.jvp(fn, (x[0],), (jnp.ones(3, dtype),))
        np.testing.assert_allclose(tangent, jax.jacfwd(fn)(x[0]) @ jnp.ones(3, dtype), rtol=1e-5)


def test_scale_and_pseudo_collapse_multiply_weights_only():
    a = heads.mlp(4, (6,), 3, bias=True, dtype=jnp.float64)
    b = heads.mlp(4, (6,), 3, bias=True, scale=0.1, dtype=jnp.float64)
    va, vb = a.init(jax.random.PRNGKey(5)), b.init(jax.random.PRNGKey(5))
    vs = heads.scale_weights(va, 0.1)
    for la, lb, ls in zip(va["params"]["layers"], vb["params"]["layers"], vs["params"]["layers"]):
        np.testing.assert_allclose(lb["w"], 0.1 * la["w"], rtol=1e-15)
        np.testing.assert_allclose(ls["w"], 0.1 * la["w"], rtol=1e-15)
        np.testing.assert_array_equal(lb["b"], la["b"])


def test_paper_projector_and_predictor_shapes_and_counts():
    proj = heads.simsiam_projector(512, 2048, activation="swish", batch_norm=False)
    pred = heads.simsiam_predictor(2048, 512, activation="swish", batch_norm=False)
    vp, vq = proj.init(jax.random.PRNGKey(0)), pred.init(jax.random.PRNGKey(1))
    assert param_count(vp) == 512 * 2048 + 2048 * 2048
    assert param_count(vq) == 2048 * 512 + 512 * 2048
    both = heads.compose(proj, pred)
    vb = both.init(jax.random.PRNGKey(2))
    y, _ = both.apply(vb, jnp.ones((2, 512), jnp.float32))
    assert y.shape == (2, 2048)


def test_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="activation"):
        heads.mlp(3, (), 2, activation="nope")
    with pytest.raises(ValueError, match="in_dim"):
        heads.mlp(0, (), 2)
    with pytest.raises(ValueError, match="hidden"):
        heads.mlp(3, (0,), 2)
    head = heads.mlp(3, (), 2)
    v = head.init(jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match="`x` must have trailing dimension 3"):
        head.apply(v, jnp.ones((4, 5)))
    with pytest.raises(ValueError, match="compose"):
        heads.compose(heads.mlp(3, (), 2), heads.mlp(4, (), 2))
    assert activations.get(jnp.tanh) is jnp.tanh


@pytest.mark.parametrize(
    "kwargs, arg",
    [
        (dict(bn_momentum=2.0), "bn_momentum"),
        (dict(bn_momentum=-0.1), "bn_momentum"),
        (dict(bn_momentum=float("nan")), "bn_momentum"),
        (dict(bn_eps=-1.0), "bn_eps"),
        (dict(bn_eps=0.0), "bn_eps"),
        (dict(bn_eps=float("inf")), "bn_eps"),
    ],
)
def test_batchnorm_hyper_parameters_are_validated(kwargs, arg):
    with pytest.raises(ValueError, match=f"`{arg}` must be"):
        heads.mlp(3, (4,), 2, batch_norm=True, **kwargs)
    name = {"bn_momentum": "momentum", "bn_eps": "eps"}[arg]
    x = jnp.ones((4, 3))
    with pytest.raises(ValueError, match=f"`{name}` must be"):
        heads.batchnorm(
            x, jnp.ones(3), jnp.zeros(3), jnp.zeros(3), jnp.ones(3), train=True, **{name: list(kwargs.values())[0]}
        )
    # the edges of the valid range are accepted
    heads.mlp(3, (4,), 2, batch_norm=True, bn_momentum=0.0, bn_eps=1e-12)
    heads.mlp(3, (4,), 2, batch_norm=True, bn_momentum=1.0)


def test_apply_rejects_variables_of_another_width_naming_the_layer():
    head = heads.mlp(3, (4,), 2, batch_norm=True)
    other = heads.mlp(3, (5,), 2, batch_norm=True).init(jax.random.PRNGKey(0))
    x = jnp.ones((6, 3))
    with pytest.raises(ValueError, match=r"params/layers\[0\]/w has shape \(3, 5\).*expects \(3, 4\)"):
        head.apply(other, x)
    with pytest.raises(ValueError, match=r"layers\[0\]/w has shape \(3, 5\)"):
        jax.jit(lambda v, x: head.apply(v, x, train=True))(other, x)  # shapes are static: checked under jit too
    deeper = heads.mlp(3, (4, 4), 2).init(jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match="holds 3 layers; this head .* has 2"):
        heads.mlp(3, (4,), 2).apply(deeper, x)
    no_bias = heads.mlp(3, (4,), 2, bias=False).init(jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match=r"lacks params/layers\[0\]/b"):
        heads.mlp(3, (4,), 2).apply(no_bias, x)
    with pytest.raises(ValueError, match="'params'"):
        head.apply({"layers": []}, x)
