"""Dynamics: gradient flow (diffrax) against discrete optax optimisers on one time axis.

* ``flow`` -- :func:`gradient_flow` (Tsit5, Dopri5, Kvaerno5, RK4; implicit gradient regularisation);
* ``discrete`` -- :func:`discrete`: any optax optimiser, step ``k`` at ``t = k * lr``
  (its steps are :func:`ssl_geometry.fit`);
* ``trajectory`` -- the :class:`Trajectory` both return, :class:`DynamicsError`;
* ``escape`` -- :func:`escape_time`, the first recorded time a run left collapse;
* ``sharpness`` -- top Hessian eigenvalue (edge of stability, ``2 / lr``);
* ``linearise`` -- the linearised field at an equilibrium: predicted escape rates (flow, SGD).

Also: the solvers by name, :data:`SOLVERS` (with :class:`RK4`); :class:`EscapeResult` and
:data:`ESCAPE_CRITERIA` of :func:`escape_time`; of the linearisation, :class:`Linearisation`
(:func:`linearise`), :func:`field_jacobian`, :func:`visible_rate`, :func:`predict_flow`, the SGD step's
:func:`sgd_map`, :func:`sgd_growth` and :func:`predict_sgd`, and :func:`amplification` (``|Df(x) v| / |v|``).

Every loss here has the signature of :func:`ssl_geometry.fit`, ``loss_fn(params, batch, args)``
(``observe(params, t, args)``): ``batch`` is the step's mini-batch in :func:`discrete` and ``None``
in :func:`gradient_flow`, :func:`sharpness` and :func:`gradient_field` (the full-batch loss, its data
in ``args``), so one loss drives the flow, the optimisers and the linearisation.
"""

from ssl_geometry._src.dynamics.discrete import discrete as discrete
from ssl_geometry._src.dynamics.escape import ESCAPE_CRITERIA as ESCAPE_CRITERIA
from ssl_geometry._src.dynamics.escape import EscapeResult as EscapeResult
from ssl_geometry._src.dynamics.escape import escape_time as escape_time
from ssl_geometry._src.dynamics.flow import RK4 as RK4
from ssl_geometry._src.dynamics.flow import SOLVERS as SOLVERS
from ssl_geometry._src.dynamics.flow import gradient_flow as gradient_flow
from ssl_geometry._src.dynamics.linearise import Linearisation as Linearisation
from ssl_geometry._src.dynamics.linearise import amplification as amplification
from ssl_geometry._src.dynamics.linearise import field_jacobian as field_jacobian
from ssl_geometry._src.dynamics.linearise import gradient_field as gradient_field
from ssl_geometry._src.dynamics.linearise import linearise as linearise
from ssl_geometry._src.dynamics.linearise import predict_flow as predict_flow
from ssl_geometry._src.dynamics.linearise import predict_sgd as predict_sgd
from ssl_geometry._src.dynamics.linearise import sgd_growth as sgd_growth
from ssl_geometry._src.dynamics.linearise import sgd_map as sgd_map
from ssl_geometry._src.dynamics.linearise import visible_rate as visible_rate
from ssl_geometry._src.dynamics.sharpness import sharpness as sharpness
from ssl_geometry._src.dynamics.trajectory import DynamicsError as DynamicsError
from ssl_geometry._src.dynamics.trajectory import Trajectory as Trajectory

__all__ = [
    "Trajectory",
    "DynamicsError",
    "RK4",
    "SOLVERS",
    "gradient_flow",
    "discrete",
    "EscapeResult",
    "ESCAPE_CRITERIA",
    "escape_time",
    "sharpness",
    "Linearisation",
    "gradient_field",
    "field_jacobian",
    "linearise",
    "visible_rate",
    "sgd_map",
    "sgd_growth",
    "amplification",
    "predict_flow",
    "predict_sgd",
]
