"""Stable import path ``ssl_geometry.probes``: the module itself is :mod:`ssl_geometry.training.probes`."""
import sys

from ssl_geometry.training import probes as _impl

sys.modules[__name__] = _impl
