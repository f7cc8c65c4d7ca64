"""Stable import path ``ssl_geometry.checkpoint``: the module itself is :mod:`ssl_geometry.training.checkpoint`."""
import sys

from ssl_geometry.training import checkpoint as _impl

sys.modules[__name__] = _impl
