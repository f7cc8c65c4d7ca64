"""Experiment 9, checkpoints: finding and loading the released checkpoints, and their random-initialisation controls."""

from __future__ import annotations

import functools
import pathlib

import jax

from ssl_geometry import backbones, pretrained

__all__ = ["find_checkpoint", "load_checkpoint", "resnet50_backbone", "control_models"]


def find_checkpoint(name: str, directory) -> pathlib.Path | None:
    """The file of checkpoint ``name`` in ``directory``, or ``None``.

    Searched in order: ``<dir>/<official file>``, ``<dir>/<name>/<official file>`` (the official
    names are :data:`pretrained.CHECKPOINTS`; Barlow Twins' ``checkpoint.pth`` is generic, so a
    sub-directory per release is accepted) and ``<dir>/<name>.safetensors`` (written by
    :func:`pretrained.save_converted`).
    """
    if name not in pretrained.CHECKPOINTS:
        raise ValueError(f"Unknown checkpoint {name!r}; expected one of {sorted(pretrained.CHECKPOINTS)}.")
    d = pathlib.Path(directory).expanduser()
    info = pretrained.CHECKPOINTS[name]
    for p in (d / info.filename, d / name / info.filename, d / f"{name}.safetensors"):
        if p.is_file():
            return p
    return None


def load_checkpoint(name: str, path, *, dino_which: str = "teacher", barlowtwins_loss_bn: bool = False):
    """A :class:`pretrained.Pretrained` from an official ``.pth`` (converter by ``name``) or a
    converted ``.safetensors`` (its stored kind must be ``name``)."""
    path = pathlib.Path(path)
    if path.suffix == ".safetensors":
        pre = pretrained.load_converted(path)
        if not isinstance(pre, pretrained.Pretrained) or pre.config.get("kind") != name:
            kind = pre.config.get("kind") if isinstance(pre, pretrained.Pretrained) else None
            raise ValueError(f"{str(path)!r} holds a converted checkpoint of kind {kind!r}, not {name!r}.")
        return pre
    if name == "dino_vits16":
        return pretrained.convert_dino_vits16(path, which=dino_which)
    if name == "dino_resnet50":
        return pretrained.convert_dino_resnet50(path, which=dino_which)
    if name == "vicreg_resnet50":
        return pretrained.convert_vicreg_resnet50(path)
    return pretrained.convert_barlowtwins_resnet50(path, loss_bn=barlowtwins_loss_bn)


@functools.lru_cache(maxsize=None)
def resnet50_backbone(image_size: int):
    """One ResNet-50 Model per size, so its jitted jvp compiles once for all ResNet checkpoints."""
    return backbones.resnet50(image_size=image_size)


@functools.lru_cache(maxsize=None)
def _vit_small16(image_size: int):
    return backbones.vit_small16(img_size=image_size)


@functools.lru_cache(maxsize=None)
def _control_head(name: str, d: int, dims: tuple, loss_bn: bool):
    """The release's head type at the control widths (cached: one compile per setting)."""
    if name.startswith("dino"):
        hidden, bottleneck, out = dims
        return pretrained.dino_head(d, out, hidden_dim=hidden, bottleneck_dim=bottleneck)
    if name == "vicreg_resnet50":
        return pretrained.vicreg_projector((d, *dims))
    return pretrained.barlowtwins_projector((d, *dims), loss_bn=loss_bn)


def control_models(name: str, config, key):
    """``(backbone, head, variables)``: the release's architecture with a randomly initialised head
    of the control widths (``config.control.dino``, ``config.control.projector``)."""
    size = int(config.control.image_size)
    if name == "dino_vits16":
        backbone = _vit_small16(size)
    else:
        backbone = resnet50_backbone(size)
    if name.startswith("dino"):
        cd = config.control.dino
        dims = (int(cd.hidden), int(cd.bottleneck), int(cd.out))
    else:
        dims = tuple(int(w) for w in config.control.projector)
    head = _control_head(name, backbone.out_dim, dims, bool(config.model.barlowtwins_loss_bn))
    kb, kh = jax.random.split(key)
    return backbone, head, {"backbone": backbone.init(kb), "head": head.init(kh)}
