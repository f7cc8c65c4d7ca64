"""Griffe extension: the library's reST-flavoured docstrings as Markdown for mkdocstrings.

The docstrings are written to read well in a terminal (``help(...)``) and to run as doctests. Three
reST habits in them would render badly as Markdown, so the text handed to mkdocstrings is rewritten
(the source is untouched):

* Sphinx roles (``:func:`mlp```, ``:class:`~ssl_geometry.Model```, ``:mod:`ssl_geometry.heads```)
  become cross-references to the object's *public* path (``[mlp][ssl_geometry.heads.mlp]``). A name
  is looked up as written, then in the namespace that publishes the docstring's object, next to its
  implementation, in the package, and finally as the unique public name ending in it. Names of
  other packages (``equinox.error_if``) and of private modules stay code. A role in a rendered
  docstring that names an ``ssl_geometry`` object without a public path is a warning, so
  ``mkdocs build --strict`` fails on it.
* Doctest blocks (``>>>`` lines and their output) become fenced ``pycon`` blocks, wherever they
  stand (an ``Example:`` admonition, an ``Examples:`` section, after a sentence).
* reST literal blocks (a line ending in ``::`` and the indented block after it) become fenced
  blocks.

It also checks what griffe's own check cannot: an ``Args:`` entry may document several parameters
at once (``z1, z2: the two views``); every name in it must be a parameter of the function.
"""

from __future__ import annotations

import builtins
import re

import griffe

logger = griffe.get_logger("griffe_roles")

_ROLE = re.compile(r":(?:py:)?(func|class|mod|data|attr|meth|obj|exc|const):`([^`]+)`")
_EXTERNAL = (
    "equinox",
    "jax",
    "jaxtyping",
    "optax",
    "diffrax",
    "numpy",
    "np",
    "scipy",
    "orbax",
    "flax",
    "tensorflow",
    "tf",
    "tensorflow_datasets",
    "tfds",
    "sklearn",
    "torch",
    "chex",
    "safetensors",
    "tokenizers",
    "ml_collections",
    "typing",
    "collections",
    "dataclasses",
    "pathlib",
    "os",
    "sys",
)


_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    """A warning (so ``mkdocs build --strict`` fails), once per build however often griffe loads."""
    if message not in _WARNED:
        _WARNED.add(message)
        logger.warning(message)


class PublicIndex:
    """The public path of every object: namespaces, their ``__all__`` names, and class members."""

    def __init__(self, pkg: griffe.Module):
        self.pkg = pkg
        self.public: dict[str, griffe.Object] = {pkg.path: pkg}  # public path -> final object
        self.canonical: dict[str, str] = {}  # implementation path -> public path
        modules = [pkg] + [m for name, m in pkg.modules.items() if not name.startswith("_")]
        for module in modules:
            if module is not pkg:
                self.public[module.path] = module
            for name in module.exports or ():
                name = str(name)
                if name not in module.members or name.startswith("__"):
                    continue
                member = module.members[name]
                if isinstance(member, griffe.Alias) and member.target_path.startswith(pkg.path + "."):
                    try:
                        target = member.final_target
                    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
                        _warn_once(
                            f"{module.path}.{name}: the re-export of {member.target_path} does not "
                            "resolve to an object griffe can read (a tuple assignment?), so the API "
                            "reference would leave it out."
                        )
                        continue
                else:
                    target = member
                if target.is_module:
                    continue
                path = f"{module.path}.{name}"
                self.public[path] = target
                self.canonical.setdefault(target.path, path)
                if target.is_class:
                    for mname, sub in target.members.items():
                        if not mname.startswith("_"):
                            self.public[f"{path}.{mname}"] = sub
                            self.canonical.setdefault(f"{target.path}.{mname}", f"{path}.{mname}")
        self.by_last: dict[str, list[str]] = {}
        for path in self.public:
            self.by_last.setdefault(path.rsplit(".", 1)[-1], []).append(path)

    def resolve(self, name: str, context: str | None, impl_module: str | None) -> str | None:
        """The public path ``name`` refers to in a docstring published at ``context``."""
        root = self.pkg.path
        candidates = [name, self.canonical.get(name)]
        if context:
            parts = context.split(".")
            candidates += [".".join(parts[:i] + [name]) for i in range(len(parts), 0, -1)]
        if impl_module:
            candidates.append(self.canonical.get(f"{impl_module}.{name}"))
        candidates.append(f"{root}.{name}")
        for cand in candidates:
            if cand and cand in self.public:
                return cand
            if cand and cand in self.canonical:
                return self.canonical[cand]
        head, _, rest = name.partition(".")
        if rest:  # ``Class.member`` with the class found by any of the rules above
            owner = self.resolve(head, context, impl_module)
            if owner and f"{owner}.{rest}" in self.public:
                return f"{owner}.{rest}"
        matches = [p for p in self.by_last.get(name.rsplit(".", 1)[-1], ()) if p.endswith("." + name)]
        return matches[0] if len(matches) == 1 else None


def _fence_doctests(text: str) -> str:
    """Wrap every run of doctest lines (``>>>``, ``...`` and their output) in a ``pycon`` fence."""
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        line = lines[i]
        stripped = line.lstrip()
        if not stripped.startswith(">>>"):
            out.append(line)
            i += 1
            continue
        indent = line[: len(line) - len(stripped)]
        block = []
        while i < len(lines) and lines[i].strip() and lines[i].startswith(indent):
            block.append(lines[i][len(indent) :])
            i += 1
        if out and out[-1].strip():
            out.append("")
        out += [f"{indent}```pycon", *(f"{indent}{b}" for b in block), f"{indent}```"]
        if i < len(lines) and lines[i].strip():
            out.append("")
    return "\n".join(out)


def _fence_literal_blocks(text: str) -> str:
    """reST ``::`` literal blocks as fenced blocks (the ``::`` becomes ``:``)."""
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        line = lines[i]
        if not (line.rstrip().endswith("::") and i + 1 < len(lines) and not lines[i + 1].strip()):
            out.append(line)
            i += 1
            continue
        base = len(line) - len(line.lstrip())
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        if j == len(lines) or len(lines[j]) - len(lines[j].lstrip()) <= base:
            out.append(line)
            i += 1
            continue
        indent = len(lines[j]) - len(lines[j].lstrip())
        block = []
        while j < len(lines) and (not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) >= indent):
            block.append(lines[j][indent:])
            j += 1
        while block and not block[-1].strip():
            block.pop()
        stem = line.rstrip()[:-2].rstrip()
        out += [
            stem + ":" if stem.strip() else "",
            "",
            " " * base + "```text",
            *(" " * base + b if b else "" for b in block),
            " " * base + "```",
            "",
        ]
        i = j
    return "\n".join(out)


class SphinxRoles(griffe.Extension):
    """Rewrite the rendered docstrings (see the module docstring)."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs) -> None:
        if pkg.path != "ssl_geometry":
            return
        index = PublicIndex(pkg)
        published: dict[int, tuple[griffe.Object, str]] = {}
        for path, obj in index.public.items():
            published.setdefault(id(obj), (obj, path))
        for obj, path in published.values():
            if obj.docstring is None:
                continue
            impl_module = obj.path if obj.is_module else obj.module.path
            context = path if (obj.is_module or obj.is_class) else path.rsplit(".", 1)[0]
            obj.docstring.value = self._rewrite(obj.docstring.value, index, context, impl_module, path)
            if obj.is_function:
                self._check_args(obj, path)

    @staticmethod
    def _rewrite(text: str, index: PublicIndex, context: str, impl_module: str, where: str) -> str:
        def role(match: re.Match) -> str:
            kind, target = match.group(1), match.group(2).strip()
            short = target.startswith("~")
            name = target.lstrip("~").lstrip(".")
            shown = name.rsplit(".", 1)[-1] if short else name
            found = index.resolve(name, context, impl_module)
            if found:
                return f"[`{shown}`][{found}]"
            if name.split(".")[0] in _EXTERNAL or hasattr(builtins, name) or target.lstrip("~").startswith("."):
                return f"`{shown}`"
            _warn_once(
                f"{where}: :{kind}:`{target}` names no public object of ssl_geometry "
                "(write the public path, or plain ``code`` for a private name)."
            )
            return f"`{shown}`"

        text = _fence_literal_blocks(_fence_doctests(text))
        parts = re.split(r"(^\s*```.*?^\s*```)", text, flags=re.M | re.S)  # no roles inside fences
        return "".join(p if k % 2 else _ROLE.sub(role, p) for k, p in enumerate(parts))

    @staticmethod
    def _check_args(func: griffe.Function, where: str) -> None:
        names = {p.name for p in func.parameters}
        for section in func.docstring.parse("google", warn_unknown_params=False, warn_missing_types=False):
            if section.kind is not griffe.DocstringSectionKind.parameters:
                continue
            for param in section.value:
                for name in (n.strip().lstrip("*") for n in param.name.split(",")):
                    if name and name not in names:
                        _warn_once(
                            f"{where}: the docstring documents a parameter {name!r} that "
                            f"the signature does not have ({', '.join(sorted(names)) or 'none'})."
                        )
