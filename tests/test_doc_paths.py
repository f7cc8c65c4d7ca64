"""Every repository path the words name exists: in README.md, docs/**/*.md and the docstrings of the library, the
experiments and the tests (a recipe that points at a moved or deleted file fails here, naming page and path)."""

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
#: A path into one of the repository's own folders (``runs/``, ``results/`` and the like are outputs, not named here).
PATH = re.compile(r"(?<![\w./-])((?:ssl_geometry|experiments|tests|docs|\.ci)/[\w./-]*[\w/])")
#: Patterns and templates, not files: a glob, a placeholder, a format field, an example name (``bench_x.md``).
TEMPLATE = re.compile(r"[*<>{}]|\bNAME\b|\bfoo\b|[/_]x\.")


def _markdown():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [(str(p.relative_to(ROOT)), p.read_text()) for p in pages]


def _docstrings():
    out = []
    for folder in ("ssl_geometry", "experiments", "tests"):
        for p in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(p.read_text())
            for node in ast.walk(tree):
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    doc = ast.get_docstring(node, clean=False)
                    if doc:
                        out.append((f"{p.relative_to(ROOT)}:{getattr(node, 'lineno', 1)}", doc))
    return out


def named_paths(text: str) -> list[str]:
    """The repository paths in ``text``, templates left out (see :data:`TEMPLATE`)."""
    found = []
    for m in PATH.finditer(text):
        path = m.group(1).rstrip(".")
        if TEMPLATE.search(text[m.start() : m.end() + 1]):
            continue
        found.append(path)
    return found


def missing(sources) -> list[str]:
    """``"where: path"`` for every named path that is neither a file nor a folder of the repository."""
    return [f"{where}: {path}" for where, text in sources for path in named_paths(text) if not (ROOT / path).exists()]


def test_named_paths_are_found_and_templates_skipped():
    text = (
        "see `experiments/suite.py`, ssl_geometry/_src/linalg/ and tests/test_layout.py. "
        "Not: experiments/bench_*.py, experiments/<name>.py, docs/bench_x.md, runs/small/metrics.jsonl, my_tests/x.py"
    )
    assert named_paths(text) == ["experiments/suite.py", "ssl_geometry/_src/linalg/", "tests/test_layout.py"]
    assert missing([("page", "tests/test_no_such_file.py and tests/test_layout.py")]) == [
        "page: tests/test_no_such_file.py"
    ]


@pytest.mark.parametrize("kind", ["markdown", "docstrings"])
def test_every_named_repository_path_exists(kind):
    sources = _markdown() if kind == "markdown" else _docstrings()
    assert sum(len(named_paths(text)) for _, text in sources) > 10  # the scan sees the paths it should check
    assert not missing(sources), "paths named in the words that do not exist:\n" + "\n".join(missing(sources))
