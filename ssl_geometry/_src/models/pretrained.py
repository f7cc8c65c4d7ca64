"""Converters for the released self-supervised checkpoints (backbone AND head) into JAX variables.

Implementation of :mod:`ssl_geometry.pretrained`; the conventions and formulas are in its docstring.
"""

from __future__ import annotations

import json
import math
import pathlib
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ssl_geometry._src.checks import check_choice, check_last_dim, optional_import
from ssl_geometry._src.models import backbones as _bb
from ssl_geometry._src.models._checkpoint_io import CHECKPOINTS as CHECKPOINTS
from ssl_geometry._src.models._checkpoint_io import CheckpointInfo as CheckpointInfo
from ssl_geometry._src.models._checkpoint_io import CheckpointLayoutError as CheckpointLayoutError
from ssl_geometry._src.models._checkpoint_io import CorruptCheckpointError as CorruptCheckpointError
from ssl_geometry._src.models._checkpoint_io import UnsafeCheckpointError as UnsafeCheckpointError
from ssl_geometry._src.models._checkpoint_io import load_torch_checkpoint as load_torch_checkpoint
from ssl_geometry._src.models._pretrained_heads import barlowtwins_projector as barlowtwins_projector
from ssl_geometry._src.models._pretrained_heads import dino_head as dino_head
from ssl_geometry._src.models._pretrained_heads import vicreg_projector as vicreg_projector
from ssl_geometry._src.models._safetensors_tree import flatten as flatten_tree
from ssl_geometry._src.models._safetensors_tree import read_safetensors
from ssl_geometry._src.models._safetensors_tree import unflatten as unflatten_tree
from ssl_geometry._src.models.base import Model

__all__ = [
    "CHECKPOINTS",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "CheckpointInfo",
    "CheckpointLayoutError",
    "CorruptCheckpointError",
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


#: ImageNet channel statistics (torchvision ``Normalize``), used by all four releases.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


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


def _strip(state: dict, prefix: str) -> dict:
    """Sub-dict of keys starting with ``prefix`` (prefix removed)."""
    return {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}


def _drop_module(state: dict) -> dict:
    """Remove the ``module.`` prefix that DistributedDataParallel adds (when every key has it)."""
    if state and all(k.startswith("module.") for k in state):
        return {k[len("module.") :]: v for k, v in state.items()}
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
    used, missing, bad = set(), [], []
    leaves: list = []  # a template leaf's array, None where the state lacks it
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
    model = _bb.vit(
        img_size=g * patch,
        patch=patch,
        dim=dim,
        depth=depth,
        heads=heads,
        dtype=dtype,
        name=f"vit(p{patch}, d{dim}, L{depth}, h{heads})",
    )
    template = jax.eval_shape(model.init, jax.random.PRNGKey(0))
    return model, variables_from_torch(template, state, what="vit", dtype=dtype)


def _sequential_mlp(
    state: dict, prefix: str, *, what: str, bn: bool, stride: int, dtype, bias_last: bool | None = None
):
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
        raise _layout_error(
            what,
            [f"{prefix}{i}.weight" for i in expected if i not in linear_idx],
            [f"{prefix}{i}.weight" for i in linear_idx if i not in expected],
        )
    used, layers, bns, stats = set(), [], [], []
    dims: list[int] = []
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
            stats.append(
                {
                    "mean": jnp.asarray(sub[f"{b}.running_mean"], dtype),
                    "var": jnp.asarray(sub[f"{b}.running_var"], dtype),
                }
            )
    out = {"params": {"layers": layers}}
    if bns:
        out["params"]["bn"] = bns
        out["batch_stats"] = {"bn": stats}
    return out, tuple(dims), used


def _check_all_used(state: dict, used: set, what: str):
    unexpected = [k for k in state if k not in used and not k.endswith(_IGNORED)]
    if unexpected:
        raise _layout_error(what, [], unexpected)


def _shape_paths(tree, prefix: str = "") -> dict:
    """``{"params/layers[0]/w": shape, ...}`` for every leaf of nested dicts and lists (arrays or
    ``jax.ShapeDtypeStruct``), in tree order."""
    if isinstance(tree, dict):
        out = {}
        for k, v in tree.items():
            out.update(_shape_paths(v, f"{prefix}/{k}" if prefix else str(k)))
        return out
    if isinstance(tree, (list, tuple)):
        out = {}
        for i, v in enumerate(tree):
            out.update(_shape_paths(v, f"{prefix}[{i}]"))
        return out
    return {prefix: tuple(np.shape(tree))}


def _check_against_model(model: Model, variables, what: str) -> None:
    """Raise :class:`CheckpointLayoutError` unless ``variables`` has exactly the leaves, and every leaf
    the shape, of ``model.init`` (read by ``jax.eval_shape``: nothing is initialised).

    The message names ``what`` (e.g. the file and ``"head"``), the first leaf that differs, and both
    shapes (or that the leaf is missing or unexpected).
    """
    want = _shape_paths(jax.eval_shape(model.init, jax.random.PRNGKey(0)))
    got = _shape_paths(variables)
    for path, shape in want.items():
        if path not in got:
            raise CheckpointLayoutError(f"{what}: the tensor {path} (shape {shape}) of {model.name} is missing.")
        if got[path] != shape:
            raise CheckpointLayoutError(
                f"{what}: the tensor {path} has shape {got[path]}, but {model.name} expects {shape}."
            )
    extra = [path for path in got if path not in want]
    if extra:
        raise CheckpointLayoutError(
            f"{what}: the tensor {extra[0]} (shape {got[extra[0]]}) is not a tensor of "
            f"{model.name}" + (f" ({len(extra)} such tensors)." if len(extra) > 1 else ".")
        )


def _pretrained(backbone: Model, head: Model, variables: dict, config: dict, where: str) -> Pretrained:
    """The :class:`Pretrained`, after every tensor was checked against its model."""
    _check_against_model(backbone, variables["backbone"], f"{where}: backbone")
    _check_against_model(head, variables["head"], f"{where}: head")
    return Pretrained(backbone, head, variables, config)


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
            f"(layout of {CHECKPOINTS[name].source}); the file has top-level keys {sorted(ckpt)}."
        )
    return _drop_module(ckpt[key])


def _dino_head_from_state(state, *, what, dtype):
    head_state = _strip(state, "head.")
    use_bn = any(k.endswith("running_mean") for k in head_state)
    mv, dims, used = _sequential_mlp(state, "head.mlp.", what=what, bn=use_bn, stride=3 if use_bn else 2, dtype=dtype)
    if "head.last_layer.weight_g" in state:
        gk, vk = "head.last_layer.weight_g", "head.last_layer.weight_v"
    else:
        gk, vk = (
            "head.last_layer.parametrizations.weight.original0",
            "head.last_layer.parametrizations.weight.original1",
        )
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
    head = dino_head(
        dims[0], g.shape[0], hidden_dim=hidden, bottleneck_dim=dims[-1], nlayers=nlayers, use_bn=use_bn, dtype=dtype
    )
    hv = {"params": {"mlp": mv["params"], "last_layer": {"g": jnp.asarray(g, dtype), "v": jnp.asarray(v.T, dtype)}}}
    if use_bn:
        hv["batch_stats"] = {"mlp": mv["batch_stats"]}
    cfg = dict(
        in_dim=dims[0],
        out_dim=int(g.shape[0]),
        hidden_dim=hidden,
        bottleneck_dim=dims[-1],
        nlayers=nlayers,
        use_bn=use_bn,
    )
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
    depth = len([k for k in bv["params"] if k.startswith("blocks_")])
    cfg = {
        "kind": name,
        "which": which,
        "img_size": backbone.in_shape[0],
        "depth": depth,
        "dim": backbone.out_dim,
        "head": hcfg,
    }
    return _pretrained(backbone, head, {"backbone": bv, "head": hv}, cfg, name)


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
    return _pretrained(backbone, head, {"backbone": bv, "head": hv}, cfg, name)


def convert_vicreg_resnet50(path, *, dtype=jnp.float32) -> Pretrained:
    """Convert VICReg's ``resnet50_fullckpt.pth`` (``{"model": DDP state dict}``: ResNet-50 + expander)."""
    name = "vicreg_resnet50"
    state = _select(_load(path, name), "model", name)
    bstate = _strip(state, "backbone.")
    backbone, bv = resnet_from_torch(bstate, depth=50, dtype=dtype)
    hv, dims, used = _sequential_mlp(state, "projector.", what=f"{name} projector", bn=True, stride=3, dtype=dtype)
    if "b" in hv["params"]["layers"][-1] or any("b" not in l for l in hv["params"]["layers"][:-1]):
        raise CheckpointLayoutError(
            f"{name} projector: expected biases on hidden Linear layers only (VICReg Projector)."
        )
    _check_all_used(state, used | {f"backbone.{k}" for k in bstate}, name)
    head = vicreg_projector(dims, dtype=dtype)
    return _pretrained(backbone, head, {"backbone": bv, "head": hv}, {"kind": name, "dims": list(dims)}, name)


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
        hv = {
            "params": {"projector": pv["params"]},
            "batch_stats": {
                "projector": pv["batch_stats"],
                "loss_bn": {
                    "mean": jnp.asarray(state["bn.running_mean"], dtype),
                    "var": jnp.asarray(state["bn.running_var"], dtype),
                },
            },
        }
    else:
        hv = pv
    return _pretrained(
        backbone, head, {"backbone": bv, "head": hv}, {"kind": name, "dims": list(dims), "loss_bn": loss_bn}, name
    )


# ----------------------------------------------------------------------------- save / load
def save_converted(variables, path, config: dict | None = None) -> pathlib.Path:
    """Write a variables pytree (nested dicts/lists of arrays) to a ``.safetensors`` file.

    A :class:`Pretrained` may be passed directly (its ``config`` is stored too, so
    :func:`load_converted` can rebuild the models). Keys are ``/``-joined paths, list items ``[i]``.
    """
    save_file = optional_import("safetensors.numpy").save_file

    if isinstance(variables, Pretrained):
        config = variables.config if config is None else config
        variables = variables.variables
    flat = {k: np.ascontiguousarray(v) for k, v in flatten_tree(variables)}
    meta = {"format": "ssl_geometry.pretrained/1", "config": json.dumps(config or {})}
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(flat, str(path), metadata=meta)
    return path


def load_converted(path, *, as_jax: bool = True):
    """Read a file written by :func:`save_converted` with NumPy + ``safetensors`` (no torch).

    Returns a :class:`Pretrained` when the file carries a converter config, else the variables
    pytree (``jax.Array`` leaves, or NumPy with ``as_jax=False``). A :class:`Pretrained` is returned
    only when every tensor has the shape its rebuilt model expects and none is missing or extra.

    Raises:
      FileNotFoundError: no such file.
      CorruptCheckpointError: the file is not a readable safetensors file (truncated, corrupted,
        another format) or its config is not valid JSON or lacks a field its kind needs; the path
        is named.
      CheckpointLayoutError: the config names an unknown kind (the known ones are named), or a
        tensor does not fit the model the config names (the first that differs is named).
    """
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Converted checkpoint not found: {str(path)!r} (write it with save_converted).")
    flat, config = read_safetensors(path)
    try:
        tree = unflatten_tree(flat)
    except (TypeError, KeyError, AttributeError) as err:
        raise CorruptCheckpointError(
            f"{str(path)!r}: its tensor names do not form a variables tree ({type(err).__name__}: {err})."
        ) from None
    if as_jax:
        tree = jax.tree_util.tree_map(jnp.asarray, tree)
    if not config.get("kind"):
        return tree
    where = repr(str(path))
    _check_kind(config["kind"], where)
    if not isinstance(tree, dict) or set(tree) != {"backbone", "head"}:
        got = sorted(tree) if isinstance(tree, dict) else type(tree).__name__
        raise CheckpointLayoutError(
            f"{where}: a {config['kind']} file holds the tensors 'backbone/...' and "
            f"'head/...'; got top-level names {got}."
        )
    try:
        backbone, head = _build(config, tree["backbone"])
    except (KeyError, TypeError, ValueError) as err:
        raise CorruptCheckpointError(
            f"{where}: its config cannot rebuild the {config['kind']} models "
            f"({type(err).__name__}: {err}); config = {config}."
        ) from None
    return _pretrained(backbone, head, tree, config, where)


def _check_kind(kind, where: str) -> None:
    """:class:`CheckpointLayoutError` unless ``kind`` is a key of :data:`CHECKPOINTS` (naming them)."""
    if kind not in CHECKPOINTS:
        raise CheckpointLayoutError(
            f"{where}: unknown converted checkpoint kind {kind!r}; expected one of {sorted(CHECKPOINTS)}."
        )


def _build(config: dict, bv) -> tuple[Model, Model]:
    kind = config["kind"]
    dtype = jax.tree_util.tree_leaves(bv)[0].dtype
    if kind == "dino_vits16":
        backbone = _bb.vit(
            img_size=config["img_size"],
            patch=16,
            dim=config["dim"],
            depth=config["depth"],
            heads=6,
            dtype=dtype,
            name="vit_small16 (DINO ViT-S/16)",
        )
        return backbone, dino_head(**config["head"], dtype=dtype)
    backbone = _bb.resnet50(dtype=dtype)
    if kind == "dino_resnet50":
        return backbone, dino_head(**config["head"], dtype=dtype)
    if kind == "vicreg_resnet50":
        return backbone, vicreg_projector(config["dims"], dtype=dtype)
    return backbone, barlowtwins_projector(config["dims"], loss_bn=config["loss_bn"], dtype=dtype)
