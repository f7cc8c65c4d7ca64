"""Experiment 0: the paper's released results, re-analysed with its definitions and ours.

Reads the authors' arrays (``experiments/paper_results/``, see its README: GitHub
farischaudhry/projection-head-geometry, commit 117231d, MIT) and recomputes, in seconds on a CPU:

* the Spearman correlations of std and condition number in the three Hessian-tracker runs
  (``scipy.stats.spearmanr`` on epochs 1..99, as ``hessian_tracker.py``), with what the
  condition number is there (``1e7 * lambda_max``: the covariance of 512 centred rows in
  d = 512 is singular, so the clamp at 1e-7 always binds) and what the project's unclamped
  estimator gives on it (``inf``: no correlation is defined);
* the released ``min_eigenvalues`` (sign and exact zeros: a dead head shows as exactly 0);
* orbit spread compression and class/orbit ratios for ResNet-18, ViT-T and head depths 1/2/3,
  the paper's way (:func:`ssl_geometry.paper.orbit_metrics`, squared spread, 12 rotations
  0..330 degrees) beside the project's :func:`ssl_geometry.metrics.orbit_statistics` (distance
  spread), and the centred/uncentred squared effective rank of each orbit;
* trajectory curvature ratios (per seed and per head depth) and rotation-probe accuracies;
* every released collapse run: escaped or not by the project's criterion (experiment 4's
  ``std > escape_fraction / sqrt(k)`` via :func:`ssl_geometry.dynamics.escape_time`), growth rate
  of log std, and the paper's timescale ratio.

The claim ``released-arrays`` counts apart the printed values it recomputes from arrays
(:data:`RECOMPUTED`: the three Spearman correlations, the orbit compression and two curvature
ratios) and those it can only read back as stored numbers (:data:`READ_BACK`: every probe
accuracy); only the recomputed ones decide, each compared with the printed value at the printed
precision (the registry's rule, ``experiments/claims/``).
"""

from __future__ import annotations

from .analysis import CLAIM as CLAIM
from .analysis import DRY_RUN as DRY_RUN
from .analysis import NAME as NAME
from .analysis import PRINTED as PRINTED
from .analysis import READ_BACK as READ_BACK
from .analysis import RECOMPUTED as RECOMPUTED
from .analysis import TITLE as TITLE
from .analysis import data_root as data_root
from .analysis import measure as measure
from .tables import figures as figures
from .tables import report as report
from .verdict import decide as decide
from .verdict import our_values as our_values

#: The registry claims (experiments/claims/) this experiment decides.
CLAIMS = ("released-arrays",)
#: The released arrays are the paper's own runs: every variant reads them at the paper's scale.
SCALE = "paper"

__all__ = [
    "NAME",
    "DRY_RUN",
    "TITLE",
    "CLAIM",
    "CLAIMS",
    "SCALE",
    "PRINTED",
    "RECOMPUTED",
    "READ_BACK",
    "measure",
    "decide",
    "our_values",
    "data_root",
    "report",
    "figures",
]
