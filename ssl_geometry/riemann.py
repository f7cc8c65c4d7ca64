"""Stable import path ``ssl_geometry.riemann``: the module itself is :mod:`ssl_geometry.instrument.riemann`."""
import sys

from ssl_geometry.instrument import riemann as _impl

sys.modules[__name__] = _impl
