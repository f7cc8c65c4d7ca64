"""The built site in a real browser: headless Chromium loads three pages and finds them whole.

The site is built (``mkdocs build --strict``) into a temporary directory and served on
127.0.0.1 by a thread of this process. Debian's ``chromium`` with ``chromium-driver`` (``.ci/run``
installs both when missing) is driven through selenium and loads the index, a how-to page and an
API page. Each must have at least one formula typeset by MathJax (served from the site itself, so
nothing comes from the network) and no MathJax error, every image loaded, and no error on the
browser console. A screenshot of each is kept in a fresh temporary directory (never the
repository), and the paths are printed. The theory, REPORT, BENCHMARKS and the notebook are loaded
too: every figure loads, every formula typesets, and the console stays clean.
"""
from __future__ import annotations

import functools
import http.server
import pathlib
import shutil
import tempfile
import threading

import pytest

import docs_snippets as S

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
PAGES = ("index.html", "howto/theorem.html", "api/geometry.html")
#: Pages with figures (and the theory's formulas), checked the same way without screenshots.
REPORT_PAGES = ("theory.html", "REPORT.html", "BENCHMARKS.html", "experiments/notebooks/flow_vs_optimisers.html")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1280,1600")

_MATHJAX_DONE = """
const done = arguments[arguments.length - 1];
const ready = () => window.MathJax && MathJax.startup && MathJax.startup.promise;
const wait = (n) => ready() ? MathJax.startup.promise.then(() => done(true), (e) => done(String(e)))
                            : (n > 0 ? setTimeout(() => wait(n - 1), 100) : done("MathJax never started"));
wait(100);
"""
_BROKEN_IMAGES = "return Array.from(document.images).filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src);"


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
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def browser():
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is in the test extra")
    from selenium.webdriver.chrome.service import Service  # noqa: PLC0415

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
    assert images > 0 or page == "theory.html", f"{page}: no figure"
    assert not broken, f"{page}: broken images {broken}"
    assert not console, f"{page}: console errors {console}"
