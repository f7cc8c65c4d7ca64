"""Stable import path ``ssl_geometry.objectives``: the module itself is :mod:`ssl_geometry.ssl.objectives`."""
import sys

from ssl_geometry.ssl import objectives as _impl

sys.modules[__name__] = _impl
