"""Stable import path ``ssl_geometry.text``: the module itself is :mod:`ssl_geometry.models.text`."""
import sys

from ssl_geometry.models import text as _impl

sys.modules[__name__] = _impl
