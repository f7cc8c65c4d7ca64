"""The objective table: every loss, and every training objective built on one, as one spec each.

:data:`TABLE` holds one :class:`ObjectiveSpec` per loss: its :class:`LossSpec` (what a caller and a test
need to know about the function), its names, and -- for a training objective -- how the trainer calls it
(which head outputs go in, which hyper-parameters become which keywords), whether it has a predictor or an
EMA target, the state it carries, its hyper-parameters (:class:`Hyper`: default and config check) and a
minimum batch that grows with the feature dimension (:class:`BatchAboveDim`).
Everything else is read from it when it is used: the losses registry (:data:`REGISTRY`, :data:`LOSSES`,
:data:`NEEDS_BATCH`, :func:`get`, :func:`spec`, :func:`min_batch_size`), the trainer's names (:data:`OBJECTIVES`,
:data:`EMA_METHODS`, :data:`PREDICTOR_METHODS`), :func:`ssl_geometry.objectives.make_objective` and its
loss evaluation, the config validator's ``objective.*`` fields and batch check, and the builders.

Each spec is written beside its loss function, in the ``SPECS`` tuple of the loss's family module, and the
table collects the families' ``SPECS`` in the order of ``_FAMILIES``; this module names no loss and no objective.
To add a loss or a training objective: write the loss and its :class:`ObjectiveSpec` in the family module it
belongs to (and re-export a new loss in ``ssl_geometry/losses.py``); ``docs/howto/extend.md`` gives the recipe
and the test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Set
from typing import Generic, TypeVar

from ssl_geometry._src.checks import check_choice
from ssl_geometry._src.ssl.losses import contrastive, cosine, distillation, redundancy
from ssl_geometry._src.ssl.losses.specs import BatchAboveDim, BatchNeeds, Hyper, LossSpec, ObjectiveSpec

__all__ = [
    "BatchAboveDim",
    "BatchNeeds",
    "EMA_METHODS",
    "Hyper",
    "LOSSES",
    "LossSpec",
    "NEEDS_BATCH",
    "OBJECTIVES",
    "ObjectiveSpec",
    "PREDICTOR_METHODS",
    "REGISTRY",
    "TABLE",
    "get",
    "hypers",
    "min_batch_size",
    "objective_spec",
    "spec",
]

#: The family modules whose ``SPECS`` make up :data:`TABLE`, in table order.
_FAMILIES = (cosine, contrastive, redundancy, distillation)


def _table(specs: Iterable[ObjectiveSpec]) -> dict[str, ObjectiveSpec]:
    """``name -> spec``; ``ValueError`` for a name two specs give."""
    out: dict[str, ObjectiveSpec] = {}
    for s in specs:
        if out.setdefault(s.name, s) is not s:
            raise ValueError(f"two specs of the objective table are named {s.name!r}.")
    return out


#: The objective table: every loss of :mod:`ssl_geometry.losses` by canonical name, with its training wiring (the
#: ``SPECS`` of the family modules, in order).
TABLE: dict[str, ObjectiveSpec] = _table(s for family in _FAMILIES for s in family.SPECS)

_V = TypeVar("_V")


class _TableView(Mapping[str, _V], Generic[_V]):
    """A read-only view of :data:`TABLE`, ``name -> field(spec)``, current at every read."""

    def __init__(self, field: Callable[[ObjectiveSpec], _V]):
        self._field = field

    def __getitem__(self, name: str) -> _V:
        return self._field(TABLE[name])

    def __iter__(self) -> Iterator[str]:
        return iter(TABLE)

    def __len__(self) -> int:
        return len(TABLE)

    def __repr__(self) -> str:
        return repr(dict(self))


def _objective_names(where: Callable[[ObjectiveSpec], bool]) -> tuple[str, ...]:
    return tuple(s.objective for s in TABLE.values() if s.objective is not None and where(s))


class _ObjectiveNames(Sequence[str]):
    """The training objectives' names in :data:`TABLE` order, read from the table at every use (a tuple's
    ``==``, indexing and ``repr``)."""

    def __getitem__(self, i):
        return _objective_names(lambda s: True)[i]

    def __len__(self) -> int:
        return len(_objective_names(lambda s: True))

    def __eq__(self, other) -> bool:
        return _objective_names(lambda s: True) == (tuple(other) if isinstance(other, (list, Sequence)) else other)

    def __hash__(self) -> int:
        return hash(_objective_names(lambda s: True))

    def __repr__(self) -> str:
        return repr(_objective_names(lambda s: True))


class _ObjectiveSet(Set[str]):
    """The training objectives with a property (an EMA target, a predictor), read from the table at every use (a
    frozenset's ``==`` and ``repr``)."""

    def __init__(self, where: Callable[[ObjectiveSpec], bool]):
        self._where = where

    def __contains__(self, name) -> bool:
        return name in _objective_names(self._where)

    def __iter__(self) -> Iterator[str]:
        return iter(_objective_names(self._where))

    def __len__(self) -> int:
        return len(_objective_names(self._where))

    def __hash__(self) -> int:
        return self._hash()

    @classmethod
    def _from_iterable(cls, it):  # the result of &, |, - is a frozenset, as it was
        return frozenset(it)

    def __repr__(self) -> str:
        return repr(frozenset(self))


#: Every loss of :mod:`ssl_geometry.losses`, by canonical name (a view of :data:`ssl_geometry.objectives.TABLE`:
#: name -> its ``loss``).
REGISTRY: Mapping[str, LossSpec] = _TableView(lambda s: s.loss)

#: Which losses need batch statistics and the minimum batch size each accepts (from
#: :data:`REGISTRY`). A loss whose spec sets ``batch_above_dim`` (W-MSE with its default ``eps=0``: ``n >= k + 1``)
#: additionally needs a batch above the feature dimension (see :func:`min_batch_size`).
NEEDS_BATCH: Mapping[str, BatchNeeds] = _TableView(lambda s: s.loss.batch)

#: name -> loss function (from :data:`REGISTRY`).
LOSSES: Mapping[str, Callable] = _TableView(lambda s: s.loss.fn)

#: The training objectives (``objective.name`` of a config), in :data:`TABLE` order.
OBJECTIVES: Sequence[str] = _ObjectiveNames()
#: Objectives that keep an EMA copy of backbone + projector as ``state["target"]``.
EMA_METHODS: Set[str] = _ObjectiveSet(lambda s: s.ema_target)
#: Objectives whose online branch has a predictor after the projector.
PREDICTOR_METHODS: Set[str] = _ObjectiveSet(lambda s: s.predictor)


def _aliases() -> dict[str, str]:
    """alias -> canonical name over :data:`TABLE`; ``ValueError`` for a key that is not its spec's name or an
    alias of two losses (or one that is also a canonical name)."""
    out: dict[str, str] = {}
    for key, s in TABLE.items():
        if key != s.name:
            raise ValueError(f"TABLE[{key!r}] holds the spec named {s.name!r}: a spec's key is its name.")
        for a in s.aliases:
            if out.setdefault(a, s.name) != s.name or a in TABLE:
                raise ValueError(f"the loss alias {a!r} names two losses of TABLE.")
    return out


def _canonical(name: str) -> str:
    if not isinstance(name, str):
        raise TypeError(f"`name` must be a string; got {type(name).__name__}.")
    key = name.lower().replace("-", "_")
    aliases = _aliases()
    key = aliases.get(key, key)
    check_choice(key, "loss name", list(TABLE) + list(aliases))
    return key


def spec(name: str) -> LossSpec:
    """The :class:`LossSpec` registered as ``name`` (same names and aliases as :func:`get`).

    Example:
      >>> spec("simclr").args, spec("dino").stateful
      (('z1', 'z2'), True)
    """
    return TABLE[_canonical(name)].loss


def get(name: str) -> Callable:
    """Return the loss function registered as ``name`` (case-insensitive; ``-`` == ``_``).

    Names: the keys of :data:`REGISTRY`, plus the aliases of :data:`ssl_geometry.objectives.TABLE`: ``simclr``/``nt_xent``
    (``info_nce``), ``simclr_one_way`` (``info_nce_one_way``), ``moco_v2`` (``moco``), ``barlow``, ``w_mse``,
    ``spectral``, ``alignment`` (``mse``).

    Example:
      >>> get("SimCLR") is contrastive.info_nce
      True
    """
    return spec(name).fn


def min_batch_size(name: str, dim: int | None = None) -> int:
    """Smallest batch the loss ``name`` accepts: ``NEEDS_BATCH[name].min_batch``, and, for a loss whose spec sets
    ``batch_above_dim`` (``wmse``: its default ``eps = 0`` needs a full-rank covariance) with the feature dimension
    ``dim`` given, at least ``dim + batch_above_dim.margin``.

    Example:
      >>> min_batch_size("vicreg"), min_batch_size("wmse", 64)
      (2, 65)
    """
    s = TABLE[_canonical(name)]
    m = s.loss.batch.min_batch
    if s.batch_above_dim is not None and dim is not None:
        m = max(m, int(dim) + s.batch_above_dim.margin)
    return m


def objective_spec(name: str) -> ObjectiveSpec:
    """The :class:`ObjectiveSpec` of the training objective ``name`` (an entry of :data:`OBJECTIVES`);
    ``ValueError`` naming ``objective`` for any other name."""
    check_choice(name, "objective", OBJECTIVES)
    return next(s for s in TABLE.values() if s.objective == name)


def hypers() -> dict[str, Hyper]:
    """Every hyper-parameter of the training objectives in :data:`TABLE`, by name (the keywords of
    :func:`ssl_geometry.objectives.make_objective` and the config fields ``objective.<name>``); ``ValueError``
    when two specs give one name two different :class:`Hyper`."""
    out: dict[str, Hyper] = {}
    for s in TABLE.values():
        for h in s.hypers:
            if out.setdefault(h.name, h) != h:
                raise ValueError(f"hyper-parameter {h.name!r}: specs of TABLE give it two definitions ({s.name!r}).")
    return out
