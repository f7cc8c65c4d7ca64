"""ssl_geometry: the geometry of self-supervised projection heads, in JAX.

Pure-function heads, backbones and losses; exact effective Hessians and Krylov
eigensolvers; gradient flow against discrete optimisers; a sharded SSL trainer;
and an experiment suite that reports whether the paper's premises held.

Every public name has one import path. The package itself holds the model interface
(:class:`Model`, :func:`as_function`, :func:`merge_state`, :func:`param_count`) and the one
optimisation loop (:func:`fit`); everything else lives in a namespace, imported on first
attribute access (``ssl_geometry.heads``) or with ``from ssl_geometry import heads``:

* models: :mod:`~ssl_geometry.activations`, :mod:`~ssl_geometry.heads`,
  :mod:`~ssl_geometry.backbones`, :mod:`~ssl_geometry.pretrained`, :mod:`~ssl_geometry.text`;
* the training signal: :mod:`~ssl_geometry.losses`, :mod:`~ssl_geometry.objectives`,
  :mod:`~ssl_geometry.augment`, :mod:`~ssl_geometry.data`;
* the instrument: :mod:`~ssl_geometry.geometry` (``H_eff = G + M``, Thm 3.1 / 4.1),
  :mod:`~ssl_geometry.riemann`, :mod:`~ssl_geometry.metrics`, :mod:`~ssl_geometry.paper` (the
  paper's own estimators), :mod:`~ssl_geometry.curvature` (Hessians, Lanczos, traces);
* dynamics: :mod:`~ssl_geometry.dynamics` (gradient flow and optimisers on one clock);
* training: :mod:`~ssl_geometry.trainer`, :mod:`~ssl_geometry.checkpoint`,
  :mod:`~ssl_geometry.probes`; ``python -m ssl_geometry.train`` (or ``ssl-geometry-train``);
* shared numerics: :mod:`~ssl_geometry.ops`.

:data:`NAMESPACES` names these; ``__version__`` is the package's version (its one source:
``pyproject.toml`` reads it). :class:`Variables` is a model's variables dict; :func:`fit` returns a
:class:`FitResult` and raises :class:`FitError` when a run cannot go on.

The implementation is private (``ssl_geometry/_src/``, grouped by layer; ``docs/architecture.md``).
:mod:`ssl_geometry.internal` (``from ssl_geometry import internal``) holds the plumbing of the run loop
that the experiment harness and the tests reach into -- workdir locks, config digests, resume checks,
per-process batch slices: it is not in :data:`NAMESPACES`, not public API, and may change without notice.
"""

import importlib as _importlib

from ssl_geometry._src.core.loop import FitError as FitError
from ssl_geometry._src.core.loop import FitResult as FitResult
from ssl_geometry._src.core.loop import fit as fit
from ssl_geometry._src.models.base import Model as Model
from ssl_geometry._src.models.base import Variables as Variables
from ssl_geometry._src.models.base import as_function as as_function
from ssl_geometry._src.models.base import merge_state as merge_state
from ssl_geometry._src.models.base import param_count as param_count

__version__ = "0.1.0"

#: The public namespaces, imported on first attribute access (``ssl_geometry.heads``).
NAMESPACES = (
    "activations",
    "heads",
    "backbones",
    "pretrained",
    "text",
    "losses",
    "objectives",
    "augment",
    "data",
    "geometry",
    "riemann",
    "metrics",
    "paper",
    "curvature",
    "dynamics",
    "trainer",
    "checkpoint",
    "probes",
    "ops",
    "train",
)

__all__ = [
    "Model",
    "Variables",
    "as_function",
    "merge_state",
    "param_count",
    "fit",
    "FitResult",
    "FitError",
    "NAMESPACES",
    "__version__",
]


def __getattr__(name):
    if name in NAMESPACES or name == "internal":
        return _importlib.import_module(f"ssl_geometry.{name}")
    raise AttributeError(f"module 'ssl_geometry' has no attribute {name!r}")


def __dir__():
    return sorted([*__all__, *NAMESPACES])
