"""Projection heads and predictors as pure ``(init, apply)`` pairs.

Implementation of :mod:`ssl_geometry.heads`; the conventions and formulas are in its docstring.
"""

import numbers
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, ScalarLike

from ssl_geometry._src.checks import check_finite, check_last_dim, check_min_batch, check_positive, check_rank
from ssl_geometry._src.models import activations as _act
from ssl_geometry._src.models.base import Model
from ssl_geometry._src.ops import ArrayIn


def _torch_linear_init(key, fan_in, fan_out, dtype):
    kw, kb = jax.random.split(key)
    bound = 1.0 / jnp.sqrt(fan_in)
    w = jax.random.uniform(kw, (fan_in, fan_out), dtype, -bound, bound)
    b = jax.random.uniform(kb, (fan_out,), dtype, -bound, bound)
    return w, b


def check_batchnorm_hparams(momentum, eps, *, names=("bn_momentum", "bn_eps")) -> None:
    """Raise ``ValueError`` unless ``0 <= momentum <= 1`` and ``eps > 0`` (both finite)."""
    m_name, e_name = names
    if isinstance(momentum, bool) or not isinstance(momentum, numbers.Real) or not 0.0 <= float(momentum) <= 1.0:
        raise ValueError(
            f"`{m_name}` must be a number in [0, 1] (the running-statistics update weight); got {momentum!r}."
        )
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not (float(eps) > 0 and np.isfinite(float(eps))):
        raise ValueError(f"`{e_name}` must be a finite number > 0 (the variance floor); got {eps!r}.")


def batchnorm(
    x: Float[ArrayIn, "*n c"],
    scale: Float[ArrayIn, " c"],
    bias: Float[ArrayIn, " c"],
    mean: Float[ArrayIn, " c"],
    var: Float[ArrayIn, " c"],
    *,
    train: bool,
    momentum: ScalarLike = 0.1,
    eps: ScalarLike = 1e-5,
) -> tuple[Float[Array, "*n c"], tuple[Float[Array, " c"], Float[Array, " c"]]]:
    """BatchNorm over axis 0 (PyTorch semantics). Returns ``(y, (new_mean, new_var))``.

    ``y = scale * (x - mu) / sqrt(sigma^2 + eps) + bias`` with batch ``mu, sigma^2``
    (biased) in training (``x`` of shape ``(n, c)``), running ``mean, var`` otherwise
    (``x`` of shape ``(c,)`` or ``(..., c)``); in training the running
    statistics become ``(1 - momentum) r + momentum * batch`` (unbiased variance).
    ``momentum`` must lie in ``[0, 1]`` and ``eps`` be ``> 0``.
    """
    check_batchnorm_hparams(momentum, eps, names=("momentum", "eps"))
    if train:
        check_min_batch(x, "x", 2, "BatchNorm in train mode needs batch statistics")
        mu = jnp.mean(x, axis=0)
        var_b = jnp.mean(jnp.square(x - mu), axis=0)
        n = x.shape[0]
        new_mean = (1 - momentum) * mean + momentum * jax.lax.stop_gradient(mu)
        new_var = (1 - momentum) * var + momentum * jax.lax.stop_gradient(var_b) * n / (n - 1)
        y = (x - mu) * jax.lax.rsqrt(var_b + eps)
    else:
        new_mean, new_var = mean, var
        y = (x - mean) * jax.lax.rsqrt(var + eps)
    return jnp.asarray(y * scale + bias), (jnp.asarray(new_mean), jnp.asarray(new_var))  # Arrays also for NumPy inputs


def _check_dims(in_dim, hidden, out_dim):
    if isinstance(in_dim, bool) or not isinstance(in_dim, int) or in_dim < 1:
        raise ValueError(f"`in_dim` must be a positive int; got {in_dim!r}.")
    out_dim = in_dim if out_dim is None else out_dim
    if isinstance(out_dim, bool) or not isinstance(out_dim, int) or out_dim < 1:
        raise ValueError(f"`out_dim` must be a positive int; got {out_dim!r}.")
    hidden = tuple(hidden)
    if any(isinstance(h, bool) or (not isinstance(h, int)) or h < 1 for h in hidden):
        raise ValueError(f"`hidden` must be a sequence of positive ints; got {hidden!r}.")
    return (in_dim, *hidden, out_dim)


def _expected_shapes(dims, bias, bn_layers) -> dict:
    """The shape of every leaf of an :func:`mlp`'s variables, keyed by a readable path."""
    want: dict[str, tuple[int, ...]] = {}
    for i in range(len(dims) - 1):
        want[f"params/layers[{i}]/w"] = (dims[i], dims[i + 1])
        if bias:
            want[f"params/layers[{i}]/b"] = (dims[i + 1],)
    for j, i in enumerate(bn_layers):
        for leaf in ("scale", "bias"):
            want[f"params/bn[{j}]/{leaf}"] = (dims[i + 1],)
        for leaf in ("mean", "var"):
            want[f"batch_stats/bn[{j}]/{leaf}"] = (dims[i + 1],)
    return want


def check_shapes(variables, want: dict, model: str, name: str = "variables") -> None:
    """Raise ``ValueError`` unless every ``path -> shape`` of ``want`` is a leaf of that shape.

    ``path`` reads like ``"params/layers[0]/w"``; ``model`` describes the model in the
    message. Shapes are static, so this also runs (at trace time) inside ``jit``.
    """
    if not isinstance(variables, dict) or "params" not in variables:
        raise ValueError(
            f"`{name}` must be a dict with a 'params' entry (from `init`); got {type(variables).__name__}."
        )
    for path, shape in want.items():
        node: Any = variables
        try:
            for part in path.replace("]", "").replace("[", "/").split("/"):
                node = node[int(part)] if part.isdigit() else node[part]
        except (KeyError, IndexError, TypeError):
            raise ValueError(
                f"`{name}` lacks {path} (expected shape {shape}); the variables belong "
                f"to a different model than {model}."
            ) from None
        if tuple(jnp.shape(node)) != tuple(shape):
            raise ValueError(
                f"`{name}`: {path} has shape {tuple(jnp.shape(node))}, but {model} expects {tuple(shape)}."
            )


def check_variables(variables, dims, bias, bn_layers, name: str = "variables") -> None:
    """Raise ``ValueError`` naming the layer unless ``variables`` has an :func:`mlp`'s layout and shapes.

    ``dims = (in, *hidden, out)``; ``bn_layers`` are the indices of the layers followed by BatchNorm.
    """
    model = f"this head ({'->'.join(map(str, dims))})"
    params = variables.get("params") if isinstance(variables, dict) else None
    layers = params.get("layers") if isinstance(params, dict) else None
    if isinstance(layers, (list, tuple)) and len(layers) != len(dims) - 1:
        raise ValueError(f"`{name}` holds {len(layers)} layers; {model} has {len(dims) - 1}.")
    check_shapes(variables, _expected_shapes(dims, bias, bn_layers), model, name)


def _mlp_init(dims, bias, bn_layers, scale, dtype):
    n_layers = len(dims) - 1

    def init(key):
        keys = jax.random.split(key, n_layers)
        layers = []
        for i in range(n_layers):
            w, b = _torch_linear_init(keys[i], dims[i], dims[i + 1], dtype)
            layer = {"w": w * jnp.asarray(scale, dtype)}
            if bias:
                layer["b"] = b
            layers.append(layer)
        params = {"layers": layers}
        variables = {"params": params}
        if bn_layers:
            params["bn"] = [
                {"scale": jnp.ones((dims[i + 1],), dtype), "bias": jnp.zeros((dims[i + 1],), dtype)} for i in bn_layers
            ]
            variables["batch_stats"] = {
                "bn": [
                    {"mean": jnp.zeros((dims[i + 1],), dtype), "var": jnp.ones((dims[i + 1],), dtype)}
                    for i in bn_layers
                ]
            }
        return variables

    return init


def _mlp_apply(dims, bias, bn_layers, act, bn_momentum, bn_eps):
    n_layers = len(dims) - 1
    in_dim = dims[0]

    def apply(variables: dict, x: Float[ArrayIn, "*batch d"], *, train: bool = False):
        check_last_dim(x, "x", in_dim)
        check_finite(x, "x")  # concrete inputs only (a no-op under jit/grad/vmap)
        if bn_layers and train:
            check_rank(x, "x", 2)
        check_variables(variables, dims, bias, bn_layers)
        params = variables["params"]
        new_stats = []
        h = x
        for i, layer in enumerate(params["layers"]):
            h = h @ layer["w"]
            if bias:
                h = h + layer["b"]
            if i in bn_layers:
                j = bn_layers.index(i)
                p, s = params["bn"][j], variables["batch_stats"]["bn"][j]
                h, (m, v) = batchnorm(
                    h, p["scale"], p["bias"], s["mean"], s["var"], train=train, momentum=bn_momentum, eps=bn_eps
                )
                new_stats.append({"mean": m, "var": v})
            if i < n_layers - 1:
                h = act(h)
        state = {"batch_stats": {"bn": new_stats}} if bn_layers else {}
        return h, state

    return apply


def mlp(
    in_dim: int,
    hidden: Sequence[int] = (),
    out_dim: int | None = None,
    *,
    activation: str | Callable | _act.Activation = "relu",
    batch_norm: bool = False,
    final_batch_norm: bool = False,
    bias: bool = True,
    scale: ScalarLike = 1.0,
    bn_momentum: ScalarLike = 0.1,
    bn_eps: ScalarLike = 1e-5,
    dtype=jnp.float32,
) -> Model:
    """Multi-layer perceptron head/predictor of any depth.

    ``h(z) = A_L( sigma(BN(A_{L-1}( ... sigma(BN(A_1 z)) ...))) )`` with affine maps
    ``A_l x = x @ W_l + b_l`` (``b_l`` absent when ``bias=False``), BatchNorm after
    every hidden affine map when ``batch_norm=True`` and after the last one when
    ``final_batch_norm=True`` (SimSiam projector). ``hidden=()`` gives a single
    affine layer. ``apply`` checks that the variables have this head's layout and
    shapes (a ``ValueError`` names the layer and both shapes).

    Args:
      in_dim: input dimension d.
      hidden: widths of the hidden layers (depth = ``len(hidden) + 1``).
      out_dim: output dimension k (default ``in_dim``).
      activation: a name in :data:`ssl_geometry.activations.ACTIVATIONS`, an
        :class:`ssl_geometry.activations.Activation` (a function with its smoothness class), or a
        callable (a registered function keeps its class; any other is of class ``"unknown"``).
        The head records it once per hidden layer in :attr:`Model.activations`.
      batch_norm: BatchNorm on hidden layers.
      final_batch_norm: BatchNorm (affine) on the output layer.
      bias: include biases in the affine maps.
      scale: multiply every initial weight matrix by this factor (pseudo-collapse: 0.1).
      bn_momentum: running-statistics weight in ``[0, 1]`` (PyTorch's ``momentum``).
      bn_eps: BatchNorm variance floor, ``> 0``.
      dtype: parameter dtype (``jnp.float64`` for exact checks; needs ``jax_enable_x64``).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> head = mlp(4, hidden=(8,), out_dim=3, activation="swish")
      >>> v = head.init(jax.random.PRNGKey(0))
      >>> y, state = head.apply(v, jnp.ones((5, 4)))
      >>> y.shape, state
      ((5, 3), {})
    """
    dims = _check_dims(in_dim, hidden, out_dim)
    check_positive(scale, "scale", strict=False)
    check_batchnorm_hparams(bn_momentum, bn_eps)
    act = _act.lookup(activation)
    n_layers = len(dims) - 1
    bn_layers = [
        i for i in range(n_layers) if (batch_norm and i < n_layers - 1) or (final_batch_norm and i == n_layers - 1)
    ]
    init = _mlp_init(dims, bias, bn_layers, scale, dtype)
    apply = _mlp_apply(dims, bias, bn_layers, act.fn, bn_momentum, bn_eps)
    desc = f"mlp({'->'.join(map(str, dims))}, {act.name}, bn={batch_norm}, final_bn={final_batch_norm}, bias={bias})"
    return Model(
        init=init, apply=apply, in_shape=(dims[0],), out_dim=dims[-1], name=desc, activations=(act,) * (n_layers - 1)
    )


def linear(
    in_dim: int, out_dim: int | None = None, *, bias: bool = False, scale: ScalarLike = 1.0, dtype=jnp.float32
) -> Model:
    """Linear head ``h(z) = z @ W (+ b)``; ``W`` has shape ``(in_dim, out_dim)``.

    Its Hessian in ``z`` is exactly zero, so the effective Hessian reduces to the
    pullback metric ``G = W H_L W^T`` (in this ``z @ W`` layout).
    """
    return mlp(in_dim, (), out_dim, activation="identity", bias=bias, scale=scale, dtype=dtype)


def simsiam_projector(
    in_dim: int = 512,
    width: int = 2048,
    *,
    activation="relu",
    batch_norm: bool = True,
    scale: ScalarLike = 1.0,
    dtype=jnp.float32,
) -> Model:
    """The paper's SimSiam projector ``in_dim -> width -> width``, bias-free."""
    return mlp(
        in_dim,
        (width,),
        width,
        activation=activation,
        batch_norm=batch_norm,
        final_batch_norm=batch_norm,
        bias=False,
        scale=scale,
        dtype=dtype,
    )


def simsiam_predictor(
    dim: int = 2048,
    bottleneck: int = 512,
    *,
    activation="relu",
    batch_norm: bool = True,
    scale: ScalarLike = 1.0,
    dtype=jnp.float32,
) -> Model:
    """The paper's SimSiam predictor ``dim -> bottleneck -> dim`` (BN on the hidden layer)."""
    return mlp(
        dim, (bottleneck,), dim, activation=activation, batch_norm=batch_norm, bias=False, scale=scale, dtype=dtype
    )


def scale_weights(variables: dict, alpha: ScalarLike) -> dict:
    """Return ``variables`` with every weight matrix ``W_l`` multiplied by ``alpha``.

    The paper's pseudo-collapsed initialisation is ``alpha = 0.1`` on the projector.
    Biases, BatchNorm parameters and statistics are unchanged.
    """
    check_positive(alpha, "alpha", strict=False)
    params = dict(variables["params"])
    params["layers"] = [{**layer, "w": layer["w"] * alpha} for layer in params["layers"]]
    return {**variables, "params": params}


def compose(*models: Model) -> Model:
    """Chain models ``m_n(... m_1(x))`` (e.g. projector then predictor) as one :class:`Model`.

    Its ``activations`` are those of ``m_1, ..., m_n`` in order (``None`` if any model's are).

    Variables are ``{"params": {"0": ..., "1": ...}, "batch_stats": {...}}`` keyed by position.
    """
    if not models:
        raise ValueError("`compose` needs at least one model.")
    for a, b in zip(models[:-1], models[1:]):
        if b.in_shape != (a.out_dim,):
            raise ValueError(f"cannot compose {a.name} (out {a.out_dim}) with {b.name} (in {b.in_shape}).")

    def init(key):
        keys = jax.random.split(key, len(models))
        vs = [m.init(k) for m, k in zip(models, keys)]
        out = {"params": {str(i): v["params"] for i, v in enumerate(vs)}}
        stats = {str(i): v["batch_stats"] for i, v in enumerate(vs) if "batch_stats" in v}
        if stats:
            out["batch_stats"] = stats
        return out

    def apply(variables, x, *, train: bool = False):
        stats = variables.get("batch_stats", {})
        new_stats = {}
        for i, m in enumerate(models):
            v = {"params": variables["params"][str(i)]}
            if str(i) in stats:
                v["batch_stats"] = stats[str(i)]
            x, st = m.apply(v, x, train=train)
            if "batch_stats" in st:
                new_stats[str(i)] = st["batch_stats"]
        return x, ({"batch_stats": new_stats} if new_stats else {})

    acts = None if any(m.activations is None for m in models) else sum((m.activations or () for m in models), ())
    return Model(
        init=init,
        apply=apply,
        in_shape=models[0].in_shape,
        out_dim=models[-1].out_dim,
        name=" -> ".join(m.name for m in models),
        activations=acts,
    )


__all__ = [
    "batchnorm",
    "check_batchnorm_hparams",
    "check_shapes",
    "check_variables",
    "compose",
    "linear",
    "mlp",
    "scale_weights",
    "simsiam_predictor",
    "simsiam_projector",
]
