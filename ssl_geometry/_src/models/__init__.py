"""Models: pure ``init``/``apply`` pairs over pytrees.

* :mod:`.base` — the :class:`Model` interface and :func:`as_function` (``z -> u``);
* :mod:`.activations` — activations by name (the registry every head uses);
* :mod:`.heads` — projection heads and predictors;
* :mod:`.backbones` — MLP, CNN, ResNet and ViT backbones;
* :mod:`.text` — the MiniLM encoder in pure JAX;
* :mod:`.pretrained` — safe converters for released checkpoints (backbone + head).

Models know nothing of losses, training or the instrument.
"""
