"""Vision backbones as pure ``(init, apply)`` :class:`~ssl_geometry.Model` pairs.

Implementation of :mod:`ssl_geometry.backbones`; the conventions and formulas are in its docstring.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from ssl_geometry._src.checks import check_min_batch, check_rank
from ssl_geometry._src.models import activations as _act
from ssl_geometry._src.models import heads as _heads
from ssl_geometry._src.models._vit import Attention as Attention
from ssl_geometry._src.models._vit import Block as Block
from ssl_geometry._src.models._vit import MlpBlock as MlpBlock
from ssl_geometry._src.models._vit import PatchEmbed as PatchEmbed
from ssl_geometry._src.models._vit import VisionTransformer as VisionTransformer
from ssl_geometry._src.models._vit import bicubic_resize_matrix as bicubic_resize_matrix
from ssl_geometry._src.models._vit import interpolate_pos_embed as interpolate_pos_embed
from ssl_geometry._src.models.base import Model

Dtype = Any

__all__ = [
    "BatchNorm",
    "mlp",
    "small_cnn",
    "resnet18_cifar",
    "resnet50",
    "vit_tiny",
    "vit_small16",
    "vit",
    "resnet",
    "bicubic_resize_matrix",
    "interpolate_pos_embed",
    "torch_key",
]

# torchvision initialisers: kaiming_normal_(mode="fan_out", nonlinearity="relu") for convolutions.
_conv_init = nn.initializers.variance_scaling(2.0, "fan_out", "normal")


# ----------------------------------------------------------------------------- BatchNorm
class BatchNorm(nn.Module):
    """BatchNorm over every axis but the last, with PyTorch semantics.

    ``y = scale * (x - mu) / sqrt(var + eps) + bias``; in training ``mu``/``var`` are the batch
    mean and biased variance and the running statistics become
    ``(1 - momentum) r + momentum * batch`` (unbiased variance, PyTorch convention
    ``momentum = 0.1``); in eval mode the running statistics are used.
    """

    momentum: float = 0.1
    epsilon: float = 1e-5
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, x, train: bool):
        c = x.shape[-1]
        scale = self.param("scale", nn.initializers.ones, (c,), self.param_dtype)
        bias = self.param("bias", nn.initializers.zeros, (c,), self.param_dtype)
        ra_mean = self.variable("batch_stats", "mean", lambda: jnp.zeros((c,), self.param_dtype))
        ra_var = self.variable("batch_stats", "var", lambda: jnp.ones((c,), self.param_dtype))
        x = jnp.asarray(x, self.dtype)
        axes = tuple(range(x.ndim - 1))
        if train:
            n = int(np.prod([x.shape[a] for a in axes]))
            if n < 2:
                raise ValueError(
                    f"BatchNorm in train mode needs at least 2 values per channel; got input shape {x.shape}."
                )
            mu = jnp.mean(x, axis=axes)
            var = jnp.mean(jnp.square(x - mu), axis=axes)
            if not self.is_initializing():
                m = self.momentum
                ra_mean.value = (1 - m) * ra_mean.value + m * jax.lax.stop_gradient(mu).astype(self.param_dtype)
                ra_var.value = (1 - m) * ra_var.value + m * (jax.lax.stop_gradient(var) * (n / (n - 1))).astype(
                    self.param_dtype
                )
        else:
            mu = ra_mean.value.astype(self.dtype)
            var = ra_var.value.astype(self.dtype)
        y = (x - mu) * jax.lax.rsqrt(var + self.epsilon)
        return y * scale.astype(self.dtype) + bias.astype(self.dtype)


def _conv(features, kernel, stride, padding, name, dtype, param_dtype):
    return nn.Conv(
        features,
        (kernel, kernel),
        strides=(stride, stride),
        padding=((padding, padding),) * 2,
        use_bias=False,
        kernel_init=_conv_init,
        dtype=dtype,
        param_dtype=param_dtype,
        name=name,
    )


# ----------------------------------------------------------------------------- ResNet
class BasicBlock(nn.Module):
    """torchvision ``BasicBlock``: ``relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x))``."""

    planes: int
    stride: int = 1
    downsample: bool = False
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32
    expansion = 1

    @nn.compact
    def __call__(self, x, train: bool):
        kw = dict(dtype=self.dtype, param_dtype=self.param_dtype)
        out = _conv(self.planes, 3, self.stride, 1, "conv1", **kw)(x)
        out = nn.relu(BatchNorm(name="bn1", **kw)(out, train))
        out = _conv(self.planes, 3, 1, 1, "conv2", **kw)(out)
        out = BatchNorm(name="bn2", **kw)(out, train)
        if self.downsample:
            x = _conv(self.planes, 1, self.stride, 0, "downsample_0", **kw)(x)
            x = BatchNorm(name="downsample_1", **kw)(x, train)
        return nn.relu(out + x)


class Bottleneck(nn.Module):
    """torchvision ``Bottleneck`` (ResNet v1.5): 1x1 -> 3x3 (stride) -> 1x1 (x4), plus shortcut."""

    planes: int
    stride: int = 1
    downsample: bool = False
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32
    expansion = 4

    @nn.compact
    def __call__(self, x, train: bool):
        kw = dict(dtype=self.dtype, param_dtype=self.param_dtype)
        out = nn.relu(BatchNorm(name="bn1", **kw)(_conv(self.planes, 1, 1, 0, "conv1", **kw)(x), train))
        out = nn.relu(BatchNorm(name="bn2", **kw)(_conv(self.planes, 3, self.stride, 1, "conv2", **kw)(out), train))
        out = BatchNorm(name="bn3", **kw)(_conv(self.planes * 4, 1, 1, 0, "conv3", **kw)(out), train)
        if self.downsample:
            x = _conv(self.planes * 4, 1, self.stride, 0, "downsample_0", **kw)(x)
            x = BatchNorm(name="downsample_1", **kw)(x, train)
        return nn.relu(out + x)


class ResNet(nn.Module):
    """torchvision ``ResNet`` without ``fc``: stem, ``layer1..layer4``, global average pool."""

    block: str = "basic"
    layers: Sequence[int] = (2, 2, 2, 2)
    cifar_stem: bool = False
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, x, train: bool = False):
        kw = dict(dtype=self.dtype, param_dtype=self.param_dtype)
        block_cls = BasicBlock if self.block == "basic" else Bottleneck
        x = jnp.asarray(x, self.dtype)
        if self.cifar_stem:
            x = _conv(64, 3, 1, 1, "conv1", **kw)(x)
        else:
            x = _conv(64, 7, 2, 3, "conv1", **kw)(x)
        x = nn.relu(BatchNorm(name="bn1", **kw)(x, train))
        if not self.cifar_stem:
            x = nn.max_pool(x, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))
        inplanes = 64
        for li, n_blocks in enumerate(self.layers):
            planes = 64 * 2**li
            for bi in range(n_blocks):
                stride = 2 if (bi == 0 and li > 0) else 1
                down = bi == 0 and (stride != 1 or inplanes != planes * block_cls.expansion)
                x = block_cls(planes, stride, down, name=f"layer{li + 1}_{bi}", **kw)(x, train)
                inplanes = planes * block_cls.expansion
        return jnp.mean(x, axis=(1, 2))


def _check_images(x, in_shape, *, exact: bool, multiple_of: int = 1, min_size: int = 1, name: str = "x"):
    check_rank(x, name, 4)
    h, w, c = x.shape[1:]
    if c != in_shape[-1]:
        raise ValueError(
            f"`{name}` must be NHWC images with {in_shape[-1]} channels; got shape {tuple(x.shape)} "
            "(channels-first input? transpose to NHWC)."
        )
    if exact and (h, w) != tuple(in_shape[:2]):
        raise ValueError(f"`{name}` must have spatial size {in_shape[0]}x{in_shape[1]}; got {h}x{w}.")
    if h % multiple_of or w % multiple_of:
        raise ValueError(f"`{name}` spatial size must be a multiple of the patch size {multiple_of}; got {h}x{w}.")
    if h < min_size or w < min_size:
        raise ValueError(f"`{name}` spatial size must be at least {min_size}x{min_size}; got {h}x{w}.")
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(f"`{name}` must be a float array (normalised images); got dtype {x.dtype}.")


# std of a standard normal truncated to [-2, 2]; dividing by it makes the truncated draw unit-variance.
_TRUNC_STD = 0.87962566103423978


def _leaf_std(path: tuple, shape: tuple) -> float | None:
    """Initial standard deviation of a parameter leaf (``None``: constant init).

    4-D convolution kernels ``(kh, kw, I, O)``: He normal with fan_out, ``sqrt(2 / (kh kw O))``
    (torchvision ``kaiming_normal_(mode="fan_out", nonlinearity="relu")``); 2-D dense kernels and
    ``cls_token``/``pos_embed``: 0.02 (DINO/timm ``trunc_normal_(std=.02)``).
    """
    leaf = path[-1]
    if leaf == "kernel" and len(shape) == 4:
        return math.sqrt(2.0 / (shape[0] * shape[1] * shape[3]))
    if leaf == "kernel" or leaf in ("cls_token", "pos_embed"):
        return 0.02
    return None


def _fast_init(module: nn.Module, init_shape: tuple):
    """Return a jitted ``init(key)`` drawing every random leaf from ONE flat truncated-normal sample.

    ``flax`` initialisers draw one random tensor per parameter; XLA compiles each threefry draw
    separately, which takes a minute for a ResNet on a CPU. One flat draw of all random scalars,
    sliced and scaled per leaf (:func:`_leaf_std`), compiles in about a second. Constant leaves:
    BatchNorm/LayerNorm ``scale`` = 1, biases = 0, running ``mean`` = 0, ``var`` = 1.
    """
    dummy = jax.ShapeDtypeStruct((1, *init_shape), module.dtype)
    shapes = jax.eval_shape(lambda k, x: module.init(k, x, train=False), jax.random.PRNGKey(0), dummy)
    flat, treedef = jax.tree_util.tree_flatten_with_path(shapes)
    paths = [tuple(getattr(k, "key", getattr(k, "name", str(k))) for k in kp) for kp, _ in flat]
    stds = [_leaf_std(p, leaf.shape) for p, (_, leaf) in zip(paths, flat)]
    n_random = sum(leaf.size for (_, leaf), s in zip(flat, stds) if s is not None)

    @jax.jit
    def init(key):
        dtype = flat[0][1].dtype
        draw = jax.random.truncated_normal(key, -2.0, 2.0, (max(n_random, 1),), dtype) / _TRUNC_STD
        out, offset = [], 0
        for p, (_, leaf), std in zip(paths, flat, stds):
            if std is not None:
                out.append((draw[offset : offset + leaf.size] * std).reshape(leaf.shape).astype(leaf.dtype))
                offset += leaf.size
            elif p[-1] in ("scale", "var"):
                out.append(jnp.ones(leaf.shape, leaf.dtype))
            else:
                out.append(jnp.zeros(leaf.shape, leaf.dtype))
        return jax.tree_util.tree_unflatten(treedef, out)

    init.shapes = {  # type: ignore[attr-defined]  # the leaf shapes, an attribute of the jitted function
        "/".join(map(str, p)): tuple(leaf.shape) for p, (_, leaf) in zip(paths, flat)
    }
    return init


def _leaf_shapes(tree) -> dict:
    flat = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {
        "/".join(str(getattr(k, "key", getattr(k, "name", k))) for k in kp): tuple(jnp.shape(leaf)) for kp, leaf in flat
    }


def _check_variable_shapes(variables, want: dict, name: str) -> None:
    """Raise ``ValueError`` naming the first leaf whose shape (or presence) differs from the model's."""
    if not isinstance(variables, dict) or "params" not in variables:
        raise ValueError(
            f"`variables` must be a dict with a 'params' entry (from `init`); got {type(variables).__name__}."
        )
    got = _leaf_shapes(variables)
    for path, shape in want.items():
        if path not in got:
            raise ValueError(
                f"`variables` lacks {path} (expected shape {shape}); they belong to a different model than {name}."
            )
        if got[path] != shape:
            raise ValueError(f"`variables`: {path} has shape {got[path]}, but {name} expects {shape}.")


def _wrap(
    module: nn.Module,
    in_shape,
    out_dim: int,
    name: str,
    *,
    has_bn: bool,
    exact: bool,
    multiple_of: int = 1,
    min_size: int = 1,
    init_shape=None,
) -> Model:
    # Parameter shapes do not depend on the spatial size for convnets, so init may trace a small image.
    _init = _fast_init(module, tuple(init_shape or in_shape))

    def init(key):
        return dict(_init(key))

    def apply(variables, x, *, train: bool = False):
        _check_images(x, in_shape, exact=exact, multiple_of=multiple_of, min_size=min_size)
        _check_variable_shapes(variables, _init.shapes, name)
        if has_bn:
            if train:
                check_min_batch(x, "x", 2, "BatchNorm in train mode needs batch statistics")
                z, mutated = module.apply(variables, x, train=True, mutable=["batch_stats"])
                return z, {"batch_stats": mutated["batch_stats"]}
            z = module.apply(variables, x, train=False)
            return z, {"batch_stats": variables["batch_stats"]}
        return module.apply(variables, x, train=train), {}

    return Model(init=init, apply=apply, in_shape=tuple(in_shape), out_dim=out_dim, name=name)


def mlp(
    in_dim: int,
    hidden: Sequence[int] = (256, 256),
    out_dim: int = 128,
    *,
    activation: str | Callable = "relu",
    batch_norm: bool = False,
    bias: bool = True,
    dtype=jnp.float32,
    param_dtype=None,
) -> Model:
    """Fully connected backbone ``z = A_L(sigma(... sigma(A_1 x)))`` on vectors ``(n, in_dim)``.

    The same network as :func:`ssl_geometry.heads.mlp` (PyTorch ``nn.Linear`` initialisation,
    optional BatchNorm on hidden layers); the last layer is affine. ``param_dtype`` (if given)
    overrides ``dtype``: computation follows the parameter and input dtypes.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> f = mlp(6, hidden=(16,), out_dim=4, activation="gelu")
      >>> z, state = f.apply(f.init(jax.random.PRNGKey(0)), jnp.ones((3, 6)))
      >>> z.shape, state
      ((3, 4), {})
    """
    m = _heads.mlp(
        in_dim, hidden, out_dim, activation=activation, batch_norm=batch_norm, bias=bias, dtype=param_dtype or dtype
    )
    return m._replace(name="backbone " + m.name)


class SmallCNN(nn.Module):
    """``widths``-channel 3x3 convolutions (first stride 1, then stride 2), activation, global mean pool."""

    widths: Sequence[int] = (32, 64, 128)
    activation: str = "relu"
    batch_norm: bool = False
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, x, train: bool = False):
        act = _act.get(self.activation)
        x = jnp.asarray(x, self.dtype)
        for i, w in enumerate(self.widths):
            x = nn.Conv(
                w,
                (3, 3),
                strides=(1, 1) if i == 0 else (2, 2),
                padding=((1, 1), (1, 1)),
                use_bias=not self.batch_norm,
                dtype=self.dtype,
                param_dtype=self.param_dtype,
                name=f"conv{i + 1}",
            )(x)
            if self.batch_norm:
                x = BatchNorm(dtype=self.dtype, param_dtype=self.param_dtype, name=f"bn{i + 1}")(x, train)
            x = act(x)
        return jnp.mean(x, axis=(1, 2))


def small_cnn(
    in_shape: Sequence[int] = (32, 32, 3),
    widths: Sequence[int] = (32, 64, 128),
    *,
    activation: str = "relu",
    batch_norm: bool = False,
    dtype=jnp.float32,
    param_dtype=None,
) -> Model:
    """Small CNN for 8x8..32x32 images: ``len(widths)`` 3x3 conv layers + global average pool.

    Layer ``i`` is ``sigma([BN](conv3x3_i(x)))`` with stride 1 for the first layer and 2 after;
    ``z`` is the spatial mean of the last feature map, ``d = widths[-1]``. Smooth activations
    (``"swish"``, ``"gelu"``) give a C^2 backbone for exact curvature checks.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> f = small_cnn((8, 8, 3), widths=(4, 8))
      >>> z, _ = f.apply(f.init(jax.random.PRNGKey(0)), jnp.ones((2, 8, 8, 3), jnp.float32))
      >>> z.shape
      (2, 8)
    """
    in_shape = tuple(int(s) for s in in_shape)
    if len(in_shape) != 3 or min(in_shape) < 1:
        raise ValueError(f"`in_shape` must be (H, W, C) with positive entries; got {in_shape!r}.")
    widths = tuple(widths)
    if not widths or any((not isinstance(w, int)) or w < 1 for w in widths):
        raise ValueError(f"`widths` must be a non-empty sequence of positive ints; got {widths!r}.")
    act = _act.lookup(activation)
    module = SmallCNN(widths, activation, batch_norm, dtype, param_dtype or dtype)
    name = f"small_cnn({in_shape}, widths={widths}, {act.name}, bn={batch_norm})"
    model = _wrap(module, in_shape, widths[-1], name, has_bn=batch_norm, exact=False)
    return model._replace(activations=(act,) * len(widths))


def resnet(
    depth: int = 18, *, cifar_stem: bool = False, image_size: int | None = None, dtype=jnp.float32, param_dtype=None
) -> Model:
    """torchvision ResNet-18/34/50/101/152 without ``fc`` (``z`` = global average pool of ``layer4``).

    ``cifar_stem=True`` replaces the 7x7/2 ``conv1`` + 3x3/2 max-pool by a 3x3/1 ``conv1`` and no pool.
    Any spatial size works (``image_size`` only sets ``in_shape`` and the shape used by ``init``).
    """
    specs = {
        18: ("basic", (2, 2, 2, 2)),
        34: ("basic", (3, 4, 6, 3)),
        50: ("bottleneck", (3, 4, 6, 3)),
        101: ("bottleneck", (3, 4, 23, 3)),
        152: ("bottleneck", (3, 8, 36, 3)),
    }
    if depth not in specs:
        raise ValueError(f"Unknown ResNet depth {depth!r}; expected one of {sorted(specs)}.")
    block, layers = specs[depth]
    size = image_size or (32 if cifar_stem else 224)
    module = ResNet(block, layers, cifar_stem, dtype, param_dtype or dtype)
    out = 512 if block == "basic" else 2048
    name = f"resnet{depth}" + ("_cifar" if cifar_stem else "")
    return _wrap(
        module,
        (size, size, 3),
        out,
        name,
        has_bn=True,
        exact=False,
        min_size=1 if cifar_stem else 2,
        init_shape=(32, 32, 3),
    )


def resnet18_cifar(*, dtype=jnp.float32, param_dtype=None) -> Model:
    """ResNet-18 with the CIFAR stem (3x3 stride-1 ``conv1``, no max-pool); ``d = 512``.

    11,168,832 parameters (= torchvision ``resnet18`` without ``fc``, with the 3x3 stem); the
    paper's SimSiam backbone. Input ``(n, 32, 32, 3)`` (other sizes work too).
    """
    return resnet(18, cifar_stem=True, image_size=32, dtype=dtype, param_dtype=param_dtype)


def resnet50(*, image_size: int = 224, dtype=jnp.float32, param_dtype=None) -> Model:
    """torchvision ResNet-50 (v1.5) without ``fc``, ImageNet stem; ``d = 2048``, 23,508,032 parameters."""
    return resnet(50, image_size=image_size, dtype=dtype, param_dtype=param_dtype)


def vit(
    *,
    img_size: int,
    patch: int,
    dim: int,
    depth: int,
    heads: int,
    mlp_ratio: float = 4.0,
    qkv_bias: bool = True,
    eps: float = 1e-6,
    in_chans: int = 3,
    dtype=jnp.float32,
    param_dtype=None,
    name: str = "vit",
) -> Model:
    """Vision Transformer (DINO/timm layout), ``z`` = cls token after the final LayerNorm.

    ``tokens = [cls; patch_embed(x)] + pos_embed``; each block is
    ``t <- t + proj(MHA(norm1(t)))``, ``t <- t + fc2(gelu(fc1(norm2(t))))``; ``z = norm(t)[:, 0]``.
    Inputs of another size than ``img_size`` (multiples of ``patch``) use DINO's bicubic
    interpolation of the position grid (:func:`interpolate_pos_embed`).
    """
    if dim % heads:
        raise ValueError(f"`dim` ({dim}) must be divisible by `heads` ({heads}).")
    if img_size % patch:
        raise ValueError(f"`img_size` ({img_size}) must be a multiple of `patch` ({patch}).")
    module = VisionTransformer(
        img_size, patch, dim, depth, heads, mlp_ratio, qkv_bias, eps, dtype, param_dtype or dtype
    )
    return _wrap(
        module, (img_size, img_size, in_chans), dim, name, has_bn=False, exact=False, multiple_of=patch, min_size=patch
    )


def vit_tiny(*, img_size: int = 32, dtype=jnp.float32, param_dtype=None) -> Model:
    """The paper's ViT-Tiny: patch 4, width 192, depth 3, 3 heads, MLP ratio 4, cls token, 32x32 input.

    qkv bias and LayerNorm eps 1e-6 as in DINO's ``vit_tiny``; 1,357,056 parameters.
    """
    return vit(
        img_size=img_size,
        patch=4,
        dim=192,
        depth=3,
        heads=3,
        dtype=dtype,
        param_dtype=param_dtype,
        name="vit_tiny(p4, d192, L3, h3)",
    )


def vit_small16(*, img_size: int = 224, dtype=jnp.float32, param_dtype=None) -> Model:
    """DINO ViT-S/16: patch 16, width 384, depth 12, 6 heads, MLP ratio 4, qkv bias, LN eps 1e-6.

    21,665,664 parameters (position embedding for 224 px, 14x14 + 1 positions); other
    resolutions interpolate the position grid bicubically as DINO does. ``z`` = cls token (384-d).
    """
    return vit(
        img_size=img_size,
        patch=16,
        dim=384,
        depth=12,
        heads=6,
        dtype=dtype,
        param_dtype=param_dtype,
        name="vit_small16 (DINO ViT-S/16)",
    )


# ----------------------------------------------------------------------------- key mapping
_LEAF_TO_TORCH = {
    ("params", "kernel"): "weight",
    ("params", "scale"): "weight",
    ("params", "bias"): "bias",
    ("batch_stats", "mean"): "running_mean",
    ("batch_stats", "var"): "running_var",
}


def torch_key(path: Sequence[str]) -> str:
    """PyTorch state-dict key for a Flax variable path ``(collection, module, ..., leaf)``.

    ``("params", "layer1_0", "downsample_0", "kernel")`` -> ``"layer1.0.downsample.0.weight"``;
    ``("batch_stats", "bn1", "var")`` -> ``"bn1.running_var"``; ``("params", "cls_token")`` ->
    ``"cls_token"``. Module names ``name_i`` become ``name.i``.
    """
    path = tuple(path)
    collection, *mods, leaf = path
    mods = [re.sub(r"_(\d+)$", r".\1", m) for m in mods]
    if not mods:  # top-level parameter (cls_token, pos_embed)
        return leaf
    key = _LEAF_TO_TORCH.get((collection, leaf))
    if key is None:
        raise ValueError(f"No PyTorch name for Flax variable path {path!r}.")
    return ".".join([*mods, key])
