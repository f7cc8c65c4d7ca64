"""The core below dynamics and training: the one scanned optimisation loop (:func:`ssl_geometry.fit`).

Imports no other layer, so :mod:`ssl_geometry._src.dynamics` (which runs optimisers on the flow's
time axis) and :mod:`ssl_geometry._src.training` (the trainer, the MiniLM fine-tuning) both build
on it without depending on each other.
"""
