"""Dynamics: gradient flow (diffrax) against discrete optax optimisers on one time axis.

* :mod:`.flow` -- :func:`gradient_flow` (Tsit5, Dopri5, Kvaerno5, RK4; implicit gradient regularisation);
* :mod:`.discrete` -- :func:`discrete`: any optax optimiser, step ``k`` at ``t = k * lr``
  (its steps are :func:`ssl_geometry.fit`);
* :mod:`.trajectory` -- the :class:`Trajectory` both return, :class:`DynamicsError`;
* :mod:`.escape` -- :func:`escape_time`, the first recorded time a run left collapse;
* :mod:`.sharpness` -- top Hessian eigenvalue (edge of stability, ``2 / lr``);
* :mod:`.linearise` -- the linearised field at an equilibrium: predicted escape rates (flow, SGD).
"""
