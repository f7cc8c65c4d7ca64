"""Counting XLA compilations in tests: a compiled-once claim is tested by what JAX logs."""

import logging

import jax


def compilations(fn) -> list[str]:
    """Messages of the XLA compilations ``fn()`` triggers (JAX logs one "Compiling ..." per compilation)."""
    records = []

    class Collect(logging.Handler):
        def emit(self, record):
            if record.getMessage().startswith("Compiling"):
                records.append(record.getMessage().split(" with ")[0])

    handler, root = Collect(level=logging.DEBUG), logging.getLogger()
    root.addHandler(handler)
    try:
        with jax.log_compiles():
            fn()
    finally:
        root.removeHandler(handler)
    return records
