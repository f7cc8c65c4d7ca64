"""Run the code of a documentation page and compare what it prints with the output the page shows.

(And :func:`build_site`, the strict build the site tests share.)

A page's fenced ``python`` blocks run in order in one namespace (like a notebook), from the
repository root. Each is followed on the page by the output it prints, in a fenced block titled
"Output"::

    ```python
    print(1 / 3)
    ```

    ```text title="Output"
    0.333333
    ```

A ``bash`` block followed by such an Output block runs too (``bash -e``, from the repository root,
stdout and stderr together); a ``bash`` block without one is shown, not run (installs, cluster
launches). A block with a title (```` ```python title="experiments/x.py" ````) is a file listing and
does not run. An HTML comment ``<!-- output: rtol=1e-2 -->`` just before an Output block sets its
tolerance; ``slow`` there moves the block to the test suite's slow tier (it must not depend on the
page's other blocks).

Comparison: whitespace runs are equal; ``...`` in the shown output matches any text (as doctest's
ELLIPSIS); every number is compared with ``|got - shown| <= atol + rtol |shown|`` (defaults rtol
1e-3, atol 1e-12), so a page can show a rounded value of a float64 computation.

``python tests/docs_snippets.py docs/howto/theorem.md`` prints what each block prints (to write
or refresh a page).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]

_FENCE = re.compile(
    r"(?:<!--\s*output:(?P<opts>[^>]*)-->\s*\n)?^```(?P<info>[^\n]*)\n(?P<body>.*?)^```[ \t]*$", re.M | re.S
)
NUMBER = r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)"
_TOKEN = re.compile(rf"(\.\.\.)|({NUMBER})|(\s+)")


@dataclasses.dataclass
class Snippet:
    """One runnable block of a page and the output the page shows for it."""

    page: str
    line: int
    language: str
    code: str
    output: str | None
    rtol: float = 1e-3
    atol: float = 1e-12
    slow: bool = False

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def _options(text: str | None) -> dict:
    opts = {}
    for item in (text or "").split():
        key, _, value = item.partition("=")
        if key == "slow" and not value:
            opts["slow"] = True
        elif key in ("rtol", "atol"):
            opts[key] = float(value)
        else:
            raise ValueError(f"unknown output option {item!r} (expected rtol=, atol= or slow)")
    return opts


def snippets(page: pathlib.Path) -> list[Snippet]:
    """The runnable blocks of ``page`` with their shown outputs."""
    text = page.read_text()
    blocks = []
    for m in _FENCE.finditer(text):
        info = m.group("info").strip()
        blocks.append(
            (
                info.split()[0] if info else "",
                info,
                m.group("body"),
                m.group("opts"),
                text.count("\n", 0, m.start()) + 1,
            )
        )
    out = []
    rel = str(page.relative_to(ROOT)) if page.is_absolute() and page.is_relative_to(ROOT) else str(page)
    for i, (lang, info, body, _, line) in enumerate(blocks):
        if lang not in ("python", "bash") or "title=" in info:  # a titled block is a file listing
            continue
        nxt = blocks[i + 1] if i + 1 < len(blocks) else None
        shown = nxt is not None and nxt[0] == "text" and 'title="Output"' in nxt[1]
        if lang == "bash" and not shown:
            continue
        out.append(Snippet(rel, line, lang, body, nxt[2] if shown else None, **_options(nxt[3] if shown else None)))
    return out


def run(snippet: Snippet, namespace: dict) -> str:
    """Run one block (python: in ``namespace``; bash: a subprocess) and return what it printed."""
    if snippet.language == "bash":
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        proc = subprocess.run(
            ["bash", "-e", "-c", snippet.code],
            cwd=ROOT,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=600,
        )
        return proc.stdout
    buf = io.StringIO()
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(buf):
            exec(compile(snippet.code, snippet.where, "exec"), namespace)  # the page's own code
    finally:
        os.chdir(cwd)
    return buf.getvalue()


def mismatch(shown: str, got: str, rtol: float = 1e-3, atol: float = 1e-12) -> str | None:
    """``None`` if ``got`` matches the ``shown`` output (see the module docstring), else why not."""
    pattern, numbers = [], []
    pos = 0
    shown = shown.strip()
    for m in _TOKEN.finditer(shown):
        pattern.append(re.escape(shown[pos : m.start()]))
        if m.group(1):
            pattern.append(r".*?")
        elif m.group(2):
            pattern.append(rf"({NUMBER})")
            numbers.append(m.group(2))
        else:
            pattern.append(r"\s+")
        pos = m.end()
    pattern.append(re.escape(shown[pos:]))
    match = re.fullmatch("".join(pattern), got.strip(), flags=re.S | re.I)
    if match is None:
        return "the printed text differs from the page's (numbers aside)"
    for want, have in zip(numbers, match.groups()):
        w, h = float(want), float(have)
        if math.isnan(w) and math.isnan(h):
            continue
        if not (w == h or abs(h - w) <= atol + rtol * abs(w)):
            return f"printed {have} where the page shows {want} (rtol {rtol}, atol {atol})"
    return None


def build_site(dest: pathlib.Path) -> pathlib.Path:
    """``mkdocs build --strict`` into ``dest``; a failed build raises with mkdocs' own messages."""
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(dest)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if proc.returncode != 0:
        raise AssertionError("mkdocs build --strict failed:\n" + proc.stderr[-6000:])
    return dest


def main(argv: list[str]) -> int:
    for page in argv:
        namespace: dict = {"__name__": "__docs__"}
        for s in snippets(pathlib.Path(page).resolve()):
            print(f"--- {s.where} ({s.language})")
            print(run(s, namespace), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
