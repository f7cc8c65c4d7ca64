"""The objective table: every loss, and every training objective built on one, as one spec each.

:data:`TABLE` holds one :class:`ObjectiveSpec` per loss: its :class:`LossSpec` (what a caller and a test
need to know about the function), its names, and -- for a training objective -- how the trainer calls it
(which head outputs go in, which hyper-parameters become which keywords), whether it has a predictor or an
EMA target, the state it carries and its hyper-parameters (:class:`Hyper`: default and config check).
Everything else is read from it when it is used: the losses registry (:data:`REGISTRY`, :data:`LOSSES`,
:data:`NEEDS_BATCH`, :func:`get`, :func:`spec`), the trainer's names (:data:`OBJECTIVES`,
:data:`EMA_METHODS`, :data:`PREDICTOR_METHODS`), :func:`ssl_geometry.objectives.make_objective` and its
loss evaluation, the config validator's ``objective.*`` fields and the builders.

To add a loss or a training objective: write the loss in the family module it belongs to and add one
:class:`ObjectiveSpec` to :data:`TABLE` here (``docs/howto/extend.md`` gives the recipe and the test).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence, Set
from typing import Generic, TypeVar

import jax
import jax.numpy as jnp

from ssl_geometry._src import fields
from ssl_geometry._src.checks import check_choice
from ssl_geometry._src.ops import l2_normalize
from ssl_geometry._src.ssl.losses.contrastive import info_nce, info_nce_one_way, moco, moco_v3, spectral_contrastive
from ssl_geometry._src.ssl.losses.cosine import byol, mse, negative_cosine, simsiam
from ssl_geometry._src.ssl.losses.distillation import dino
from ssl_geometry._src.ssl.losses.redundancy import barlow_twins, vicreg, wmse
from ssl_geometry._src.ssl.losses.specs import BatchNeeds, Hyper, LossSpec, ObjectiveSpec

__all__ = [
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


def _per_sample(why):
    return BatchNeeds(False, 1, why)


def _moco_queue(key, dim, dtype, values):
    """MoCo v2's queue: ``queue_size`` unit rows, drawn in the parameter dtype (independent of x64)."""
    return l2_normalize(jax.random.normal(jax.random.fold_in(key, 7), (values["queue_size"], dim), dtype))


def _dino_center(key, dim, dtype, values):
    """DINO's teacher centre, zero at the start."""
    del key, values
    return jnp.zeros((dim,), dtype)


_TEMPERATURE = Hyper("temperature", 0.1, fields.POSITIVE, "softmax temperature of the contrastive losses")
_EMA = Hyper("ema", 0.99, fields.UNIT, "base EMA decay tau_0 of the target network (cosine schedule to 1)")
_QUEUE_SIZE = Hyper("queue_size", 4096, fields.integer(1), "MoCo v2 queue length K")
_BARLOW_LAMBDA = Hyper("barlow_lambda", 5e-3, fields.number(0), "Barlow Twins' off-diagonal weight lambda")
_VICREG_COEFFS = Hyper("vicreg_coeffs", (25.0, 25.0, 1.0), fields.sequence(fields.number(0), 3), "VICReg a, b, c")
_DINO_TEMPS = Hyper("dino_temps", (0.1, 0.04), fields.sequence(fields.POSITIVE, 2), "DINO (student, teacher) temps")
_DINO_CENTER_MOMENTUM = Hyper("dino_center_momentum", 0.9, fields.UNIT, "momentum of DINO's teacher centre")


def _table(*specs: ObjectiveSpec) -> dict[str, ObjectiveSpec]:
    return {s.name: s for s in specs}


# fmt: off
#: The objective table: every loss of :mod:`ssl_geometry.losses` by canonical name, with its training wiring.
TABLE: dict[str, ObjectiveSpec] = _table(
    ObjectiveSpec(
        "simsiam",
        LossSpec(
            simsiam, ("p1", "p2", "z1", "z2"), (0, 1), (2, 3), False, _per_sample("per-sample cosine, averaged"),
            False, 0, "cosine",
        ),
        objective="simsiam",
        inputs=("p1", "p2", "z1", "z2"),
        predictor=True,
    ),
    ObjectiveSpec(
        "negative_cosine",
        LossSpec(
            negative_cosine, ("p", "z"), (0,), (1,), False, _per_sample("per-sample cosine, averaged"), False, 0,
            "cosine",
        ),
    ),
    ObjectiveSpec(
        "byol",
        LossSpec(
            byol, ("p1", "p2", "t1", "t2"), (0, 1), (2, 3), False, _per_sample("per-sample normalised MSE, averaged"),
            False, 0, "cosine",
        ),
        objective="byol",
        inputs=("p1", "p2", "t1", "t2"),
        predictor=True,
        ema_target=True,
        hypers=(_EMA,),
    ),
    ObjectiveSpec(
        "mse",
        LossSpec(
            mse, ("u1", "u2"), (0, 1), (), False, _per_sample("per-sample squared distance, averaged"), True, 2,
            "cosine",
        ),
        aliases=("alignment",),
    ),
    ObjectiveSpec(
        "moco",
        LossSpec(
            moco, ("q", "k", "queue"), (0,), (1, 2), True,
            _per_sample("negatives come from the queue (K >= n keys)"), False, 0, "contrastive",
        ),
        aliases=("mocov2", "moco_v2"),
        objective="moco",
        inputs=("z1", "t2", "queue"),
        options={"temperature": "temperature"},
        ema_target=True,
        hypers=(_EMA, _TEMPERATURE, _QUEUE_SIZE),
        state={"queue": _moco_queue},
    ),
    ObjectiveSpec(
        "info_nce",
        LossSpec(
            info_nce, ("z1", "z2"), (0, 1), (), False, BatchNeeds(True, 2, "in-batch negatives (2n - 2 per anchor)"),
            False, 0, "contrastive",
        ),
        aliases=("simclr", "nt_xent", "ntxent"),
        objective="simclr",
        inputs=("z1", "z2"),
        options={"temperature": "temperature"},
        hypers=(_TEMPERATURE,),
    ),
    ObjectiveSpec(
        "info_nce_one_way",
        LossSpec(
            info_nce_one_way, ("u1", "u2"), (0, 1), (), False,
            BatchNeeds(True, 2, "in-batch cross-view negatives (n - 1 per anchor, one direction)"), False, 0,
            "contrastive",
        ),
        aliases=("simclr_one_way",),
        objective="simclr_one_way",
        inputs=("z1", "z2"),
        options={"temperature": "temperature"},
        hypers=(_TEMPERATURE,),
    ),
    ObjectiveSpec(
        "moco_v3",
        LossSpec(
            moco_v3, ("q1", "q2", "k1", "k2"), (0, 1), (2, 3), False,
            BatchNeeds(True, 2, "in-batch negatives (n - 1 per query)"), False, 0, "contrastive",
        ),
        aliases=("mocov3",),
        objective="moco_v3",
        inputs=("p1", "p2", "t1", "t2"),
        options={"temperature": "temperature"},
        predictor=True,
        ema_target=True,
        hypers=(_EMA, _TEMPERATURE),
    ),
    ObjectiveSpec(
        "spectral_contrastive",
        LossSpec(
            spectral_contrastive, ("z1", "z2"), (0, 1), (), False,
            BatchNeeds(True, 2, "negative pairs of different samples"), False, 4, "contrastive",
        ),
        aliases=("spectral",),
        objective="spectral_contrastive",
        inputs=("z1", "z2"),
    ),
    ObjectiveSpec(
        "barlow_twins",
        LossSpec(
            barlow_twins, ("z1", "z2"), (0, 1), (), False, BatchNeeds(True, 2, "per-feature batch standardisation"),
            False, 0, "redundancy",
        ),
        aliases=("barlow",),
        objective="barlow_twins",
        inputs=("z1", "z2"),
        options={"lambd": "barlow_lambda"},
        hypers=(_BARLOW_LAMBDA,),
    ),
    ObjectiveSpec(
        "vicreg",
        LossSpec(
            vicreg, ("z1", "z2"), (0, 1), (), False, BatchNeeds(True, 2, "unbiased batch variance and covariance"),
            False, 4, "redundancy",
        ),
        objective="vicreg",
        inputs=("z1", "z2"),
        options={
            "sim_coeff": ("vicreg_coeffs", 0),
            "std_coeff": ("vicreg_coeffs", 1),
            "cov_coeff": ("vicreg_coeffs", 2),
        },
        hypers=(_VICREG_COEFFS,),
    ),
    ObjectiveSpec(
        "wmse",
        LossSpec(
            wmse, ("z1", "z2"), (0, 1), (), False,
            BatchNeeds(True, 2, "batch covariance whitening (n >= k + 1 when eps = 0)"), False, 0, "redundancy",
        ),
        aliases=("w_mse",),
        objective="wmse",
        inputs=("z1", "z2"),
    ),
    ObjectiveSpec(
        "dino",
        LossSpec(
            dino, ("student", "teacher", "center"), (0,), (1, 2), True,
            BatchNeeds(True, 2, "teacher centre is an EMA of batch means"), True, None, "distillation",
        ),
        objective="dino",
        inputs=("z", "t", "center"),
        options={
            "student_temp": ("dino_temps", 0),
            "teacher_temp": ("dino_temps", 1),
            "center_momentum": "dino_center_momentum",
        },
        ema_target=True,
        hypers=(_EMA, _DINO_TEMPS, _DINO_CENTER_MOMENTUM),
        state={"center": _dino_center},
    ),
)
# fmt: on

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
#: :data:`REGISTRY`). W-MSE with its default ``eps=0`` additionally needs ``n >= k + 1``
#: (see :func:`min_batch_size`).
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
    m = TABLE[key].loss.batch.min_batch
    if key == "wmse" and dim is not None:
        m = max(m, int(dim) + 1)
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
