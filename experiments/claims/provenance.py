"""Which code made a verdict: an experiment's code files and their digest, and the git state of the tree that ran it.

:func:`code_files` lists, as paths relative to the repository root (POSIX form, sorted), exactly:

* the experiment's module: ``experiments/<name>.py``, or every ``.py`` file under the package
  ``experiments/<name>/`` (subfolders included);
* its config ``experiments/configs/<name>.py``;
* ``experiments/rules.py`` and every ``.py`` file of ``experiments/claims/`` (the registry);
* the transitive closure of the modules those files import inside the packages ``experiments`` and
  ``ssl_geometry``, found statically: every ``import`` and ``from ... import`` statement anywhere in
  a file (function bodies included) and every ``importlib.import_module("<literal>")`` call, relative
  imports resolved against the file's package. Importing ``a.b.c`` runs ``a/__init__.py``,
  ``a/b/__init__.py`` and ``a/b/c.py`` (or ``a/b/c/__init__.py``), so all of them are included;
  ``from a.b import x`` includes ``a/b/x.py`` (or its package ``__init__.py``) where ``x`` is a
  submodule, and nothing more where ``x`` is a name defined in ``a/b``. Nothing is imported or executed.

A module that only reports (``report_md.py``, ``report_claims.py``, ``reproduce.py``, ``suite.py``) is
included only when the closure imports it; data files, the tests and names imported by a computed string
are not.

:func:`code_digest` is the first 16 hex digits of SHA-256 over those files in sorted path order, each
contributing its UTF-8 path, a NUL byte, its length in bytes as decimal ASCII, a NUL byte and its bytes
(so no two different sets of files give the same byte stream). :func:`git_state` gives the commit
(``git rev-parse HEAD``) and whether ``git status --porcelain`` shows a change to any of the files;
both ``None`` where git or the repository is missing (a copy of the tree, an archive).
"""

from __future__ import annotations

import ast
import hashlib
import pathlib
import shutil
import subprocess

#: The repository root (the folder holding ``experiments/`` and ``ssl_geometry/``).
ROOT = pathlib.Path(__file__).resolve().parents[2]
#: The packages whose modules enter a code digest.
PACKAGES = ("experiments", "ssl_geometry")


def _module_file(parts: tuple[str, ...], root: pathlib.Path) -> pathlib.Path | None:
    """The file that importing the dotted module ``parts`` runs last (its ``__init__.py`` or ``.py``), if it
    lies in one of :data:`PACKAGES` under ``root``; ``None`` for any other (external, or not a module)."""
    if not parts or parts[0] not in PACKAGES:
        return None
    base = root.joinpath(*parts)
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    return None


#: ``{(path, root, mtime_ns, size): files}``: each file's imports parsed once per version of the file.
_IMPORTS: dict[tuple, frozenset[pathlib.Path]] = {}


def _imported_files(path: pathlib.Path, root: pathlib.Path) -> frozenset[pathlib.Path]:
    """The files (in :data:`PACKAGES`) whose code the import statements of ``path`` run (module docstring)."""
    st = path.stat()
    key = (path, root, st.st_mtime_ns, st.st_size)
    if key not in _IMPORTS:
        _IMPORTS[key] = _parse_imports(path, root)
    return _IMPORTS[key]


def _parse_imports(path: pathlib.Path, root: pathlib.Path) -> frozenset[pathlib.Path]:
    rel = path.relative_to(root).with_suffix("").parts
    package = rel[:-1]  # a module's package; for pkg/__init__.py that is pkg itself
    modules: set[tuple[str, ...]] = set()
    tree = ast.parse(path.read_bytes(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(tuple(alias.name.split(".")) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                if node.level - 1 > len(package):
                    raise ValueError(f"{path}: a relative import goes above the top package (line {node.lineno})")
                base = package[: len(package) - (node.level - 1)]
            else:
                base = ()
            base += tuple(node.module.split(".")) if node.module else ()
            modules.add(base)
            modules.update(base + (alias.name,) for alias in node.names if alias.name != "*")
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and (getattr(node.func, "attr", None) or getattr(node.func, "id", None)) == "import_module"
        ):
            modules.add(tuple(node.args[0].value.split(".")))
    files = set()
    for parts in modules:
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__.py, a/b/__init__.py, then a/b/c
            f = _module_file(parts[:i], root)
            if f is not None:
                files.add(f.resolve())
    return frozenset(files)


def _roots(name: str, root: pathlib.Path) -> list[pathlib.Path]:
    """The files a digest starts from (module docstring); ``ValueError`` naming what is missing."""
    if not name or not name.isidentifier():
        raise ValueError(f"experiment name must be a module name under experiments/; got {name!r}")
    exp, cfg = root / "experiments", root / "experiments" / "configs" / f"{name}.py"
    if (exp / name / "__init__.py").is_file():
        module = sorted((exp / name).rglob("*.py"))
    elif (exp / f"{name}.py").is_file():
        module = [exp / f"{name}.py"]
    else:
        raise ValueError(
            f"no experiment {name!r}: expected experiments/{name}.py or experiments/{name}/__init__.py under {root}"
        )
    if not cfg.is_file():
        raise ValueError(f"experiment {name!r} has no config: expected experiments/configs/{name}.py under {root}")
    return [*module, cfg, exp / "rules.py", *sorted((exp / "claims").glob("*.py"))]


def code_files(name: str, *, root: str | pathlib.Path | None = None) -> list[str]:
    """The files whose bytes :func:`code_digest` hashes for experiment ``name`` (module docstring): paths
    relative to ``root`` (default: this repository), POSIX form, sorted."""
    root = pathlib.Path(root or ROOT).resolve()
    todo = [p.resolve() for p in _roots(name, root)]
    seen: set[pathlib.Path] = set()
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        todo.extend(_imported_files(f, root) - seen)
    return sorted(f.relative_to(root).as_posix() for f in seen)


def file_digests(name: str, *, root: str | pathlib.Path | None = None) -> dict[str, str]:
    """``{path: first 16 hex digits of SHA-256 of its bytes}`` for each of :func:`code_files` (what a results file
    stores, so that a stale digest can name the files that changed)."""
    root = pathlib.Path(root or ROOT).resolve()
    return {p: hashlib.sha256((root / p).read_bytes()).hexdigest()[:16] for p in code_files(name, root=root)}


def code_digest(name: str, *, root: str | pathlib.Path | None = None) -> str:
    """SHA-256 (first 16 hex digits) over the sorted ``(path, bytes)`` of :func:`code_files` (module docstring)."""
    root = pathlib.Path(root or ROOT).resolve()
    h = hashlib.sha256()
    for p in code_files(name, root=root):
        data = (root / p).read_bytes()
        h.update(f"{p}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()[:16]


def changed_files(stored: dict[str, str] | None, current: dict[str, str]) -> list[str]:
    """The paths whose digest differs between two :func:`file_digests` maps (added or removed ones too), sorted;
    every current path when nothing was stored."""
    stored = stored or {}
    return sorted(p for p in set(stored) | set(current) if stored.get(p) != current.get(p))


def _git(args: list[str], root: pathlib.Path) -> str | None:
    """``git -C root ARGS``'s stdout, or ``None`` where git is missing or the command fails."""
    git = shutil.which("git")
    if git is None:
        return None
    try:
        p = subprocess.run([git, "-C", str(root), *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout if p.returncode == 0 else None


def git_state(files: list[str], *, root: str | pathlib.Path | None = None) -> tuple[str | None, bool | None]:
    """``(commit, clean)`` of the tree at ``root`` (default: this repository): ``commit`` is ``git rev-parse HEAD``,
    ``clean`` is True iff ``git status --porcelain`` shows no change (modified, staged, untracked, deleted) to any of
    ``files`` (paths relative to ``root``; changes elsewhere, such as ``results/`` or ``REPORT.md``, do not count).
    Both ``None`` where git is missing or ``root`` is not the top of a git work tree; ``clean`` alone is ``None``
    where the status cannot be read."""
    root = pathlib.Path(root or ROOT).resolve()
    top = _git(["rev-parse", "--show-toplevel"], root)
    if top is None or pathlib.Path(top.strip()).resolve() != root:
        return None, None
    commit = _git(["rev-parse", "HEAD"], root)
    if commit is None:  # a repository without a commit yet
        return None, None
    status = _git(["status", "--porcelain", "--untracked-files=all", "--", *files], root)
    return commit.strip(), None if status is None else status.strip() == ""
