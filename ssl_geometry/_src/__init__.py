"""The implementation of :mod:`ssl_geometry`, grouped by layer (private: import the public namespaces).

Every public name is re-exported once, by one of the modules ``ssl_geometry/<namespace>.py``
(``heads``, ``losses``, ``geometry``, ``curvature``, ``dynamics``, ``trainer``, ...). The packages
here are the layers of ``docs/architecture.md``; the arrows between them point one way:

* :mod:`.models` -- ``Model = (init, apply)``, activations, heads, backbones, the text encoder,
  checkpoint converters; imports only :mod:`.checks` and :mod:`.ops`;
* :mod:`.ssl` -- losses, objectives, augmentations, data sets; imports :mod:`.models`;
* :mod:`.linalg` -- dense Hessians, HVPs, Lanczos, traces, certificates; takes functions and pytrees;
* :mod:`.instrument` -- the effective Hessian, premises, Thm 3.1 / 4.1, curvature, metrics;
  imports :mod:`.models` and :mod:`.linalg`;
* :mod:`.core` -- the scan loop that the optimisation loop and the dynamics share;
* :mod:`.dynamics` -- gradient flow and discrete optimisers on one time axis;
* :mod:`.training` -- the optimisation loop, the sharded trainer, checkpoints, probes, the CLI.
"""
