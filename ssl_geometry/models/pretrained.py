"""Converters for the released self-supervised checkpoints (backbone AND head) into JAX variables.

The paper's pretrained-checkpoint experiments (DESIGN.md s.3) use four official PyTorch
releases that ship the projection head next to the backbone:

===========================  =================================================  ==========================================
name                         file (official source)                             head
===========================  =================================================  ==========================================
``dino_vits16``              ``dino_deitsmall16_pretrain_full_checkpoint.pth``  DINOHead: 384-2048-2048-256 (GELU),
                                                                                L2-normalise, weight-normed 256->65536
``dino_resnet50``            ``dino_resnet50_pretrain_full_checkpoint.pth``     DINOHead from 2048 (BatchNorm in the
                                                                                head if the checkpoint has it)
``vicreg_resnet50``          ``resnet50_fullckpt.pth``                          expander 2048-8192-8192-8192, Linear+BN+ReLU,
                                                                                last Linear bias-free
``barlowtwins_resnet50``     ``checkpoint.pth``                                 projector 2048-8192-8192-8192, bias-free
                                                                                Linear+BN+ReLU, then BN(affine=False)
===========================  =================================================  ==========================================

Layouts (read from the official code):

* DINO, ``facebookresearch/dino`` ``main_dino.py``: ``save_dict = {"student": student.state_dict(),
  "teacher": teacher.state_dict(), "optimizer", "epoch", "args": argparse.Namespace, "dino_loss",
  "fp16_scaler"}``; the student is wrapped in DDP (keys ``module.backbone.*``, ``module.head.*``), the
  teacher only when the head has BatchNorm (otherwise ``backbone.*``, ``head.*``).
  ``vision_transformer.py``: ``DINOHead.mlp`` is an ``nn.Sequential`` of ``Linear, [BatchNorm1d], GELU``
  per hidden layer and a final ``Linear`` to the bottleneck; ``forward`` L2-normalises (``F.normalize``,
  eps 1e-12) and applies ``last_layer = weight_norm(Linear(bottleneck, out_dim, bias=False))`` with
  ``weight = weight_g * weight_v / ||weight_v||`` (row norms; ``weight_g`` (out, 1)). ResNet-50 is
  torchvision's with ``fc`` replaced by ``Identity`` (``utils.MultiCropWrapper``). Whether the head has
  BatchNorm (``--use_bn_in_head``) is read from the keys present.
* VICReg, ``facebookresearch/vicreg`` ``main_vicreg.py``: ``state = dict(epoch, model=model.state_dict(),
  optimizer)`` of the DDP model: ``module.backbone.*`` (``resnet.py``: torchvision key layout; its
  ``ConstantPad2d(1)`` + ``conv1`` padding 2 equals torchvision's padding 3) and ``module.projector.*``
  from ``Projector``: ``Linear(bias) , BatchNorm1d, ReLU`` per hidden layer, last ``Linear(bias=False)``.
* Barlow Twins, ``facebookresearch/barlowtwins`` ``main.py``: ``state = dict(epoch, model=model.state_dict(),
  optimizer)`` of the DDP model: ``module.backbone.*`` (torchvision ``resnet50``, ``fc = Identity``),
  ``module.projector.*`` (``Linear(bias=False), BatchNorm1d, ReLU`` per hidden layer, last
  ``Linear(bias=False)``) and ``module.bn`` (``BatchNorm1d(affine=False)``, used by the loss to
  normalise the projector output; included in the head when ``loss_bn=True``).

Widths are read from the tensor shapes, so checkpoints of the same layout with other widths
convert too (the tests use narrow heads).

Loading is safe: ``torch.load(path, map_location="cpu", weights_only=True)`` (only tensors,
containers and primitive types unpickle; DINO's ``argparse.Namespace`` is allow-listed, it only
holds the training arguments), and everything that is not a tensor is dropped. A file carrying any
other pickled object (e.g. a code-execution payload) is refused with :class:`UnsafeCheckpointError`
before anything in it runs. ``torch`` is imported lazily: this module imports without it, and
:func:`save_converted` / :func:`load_converted` need only NumPy and ``safetensors``.
"""
from __future__ import annotations

import json
import math
import os
import pathlib
import re
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ssl_geometry.models import backbones as _bb
from ssl_geometry.models import heads as _heads
from ssl_geometry._checks import check_choice, check_last_dim, check_rank
from ssl_geometry.models.base import Model

__all__ = [
    "CHECKPOINTS",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "CheckpointInfo",
    "CheckpointLayoutError",
    "Pretrained",
    "UnsafeCheckpointError",
    "barlowtwins_projector",
    "convert_barlowtwins_resnet50",
    "convert_dino_resnet50",
    "convert_dino_vits16",
    "convert_vicreg_resnet50",
    "dino_head",
    "imagenet_normalize",
    "load_converted",
    "load_torch_checkpoint",
    "resnet_from_torch",
    "save_converted",
    "variables_from_torch",
    "vicreg_projector",
    "vit_from_torch",
]


class CheckpointInfo(NamedTuple):
    """Expected file name, official download URL and the code that defines its layout."""

    filename: str
    url: str
    source: str


CHECKPOINTS: dict[str, CheckpointInfo] = {
    "dino_vits16": CheckpointInfo(
        "dino_deitsmall16_pretrain_full_checkpoint.pth",
        "https://dl.fbaipublicfiles.com/dino/dino_deitsmall16_pretrain/dino_deitsmall16_pretrain_full_checkpoint.pth",
        "facebookresearch/dino: main_dino.py, vision_transformer.py"),
    "dino_resnet50": CheckpointInfo(
        "dino_resnet50_pretrain_full_checkpoint.pth",
        "https://dl.fbaipublicfiles.com/dino/dino_resnet50_pretrain/dino_resnet50_pretrain_full_checkpoint.pth",
        "facebookresearch/dino: main_dino.py, vision_transformer.py (DINOHead)"),
    "vicreg_resnet50": CheckpointInfo(
        "resnet50_fullckpt.pth", "https://dl.fbaipublicfiles.com/vicreg/resnet50_fullckpt.pth",
        "facebookresearch/vicreg: main_vicreg.py (Projector), resnet.py"),
    "barlowtwins_resnet50": CheckpointInfo(
        "checkpoint.pth", "https://dl.fbaipublicfiles.com/barlowtwins/ljng/checkpoint.pth",
        "facebookresearch/barlowtwins: main.py (BarlowTwins)"),
}

#: ImageNet channel statistics (torchvision ``Normalize``), used by all four releases.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class UnsafeCheckpointError(RuntimeError):
    """The checkpoint holds pickled objects other than tensors, containers and primitives."""


class CheckpointLayoutError(ValueError):
    """The state dict does not have the expected keys / shapes."""


class Pretrained(NamedTuple):
    """A converted checkpoint: backbone and head :class:`Model` pairs plus their variables.

    ``variables = {"backbone": ..., "head": ...}``; ``config`` rebuilds the models
    (:func:`load_converted`). ``z = backbone(x)``, ``u = head(z)``.
    """

    backbone: Model
    head: Model
    variables: dict
    config: dict

    def apply(self, variables, x, *, train: bool = False):
        """``(z, u)`` for images ``x`` (NHWC, ImageNet-normalised); eval mode unless ``train``.

        ``variables`` is passed explicitly (normally ``self.variables``) so that
        ``jax.jit(pre.apply)(pre.variables, x)`` takes the weights as arguments rather than
        constants. BatchNorm state updates (``train=True``) are discarded.
        """
        z, _ = self.backbone.apply(variables["backbone"], x, train=train)
        u, _ = self.head.apply(variables["head"], z, train=train)
        return z, u


def imagenet_normalize(images, mean=IMAGENET_MEAN, std=IMAGENET_STD):
    """``(x - mean) / std`` per channel for NHWC (or HWC) images with values in [0, 1]."""
    check_last_dim(images, "images", 3)
    images = jnp.asarray(images)
    if not jnp.issubdtype(images.dtype, jnp.floating):
        raise TypeError(f"`images` must be float in [0, 1]; got dtype {images.dtype} (divide uint8 images by 255).")
    return (images - jnp.asarray(mean, images.dtype)) / jnp.asarray(std, images.dtype)


# ----------------------------------------------------------------------------- safe loading
def _resolve_path(path, name: str | None) -> pathlib.Path:
    info = CHECKPOINTS.get(name) if name else None
    p = pathlib.Path(os.fspath(path))
    if p.is_dir() and info is not None:
        p = p / info.filename
    if not p.is_file():
        if info is not None:
            raise FileNotFoundError(
                f"Checkpoint file not found: {str(p)!r}. The {name} converter expects the official full "
                f"checkpoint {info.filename!r}, downloadable from {info.url} (layout: {info.source}).")
        raise FileNotFoundError(f"Checkpoint file not found: {str(p)!r}.")
    return p


def _tensors_only(obj, torch):
    """Nested dicts of tensors -> nested dicts of NumPy arrays; every non-tensor leaf is dropped."""
    if isinstance(obj, torch.Tensor):
        t = obj.detach().cpu()
        if t.dtype in (torch.bfloat16, torch.float16):
            t = t.float()
        return t.numpy()
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            c = _tensors_only(v, torch)
            if c is not None and not (isinstance(c, dict) and not c):
                out[str(k)] = c
        return out
    return None


def load_torch_checkpoint(path, *, name: str | None = None) -> dict:
    """Load a PyTorch checkpoint safely; return its tensors as nested dicts of NumPy arrays.

    Uses ``torch.load(path, map_location="cpu", weights_only=True)`` (``argparse.Namespace``
    allow-listed for DINO's ``args``). Non-tensor entries (epochs, optimizer hyper-parameters,
    ``args``) are dropped. ``name`` (a key of :data:`CHECKPOINTS`) makes a missing-file error name
    the expected file and its official URL; a directory ``path`` is searched for that file.

    Raises:
      FileNotFoundError: the file does not exist.
      UnsafeCheckpointError: the pickle holds other objects (it is not unpickled; nothing in it runs).
    """
    import argparse
    import pickle

    import torch

    p = _resolve_path(path, name)
    try:
        with torch.serialization.safe_globals([argparse.Namespace]):
            obj = torch.load(p, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        first = str(err).strip().splitlines()
        detail = next((ln for ln in first if "GLOBAL" in ln or "Unsupported" in ln), first[0] if first else "")
        raise UnsafeCheckpointError(
            f"Refusing to load {str(p)!r}: it contains pickled objects other than tensors and plain "
            f"containers, which could execute code when unpickled ({detail.strip()}). Only weights-only "
            "checkpoints are accepted.") from None
    out = _tensors_only(obj, torch)
    if out is None:
        raise CheckpointLayoutError(f"{str(p)!r} holds no tensors (a {type(obj).__name__}).")
    return out


def _strip(state: dict, prefix: str) -> dict:
    """Sub-dict of keys starting with ``prefix`` (prefix removed)."""
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}


def _drop_module(state: dict) -> dict:
    """Remove the ``module.`` prefix that DistributedDataParallel adds (when every key has it)."""
    if state and all(k.startswith("module.") for k in state):
        return {k[len("module."):]: v for k, v in state.items()}
    return state


def _layout_error(what: str, missing, unexpected, shapes=()) -> CheckpointLayoutError:
    def fmt(keys):
        keys = sorted(keys)
        return ", ".join(keys[:20]) + (f", ... ({len(keys)} in all)" if len(keys) > 20 else "")

    parts = [f"{what}: the state dict does not match the expected layout."]
    if missing:
        parts.append(f"Missing keys: {fmt(missing)}.")
    if unexpected:
        parts.append(f"Unexpected keys: {fmt(unexpected)}.")
    if shapes:
        parts.append("Shape mismatches: " + "; ".join(shapes[:20]) + ".")
    return CheckpointLayoutError(" ".join(parts))


_IGNORED = ("num_batches_tracked",)


def _to_flax(arr: np.ndarray, leaf: str, ndim: int) -> np.ndarray:
    if leaf == "kernel" and ndim == 4:  # conv (O, I, kh, kw) -> (kh, kw, I, O)
        return np.transpose(arr, (2, 3, 1, 0))
    if leaf == "kernel" and ndim == 2:  # linear (out, in) -> (in, out)
        return arr.T
    return arr


def variables_from_torch(template, state: dict, *, what: str = "backbone", dtype=jnp.float32) -> dict:
    """Fill a Flax variable tree ``template`` from a flat PyTorch ``state`` dict, mechanically.

    Each leaf path maps to :func:`ssl_geometry.backbones.torch_key`; conv kernels are transposed
    ``(O, I, kh, kw) -> (kh, kw, I, O)``, linear weights ``(out, in) -> (in, out)``. Every key of
    ``state`` must be consumed (``num_batches_tracked`` excepted) and every leaf found with the
    right shape, otherwise :class:`CheckpointLayoutError` lists the missing and unexpected keys.
    ``template`` may hold arrays or ``jax.ShapeDtypeStruct`` (e.g. from ``jax.eval_shape``).
    """
    flat, treedef = jax.tree_util.tree_flatten_with_path(template)
    used, missing, bad, leaves = set(), [], [], []
    for kp, leaf in flat:
        path = tuple(getattr(k, "key", getattr(k, "name", str(k))) for k in kp)
        key = _bb.torch_key(path)
        if key not in state:
            missing.append(key)
            leaves.append(None)
            continue
        used.add(key)
        arr = _to_flax(np.asarray(state[key]), path[-1], np.ndim(state[key]))
        if tuple(arr.shape) != tuple(leaf.shape):
            bad.append(f"{key}: checkpoint {tuple(np.shape(state[key]))}, expected {tuple(leaf.shape)} (Flax layout)")
        leaves.append(jnp.asarray(arr, dtype))
    unexpected = [k for k in state if k not in used and not k.endswith(_IGNORED)]
    if missing or unexpected or bad:
        raise _layout_error(what, missing, unexpected, bad)
    return jax.tree_util.tree_unflatten(treedef, leaves)


def resnet_from_torch(state: dict, *, depth: int = 50, cifar_stem: bool = False, dtype=jnp.float32):
    """``(model, variables)`` for a torchvision ResNet state dict (``fc`` absent or dropped)."""
    state = {k: v for k, v in state.items() if not k.startswith("fc.")}
    model = _bb.resnet(depth, cifar_stem=cifar_stem, dtype=dtype)
    template = jax.eval_shape(model.init, jax.random.PRNGKey(0))
    return model, variables_from_torch(template, state, what=f"resnet{depth}", dtype=dtype)


def vit_from_torch(state: dict, *, patch: int = 16, depth: int | None = None, heads: int = 6, dtype=jnp.float32):
    """``(model, variables)`` for a DINO ``VisionTransformer`` state dict; width, depth and the
    position grid (hence ``img_size``) are read from the tensors."""
    if "pos_embed" not in state or "cls_token" not in state:
        raise _layout_error("vit", [k for k in ("pos_embed", "cls_token") if k not in state], [])
    dim = int(np.shape(state["cls_token"])[-1])
    n = int(np.shape(state["pos_embed"])[1]) - 1
    g = int(round(math.sqrt(n)))
    if depth is None:
        depth = len({k.split(".")[1] for k in state if k.startswith("blocks.")})
    model = _bb.vit(img_size=g * patch, patch=patch, dim=dim, depth=depth, heads=heads, dtype=dtype,
                    name=f"vit(p{patch}, d{dim}, L{depth}, h{heads})")
    template = jax.eval_shape(model.init, jax.random.PRNGKey(0))
    return model, variables_from_torch(template, state, what="vit", dtype=dtype)


# ----------------------------------------------------------------------------- heads
def _l2_normalize(x, eps: float = 1e-12):
    """``F.normalize(x, dim=-1)``: ``x / max(||x||_2, eps)``."""
    return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), eps)


def dino_head(in_dim: int = 384, out_dim: int = 65536, *, hidden_dim: int = 2048, bottleneck_dim: int = 256,
              nlayers: int = 3, use_bn: bool = False, dtype=jnp.float32) -> Model:
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
    mlp = _heads.mlp(in_dim, (hidden_dim,) * (nlayers - 1), bottleneck_dim, activation="gelu", batch_norm=use_bn,
                     bias=True, dtype=dtype)

    def init(key):
        k1, k2 = jax.random.split(key)
        mv = mlp.init(k1)
        v = jax.random.truncated_normal(k2, -2.0, 2.0, (bottleneck_dim, out_dim), dtype) * 0.02
        out = {"params": {"mlp": mv["params"], "last_layer": {"g": jnp.ones((out_dim,), dtype), "v": v}}}
        if "batch_stats" in mv:
            out["batch_stats"] = {"mlp": mv["batch_stats"]}
        return out

    def apply(variables, z, *, train: bool = False):
        mv = {"params": variables["params"]["mlp"]}
        if use_bn:
            mv["batch_stats"] = variables["batch_stats"]["mlp"]
        h, st = mlp.apply(mv, z, train=train)
        ll = variables["params"]["last_layer"]
        w = ll["v"] * (ll["g"] / jnp.linalg.norm(ll["v"], axis=0))
        u = _l2_normalize(h) @ w
        return u, ({"batch_stats": {"mlp": st["batch_stats"]}} if use_bn else {})

    return Model(init=init, apply=apply, in_shape=(in_dim,), out_dim=out_dim,
                 name=f"dino_head({in_dim}->{hidden_dim}x{nlayers - 1}->{bottleneck_dim}->norm->wn {out_dim}, bn={use_bn})")


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
            out["batch_stats"] = {"bn": [{"mean": jnp.zeros((d,), dtype), "var": jnp.ones((d,), dtype)} for d in dims[1:-1]]}
        return out

    def apply(variables, z, *, train: bool = False):
        check_last_dim(z, "z", dims[0])
        if train:
            check_rank(z, "z", 2)
        p = variables["params"]
        h, stats = z, []
        for i, layer in enumerate(p["layers"]):
            h = h @ layer["w"]
            if "b" in layer:
                h = h + layer["b"]
            if i < n - 1:
                s = variables["batch_stats"]["bn"][i]
                h, (m, v) = _heads.batchnorm(h, p["bn"][i]["scale"], p["bn"][i]["bias"], s["mean"], s["var"], train=train)
                stats.append({"mean": m, "var": v})
                h = jax.nn.relu(h)
        return h, ({"batch_stats": {"bn": stats}} if n > 1 else {})

    return Model(init=init, apply=apply, in_shape=(dims[0],), out_dim=dims[-1],
                 name=f"vicreg_projector({'-'.join(map(str, dims))})")


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
        return {"params": {"projector": pv["params"]},
                "batch_stats": {"projector": pv["batch_stats"],
                                "loss_bn": {"mean": jnp.zeros((k,), dtype), "var": jnp.ones((k,), dtype)}}}

    def apply(variables, z, *, train: bool = False):
        bs = variables["batch_stats"]
        u, st = proj.apply({"params": variables["params"]["projector"], "batch_stats": bs["projector"]}, z, train=train)
        one, zero = jnp.ones((k,), u.dtype), jnp.zeros((k,), u.dtype)
        u, (m, v) = _heads.batchnorm(u, one, zero, bs["loss_bn"]["mean"], bs["loss_bn"]["var"], train=train)
        return u, {"batch_stats": {"projector": st["batch_stats"], "loss_bn": {"mean": m, "var": v}}}

    return Model(init=init, apply=apply, in_shape=(dims[0],), out_dim=k,
                 name=f"barlowtwins_projector({'-'.join(map(str, dims))}) + BN(affine=False)")


def _sequential_mlp(state: dict, prefix: str, *, what: str, bn: bool, stride: int, dtype, bias_last: bool | None = None):
    """Read an ``nn.Sequential`` MLP (``Linear, [BN], act`` repeated, final ``Linear``) into the
    :func:`ssl_geometry.heads.mlp` layout. ``stride`` = modules per hidden layer. Returns
    ``(variables, dims, used_keys)``."""
    sub = _strip(state, prefix)
    idx = sorted({int(k.split(".")[0]) for k in sub if k.split(".")[0].isdigit()})
    linear_idx = [i for i in idx if f"{i}.weight" in sub and np.ndim(sub[f"{i}.weight"]) == 2]
    if not linear_idx:
        raise _layout_error(what, [f"{prefix}0.weight"], [])
    expected = list(range(0, stride * (len(linear_idx) - 1) + 1, stride))
    if linear_idx != expected:
        raise _layout_error(what, [f"{prefix}{i}.weight" for i in expected if i not in linear_idx],
                            [f"{prefix}{i}.weight" for i in linear_idx if i not in expected])
    used, layers, bns, stats, dims = set(), [], [], [], []
    for j, i in enumerate(linear_idx):
        w = np.asarray(sub[f"{i}.weight"])
        used.add(f"{prefix}{i}.weight")
        dims = dims or [w.shape[1]]
        dims.append(w.shape[0])
        layer = {"w": jnp.asarray(w.T, dtype)}
        if f"{i}.bias" in sub:
            layer["b"] = jnp.asarray(sub[f"{i}.bias"], dtype)
            used.add(f"{prefix}{i}.bias")
        layers.append(layer)
        if bn and j < len(linear_idx) - 1:
            b = i + 1
            need = [f"{b}.{n}" for n in ("weight", "bias", "running_mean", "running_var")]
            miss = [prefix + k for k in need if k not in sub]
            if miss:
                raise _layout_error(what, miss, [])
            used.update(prefix + k for k in need)
            used.add(f"{prefix}{b}.num_batches_tracked")
            bns.append({"scale": jnp.asarray(sub[f"{b}.weight"], dtype), "bias": jnp.asarray(sub[f"{b}.bias"], dtype)})
            stats.append({"mean": jnp.asarray(sub[f"{b}.running_mean"], dtype), "var": jnp.asarray(sub[f"{b}.running_var"], dtype)})
    out = {"params": {"layers": layers}}
    if bns:
        out["params"]["bn"] = bns
        out["batch_stats"] = {"bn": stats}
    return out, tuple(dims), used


def _check_all_used(state: dict, used: set, what: str):
    unexpected = [k for k in state if k not in used and not k.endswith(_IGNORED)]
    if unexpected:
        raise _layout_error(what, [], unexpected)


# ----------------------------------------------------------------------------- converters
def _load(path_or_state, name):
    if isinstance(path_or_state, dict):
        return path_or_state
    return load_torch_checkpoint(path_or_state, name=name)


def _select(ckpt: dict, key: str, name: str) -> dict:
    """``ckpt[key]`` (e.g. ``"teacher"``, ``"model"``) without the DDP ``module.`` prefix."""
    if key not in ckpt or not isinstance(ckpt[key], dict):
        raise CheckpointLayoutError(
            f"{name}: expected a state dict under the top-level key {key!r} "
            f"(layout of {CHECKPOINTS[name].source}); the file has top-level keys {sorted(ckpt)}.")
    return _drop_module(ckpt[key])


def _dino_head_from_state(state, *, what, dtype):
    head_state = _strip(state, "head.")
    use_bn = any(k.endswith("running_mean") for k in head_state)
    mv, dims, used = _sequential_mlp(state, "head.mlp.", what=what, bn=use_bn, stride=3 if use_bn else 2, dtype=dtype)
    if "head.last_layer.weight_g" in state:
        gk, vk = "head.last_layer.weight_g", "head.last_layer.weight_v"
    else:
        gk, vk = "head.last_layer.parametrizations.weight.original0", "head.last_layer.parametrizations.weight.original1"
    miss = [k for k in (gk, vk) if k not in state]
    if miss:
        raise _layout_error(what, miss, [])
    used.update((gk, vk))
    g = np.asarray(state[gk]).reshape(-1)
    v = np.asarray(state[vk])
    if v.shape != (g.shape[0], dims[-1]):
        raise _layout_error(what, [], [], [f"{vk}: {v.shape}, expected ({g.shape[0]}, {dims[-1]})"])
    nlayers = len(dims) - 1
    hidden = dims[1] if nlayers > 1 else 2048
    head = dino_head(dims[0], g.shape[0], hidden_dim=hidden, bottleneck_dim=dims[-1], nlayers=nlayers, use_bn=use_bn,
                     dtype=dtype)
    hv = {"params": {"mlp": mv["params"], "last_layer": {"g": jnp.asarray(g, dtype), "v": jnp.asarray(v.T, dtype)}}}
    if use_bn:
        hv["batch_stats"] = {"mlp": mv["batch_stats"]}
    cfg = dict(in_dim=dims[0], out_dim=int(g.shape[0]), hidden_dim=hidden, bottleneck_dim=dims[-1], nlayers=nlayers,
               use_bn=use_bn)
    return head, hv, used, cfg


def convert_dino_vits16(path, *, which: str = "teacher", dtype=jnp.float32) -> Pretrained:
    """Convert ``dino_deitsmall16_pretrain_full_checkpoint.pth`` (ViT-S/16 + DINOHead).

    ``which`` selects the ``"teacher"`` (EMA network, the one DINO evaluates) or ``"student"``
    weights. ``path`` is the file, a directory holding it, or an already loaded dict.
    """
    check_choice(which, "which", ("teacher", "student"))
    name = "dino_vits16"
    state = _select(_load(path, name), which, name)
    bstate = _strip(state, "backbone.")
    backbone, bv = vit_from_torch(bstate, patch=16, heads=6, dtype=dtype)
    head, hv, used, hcfg = _dino_head_from_state(state, what=f"{name} head", dtype=dtype)
    _check_all_used(state, used | {f"backbone.{k}" for k in bstate}, name)
    cfg = {"kind": name, "which": which, "img_size": backbone.in_shape[0], "depth": int(len([k for k in bv["params"] if k.startswith("blocks_")])),
           "dim": backbone.out_dim, "head": hcfg}
    return Pretrained(backbone, head, {"backbone": bv, "head": hv}, cfg)


def convert_dino_resnet50(path, *, which: str = "teacher", dtype=jnp.float32) -> Pretrained:
    """Convert ``dino_resnet50_pretrain_full_checkpoint.pth`` (torchvision ResNet-50 + DINOHead;
    BatchNorm in the head iff the checkpoint has it). ``which``: ``"teacher"`` or ``"student"``."""
    check_choice(which, "which", ("teacher", "student"))
    name = "dino_resnet50"
    state = _select(_load(path, name), which, name)
    bstate = _strip(state, "backbone.")
    backbone, bv = resnet_from_torch(bstate, depth=50, dtype=dtype)
    head, hv, used, hcfg = _dino_head_from_state(state, what=f"{name} head", dtype=dtype)
    _check_all_used(state, used | {f"backbone.{k}" for k in bstate}, name)
    cfg = {"kind": name, "which": which, "head": hcfg}
    return Pretrained(backbone, head, {"backbone": bv, "head": hv}, cfg)


def convert_vicreg_resnet50(path, *, dtype=jnp.float32) -> Pretrained:
    """Convert VICReg's ``resnet50_fullckpt.pth`` (``{"model": DDP state dict}``: ResNet-50 + expander)."""
    name = "vicreg_resnet50"
    state = _select(_load(path, name), "model", name)
    bstate = _strip(state, "backbone.")
    backbone, bv = resnet_from_torch(bstate, depth=50, dtype=dtype)
    hv, dims, used = _sequential_mlp(state, "projector.", what=f"{name} projector", bn=True, stride=3, dtype=dtype)
    if "b" in hv["params"]["layers"][-1] or any("b" not in l for l in hv["params"]["layers"][:-1]):
        raise CheckpointLayoutError(f"{name} projector: expected biases on hidden Linear layers only (VICReg Projector).")
    _check_all_used(state, used | {f"backbone.{k}" for k in bstate}, name)
    head = vicreg_projector(dims, dtype=dtype)
    return Pretrained(backbone, head, {"backbone": bv, "head": hv}, {"kind": name, "dims": list(dims)})


def convert_barlowtwins_resnet50(path, *, loss_bn: bool = False, dtype=jnp.float32) -> Pretrained:
    """Convert Barlow Twins' ``checkpoint.pth`` (``{"model": DDP state dict}``: ResNet-50, projector,
    loss BatchNorm). ``loss_bn=True`` appends the loss's ``BatchNorm1d(affine=False)`` to the head."""
    name = "barlowtwins_resnet50"
    state = _select(_load(path, name), "model", name)
    bstate = _strip(state, "backbone.")
    backbone, bv = resnet_from_torch(bstate, depth=50, dtype=dtype)
    pv, dims, used = _sequential_mlp(state, "projector.", what=f"{name} projector", bn=True, stride=3, dtype=dtype)
    if any("b" in l for l in pv["params"]["layers"]):
        raise CheckpointLayoutError(f"{name} projector: Barlow Twins' Linear layers are bias-free; found a bias.")
    need = ["bn.running_mean", "bn.running_var"]
    miss = [k for k in need if k not in state]
    if miss:
        raise _layout_error(name, miss, [])
    used.update(need)
    _check_all_used(state, used | {f"backbone.{k}" for k in bstate}, name)
    head = barlowtwins_projector(dims, loss_bn=loss_bn, dtype=dtype)
    if loss_bn:
        hv = {"params": {"projector": pv["params"]},
              "batch_stats": {"projector": pv["batch_stats"],
                              "loss_bn": {"mean": jnp.asarray(state["bn.running_mean"], dtype),
                                          "var": jnp.asarray(state["bn.running_var"], dtype)}}}
    else:
        hv = pv
    return Pretrained(backbone, head, {"backbone": bv, "head": hv},
                      {"kind": name, "dims": list(dims), "loss_bn": loss_bn})


# ----------------------------------------------------------------------------- save / load
_INDEX = re.compile(r"^\[(\d+)\]$")


def _flatten(tree, prefix=""):
    if isinstance(tree, dict):
        for k, v in tree.items():
            if "/" in str(k) or _INDEX.match(str(k)):
                raise ValueError(f"variable name {k!r} cannot be saved (contains '/' or looks like a list index).")
            yield from _flatten(v, f"{prefix}{k}/")
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            yield from _flatten(v, f"{prefix}[{i}]/")
    else:
        yield prefix[:-1], np.asarray(tree)


def _unflatten(flat: dict):
    root: dict = {}
    for key, arr in flat.items():
        node = root
        parts = key.split("/")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = arr

    def fix(node):
        if not isinstance(node, dict):
            return node
        node = {k: fix(v) for k, v in node.items()}
        if node and all(_INDEX.match(k) for k in node):
            return [node[f"[{i}]"] for i in range(len(node))]
        return node

    return fix(root)


def save_converted(variables, path, config: dict | None = None) -> pathlib.Path:
    """Write a variables pytree (nested dicts/lists of arrays) to a ``.safetensors`` file.

    A :class:`Pretrained` may be passed directly (its ``config`` is stored too, so
    :func:`load_converted` can rebuild the models). Keys are ``/``-joined paths, list items ``[i]``.
    """
    from safetensors.numpy import save_file

    if isinstance(variables, Pretrained):
        config = variables.config if config is None else config
        variables = variables.variables
    flat = {k: np.ascontiguousarray(v) for k, v in _flatten(variables)}
    meta = {"format": "ssl_geometry.pretrained/1", "config": json.dumps(config or {})}
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(flat, str(path), metadata=meta)
    return path


def load_converted(path, *, as_jax: bool = True):
    """Read a file written by :func:`save_converted` with NumPy + ``safetensors`` (no torch).

    Returns a :class:`Pretrained` when the file carries a converter config, else the variables
    pytree (``jax.Array`` leaves, or NumPy with ``as_jax=False``).
    """
    from safetensors import safe_open
    from safetensors.numpy import load_file

    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Converted checkpoint not found: {str(path)!r} (write it with save_converted).")
    with safe_open(str(path), framework="numpy") as f:
        meta = f.metadata() or {}
    tree = _unflatten(load_file(str(path)))
    if as_jax:
        tree = jax.tree_util.tree_map(jnp.asarray, tree)
    config = json.loads(meta.get("config", "{}"))
    if not config.get("kind"):
        return tree
    return Pretrained(*_build(config, tree["backbone"]), tree, config)


def _build(config: dict, bv) -> tuple[Model, Model]:
    kind = config["kind"]
    dtype = jax.tree_util.tree_leaves(bv)[0].dtype
    if kind == "dino_vits16":
        backbone = _bb.vit(img_size=config["img_size"], patch=16, dim=config["dim"], depth=config["depth"], heads=6,
                           dtype=dtype, name="vit_small16 (DINO ViT-S/16)")
        return backbone, dino_head(**config["head"], dtype=dtype)
    backbone = _bb.resnet50(dtype=dtype)
    if kind == "dino_resnet50":
        return backbone, dino_head(**config["head"], dtype=dtype)
    if kind == "vicreg_resnet50":
        return backbone, vicreg_projector(config["dims"], dtype=dtype)
    if kind == "barlowtwins_resnet50":
        return backbone, barlowtwins_projector(config["dims"], loss_bn=config["loss_bn"], dtype=dtype)
    raise ValueError(f"Unknown converted checkpoint kind {kind!r}; expected one of {sorted(CHECKPOINTS)}.")
