"""The built site in a real browser: headless Chromium loads three pages and finds them whole.

The site is built (``mkdocs build --strict``) into a temporary directory and served on
127.0.0.1 by a thread of this process. Debian's ``chromium`` with ``chromium-driver`` (``.ci/run``
installs both when missing) is driven through selenium and loads the index, a how-to page and an
API page. Each must have at least one formula typeset by MathJax (served from the site itself, so
nothing comes from the network) and no MathJax error, every image loaded, and no error on the
browser console. A screenshot of each is kept in a fresh temporary directory (never the
repository), and the paths are printed. The theory, REPORT, an experiment page of the report,
BENCHMARKS and the notebook are loaded too: every figure loads, every formula typesets, and the
console stays clean.

Tables as laid out (:data:`_TABLES_JS`, on every page with tables: REPORT, each experiment page,
BENCHMARKS, the API pages): no table's visible box reaches past the text column (a wide table
scrolls sideways inside its own box), and the claim-level table of the REPORT page (the table whose
header is ``experiments.report_claims.CLAIM_COLUMNS``) fits the column without scrolling. The
REPORT page, the Thm 4.1 experiment page, an API page and the accelerator how-to are screenshot
too, at 1280 px.
"""

from __future__ import annotations

import functools
import http.server
import pathlib
import shutil
import tempfile
import threading

import docs_snippets as S
import pytest

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
PAGES = ("index.html", "howto/theorem.html", "api/geometry.html")
#: Pages with figures (and the theory's formulas), checked the same way without screenshots.
REPORT_PAGES = (
    "theory.html",
    "REPORT.html",
    "report/collapse_hessians.html",
    "BENCHMARKS.html",
    "experiments/notebooks/flow_vs_optimisers.html",
)
#: Pages whose screenshots a reader's check looks at (issue 33), kept with the others.
SHOT_PAGES = ("REPORT.html", "report/collapse_hessians.html", "api/geometry.html", "howto/accelerator.html")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,1600",
)

_MATHJAX_DONE = """
const done = arguments[arguments.length - 1];
const ready = () => window.MathJax && MathJax.startup && MathJax.startup.promise;
const wait = (n) => ready() ? MathJax.startup.promise.then(() => done(true), (e) => done(String(e)))
                            : (n > 0 ? setTimeout(() => wait(n - 1), 100) : done("MathJax never started"));
wait(100);
"""
#: Every table of the page's text column as laid out: ``{"column": [left, right], "tables": [...]}``, each table
#: with its header cells, the part a reader sees (the table clipped by every box around it that clips or scrolls
#: sideways), its full width, and whether one of those boxes has more to scroll to. The column is ``.md-content`` (between the
#: navigation and the table of contents; Material lets a table's scroll box reach into its margins). Material's
#: script wraps each table in its scroll box after the page loads, so the layout is read once every table is
#: wrapped (or after 5 s).
_TABLES_JS = """
const done = arguments[arguments.length - 1];
const wrapped = () => document.querySelectorAll('.md-content table').length
                      === document.querySelectorAll('.md-content .md-typeset__scrollwrap table').length;
const measure = () => {
const col = document.querySelector('.md-content');
const c = col.getBoundingClientRect();
const clips = (el) => ['auto', 'scroll', 'hidden', 'clip'].includes(getComputedStyle(el).overflowX);
const tables = Array.from(col.querySelectorAll('table')).map((t) => {
  // what a reader sees: the table clipped by every box between it and the column that clips or scrolls it
  let b = t.getBoundingClientRect(), left = b.left, right = b.right, scrolls = false;
  for (let a = t; a && a !== col; a = a.parentElement) {
    if (!clips(a)) continue;
    const r = a.getBoundingClientRect();
    left = Math.max(left, r.left); right = Math.min(right, r.right);
    scrolls = scrolls || a.scrollWidth > a.clientWidth + 1;
  }
  return {header: Array.from(t.querySelectorAll('thead th')).map((h) => h.textContent.trim()),
          left: left, right: right, width: b.width, scrolls: scrolls};
});
return {column: [c.left, c.right], tables: tables};
};
const wait = (n) => (wrapped() || n <= 0) ? done(measure()) : setTimeout(() => wait(n - 1), 100);
wait(50);
"""


def table_problems(layout: dict, claim_columns: tuple[str, ...]) -> list[str]:
    """What a reader would see wrong with the tables of one page (:data:`_TABLES_JS`'s ``layout``): a table
    whose visible box reaches past the column, and a claim-level table (header ``claim_columns``) that needs
    scrolling sideways."""
    left, right = layout["column"]
    out = []
    for i, t in enumerate(layout["tables"]):
        name = f"table {i} ({' | '.join(t['header'][:3])} ...)"
        if t["left"] < left - 1 or t["right"] > right + 1:
            out.append(
                f"{name}: its box [{t['left']:.0f}, {t['right']:.0f}] px reaches past the column "
                f"[{left:.0f}, {right:.0f}]"
            )
        if tuple(t["header"]) == tuple(claim_columns) and t["scrolls"]:
            out.append(
                f"{name}: the claim-level table is {t['width']:.0f} px wide and scrolls; it must fit the "
                f"column ({right - left:.0f} px)"
            )
    return out


_BROKEN_IMAGES = "return Array.from(document.images).filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src);"


class _Served(str):
    """The served site's base URL (a ``str``), with the directory it serves as ``site_dir``."""

    def __new__(cls, url: str, site_dir):
        obj = super().__new__(cls, url)
        obj.site_dir = str(site_dir)
        return obj


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    site = S.build_site(tmp_path_factory.mktemp("site"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield _Served(f"http://127.0.0.1:{server.server_address[1]}", site)
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def browser():
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is in the test extra")
    from selenium.webdriver.chrome.service import Service

    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not pathlib.Path(p).exists()]
    assert not missing, f"{missing} not installed: apt-get install chromium chromium-driver (.ci/run does)"
    profile = tempfile.mkdtemp(prefix="ssl_geometry_chromium_")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_script_timeout(60)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def shots():
    return pathlib.Path(tempfile.mkdtemp(prefix="ssl_geometry_site_screenshots_"))


def _load(browser, url):
    """Load ``url``; ``(typeset, formulas, formula errors, broken images, console errors)``."""
    browser.get(url)
    typeset = browser.execute_async_script(_MATHJAX_DONE)
    formulas = browser.execute_script("return document.querySelectorAll('mjx-container').length;")
    errors = browser.execute_script("return document.querySelectorAll('mjx-merror, merror').length;")
    broken = browser.execute_script(_BROKEN_IMAGES)
    console = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
    return typeset, formulas, errors, broken, console


@pytest.mark.parametrize("page", PAGES)
def test_page_renders_formulas_and_images_without_console_errors(served, browser, shots, page, capsys):
    typeset, formulas, errors, broken, console = _load(browser, f"{served}/{page}")
    shot = shots / (page.replace("/", "_").replace(".html", "") + ".png")
    browser.save_screenshot(str(shot))
    with capsys.disabled():
        print(f"\nscreenshot of {page}: {shot}")
    assert typeset is True, f"{page}: MathJax did not finish: {typeset}"
    assert formulas > 0, f"{page}: no formula was rendered"
    assert errors == 0, f"{page}: {errors} formulas failed to typeset"
    assert not broken, f"{page}: broken images {broken}"
    assert not console, f"{page}: console errors {console}"
    assert shot.stat().st_size > 10_000


@pytest.mark.parametrize("page", REPORT_PAGES)
def test_report_pages_load_their_figures_without_console_errors(served, browser, page):
    typeset, _, errors, broken, console = _load(browser, f"{served}/{page}")
    images = browser.execute_script("return document.images.length;")
    assert typeset is True and errors == 0, f"{page}: MathJax: {typeset}, {errors} errors"
    assert images > 0 or page in ("theory.html", "REPORT.html"), f"{page}: no figure"  # REPORT's are on its pages
    assert not broken, f"{page}: broken images {broken}"
    assert not console, f"{page}: console errors {console}"


def test_table_rule_on_hand_made_layouts():
    cols = ("claim", "verdict")
    fits = {
        "column": [0, 800],
        "tables": [{"header": ["claim", "verdict"], "left": 10, "right": 790, "width": 700, "scrolls": False}],
    }
    assert table_problems(fits, cols) == []
    # a wide data table scrolling inside its own box is fine; the claim-level table scrolling is not
    scrolls = {
        "column": [0, 800],
        "tables": [{"header": ["rep", "x"], "left": 10, "right": 790, "width": 1500, "scrolls": True}],
    }
    assert table_problems(scrolls, cols) == []
    claim = {"column": [0, 800], "tables": [{**scrolls["tables"][0], "header": ["claim", "verdict"]}]}
    assert [p.split(": ")[1][:24] for p in table_problems(claim, cols)] == ["the claim-level table is"]
    # a table drawn past the column (no scroll box)
    past = {
        "column": [0, 800],
        "tables": [{"header": ["a"], "left": 10, "right": 1200, "width": 1190, "scrolls": False}],
    }
    assert "reaches past the column" in table_problems(past, cols)[0]


def _table_pages(site_dir: pathlib.Path) -> list[str]:
    pages = ["REPORT.html", "BENCHMARKS.html", "api/geometry.html", "api/curvature.html"]
    return pages + sorted(p.relative_to(site_dir).as_posix() for p in (site_dir / "report").glob("*.html"))


def test_tables_stay_inside_the_text_column(served, browser, shots, capsys):
    from experiments.report_claims import CLAIM_COLUMNS

    site_dir = pathlib.Path(served.site_dir)
    assert (site_dir / "report" / "collapse_hessians.html").exists(), "no experiment pages were generated"
    found = []
    for page in _table_pages(site_dir):
        browser.get(f"{served}/{page}")
        browser.execute_async_script(_MATHJAX_DONE)
        layout = browser.execute_async_script(_TABLES_JS)
        if page == "REPORT.html":
            assert any(tuple(t["header"]) == CLAIM_COLUMNS for t in layout["tables"]), "REPORT has no claim table"
        found += [f"{page}: {p}" for p in table_problems(layout, CLAIM_COLUMNS)]
        if page in SHOT_PAGES:
            shot = shots / (page.replace("/", "_").replace(".html", "") + ".png")
            browser.save_screenshot(str(shot))
            with capsys.disabled():
                print(f"\nscreenshot of {page}: {shot}")
    for page in SHOT_PAGES:
        if page not in _table_pages(site_dir):
            browser.get(f"{served}/{page}")
            shot = shots / (page.replace("/", "_").replace(".html", "") + ".png")
            browser.save_screenshot(str(shot))
            with capsys.disabled():
                print(f"\nscreenshot of {page}: {shot}")
    assert not found, f"{len(found)} tables a reader sees wrong:\n" + "\n".join(found)
