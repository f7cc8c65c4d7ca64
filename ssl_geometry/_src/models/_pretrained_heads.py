"""The released checkpoints' projection heads as :class:`Model` pairs (DINO, VICReg, Barlow Twins).

Part of :mod:`ssl_geometry.pretrained` (re-exported there). Each ``apply`` checks the
variables' shapes against the head (a ``ValueError`` names the leaf and both shapes).
"""

import math

import jax
import jax.numpy as jnp

from ssl_geometry._src import ops as _ops
from ssl_geometry._src.checks import check_last_dim, check_rank
from ssl_geometry._src.models import activations as _act
from ssl_geometry._src.models import heads as _heads
from ssl_geometry._src.models.base import Model

__all__ = ["barlowtwins_projector", "dino_head", "vicreg_projector"]

#: DINO's ``F.normalize`` of the bottleneck as a nonlinearity of its head: C^infinity away from 0.
L2_NORMALIZE = _act.Activation("l2_normalize", lambda h: _ops.l2_normalize(h, 1e-12), "c2")


def dino_head(
    in_dim: int = 384,
    out_dim: int = 65536,
    *,
    hidden_dim: int = 2048,
    bottleneck_dim: int = 256,
    nlayers: int = 3,
    use_bn: bool = False,
    dtype=jnp.float32,
) -> Model:
    """DINO projection head (``facebookresearch/dino`` ``vision_transformer.py`` ``DINOHead``).

    ``u = W_last^T n(m(z))`` with ``m`` the MLP ``in_dim -> hidden_dim (x nlayers-1) -> bottleneck_dim``
    (GELU, exact erf; BatchNorm after hidden layers when ``use_bn``), ``n(h) = h / max(|h|, 1e-12)``
    and the weight-normalised last layer ``W_last[:, j] = g_j v_j / |v_j|`` (``v`` of shape
    ``(bottleneck_dim, out_dim)``, ``g`` of shape ``(out_dim,)``; no bias).

    Variables: ``{"params": {"mlp": <heads.mlp params>, "last_layer": {"g", "v"}},
    ["batch_stats": {"mlp": ...}]}``.
    """
    if nlayers < 1:
        raise ValueError(f"`nlayers` must be >= 1; got {nlayers!r}.")
    mlp = _heads.mlp(
        in_dim,
        (hidden_dim,) * (nlayers - 1),
        bottleneck_dim,
        activation="gelu",
        batch_norm=use_bn,
        bias=True,
        dtype=dtype,
    )
    name = f"dino_head({in_dim}->{hidden_dim}x{nlayers - 1}->{bottleneck_dim}->norm->wn {out_dim}, bn={use_bn})"

    def init(key):
        k1, k2 = jax.random.split(key)
        mv = mlp.init(k1)
        v = jax.random.truncated_normal(k2, -2.0, 2.0, (bottleneck_dim, out_dim), dtype) * 0.02
        out = {"params": {"mlp": mv["params"], "last_layer": {"g": jnp.ones((out_dim,), dtype), "v": v}}}
        if "batch_stats" in mv:
            out["batch_stats"] = {"mlp": mv["batch_stats"]}
        return out

    def apply(variables, z, *, train: bool = False):
        _heads.check_shapes(
            variables, {"params/last_layer/v": (bottleneck_dim, out_dim), "params/last_layer/g": (out_dim,)}, name
        )
        mv = {"params": variables["params"]["mlp"]}
        if use_bn:
            mv["batch_stats"] = variables["batch_stats"]["mlp"]
        h, st = mlp.apply(mv, z, train=train)
        ll = variables["params"]["last_layer"]
        w = ll["v"] * (ll["g"] / jnp.linalg.norm(ll["v"], axis=0))
        u = _ops.l2_normalize(h, 1e-12) @ w
        return u, ({"batch_stats": {"mlp": st["batch_stats"]}} if use_bn else {})

    return Model(
        init=init,
        apply=apply,
        in_shape=(in_dim,),
        out_dim=out_dim,
        name=name,
        activations=(*(mlp.activations or ()), L2_NORMALIZE),
    )


def vicreg_projector(dims=(2048, 8192, 8192, 8192), *, dtype=jnp.float32) -> Model:
    """VICReg expander (``facebookresearch/vicreg`` ``main_vicreg.py`` ``Projector``).

    ``u = A_L relu(BN(A_{L-1} ... relu(BN(A_1 z + b_1)) ...))`` with biases on the hidden
    ``Linear`` layers and a bias-free last layer. (:func:`ssl_geometry.heads.mlp` has one bias flag
    for all layers, so this mixed-bias network is its own Model; BatchNorm is
    :func:`ssl_geometry.heads.batchnorm`, PyTorch semantics.) Variables use the
    :func:`ssl_geometry.heads.mlp` layout, the last layer without ``"b"``.
    """
    dims = tuple(int(d) for d in dims)
    if len(dims) < 2:
        raise ValueError(f"`dims` needs at least (in, out); got {dims!r}.")
    n = len(dims) - 1
    name = f"vicreg_projector({'-'.join(map(str, dims))})"
    relu = _act.ACTIVATIONS["relu"]
    want: dict[str, tuple[int, ...]] = {f"params/layers[{i}]/w": (dims[i], dims[i + 1]) for i in range(n)}
    want.update({f"params/layers[{i}]/b": (dims[i + 1],) for i in range(n - 1)})
    for j, d in enumerate(dims[1:-1]):
        want.update(
            {
                f"params/bn[{j}]/scale": (d,),
                f"params/bn[{j}]/bias": (d,),
                f"batch_stats/bn[{j}]/mean": (d,),
                f"batch_stats/bn[{j}]/var": (d,),
            }
        )

    def init(key):
        keys = jax.random.split(key, n)
        layers = []
        for i in range(n):
            bound = 1.0 / math.sqrt(dims[i])
            kw, kb = jax.random.split(keys[i])
            layer = {"w": jax.random.uniform(kw, (dims[i], dims[i + 1]), dtype, -bound, bound)}
            if i < n - 1:
                layer["b"] = jax.random.uniform(kb, (dims[i + 1],), dtype, -bound, bound)
            layers.append(layer)
        out = {"params": {"layers": layers}}
        if n > 1:
            out["params"]["bn"] = [{"scale": jnp.ones((d,), dtype), "bias": jnp.zeros((d,), dtype)} for d in dims[1:-1]]
            out["batch_stats"] = {
                "bn": [{"mean": jnp.zeros((d,), dtype), "var": jnp.ones((d,), dtype)} for d in dims[1:-1]]
            }
        return out

    def apply(variables, z, *, train: bool = False):
        check_last_dim(z, "z", dims[0])
        if train:
            check_rank(z, "z", 2)
        _heads.check_shapes(variables, want, name)
        p = variables["params"]
        h, stats = z, []
        for i, layer in enumerate(p["layers"]):
            h = h @ layer["w"]
            if "b" in layer:
                h = h + layer["b"]
            if i < n - 1:
                s = variables["batch_stats"]["bn"][i]
                h, (m, v) = _heads.batchnorm(
                    h, p["bn"][i]["scale"], p["bn"][i]["bias"], s["mean"], s["var"], train=train
                )
                stats.append({"mean": m, "var": v})
                h = relu.fn(h)
        return h, ({"batch_stats": {"bn": stats}} if n > 1 else {})

    return Model(
        init=init, apply=apply, in_shape=(dims[0],), out_dim=dims[-1], name=name, activations=(relu,) * (n - 1)
    )


def barlowtwins_projector(dims=(2048, 8192, 8192, 8192), *, loss_bn: bool = False, dtype=jnp.float32) -> Model:
    """Barlow Twins projector (``facebookresearch/barlowtwins`` ``main.py``).

    :func:`ssl_geometry.heads.mlp` with bias-free layers, BatchNorm + ReLU on hidden layers. With
    ``loss_bn=True`` the output also passes the loss's ``BatchNorm1d(affine=False)``,
    ``u <- (u - mean) / sqrt(var + 1e-5)`` (running statistics in eval mode, batch statistics in
    training), stored under ``batch_stats["loss_bn"]``; the projector part sits under ``"projector"``.
    """
    dims = tuple(int(d) for d in dims)
    proj = _heads.mlp(dims[0], dims[1:-1], dims[-1], activation="relu", batch_norm=True, bias=False, dtype=dtype)
    if not loss_bn:
        return proj._replace(name="barlowtwins_" + proj.name)
    k = dims[-1]

    def init(key):
        pv = proj.init(key)
        return {
            "params": {"projector": pv["params"]},
            "batch_stats": {
                "projector": pv["batch_stats"],
                "loss_bn": {"mean": jnp.zeros((k,), dtype), "var": jnp.ones((k,), dtype)},
            },
        }

    def apply(variables, z, *, train: bool = False):
        _heads.check_shapes(
            variables,
            {"batch_stats/loss_bn/mean": (k,), "batch_stats/loss_bn/var": (k,)},
            "the Barlow Twins loss BatchNorm",
        )
        bs = variables["batch_stats"]
        u, st = proj.apply({"params": variables["params"]["projector"], "batch_stats": bs["projector"]}, z, train=train)
        one, zero = jnp.ones((k,), u.dtype), jnp.zeros((k,), u.dtype)
        u, (m, v) = _heads.batchnorm(u, one, zero, bs["loss_bn"]["mean"], bs["loss_bn"]["var"], train=train)
        return u, {"batch_stats": {"projector": st["batch_stats"], "loss_bn": {"mean": m, "var": v}}}

    return Model(
        init=init,
        apply=apply,
        in_shape=(dims[0],),
        out_dim=k,
        name=f"barlowtwins_projector({'-'.join(map(str, dims))}) + BN(affine=False)",
        activations=proj.activations,
    )
