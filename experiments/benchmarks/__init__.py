"""Benchmark infrastructure shared by ``experiments/bench_*.py``: the harness and the scaling scripts."""

__all__: list[str] = []
