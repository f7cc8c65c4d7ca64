"""Training: the one run loop, its builders, the sharded SSL update step, checkpoints, probes and the CLI.

* :mod:`.run` -- the run loop (:func:`ssl_geometry.trainer.train`);
* :mod:`.builders` -- config sections to objects, and the validation of the whole config;
* :mod:`.optimizer`, :mod:`.step`, :mod:`.state`, :mod:`.data_order` -- the optimiser, the update step,
  the state with its sharding, the data order;
* :mod:`.feed`, :mod:`.monitor`, :mod:`.workdir`, :mod:`.checkpoint` -- the input, metrics and logging,
  the guarded workdir, orbax checkpoints with verified fallback;
* :mod:`.probes` -- linear, kNN and rotation probes;
* :mod:`.cli` -- ``python -m ssl_geometry.train`` (argv parsing, exit status, printing).

The only layer that knows about optimisers' state, meshes and workdirs.
"""
