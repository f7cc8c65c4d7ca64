"""Named activation functions (selectable by string or passed as a callable).

``get("swish")`` and ``get(jax.nn.silu)`` both return a callable. GELU is the
exact (erf) form, as in PyTorch's ``nn.GELU()`` default; ``gelu_tanh`` is the
tanh approximation. ``leaky_relu`` uses slope 0.01 (PyTorch default).
"""
from ssl_geometry._src.models.activations import ACTIVATIONS as ACTIVATIONS
from ssl_geometry._src.models.activations import PIECEWISE_LINEAR as PIECEWISE_LINEAR
from ssl_geometry._src.models.activations import get as get

__all__ = [
    "ACTIVATIONS", "PIECEWISE_LINEAR", "get",
]
