"""Scaling tables: how the cost of each instrument grows, with log-log fits of the exponent.

Four tables (each a log-log figure with the least-squares exponent ``p`` of ``cost ~ size^p``):

* ``lanczos``: blockwise Lanczos (``bench_hessian.ours``: float32, linearised HVP, tol 1e-4) on
  the SimSiam head of ``bench_hessian`` (width ``--width``, bottleneck ``--bottleneck``) against
  batch ``n`` at fixed ``d`` and against ``d`` at fixed ``n``; wall time, HVP count, s/HVP.
* ``dense``: dense ``geometry.effective_hessian`` (the three matrices) + ``eigvalsh`` against
  the matrix-free path (``geometry.effective_hvp_operator`` + ``curvature.extreme_eigenvalues``,
  float64, tol 1e-8) on a small sample-wise head, against the dimension ``P = n d``; the
  crossing ``P`` where the matrix-free path becomes cheaper (log-log interpolation).
* ``train``: ``bench_train.bench_jax`` (the SimSiam ResNet-18 step of the trainer) against batch.
* ``flow``: ``dynamics.gradient_flow`` (Tsit5, rtol 1e-6) on ``bench_flow.problem`` against the
  horizon ``t1`` and a stiffness factor ``s`` (the loss multiplied by ``s``, so the Hessian is
  ``s`` times larger); gradient evaluations counted exactly and wall time.

Sizes come from ``--preset`` (``cpu``: minutes on 2 cores; ``smoke``: seconds, for the CPU dry run
of the device script; ``gpu``: n d up to 1e6) or the per-table options. Wall times are medians of
``--repeats`` warm runs; on a loaded machine they are indicative only (the header says the load).

Usage::

    python -m experiments.bench_scaling --preset cpu --out docs/bench_scaling.md
    python -m experiments.bench_scaling --preset smoke --tables lanczos,dense,flow --out ''
"""

from __future__ import annotations

import argparse
import math
import os
import pathlib
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp
import numpy as np

from experiments.benchmarks import harness
from experiments.benchmarks.scaling_report import crossing as crossing
from experiments.benchmarks.scaling_report import exponents as exponents
from experiments.benchmarks.scaling_report import figures as figures
from experiments.benchmarks.scaling_report import fit_exponent as fit_exponent
from experiments.benchmarks.scaling_report import report as report
from experiments.benchmarks.scaling_report import tables_from_markdown as tables_from_markdown

PRESETS = {
    "smoke": {
        "lanczos_n": [4, 8],
        "lanczos_d": [8, 16],
        "lanczos_fixed_n": 4,
        "lanczos_fixed_d": 8,
        "width": 16,
        "bottleneck": 8,
        "dense_P": [8, 32],
        "train_batches": [],
        "flow_t1": [0.5, 1.0],
        "flow_stiffness": [1.0, 2.0],
        "repeats": 1,
    },
    "cpu": {
        "lanczos_n": [8, 64, 512, 2048, 8192],
        "lanczos_d": [128, 256, 512, 1024, 2048],
        "lanczos_fixed_n": 512,
        "lanczos_fixed_d": 128,
        "width": 512,
        "bottleneck": 128,
        "dense_P": [8, 16, 64, 256, 512, 1024],
        "train_batches": [16, 32, 64],
        "flow_t1": [5.0, 10.0, 20.0, 40.0],
        "flow_stiffness": [1.0, 4.0, 16.0, 64.0],
        "repeats": 3,
    },
    "gpu": {
        "lanczos_n": [8, 64, 512, 2048],
        "lanczos_d": [128, 256, 512, 1024],
        "lanczos_fixed_n": 256,
        "lanczos_fixed_d": 512,
        "width": 2048,
        "bottleneck": 512,
        "dense_P": [64, 256, 1024, 2048],
        "train_batches": [64, 128, 256, 512],
        "flow_t1": [5.0, 10.0, 20.0, 40.0],
        "flow_stiffness": [1.0, 4.0, 16.0, 64.0],
        "repeats": 3,
    },
}


def _median_time(fn, repeats):
    harness.time_call(fn)  # warm-up (compilation)
    times, out = [], None
    for _ in range(repeats):
        dt, out = harness.time_call(fn)
        times.append(dt)
    return float(np.median(times)), out


# ----------------------------------------------------------------------------- tables


def lanczos_table(cfg) -> list[dict]:
    """Blockwise Lanczos time, HVP count and s/HVP against n (fixed d) and d (fixed n)."""
    from experiments import bench_hessian as bh
    from ssl_geometry import curvature as cv

    points = [("n", n, cfg["lanczos_fixed_d"]) for n in cfg["lanczos_n"]]
    points += [("d", cfg["lanczos_fixed_n"], d) for d in cfg["lanczos_d"]]
    rows, done = [], {}
    for axis, n, d in points:
        if (n, d) not in done:  # a point on both series is measured once
            pb = bh.Problem(n, d, cfg["width"], cfg["bottleneck"])
            wall, (lo, hi, res) = _median_time(lambda: bh.ours(pb), cfg["repeats"])
            lin = cv.linearized_hvp(pb.loss, pb.z1_32, args=(pb.params32, pb.z2_32))
            mv = jax.jit(cv.apply_linear)
            hvp_s, _ = _median_time(lambda: mv(pb.z1_32, lin), cfg["repeats"])
            done[(n, d)] = {
                "n": n,
                "d": d,
                "n*d": n * d,
                "wall_s": wall,
                "hvps": res.num_steps,
                "s_per_hvp": hvp_s,
                "converged": res.converged,
                "lambda_min": lo,
                "lambda_max": hi,
            }
        rows.append({"series": f"vary {axis}", **done[(n, d)]})
    return rows


def dense_table(cfg) -> list[dict]:
    """Dense effective Hessian (+ eigvalsh) vs matrix-free Lanczos against the dimension P = n d."""
    from ssl_geometry import curvature as cv
    from ssl_geometry import geometry

    d, k = 8, 16
    W1 = jax.random.normal(jax.random.PRNGKey(0), (d, k), jnp.float64) / math.sqrt(d)
    W2 = jax.random.normal(jax.random.PRNGKey(1), (k, k), jnp.float64) / math.sqrt(k)
    head = lambda z: jnp.tanh(z @ W1) @ W2  # sample-wise, so per_sample applies
    loss = lambda u: -jnp.mean(jnp.sum(u * jnp.roll(u, 1, axis=0), axis=1) / (1e-3 + jnp.sum(u**2, axis=1)))
    rows = []
    for P in cfg["dense_P"]:
        n = max(P // d, 1)
        z = jax.random.normal(jax.random.PRNGKey(2), (n, d), jnp.float64)

        def dense():
            h = geometry.effective_hessian(head, loss, z)
            return np.linalg.eigvalsh(np.asarray(h.full))[[0, -1]]

        mv, args = geometry.effective_hvp_operator(head, loss, z)

        def free():
            r = cv.extreme_eigenvalues(
                mv, n * d, args=args, options=cv.SolverOptions(tol=1e-8, num_steps=min(n * d, 200))
            )
            return np.array([r.smallest[0], r.largest[0]])

        t_dense, ev_dense = _median_time(dense, cfg["repeats"])
        t_free, ev_free = _median_time(free, cfg["repeats"])
        rows.append(
            {
                "P": n * d,
                "dense_s": t_dense,
                "matrix_free_s": t_free,
                "ratio_free_over_dense": t_free / t_dense,
                "max_rel_diff": float(np.max(np.abs(ev_free - ev_dense) / np.abs(ev_dense))),
            }
        )
    return rows


def train_table(cfg) -> list[dict]:
    """Trainer step throughput against batch size (``bench_train.bench_jax``)."""
    from experiments import bench_train

    rows = []
    for b in cfg["train_batches"]:
        r = bench_train.bench_jax(b, steps=cfg.get("train_steps", 3), warmup=1)
        rows.append(
            {
                "batch": b,
                "s_per_step": r["seconds"] / r["steps"],
                "images_per_s": r["images_per_s"],
                "compile_s": r["compile_s"],
                "flops_per_step": r["flops_per_step"],
            }
        )
    return rows


def flow_table(cfg) -> list[dict]:
    """Tsit5 gradient-flow cost against the horizon t1 (s = 1) and the stiffness s (t1 = first horizon)."""
    from experiments.bench_flow import problem
    from ssl_geometry import dynamics

    loss, p0, data = problem()
    points = [("t1", t1, 1.0) for t1 in cfg["flow_t1"]] + [("s", cfg["flow_t1"][0], s) for s in cfg["flow_stiffness"]]

    def scaled(p, batch, a):  # a = (data, s): the stiffness travels as data, one function object for all points
        return a[1] * loss(p, batch, a[0])

    rows, done = [], {}
    for axis, t1, s in points:
        if (t1, s) not in done:
            kw = dict(
                t1=t1, save_at=[t1], args=(data, jnp.asarray(s)), rtol=1e-6, atol=1e-8, max_steps=1_000_000, throw=False
            )
            counted = dynamics.gradient_flow(scaled, p0, count_evals=True, **kw)
            wall, _ = _median_time(lambda: dynamics.gradient_flow(scaled, p0, **kw).params, cfg["repeats"])
            done[(t1, s)] = {
                "t1": t1,
                "stiffness": s,
                "grad_evals": counted.n_grad_evals,
                "steps": counted.n_steps,
                "wall_s": wall,
                "status": counted.status,
            }
        rows.append({"series": f"vary {axis}", **done[(t1, s)]})
    return rows


TABLES = {"lanczos": lanczos_table, "dense": dense_table, "train": train_table, "flow": flow_table}


def run(preset="cpu", tables=("lanczos", "dense", "train", "flow"), **overrides) -> dict:
    """``{table: rows}`` for the named tables at the preset's sizes (``overrides`` replace preset keys)."""
    if preset not in PRESETS:
        raise ValueError(f"`preset` must be one of {sorted(PRESETS)}; got {preset!r}.")
    unknown = set(tables) - set(TABLES)
    if unknown:
        raise ValueError(f"unknown tables {sorted(unknown)}; choose from {sorted(TABLES)}.")
    cfg = {**PRESETS[preset], **{k: v for k, v in overrides.items() if v is not None}}
    out = {}
    for name in tables:
        t0 = time.perf_counter()
        out[name] = TABLES[name](cfg)
        print(f"[scaling] {name}: {len(out[name])} points in {time.perf_counter() - t0:.1f} s", flush=True)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    ap.add_argument("--tables", default="lanczos,dense,train,flow")
    ap.add_argument("--train-batches", default=None, help="comma-separated batch sizes (overrides the preset)")
    ap.add_argument("--out", default="docs/bench_scaling.md", help="markdown file ('' to skip)")
    ap.add_argument("--fig-dir", default=None, help="figures directory (default: next to --out, bench_scaling/)")
    ap.add_argument(
        "--redraw",
        action="store_true",
        help="redraw the figures from the tables already in --out (no benchmark is run)",
    )
    harness.add_arguments(ap, repeats=3, warmup=1)
    args = ap.parse_args(argv)
    if args.redraw:
        out = pathlib.Path(args.out)
        fig_dir = pathlib.Path(args.fig_dir) if args.fig_dir else out.parent / "bench_scaling"
        return figures(tables_from_markdown(out.read_text()), fig_dir)
    load0, cpu0 = harness.load_average(), harness.cpu_sample()
    tb = [int(b) for b in args.train_batches.split(",") if b] if args.train_batches else None
    tables = run(
        args.preset,
        tuple(t for t in args.tables.split(",") if t),
        train_batches=tb,
        repeats=args.repeats if args.repeats != 3 else None,
    )
    out = pathlib.Path(args.out) if args.out else None
    fig_dir = pathlib.Path(args.fig_dir) if args.fig_dir else ((out.parent / "bench_scaling") if out else None)
    figs = figures(tables, fig_dir) if fig_dir else []
    body = report(tables, figs, out.parent if out else None)
    print(body)
    if out:
        harness.write_table(
            out,
            "Scaling of the instruments' cost",
            body,
            command=harness.command_line("experiments.bench_scaling", argv),
            load_before=load0,
            cpu_start=cpu0,
            threshold=args.load_threshold,
            force=args.force,
        )
    return tables


if __name__ == "__main__":
    main()
