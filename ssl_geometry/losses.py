"""Stable import path ``ssl_geometry.losses``: the module itself is :mod:`ssl_geometry.ssl.losses`."""
import sys

from ssl_geometry.ssl import losses as _impl

sys.modules[__name__] = _impl
