"""Training: the one optimisation loop, the sharded SSL trainer, checkpoints, probes and the CLI.

* :mod:`.trainer` — one jitted, sharded update step for every objective;
* :mod:`.checkpoint` — orbax checkpoints with verified fallback;
* :mod:`.probes` — linear, kNN and rotation probes;
* :mod:`.cli` — ``python -m ssl_geometry.train``.

The only layer that knows about optimisers' state, meshes and workdirs.
"""
