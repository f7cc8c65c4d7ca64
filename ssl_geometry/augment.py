"""Stable import path ``ssl_geometry.augment``: the module itself is :mod:`ssl_geometry.ssl.augment`."""
import sys

from ssl_geometry.ssl import augment as _impl

sys.modules[__name__] = _impl
