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

    python -m experiments.assemble_benchmarks [--require-quiet]
"""
from __future__ import annotations

import argparse
import pathlib
import sys

__all__ = ["ORDER", "status", "assemble", "main"]

ORDER = [
    ("bench_hessian.md", "Extreme eigenvalues of the SimSiam Hessian: Lanczos vs the paper's power iteration",
     "experiments/bench_hessian.py"),
    ("bench_hessian_h200.md", "Extreme eigenvalues of the SimSiam Hessian on an H200: JAX and PyTorch on the same GPU",
     "experiments/bench_hessian.py"),
    ("dry_run_paper.md", "Projected wall time of the paper variants: training and analysis from two measured sizes",
     "experiments/reproduce.py --variant paper --dry-run (its PROJECTION.md)"),
    ("bench_train.md", "Training throughput: SimSiam ResNet-18 step, JAX vs PyTorch eager", "experiments/bench_train.py"),
    ("bench_conv.md", "One convolution's forward, input and weight gradients: XLA:CPU vs PyTorch", "experiments/bench_conv.py"),
    ("bench_scaling.md", "Scaling of the instruments' cost", "experiments/bench_scaling.py"),
    ("bench_flow.md", "Gradient flow: adaptive diffrax vs fixed-step RK4", "experiments/bench_flow.py"),
    ("bench_forward.md", "Forward throughput: ViT-S/16 and ResNet-50 at 224 px, JAX vs PyTorch eager",
     "experiments/bench_forward.py"),
    ("bench_text.md", "MiniLM forward throughput, JAX vs PyTorch eager", "experiments/bench_text.py"),
    ("bench_device.md", "Device run (GPU): training MFU, Lanczos at paper size, dry run, scaling",
     "experiments/bench_device.sh"),
]

_HARNESS_MARK = "1-minute load average"   # the harness header's load line


def status(text: str) -> str:
    """``"quiet"``, ``"FORCED UNDER LOAD"`` or ``"legacy"`` for one report (see the module docstring)."""
    if "FORCED UNDER LOAD" in text:
        return "FORCED UNDER LOAD"
    return "quiet" if _HARNESS_MARK in text else "legacy"


def assemble(root: str | pathlib.Path = ".") -> tuple[str, dict]:
    """``(BENCHMARKS.md text, {file: status})`` from the reports present under ``root/docs``."""
    root = pathlib.Path(root)
    parts = ["# BENCHMARKS", "",
             "Every table below was printed by the script named in its section, with the exact command, "
             "the load average before and after, the other processes' CPU share during the run (tables written since "
             "that measure exists), the library versions and the device at its top "
             "(`experiments/benchmarks/harness.py`). Competing implementations were timed interleaved "
             "(A B A B ...), and ratios are medians of per-round ratios with their spread. Status per section: "
             "quiet (not loaded by the harness's rule at the time it ran), FORCED UNDER LOAD, or legacy (no harness header; "
             "not verified).", ""]
    index, bodies, states = [], [], {}
    for fname, title, script in ORDER:
        path = root / "docs" / fname
        if not path.exists():
            continue
        text = path.read_text()
        states[fname] = status(text)
        index.append(f"- [{title}](#{title.lower().replace(' ', '-')}) (`{script}`; {states[fname]})")
        body = text.strip().splitlines()
        if body and body[0].startswith("# "):
            body = body[1:]
        body = ["#" + line if line.startswith("#") else line for line in body]  # nest under the section
        bodies.append("\n".join([f"## {title}", "", f"Status: **{states[fname]}**.", "", *body, ""]))
    return "\n".join(parts + index + [""] + bodies), states


def main(argv=None, root: str | pathlib.Path = ".") -> str:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--require-quiet", action="store_true", help="refuse unless every section is quiet")
    args = ap.parse_args(argv)
    text, states = assemble(root)
    bad = {f: s for f, s in states.items() if s != "quiet"}
    if args.require_quiet and bad:
        print("not assembling: sections that are not quiet-machine tables: "
              + ", ".join(f"{f} ({s})" for f, s in bad.items()), file=sys.stderr)
        raise SystemExit(1)
    (pathlib.Path(root) / "BENCHMARKS.md").write_text(text)
    print("wrote BENCHMARKS.md" + (f" (not quiet: {', '.join(bad)})" if bad else ""))
    return text


if __name__ == "__main__":
    main()
