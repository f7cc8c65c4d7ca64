"""Benchmark: one 3x3 convolution's forward, input gradient and weight gradient, XLA:CPU vs PyTorch (oneDNN).

    python -m experiments.bench_conv [--batch 128] [--out docs/bench_conv.md]

Where the SimSiam ResNet-18 step's time goes on a CPU (``bench_train.py --profile``: the backbone's
forward + backward is the whole step) is decided by the convolutions. This script times the three
convolutions of one layer's training step at the ResNet-18 CIFAR shapes (``NHWC``/``HWIO``, float32,
stride 1, padding 1): JAX ``lax.conv_general_dilated`` forward, its VJP's input gradient (``dx``) and
weight gradient (``dw``), each jitted alone; PyTorch ``conv2d`` forward and its backward (``dx`` and
``dw`` together, as autograd runs them). Rounds interleaved by :mod:`experiments.benchmarks.harness`.
``ratio_*`` = PyTorch time / JAX time (above 1: JAX faster).
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

#: (spatial size, channels) of the four ResNet-18 CIFAR stages.
LAYERS = ((32, 64), (16, 128), (8, 256), (4, 512))


def bench(batch: int = 128, repeats: int = 5, warmup: int = 1, layers=LAYERS, dtype: str = "float32") -> list[dict]:
    """One row per layer: JAX fwd / dx / dw and PyTorch fwd / bwd medians (s) and the ratios (``dtype``: both sides)."""
    import jax
    import jax.numpy as jnp
    import torch
    from jax import lax

    from experiments.benchmarks import harness

    dn = ("NHWC", "HWIO", "NHWC")
    rows = []
    for size, ch in layers:
        rng = np.random.default_rng(0)
        x = rng.normal(size=(batch, size, size, ch)).astype(np.float32)
        w = (rng.normal(size=(3, 3, ch, ch)) * 0.05).astype(np.float32)

        def conv(x, w):
            return lax.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1)), dimension_numbers=dn)

        xj, wj = jnp.asarray(x, dtype), jnp.asarray(w, dtype)
        g = jnp.ones((batch, size, size, ch), dtype)
        fwd = jax.jit(conv)
        dx = jax.jit(lambda x, w, g: jax.vjp(conv, x, w)[1](g)[0])
        dw = jax.jit(lambda x, w, g: jax.vjp(conv, x, w)[1](g)[1])
        tdt = getattr(torch, dtype)
        xt = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2))).to(tdt).requires_grad_(True)
        wt = torch.from_numpy(np.ascontiguousarray(w.transpose(3, 2, 0, 1))).to(tdt).requires_grad_(True)
        gt = torch.ones(batch, ch, size, size, dtype=tdt)

        def t_fwd():
            with torch.no_grad():
                return torch.nn.functional.conv2d(xt, wt, padding=1)

        def t_bwd():
            y = torch.nn.functional.conv2d(xt, wt, padding=1)
            xt.grad = wt.grad = None
            y.backward(gt)
            return wt.grad

        out = {}
        times = harness.interleave(
            {
                "jax_fwd": lambda: fwd(xj, wj),
                "jax_dx": lambda: dx(xj, wj, g),
                "jax_dw": lambda: dw(xj, wj, g),
                "torch_fwd": t_fwd,
                "torch_bwd": t_bwd,
            },
            repeats=repeats,
            warmup=warmup,
            results=out,
        )
        med = {k: statistics.median(v) for k, v in times.items()}
        dw_t = out["torch_bwd"].float().numpy().transpose(2, 3, 1, 0)
        err = float(np.max(np.abs(np.asarray(out["jax_dw"], np.float32) - dw_t)) / np.max(np.abs(dw_t)))
        rows.append(
            {
                "layer": f"{size}x{size}x{ch}",
                "batch": batch,
                "dtype": dtype,
                **{f"{k}_s": v for k, v in med.items()},
                "jax_dw_over_fwd": med["jax_dw"] / med["jax_fwd"],
                "ratio_fwd": med["torch_fwd"] / med["jax_fwd"],
                "ratio_bwd": med["torch_bwd"] / (med["jax_dx"] + med["jax_dw"]),
                "dw_rel_diff": err,
            }
        )
    return rows


def main(argv=None) -> str:
    from experiments.benchmarks import harness
    from experiments.common import markdown_table

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--dtypes", default="float32,bfloat16", help="comma-separated: float32, bfloat16")
    ap.add_argument("--out", default=None, help="markdown file to write")
    harness.add_arguments(ap, repeats=5, warmup=1)
    args = ap.parse_args(argv)
    load0, cpu0 = harness.load_average(), harness.cpu_sample()
    rows = [r for dt in args.dtypes.split(",") for r in bench(args.batch, args.repeats, args.warmup, dtype=dt.strip())]
    text = (
        "3x3 convolution, stride 1, padding 1, batch "
        f"{args.batch} (one view of a batch-128 step). "
        "`ratio_bwd` = PyTorch backward (dx + dw) / (JAX dx + JAX dw); `jax_dw_over_fwd`: XLA's weight-gradient "
        "convolution against its forward (a direct convolution does the same FLOPs in each). `dw_rel_diff`: "
        "largest weight-gradient difference relative to PyTorch's largest entry.\n\n"
        + markdown_table(rows, floatfmt=".3g")
        + "\n"
    )
    print(text)
    if args.out:
        harness.write_table(
            args.out,
            "One convolution's three passes: XLA:CPU vs PyTorch (CPU)",
            text,
            command=harness.command_line("experiments.bench_conv", argv),
            load_before=load0,
            cpu_start=cpu0,
            threshold=args.load_threshold,
            force=args.force,
        )
    return text


if __name__ == "__main__":
    main()
