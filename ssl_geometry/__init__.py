"""ssl_geometry: the geometry of self-supervised projection heads, in JAX.

Pure-function heads, backbones and losses; exact effective Hessians and Krylov
eigensolvers; gradient flow against discrete optimisers; a sharded SSL trainer;
and an experiment suite that reports whether the paper's premises held.
"""
__version__ = "0.1.0"
