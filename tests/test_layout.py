"""The size limits of the layout (docs/architecture.md): small modules and functions, so that each holds one idea.

Counted as a reader sees them, docstrings included: a library module at most :data:`LIBRARY_MODULE_MAX` lines, a
library function at most :data:`FUNCTION_MAX` (from ``def`` to its last line), an experiment module at most
:data:`EXPERIMENT_MODULE_MAX`. A file that grows past a limit fails here, naming itself and its size.
"""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
LIBRARY_MODULE_MAX, FUNCTION_MAX, EXPERIMENT_MODULE_MAX = 600, 90, 360


def _sources(folder):
    return sorted((ROOT / folder).rglob("*.py"))


def test_library_modules_and_functions_stay_small():
    long_modules, long_functions = [], []
    for path in _sources("ssl_geometry"):
        text = path.read_text()
        rel = path.relative_to(ROOT)
        if len(text.splitlines()) > LIBRARY_MODULE_MAX:
            long_modules.append((str(rel), len(text.splitlines())))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > FUNCTION_MAX:
                    long_functions.append((f"{rel}:{node.name}", n))
    assert not long_modules, f"library modules over {LIBRARY_MODULE_MAX} lines: {long_modules}"
    assert not long_functions, f"library functions over {FUNCTION_MAX} lines: {long_functions}"


def test_experiment_modules_stay_small():
    long_modules = [
        (str(p.relative_to(ROOT)), len(p.read_text().splitlines()))
        for p in _sources("experiments")
        if len(p.read_text().splitlines()) > EXPERIMENT_MODULE_MAX
    ]
    assert not long_modules, f"experiment modules over {EXPERIMENT_MODULE_MAX} lines: {long_modules}"


def test_the_limits_see_a_long_function():
    """The counter itself: a 100-line function is over the limit, a 10-line one is not."""
    long_src = "def f():\n" + "    x = 1\n" * 99
    short_src = "def g():\n" + "    x = 1\n" * 9
    sizes = {
        n.name: n.end_lineno - n.lineno + 1
        for src in (long_src, short_src)
        for n in ast.walk(ast.parse(src))
        if isinstance(n, ast.FunctionDef)
    }
    assert sizes == {"f": 100, "g": 10} and sizes["f"] > FUNCTION_MAX >= sizes["g"]
