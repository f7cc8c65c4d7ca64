"""Dynamics: gradient flow (diffrax) against discrete optax optimisers on one time axis.

* :mod:`.flow` -- :func:`gradient_flow` (Tsit5, Dopri5, Kvaerno5, RK4; implicit gradient regularisation);
* :mod:`.discrete` -- :func:`discrete`: any optax optimiser, step ``k`` at ``t = k * lr``
  (its steps are :func:`ssl_geometry.training.loop.fit`);
* :mod:`.trajectory` -- the :class:`Trajectory` both return, :class:`DynamicsError`;
* :mod:`.escape` -- :func:`escape_time`, the first recorded time a run left collapse;
* :mod:`.sharpness` -- top Hessian eigenvalue (edge of stability, ``2 / lr``).
"""
from ssl_geometry.dynamics.discrete import discrete as discrete
from ssl_geometry.dynamics.escape import ESCAPE_CRITERIA as ESCAPE_CRITERIA
from ssl_geometry.dynamics.escape import EscapeResult as EscapeResult
from ssl_geometry.dynamics.escape import escape_time as escape_time
from ssl_geometry.dynamics.flow import RK4 as RK4
from ssl_geometry.dynamics.flow import SOLVERS as SOLVERS
from ssl_geometry.dynamics.flow import gradient_flow as gradient_flow
from ssl_geometry.dynamics.sharpness import dense_hessian as dense_hessian
from ssl_geometry.dynamics.sharpness import sharpness as sharpness
from ssl_geometry.dynamics.trajectory import DynamicsError as DynamicsError
from ssl_geometry.dynamics.trajectory import Trajectory as Trajectory

__all__ = ["Trajectory", "DynamicsError", "EscapeResult", "ESCAPE_CRITERIA", "RK4", "SOLVERS", "gradient_flow",
           "discrete", "escape_time", "dense_hessian", "sharpness"]
