"""docs/theory.md follows the registry and the library, and the repository cites nothing outside it.

* every claim of :data:`experiments.claims.CLAIMS` has a section ``### <id>: ...`` in docs/theory.md,
  and every such section is a registered claim;
* each claim section states the registry's scales and experiments, and names only its own thresholds;
* every ``ssl_geometry.<namespace>.<name>`` the page names in backticks exists at that public path;
* every in-page link ``(#anchor)`` resolves to a heading, and every citation ``docs/theory.md, section
  "..."`` anywhere in the repository names a heading of the page;
* no tracked file mentions the outside design document's file name.
"""

import importlib
import pathlib
import re
import subprocess
import unicodedata

import pytest

import ssl_geometry
from experiments import claims

ROOT = pathlib.Path(__file__).resolve().parents[1]
THEORY = ROOT / "docs" / "theory.md"
#: Built from pieces so that this file does not contain the name it forbids.
OUTSIDE_DOCUMENT = "DES" + "IGN" + ".md"
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _lines():
    return THEORY.read_text().splitlines()


def _headings():
    """``[(level, text, line index)]`` of the page's headings (outside fenced code)."""
    out, fenced = [], False
    for i, line in enumerate(_lines()):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        m = None if fenced else _HEADING.match(line)
        if m:
            out.append((len(m.group(1)), m.group(2), i))
    return out


def _claim_sections() -> dict[str, str]:
    """``{claim id: section text}`` for the ``### <id>: ...`` headings under ``## The claims``."""
    lines, heads = _lines(), _headings()
    start = next((i for lvl, text, i in heads if lvl == 2 and text == "The claims"), None)
    assert start is not None, "docs/theory.md has no '## The claims' section"
    end = next((i for lvl, _, i in heads if lvl <= 2 and i > start), len(lines))
    inner = [(lvl, text, i) for lvl, text, i in heads if start < i < end and lvl == 3]
    sections = {}
    for j, (_, text, i) in enumerate(inner):
        stop = inner[j + 1][2] if j + 1 < len(inner) else end
        cid = text.split(":", 1)[0].strip()
        assert cid not in sections, f"claim {cid!r} has two sections in docs/theory.md"
        sections[cid] = "\n".join(lines[i + 1 : stop])
    return sections


def _slug(text: str) -> str:
    """The anchor Python-Markdown's ``toc`` extension (mkdocs' default) gives a heading."""
    text = re.sub(r"`([^`]*)`", r"\1", text)
    value = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    value = re.sub(r"[^\w\s-]", "", value).strip().lower()
    return re.sub(r"[-\s]+", "-", value)


def _tracked_text_files():
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files cannot be listed")
    for rel in out.decode().split("\0"):
        path = ROOT / rel
        if not rel or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue  # binary
        yield rel, data.decode("utf-8", errors="replace")


def test_every_registered_claim_has_a_section_and_every_section_is_registered():
    sections = _claim_sections()
    missing = sorted(set(claims.CLAIMS) - set(sections))
    unknown = sorted(set(sections) - set(claims.CLAIMS))
    assert not missing, f"claims without a '### <id>: ...' section in docs/theory.md: {missing}"
    assert not unknown, f"docs/theory.md has claim sections the registry does not hold: {unknown}"


def _field(section: str, name: str, cid: str) -> str:
    m = re.search(rf"^\*{re.escape(name)}:\*\s*(.+)$", section, re.M)
    assert m, f"the section of {cid!r} in docs/theory.md has no '*{name}:*' line"
    return m.group(1)


@pytest.mark.parametrize("cid", sorted(claims.CLAIMS))
def test_claim_section_states_the_registry_scales_and_experiments(cid):
    section = _claim_sections().get(cid)
    if section is None:
        pytest.fail(f"no section for {cid!r} (see the test above)")
    c = claims.CLAIMS[cid]
    scales = tuple(s.strip() for s in _field(section, "Scales", cid).split(","))
    assert scales == c.scales, f"{cid}: docs/theory.md says scales {scales}, the registry {c.scales}"
    experiments = tuple(re.findall(r"`([^`]+)`", _field(section, "Decided in", cid)))
    assert experiments == c.experiments, (
        f"{cid}: docs/theory.md says decided in {experiments}, the registry {c.experiments}"
    )


@pytest.mark.parametrize("cid", sorted(claims.CLAIMS))
def test_claim_section_names_only_its_own_thresholds(cid):
    section = _claim_sections().get(cid)
    if section is None:
        pytest.fail(f"no section for {cid!r}")
    every_key = {k for c in claims.CLAIMS.values() for k in c.thresholds}
    named = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", section)) & every_key
    foreign = sorted(named - set(claims.CLAIMS[cid].thresholds))
    assert not foreign, f"the section of {cid!r} names thresholds of other claims: {foreign}"


def _public(path: str):
    """The object at a public path ``ssl_geometry[.namespace[.name]]``, or an error message."""
    parts = path.split(".")
    if any(p.startswith("_") for p in parts):
        return None, f"{path}: not a public path"
    if len(parts) == 1:
        return ssl_geometry, None
    if parts[1] in ssl_geometry.NAMESPACES:
        mod = importlib.import_module(f"ssl_geometry.{parts[1]}")
        if len(parts) == 2:
            return mod, None
        if len(parts) == 3 and parts[2] in mod.__all__:
            return getattr(mod, parts[2]), None
        return None, f"{path}: ssl_geometry.{parts[1]}.__all__ has no {'.'.join(parts[2:])!r}"
    if len(parts) == 2 and parts[1] in ssl_geometry.__all__:
        return getattr(ssl_geometry, parts[1]), None
    return None, f"{path}: {parts[1]!r} is not a namespace or top-level name of ssl_geometry"


def test_every_library_name_the_page_gives_exists_at_its_public_path():
    names = sorted(set(re.findall(r"`(ssl_geometry(?:\.\w+)*)`", THEORY.read_text())))
    assert len(names) > 20, "docs/theory.md names the library functions it describes"
    errors = [err for err in (_public(n)[1] for n in names) if err]
    assert not errors, "docs/theory.md names library paths that do not exist:\n" + "\n".join(errors)


def test_public_path_check_rejects_what_does_not_exist():
    assert _public("ssl_geometry.geometry.effective_hessian")[1] is None
    assert _public("ssl_geometry.geometry.no_such_function")[1]
    assert _public("ssl_geometry._src.linalg.power")[1]
    assert _public("ssl_geometry.nonexistent.x")[1]


def test_slug_matches_the_toc_extension():
    assert (
        _slug("thm4.1-smooth-unstable: smooth heads make collapsed equilibria unstable")
        == "thm41-smooth-unstable-smooth-heads-make-collapsed-equilibria-unstable"
    )
    assert _slug("The head's metric, sentence by sentence") == "the-heads-metric-sentence-by-sentence"
    pytest.importorskip("markdown")
    from markdown.extensions.toc import slugify

    for _, text, _ in _headings():
        assert _slug(text) == slugify(re.sub(r"`([^`]*)`", r"\1", text), "-"), text


def test_every_in_page_link_resolves_to_a_heading():
    slugs = [_slug(text) for _, text, _ in _headings()]
    assert len(slugs) == len(set(slugs)), "two headings of docs/theory.md have the same anchor"
    links = set(re.findall(r"\]\(#([^)\s]+)\)", THEORY.read_text()))
    broken = sorted(links - set(slugs))
    assert not broken, f"links in docs/theory.md to anchors no heading has: {broken}"


_CITATION = re.compile(r'docs/theory\.md,\s+sections?\s+("[^"]+"(?:\s*(?:,|and)\s*"[^"]+")*)')


def _cited_sections(text: str):
    for m in _CITATION.finditer(text):
        yield from re.findall(r'"([^"]+)"', m.group(1))


def _joined_literals(source: str) -> str:
    """Python source with implicitly concatenated string literals joined across lines (``'... a '`` newline
    ``'b ...'`` reads ``'... a b ...'``), as the interpreter joins them: a formatter may wrap a citation there."""
    return re.sub(r"""(["'])[ \t]*\n[ \t]*(["'])""", "", source)


def test_citation_parser_reads_one_and_several_sections():
    text = 'see docs/theory.md, section "A b" and docs/theory.md, sections "C", "D" and "E: f".'
    assert list(_cited_sections(text)) == ["A b", "C", "D", "E: f"]
    wrapped = """x = ('see docs/theory.md, section "A '\n     'b c" here')"""
    assert list(_cited_sections(_joined_literals(wrapped))) == ["A b c"]


def test_every_citation_of_the_page_names_one_of_its_headings():
    headings = [text for _, text, _ in _headings()]

    def found(name):
        return any(h == name or h.startswith(name + ":") or h.startswith(name + " ") for h in headings)

    this = pathlib.Path(__file__).resolve().relative_to(ROOT).as_posix()  # its examples are not citations
    bad = [
        f"{rel}: {name!r}"
        for rel, text in _tracked_text_files()
        if rel != this
        for name in _cited_sections(_joined_literals(text) if rel.endswith(".py") else text)
        if not found(name)
    ]
    assert not bad, "citations of docs/theory.md sections that do not exist:\n" + "\n".join(bad)


def test_no_tracked_file_mentions_the_outside_design_document():
    hits = [rel for rel, text in _tracked_text_files() if OUTSIDE_DOCUMENT in text]
    assert not hits, (
        f"files mentioning {OUTSIDE_DOCUMENT}, a document outside the repository (cite docs/theory.md instead): {hits}"
    )
