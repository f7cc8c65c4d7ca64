"""Root conftest: doctests run with float64 enabled, like the test suite."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
