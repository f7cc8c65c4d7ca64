"""Stable import path ``ssl_geometry.backbones``: the module itself is :mod:`ssl_geometry.models.backbones`."""
import sys

from ssl_geometry.models import backbones as _impl

sys.modules[__name__] = _impl
