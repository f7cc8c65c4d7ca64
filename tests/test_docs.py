"""The documentation site cannot rot: its how-to pages run, its API pages cover the public API once each,
and README.md is an excerpt of what REPORT.md and the pages say.

* Every runnable block of ``docs/howto/*.md`` runs and prints the output the page shows
  (``tests/docs_snippets.py`` says how blocks are found and compared).
* The site builds with ``mkdocs build --strict``; every namespace of ``ssl_geometry.NAMESPACES`` and
  the package itself has an API page, and every name of every ``__all__`` is a heading (under its
  public path) on its namespace's page and on no other page.
* README.md: at most about 120 lines; its theorem example is the first block of
  ``docs/howto/theorem.md`` with the same output (so running that page runs README's example). Its
  headline table is REPORT.md's claim-level table without the statement column: checked in
  ``tests/test_report_md.py`` (:func:`experiments.report_md.readme_excerpt`).
"""

from __future__ import annotations

import collections
import html
import html.parser
import importlib
import pathlib
import re

import docs_snippets as S
import pytest

import ssl_geometry

ROOT = pathlib.Path(__file__).resolve().parents[1]
HOWTO = sorted((ROOT / "docs" / "howto").glob("*.md"))
README = ROOT / "README.md"
REPORT = ROOT / "REPORT.md"
README_MAX_LINES = 125


# ----------------------------------------------------------------------------- how-to pages


def _check_page(page: pathlib.Path, slow: bool) -> int:
    blocks = S.snippets(page)
    namespace: dict = {"__name__": "__docs__"}
    ran = 0
    for s in blocks:
        if s.slow != slow:
            continue
        assert s.output is not None, f"{s.where}: a python block must be followed by the Output it prints"
        got = S.run(s, namespace)
        why = S.mismatch(s.output, got, rtol=s.rtol, atol=s.atol)
        assert why is None, f"{s.where}: {why}\n--- page shows:\n{s.output}\n--- printed:\n{got}"
        ran += 1
    return ran


#: The how-to pages whose fast blocks run in the slow tier (the training page's take over a minute on 2 cores).
SLOW_PAGES = {"train"}


@pytest.mark.parametrize(
    "page",
    [pytest.param(p, marks=pytest.mark.slow) if p.stem in SLOW_PAGES else p for p in HOWTO],
    ids=[p.stem for p in HOWTO],
)
def test_howto_page_runs_and_prints_what_it_shows(page):
    assert _check_page(page, slow=False) >= 1, f"{page.name} has no runnable block"


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in HOWTO if any(s.slow for s in S.snippets(p))], ids=lambda p: p.stem)
def test_howto_slow_blocks_run_and_print_what_they_show(page):
    assert _check_page(page, slow=True) >= 1


def test_every_howto_page_is_in_the_nav():
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in HOWTO:
        assert f"howto/{page.name}" in nav, f"{page.name} is not in mkdocs.yml's nav"


def test_snippet_comparison_tolerates_what_it_should_and_nothing_else():
    assert S.mismatch("x = 1.2346e-05", "x = 1.23456789e-05") is None
    assert S.mismatch("x = 1.2346e-05", "x = 1.2400e-05") is not None  # beyond rtol 1e-3
    assert S.mismatch("x = 1.24e-05", "x = 1.2400e-05", rtol=1e-2) is None
    assert S.mismatch("took ... s\nok", "took 12.5 s\nok") is None
    assert S.mismatch("True no escape", "False no escape") is not None  # text is compared exactly
    assert S.mismatch("a 1 b", "a  1\n b ") is None  # whitespace runs are equal
    assert S.mismatch("[-1.3e-05]", "[-1.3e-05] extra") is not None


def test_snippets_are_found_with_their_options(tmp_path):
    (tmp_path / "p.md").write_text(
        '```python\nprint(1)\n```\n\n<!-- output: rtol=0.1 -->\n```text title="Output"\n1\n```\n\n'
        "```bash\npip install x\n```\n\n```bash\necho hi\n```\n\n<!-- output: slow -->\n"
        '```text title="Output"\nhi\n```\n\n```python title="a listing"\nx = 1\n```\n'
    )
    found = S.snippets(tmp_path / "p.md")
    assert [(s.language, s.output, s.rtol, s.slow) for s in found] == [
        ("python", "1\n", 0.1, False),
        ("bash", "hi\n", 1e-3, True),
    ]


# ----------------------------------------------------------------------------- the site and its API pages


class _Headings(html.parser.HTMLParser):
    """Ids of the mkdocstrings object headings of a page (``<hN id=... class="doc doc-heading">``)."""

    def __init__(self):
        super().__init__()
        self.ids: list[str] = []
        self.text: list[str] = []
        self._in = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if re.fullmatch(r"h[1-6]", tag) and "doc-heading" in (a.get("class") or "") and a.get("id"):
            self.ids.append(a["id"])
            self._in = True

    def handle_endtag(self, tag):
        if re.fullmatch(r"h[1-6]", tag):
            self._in = False

    def handle_data(self, data):
        if self._in:
            self.text.append(data)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return S.build_site(tmp_path_factory.mktemp("site"))


def _public_names():
    """``{namespace: [public path of each name in its __all__]}``, the package itself included."""
    out = {"ssl_geometry": [f"ssl_geometry.{n}" for n in ssl_geometry.__all__ if not n.startswith("__")]}
    for ns in (*ssl_geometry.NAMESPACES, "internal"):  # internal: not public, documented on its own page all the same
        mod = importlib.import_module(f"ssl_geometry.{ns}")
        out[f"ssl_geometry.{ns}"] = [f"ssl_geometry.{ns}.{n}" for n in mod.__all__]
    return out


def _api_page(namespace: str) -> str:
    return "api/index" if namespace == "ssl_geometry" else f"api/{namespace.split('.', 1)[1]}"


def test_every_namespace_has_an_api_page_in_the_nav():
    nav = (ROOT / "mkdocs.yml").read_text()
    for namespace in _public_names():
        page = ROOT / "docs" / f"{_api_page(namespace)}.md"
        assert page.exists(), f"no API page for {namespace}"
        assert re.search(rf"^:::\s+{re.escape(namespace)}\s*$", page.read_text(), re.M), (
            f"{page.name} does not render {namespace}"
        )
        assert f"{_api_page(namespace)}.md" in nav, f"{page.name} is not in mkdocs.yml's nav"
    extra = {p.stem for p in (ROOT / "docs" / "api").glob("*.md")} - {
        _api_page(n).split("/")[1] for n in _public_names()
    }
    assert not extra, f"API pages for no public namespace: {sorted(extra)}"


def test_each_public_name_is_on_exactly_one_api_page_under_its_public_path(site):
    where = collections.defaultdict(list)
    for path in site.rglob("*.html"):
        parser = _Headings()
        parser.feed(path.read_text())
        rel = str(path.relative_to(site).with_suffix(""))
        for i in parser.ids:
            where[i].append(rel)
        shown = " ".join(parser.text)
        assert "_src" not in shown, f"{rel} shows an implementation path in a heading"
    for namespace, names in _public_names().items():
        page = _api_page(namespace)
        assert f'id="{namespace}"' in (site / f"{page}.html").read_text(), f"{page} has no anchor {namespace}"
        for name in names:
            assert where.get(name) == [page], f"{name}: rendered on {where.get(name) or 'no page'}, expected {page}"


def test_api_signatures_show_the_jaxtyping_shapes(site):
    text = (site / "api" / "heads.html").read_text()
    start = text.index("doc-signature", text.index('id="ssl_geometry.heads.batchnorm"'))
    signature = html.unescape(re.sub(r"<[^>]+>", "", text[start : text.index("</code>", start)]))
    assert 'x: Float[ArrayIn, "*n c"]' in signature and 'Float[Array, "*n c"]' in signature, signature


def test_report_pages_carry_their_figures(site):
    for page, figures in (
        ("report/collapse_hessians.md", "results/"),  # REPORT.md's sections: one page each
        ("experiments/notebooks/flow_vs_optimisers.ipynb", "figures/"),
    ):
        built = site / pathlib.Path(page).with_suffix(".html")
        text = built.read_text()
        srcs = re.findall(r'<img[^>]+src="([^"]+)"', text)
        assert any(figures in s for s in srcs), f"{built.name} shows no figure"
        for src in srcs:
            if src.startswith("data:"):
                continue
            assert (built.parent / src).resolve().exists(), f"{built.name}: broken image {src}"


def test_report_pages_link_the_run_records_they_cite(site):
    """A run copied into results/ with its RUN.md is linked from its report page's footer, and the link lands on
    the record rendered as a page (outside the nav), its title a heading."""
    runs = sorted(p.parent.name for p in (S.ROOT / "results").glob("*/RUN.md"))
    assert runs, "no stored run has a RUN.md"
    for name in runs:
        built = site / "report" / f"{name}.html"
        hrefs = re.findall(r'href="([^"]*RUN[^"]*)"', built.read_text())
        assert hrefs == [f"../results/{name}/RUN.html"], f"{built.name}: {hrefs}"
        record = (built.parent / hrefs[0]).resolve()
        title = next(
            ln[2:] for ln in (S.ROOT / "results" / name / "RUN.md").read_text().splitlines() if ln.startswith("# ")
        )
        assert record.exists() and f">{html.escape(title, quote=False)}<" in record.read_text(), f"{name}: not rendered"


def test_rendered_notebook_is_its_paired_script_with_outputs():
    """The site renders the .ipynb's stored outputs; its cells must be the jupytext script's, every code
    cell executed (``cd experiments/notebooks && PYTHONPATH=../.. jupyter nbconvert --to notebook
    --execute --inplace flow_vs_optimisers.ipynb`` after ``jupytext --update --to ipynb`` of the script)."""
    jupytext = pytest.importorskip("jupytext")
    nb_dir = ROOT / "experiments" / "notebooks"
    script = jupytext.read(nb_dir / "flow_vs_optimisers.py")
    stored = jupytext.read(nb_dir / "flow_vs_optimisers.ipynb")
    cells = lambda nb: [(c.cell_type, c.source.strip()) for c in nb.cells]
    assert cells(stored) == cells(script), "flow_vs_optimisers.ipynb differs from its paired script"
    code = [c for c in stored.cells if c.cell_type == "code"]
    assert all(c.get("execution_count") for c in code), "a code cell of the stored notebook was not executed"
    assert sum(bool(c.get("outputs")) for c in code) >= 4, "the stored notebook shows no outputs"
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]


# ----------------------------------------------------------------------------- README


# README's table of claim-level verdicts is REPORT's (tests/test_report_md.py checks it).


def test_readme_fits_one_screen_and_links_the_site():
    text = README.read_text()
    assert len(text.splitlines()) <= README_MAX_LINES
    assert "mkdocs serve" in text
    assert "python -m experiments.reproduce" in text and 'python -m pytest -n 2 -q -m "not slow"' in text


def test_readme_theorem_example_is_the_howto_page_example():
    readme = [s for s in S.snippets(README) if s.language == "python"]
    page = [s for s in S.snippets(ROOT / "docs" / "howto" / "theorem.md") if s.language == "python"]
    assert len(readme) == 1, "README.md has one python example, followed by its Output block"
    assert (readme[0].code, readme[0].output) == (page[0].code, page[0].output), (
        "README's theorem example must be the first example of docs/howto/theorem.md (which the tests run)"
    )
