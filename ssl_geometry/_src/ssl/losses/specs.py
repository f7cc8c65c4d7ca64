"""The records of the objective table (:data:`ssl_geometry.objectives.TABLE`): :class:`LossSpec` (a loss
function), :class:`Hyper` (a hyper-parameter), :class:`BatchAboveDim` (a minimum batch that grows with the feature
dimension) and :class:`ObjectiveSpec` (one loss with its training wiring), and the hyper-parameters that specs of
several families share (:data:`EMA`, :data:`TEMPERATURE`).

Each spec is written beside its loss function, in the ``SPECS`` of its family module (``cosine.py``,
``contrastive.py``, ``redundancy.py``, ``distillation.py``); the table that collects them, and everything read
from it, is in ``ssl_geometry/_src/ssl/losses/registry.py``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from ssl_geometry._src import fields

__all__ = ["EMA", "TEMPERATURE", "BatchAboveDim", "BatchNeeds", "Hyper", "LossSpec", "ObjectiveSpec"]


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


class Hyper(NamedTuple):
    """One hyper-parameter of the training objectives: a keyword of
    :func:`ssl_geometry.objectives.make_objective` and the config field ``objective.<name>``.

    Attributes:
      name: the keyword (and the config field's last part).
      default: its value when not given.
      check: ``check(field, value)``, raising ``ValueError`` that names ``field`` for a value the config
        validator refuses (and :func:`~ssl_geometry.objectives.make_objective`, for the objectives that read it).
      doc: what it sets.
    """

    name: str
    default: Any
    check: Callable[[str, Any], None]
    doc: str


#: The base EMA decay of a target network, read by every objective with an EMA target (BYOL, MoCo v2 and v3, DINO).
EMA = Hyper("ema", 0.99, fields.UNIT, "base EMA decay tau_0 of the target network (cosine schedule to 1)")
#: The softmax temperature, shared by the contrastive objectives.
TEMPERATURE = Hyper("temperature", 0.1, fields.POSITIVE, "softmax temperature of the contrastive losses")


class BatchAboveDim(NamedTuple):
    """A minimum batch that grows with the feature dimension ``k`` of the loss's inputs: ``n >= k + margin``
    (W-MSE's whitening with ``eps = 0`` needs a full-rank ``k x k`` batch covariance: ``n >= k + 1``).

    :func:`ssl_geometry.losses.min_batch_size` raises :attr:`BatchNeeds.min_batch` to ``k + margin`` when given ``k``,
    and the config validator refuses ``data.batch_size < k + margin`` for ``k = model.projector.out_dim``.

    Attributes:
      margin: ``n - k`` at the least (an integer ``>= 0``).
      why: what needs it, as the validator's message says it: a clause in which ``{k}`` stands for the dimension,
        followed there by ``" (model.projector.out_dim), which needs a batch of at least <k + margin>"``.
    """

    margin: int
    why: str


#: What a training objective's :attr:`ObjectiveSpec.inputs` may name besides its state: the projector outputs of
#: the two views ``z1, z2``, the predictor's ``p1, p2`` and the EMA target's ``t1, t2``; a letter alone (``z``,
#: ``p``, ``t``) is its two views stacked, ``(2, n, k)``.
_VIEWS = {"z": "projector", "p": "predictor", "t": "EMA target"}


@dataclasses.dataclass(frozen=True)
class ObjectiveSpec:
    """One loss of the objective table and, when ``objective`` is set, the training objective built on it.

    Attributes:
      name: the loss's canonical name (its key in :data:`TABLE` and :data:`ssl_geometry.losses.REGISTRY`).
      loss: its :class:`ssl_geometry.losses.LossSpec`.
      aliases: other names :func:`ssl_geometry.losses.get` / :func:`ssl_geometry.losses.spec` accept (lower case, ``_`` for ``-``).
      objective: the training objective's name (``objective.name`` of a config, an entry of :data:`OBJECTIVES`):
        ``name`` or one of ``aliases``; ``None`` for a loss that is not trained by the trainer.
      inputs: what the trainer passes as the loss's positional arguments, one per
        :attr:`ssl_geometry.losses.LossSpec.args`:
        ``"z1"``, ``"z2"`` (projector outputs), ``"p1"``, ``"p2"`` (predictor outputs; needs ``predictor``),
        ``"t1"``, ``"t2"`` (EMA target outputs; needs ``ema_target``), ``"z"``/``"p"``/``"t"`` (the two views
        stacked) or a key of ``state`` (the loss returns ``(loss, new value)`` for it).
      options: loss keyword -> the hyper-parameter it takes, ``"name"`` or ``("name", i)`` (its ``i``-th entry).
      predictor: the online branch has a predictor after the projector.
      ema_target: the objective keeps an EMA copy of backbone + projector as ``state["target"]`` (its outputs
        are ``t1, t2``; it needs the ``ema`` hyper-parameter). Without one, no target outputs exist.
      hypers: the hyper-parameters it reads (from ``options``, ``state`` and the EMA), each a :class:`Hyper`.
      state: state key -> ``init(key, out_dim, dtype, hypers) -> array``, carried from step to step.
      batch_above_dim: a :class:`BatchAboveDim` when the loss's minimum batch grows with the feature dimension
        (W-MSE), else ``None``; a property of the loss, so a spec without ``objective`` may set it too.
    """

    name: str
    loss: LossSpec
    aliases: tuple[str, ...] = ()
    objective: str | None = None
    inputs: tuple[str, ...] = ()
    options: Mapping[str, str | tuple[str, int]] = dataclasses.field(default_factory=dict)
    predictor: bool = False
    ema_target: bool = False
    hypers: tuple[Hyper, ...] = ()
    state: Mapping[str, Callable] = dataclasses.field(default_factory=dict)
    batch_above_dim: BatchAboveDim | None = None

    def __post_init__(self):
        if not isinstance(self.loss, LossSpec):
            raise TypeError(f"ObjectiveSpec {self.name!r}: `loss` must be a LossSpec; got {type(self.loss).__name__}.")
        above = self.batch_above_dim
        if above is not None and not (
            isinstance(above, BatchAboveDim) and isinstance(above.margin, int) and above.margin >= 0
        ):
            raise TypeError(
                f"ObjectiveSpec {self.name!r}: `batch_above_dim` must be None or a BatchAboveDim with an integer "
                f"margin >= 0; got {above!r}."
            )
        if self.objective is None:
            if self.inputs or self.options or self.predictor or self.ema_target or self.hypers or self.state:
                raise ValueError(f"ObjectiveSpec {self.name!r}: a loss without `objective` takes no training fields.")
            return
        self._check_training_fields()

    def _check_training_fields(self) -> None:
        def bad(what):
            raise ValueError(f"ObjectiveSpec {self.name!r}: {what}.")

        if self.objective not in (self.name, *self.aliases):
            bad(f"`objective` {self.objective!r} must be its name or one of its aliases {self.aliases}")
        if len(self.inputs) != len(self.loss.args):
            bad(f"`inputs` {self.inputs} must give one value per loss argument {self.loss.args}")
        has = {"z": True, "p": self.predictor, "t": self.ema_target}
        for k in self.inputs:
            if k in self.state:
                continue
            if k not in {f"{v}{i}" for v in _VIEWS for i in ("", "1", "2")}:
                bad(f"input {k!r} is none of z1, z2, p1, p2, t1, t2, z, p, t or a `state` key {tuple(self.state)}")
            if not has[k[0]]:
                bad(f"input {k!r} reads the {_VIEWS[k[0]]} outputs, which this objective does not have")
        stateful = [k for k in self.inputs if k in self.state]
        if self.loss.stateful != (len(stateful) == 1):
            bad(f"a stateful loss reads exactly one `state` key among its inputs; got {stateful}")
        names = {h.name for h in self.hypers}
        refs = [r if isinstance(r, str) else r[0] for r in self.options.values()]
        if not set(refs) <= names:
            bad(f"`options` read hyper-parameters {sorted(set(refs) - names)} not in `hypers`")
        if self.ema_target and "ema" not in names:
            bad("an EMA target needs the `ema` hyper-parameter in `hypers`")

    @property
    def state_input(self) -> str | None:
        """The ``state`` key the (stateful) loss reads and returns updated, else ``None``."""
        return next((k for k in self.inputs if k in self.state), None)

    def keywords(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The loss's keyword arguments from the hyper-parameter ``values`` (name -> value), per ``options``."""
        return {kw: values[r] if isinstance(r, str) else values[r[0]][r[1]] for kw, r in self.options.items()}
