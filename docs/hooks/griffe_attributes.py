"""Griffe extension: every attribute of the API reference documented once.

mkdocstrings shows a class's ``Attributes:`` docstring section as a table (name, type, description)
and, with ``show_if_no_docstring``, every field of the class again as a bare entry with no text.
This extension, run on the ``ssl_geometry`` package after :mod:`griffe_roles`:

* renders no entry for a class's attribute members that its own ``Attributes:`` section names (an
  entry ``a, b: ...`` names both): the table is where they are documented. The members stay in
  griffe's tree (a dataclass's signature is built from them); each gets the template
  ``attribute_in_table.html.jinja`` (``docs/hooks/templates/``, which renders nothing) through
  ``extra["mkdocstrings"]["template"]``. ``docs/hooks/site.py`` gives the table row the member's identifier as an anchor, so
  a cross-reference to ``Class.field`` still lands on it;
* gives an attribute without a docstring the Sphinx-style ``#:`` comment lines right above its
  assignment as its docstring (``#: The conclusions ...`` above ``CONCLUSIONS = ...``), which
  griffe does not read by itself, so the module's summary table and its entry carry a description.

Attributes of a class with no ``Attributes:`` section, and every function, class and module, are
left as they are.
"""

from __future__ import annotations

import griffe

logger = griffe.get_logger("griffe_attributes")

#: The template (docs/hooks/templates/python/material/) of an attribute documented by its class's table.
IN_TABLE_TEMPLATE = "attribute_in_table.html.jinja"


def comment_docstring(lines: list[str], lineno: int) -> str | None:
    """The text of the ``#:`` comment lines directly above line ``lineno`` (1-based) of ``lines``, joined
    by newlines with the ``#:`` and one following space removed; ``None`` where the line above is not one."""
    out: list[str] = []
    i = lineno - 2
    while i >= 0 and lines[i].lstrip().startswith("#:"):
        text = lines[i].lstrip()[2:]
        out.append(text[1:] if text.startswith(" ") else text)
        i -= 1
    return "\n".join(reversed(out)) or None


def table_names(obj: griffe.Object) -> set[str]:
    """The names an object's ``Attributes:`` docstring sections document (``a, b: ...`` names ``a`` and ``b``)."""
    if obj.docstring is None:
        return set()
    names: set[str] = set()
    for section in obj.docstring.parse("google", warn_unknown_params=False, warn_missing_types=False):
        if section.kind is griffe.DocstringSectionKind.attributes:
            for attr in section.value:
                # griffe reads "a, b: ..." as the attribute "a," of type "b": both are names
                text = f"{attr.name} {attr.annotation}" if attr.name.endswith(",") and attr.annotation else attr.name
                names |= {n.strip() for n in str(text).split(",") if n.strip()}
    return names


def _objects(obj: griffe.Object):
    """``obj`` and every module and class under it (not aliases: a re-export is handled where it is defined)."""
    yield obj
    for member in obj.members.values():
        if not member.is_alias and (member.is_module or member.is_class):
            yield from _objects(member)


class AttributesOnce(griffe.Extension):
    """See the module docstring."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs) -> None:
        if pkg.path != "ssl_geometry":
            return
        for owner in _objects(pkg):
            for name, member in list(owner.members.items()):
                if member.is_alias or not member.is_attribute or member.docstring is not None:
                    continue
                source = (
                    member.lines_collection[member.filepath] if member.filepath in member.lines_collection else None
                )
                text = comment_docstring(source, member.lineno) if source and member.lineno else None
                if text:
                    member.docstring = griffe.Docstring(text, lineno=member.lineno - 1, parent=member)
            if not owner.is_class:
                continue
            documented = table_names(owner)
            for name in sorted(documented):
                member = owner.members.get(name)
                if member is not None and not member.is_alias and member.is_attribute:
                    member.extra["mkdocstrings"]["template"] = IN_TABLE_TEMPLATE
