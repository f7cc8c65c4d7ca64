"""Write the Sphinx object inventories of JAX and NumPy that the site links its API pages with.

The site builds offline (``mkdocs build --strict`` on a machine, or in CI, that cannot reach
docs.jax.dev or numpy.org), so mkdocstrings cannot download the projects' own ``objects.inv``.
This script writes small local ones instead, ``jax.inv`` and ``numpy.inv`` next to it, holding the
JAX and NumPy objects that our signatures, annotations, docstrings and pages name, each mapped to
its page on the official documentation (``mkdocs.yml`` loads them with ``base_url`` set to
:data:`JAX_BASE` and :data:`NUMPY_BASE`). Run it by hand after adding a name below, and commit the
two files::

    python docs/inventories/make_inventories.py            # writes jax.inv, numpy.inv
    python docs/inventories/make_inventories.py --missing  # names our sources mention, not listed here

The format is Sphinx's inventory version 2: four header lines, then zlib-compressed lines
``name domain:role priority uri dispname`` (``uri`` relative to the documentation's base URL,
``dispname`` ``-`` for "the name itself").

Two jaxtyping names are entries of the JAX inventory because they *are* JAX objects:
``jaxtyping.Array is jax.Array`` and ``jaxtyping.ArrayLike is jax.typing.ArrayLike`` (checked here,
so an upgrade that breaks the identity stops this script). Every other name must import from the
installed ``jax`` or ``numpy``, so a typo cannot reach the site as a dead link.

mkdocs caches what it "downloads" (a ``file:`` URL too) for a day under its user cache directory;
this script removes the cached copies of the URLs ``mkdocs.yml`` names, so the next build reads the
new files.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib
import os
import pathlib
import re
import sys
import zlib

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]

JAX_BASE = "https://docs.jax.dev/en/latest/"
NUMPY_BASE = "https://numpy.org/doc/stable/"

_HEADER = (
    "# Sphinx inventory version 2\n"
    "# Project: {project}\n"
    "# Version: {version}\n"
    "# The remainder of this file is compressed using zlib.\n"
)


def _jax_page(name: str) -> str:
    """JAX documents each function and class on its own autosummary page."""
    return f"_autosummary/{name}.html"


def _numpy_page(name: str) -> str:
    """NumPy documents each routine and class on its own generated page."""
    return f"reference/generated/{name}.html"


# (name, role, uri relative to JAX_BASE)
JAX: list[tuple[str, str, str]] = [
    # modules: one page each
    *[
        (m, "module", f"{m}.html")
        for m in (
            "jax.numpy",
            "jax.nn",
            "jax.lax",
            "jax.random",
            "jax.tree_util",
            "jax.typing",
            "jax.sharding",
            "jax.flatten_util",
            "jax.distributed",
        )
    ],
    ("jax", "module", "jax.html"),
    # types
    ("jax.Array", "class", _jax_page("jax.Array")),
    ("jax.typing.ArrayLike", "data", _jax_page("jax.typing.ArrayLike")),
    ("jax.ShapeDtypeStruct", "class", _jax_page("jax.ShapeDtypeStruct")),
    ("jax.tree_util.Partial", "class", _jax_page("jax.tree_util.Partial")),
    ("jax.sharding.Mesh", "class", "jax.sharding.html#jax.sharding.Mesh"),  # autoclass on the module page
    ("jax.sharding.NamedSharding", "class", "jax.sharding.html#jax.sharding.NamedSharding"),
    ("jax.sharding.PartitionSpec", "class", "jax.sharding.html#jax.sharding.PartitionSpec"),
    *[
        (f"jax.numpy.{t}", "class", _jax_page(f"jax.numpy.{t}"))
        for t in ("ndarray", "dtype", "float16", "float32", "float64", "int32", "floating", "inexact", "integer")
    ],
    # transformations and the process/device API
    *[
        (f"jax.{f}", "function", _jax_page(f"jax.{f}"))
        for f in (
            "jit",
            "vmap",
            "grad",
            "value_and_grad",
            "jvp",
            "vjp",
            "linearize",
            "hessian",
            "jacfwd",
            "jacrev",
            "checkpoint",
            "eval_shape",
            "device_get",
            "device_put",
            "devices",
            "process_index",
            "process_count",
            "make_array_from_process_local_data",
        )
    ],
    ("jax.distributed.initialize", "function", _jax_page("jax.distributed.initialize")),
    ("jax.flatten_util.ravel_pytree", "function", _jax_page("jax.flatten_util.ravel_pytree")),
    ("jax.image.scale_and_translate", "function", _jax_page("jax.image.scale_and_translate")),
    ("jax.scipy.ndimage.map_coordinates", "function", _jax_page("jax.scipy.ndimage.map_coordinates")),
    *[
        (f"jax.lax.{f}", "function", _jax_page(f"jax.lax.{f}"))
        for f in ("stop_gradient", "scan", "fori_loop", "while_loop", "cond", "rsqrt")
    ],
    *[
        (f"jax.random.{f}", "function", _jax_page(f"jax.random.{f}"))
        for f in ("PRNGKey", "key", "split", "fold_in", "normal", "uniform", "permutation", "bernoulli", "rademacher")
    ],
    *[
        (f"jax.nn.{f}", "function", _jax_page(f"jax.nn.{f}"))
        for f in ("relu", "elu", "gelu", "silu", "sigmoid", "softplus", "softmax", "logsumexp")
    ],
    *[
        (f"jax.tree_util.{f}", "function", _jax_page(f"jax.tree_util.{f}"))
        for f in (
            "tree_map",
            "tree_leaves",
            "tree_leaves_with_path",
            "tree_structure",
            "tree_flatten",
            "tree_flatten_with_path",
            "tree_unflatten",
            "keystr",
        )
    ],
    *[
        (f"jax.numpy.{f}", "function", _jax_page(f"jax.numpy.{f}"))
        for f in (
            "abs",
            "all",
            "allclose",
            "any",
            "arange",
            "argmax",
            "argsort",
            "array",
            "asarray",
            "clip",
            "concatenate",
            "cos",
            "diag",
            "diagonal",
            "einsum",
            "exp",
            "eye",
            "finfo",
            "floor",
            "isfinite",
            "issubdtype",
            "linspace",
            "max",
            "maximum",
            "mean",
            "minimum",
            "ones",
            "ones_like",
            "ravel",
            "result_type",
            "rot90",
            "shape",
            "sin",
            "sqrt",
            "square",
            "stack",
            "std",
            "sum",
            "swapaxes",
            "tanh",
            "tile",
            "vdot",
            "where",
            "zeros",
            "zeros_like",
        )
    ],
    *[
        (f"jax.numpy.linalg.{f}", "function", _jax_page(f"jax.numpy.linalg.{f}"))
        for f in ("eigh", "eigvalsh", "norm", "qr", "svd")
    ],
]

#: jaxtyping re-exports these JAX objects under its own name; our annotations use them.
JAX_ALIASES: dict[str, str] = {"jaxtyping.Array": "jax.Array", "jaxtyping.ArrayLike": "jax.typing.ArrayLike"}

# (name, role, uri relative to NUMPY_BASE)
NUMPY: list[tuple[str, str, str]] = [
    ("numpy", "module", "reference/index.html#module-numpy"),
    ("numpy.ndarray", "class", _numpy_page("numpy.ndarray")),
    ("numpy.dtype", "class", _numpy_page("numpy.dtype")),
    ("numpy.finfo", "class", _numpy_page("numpy.finfo")),
    # scalar types: documented together on the scalars page
    *[
        (f"numpy.{t}", "class", f"reference/arrays.scalars.html#numpy.{t}")
        for t in ("generic", "number", "integer", "floating", "inexact", "float32", "float64", "int32", "uint8")
    ],
    ("numpy.random.default_rng", "function", "reference/random/generator.html#numpy.random.default_rng"),
    ("numpy.random.Generator", "class", "reference/random/generator.html#numpy.random.Generator"),
    *[
        (f"numpy.{f}", "function", _numpy_page(f"numpy.{f}"))
        for f in (
            "abs",
            "all",
            "allclose",
            "any",
            "arange",
            "argmin",
            "argsort",
            "array",
            "asarray",
            "concatenate",
            "exp",
            "eye",
            "isfinite",
            "linspace",
            "max",
            "mean",
            "ones",
            "ravel",
            "rot90",
            "round",
            "sqrt",
            "stack",
            "sum",
            "unique",
            "where",
            "zeros",
        )
    ],
    *[(f"numpy.linalg.{f}", "function", _numpy_page(f"numpy.linalg.{f}")) for f in ("eigh", "eigvalsh", "norm", "svd")],
]


def _resolve(name: str):
    """The object ``name`` (a dotted path) names in the installed packages; ImportError/AttributeError if none."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(f"no module in {name!r}")


def entries(project: str) -> list[tuple[str, str, str]]:
    """The inventory entries of ``project`` (``"jax"`` or ``"numpy"``), checked against the installed packages.

    Raises:
        ValueError: ``project`` is neither; a name does not resolve; a jaxtyping alias is not the JAX
            object it stands for; a name is listed twice.
    """
    if project == "jax":
        table = list(JAX)
        by_name = {n: (r, u) for n, r, u in table}
        for alias, target in JAX_ALIASES.items():
            if _resolve(alias) is not _resolve(target):
                raise ValueError(f"{alias} is no longer {target}: list it on its own page, not as an alias")
            table.append((alias, by_name[target][0], by_name[target][1]))
    elif project == "numpy":
        table = list(NUMPY)
    else:
        raise ValueError(f"project must be 'jax' or 'numpy', got {project!r}")
    seen: set[str] = set()
    for name, _, _ in table:
        if name in seen:
            raise ValueError(f"{name} is listed twice")
        seen.add(name)
        try:
            _resolve(name)
        except (ImportError, AttributeError) as error:
            raise ValueError(f"{name} does not resolve in the installed packages: {error}") from error
    return sorted(table)


def format_inventory(project: str, version: str, table: list[tuple[str, str, str]]) -> bytes:
    """A Sphinx inventory (version 2) of ``table``: the header, then ``name py:role 1 uri -`` lines, zlib-compressed."""
    body = "".join(f"{name} py:{role} 1 {uri} -\n" for name, role, uri in table)
    return _HEADER.format(project=project, version=version).encode() + zlib.compress(body.encode(), 9)


def parse_inventory(data: bytes) -> list[tuple[str, str, str]]:
    """``(name, domain:role, uri)`` of each line of a version-2 inventory (the inverse of :func:`format_inventory`).

    Raises:
        ValueError: the header is not a version-2 inventory's or a line is malformed.
    """
    lines = data.split(b"\n", 4)
    if len(lines) < 5 or lines[0] != b"# Sphinx inventory version 2" or b"zlib" not in lines[3]:
        raise ValueError("not a Sphinx inventory version 2 (zlib) file")
    out = []
    for line in zlib.decompress(lines[4]).decode().splitlines():
        m = re.fullmatch(r"(.+?)\s+(\S+:\S+)\s+(-?\d+)\s+(\S+)\s+(.*)", line)
        if m is None:
            raise ValueError(f"malformed inventory line {line!r}")
        out.append((m[1], m[2], m[4]))
    return out


def configured_urls() -> list[str]:
    """The ``url:`` of each inventory ``mkdocs.yml`` loads (read as text: the file holds mkdocs-only YAML tags)."""
    return re.findall(r"^\s*-\s*url:\s*(\S+)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M)


def evict_cached(urls: list[str]) -> list[str]:
    """Remove mkdocs' cached copies of ``urls`` (mkdocs_get_deps' cache layout); the paths removed."""
    import platformdirs

    directory = pathlib.Path(platformdirs.user_cache_dir("mkdocs")) / "mkdocs_url_cache"
    removed = []
    for url in urls:
        path = directory / (hashlib.sha256(url.encode()).hexdigest()[:32] + os.path.splitext(url)[1])
        if path.exists():
            path.unlink()
            removed.append(str(path))
    return removed


_MENTION = re.compile(r"\b(jax|jnp|numpy|np)\.([A-Za-z_][\w.]*\w)")


def mentioned_names() -> set[str]:
    """JAX/NumPy names in our docstrings and pages (``jnp.``/``np.`` read as ``jax.numpy.``/``numpy.``)."""
    texts = []
    for path in sorted((ROOT / "ssl_geometry").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                texts.append(ast.get_docstring(node) or "")
    texts += [p.read_text() for p in sorted((ROOT / "docs").rglob("*.md"))]
    out = set()
    for text in texts:
        for m in _MENTION.finditer(text):
            out.add({"jnp": "jax.numpy", "np": "numpy"}.get(m[1], m[1]) + "." + m[2])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--missing", action="store_true", help="list names our sources mention that no inventory holds")
    args = parser.parse_args(argv)
    tables = {"jax": entries("jax"), "numpy": entries("numpy")}
    if args.missing:
        listed = {n for t in tables.values() for n, _, _ in t}
        for name in sorted(mentioned_names() - listed):
            print(name)
        return 0
    # The version is the docs' channel the URIs point into (not the installed version: the files stay byte-stable).
    for project, title, version in (("jax", "JAX", "latest"), ("numpy", "NumPy", "stable")):
        data = format_inventory(title, version, tables[project])
        assert [(n, f"py:{r}", u) for n, r, u in tables[project]] == parse_inventory(data)
        (HERE / f"{project}.inv").write_bytes(data)
        print(f"{project}.inv: {len(tables[project])} objects, {len(data)} bytes")
    for path in evict_cached(configured_urls()):
        print(f"removed mkdocs' cached copy {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
