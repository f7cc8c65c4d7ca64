"""The built site as a reader sees it: markdown that did not render shows up as literal text.

``mkdocs build --strict`` passes a page whose markdown the renderer silently read as plain text.
:func:`problems` reads every built HTML page and reports, with the page and the text:

* ``table``: a paragraph whose text starts with ``|`` (a markdown table that did not render,
  e.g. a header row with unescaped pipes);
* ``tabs``: a literal ``=== "`` in the text (content tabs without ``pymdownx.tabbed``);
* ``bullet``: a paragraph with a line that starts with ``* `` (a list item read as text, e.g. a
  nested list indented 2 spaces instead of 4);
* ``attribute``: a row of an API table (Name | Type | Description) whose Type cell is an identifier
  that is also a Name of the same table, or whose Name is not one identifier (a docstring entry
  ``a, b: ...`` renders as one row named ``a,`` with ``b`` as its type, or named ``a, b``);
* ``twice``: an attribute shown twice on an API page, as a row of its class's Name | Type table and
  as an entry of its own (a heading ``<hN id=... class="doc doc-heading">``) that the row links to
  (``docs/hooks/griffe_attributes.py`` renders the table only). The summary tables at the top of a
  page (inside ``<div class="doc-summary">``, ``docs/hooks/templates/``) are an index whose rows
  link to the entries, and are not read by this rule.

Text inside ``<code>``/``<pre>`` and typeset maths (``span.arithmatex``) is not read, so a page
may show this syntax in a code block. The slow test builds the site (:func:`docs_snippets.build_site`,
the build the other site tests use); ``python tests/test_site_render.py SITE_DIR`` checks an
existing build and prints one line per problem (exit status 1 if there is any).
"""

from __future__ import annotations

import html.parser
import pathlib
import re
import sys

import pytest

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
#: Elements whose text is not prose (code, maths, scripts).
_SKIP = {"code", "pre", "script", "style", "kbd", "samp"}


class _Page(html.parser.HTMLParser):
    """Collects each ``<p>``'s prose text, all prose text, and each table's rows of cell texts."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.paragraphs: list[str] = []
        self.prose: list[str] = []
        self.tables: list[dict] = []  # {"header": [...], "rows": [[(text, refs), ...], ...]}
        self._skip = 0  # depth inside _SKIP elements / maths spans
        self._span_stack: list[bool] = []  # for each open <span>: is it a maths span
        self._p: list[str] | None = None
        self._tables: list[dict] = []  # open tables (nested tables are rare but possible)
        self._cell: list[str] | None = None
        self._row: list[str] | None = None
        self._cell_text: list[str] = []  # text of the open cell, code included
        self._cell_refs: list[str] = []  # title= and href= of the open cell's elements
        self._row_has_td = False
        self.doc_headings: set[str] = set()  # ids of the mkdocstrings entries (<hN class="doc doc-heading">)
        self._divs: list[bool] = []  # for each open <div>: is it a summary (div.doc-summary)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if re.fullmatch(r"h[1-6]", tag) and "doc-heading" in (a.get("class") or "").split() and a.get("id"):
            self.doc_headings.add(a["id"])
        if tag == "div":
            self._divs.append("doc-summary" in (a.get("class") or "").split())
        if tag in _SKIP:
            self._skip += 1
        elif tag == "span":
            maths = "arithmatex" in (a.get("class") or "").split()
            self._span_stack.append(maths)
            self._skip += maths
        elif tag == "p":
            self._p = []
        elif tag == "table":
            self._tables.append({"header": [], "rows": [], "summary": any(self._divs)})
        elif tag == "tr" and self._tables:
            self._row = []
            self._row_has_td = False
        elif tag in ("td", "th") and self._row is not None:
            self._row_has_td |= tag == "td"
            self._cell_text = []
            self._cell_refs = []
            self._cell = self._cell_text
        if self._cell is not None:
            self._cell_refs += [a[k] for k in ("title", "href") if a.get(k)]

    def handle_endtag(self, tag):
        if tag == "div" and self._divs:
            self._divs.pop()
        if tag in _SKIP:
            self._skip = max(0, self._skip - 1)
        elif tag == "span":
            if self._span_stack and self._span_stack.pop():
                self._skip = max(0, self._skip - 1)
        elif tag == "p" and self._p is not None:
            self.paragraphs.append("".join(self._p))
            self._p = None
        elif tag in ("td", "th") and self._cell is not None and self._row is not None:
            text = " ".join("".join(self._cell).split())
            self._row.append((text, self._cell_refs))
            if tag == "th":
                self._tables[-1]["header"].append(text)
            self._cell = None
        elif tag == "tr" and self._row is not None:
            if self._row_has_td:  # a header row holds only <th>
                self._tables[-1]["rows"].append(self._row)
            self._row = None
        elif tag == "table" and self._tables:
            self.tables.append(self._tables.pop())

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)  # cells keep their code: names and types are in <code>
        if self._skip:
            return
        self.prose.append(data)
        if self._p is not None:
            self._p.append(data)


def page_problems(text: str) -> list[tuple[str, str]]:
    """``[(kind, excerpt)]`` for one HTML page (kinds as in the module docstring)."""
    page = _Page()
    page.feed(text)
    page.close()
    out = []
    for para in page.paragraphs:
        stripped = para.strip()
        if stripped.startswith("|"):
            out.append(("table", stripped[:80]))
        for line in stripped.splitlines():
            if line.lstrip().startswith("* "):
                out.append(("bullet", line.strip()[:80]))
    prose = "".join(page.prose)
    for m in re.finditer(r'=== "', prose):
        out.append(("tabs", " ".join(prose[m.start() : m.start() + 60].split())))
    for table in page.tables:
        header = [h.lower() for h in table["header"]]
        if header[:2] != ["name", "type"]:
            continue
        names = {row[0][0].rstrip(",").strip() for row in table["rows"] if row}
        for row in table["rows"]:
            if (
                row
                and not table["summary"]
                and any(r.startswith("#") and r[1:] in page.doc_headings for r in row[0][1])
            ):
                out.append(("twice", f"{row[0][0]} (a table row and an entry)"))
            if len(row) < 2 or not _IDENTIFIER.match(row[1][0]):
                continue
            (name, name_refs), (kind, kind_refs) = row[0], row[1]
            # the object the table documents: the Name cell's title is "<object>.<name>"
            owners = {r.rsplit(".", 1)[0] for r in name_refs if "." in r and not r.startswith("#")}
            if kind in names or any(f"#{owner}.{kind}" in kind_refs for owner in owners):
                out.append(("attribute", f"{name} | type {kind}"))
    return out


def problems(site: pathlib.Path) -> list[str]:
    """One line ``page: kind: excerpt`` per problem of every HTML page under ``site``."""
    found = []
    for path in sorted(site.rglob("*.html")):
        rel = path.relative_to(site).as_posix()
        found += [f"{rel}: {kind}: {excerpt}" for kind, excerpt in page_problems(path.read_text())]
    return found


# --- the rules on hand-made pages (fast) -------------------------------------------------------


def _table(rows, owner="pkg.Result"):
    """An API table as mkdocstrings writes it: the Name cell titled ``<owner>.<name>``, the Type cell
    a link when the type resolved to an object (``#<anchor>``), else plain code."""

    def type_cell(t):
        return (
            f'<code><a href="#{t[1:]}">{t[1:].rsplit(".", 1)[-1]}</a></code>'
            if t.startswith("#")
            else f"<code>{t}</code>"
        )

    body = "".join(
        f'<tr class="doc-section-item"><td><code><span title="{owner}.{n}">{n}</span></code></td>'
        f"<td>{type_cell(t)}</td><td><p>{d}</p></td></tr>"
        for n, t, d in rows
    )
    return f"<table><thead><tr><th>Name</th><th>Type</th><th>Description</th></tr></thead><tbody>{body}</tbody></table>"


@pytest.mark.parametrize(
    "html_text, expected",
    [
        # a table that did not render, and one that did
        ("<p>| a | b |\n|---|---|\n| 1 | 2 |</p>", [("table", "| a | b |\n|---|---|\n| 1 | 2 |")]),
        ("<table><tr><th>a</th></tr><tr><td>| 1</td></tr></table><p>a | b</p>", []),
        # content tabs without the extension; the same syntax shown in a code block is fine
        ("<p>=== &quot;GPU (CUDA 12)&quot;</p>", [("tabs", '=== "GPU (CUDA 12)"')]),
        ('<pre><code>=== "GPU"</code></pre><p>see <code>=== "x"</code></p>', []),
        # a literal bullet at the start of a paragraph or of one of its lines; not in code or maths
        ("<p>* item</p>", [("bullet", "* item")]),
        ("<p>sign that rounding can flip.\n* How equilibria are built</p>", [("bullet", "* How equilibria are built")]),
        ("<p>a * b and 2 * 3</p><ul><li>item</li></ul><pre><code>* x</code></pre>", []),
        ('<p>x <span class="arithmatex">\\(a\n* b\\)</span></p>', []),
    ],
)
def test_rules_on_hand_made_pages(html_text, expected):
    got = page_problems(html_text)
    assert [k for k, _ in got] == [k for k, _ in expected]
    for (_, g), (_, e) in zip(got, expected):
        assert g == " ".join(e.split())[:80] or g == e[:80], (g, e)


def test_twice_rule_flags_a_table_row_that_links_to_its_own_entry():
    row = (
        "<table><thead><tr><th>Name</th><th>Type</th><th>Description</th></tr></thead><tbody>"
        '<tr class="doc-section-item"{tr}><td><code><a title="pkg.R.full" href="#pkg.R.full">full</a></code></td>'
        "<td><code>Array</code></td><td><p>d</p></td></tr></tbody></table>"
    )
    entry = '<h3 id="pkg.R.full" class="doc doc-heading">full</h3>'
    assert page_problems(row.format(tr="") + entry) == [("twice", "full (a table row and an entry)")]
    # the row anchored itself (docs/hooks/site.py) and no entry: once; a heading that is not an entry: once
    assert page_problems(row.format(tr=' id="pkg.R.full"')) == []
    assert page_problems(row.format(tr="") + '<h3 id="pkg.R.full">full</h3>') == []
    # the summary at the top of a page: an index whose rows link to the entries
    assert page_problems('<div class="doc-summary"><div>' + row.format(tr="") + "</div></div>" + entry) == []


def test_attribute_rule_flags_a_name_in_the_type_column_only():
    # the bug as rendered: "smallest_residuals, largest_residuals: ..." is one row whose type links to
    # the second attribute of the same class
    two_in_one = _table([("smallest", "ndarray", "d"), ("smallest_residuals,", "#pkg.Result.largest_residuals", "d")])
    assert page_problems(two_in_one) == [("attribute", "smallest_residuals, | type largest_residuals")]
    # a type that is plain text naming a row of the same table
    assert page_problems(_table([("lambda_min", "lambda_max", "d"), ("lambda_max", "dict", "d")])) == [
        ("attribute", "lambda_min | type lambda_max")
    ]
    # real types: a class (even one linked on the page), a dotted name, none; a name with a comma
    # and no type (a parameters row "z1, z2") is readable and not flagged
    fine = _table([("x", "ndarray", "d"), ("config", "#pkg.Config", "d"), ("y", "jax.Array", "d"), ("z1, z2", "", "d")])
    assert page_problems(fine) == []
    # only Name | Type tables are read: a results table may repeat a word across columns
    other = "<table><tr><th>rho</th><th>case</th></tr><tr><td>a</td><td>a</td></tr></table>"
    assert page_problems(other) == []


@pytest.mark.slow
def test_built_site_has_no_unrendered_markdown(tmp_path_factory):
    import docs_snippets as S

    site = S.build_site(tmp_path_factory.mktemp("site"))
    found = problems(site)
    assert not found, f"{len(found)} unrendered constructs:\n" + "\n".join(found)


def main(argv: list[str]) -> int:
    found = problems(pathlib.Path(argv[0]))
    print("\n".join(found) if found else "no problems")
    counts: dict[str, int] = {}
    for line in found:
        kind = line.split(": ")[1]
        counts[kind] = counts.get(kind, 0) + 1
    print(f"{len(found)} problems: {counts}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


# --- the report's site pages and the API attribute rules (docs/hooks/, fast) -----------------------


def _hook(name: str):
    """A module of ``docs/hooks/`` (they are loaded by path, as mkdocs and griffe load them)."""
    import importlib.util

    path = pathlib.Path(__file__).resolve().parents[1] / "docs" / "hooks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_docs_hook_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_report_figures_get_numbered_captions_and_links_move_with_the_page():
    site = _hook("site")
    text = "intro ![inline](a.png) stays\n![lambda_min by case](results/x/a.png)\n![b](results/x/b.png)\n"
    out = site.captioned_figures(site._relink(text, 1))
    assert out.count("<figure") == 2 and "intro ![inline](../a.png) stays" in out  # only standalone figures
    assert "![lambda_min by case](../results/x/a.png)\n<figcaption>Figure 1. lambda_min by case.</figcaption>" in out
    assert "<figcaption>Figure 2. b.</figcaption>" in out
    assert (
        site._relink("[t](docs/theory.md) [w](https://x.org/a) [s](#sec) [r](REPORT.md)", 1)
        == "[t](../theory.md) [w](https://x.org/a) [s](#sec) [r](../REPORT.md)"
    )


def test_report_pages_keep_the_claim_table_on_report_and_one_page_per_section():
    from experiments.report_claims import CLAIM_COLUMNS, REPORT_TABLE_HEADING

    site = _hook("site")
    row = "| " + " | ".join(["`c1`", "**supported**", "smoke", "exp_a, other", "-", "why"]) + " |"
    report = (
        f"# REPORT\n\n## Summary\n\nsummary\n\n{REPORT_TABLE_HEADING}\n\n| "
        + " | ".join(CLAIM_COLUMNS)
        + " |\n"
        + "|---" * len(CLAIM_COLUMNS)
        + "|\n"
        + row
        + "\n\n- `c1`: statement\n\n"
        "## 1. A\n\ntext\n\n![fig a](results/exp_a/f.png)\n\n<sub>results: `results/exp_a/results.json`</sub>\n\n"
        "## 2. B\n\n<sub>results: `results/exp_b/results.json`</sub>\n"
    )
    pages = site.report_pages(report)
    assert list(pages) == ["REPORT.md", "report/exp_a.md", "report/exp_b.md"]
    title, main = pages["REPORT.md"]
    assert "summary" in main and "text" not in main and "fig a" not in main
    assert '<div class="claim-table" markdown="1">' in main and main.index("</div>") > main.index(row[:8])
    assert "| [exp_a](report/exp_a.md), other |" in main  # an experiment with a page is linked, others not
    assert "- [1. A](report/exp_a.md)\n- [2. B](report/exp_b.md)" in main
    title, page_a = pages["report/exp_a.md"]
    assert title == "1. A" and page_a.startswith("# 1. A\n") and "](../REPORT.md)" in page_a
    assert "![fig a](../results/exp_a/f.png)\n<figcaption>Figure 1. fig a.</figcaption>" in page_a
    nav = site._nav_with_parts(
        [{"Home": "index.md"}, {"Report": [{"REPORT": "REPORT.md"}, {"B": "BENCHMARKS.md"}]}],
        [{"1. A": "report/exp_a.md"}],
    )
    assert nav[1]["Report"] == [
        {"REPORT": "REPORT.md"},
        {"Experiments": [{"1. A": "report/exp_a.md"}]},
        {"B": "BENCHMARKS.md"},
    ]


def test_attribute_doc_comments_and_table_names():
    pytest.importorskip("griffe")
    attrs = _hook("griffe_attributes")
    lines = ["x = 1", "#: The conclusions", "#:  it can reach.", "CONCLUSIONS = (1, 2)", "# a comment", "Y = 2"]
    assert attrs.comment_docstring(lines, 4) == "The conclusions\n it can reach."
    assert attrs.comment_docstring(lines, 6) is None and attrs.comment_docstring(lines, 1) is None
    import griffe

    cls = griffe.Class("Result")
    cls.docstring = griffe.Docstring("A result.\n\nAttributes:\n    a, b: the two.\n    c: the third.\n", parent=cls)
    assert attrs.table_names(cls) == {"a", "b", "c"}
    cls.docstring = griffe.Docstring("No table.", parent=cls)
    assert attrs.table_names(cls) == set()
