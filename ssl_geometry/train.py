"""``python -m ssl_geometry.train``: the training CLI, :mod:`ssl_geometry.training.cli`."""
import sys

from ssl_geometry.training import cli as _impl

if __name__ == "__main__":
    _impl.main()
else:
    sys.modules[__name__] = _impl
