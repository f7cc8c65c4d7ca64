"""The loss registry: every loss by name, with what a caller (and a test) needs to know about it.

To add a loss: write it in the family module it belongs to, export it from
:mod:`ssl_geometry.losses`, and add one :class:`LossSpec` to :data:`REGISTRY`. The
registry-parametrized tests (``tests/test_losses.py``, ``tests/test_registries.py``)
then run on it, and ask for a NumPy reference of it.
"""

from collections.abc import Callable
from typing import NamedTuple

from ssl_geometry._src.checks import check_choice
from ssl_geometry._src.ssl.losses.contrastive import info_nce, info_nce_one_way, moco, moco_v3, spectral_contrastive
from ssl_geometry._src.ssl.losses.cosine import byol, mse, negative_cosine, simsiam
from ssl_geometry._src.ssl.losses.distillation import dino
from ssl_geometry._src.ssl.losses.redundancy import barlow_twins, vicreg, wmse

__all__ = ["BatchNeeds", "LOSSES", "LossSpec", "NEEDS_BATCH", "REGISTRY", "get", "min_batch_size", "spec"]


class BatchNeeds(NamedTuple):
    """How a loss depends on the batch.

    Attributes:
      batch_statistics: the value for one sample depends on the other samples.
      min_batch: smallest batch size ``n`` the loss accepts.
      why: what the batch is used for.
    """

    batch_statistics: bool
    min_batch: int
    why: str


class LossSpec(NamedTuple):
    """One registered loss.

    Attributes:
      fn: the loss function.
      args: names of its positional array arguments, in order.
      differentiable: indices into ``args`` that gradients flow into.
      stop_gradient: indices into ``args`` behind a stop-gradient (zero gradient).
      stateful: ``fn`` returns ``(loss, new_state)`` (MoCo's queue, DINO's centre).
      batch: its :class:`BatchNeeds`.
      hessian_psd: the Hessian ``H_L`` in the differentiable arguments is positive
        semi-definite at every input (the loss is convex in them): ``mse`` (constant
        PSD Hessian) and ``dino`` (cross-entropy of a log-softmax, convex in the
        student logits). The others are non-convex and ``H_L`` has negative
        eigenvalues somewhere.
      degree: how the value grows with the input scale ``s`` (all array inputs times ``s``):
        ``0`` scale-invariant (for norms above the ``eps`` floors), ``p > 0`` a polynomial of
        degree ``p`` in ``s`` (its value overflows the dtype once ``s^p`` does: a documented
        limit, reported as ``FloatingPointError``), ``None`` neither (DINO's logits).
      family: the submodule that defines it.
    """

    fn: Callable
    args: tuple
    differentiable: tuple
    stop_gradient: tuple
    stateful: bool
    batch: BatchNeeds
    hessian_psd: bool
    degree: int | None
    family: str


def _per_sample(why):
    return BatchNeeds(False, 1, why)


#: Every loss of :mod:`ssl_geometry.losses`, by canonical name.
REGISTRY: dict[str, LossSpec] = {
    "simsiam": LossSpec(
        simsiam,
        ("p1", "p2", "z1", "z2"),
        (0, 1),
        (2, 3),
        False,
        _per_sample("per-sample cosine, averaged"),
        False,
        0,
        "cosine",
    ),
    "negative_cosine": LossSpec(
        negative_cosine, ("p", "z"), (0,), (1,), False, _per_sample("per-sample cosine, averaged"), False, 0, "cosine"
    ),
    "byol": LossSpec(
        byol,
        ("p1", "p2", "t1", "t2"),
        (0, 1),
        (2, 3),
        False,
        _per_sample("per-sample normalised MSE, averaged"),
        False,
        0,
        "cosine",
    ),
    "mse": LossSpec(
        mse, ("u1", "u2"), (0, 1), (), False, _per_sample("per-sample squared distance, averaged"), True, 2, "cosine"
    ),
    "moco": LossSpec(
        moco,
        ("q", "k", "queue"),
        (0,),
        (1, 2),
        True,
        _per_sample("negatives come from the queue (K >= n keys)"),
        False,
        0,
        "contrastive",
    ),
    "info_nce": LossSpec(
        info_nce,
        ("z1", "z2"),
        (0, 1),
        (),
        False,
        BatchNeeds(True, 2, "in-batch negatives (2n - 2 per anchor)"),
        False,
        0,
        "contrastive",
    ),
    "info_nce_one_way": LossSpec(
        info_nce_one_way,
        ("u1", "u2"),
        (0, 1),
        (),
        False,
        BatchNeeds(True, 2, "in-batch cross-view negatives (n - 1 per anchor, one direction)"),
        False,
        0,
        "contrastive",
    ),
    "moco_v3": LossSpec(
        moco_v3,
        ("q1", "q2", "k1", "k2"),
        (0, 1),
        (2, 3),
        False,
        BatchNeeds(True, 2, "in-batch negatives (n - 1 per query)"),
        False,
        0,
        "contrastive",
    ),
    "spectral_contrastive": LossSpec(
        spectral_contrastive,
        ("z1", "z2"),
        (0, 1),
        (),
        False,
        BatchNeeds(True, 2, "negative pairs of different samples"),
        False,
        4,
        "contrastive",
    ),
    "barlow_twins": LossSpec(
        barlow_twins,
        ("z1", "z2"),
        (0, 1),
        (),
        False,
        BatchNeeds(True, 2, "per-feature batch standardisation"),
        False,
        0,
        "redundancy",
    ),
    "vicreg": LossSpec(
        vicreg,
        ("z1", "z2"),
        (0, 1),
        (),
        False,
        BatchNeeds(True, 2, "unbiased batch variance and covariance"),
        False,
        4,
        "redundancy",
    ),
    "wmse": LossSpec(
        wmse,
        ("z1", "z2"),
        (0, 1),
        (),
        False,
        BatchNeeds(True, 2, "batch covariance whitening (n >= k + 1 when eps = 0)"),
        False,
        0,
        "redundancy",
    ),
    "dino": LossSpec(
        dino,
        ("student", "teacher", "center"),
        (0,),
        (1, 2),
        True,
        BatchNeeds(True, 2, "teacher centre is an EMA of batch means"),
        True,
        None,
        "distillation",
    ),
}

#: Which losses need batch statistics and the minimum batch size each accepts (from
#: :data:`REGISTRY`). W-MSE with its default ``eps=0`` additionally needs ``n >= k + 1``
#: (see :func:`min_batch_size`).
NEEDS_BATCH: dict[str, BatchNeeds] = {name: s.batch for name, s in REGISTRY.items()}

#: name -> loss function (from :data:`REGISTRY`).
LOSSES: dict[str, Callable] = {name: s.fn for name, s in REGISTRY.items()}

_ALIASES = {
    "simclr": "info_nce",
    "nt_xent": "info_nce",
    "ntxent": "info_nce",
    "simclr_one_way": "info_nce_one_way",
    "mocov2": "moco",
    "moco_v2": "moco",
    "mocov3": "moco_v3",
    "barlow": "barlow_twins",
    "w_mse": "wmse",
    "spectral": "spectral_contrastive",
    "alignment": "mse",
}


def _canonical(name: str) -> str:
    if not isinstance(name, str):
        raise TypeError(f"`name` must be a string; got {type(name).__name__}.")
    key = name.lower().replace("-", "_")
    key = _ALIASES.get(key, key)
    check_choice(key, "loss name", list(REGISTRY) + list(_ALIASES))
    return key


def spec(name: str) -> LossSpec:
    """The :class:`LossSpec` registered as ``name`` (same names and aliases as :func:`get`).

    Example:
      >>> spec("simclr").args, spec("dino").stateful
      (('z1', 'z2'), True)
    """
    return REGISTRY[_canonical(name)]


def get(name: str) -> Callable:
    """Return the loss function registered as ``name`` (case-insensitive; ``-`` == ``_``).

    Names: the keys of :data:`REGISTRY`, plus aliases ``simclr``/``nt_xent``
    (``info_nce``), ``simclr_one_way`` (``info_nce_one_way``), ``moco_v2`` (``moco``), ``barlow``, ``w_mse``, ``spectral``,
    ``alignment`` (``mse``).

    Example:
      >>> get("SimCLR") is info_nce
      True
    """
    return spec(name).fn


def min_batch_size(name: str, dim: int | None = None) -> int:
    """Smallest batch the loss ``name`` accepts; for ``wmse`` with feature dimension
    ``dim`` given, ``dim + 1`` (its default ``eps = 0`` needs a full-rank covariance).

    Example:
      >>> min_batch_size("vicreg"), min_batch_size("wmse", 64)
      (2, 65)
    """
    key = _canonical(name)
    m = REGISTRY[key].batch.min_batch
    if key == "wmse" and dim is not None:
        m = max(m, int(dim) + 1)
    return m
