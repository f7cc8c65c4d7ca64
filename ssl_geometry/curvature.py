"""Stable import path ``ssl_geometry.curvature``: the module itself is :mod:`ssl_geometry.linalg.curvature`."""
import sys

from ssl_geometry.linalg import curvature as _impl

sys.modules[__name__] = _impl
