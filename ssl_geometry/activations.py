"""Stable import path ``ssl_geometry.activations``: the module itself is :mod:`ssl_geometry.models.activations`."""
import sys

from ssl_geometry.models import activations as _impl

sys.modules[__name__] = _impl
