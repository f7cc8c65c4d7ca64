"""Stable import path ``ssl_geometry.metrics``: the module itself is :mod:`ssl_geometry.instrument.metrics`."""
import sys

from ssl_geometry.instrument import metrics as _impl

sys.modules[__name__] = _impl
