"""Collapse, conditioning, invariance and trajectory metrics of representations.

* :func:`effective_rank` -- RankMe (singular values) or the paper's code's version
  (squared singular values), named, never silently one; ``center=True`` centres the rows
  first (the paper's notebook does).
* :func:`spearman` -- Spearman rank correlation of two series (NaN pairs dropped, NaN when
  undefined); the one definition every experiment uses.
* :func:`covariance_condition_number` -- ``lambda_max / lambda_min`` of the covariance.
* :func:`normalized_std` -- SimSiam's collapse monitor (mean per-dimension std of
  L2-normalised outputs).
* :func:`relative_update_size` -- ``|Delta theta_g| / |theta_g|`` per named group.
* :func:`orbit_statistics` -- geometry of augmentation orbits (docs/theory.md, section "Orbit spread and compression").
* :func:`trajectory_curvature` (exact, nested ``jax.jvp``) and
  :func:`fd_trajectory_curvature` (second differences, as the paper's code).
* :func:`metric_degeneracy`, :func:`augmentation_metric_degeneracy` -- ``|J_h v| / |v|``
  along augmentation tangents (Sec. 5 of arXiv 2605.17180).

:func:`effective_rank` takes ``method`` from :data:`EFFECTIVE_RANK_METHODS`; :func:`orbit_statistics`
returns an :class:`OrbitStatistics`.
"""

from ssl_geometry._src.instrument.metrics import EFFECTIVE_RANK_METHODS as EFFECTIVE_RANK_METHODS
from ssl_geometry._src.instrument.metrics import OrbitStatistics as OrbitStatistics
from ssl_geometry._src.instrument.metrics import augmentation_metric_degeneracy as augmentation_metric_degeneracy
from ssl_geometry._src.instrument.metrics import covariance_condition_number as covariance_condition_number
from ssl_geometry._src.instrument.metrics import effective_rank as effective_rank
from ssl_geometry._src.instrument.metrics import fd_trajectory_curvature as fd_trajectory_curvature
from ssl_geometry._src.instrument.metrics import metric_degeneracy as metric_degeneracy
from ssl_geometry._src.instrument.metrics import normalized_std as normalized_std
from ssl_geometry._src.instrument.metrics import orbit_statistics as orbit_statistics
from ssl_geometry._src.instrument.metrics import relative_update_size as relative_update_size
from ssl_geometry._src.instrument.metrics import spearman as spearman
from ssl_geometry._src.instrument.metrics import trajectory_curvature as trajectory_curvature

__all__ = [
    "EFFECTIVE_RANK_METHODS",
    "effective_rank",
    "spearman",
    "covariance_condition_number",
    "normalized_std",
    "relative_update_size",
    "OrbitStatistics",
    "orbit_statistics",
    "trajectory_curvature",
    "fd_trajectory_curvature",
    "metric_degeneracy",
    "augmentation_metric_degeneracy",
]
