"""Benchmark: adaptive Tsit5 vs fixed-step RK4 (sharpness step rule) on one gradient flow.

Problem (float64): full-batch MSE regression with a 4 -> 16 -> 16 -> 1 tanh MLP
(369 parameters, 32 points; the edge-of-stability test problem of
``tests/test_dynamics.py``), flow ``d theta/dt = -grad L`` from the same initialisation
to ``t1``. Reference: Tsit5 with ``rtol=1e-12, atol=1e-14``. Error:
``|theta(t1) - theta_ref(t1)|_2 / |theta_ref(t1)|_2``.

Rows: Tsit5 (PID controller) at several tolerances, and classical RK4 with the fixed
step of the edge-of-stability code, ``dt = c / lambda_max(H(theta_0))`` (``c = 1``,
plus ``c = 1/2`` and the same rule with the *largest* sharpness met along the
reference trajectory). Gradient evaluations are counted exactly at run time
(``count_evals=True``, a host callback per evaluation, in a separate run); wall time is
the median of ``--repeats`` compiled runs without counting, interleaved over the rows
(``experiments.benchmarks.harness``).

Usage::

    python -m experiments.bench_flow [--t1 50] [--repeats 3] [--out docs/bench_flow.md] [--force]
"""

from __future__ import annotations

import argparse

import jax

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
import numpy as np

from experiments.benchmarks import harness
from ssl_geometry import dynamics, heads


def problem(n: int = 32, width: int = 16):
    key = jax.random.PRNGKey(0)
    x = jax.random.normal(key, (n, 4), dtype=jnp.float64)
    y = jnp.sin(x @ jnp.array([1.0, -2.0, 0.5, 1.5]))[:, None] + 0.5 * jnp.cos(3 * x[:, :1])
    net = heads.mlp(4, (width, width), 1, activation="tanh", dtype=jnp.float64)
    p0 = net.init(jax.random.PRNGKey(1))["params"]

    def loss(p, batch, data):
        del batch  # full batch: the data is the dynamics' args
        xb, yb = data
        u, _ = net.apply({"params": p}, xb)
        return 0.5 * jnp.mean((u - yb) ** 2)

    return loss, p0, (x, y)


def flat(p):
    return np.concatenate([np.ravel(np.asarray(a)) for a in jax.tree_util.tree_leaves(p)])


def run(t1: float, repeats: int) -> tuple[list[dict], dict]:
    loss, p0, data = problem()
    save_at = np.linspace(0.0, t1, 11)
    sharp = jax.jit(lambda p, d: dynamics.sharpness(loss, p, d))
    lam0 = float(sharp(p0, data))
    ref = dynamics.gradient_flow(
        loss, p0, t1=t1, save_at=save_at, args=data, rtol=1e-12, atol=1e-14, max_steps=1_000_000
    )
    ref_sharp = jax.vmap(sharp, in_axes=(0, None))(ref.observed, data)
    lam_max_traj = float(jnp.max(ref_sharp))
    theta_ref = flat(ref.params)

    configs = [(f"Tsit5 rtol={r:g}", dict(solver="tsit5", rtol=r, atol=r * 1e-2)) for r in (1e-4, 1e-6, 1e-8)]
    configs += [
        ("RK4 dt=1/lambda_max(theta_0)", dict(solver="rk4", dt0=1.0 / lam0)),
        ("RK4 dt=0.5/lambda_max(theta_0)", dict(solver="rk4", dt0=0.5 / lam0)),
        ("RK4 dt=1/max_t lambda_max", dict(solver="rk4", dt0=1.0 / lam_max_traj)),
    ]
    counted = {
        name: dynamics.gradient_flow(
            loss, p0, t1=t1, save_at=[t1], args=data, count_evals=True, throw=False, max_steps=1_000_000, **kw
        )
        for name, kw in configs
    }
    runs = {}

    def solve(kw):
        return lambda: dynamics.gradient_flow(
            loss, p0, t1=t1, save_at=[t1], args=data, throw=False, max_steps=1_000_000, **kw
        )

    # interleaved rounds over the configurations (harness): every row sees the same load drift
    times = harness.interleave({name: solve(kw) for name, kw in configs}, repeats=repeats, warmup=1, results=runs)
    rows = []
    for name, _ in configs:
        tr = runs[name]
        err = np.linalg.norm(flat(tr.params) - theta_ref) / np.linalg.norm(theta_ref) if tr.ok else float("nan")
        rows.append(
            {
                "method": name,
                "status": tr.status,
                "steps": tr.n_steps,
                "grad evals": counted[name].n_grad_evals,
                "rel. error": err,
                "wall s (median)": float(np.median(times[name])),
                "t reached": tr.t_final,
            }
        )
    info = {
        "lambda_max(theta_0)": lam0,
        "max_t lambda_max (reference)": lam_max_traj,
        "reference steps": ref.n_steps,
        "t1": t1,
        "sharpness along reference": [float(s) for s in ref_sharp],
    }
    return rows, info


def table(rows: list[dict], info: dict) -> str:
    base = next(r for r in rows if r["method"] == "RK4 dt=1/lambda_max(theta_0)")
    lines = [
        "| method | status | steps | grad evals | evals / RK4(1/lambda_0) | rel. error at t1 | wall s | wall / RK4(1/lambda_0) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['method']} | {r['status']}"
            + (f" (t={r['t reached']:.3g})" if r["status"] != "successful" else "")
            + f" | {r['steps']} | {r['grad evals']} | {r['grad evals'] / base['grad evals']:.3g} | "
            f"{r['rel. error']:.2e} | {r['wall s (median)']:.4f} | {r['wall s (median)'] / base['wall s (median)']:.3g} |"
        )
    s = "\n".join(lines)
    s += (
        f"\n\nlambda_max(H) at theta_0 = {info['lambda_max(theta_0)']:.4g}; largest along the reference flow "
        f"= {info['max_t lambda_max (reference)']:.4g}; sharpness at t = 0, t1/10, ..., t1: "
        + ", ".join(f"{v:.3g}" for v in info["sharpness along reference"])
        + "."
    )
    r0 = next(r for r in rows if r["method"] == "RK4 dt=1/lambda_max(theta_0)")
    dt0 = 1.0 / info["lambda_max(theta_0)"]
    tsit = [r for r in rows if r["method"].startswith("Tsit5") and r["status"] == "successful"]
    s += (
        f"\n\nReading (computed from the rows above): along the reference flow the sharpness grows from "
        f"{info['lambda_max(theta_0)']:.3g} to {info['max_t lambda_max (reference)']:.3g}, so the fixed step "
        f"dt = 1/lambda_max(theta_0) = {dt0:.3g} ends with dt * lambda_max = "
        f"{dt0 * info['max_t lambda_max (reference)']:.3g}, beyond RK4's stability limit 2.785 on the negative "
        f"real axis; RK4 with that step ended with relative error {r0['rel. error']:.2e} "
        f"(status {r0['status']})."
    )
    if tsit:
        best = min(tsit, key=lambda r: r["grad evals"])
        s += (
            f" The cheapest Tsit5 row ({best['method']}) used {best['grad evals']} gradient evaluations "
            f"({best['grad evals'] / r0['grad evals']:.3g}x) for relative error {best['rel. error']:.2e}."
        )
    return s


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--t1", type=float, default=50.0)
    ap.add_argument("--out", type=str, default=None, help="write the table (markdown) here")
    harness.add_arguments(ap, repeats=3, warmup=1)
    a = ap.parse_args(argv)
    load0, cpu0 = harness.load_average(), harness.cpu_sample()
    rows, info = run(a.t1, a.repeats)
    md = table(rows, info)
    print(md)
    if a.out:
        body = (
            f"{__doc__.split('Usage::')[0].split(chr(10), 1)[1].strip()}\n\n"
            f"Float64; wall times are medians of {a.repeats} rounds interleaved over the rows.\n\n{md}\n"
        )
        harness.write_table(
            a.out,
            "Gradient flow: adaptive Tsit5 vs fixed-step RK4 (sharpness rule)",
            body,
            command=harness.command_line("experiments.bench_flow", argv),
            load_before=load0,
            cpu_start=cpu0,
            threshold=a.load_threshold,
            force=a.force,
        )
    return rows, info


if __name__ == "__main__":
    main()
