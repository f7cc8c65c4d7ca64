"""Stable import path ``ssl_geometry.pretrained``: the module itself is :mod:`ssl_geometry.models.pretrained`."""
import sys

from ssl_geometry.models import pretrained as _impl

sys.modules[__name__] = _impl
