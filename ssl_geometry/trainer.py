"""Stable import path ``ssl_geometry.trainer``: the module itself is :mod:`ssl_geometry.training.trainer`."""
import sys

from ssl_geometry.training import trainer as _impl

sys.modules[__name__] = _impl
