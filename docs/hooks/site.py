"""MkDocs hook: put the repository's report pages into the site and serve MathJax from the build.

* BENCHMARKS.md (repository root), the figures under ``results/``, and the flow-vs-optimisers
  notebook with its figures (``experiments/notebooks/``) join the site at their repository paths,
  so the relative links written for the repository work unchanged (``use_directory_urls: false``).
* REPORT.md stays one file in the repository (it renders on GitHub); the site shows it as one
  page per experiment: :func:`experiments.report_md.split_report` cuts it, ``REPORT.html`` keeps
  the header, the summary and the claim-level table (its *experiments* linked to their pages,
  inside a ``div.claim-table`` the stylesheet fits to the text column) and lists the experiment
  pages, and ``report/<name>.html`` holds each experiment's section, its figures captioned
  (``<figure>``/``<figcaption>``, numbered per page). The pages join the nav under "Experiments",
  right after REPORT. Generated pages have no edit link: the report is regenerated, not edited.
  ``SSL_GEOMETRY_SITE_REPORT=<file>`` builds them from another rendering of the report (a preview;
  its links relative to the repository root, as :func:`experiments.report_md.render` writes them
  for ``REPORT.md``).
* Links in those pages that point into ``docs/`` are rewritten relative to the site root (the
  site's root *is* ``docs/``), and in-page links written with a plain lower-case-and-dashes slug
  are pointed at the heading ids the site gives those headings.
* An attribute documented in its class's ``Attributes:`` table has no entry of its own
  (``docs/hooks/griffe_attributes.py``), so its table row gets the attribute's identifier as its
  ``id`` and is registered with autorefs: a cross-reference to ``Class.field`` lands on the row.
* MathJax 3 (the ``django-static-mathjax`` wheel of the ``docs`` extra, which ships MathJax's own
  ``es5`` build) is copied into the built site, so formulas render without a network.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import sys

from markdown.extensions.toc import slugify
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, InclusionLevel

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = ("REPORT.md", "BENCHMARKS.md")
REPORT = "REPORT.md"
#: Where the experiment pages go (``report/<results directory name>.md``).
PART_DIR = "report"
#: The nav title of the experiment pages' section.
PARTS_NAV = "Experiments"
NOTEBOOK_DIR = "experiments/notebooks"
MATHJAX_DEST = "javascripts/mathjax"


def _run_records():
    """The ``RUN.md`` of each run copied into ``results/`` (how it was made), linked from its report page's footer;
    they join the site outside the nav (``results/history/`` is not read, as by the report)."""
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "results").glob("*/RUN.md"))


def _repo_files():
    """Repository paths (relative to the root) that join the site."""
    paths = [p for p in PAGES if p != REPORT and (ROOT / p).exists()]
    paths += sorted(str(p.relative_to(ROOT)) for p in (ROOT / "results").rglob("*.png"))
    paths += sorted(str(p.relative_to(ROOT)) for p in (ROOT / NOTEBOOK_DIR).glob("*.ipynb"))
    paths += sorted(str(p.relative_to(ROOT)) for p in (ROOT / NOTEBOOK_DIR / "figures").glob("*.png"))
    return paths


_IMAGE_LINE = re.compile(r"^!\[([^\]]*)\]\(([^)\s]+)\)\s*$")
_LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s]+)(\))")


def _relink(text: str, depth: int) -> str:
    """``text`` (written relative to the repository root) with every relative link made relative to a page
    ``depth`` directories below the site root; links into ``docs/`` point into the site root."""
    up = "../" * depth

    def fix(m: re.Match) -> str:
        target = m.group(2)
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith(("#", "/")):
            return m.group(0)
        target = target[len("docs/") :] if target.startswith("docs/") else target
        return f"{m.group(1)}{up}{target}{m.group(3)}"

    return _LINK.sub(fix, text)


def captioned_figures(text: str) -> str:
    """Each figure that stands on its own line (``![alt](src)``) as a ``<figure>`` whose caption is
    "Figure N." and its alt text as written (a symbol such as ``lambda_min`` keeps its case), numbered
    in page order."""
    out, n = [], 0
    for line in text.split("\n"):
        m = _IMAGE_LINE.match(line)
        if not m:
            out.append(line)
            continue
        n += 1
        alt = m.group(1).strip()
        caption = f"Figure {n}." + (f" {alt}" if alt else "") + ("." if alt and not alt.endswith(".") else "")
        out += [
            "",
            '<figure markdown="span">',
            f"![{alt}]({m.group(2)})",
            f"<figcaption>{caption}</figcaption>",
            "</figure>",
            "",
        ]
    return "\n".join(out)


def _importable_root() -> None:
    """The repository root on ``sys.path``: the report layer (``experiments/``) cuts REPORT.md into pages."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


def _linked_experiments(head: str, names: set[str]) -> str:
    """The claim-level table of ``head`` with each name in its *experiments* column linked to the experiment's
    page, wrapped in ``<div class="claim-table">`` (extra.css fits it to the text column)."""
    _importable_root()
    from experiments.report_claims import CLAIM_COLUMNS, REPORT_TABLE_HEADING

    col = CLAIM_COLUMNS.index("experiments") + 1  # cell index after the leading "|"
    lines, out, in_table = head.split("\n"), [], False
    seen_heading = False
    for line in lines:
        seen_heading |= line.strip() == REPORT_TABLE_HEADING
        if seen_heading and line.startswith("|") and not in_table:
            in_table = True
            out += ['<div class="claim-table" markdown="1">', ""]
        elif in_table and not line.startswith("|"):
            in_table, seen_heading = False, False
            out += ["", "</div>"]
        if in_table and not re.match(r"\|\s*-", line):
            cells = re.split(r"(?<!\\)\|", line)
            if len(cells) > col and cells[col].strip() != "experiments":
                cells[col] = (
                    " "
                    + ", ".join(
                        f"[{x}]({PART_DIR}/{x}.md)" if x in names else x
                        for x in (c.strip() for c in cells[col].split(","))
                    )
                    + " "
                )
                line = "|".join(cells)
        out.append(line)
    if in_table:
        out += ["", "</div>"]
    return "\n".join(out)


def report_pages(text: str) -> dict[str, tuple[str, str]]:
    """``{site path: (nav title, markdown)}`` of REPORT.md's site pages (module docstring)."""
    _importable_root()
    from experiments.report_md import split_report

    head, parts = split_report(text)
    names = {p.name for p in parts}
    listing = [f"- [{p.title}]({PART_DIR}/{p.name}.md)" for p in parts]
    pages = {
        REPORT: (
            "REPORT",
            _linked_experiments(head, names) + "\n## Experiments\n\nEach experiment's records, "
            "the rules they applied, its tables and its figures are on its own page:\n\n" + "\n".join(listing) + "\n",
        )
    }
    for p in parts:
        back = (
            f"*One experiment of the [REPORT](../{REPORT}) (its summary and claim-level table), "
            f"results in `{p.name}/results.json`.*\n\n"
        )
        pages[f"{PART_DIR}/{p.name}.md"] = (p.title, f"# {p.title}\n\n{back}{captioned_figures(_relink(p.text, 1))}")
    return pages


_PAGES_CACHE: dict[str, tuple[str, str]] = {}


def _nav_with_parts(nav, parts: list[dict]):
    """``nav`` (mkdocs.yml's list) with ``{PARTS_NAV: parts}`` inserted right after the entry of REPORT.md."""
    out = []
    for item in nav:
        if isinstance(item, dict):
            item = {k: _nav_with_parts(v, parts) if isinstance(v, list) else v for k, v in item.items()}
        out.append(item)
        if item == REPORT or (isinstance(item, dict) and REPORT in item.values()):
            out.append({PARTS_NAV: parts})
    return out


def on_config(config):
    """REPORT.md cut into pages, their nav entries; no edit link without a repository to edit in
    (mkdocs.yml: ``repo_url`` comes from the environment)."""
    if not config.repo_url:
        config.edit_uri = None
    _PAGES_CACHE.clear()
    # a preview of a report rendered elsewhere (links written relative to the repository root, as REPORT.md's)
    source = pathlib.Path(os.environ.get("SSL_GEOMETRY_SITE_REPORT") or ROOT / REPORT)
    if source.exists():
        _PAGES_CACHE.update(report_pages(source.read_text()))
        parts = [{title: path} for path, (title, _) in _PAGES_CACHE.items() if path != REPORT]
        if config.nav:
            config.nav = _nav_with_parts(config.nav, parts)
    return config


@event_priority(100)  # before mkdocs-jupyter turns the notebook into a page
def on_files(files, config):
    listed = [(rel, InclusionLevel.UNDEFINED) for rel in _repo_files()]
    for rel, inclusion in listed + [(rel, InclusionLevel.NOT_IN_NAV) for rel in _run_records()]:
        if files.get_file_from_path(rel) is None:
            files.append(File(rel, str(ROOT), config["site_dir"], config["use_directory_urls"], inclusion=inclusion))
    for rel, (_, text) in _PAGES_CACHE.items():
        if files.get_file_from_path(rel) is None:
            files.append(File.generated(config, rel, content=text))
    return files


_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)
_FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def _plain_slug(title: str) -> str:
    """The slug ``experiments/assemble_benchmarks.py`` writes: lower case, spaces to dashes."""
    return title.lower().replace(" ", "-")


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri not in PAGES and page.file.src_uri not in _PAGES_CACHE:
        return markdown
    page.edit_url = None  # generated from the stored results: rerun the report, never edit the page
    markdown = markdown.replace("](docs/", "](")
    headings = _HEADING.findall(_FENCE.sub("", markdown))
    for title in headings:
        plain, real = _plain_slug(title), slugify(title, "-")
        if plain != real:
            markdown = markdown.replace(f"](#{plain})", f"](#{real})")
    return markdown


_TABLE_ROW = re.compile(r'<tr class="doc-section-item">(\s*<td><code><autoref identifier="(ssl_geometry\.[^"]+)")')


def on_page_content(html, page, config, files):
    """Anchor each attribute-table row whose attribute has no entry of its own (module docstring)."""
    if not page.file.src_uri.startswith("api/"):
        return html
    ids = set(re.findall(r'\sid="([^"]+)"', html))
    autorefs = config.plugins["autorefs"]

    def anchor(m: re.Match) -> str:
        ident = m.group(2)
        if ident in ids:
            return m.group(0)
        ids.add(ident)
        autorefs.register_anchor(page, ident, primary=True)
        return f'<tr class="doc-section-item" id="{ident}">{m.group(1)}'

    return _TABLE_ROW.sub(anchor, html)


def on_post_build(config):
    import mathjax

    src = pathlib.Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
    if not (src / "tex-chtml.js").exists():
        raise RuntimeError(f"MathJax's es5 build is not at {src}; reinstall the docs extra (pip install -e '.[docs]').")
    dest = pathlib.Path(config["site_dir"]) / MATHJAX_DEST
    shutil.copytree(
        src, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*-full*", "*svg*", "*mml-*", "node-main.js")
    )
