"""On-device image augmentations in pure JAX (jit + vmap, per-sample keys).

Implementation of :mod:`ssl_geometry.augment`, one module per family; the conventions are in its docstring.
"""
