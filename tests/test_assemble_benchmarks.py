"""BENCHMARKS.md opens with its findings, read from each report's own table (experiments/assemble_benchmarks.py)."""

from __future__ import annotations

from experiments import assemble_benchmarks as ab
from experiments.benchmarks import harness

ENV_CPU = {"device": "cpu:cpu", "processor": "x86_64", "cpu_count": 2, "python": "3", "versions": {"jax": "0"}}
ENV_GPU = {"device": "gpu:NVIDIA H200", "processor": "x86_64", "cpu_count": 16, "python": "3", "versions": {"jax": "0"}}

HESSIAN = """Problem `coupled`: batch 256, measured block coupling 0.16046544040940405. JAX on cpu.

| method | signs | ratio |
|---|---|---|
| the paper's 20-step power iteration, PyTorch float32 (42 HVPs) | **wrong** | 1.00 |
| curvature.hessian_extremes (full Lanczos, error bound gap), float32, tol 0.0001 | ok | 0.7701234 (0.643-0.835) |
"""

FORWARD = """| model | batch | ratio_jax_over_torch |
|---|---|---|
| vit_small16 | 16 | 0.92612 |
| resnet50 | 16 | 1.0512 |
"""


def _write(docs, name, body, env):
    harness.write_table(
        docs / name,
        "T",
        body,
        command="python -m x --out docs/x.md",
        load_before=0.5,
        load_after=0.5,
        threshold=2,
        env=env,
    )


def test_findings_come_first_with_ratio_machine_and_4_digits(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    _write(docs, "bench_hessian_h200.md", HESSIAN, ENV_GPU)
    _write(docs, "bench_forward.md", FORWARD, ENV_CPU)
    _write(docs, "bench_text.md", "| other | table |\n|---|---|\n| 1 | 2 |\n", ENV_CPU)
    text, _ = ab.assemble(tmp_path)
    head = text.split("\n## ", 2)[1].split("Every table below")[0]  # the Findings, before the index
    assert head.startswith("Findings")
    lines = [line for line in head.splitlines() if line.startswith("- ")]
    assert lines == [
        "- `curvature.hessian_extremes` (full Lanczos, error bound gap) against the paper's 20-step power iteration, "
        "problem `coupled`: time ours / theirs 0.7701 (0.643-0.835), signs ok vs wrong; NVIDIA H200 (gpu)",
        "- forward throughput against PyTorch eager: PyTorch time / JAX time (median) 0.9261 (model vit_small16, "
        "batch 16), 1.051 (model resnet50, batch 16); cpu, x86_64, 2 CPU cores",
        "- `docs/bench_text.md`: no comparison table to read a finding from",
    ]
    # long floats in prose print to 4 significant digits; table rows and the command are kept
    assert "measured block coupling 0.1605." in text and "0.16046544040940405" not in text
    assert "| 0.7701234 (0.643-0.835) |" in text and "python -m x --out docs/x.md" in text


def test_sig4_and_the_dry_run_total():
    assert [ab.sig4(x) for x in (0.16046544040940405, 1779.5, 2.0, 1.43e-01)] == ["0.1605", "1780", "2", "0.143"]
    table = (
        "| experiment | status | projected full run |\n|---|---|---|\n| a | ran | 2 h |\n| b | ran | 10.5 h |\n\n"
        "| experiment | status | projected full run |\n|---|---|---|\n| a | ran | 7 h |\n| c | skipped | - |\n"
    )
    # the first row of an experiment is its latest: a = 2 h (not 7), c has no projection
    assert ab._find_dry_run(table) == [
        "paper variants projected from dry runs (latest row of each): 12.5 h in all over 2 runs, the longest 10.5 h (b)"
    ]
