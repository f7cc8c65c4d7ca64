"""One public path per name, no private imports across modules, and layers that point one way.

The public API is the package :mod:`ssl_geometry` and its namespaces (``ssl_geometry.NAMESPACES``);
the implementation under ``ssl_geometry/_src/`` is private. These tests read the code (AST) and the
imported namespaces, so a second public path, a ``sys.modules`` swap, a cycle or a flat/grouped
import mix fails here, not in a review.
"""

import ast
import importlib
import pathlib
import re
import subprocess
import sys
import types

import pytest

import ssl_geometry

ROOT = pathlib.Path(__file__).resolve().parents[1]
LIB = ROOT / "ssl_geometry"
SRC = LIB / "_src"
#: Values too small to have an identity worth checking (interned / shared by the interpreter).
_ATOMS = (str, int, float, bool, bytes, type(None))


#: The experiment harness's plumbing: importable (``from ssl_geometry import internal``), not public (not in
#: ``ssl_geometry.NAMESPACES``, no promise across releases), and held to the same rules as the namespaces.
INTERNAL = "internal"


def _namespaces():
    return {
        "ssl_geometry": ssl_geometry,
        **{f"ssl_geometry.{n}": importlib.import_module(f"ssl_geometry.{n}") for n in ssl_geometry.NAMESPACES},
        f"ssl_geometry.{INTERNAL}": importlib.import_module(f"ssl_geometry.{INTERNAL}"),
    }


def _module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: pathlib.Path):
    """``(module, names, level, lineno)`` of every import in ``path``, function-level ones included."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, None, 0, node.lineno
        elif isinstance(node, ast.ImportFrom):
            yield node.module or "", [a.name for a in node.names], node.level, node.lineno


def test_every_namespace_imports_and_exports_what_it_lists():
    for name, mod in _namespaces().items():
        assert isinstance(getattr(mod, "__all__", None), list), f"{name} has no __all__ list"
        missing = [n for n in mod.__all__ if not hasattr(mod, n)]
        assert not missing, f"{name}.__all__ lists names it does not define: {missing}"
        assert len(set(mod.__all__)) == len(mod.__all__), f"{name}.__all__ repeats a name"


def test_each_public_object_has_exactly_one_public_path():
    seen = {}
    for ns, mod in _namespaces().items():
        for n in mod.__all__:
            obj = getattr(mod, n)
            if isinstance(obj, (_ATOMS, types.ModuleType)):
                continue
            seen.setdefault(id(obj), []).append(f"{ns}.{n}")
    doubles = [paths for paths in seen.values() if len(paths) > 1]
    assert not doubles, f"objects with more than one public path: {doubles}"


def test_namespaces_export_nothing_unlisted():
    """A namespace's public attributes are its ``__all__`` (no stray re-export becomes a second path)."""
    for ns, mod in _namespaces().items():
        if ns == "ssl_geometry":
            continue
        stray = [
            n
            for n, v in vars(mod).items()
            if not n.startswith("_") and n not in mod.__all__ and not isinstance(v, types.ModuleType)
        ]
        assert not stray, f"{ns} exposes names outside __all__: {stray}"


def test_the_plumbing_is_one_internal_namespace_outside_the_public_surface():
    """Locks, digests, the workdir's resume checks and the sharding helpers live in ``ssl_geometry.internal`` only:
    not a public namespace, not in the package's ``__all__``, gone from ``trainer``, and its docstring says it is
    not public API and may change without notice. What a researcher trains with stays in ``trainer``."""
    internal = importlib.import_module(f"ssl_geometry.{INTERNAL}")
    trainer = importlib.import_module("ssl_geometry.trainer")
    assert INTERNAL not in ssl_geometry.NAMESPACES and INTERNAL not in ssl_geometry.__all__
    assert INTERNAL not in dir(ssl_geometry) and ssl_geometry.internal is internal
    assert "not public API" in internal.__doc__ and "without notice" in internal.__doc__
    plumbing = {"Lock", "digest", "unalias", "state_signature", "host_slice", "check_resume", "prepare"}
    assert plumbing <= set(internal.__all__)
    assert not plumbing & set(trainer.__all__) and not [n for n in plumbing if hasattr(trainer, n)]
    kept = {"train", "validate_config", "init_train_state", "make_train_step", "jit_train_step", "make_mesh"}
    assert kept | {"place_state", "place_batch", "batch_indices", "WorkdirLockedError"} <= set(trainer.__all__)
    assert "operator_norm" in ssl_geometry.curvature.__all__ and "operator_norm" not in ssl_geometry.geometry.__all__


#: A name counts as listed in a docstring when it stands in a role (``:func:`name```, ``:class:`~a.b.name```) or
#: in double backquotes (````name````, ````name(...)````, ````name.field````), not when it is a word of the prose.
def _listed(doc: str, name: str) -> bool:
    n = re.escape(name)
    return re.search(rf":[a-z]+:`~?(?:[\w.]+\.)?{n}`|``{n}(?:``|[(.\[])", doc or "") is not None


def test_every_namespace_docstring_lists_what_it_exports():
    """A reader of ``help(ssl_geometry.<namespace>)`` (or its API page's opening) sees every name of ``__all__``."""
    namespaces = _namespaces()
    missing = {ns: [n for n in mod.__all__ if not _listed(mod.__doc__, n)] for ns, mod in namespaces.items()}
    missing = {ns: names for ns, names in missing.items() if names}
    assert not missing, f"names in __all__ that the namespace docstring does not list: {missing}"


def test_the_listing_check_tells_a_listed_name_from_a_word():
    doc = "Fit :func:`fit` and :class:`~ssl_geometry.trainer.Lock`; the table ``OPTIMIZERS``; ``make(x)``. A lock."
    assert [_listed(doc, n) for n in ("fit", "Lock", "OPTIMIZERS", "make")] == [True, True, True, True]
    assert [_listed(doc, n) for n in ("lock", "table", "it", "ssl_geometry")] == [False, False, False, False]
    assert not _listed(None, "fit")


def test_public_modules_are_real_modules_without_sys_modules_swaps():
    for path in LIB.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Subscript) and ast.unparse(t.value) == "sys.modules":
                        pytest.fail(f"{path.relative_to(ROOT)}:{node.lineno} assigns to sys.modules")
    for ns in (*ssl_geometry.NAMESPACES, INTERNAL):
        mod = importlib.import_module(f"ssl_geometry.{ns}")
        assert mod.__name__ == f"ssl_geometry.{ns}" and mod.__file__.endswith(f"ssl_geometry/{ns}.py")


def test_no_private_name_is_imported_from_another_module():
    """``from m import _x`` across modules is how a private helper leaks into a second place."""
    bad = []
    for path in [*LIB.rglob("*.py"), *(ROOT / "experiments").rglob("*.py"), *(ROOT / "tests").rglob("*.py")]:
        for mod, names, level, line in _imports(path):
            for n in names or ():
                if n.startswith("_") and not n.startswith("__"):
                    bad.append(f"{path.relative_to(ROOT)}:{line} imports {n} from {mod or '.'}")
    assert not bad, "\n".join(bad)


def test_outside_code_imports_only_public_paths_in_one_style():
    """Experiments, tests, docs and the README: ``from ssl_geometry import <namespace or name>`` only."""
    allowed = {*ssl_geometry.NAMESPACES, *ssl_geometry.__all__, INTERNAL}
    bad = []
    files = [*(ROOT / "experiments").rglob("*.py"), *(ROOT / "tests").rglob("*.py"), ROOT / "conftest.py"]
    for path in files:
        for mod, names, level, line in _imports(path):
            where = f"{path.relative_to(ROOT)}:{line}"
            if mod.startswith("ssl_geometry."):
                bad.append(f"{where} imports {mod} (use `from ssl_geometry import ...`)")
            elif mod == "ssl_geometry" and names is not None:
                bad += [
                    f"{where} imports ssl_geometry.{n}, not a public namespace or name"
                    for n in names
                    if n not in allowed
                ]
    for path in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]:
        for i, line in enumerate(path.read_text().splitlines(), 1):
            s = line.strip()
            if s.startswith(("from ssl_geometry.", "import ssl_geometry.")):
                bad.append(f"{path.relative_to(ROOT)}:{i}: {s}")
            elif s.startswith("from ssl_geometry import"):
                names = [n.split(" as ")[0].strip() for n in s.split("import", 1)[1].split("#")[0].split(",")]
                bad += [f"{path.relative_to(ROOT)}:{i} imports ssl_geometry.{n}" for n in names if n not in allowed]
    assert not bad, "\n".join(bad)


def _library_graph():
    """Edges ``module -> module`` between library modules, every import (function-level too)."""
    mods = {_module_name(p): p for p in LIB.rglob("*.py")}
    graph = {m: set() for m in mods}
    for m, path in mods.items():
        pkg = m if path.name == "__init__.py" else m.rpartition(".")[0]
        for mod, names, level, _ in _imports(path):
            if level:
                base = pkg.split(".")
                base = base[: len(base) - level + 1]
                mod = ".".join(base + ([mod] if mod else []))
            if not mod.startswith("ssl_geometry"):
                continue
            targets = [f"{mod}.{n}" for n in (names or ()) if f"{mod}.{n}" in mods] or [mod]
            graph[m].update(t for t in targets if t in mods and t != m)
    return graph


def test_library_import_graph_has_no_cycle():
    graph = _library_graph()
    index, low, stack, on, cycles = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


_LAYERS = ("models", "ssl", "linalg", "instrument", "core", "dynamics", "training")
#: What each layer may import (besides ``checks`` and ``ops``, which import no layer).
_MAY_IMPORT = {
    "models": set(),
    "ssl": {"models"},
    "linalg": set(),
    "instrument": {"models", "ssl", "linalg"},
    "core": set(),
    "dynamics": {"models", "ssl", "linalg", "instrument", "core"},
    "training": {"models", "ssl", "linalg", "instrument", "core", "dynamics"},
}


def _layer(module):
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "_src" and parts[2] in _LAYERS else None


def test_layers_point_one_way():
    """A layer imports only the layers below it (``dynamics`` nothing of ``training``)."""
    bad = []
    for m, targets in _library_graph().items():
        lm = _layer(m)
        for t in targets:
            lt = _layer(t)
            if lm and lt and lt != lm and lt not in _MAY_IMPORT[lm]:
                bad.append(f"{m} -> {t}")
    assert not bad, "\n".join(bad)


def test_implementation_never_imports_a_public_namespace():
    bad = [
        f"{m} -> {t}"
        for m, ts in _library_graph().items()
        if m.startswith("ssl_geometry._src")
        for t in ts
        if not t.startswith("ssl_geometry._src")
    ]
    assert not bad, "\n".join(bad)


def test_train_entry_points_exit_zero_on_help():
    for cmd in ([sys.executable, "-m", "ssl_geometry.train", "--help"],):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert r.returncode == 0, r.stderr[-2000:]
        assert "--config" in r.stdout + r.stderr
