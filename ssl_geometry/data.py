"""Stable import path ``ssl_geometry.data``: the module itself is :mod:`ssl_geometry.ssl.data`."""
import sys

from ssl_geometry.ssl import data as _impl

sys.modules[__name__] = _impl
