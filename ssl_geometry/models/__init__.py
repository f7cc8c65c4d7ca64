"""Models: pure ``init``/``apply`` pairs over pytrees.

* :mod:`.base` — the :class:`Model` interface and :func:`as_function` (``z -> u``);
* :mod:`.activations` — activations by name (the registry every head uses);
* :mod:`.heads` — projection heads and predictors;
* :mod:`.backbones` — MLP, CNN, ResNet and ViT backbones;
* :mod:`.text` — the MiniLM encoder in pure JAX;
* :mod:`.pretrained` — safe converters for released checkpoints (backbone + head).

Models know nothing of losses, training or the instrument.
"""
from ssl_geometry.models.base import Model as Model
from ssl_geometry.models.base import Variables as Variables
from ssl_geometry.models.base import as_function as as_function
from ssl_geometry.models.base import merge_state as merge_state
from ssl_geometry.models.base import param_count as param_count

__all__ = ["Model", "Variables", "as_function", "merge_state", "param_count"]
