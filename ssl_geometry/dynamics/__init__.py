"""Dynamics: gradient flow (diffrax) against discrete optax optimisers on one time axis."""
from ssl_geometry.dynamics.flow import *  # noqa: F401,F403
from ssl_geometry.dynamics.flow import __all__ as __all__
from ssl_geometry.dynamics import linearise as linearise  # noqa: E402  (predicted escape rates)
