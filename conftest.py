"""The one conftest: float64 enabled (tests and doctests), and shape/dtype annotations checked at run time.

The jaxtyping import hook is installed *before* any ``ssl_geometry`` module is imported, with
beartype as the checker, for the modules listed in :data:`TYPECHECKED_MODULES` (a prefix covers
its submodules). Add your module there, one line each, once its public functions carry
jaxtyping annotations (``Float[ArrayIn, "n k"]``). A call with mismatched shapes then raises
``jaxtyping.TypeCheckError`` in every test. Tests that check a library's own error message for
such a call (what a user without the hook sees) use the ``no_shape_checks`` fixture.
"""

import os
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import jax
import jaxtyping
import pytest

jax.config.update("jax_enable_x64", True)

#: Modules whose annotations are checked in tests (prefixes; one line per module).
TYPECHECKED_MODULES = [
    "ssl_geometry._src.ops",
    "ssl_geometry._src.ssl.losses",
    "ssl_geometry._src.models.heads",
    "ssl_geometry._src.models.activations",
    "ssl_geometry._src.linalg.hessians",
    "ssl_geometry._src.linalg.lanczos",
    "ssl_geometry._src.linalg.traces",
    "ssl_geometry._src.linalg.power",
    "ssl_geometry._src.linalg.certificates",
    "ssl_geometry._src.instrument.effective",
    "ssl_geometry._src.instrument.premises",
    "ssl_geometry._src.instrument.whitening",
    "ssl_geometry._src.instrument.thm41",
    "ssl_geometry._src.instrument.equilibria",
]

try:
    import beartype  # noqa: F401  (the run-time checker; in the `test` extra)

    SHAPE_CHECKER = "beartype.beartype"
except ImportError:  # the type tests fail with this message; the rest of the suite still runs
    SHAPE_CHECKER = None
    warnings.warn(
        "beartype is not installed (pip install -e '.[test]'): jaxtyping annotations are not checked in this test run.",
        stacklevel=1,
    )

if SHAPE_CHECKER is not None:
    jaxtyping.install_import_hook(TYPECHECKED_MODULES, SHAPE_CHECKER)


@pytest.fixture
def no_shape_checks():
    """Turn the jaxtyping checks off for one test (to see the library's own argument errors)."""
    jaxtyping.config.update("jaxtyping_disable", True)
    try:
        yield
    finally:
        jaxtyping.config.update("jaxtyping_disable", False)


@pytest.fixture
def fake_clock(monkeypatch):
    """A clock that the dry runs' timer reads: ``harness.interleave`` times its calls on ``clock[0]`` (the returned
    one-item list), which a test's stand-ins advance instead of sleeping, so projections are exact whatever the load."""
    from experiments.benchmarks import harness  # here, not at import: ssl_geometry loads after the shape-check hook

    clock = [0.0]
    interleave = harness.interleave
    monkeypatch.setattr(harness, "interleave", lambda fns, **kw: interleave(fns, **{**kw, "clock": lambda: clock[0]}))
    return clock
