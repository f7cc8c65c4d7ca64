"""Forward throughput (images/s): JAX ``jit`` vs PyTorch eager, same weights, same device.

Models: DINO ViT-S/16 and torchvision ResNet-50 at 224 px (``ssl_geometry.backbones``).
The PyTorch networks are built in the official key layouts (DINO ``vision_transformer.py``,
torchvision ``resnet.py``), randomly initialised, and converted to JAX with
:mod:`ssl_geometry.pretrained` (``vit_from_torch`` / ``resnet_from_torch``), so both sides
compute the same function; the script checks that (max relative difference of the outputs).

Timing (``experiments.benchmarks.harness``): JAX and PyTorch calls interleaved, ``--warmup`` untimed
rounds (JAX compiles in the first call, reported separately), then ``--repeats`` timed rounds; medians
and the per-round ratio's median and quartiles are reported. JAX: ``jax.jit`` of ``apply``, results waited for
with ``block_until_ready``. PyTorch: ``model.eval()`` under ``torch.no_grad()``, NCHW input,
``torch.get_num_threads()`` threads.

Usage::

    python -m experiments.bench_forward --batch 16 --repeats 5 --warmup 2 [--markdown docs/bench_forward.md]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def _torch_models():
    """PyTorch ViT-S/16 (DINO layout) and ResNet-50 (torchvision layout), without heads."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Attention(nn.Module):
        def __init__(self, dim, heads):
            super().__init__()
            self.heads, self.qkv, self.proj = heads, nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

        def forward(self, x):
            b, n, c = x.shape
            q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
            attn = ((q @ k.transpose(-2, -1)) * (c // self.heads) ** -0.5).softmax(dim=-1)
            return self.proj((attn @ v).transpose(1, 2).reshape(b, n, c))

    class Mlp(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.fc1, self.act, self.fc2 = nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)

        def forward(self, x):
            return self.fc2(self.act(self.fc1(x)))

    class Block(nn.Module):
        def __init__(self, dim, heads):
            super().__init__()
            self.norm1, self.attn = nn.LayerNorm(dim, eps=1e-6), Attention(dim, heads)
            self.norm2, self.mlp = nn.LayerNorm(dim, eps=1e-6), Mlp(dim)

        def forward(self, x):
            x = x + self.attn(self.norm1(x))
            return x + self.mlp(self.norm2(x))

    class PatchEmbed(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.proj = nn.Conv2d(3, dim, 16, 16)

        def forward(self, x):
            return self.proj(x).flatten(2).transpose(1, 2)

    class ViT(nn.Module):
        def __init__(self, dim=384, depth=12, heads=6):
            super().__init__()
            self.patch_embed = PatchEmbed(dim)
            self.cls_token = nn.Parameter(0.02 * torch.randn(1, 1, dim))
            self.pos_embed = nn.Parameter(0.02 * torch.randn(1, 197, dim))
            self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(depth)])
            self.norm = nn.LayerNorm(dim, eps=1e-6)

        def forward(self, x):
            t = self.patch_embed(x)
            t = torch.cat((self.cls_token.expand(t.shape[0], -1, -1), t), dim=1) + self.pos_embed
            for blk in self.blocks:
                t = blk(t)
            return self.norm(t)[:, 0]

    class Bottleneck(nn.Module):
        def __init__(self, inplanes, planes, stride=1, downsample=None):
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(inplanes, planes, 1, bias=False), nn.BatchNorm2d(planes)
            self.conv2, self.bn2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False), nn.BatchNorm2d(planes)
            self.conv3, self.bn3 = nn.Conv2d(planes, 4 * planes, 1, bias=False), nn.BatchNorm2d(4 * planes)
            self.relu, self.downsample = nn.ReLU(inplace=True), downsample

        def forward(self, x):
            idt = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            return self.relu(self.bn3(self.conv3(out)) + idt)

    class ResNet50(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64)
            self.relu, self.maxpool = nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)
            inplanes = 64
            for i, n in enumerate([3, 4, 6, 3]):
                planes, stride = 64 * 2**i, 1 if i == 0 else 2
                down = nn.Sequential(nn.Conv2d(inplanes, 4 * planes, 1, stride, bias=False), nn.BatchNorm2d(4 * planes))
                blocks = [Bottleneck(inplanes, planes, stride, down)] + [
                    Bottleneck(4 * planes, planes) for _ in range(n - 1)
                ]
                setattr(self, f"layer{i + 1}", nn.Sequential(*blocks))
                inplanes = 4 * planes

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)

    return {"vit_small16": ViT, "resnet50": ResNet50}


def bench(
    models=("vit_small16", "resnet50"), batch: int = 16, size: int = 224, reps: int = 5, warmup: int = 2, seed: int = 0
) -> list[dict]:
    """Time both frameworks on each model; return one row per model."""
    import jax
    import jax.numpy as jnp
    import torch

    from experiments.benchmarks import harness
    from ssl_geometry import pretrained

    torch.manual_seed(seed)
    builders = _torch_models()
    x = np.random.default_rng(seed).normal(size=(batch, size, size, 3)).astype(np.float32)
    x_t = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
    rows = []
    for name in models:
        tm = builders[name]().eval()
        state = {k: v.detach().numpy() for k, v in tm.state_dict().items()}
        if name == "vit_small16":
            model, variables = pretrained.vit_from_torch(state, patch=16, heads=6)
        else:
            model, variables = pretrained.resnet_from_torch(state, depth=50)
        fwd = jax.jit(lambda v, x: model.apply(v, x)[0])
        xj = jax.device_put(jnp.asarray(x))

        t0 = time.perf_counter()
        z = fwd(variables, xj).block_until_ready()
        compile_s = time.perf_counter() - t0

        def run_torch():
            with torch.no_grad():
                return tm(x_t)

        out = {}
        times = harness.interleave(
            {"jax": lambda: fwd(variables, xj), "torch": run_torch}, repeats=reps, warmup=warmup, results=out
        )
        z_t = out["torch"]
        st = harness.ratio_stats(times["torch"], times["jax"])  # torch time / jax time = JAX speed-up
        t_jax, t_torch = statistics.median(times["jax"]), statistics.median(times["torch"])
        err = float(np.max(np.abs(np.asarray(z) - z_t.numpy())) / np.max(np.abs(z_t.numpy())))
        rows.append(
            {
                "model": name,
                "batch": batch,
                "px": size,
                "jax_img_s": batch / t_jax,
                "torch_img_s": batch / t_torch,
                "ratio_jax_over_torch": st["median"],
                "ratio_q25": st["q25"],
                "ratio_q75": st["q75"],
                "jax_first_call_s": compile_s,
                "max_rel_diff": err,
            }
        )
    return rows


def main(argv=None) -> str:
    from experiments.benchmarks import harness
    from experiments.common import markdown_table

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--reps", type=int, dest="repeats", default=argparse.SUPPRESS, help="alias of --repeats")
    ap.add_argument("--models", default="vit_small16,resnet50")
    ap.add_argument("--markdown", default=None, help="write the table and command to this markdown file")
    harness.add_arguments(ap, repeats=5, warmup=2)
    args = ap.parse_args(argv)
    load0, cpu0 = harness.load_average(), harness.cpu_sample()
    rows = bench(tuple(args.models.split(",")), args.batch, args.size, args.repeats, args.warmup)
    table = markdown_table(rows, floatfmt=".3g")
    text = (
        "Same weights on both sides (random init in the official key layouts, converted with "
        "`ssl_geometry.pretrained`); `max_rel_diff` is the largest output difference relative to the "
        "largest PyTorch output. `jax_first_call_s` is the first JAX call (compilation + one run). "
        f"JAX and PyTorch calls interleaved over {args.repeats} rounds after {args.warmup} warm-up rounds; "
        "ratio = per-round PyTorch time / JAX time (median, quartiles), images/s from the medians.\n\n"
        f"{table}\n"
    )
    print(text)
    if args.markdown:
        harness.write_table(
            args.markdown,
            "Forward throughput: JAX jit vs PyTorch eager (CPU)",
            text,
            command=harness.command_line("experiments.bench_forward", argv),
            load_before=load0,
            cpu_start=cpu0,
            threshold=args.load_threshold,
            force=args.force,
        )
    return text


if __name__ == "__main__":
    main()
