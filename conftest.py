"""Root conftest: doctests run with float64 enabled, like the test suite."""
import os
import pathlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

# The flat modules ``ssl_geometry/<name>.py`` that only alias a grouped module (the documented
# import paths) are not collected for doctests: their module *is* the grouped one, collected there.
_ROOT = pathlib.Path(__file__).parent
collect_ignore = [str(p.relative_to(_ROOT)) for p in sorted((_ROOT / "ssl_geometry").glob("*.py"))
                  if "sys.modules[__name__] = _impl" in p.read_text()]
