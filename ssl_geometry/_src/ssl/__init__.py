"""Self-supervised learning: what a training signal is made of.

* :mod:`.losses` — pure losses of head outputs (stateful ones take and return their state);
* :mod:`.objectives` — two-view objectives that tie backbone, head and loss together;
* :mod:`.augment` — on-device augmentations, also differentiable in their parameter;
* :mod:`.data` — tfds loaders and the embedded offline data sets.

Depends on :mod:`ssl_geometry._src.models` only; knows nothing of training or the instrument.
"""
