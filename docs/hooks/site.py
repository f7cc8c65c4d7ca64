"""MkDocs hook: put the repository's report pages into the site and serve MathJax from the build.

* REPORT.md and BENCHMARKS.md (repository root), the figures under ``results/``, and the
  flow-vs-optimisers notebook with its figures (``experiments/notebooks/``) join the site at their
  repository paths, so the relative links written for the repository work unchanged
  (``use_directory_urls: false`` in mkdocs.yml).
* Links in those pages that point into ``docs/`` are rewritten relative to the site root (the
  site's root *is* ``docs/``), and in-page links written with a plain lower-case-and-dashes slug
  are pointed at the heading ids the site gives those headings.
* MathJax 3 (the ``django-static-mathjax`` wheel of the ``docs`` extra, which ships MathJax's own
  ``es5`` build) is copied into the built site, so formulas render without a network.
"""
from __future__ import annotations

import pathlib
import re
import shutil

from markdown.extensions.toc import slugify
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = ("REPORT.md", "BENCHMARKS.md")
NOTEBOOK_DIR = "experiments/notebooks"
MATHJAX_DEST = "javascripts/mathjax"


def _repo_files():
    """Repository paths (relative to the root) that join the site."""
    paths = [p for p in PAGES if (ROOT / p).exists()]
    paths += sorted(str(p.relative_to(ROOT)) for p in (ROOT / "results").rglob("*.png"))
    paths += sorted(str(p.relative_to(ROOT)) for p in (ROOT / NOTEBOOK_DIR).glob("*.ipynb"))
    paths += sorted(str(p.relative_to(ROOT)) for p in (ROOT / NOTEBOOK_DIR / "figures").glob("*.png"))
    return paths


@event_priority(100)  # before mkdocs-jupyter turns the notebook into a page
def on_files(files, config):
    for rel in _repo_files():
        if files.get_file_from_path(rel) is None:
            files.append(File(rel, str(ROOT), config["site_dir"], config["use_directory_urls"]))
    return files


_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)
_FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def _plain_slug(title: str) -> str:
    """The slug ``experiments/assemble_benchmarks.py`` writes: lower case, spaces to dashes."""
    return title.lower().replace(" ", "-")


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri not in PAGES:
        return markdown
    markdown = markdown.replace("](docs/", "](")
    headings = _HEADING.findall(_FENCE.sub("", markdown))
    for title in headings:
        plain, real = _plain_slug(title), slugify(title, "-")
        if plain != real:
            markdown = markdown.replace(f"](#{plain})", f"](#{real})")
    return markdown


def on_post_build(config):
    import mathjax  # noqa: PLC0415  (the django-static-mathjax wheel: MathJax's es5 build as data)

    src = pathlib.Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
    if not (src / "tex-chtml.js").exists():
        raise RuntimeError(f"MathJax's es5 build is not at {src}; reinstall the docs extra "
                           "(pip install -e '.[docs]').")
    dest = pathlib.Path(config["site_dir"]) / MATHJAX_DEST
    shutil.copytree(src, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*-full*", "*svg*", "*mml-*", "node-main.js"))
