"""Every ``# noqa`` in the repository's Python names the codes it silences and says why (pyproject.toml's
[tool.ruff] lists what the whole tree is exempt from, with its reasons; a noqa is for one line that must differ)."""

import io
import pathlib
import re
import tokenize

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOQA = re.compile(r"#\s*noqa\b(?P<codes>:\s*[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*)?(?P<why>[^#]*)", re.IGNORECASE)
SKIP = ("runs", "results", ".git")


def unexplained(line: str) -> str | None:
    """Why ``line``'s noqa falls short (``None``: it has none, or it names codes and gives a reason)."""
    m = NOQA.search(line)
    if m is None:
        return None
    if not m["codes"]:
        return "a blanket noqa (name the codes)"
    if len(m["why"].strip(" -:;()")) < 3:
        return "no reason after the codes"
    return None


def test_unexplained_noqa_is_found():
    assert unexplained("x = 1") is None
    assert unexplained("f = lambda: 0  # noqa: E731 - a closure jax traces") is None
    assert unexplained("import a  # noqa: E402,F401  (after the XLA_FLAGS line)") is None
    assert unexplained("f = lambda: 0  # noqa") == "a blanket noqa (name the codes)"
    assert unexplained("f = lambda: 0  # noqa: the method is required") == "a blanket noqa (name the codes)"
    assert unexplained("import a  # noqa: F401") == "no reason after the codes"
    assert unexplained("import a  # noqa: F401  # pragma: no cover") == "no reason after the codes"


def comments(source: str) -> list[tuple[int, str]]:
    """``(line, text)`` of every comment in ``source`` (strings that mention noqa are not comments)."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [(t.start[0], t.string) for t in tokens if t.type == tokenize.COMMENT]


def test_every_noqa_names_its_codes_and_says_why():
    assert comments('x = "# noqa"  # noqa: E501 - why\n') == [(1, "# noqa: E501 - why")]
    files = [p for p in ROOT.rglob("*.py") if not set(p.relative_to(ROOT).parts) & set(SKIP)]
    assert len(files) > 100
    bad = [
        f"{p.relative_to(ROOT)}:{i}: {why}: {text}"
        for p in files
        for i, text in comments(p.read_text())
        if (why := unexplained(text))
    ]
    assert not bad, "noqa comments without codes or a reason:\n" + "\n".join(bad)
