"""Reading PyTorch checkpoints safely: the checkpoint table, the loader and its errors.

Part of :mod:`ssl_geometry.pretrained` (re-exported there). A file is classified before
and while it is read, so each failure says what it is:

* missing file -> ``FileNotFoundError`` (with the official file name and URL when ``name`` is given);
* not a PyTorch checkpoint (a text file, an empty file) or a damaged one (truncated, bytes
  flipped) -> :class:`CorruptCheckpointError`;
* a readable pickle that references callables other than tensor rebuilders and plain containers
  (a code-execution payload) -> :class:`UnsafeCheckpointError`; nothing in it runs;
* a readable checkpoint without tensors (``{"epoch": 3}``) -> :class:`CheckpointLayoutError`.
"""

import io
import os
import pathlib
import pickletools
import zipfile
from typing import NamedTuple

from ssl_geometry._src.checks import check_choice

__all__ = [
    "CHECKPOINTS",
    "CheckpointInfo",
    "CheckpointLayoutError",
    "CorruptCheckpointError",
    "UnsafeCheckpointError",
    "load_torch_checkpoint",
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
        "facebookresearch/dino: main_dino.py, vision_transformer.py",
    ),
    "dino_resnet50": CheckpointInfo(
        "dino_resnet50_pretrain_full_checkpoint.pth",
        "https://dl.fbaipublicfiles.com/dino/dino_resnet50_pretrain/dino_resnet50_pretrain_full_checkpoint.pth",
        "facebookresearch/dino: main_dino.py, vision_transformer.py (DINOHead)",
    ),
    "vicreg_resnet50": CheckpointInfo(
        "resnet50_fullckpt.pth",
        "https://dl.fbaipublicfiles.com/vicreg/resnet50_fullckpt.pth",
        "facebookresearch/vicreg: main_vicreg.py (Projector), resnet.py",
    ),
    "barlowtwins_resnet50": CheckpointInfo(
        "checkpoint.pth",
        "https://dl.fbaipublicfiles.com/barlowtwins/ljng/checkpoint.pth",
        "facebookresearch/barlowtwins: main.py (BarlowTwins)",
    ),
}


class UnsafeCheckpointError(RuntimeError):
    """The checkpoint holds pickled objects other than tensors, containers and primitives."""


class CheckpointLayoutError(ValueError):
    """The state dict does not have the expected keys / shapes (or holds no tensors at all)."""


class CorruptCheckpointError(ValueError):
    """The file is not a PyTorch checkpoint, or it is damaged (truncated, corrupted bytes)."""


_ZIP_MAGIC = b"PK\x03\x04"
_PICKLE_PROTO = 0x80  # the PROTO opcode every pickle of protocol >= 2 (torch's legacy format) starts with
#: Callables a weights-only checkpoint may name (module prefixes): tensor and storage rebuilders,
#: ordered dicts, DINO's argparse.Namespace of training arguments.
_SAFE_GLOBAL_MODULES = ("torch", "collections", "argparse")
_SAFE_GLOBALS_EXACT = {"builtins set", "builtins frozenset", "builtins bytearray", "builtins slice", "_codecs encode"}


def _resolve_path(path, name: str | None) -> pathlib.Path:
    info = CHECKPOINTS.get(name) if name else None
    p = pathlib.Path(os.fspath(path))
    if p.is_dir() and info is not None:
        p = p / info.filename
    if not p.is_file():
        if info is not None:
            raise FileNotFoundError(
                f"Checkpoint file not found: {str(p)!r}. The {name} converter expects the official full "
                f"checkpoint {info.filename!r}, downloadable from {info.url} (layout: {info.source})."
            )
        raise FileNotFoundError(f"Checkpoint file not found: {str(p)!r}.")
    return p


def _corrupt(p, what: str) -> CorruptCheckpointError:
    return CorruptCheckpointError(
        f"{str(p)!r} is not a readable PyTorch checkpoint ({what}): the file is not "
        "a checkpoint, or it is truncated or corrupted. Download it again."
    )


def _check_header(p: pathlib.Path) -> bytes:
    """The file's first bytes; :class:`CorruptCheckpointError` unless it looks like a torch file."""
    with open(p, "rb") as f:
        head = f.read(8)
    if not head:
        raise _corrupt(p, "the file is empty")
    if not (head.startswith(_ZIP_MAGIC) or head[0] == _PICKLE_PROTO):
        raise _corrupt(p, f"it starts with {head!r}, neither a zip archive nor a pickle")
    return head


def _pickle_bytes(p: pathlib.Path, head: bytes) -> bytes:
    """The pickle stream of a checkpoint: ``*/data.pkl`` of the zip format, or the whole legacy file."""
    if not head.startswith(_ZIP_MAGIC):
        return p.read_bytes()
    with zipfile.ZipFile(p) as zf:
        names = [n for n in zf.namelist() if n.endswith("data.pkl")]
        if not names:
            raise _corrupt(p, "the zip archive has no data.pkl")
        return zf.read(names[0])


def _unsafe_globals(data: bytes) -> list[str]:
    """Callables the pickle ``data`` names outside the weights-only allow-list (nothing is executed).

    Reads the opcodes with :func:`pickletools.genops`: ``GLOBAL`` carries ``"module name"``;
    ``STACK_GLOBAL`` takes the two strings pushed before it. Raises ``ValueError`` for a damaged stream.
    """
    found: list[str] = []
    strings: list[str] = []
    for op, arg, _ in pickletools.genops(io.BytesIO(data)):
        if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE", "BINUNICODE8"):
            strings.append(str(arg))
        elif op.name in ("GLOBAL", "INST"):
            found.append(str(arg))
        elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
            found.append(f"{strings[-2]} {strings[-1]}")
        elif op.name == "STOP":
            break
    return [g for g in found if not (g.split(" ")[0].split(".")[0] in _SAFE_GLOBAL_MODULES or g in _SAFE_GLOBALS_EXACT)]


def _classify_unpickling_error(p, head: bytes, err: Exception) -> Exception:
    """Unsafe content (a disallowed global) or a damaged / unsupported file."""
    message = str(err).strip()
    try:
        bad = _unsafe_globals(_pickle_bytes(p, head))
    except (ValueError, EOFError, zipfile.BadZipFile, KeyError, UnicodeDecodeError):
        return _corrupt(p, message.splitlines()[0] if message else type(err).__name__)
    lines = message.splitlines()
    detail = next((ln for ln in lines if "GLOBAL" in ln), "")
    if bad or detail:
        names = ", ".join(sorted(set(bad))[:5]) or detail.strip()
        return UnsafeCheckpointError(
            f"Refusing to load {str(p)!r}: it contains pickled objects other than tensors and plain "
            f"containers, which could execute code when unpickled ({names}). Only weights-only "
            "checkpoints are accepted."
        )
    return _corrupt(p, f"the weights-only unpickler cannot read it: {lines[0] if lines else type(err).__name__}")


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
    ``args``) are dropped. ``name`` (a key of :data:`CHECKPOINTS`; any other is refused, naming
    the known ones) makes a missing-file error name the expected file and its official URL; a
    directory ``path`` is searched for that file. The tensors are checked against the models by
    the ``convert_*`` functions, which read them into the models' variables.

    Raises:
      ValueError: ``name`` is not a key of :data:`CHECKPOINTS`.
      FileNotFoundError: the file does not exist.
      CorruptCheckpointError: the file is not a PyTorch checkpoint (text, empty) or is damaged.
      UnsafeCheckpointError: the pickle names other callables (it is not unpickled; nothing in it runs).
      CheckpointLayoutError: the checkpoint holds no tensors (e.g. ``{"epoch": 3}``).
    """
    import argparse
    import pickle

    import torch

    if name is not None:
        check_choice(name, "checkpoint name", CHECKPOINTS)
    p = _resolve_path(path, name)
    head = _check_header(p)
    try:
        with torch.serialization.safe_globals([argparse.Namespace]):
            obj = torch.load(p, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        raise _classify_unpickling_error(p, head, err) from None
    except (RuntimeError, EOFError, KeyError, IndexError, ValueError, OSError, zipfile.BadZipFile) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise _corrupt(p, f"{type(err).__name__}: {first[:200]}") from None
    out = _tensors_only(obj, torch)
    if not out:
        keys = f" (top-level keys {sorted(map(str, obj))[:10]})" if isinstance(obj, dict) else ""
        raise CheckpointLayoutError(
            f"{str(p)!r} holds no tensors: a {type(obj).__name__}{keys}, not a model checkpoint."
        )
    return out
