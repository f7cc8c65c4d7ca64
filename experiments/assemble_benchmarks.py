"""Assemble ``BENCHMARKS.md`` from the per-benchmark reports under ``docs/``.

Each ``docs/bench_*.md`` is written by its script (``experiments/bench_*.py``) through
``experiments.benchmarks.harness.write_table``, which puts the command, the load average before
and after the run, the share of the CPU other processes used during it (tables written since that
measure exists), the library versions and the device at its top, and refuses to write when the
machine was loaded (unless forced, then the table says ``FORCED UNDER LOAD``). ``docs/bench_hessian_h200.md``
is ``bench_hessian``'s table from a GPU machine, and ``docs/dry_run_paper.md`` gathers the ``PROJECTION.md`` tables that
``python -m experiments.reproduce --variant paper --dry-run [--only ...]`` writes beside its ``DRY_RUN.md`` (each with its own
command and load line, the latest run of a row first and the rows it supersedes kept as history). This script only
concatenates them under one index so that every number keeps its command next to it, and states
per section whether it is a quiet-machine table:

* ``quiet``: written by the harness, not forced;
* ``FORCED UNDER LOAD``: written by the harness with ``--force`` on a loaded machine;
* ``legacy``: no harness header (written before the harness existed): not a verified number.

``--require-quiet`` refuses (exit status 1, nothing written) unless every included section is quiet.

The file opens with its findings, one line per benchmark (:func:`findings`): what was timed against
what, the ratio (median, with the spread the table gives) and the machine, each number read from the
section's own table and printed to 4 significant digits. A section without the table its finding
reads says so on its line. Long floats in the sections' prose (``0.16046544040940405``) print to 4
significant digits too; the tables and commands are kept as written.

    python -m experiments.assemble_benchmarks [--require-quiet]
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys

__all__ = ["ORDER", "status", "findings", "assemble", "main"]

ORDER = [
    (
        "bench_hessian.md",
        "Extreme eigenvalues of the SimSiam Hessian: Lanczos vs the paper's power iteration",
        "experiments/bench_hessian.py",
    ),
    (
        "bench_hessian_h200.md",
        "Extreme eigenvalues of the SimSiam Hessian on an H200: JAX and PyTorch on the same GPU",
        "experiments/bench_hessian.py",
    ),
    (
        "dry_run_paper.md",
        "Projected wall time of the paper variants: training and analysis from two measured sizes",
        "experiments/reproduce.py --variant paper --dry-run (its PROJECTION.md)",
    ),
    (
        "bench_train.md",
        "Training throughput: SimSiam ResNet-18 step, JAX vs PyTorch eager",
        "experiments/bench_train.py",
    ),
    (
        "bench_conv.md",
        "One convolution's forward, input and weight gradients: XLA:CPU vs PyTorch",
        "experiments/bench_conv.py",
    ),
    ("bench_scaling.md", "Scaling of the instruments' cost", "experiments/bench_scaling.py"),
    ("bench_flow.md", "Gradient flow: adaptive diffrax vs fixed-step RK4", "experiments/bench_flow.py"),
    (
        "bench_forward.md",
        "Forward throughput: ViT-S/16 and ResNet-50 at 224 px, JAX vs PyTorch eager",
        "experiments/bench_forward.py",
    ),
    ("bench_text.md", "MiniLM forward throughput, JAX vs PyTorch eager", "experiments/bench_text.py"),
    (
        "bench_device.md",
        "Device run (GPU): training MFU, Lanczos at paper size, dry run, scaling",
        "experiments/bench_device.sh",
    ),
]

_HARNESS_MARK = "1-minute load average"  # the harness header's load line


def status(text: str) -> str:
    """``"quiet"``, ``"FORCED UNDER LOAD"`` or ``"legacy"`` for one report (see the module docstring)."""
    if "FORCED UNDER LOAD" in text:
        return "FORCED UNDER LOAD"
    return "quiet" if _HARNESS_MARK in text else "legacy"


def sig4(x: float) -> str:
    """``x`` to 4 significant digits (``0.16046544`` -> ``0.1605``, ``1779.5`` -> ``1780``)."""
    return f"{float(x):.4g}"


_LONG_FLOAT = re.compile(r"(?<![\w.])-?\d+\.\d{5,}(?:[eE][-+]?\d+)?(?!\w|\.\d)")


def _tidy_prose(line: str) -> str:
    """Long floats of a prose line to 4 significant digits; table rows and commands unchanged."""
    if line.startswith(("|", "Command:", "    ")):
        return line
    return _LONG_FLOAT.sub(lambda m: sig4(m.group(0)), line)


def _tables(text: str) -> list[tuple[str, list[str], list[list[str]]]]:
    """``[(context, header, rows)]`` of the markdown tables of ``text``; ``context`` is the last
    ``Problem ...`` line before the table (``""`` if none)."""
    out, context, lines, i = [], "", text.splitlines(), 0
    while i < len(lines):
        if lines[i].startswith("Problem "):
            context = lines[i]
        if lines[i].startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            header = [c.strip() for c in lines[i].strip("|").split("|")]
            rows, i = [], i + 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append([c.strip() for c in lines[i].strip("|").split("|")])
                i += 1
            out.append((context, header, rows))
            continue
        i += 1
    return out


def _machine(text: str) -> str:
    """The harness header's device: ``"cpu, x86_64, 2 CPU cores"`` or ``"NVIDIA H200 (gpu)"``."""
    m = re.search(r"device (\w+):([^,]+), ([^,]+), (\d+) CPU cores", text)
    if not m:
        return "machine not recorded"
    platform, kind, arch, cores = m.groups()
    return f"{platform}, {arch}, {cores} CPU cores" if platform == "cpu" else f"{kind} ({platform})"


def _column(header: list[str], rows: list[list[str]], name: str) -> list[str]:
    return [r[header.index(name)] for r in rows]


def _num(cell: str) -> str:
    """A cell's numbers to 4 significant digits (``"0.196 (0.195-0.197)"`` keeps its shape)."""
    return re.sub(r"\d+\.\d+(?:e[-+]?\d+)?|\d+(?:e[-+]?\d+)?", lambda m: sig4(m.group(0)), cell)


def _find_hessian(text):
    out = []
    for context, header, rows in _tables(text):
        if "ratio" not in header or "method" not in header:
            continue
        problem = re.search(r"Problem `(\w+)`", context)
        base = [r for r in rows if r[header.index("ratio")] == "1.00"]
        ours = [r for r in rows if r[header.index("method")].startswith("curvature.hessian_extremes")]
        if base and ours:
            m, s = header.index("method"), header.index("signs")
            out.append(
                f"`curvature.hessian_extremes` ({ours[0][m].split('(')[1].split(')')[0]}) against the paper's "
                f"20-step power iteration, problem `{problem.group(1) if problem else '?'}`: time ours / theirs "
                f"{_num(ours[0][header.index('ratio')])}, signs {ours[0][s]} vs {base[0][s].strip('*')}"
            )
    return out


def _find_columns(table_key, label, ratio, what, by):
    """A finding reader for a table holding column ``ratio``, one clause per row (``by`` names the row)."""

    def read(text):
        for _, header, rows in _tables(text):
            if table_key in header and ratio in header:
                rows = [r for r in rows if r[header.index(ratio)]]
                if rows:
                    return [
                        f"{label}: {what} "
                        + ", ".join(f"{_num(r[header.index(ratio)])} ({by(header, r)})" for r in rows)
                    ]
        return []

    return read


def _find_dry_run(text):
    latest = {}
    for _, header, rows in _tables(text):
        if "projected full run" in header:
            for r in rows:
                name, proj = r[0], r[header.index("projected full run")]
                if proj.endswith(" h") and name not in latest:  # sections run latest first
                    latest[name] = float(proj[:-2])
    if not latest:
        return []
    top = max(latest, key=latest.get)
    return [
        f"paper variants projected from dry runs (latest row of each): {sig4(sum(latest.values()))} h in all "
        f"over {len(latest)} runs, the longest {sig4(latest[top])} h ({top})"
    ]


def _cols(*names):
    return lambda header, r: ", ".join(
        f"{n} {r[header.index(n)]}" if n != "layer" else r[header.index(n)] for n in names
    )


#: How the finding of each report is read from its table.
FINDERS = {
    "bench_hessian.md": _find_hessian,
    "bench_hessian_h200.md": _find_hessian,
    "dry_run_paper.md": _find_dry_run,
    "bench_train.md": _find_columns(
        "variant",
        "JAX training step against PyTorch eager",
        "speed_vs_torch_median",
        "speed (PyTorch time / JAX time, median)",
        _cols("variant", "batch"),
    ),
    "bench_conv.md": _find_columns(
        "layer",
        "3x3 convolution backward (dx + dw), XLA:CPU against PyTorch",
        "ratio_bwd",
        "PyTorch time / JAX time",
        _cols("layer", "dtype"),
    ),
    "bench_scaling.md": _find_columns(
        "P", "matrix-free against dense spectrum", "ratio_free_over_dense", "time ratio", _cols("P")
    ),
    "bench_flow.md": _find_columns(
        "method",
        "gradient flow against fixed-step RK4 (dt = 1/lambda_0)",
        "wall / RK4(1/lambda_0)",
        "wall-time ratio",
        _cols("method", "rel. error at t1"),
    ),
    "bench_forward.md": _find_columns(
        "model",
        "forward throughput against PyTorch eager",
        "ratio_jax_over_torch",
        "PyTorch time / JAX time (median)",
        _cols("model", "batch"),
    ),
    "bench_text.md": _find_columns(
        "batch",
        "MiniLM forward against PyTorch eager",
        "ratio_jax_over_torch",
        "PyTorch time / JAX time (median)",
        _cols("batch", "length"),
    ),
}


def findings(fname: str, text: str) -> list[str]:
    """The finding lines of one report: ``"<finding>; <machine>"`` for each comparison its table holds,
    or one line saying that the table is missing."""
    finder = FINDERS.get(fname)
    found = finder(text) if finder else []
    if not found:
        return [f"`docs/{fname}`: no comparison table to read a finding from"]
    return [f"{line}; {_machine(text)}" for line in found]


def assemble(root: str | pathlib.Path = ".") -> tuple[str, dict]:
    """``(BENCHMARKS.md text, {file: status})`` from the reports present under ``root/docs``."""
    root = pathlib.Path(root)
    parts = [
        "# BENCHMARKS",
        "",
        "Every table below was printed by the script named in its section, with the exact command, "
        "the load average before and after, the other processes' CPU share during the run (tables written since "
        "that measure exists), the library versions and the device at its top "
        "(`experiments/benchmarks/harness.py`). Competing implementations were timed interleaved "
        "(A B A B ...), and ratios are medians of per-round ratios with their spread. Status per section: "
        "quiet (not loaded by the harness's rule at the time it ran), FORCED UNDER LOAD, or legacy (no harness header; "
        "not verified).",
        "",
    ]
    index, bodies, states, found = [], [], {}, []
    for fname, title, script in ORDER:
        path = root / "docs" / fname
        if not path.exists():
            continue
        text = path.read_text()
        states[fname] = status(text)
        found += [f"- {line}" for line in findings(fname, text)]
        index.append(f"- [{title}](#{title.lower().replace(' ', '-')}) (`{script}`; {states[fname]})")
        body = text.strip().splitlines()
        if body and body[0].startswith("# "):
            body = body[1:]
        body = ["#" + line if line.startswith("#") else _tidy_prose(line) for line in body]  # nest under the section
        # Figures linked relative to docs/ stay valid from the repository root (the site hook maps docs/ back).
        body = [re.sub(r"(!\[[^\]]*\]\()(?![a-z]+:|/|docs/)", r"\1docs/", line) for line in body]
        bodies.append("\n".join([f"## {title}", "", f"Status: **{states[fname]}**.", "", *body, ""]))
    head = [
        "# BENCHMARKS",
        "",
        "## Findings",
        "",
        "One line per benchmark: what was timed against what, the ratio (median, with its spread where the "
        "table gives one) and the machine; each section below has the table and its command.",
        "",
        *found,
        "",
    ]
    return "\n".join(head + parts[2:] + index + [""] + bodies), states


def main(argv=None, root: str | pathlib.Path = ".") -> str:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--require-quiet", action="store_true", help="refuse unless every section is quiet")
    args = ap.parse_args(argv)
    text, states = assemble(root)
    bad = {f: s for f, s in states.items() if s != "quiet"}
    if args.require_quiet and bad:
        print(
            "not assembling: sections that are not quiet-machine tables: "
            + ", ".join(f"{f} ({s})" for f, s in bad.items()),
            file=sys.stderr,
        )
        raise SystemExit(1)
    (pathlib.Path(root) / "BENCHMARKS.md").write_text(text)
    print("wrote BENCHMARKS.md" + (f" (not quiet: {', '.join(bad)})" if bad else ""))
    return text


if __name__ == "__main__":
    main()
