"""Projection heads and predictors as pure ``(init, apply)`` pairs.

A head maps representations ``z`` (trailing dimension ``in_dim``) to ``u = h(z)``.
Layer ``l`` computes ``a_l = W_l^T x + b_l`` with ``W_l`` of shape ``(in, out)``
(so ``y = x @ W``), optionally BatchNorm, then the activation; the last layer is
affine (optionally followed by BatchNorm, as in the SimSiam projector).

Initialisation follows PyTorch's ``nn.Linear`` default (``U(-1/sqrt(fan_in),
1/sqrt(fan_in))`` for weights and biases), the initialisation the paper's code
used; ``scale`` multiplies every weight matrix (the paper's "pseudo-collapse"
is ``scale=0.1``; see also :func:`scale_weights`).

BatchNorm follows PyTorch semantics: in ``train=True`` the batch mean and the
biased batch variance normalise, and the running statistics are updated as
``r <- (1 - momentum) r + momentum * batch`` with the unbiased variance; in
``train=False`` the running statistics are used, so the head acts per sample and
accepts a single vector ``(d,)``. Inside ``jit`` with a batch sharded over a
mesh, the batch mean is the mean over the *global* batch (synchronised BN).

Variables layout::

    {"params": {"layers": [{"w": (in, out), "b": (out,)}, ...],
                "bn": [{"scale": (out,), "bias": (out,)}, ...]},
     "batch_stats": {"bn": [{"mean": (out,), "var": (out,)}, ...]}}
"""
from __future__ import annotations

from typing import Callable, Sequence

import jax
import jax.numpy as jnp

from ssl_geometry.models import activations as _act
from ssl_geometry._checks import check_last_dim, check_min_batch, check_positive, check_rank
from ssl_geometry.models.base import Model


def _torch_linear_init(key, fan_in, fan_out, dtype):
    kw, kb = jax.random.split(key)
    bound = 1.0 / jnp.sqrt(fan_in)
    w = jax.random.uniform(kw, (fan_in, fan_out), dtype, -bound, bound)
    b = jax.random.uniform(kb, (fan_out,), dtype, -bound, bound)
    return w, b


def batchnorm(x, scale, bias, mean, var, *, train: bool, momentum: float = 0.1, eps: float = 1e-5):
    """BatchNorm over axis 0 (PyTorch semantics). Returns ``(y, (new_mean, new_var))``.

    ``y = scale * (x - mu) / sqrt(sigma^2 + eps) + bias`` with batch ``mu, sigma^2``
    (biased) in training, running ``mean, var`` otherwise.
    """
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
    return y * scale + bias, (new_mean, new_var)


def mlp(
    in_dim: int,
    hidden: Sequence[int] = (),
    out_dim: int | None = None,
    *,
    activation: str | Callable = "relu",
    batch_norm: bool = False,
    final_batch_norm: bool = False,
    bias: bool = True,
    scale: float = 1.0,
    bn_momentum: float = 0.1,
    bn_eps: float = 1e-5,
    dtype=jnp.float32,
) -> Model:
    """Multi-layer perceptron head/predictor of any depth.

    ``h(z) = A_L( sigma(BN(A_{L-1}( ... sigma(BN(A_1 z)) ...))) )`` with affine maps
    ``A_l x = x @ W_l + b_l`` (``b_l`` absent when ``bias=False``), BatchNorm after
    every hidden affine map when ``batch_norm=True`` and after the last one when
    ``final_batch_norm=True`` (SimSiam projector). ``hidden=()`` gives a single
    affine layer.

    Args:
      in_dim: input dimension d.
      hidden: widths of the hidden layers (depth = ``len(hidden) + 1``).
      out_dim: output dimension k (default ``in_dim``).
      activation: name in :data:`ssl_geometry.activations.ACTIVATIONS` or callable.
      batch_norm: BatchNorm on hidden layers.
      final_batch_norm: BatchNorm (affine) on the output layer.
      bias: include biases in the affine maps.
      scale: multiply every initial weight matrix by this factor (pseudo-collapse: 0.1).
      dtype: parameter dtype (``jnp.float64`` for exact checks; needs ``jax_enable_x64``).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> head = mlp(4, hidden=(8,), out_dim=3, activation="swish")
      >>> v = head.init(jax.random.PRNGKey(0))
      >>> y, state = head.apply(v, jnp.ones((5, 4)))
      >>> y.shape, state
      ((5, 3), {})
    """
    if not isinstance(in_dim, int) or in_dim < 1:
        raise ValueError(f"`in_dim` must be a positive int; got {in_dim!r}.")
    out_dim = in_dim if out_dim is None else out_dim
    if not isinstance(out_dim, int) or out_dim < 1:
        raise ValueError(f"`out_dim` must be a positive int; got {out_dim!r}.")
    hidden = tuple(hidden)
    if any((not isinstance(h, int)) or h < 1 for h in hidden):
        raise ValueError(f"`hidden` must be a sequence of positive ints; got {hidden!r}.")
    check_positive(scale, "scale", strict=False)
    act = _act.get(activation)
    act_name = activation if isinstance(activation, str) else getattr(activation, "__name__", "custom")
    dims = (in_dim, *hidden, out_dim)
    n_layers = len(dims) - 1
    bn_layers = [i for i in range(n_layers) if (batch_norm and i < n_layers - 1) or (final_batch_norm and i == n_layers - 1)]
    has_bn = bool(bn_layers)

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
        if has_bn:
            params["bn"] = [
                {"scale": jnp.ones((dims[i + 1],), dtype), "bias": jnp.zeros((dims[i + 1],), dtype)}
                for i in bn_layers
            ]
            variables["batch_stats"] = {
                "bn": [
                    {"mean": jnp.zeros((dims[i + 1],), dtype), "var": jnp.ones((dims[i + 1],), dtype)}
                    for i in bn_layers
                ]
            }
        return variables

    def apply(variables, x, *, train: bool = False):
        check_last_dim(x, "x", in_dim)
        if has_bn and train:
            check_rank(x, "x", 2)
        params = variables["params"]
        new_stats = []
        h = x
        j = 0
        for i, layer in enumerate(params["layers"]):
            h = h @ layer["w"]
            if bias:
                h = h + layer["b"]
            if i in bn_layers:
                p = params["bn"][j]
                s = variables["batch_stats"]["bn"][j]
                h, (m, v) = batchnorm(h, p["scale"], p["bias"], s["mean"], s["var"], train=train,
                                       momentum=bn_momentum, eps=bn_eps)
                new_stats.append({"mean": m, "var": v})
                j += 1
            if i < n_layers - 1:
                h = act(h)
        state = {"batch_stats": {"bn": new_stats}} if has_bn else {}
        return h, state

    desc = f"mlp({'->'.join(map(str, dims))}, {act_name}, bn={batch_norm}, final_bn={final_batch_norm}, bias={bias})"
    return Model(init=init, apply=apply, in_shape=(in_dim,), out_dim=out_dim, name=desc)


def linear(in_dim: int, out_dim: int | None = None, *, bias: bool = False, scale: float = 1.0, dtype=jnp.float32) -> Model:
    """Linear head ``h(z) = z @ W (+ b)``; ``W`` has shape ``(in_dim, out_dim)``.

    Its Hessian in ``z`` is exactly zero, so the effective Hessian reduces to the
    pullback metric ``G = W H_L W^T`` (in this ``z @ W`` layout).
    """
    return mlp(in_dim, (), out_dim, activation="identity", bias=bias, scale=scale, dtype=dtype)


def simsiam_projector(in_dim: int = 512, width: int = 2048, *, activation="relu", batch_norm: bool = True,
                      scale: float = 1.0, dtype=jnp.float32) -> Model:
    """The paper's SimSiam projector ``in_dim -> width -> width``, bias-free (DESIGN.md s.3)."""
    return mlp(in_dim, (width,), width, activation=activation, batch_norm=batch_norm,
               final_batch_norm=batch_norm, bias=False, scale=scale, dtype=dtype)


def simsiam_predictor(dim: int = 2048, bottleneck: int = 512, *, activation="relu", batch_norm: bool = True,
                      scale: float = 1.0, dtype=jnp.float32) -> Model:
    """The paper's SimSiam predictor ``dim -> bottleneck -> dim`` (BN on the hidden layer)."""
    return mlp(dim, (bottleneck,), dim, activation=activation, batch_norm=batch_norm, bias=False,
               scale=scale, dtype=dtype)


def scale_weights(variables: dict, alpha: float) -> dict:
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

    return Model(init=init, apply=apply, in_shape=models[0].in_shape, out_dim=models[-1].out_dim,
                 name=" -> ".join(m.name for m in models))
