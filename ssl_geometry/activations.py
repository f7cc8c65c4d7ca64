"""Named activation functions, each with its smoothness class: the one table.

Every activation is an :class:`Activation` record ``(name, fn, smoothness, kinks)`` in
:data:`ACTIVATIONS`; :func:`smoothness` is the one classification the library uses (Thm 4.1's
C^2 premise, the head kinds of :func:`ssl_geometry.geometry.head_smoothness`). The classes
(:data:`SMOOTHNESS`):

* ``"affine"``: ``sigma'' = 0`` everywhere (identity);
* ``"piecewise_linear"``: ``sigma'' = 0`` away from ``kinks``, where ``sigma'`` jumps (relu, leaky_relu);
* ``"c1"``: ``sigma'`` continuous, ``sigma''`` jumps at ``kinks`` (elu): not C^2;
* ``"c2"``: twice continuously differentiable and not affine (gelu, swish, tanh, ...).

``get("swish")`` and ``get(jax.nn.silu)`` both return the function; a callable that is not
registered has class ``"unknown"`` (:data:`UNKNOWN`) unless it comes as an
``Activation(name, fn, smoothness)``. GELU is the exact (erf) form, as in PyTorch's
``nn.GELU()`` default; ``gelu_tanh`` is the tanh approximation. ``leaky_relu`` uses slope 0.01
(PyTorch default). A :class:`~ssl_geometry.Model` carries the records of its layers in
``Model.activations``.
The smoothness classes as name sets: :data:`AFFINE_ACTIVATIONS`, :data:`PIECEWISE_LINEAR`,
:data:`C2_ACTIVATIONS` and :data:`NON_C2_ACTIVATIONS` (the names Thm 4.1's C^2 premise refuses);
:func:`lookup` returns the :class:`Activation` record of a name, a record or a callable.
"""

from ssl_geometry._src.models.activations import ACTIVATIONS as ACTIVATIONS
from ssl_geometry._src.models.activations import AFFINE_ACTIVATIONS as AFFINE_ACTIVATIONS
from ssl_geometry._src.models.activations import C2_ACTIVATIONS as C2_ACTIVATIONS
from ssl_geometry._src.models.activations import NON_C2_ACTIVATIONS as NON_C2_ACTIVATIONS
from ssl_geometry._src.models.activations import PIECEWISE_LINEAR as PIECEWISE_LINEAR
from ssl_geometry._src.models.activations import SMOOTHNESS as SMOOTHNESS
from ssl_geometry._src.models.activations import UNKNOWN as UNKNOWN
from ssl_geometry._src.models.activations import Activation as Activation
from ssl_geometry._src.models.activations import get as get
from ssl_geometry._src.models.activations import lookup as lookup
from ssl_geometry._src.models.activations import smoothness as smoothness

__all__ = [
    "ACTIVATIONS",
    "AFFINE_ACTIVATIONS",
    "Activation",
    "C2_ACTIVATIONS",
    "NON_C2_ACTIVATIONS",
    "PIECEWISE_LINEAR",
    "SMOOTHNESS",
    "UNKNOWN",
    "get",
    "lookup",
    "smoothness",
]
