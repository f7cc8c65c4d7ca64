"""The core install (``pip install ssl_geometry``, no extra) is enough for the pure library.

Each test runs a fresh interpreter whose import system refuses every package of the ``data`` extra
(TensorFlow, tfds, orbax, ...; ``pyproject.toml``) with ``ModuleNotFoundError``, as if it were not
installed. ``import ssl_geometry`` and every public namespace must import, the README's theorem example
must print what the README shows, and a function that needs the extra must say which extra to install.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]

#: Import names of the packages of the `data` extra (the distribution names differ: tfds, sklearn, ...).
BLOCKED = (
    "tensorflow",
    "tensorflow_datasets",
    "orbax",
    "ml_collections",
    "tqdm",
    "sklearn",
    "safetensors",
    "tokenizers",
    "matplotlib",
)

_BLOCKER = f"""
import importlib.abc, sys
BLOCKED = {BLOCKED!r}
class _NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked: not in the core install)", name=name)
        return None
for _m in [m for m in sys.modules if m.split(".")[0] in BLOCKED]:
    del sys.modules[_m]
sys.meta_path.insert(0, _NotInstalled())
"""


def _run(code: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", _BLOCKER + code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)},
    )


def test_the_blocker_blocks():
    """The harness itself: a blocked package cannot be imported, an unblocked one can."""
    proc = _run(
        "import json\ntry:\n    import tensorflow_datasets\nexcept ModuleNotFoundError as e:\n"
        "    print('blocked', e.name)\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["blocked", "tensorflow_datasets"]


def test_the_blocked_list_is_the_data_extra():
    """Every distribution of the `data` extra is blocked under its import name, and none of the core."""
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    import_name = {
        "orbax-checkpoint": "orbax",
        "tensorflow-datasets": "tensorflow_datasets",
        "tensorflow-cpu": "tensorflow",
        "ml-collections": "ml_collections",
        "scikit-learn": "sklearn",
        "importlib_resources": None,
    }  # a backport tfds needs; nothing of ours imports it
    dists = {re.split(r"[<>=;\[ ]", d, maxsplit=1)[0] for d in meta["optional-dependencies"]["data"]}
    assert {import_name.get(d, d) for d in dists} - {None} == set(BLOCKED)
    core = {re.split(r"[<>=;\[ ]", d, maxsplit=1)[0] for d in meta["dependencies"]}
    assert core == {"jax", "flax", "optax", "chex", "jaxtyping", "diffrax", "equinox", "numpy", "scipy"}


def test_every_namespace_imports_without_the_data_extra():
    proc = _run(
        "import ssl_geometry\n"
        "for ns in ssl_geometry.NAMESPACES:\n"
        "    __import__(f'ssl_geometry.{ns}')\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {BLOCKED!r}))\n"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "[]"


#: A call of each kind that needs the extra, and the package it must name.
NEEDS_EXTRA = (
    ("ssl_geometry.checkpoint.manager(tempfile.mkdtemp())", "orbax"),
    ("ssl_geometry.data.load('digits')", "sklearn"),
    ("ssl_geometry.data.load('cifar10', data_dir=tempfile.mkdtemp())", "tensorflow_datasets"),
    ("ssl_geometry.pretrained.save_converted({'w': [1.0]}, tempfile.mkdtemp() + '/w.safetensors')", "safetensors"),
)


def test_a_function_that_needs_the_extra_names_it():
    body = "".join(
        f"try:\n    {call}\n    print('no error')\nexcept ImportError as e:\n    print(e)\n" for call, _ in NEEDS_EXTRA
    )
    proc = _run("import tempfile, ssl_geometry\n" + body)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == len(NEEDS_EXTRA), proc.stdout
    for (call, package), line in zip(NEEDS_EXTRA, lines):
        assert line.startswith(f"`{package}` is not installed") and "ssl_geometry[data]" in line, (call, line)


@pytest.mark.slow
def test_readme_theorem_example_runs_on_the_core():
    readme = (ROOT / "README.md").read_text()
    code, shown = re.search(
        r"## Checking a theorem by computation.*?```python\n(.*?)```\s*```text[^\n]*\n(.*?)```", readme, re.S
    ).groups()
    proc = _run(code, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == shown.split()


def test_the_version_has_one_source():
    """pyproject.toml reads the version from ``ssl_geometry/__init__.py``; the installed metadata agrees."""
    import importlib.metadata

    import ssl_geometry

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"] and "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "ssl_geometry.__version__"}
    assert importlib.metadata.version("ssl_geometry") == ssl_geometry.__version__
