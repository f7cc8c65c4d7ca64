"""ssl_geometry: the geometry of self-supervised projection heads, in JAX.

Pure-function heads, backbones and losses; exact effective Hessians and Krylov
eigensolvers; gradient flow against discrete optimisers; a sharded SSL trainer;
and an experiment suite that reports whether the paper's premises held.

The layers (see ``docs/architecture.md``): :mod:`ssl_geometry.models` (heads, backbones, the text
encoder), :mod:`ssl_geometry.ssl` (losses, objectives, augmentations, data),
:mod:`ssl_geometry.instrument` (effective Hessian, Riemann curvature, metrics),
:mod:`ssl_geometry.linalg` (Lanczos, traces, certificates), :mod:`ssl_geometry.dynamics`
(gradient flow, optimisers on one time axis) and :mod:`ssl_geometry.training` (the one loop, the
sharded trainer, checkpoints, probes, the CLI). The most used functions are importable from here;
every module is reachable as an attribute (``ssl_geometry.trainer``), imported on first use.
"""
import importlib as _importlib

from ssl_geometry.dynamics import discrete as discrete
from ssl_geometry.dynamics import escape_time as escape_time
from ssl_geometry.dynamics import gradient_flow as gradient_flow
from ssl_geometry.instrument.geometry import classify_collapse as classify_collapse
from ssl_geometry.instrument.geometry import effective_hessian as effective_hessian
from ssl_geometry.instrument.geometry import effective_hvp as effective_hvp
from ssl_geometry.instrument.geometry import pullback_metric as pullback_metric
from ssl_geometry.instrument.geometry import whitening_head as whitening_head
from ssl_geometry.instrument.metrics import effective_rank as effective_rank
from ssl_geometry.linalg.curvature import extreme_eigenvalues as extreme_eigenvalues
from ssl_geometry.linalg.curvature import hessian as hessian
from ssl_geometry.linalg.curvature import hvp as hvp
from ssl_geometry.models import Model as Model
from ssl_geometry.models import as_function as as_function
from ssl_geometry.training.loop import FitResult as FitResult
from ssl_geometry.training.loop import fit as fit

__version__ = "0.1.0"

#: Modules reachable as attributes of the package, imported on first access.
_SUBMODULES = frozenset({
    "models", "ssl", "instrument", "linalg", "dynamics", "training",
    "activations", "heads", "backbones", "text", "pretrained", "losses", "objectives", "augment", "data",
    "geometry", "riemann", "metrics", "curvature", "trainer", "checkpoint", "probes", "ops",
})

__all__ = [
    "Model", "as_function",
    "effective_hessian", "effective_hvp", "pullback_metric", "whitening_head", "classify_collapse",
    "effective_rank", "hessian", "hvp", "extreme_eigenvalues",
    "gradient_flow", "discrete", "escape_time", "fit", "FitResult",
    "__version__",
]


def __getattr__(name):
    if name in _SUBMODULES:
        return _importlib.import_module(f"ssl_geometry.{name}")
    raise AttributeError(f"module 'ssl_geometry' has no attribute {name!r}")
