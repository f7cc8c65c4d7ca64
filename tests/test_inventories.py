"""The API pages link JAX and NumPy types to the official docs, from local object inventories.

The site builds offline, so ``mkdocs.yml`` loads ``docs/inventories/{jax,numpy}.inv`` (written by
``docs/inventories/make_inventories.py``) instead of the projects' own ``objects.inv``:

* the inventory format round-trips, and what is not an inventory is refused;
* the committed files are what the generator writes from its table (no edit left unregenerated),
  and the table refuses a name the installed packages do not have or a jaxtyping alias that is no
  longer the JAX object it stands for;
* read the way the build reads them (mkdocstrings-python's ``load_inventory``, with ``mkdocs.yml``'s
  ``base_url``), every entry's URL is on docs.jax.dev or numpy.org;
* in the built site, signatures link ``Array``/``ArrayLike`` to docs.jax.dev and ``ndarray`` to
  numpy.org, and no JAX or NumPy name in an API page is left unlinked.
"""

from __future__ import annotations

import importlib.util
import io
import pathlib
import re
import zlib

import docs_snippets as S
import pytest
import yaml
from mkdocstrings import Inventory
from mkdocstrings_handlers.python import PythonHandler

ROOT = pathlib.Path(__file__).resolve().parents[1]
INVENTORIES = ROOT / "docs" / "inventories"
OFFICIAL = {"jax.inv": "https://docs.jax.dev/en/latest/", "numpy.inv": "https://numpy.org/doc/stable/"}


def _generator():
    spec = importlib.util.spec_from_file_location("_make_inventories", INVENTORIES / "make_inventories.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


M = _generator()


def _configured() -> list[dict]:
    """The ``inventories`` entries of mkdocs.yml's python handler (mkdocs' own YAML tags read as None)."""

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=Loader)
    plugin = next(p["mkdocstrings"] for p in config["plugins"] if isinstance(p, dict) and "mkdocstrings" in p)
    return plugin["handlers"]["python"]["inventories"]


def test_inventory_format_round_trips_and_refuses_what_is_not_one():
    table = [
        ("jax.Array", "class", "_autosummary/jax.Array.html"),
        ("jax.jit", "function", "_autosummary/jax.jit.html"),
        ("jax.sharding.Mesh", "class", "jax.sharding.html#jax.sharding.Mesh"),
    ]
    data = M.format_inventory("JAX", "latest", table)
    assert data.startswith(b"# Sphinx inventory version 2\n# Project: JAX\n# Version: latest\n")
    assert M.parse_inventory(data) == [(n, f"py:{r}", u) for n, r, u in table]
    # the parser the build uses reads the same names and URIs
    parsed = Inventory.parse_sphinx(io.BytesIO(data))
    assert {k: v.uri for k, v in parsed.items()} == {n: u for n, _, u in table}
    with pytest.raises(ValueError, match="version 2"):
        M.parse_inventory(b"# Sphinx inventory version 1\n# Project: X\n# Version: 1\nx.y mod x.html\n")
    header = b"\n".join(data.split(b"\n", 4)[:4]) + b"\n"
    with pytest.raises(ValueError, match="malformed"):
        M.parse_inventory(header + zlib.compress(b"jax.jit 1 _autosummary/jax.jit.html -\n"))  # no domain:role


def test_committed_inventories_are_what_the_generator_writes():
    for project, title, version in (("jax", "JAX", "latest"), ("numpy", "NumPy", "stable")):
        want = M.format_inventory(title, version, M.entries(project))
        assert (INVENTORIES / f"{project}.inv").read_bytes() == want, (
            f"docs/inventories/{project}.inv is stale: run python docs/inventories/make_inventories.py"
        )


def test_generator_refuses_unknown_names_broken_aliases_and_projects(monkeypatch):
    with pytest.raises(ValueError, match="project must be"):
        M.entries("scipy")
    monkeypatch.setattr(M, "NUMPY", [*M.NUMPY, ("numpy.no_such_routine", "function", "x.html")])
    with pytest.raises(ValueError, match="numpy.no_such_routine does not resolve"):
        M.entries("numpy")
    monkeypatch.setattr(M, "NUMPY", [*M.NUMPY[:-1], M.NUMPY[0]])
    with pytest.raises(ValueError, match="listed twice"):
        M.entries("numpy")
    monkeypatch.setattr(M, "JAX_ALIASES", {"jaxtyping.Float": "jax.Array"})  # Float is jaxtyping's own
    with pytest.raises(ValueError, match="jaxtyping.Float is no longer jax.Array"):
        M.entries("jax")


def test_inventories_load_as_the_build_loads_them_and_point_at_the_official_docs():
    configured = _configured()
    assert sorted(pathlib.PurePosixPath(c["url"]).name for c in configured) == sorted(OFFICIAL)
    urls = {}
    for conf in configured:
        assert conf["url"].startswith("file:docs/inventories/"), conf["url"]  # offline: a committed file
        name = pathlib.PurePosixPath(conf["url"]).name
        assert conf["base_url"] == OFFICIAL[name]
        data = (ROOT / conf["url"].removeprefix("file:")).read_bytes()
        items = dict(PythonHandler.load_inventory(io.BytesIO(data), conf["url"], base_url=conf["base_url"]))
        assert len(items) == len(M.parse_inventory(data)) > 10
        for obj, url in items.items():
            assert url.startswith(OFFICIAL[name]) and re.search(r"\.html(#[\w.-]+)?$", url), (obj, url)
        urls.update(items)
    jax, numpy = OFFICIAL["jax.inv"], OFFICIAL["numpy.inv"]
    assert urls["jax.Array"] == urls["jaxtyping.Array"] == f"{jax}_autosummary/jax.Array.html"
    assert urls["jaxtyping.ArrayLike"] == f"{jax}_autosummary/jax.typing.ArrayLike.html"
    assert urls["jax.random.PRNGKey"] == f"{jax}_autosummary/jax.random.PRNGKey.html"
    for f in ("jit", "vmap", "hessian", "jvp"):
        assert urls[f"jax.{f}"] == f"{jax}_autosummary/jax.{f}.html"
    assert urls["jax.lax.stop_gradient"] == f"{jax}_autosummary/jax.lax.stop_gradient.html"
    assert urls["numpy.ndarray"] == f"{numpy}reference/generated/numpy.ndarray.html"
    assert urls["numpy.dtype"] == f"{numpy}reference/generated/numpy.dtype.html"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    M.evict_cached(M.configured_urls())  # mkdocs caches file: URLs for a day: read the committed files
    return S.build_site(tmp_path_factory.mktemp("site"))


def _link(href: str, text: str) -> re.Pattern:
    return re.compile(rf'<a class="autorefs autorefs-external"[^>]*href="{re.escape(href)}"[^>]*>{text}</a>')


def test_api_pages_link_jax_and_numpy_types_to_their_docs(site):
    api = site / "api"
    jax, numpy = OFFICIAL["jax.inv"], OFFICIAL["numpy.inv"]
    heads = (api / "heads.html").read_text()
    assert _link(f"{jax}_autosummary/jax.Array.html", "Array").search(heads)
    pages = {p.stem: p.read_text() for p in api.glob("*.html")}
    assert any(_link(f"{jax}_autosummary/jax.typing.ArrayLike.html", "ArrayLike").search(t) for t in pages.values())
    assert _link(f"{numpy}reference/generated/numpy.ndarray.html", "ndarray").search(pages["geometry"])
    # no JAX or NumPy name a page shows as a cross-reference is left without its link
    # (a parameter reference such as numpy.linspace(endpoint) has no inventory entry of its own)
    unlinked = {
        (stem, m[1])
        for stem, text in pages.items()
        for m in re.finditer(r'<span title="((?:jax|numpy)(?:\.[\w.]+)?|jaxtyping\.Array(?:Like)?)">', text)
    }
    assert not unlinked, f"add these to docs/inventories/make_inventories.py and rerun it: {sorted(unlinked)}"
