"""Assemble ``BENCHMARKS.md`` from the per-benchmark reports under ``docs/``.

Each ``docs/bench_*.md`` is written by its script (``experiments/bench_*.py``) together
with the command that produced it; this only concatenates them under one index so that
every number keeps its command next to it.

    python -m experiments.assemble_benchmarks
"""
from __future__ import annotations

import pathlib

ORDER = [
    ("bench_hessian.md", "Extreme eigenvalues of the SimSiam Hessian: Lanczos vs the paper's power iteration",
     "experiments/bench_hessian.py"),
    ("bench_flow.md", "Gradient flow: adaptive diffrax vs fixed-step RK4", "experiments/bench_flow.py"),
    ("bench_train.md", "Training throughput: SimSiam ResNet-18 step, JAX vs PyTorch eager", "experiments/bench_train.py"),
    ("bench_forward.md", "Forward throughput: ViT-S/16 and ResNet-50 at 224 px, JAX vs PyTorch eager",
     "experiments/bench_forward.py"),
    ("bench_text.md", "MiniLM forward throughput, JAX vs PyTorch eager", "experiments/minilm_geometry.py"),
]


def main(root: str | pathlib.Path = ".") -> str:
    root = pathlib.Path(root)
    parts = ["# BENCHMARKS", "",
             "Every table below was printed by the script named in its section, run on this project's "
             "CPU machine (2 cores; no accelerator was lent to these runs), with the exact command "
             "given in the section. The machine was shared with other jobs while most of them ran, "
             "so wall times are indicative; each section states the load it saw.", ""]
    index, bodies = [], []
    for fname, title, script in ORDER:
        path = root / "docs" / fname
        if not path.exists():
            continue
        index.append(f"- [{title}](#{title.lower().replace(' ', '-')}) (`{script}`)")
        body = path.read_text().strip().splitlines()
        if body and body[0].startswith("# "):
            body = body[1:]
        body = ["#" + line if line.startswith("#") else line for line in body]  # nest under the section
        bodies.append("\n".join([f"## {title}", "", *body, ""]))
    text = "\n".join(parts + index + [""] + bodies)
    (root / "BENCHMARKS.md").write_text(text)
    return text


if __name__ == "__main__":
    main()
    print("wrote BENCHMARKS.md")
