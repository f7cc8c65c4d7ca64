"""Self-supervised objectives as pure functions of head outputs.

Implementation of :mod:`ssl_geometry.losses`, one module per family; the conventions are in its docstring.
"""
