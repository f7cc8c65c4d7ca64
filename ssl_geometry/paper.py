"""The paper's estimators, exactly as its released code computes them, named.

arXiv 2605.17180's code (GitHub farischaudhry/projection-head-geometry, commit 117231d:
``experiments.py``, ``hessian_tracker.py``, ``head_depth_ablations.py``, ``plot_results.py``,
``pretrained.ipynb``) computes several quantities differently from the project's exact or
recommended estimators in :mod:`ssl_geometry.metrics`. To compare like with like,
each of the paper's definitions lives here under its own name, and each docstring says how it
differs from the project's estimator and why the difference matters:

* :func:`representation_std` -- ``mean_j std_i`` of L2-normalised rows of both views stacked;
* :func:`clamped_condition_number` -- covariance condition number with ``lambda_min`` clamped
  at ``1e-7`` (on a rank-deficient covariance this is ``1e7 * lambda_max``);
* :func:`fd_curvature` -- mean norm of the *undivided* second difference of L2-normalised
  representations over the paper's 10 angles in [0, 45] degrees;
* :func:`curvature_ratio` -- head/backbone ratio of mean curvatures (``+1e-8`` guard);
* :func:`orbit_spreads`, :func:`orbit_metrics` and :func:`orbit_compression` -- orbit spread (mean
  *squared* distance to the orbit centroid, per orbit or averaged), intra-orbit and inter-class distances over the full rotation orbit
  (12 rotations 0..330 degrees), the class/orbit ratio;
* :func:`effective_rank_squared` -- exp-entropy of squared singular values, centred as the
  paper's notebook does (or not);
* :func:`timescale_ratio` -- mean head relative update over mean backbone relative update.

Its constants: :data:`CONDITION_CLAMP` (the ``1e-7``), :data:`ROTATION_ORBIT_ANGLES` and
:data:`CURVATURE_ANGLES`; :func:`orbits_by_class` rearranges the paper's row layout into the project's
orbit array.

Array functions take NumPy or JAX arrays and return JAX arrays in the input's precision (float64
under ``jax_enable_x64``); the orbit functions, which group rows by integer ids, run host-side in
NumPy float64 and return floats. Shapes: ``n`` samples,
``d`` features, ``T`` orbit/trajectory steps.
"""

from ssl_geometry._src.instrument.paper import CONDITION_CLAMP as CONDITION_CLAMP
from ssl_geometry._src.instrument.paper import CURVATURE_ANGLES as CURVATURE_ANGLES
from ssl_geometry._src.instrument.paper import ROTATION_ORBIT_ANGLES as ROTATION_ORBIT_ANGLES
from ssl_geometry._src.instrument.paper import clamped_condition_number as clamped_condition_number
from ssl_geometry._src.instrument.paper import curvature_ratio as curvature_ratio
from ssl_geometry._src.instrument.paper import effective_rank_squared as effective_rank_squared
from ssl_geometry._src.instrument.paper import fd_curvature as fd_curvature
from ssl_geometry._src.instrument.paper import orbit_compression as orbit_compression
from ssl_geometry._src.instrument.paper import orbit_metrics as orbit_metrics
from ssl_geometry._src.instrument.paper import orbit_spreads as orbit_spreads
from ssl_geometry._src.instrument.paper import orbits_by_class as orbits_by_class
from ssl_geometry._src.instrument.paper import representation_std as representation_std
from ssl_geometry._src.instrument.paper import timescale_ratio as timescale_ratio

__all__ = [
    "CONDITION_CLAMP",
    "ROTATION_ORBIT_ANGLES",
    "CURVATURE_ANGLES",
    "representation_std",
    "clamped_condition_number",
    "fd_curvature",
    "curvature_ratio",
    "orbit_spreads",
    "orbit_metrics",
    "orbit_compression",
    "orbits_by_class",
    "effective_rank_squared",
    "timescale_ratio",
]
