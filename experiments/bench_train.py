"""Training throughput: the SimSiam ResNet-18 CIFAR step of ssl_geometry.trainer vs PyTorch eager.

The step (DESIGN.md section 3): ResNet-18 with the CIFAR stem, projector 512 -> 2048 -> 2048
(bias-free, BatchNorm on both layers, ReLU), predictor 2048 -> 512 -> 2048 (BatchNorm on the
hidden layer), two views per image (the batch and its horizontal flip, made on device in both
implementations so that data augmentation does not enter the comparison), SimSiam negative
cosine with stop-gradient, SGD momentum 0.9, weight decay 5e-4, float32. The JAX step is
``ssl_geometry.trainer.make_train_step`` jitted on a one-device mesh (it also trains the online
linear probe, a 512 x 10 matmul); the PyTorch step is the same model written below, eager.

Images/s counts images (each giving two views) per second, over ``--steps`` timed steps after
``--warmup`` untimed ones (JAX compilation happens in the warm-up). On an accelerator the script
also reports model FLOP utilisation: XLA's cost analysis of the compiled step (FLOPs per step)
times steps/s, divided by the device's peak (``--peak-tflops`` or a table of known devices).

    python experiments/bench_train.py --batch 32 --steps 5            # CPU: JAX vs PyTorch
    python experiments/bench_train.py --batch 256 --steps 20 --no-torch   # accelerator
"""
from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

# Dense peak TFLOP/s (no sparsity, vendor data sheets; SXM parts) by jax device_kind substring.
# JAX's default matmul/conv precision for float32 on NVIDIA Ampere+ GPUs is TF32, so the TF32
# peak is the relevant denominator there; the FP32 (non-tensor-core) figure is also reported.
PEAK_TFLOPS = {"H200": {"fp32": 67.0, "tf32": 494.7}, "H100": {"fp32": 67.0, "tf32": 494.7},
               "A100": {"fp32": 19.5, "tf32": 156.0}}


def bench_jax(batch: int, steps: int, warmup: int, seed: int = 0) -> dict:
    import jax
    import jax.numpy as jnp

    from ssl_geometry import backbones, heads, objectives, trainer

    bb = backbones.resnet18_cifar()
    proj = heads.simsiam_projector(512, 2048)
    pred = heads.simsiam_predictor(2048, 512)
    obj = objectives.make_objective("simsiam", bb, proj, pred, augment=lambda k, x: (x, jnp.flip(x, axis=2)))
    tx, sched = trainer.make_optimizer({"name": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4,
                                        "schedule": "constant"}, warmup + steps, batch)
    mesh = trainer.make_mesh(1, 1, jax.devices()[:1])
    state = trainer.place_state(trainer.init_train_state(obj, tx, jax.random.PRNGKey(seed), 10), mesh)
    step = trainer.jit_train_step(trainer.make_train_step(obj, tx, sched), mesh, state)
    rng = np.random.default_rng(seed)
    host = {"images": rng.uniform(0, 1, (batch, 32, 32, 3)).astype(np.float32),
            "labels": rng.integers(0, 10, batch).astype(np.int32)}
    data = trainer.place_batch(host, mesh)
    t0 = time.perf_counter()
    compiled = step.lower(state, data).compile()
    compile_s = time.perf_counter() - t0
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    flops = float(cost.get("flops", float("nan"))) if cost else float("nan")
    for _ in range(warmup):
        state, m = compiled(state, data)
    jax.block_until_ready(state)
    t0 = time.perf_counter()
    for _ in range(steps):
        state, m = compiled(state, data)
    jax.block_until_ready(state)
    dt = time.perf_counter() - t0
    loss = float(m["loss"])
    if not np.isfinite(loss):
        raise FloatingPointError(f"JAX benchmark loss is {loss}")
    dev = jax.devices()[0]
    return {"impl": "jax (ssl_geometry.trainer, jit)", "device": dev.device_kind, "platform": dev.platform,
            "batch": batch, "steps": steps, "seconds": dt, "images_per_s": batch * steps / dt,
            "compile_s": compile_s, "flops_per_step": flops, "loss": loss}


def bench_torch(batch: int, steps: int, warmup: int, seed: int = 0, threads: int | None = None) -> dict:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.manual_seed(seed)
    if threads:
        torch.set_num_threads(threads)

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return F.relu(out + (x if self.down is None else self.down(x)))

    class ResNet18Cifar(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            layers, cin = [], 64
            for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
                layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
                cin = cout
            self.layers = nn.Sequential(*layers)

        def forward(self, x):
            return torch.flatten(F.adaptive_avg_pool2d(self.layers(F.relu(self.bn1(self.conv1(x)))), 1), 1)

    projector = nn.Sequential(nn.Linear(512, 2048, bias=False), nn.BatchNorm1d(2048), nn.ReLU(),
                              nn.Linear(2048, 2048, bias=False), nn.BatchNorm1d(2048))
    predictor = nn.Sequential(nn.Linear(2048, 512, bias=False), nn.BatchNorm1d(512), nn.ReLU(),
                              nn.Linear(512, 2048, bias=False))
    backbone = ResNet18Cifar()
    model = nn.ModuleList([backbone, projector, predictor])
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    rng = np.random.default_rng(seed)
    x = torch.from_numpy(rng.uniform(0, 1, (batch, 3, 32, 32)).astype(np.float32))

    def step():
        x1, x2 = x, torch.flip(x, dims=(3,))
        z1 = projector(backbone(x1))
        z2 = projector(backbone(x2))
        p1, p2 = predictor(z1), predictor(z2)
        loss = -0.5 * (F.cosine_similarity(p1, z2.detach(), dim=-1).mean()
                       + F.cosine_similarity(p2, z1.detach(), dim=-1).mean())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    model.train()
    for _ in range(warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    dt = time.perf_counter() - t0
    return {"impl": f"pytorch {torch.__version__} eager", "device": "cpu", "platform": "cpu",
            "threads": torch.get_num_threads(), "batch": batch, "steps": steps, "seconds": dt,
            "images_per_s": batch * steps / dt, "loss": float(loss.detach())}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--no-torch", action="store_true", help="skip the PyTorch eager baseline")
    ap.add_argument("--peak-tflops", type=float, default=None, help="device peak for MFU (default: table)")
    ap.add_argument("--json", default=None, help="also write the results to this file")
    args = ap.parse_args(argv)
    if args.batch < 2 or args.steps < 1 or args.warmup < 1:
        ap.error("--batch must be >= 2 (BatchNorm), --steps >= 1, --warmup >= 1 (JAX warm-up)")
    out = {"jax": bench_jax(args.batch, args.steps, args.warmup)}
    j = out["jax"]
    if j["platform"] != "cpu" and np.isfinite(j["flops_per_step"]):
        achieved = j["flops_per_step"] * args.steps / j["seconds"]
        j["achieved_tflops"] = achieved / 1e12
        peaks = {"given": args.peak_tflops} if args.peak_tflops else next(
            (v for k, v in PEAK_TFLOPS.items() if k.lower() in j["device"].lower()), {})
        for name, peak in peaks.items():
            j[f"mfu_vs_{name}"] = achieved / (peak * 1e12)
    if not args.no_torch:
        out["torch"] = bench_torch(args.batch, args.steps, args.warmup, threads=os.cpu_count())
        if j["platform"] == "cpu":
            out["ratio_jax_over_torch"] = j["images_per_s"] / out["torch"]["images_per_s"]
    for k, v in out.items():
        print(k, json.dumps(v, default=float) if isinstance(v, dict) else f"{v:.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2, default=float)
    return out


if __name__ == "__main__":
    main()
