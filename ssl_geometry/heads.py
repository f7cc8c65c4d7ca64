"""Stable import path ``ssl_geometry.heads``: the module itself is :mod:`ssl_geometry.models.heads`."""
import sys

from ssl_geometry.models import heads as _impl

sys.modules[__name__] = _impl
