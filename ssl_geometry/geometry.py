"""Stable import path ``ssl_geometry.geometry``: the module itself is :mod:`ssl_geometry.instrument.geometry`."""
import sys

from ssl_geometry.instrument import geometry as _impl

sys.modules[__name__] = _impl
