"""Training throughput: the SimSiam ResNet-18 CIFAR step of ssl_geometry.trainer vs PyTorch eager.

The step (the authors' collapse recipe, docs/theory.md, section "The authors' experiments"):
ResNet-18 with the CIFAR stem, projector 512 -> 2048 -> 2048
(bias-free, BatchNorm on both layers, ReLU), predictor 2048 -> 512 -> 2048 (BatchNorm on the
hidden layer), two views per image (the batch and its horizontal flip, made on device in both
implementations so that data augmentation does not enter the comparison), SimSiam negative
cosine with stop-gradient, SGD momentum 0.9, weight decay 5e-4, float32. The JAX step is
``ssl_geometry.trainer.make_train_step`` jitted on a one-device mesh (it also trains the online
linear probe, a 512 x 10 matmul); the PyTorch step is the same model in plain torch.nn, eager
(``experiments/benchmarks/torch_simsiam.py``; the JAX steps are in ``experiments/benchmarks/jax_simsiam.py``).

Images/s counts images (each giving two views) per second, over ``--steps`` timed steps after
``--warmup`` untimed ones (JAX compilation happens in the warm-up). On an accelerator the script
also reports model FLOP utilisation: XLA's cost analysis of the compiled step (FLOPs per step)
times steps/s, divided by the device's peak (``--peak-tflops`` or a table of known devices).

    python -m experiments.bench_train --batches 64,256 --steps 3 --repeats 5   # CPU: JAX vs PyTorch, interleaved
    python -m experiments.bench_train --batches 64 --variants trainer,fused,torch  # + the fused-views step
    python -m experiments.bench_train --batches 256,512 --steps 20 --no-torch  # accelerator: throughput + MFU
    python -m experiments.bench_train --profile --batches 64             # where the step's time goes

JAX and PyTorch are timed interleaved (``experiments.benchmarks.harness``: one round = ``--steps``
steps of each implementation in turn, ``--repeats`` rounds after ``--warmup``); the table gives the
median images/s of each and the median and spread of the per-round ratio. Variants:

* ``trainer``: ``ssl_geometry.trainer.make_train_step`` (the library's step, with the probe);
* ``fused``: the same model and loss with both views concatenated into one backbone batch of
  ``2 n`` (one pass of larger convolutions). BatchNorm then normalises over both views together,
  which is *not* the paper's per-view statistics: measured to size the possible gain only;
* ``trainer_dp``: the library's step on a mesh over every device, the batch sharded;
* ``plain``: a minimal SimSiam step on the same models, without the online probe and metrics (their cost);
* ``torch``: PyTorch eager, per-view passes (the reference).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from experiments.benchmarks.jax_simsiam import host_batch, jax_plain, jax_trainer, models
from experiments.benchmarks.torch_simsiam import torch_runner

#: Dense peak TFLOP/s by jax device_kind substring (NVIDIA data sheets, SXM parts; sparsity figures are twice these).
#: JAX's float32 matmul/conv precision on Ampere+ GPUs is TF32, so TF32 is the denominator; FP32 is reported too.
PEAK_TFLOPS = {
    "H200": {"fp32": 67.0, "tf32": 494.7, "bf16": 989.5},
    "H100": {"fp32": 67.0, "tf32": 494.7, "bf16": 989.5},
    "A100": {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0},
}


def bench_jax(batch: int, steps: int, warmup: int, seed: int = 0) -> dict:
    """Throughput of the library's step alone (no interleaving): the row ``bench_scaling`` uses."""
    r = jax_trainer(batch, seed)
    r.run(warmup)
    t0 = time.perf_counter()
    r.run(steps)
    dt = time.perf_counter() - t0
    return {
        "impl": r.impl,
        "device": r.device,
        "platform": r.platform,
        "batch": batch,
        "steps": steps,
        "seconds": dt,
        "images_per_s": batch * steps / dt,
        "compile_s": r.compile_s,
        "flops_per_step": r.flops_per_step,
        "loss": r.loss(),
    }


VARIANTS = {
    "trainer": jax_trainer,
    "trainer_dp": lambda b, seed=0: jax_trainer(b, seed, all_devices=True),
    "plain": jax_plain,
    "fused": lambda b, seed=0: jax_plain(b, seed, fused=True),
    "torch": None,
}


def _mfu(row, flops_per_step, peak_tflops=None):
    """Add achieved TFLOP/s and MFU against the device's peaks (accelerators only)."""
    if row["platform"] == "cpu" or not np.isfinite(flops_per_step):
        return row
    achieved = flops_per_step * row["images_per_s"] / row["batch"]
    row["achieved_tflops"] = achieved / 1e12
    peaks = (
        {"given": peak_tflops}
        if peak_tflops
        else next((v for k, v in PEAK_TFLOPS.items() if k.lower() in row["device"].lower()), {})
    )
    for name, peak in peaks.items():
        row[f"mfu_vs_{name}"] = achieved / (peak * 1e12)
    return row


def measure(
    batch: int, variants, *, steps: int, repeats: int, warmup: int, seed=0, threads=None, peak_tflops=None
) -> dict:
    """Interleaved rounds of ``steps`` steps of each variant; rows per variant and ratios vs torch."""
    from experiments.benchmarks import harness

    runners = {}
    for v in variants:
        runners[v] = torch_runner(batch, seed, threads) if v == "torch" else VARIANTS[v](batch, seed)
    times = harness.interleave(
        {v: (lambda r=r: r.run(steps)) for v, r in runners.items()}, repeats=repeats, warmup=warmup
    )
    rows = []
    for v, r in runners.items():
        med = float(np.median(times[v]))
        row = {
            "variant": v,
            "impl": r.impl,
            "batch": batch,
            "platform": r.platform,
            "device": r.device,
            "images_per_s": batch * steps / med,
            "s_per_step": med / steps,
            "compile_s": r.compile_s,
            "flops_per_step": r.flops_per_step,
            "loss": r.loss(),
        }
        if "torch" in runners and v != "torch":
            st = harness.ratio_stats(times["torch"], times[v])  # torch time / jax time = jax speed-up
            row.update(
                {
                    "speed_vs_torch_median": st["median"],
                    "speed_vs_torch_q25": st["q25"],
                    "speed_vs_torch_q75": st["q75"],
                }
            )
        rows.append(_mfu(row, r.flops_per_step, peak_tflops))
    return {"batch": batch, "rows": rows, "times": times}


def profile(batch: int, *, repeats: int = 3, seed: int = 0) -> list[dict]:
    """Where the JAX step's time goes: its parts jitted and timed alone (median of ``repeats``).

    Parts: backbone forward (train-mode BatchNorm) of both views; backbone forward+backward;
    heads forward+backward on fixed features; the SGD update; the online probe's
    forward+backward; the whole minimal step. Times are seconds per call.
    """
    import jax
    import jax.numpy as jnp
    import optax

    from experiments.benchmarks import harness
    from ssl_geometry import losses

    bb, proj, pred = models()
    keys = jax.random.split(jax.random.PRNGKey(seed), 3)
    vb, vp, vq = bb.init(keys[0]), proj.init(keys[1]), pred.init(keys[2])
    x = jnp.asarray(host_batch(batch, seed)["images"])
    xs = jnp.concatenate([x, jnp.flip(x, axis=2)])
    h = jnp.ones((batch, 512), jnp.float32)
    stats = {c: v for c, v in vb.items() if c != "params"}

    bb_fwd = lambda p, x: bb.apply({"params": p, **stats}, x, train=True)[0]
    bb_loss = lambda p, x: jnp.sum(bb_fwd(p, x) ** 2)

    def heads_loss(pp, pq, h):
        sp, sq = ({c: v for c, v in vs.items() if c != "params"} for vs in (vp, vq))
        z1, z2 = (proj.apply({"params": pp, **sp}, hv, train=True)[0] for hv in (h, h[::-1]))
        p1 = pred.apply({"params": pq, **sq}, z1, train=True)[0]
        p2 = pred.apply({"params": pq, **sq}, z2, train=True)[0]
        return losses.simsiam(p1, p2, z1, z2)

    tx = optax.chain(optax.add_decayed_weights(5e-4), optax.sgd(0.05, momentum=0.9))
    opt = tx.init(vb["params"])
    probe = {"w": jnp.zeros((512, 10)), "b": jnp.zeros(10)}
    labels = jnp.asarray(host_batch(batch, seed)["labels"])

    probe_loss = lambda pr, h: jnp.mean(optax.softmax_cross_entropy_with_integer_labels(h @ pr["w"] + pr["b"], labels))

    def update(p, g, o):
        u, o = tx.update(g, o, p)
        return optax.apply_updates(p, u), o

    parts = {
        "backbone forward, 2 views": (jax.jit(lambda p: (bb_fwd(p, x), bb_fwd(p, x[:, :, ::-1]))), (vb["params"],)),
        "backbone forward, views fused (2n batch)": (jax.jit(bb_fwd), (vb["params"], xs)),
        "backbone forward+backward, 2 views": (
            jax.jit(lambda p: (jax.grad(bb_loss)(p, x), jax.grad(bb_loss)(p, x[:, :, ::-1]))),
            (vb["params"],),
        ),
        "heads forward+backward (projector + predictor, 2 views)": (
            jax.jit(jax.grad(heads_loss, argnums=(0, 1))),
            (vp["params"], vq["params"], h),
        ),
        "SGD momentum update (backbone params)": (jax.jit(update), (vb["params"], vb["params"], opt)),
        "online probe forward+backward": (jax.jit(jax.grad(probe_loss)), (probe, h)),
    }
    full = jax_plain(batch, seed)
    rows = []
    for name, (fn, args) in parts.items():
        fn(*args)
        jax.block_until_ready(fn(*args))
        ts = [harness.time_call(lambda: fn(*args))[0] for _ in range(repeats)]
        rows.append({"part": name, "s_per_call": float(np.median(ts))})
    full.run(1)
    ts = [harness.time_call(lambda: full.run(1))[0] for _ in range(repeats)]
    rows.append({"part": "whole minimal step (per-view, no probe)", "s_per_call": float(np.median(ts))})
    total = rows[-1]["s_per_call"]
    for r in rows:
        r["share_of_step"] = r["s_per_call"] / total
    return rows


def main(argv=None) -> dict:
    from experiments.benchmarks import harness
    from experiments.common import markdown_table

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", default="64,256", help="comma-separated batch sizes")
    ap.add_argument("--batch", type=int, default=None, help="one batch size (overrides --batches)")
    ap.add_argument("--steps", type=int, default=3, help="steps per timed round")
    ap.add_argument("--variants", default="trainer,torch", help=f"comma-separated, from {sorted(VARIANTS)}")
    ap.add_argument("--no-torch", action="store_true", help="drop the PyTorch variant")
    ap.add_argument("--profile", action="store_true", help="time the step's parts instead (JAX)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: os.cpu_count())")
    ap.add_argument("--peak-tflops", type=float, default=None, help="device peak for MFU (default: table)")
    ap.add_argument("--xla-flags", default=None, help="set XLA_FLAGS before JAX starts (e.g. CPU flags to try)")
    ap.add_argument("--json", default=None, help="also write the results to this file")
    ap.add_argument("--out", default="", help="markdown table to write (default: none)")
    harness.add_arguments(ap, repeats=3, warmup=1)
    args = ap.parse_args(argv)
    if args.xla_flags is not None:
        if "jax" in sys.modules and getattr(sys.modules["jax"], "devices", None):
            print("warning: JAX already imported; --xla-flags may not apply", file=sys.stderr)
        os.environ["XLA_FLAGS"] = args.xla_flags
    batches = [args.batch] if args.batch else [int(b) for b in args.batches.split(",") if b]
    if min(batches) < 2 or args.steps < 1 or args.warmup < 1:
        ap.error("batch sizes must be >= 2 (BatchNorm), --steps >= 1, --warmup >= 1 (JAX compiles in the warm-up)")
    variants = [v for v in args.variants.split(",") if v and not (args.no_torch and v == "torch")]
    if unknown := set(variants) - set(VARIANTS):
        ap.error(f"unknown variants {sorted(unknown)}; choose from {sorted(VARIANTS)}")
    load0, cpu0 = harness.load_average(), harness.cpu_sample()
    out = {"batches": {}}
    if args.profile:
        out["profile"] = rows = [{"batch": b, **r} for b in batches for r in profile(b, repeats=args.repeats)]
        body = markdown_table(rows, floatfmt=".4g")
    else:
        rows = []
        for b in batches:
            m = measure(
                b,
                variants,
                steps=args.steps,
                repeats=args.repeats,
                warmup=args.warmup,
                threads=args.threads or os.cpu_count(),
                peak_tflops=args.peak_tflops,
            )
            out["batches"][b] = m
            rows += m["rows"]
        cols = [
            c
            for c in (
                "variant",
                "batch",
                "device",
                "images_per_s",
                "s_per_step",
                "speed_vs_torch_median",
                "speed_vs_torch_q25",
                "speed_vs_torch_q75",
                "compile_s",
                "flops_per_step",
                "achieved_tflops",
                "mfu_vs_tf32",
                "mfu_vs_fp32",
                "mfu_vs_bf16",
                "mfu_vs_given",
                "loss",
            )
            if any(c in r for r in rows)
        ]
        body = (
            f"Interleaved: {args.repeats} rounds of {args.steps} steps per variant after {args.warmup} warm-up "
            f"round(s); speed_vs_torch = per-round torch time / variant time (median, quartiles).\n\n"
            + markdown_table(rows, cols, floatfmt=".4g")
        )
    out["load"] = {"before": load0, "after": harness.load_average(), "other_cpu_share": harness.other_cpu_share(cpu0)}
    print(body)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2, default=float)
    if args.out:
        harness.write_table(
            args.out,
            "Training step: SimSiam ResNet-18 CIFAR, JAX vs PyTorch eager",
            body,
            command=harness.command_line("experiments.bench_train", argv),
            load_before=load0,
            load_after=out["load"]["after"],
            other_share=out["load"]["other_cpu_share"],
            threshold=args.load_threshold,
            force=args.force,
        )
    return out


if __name__ == "__main__":
    main()
