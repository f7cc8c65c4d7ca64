"""Stable import path ``ssl_geometry.paper``: the module itself is :mod:`ssl_geometry.instrument.paper`."""
import sys

from ssl_geometry.instrument import paper as _impl

sys.modules[__name__] = _impl
