"""The PyTorch reference of ``experiments.bench_train``: the SimSiam ResNet-18 CIFAR step, eager.

The same model and loss as the JAX step (ResNet-18 with the CIFAR stem, projector 512 -> 2048 -> 2048 with
BatchNorm on both layers, predictor 2048 -> 512 -> 2048 with BatchNorm on the hidden layer, the two views the
batch and its horizontal flip made on the device, negative cosine with stop-gradient, SGD momentum 0.9, weight
decay 5e-4, float32), written in plain ``torch.nn`` with per-view passes (BatchNorm statistics per view).
"""

from __future__ import annotations

import numpy as np


def torch_runner(batch: int, seed: int = 0, threads: int | None = None):
    """PyTorch eager SimSiam ResNet-18 step (per-view passes); ``.run(n)`` runs ``n`` steps."""
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

    projector = nn.Sequential(
        nn.Linear(512, 2048, bias=False),
        nn.BatchNorm1d(2048),
        nn.ReLU(),
        nn.Linear(2048, 2048, bias=False),
        nn.BatchNorm1d(2048),
    )
    predictor = nn.Sequential(
        nn.Linear(2048, 512, bias=False), nn.BatchNorm1d(512), nn.ReLU(), nn.Linear(512, 2048, bias=False)
    )
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
        loss = -0.5 * (
            F.cosine_similarity(p1, z2.detach(), dim=-1).mean() + F.cosine_similarity(p2, z1.detach(), dim=-1).mean()
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    model.train()

    class Runner:
        impl, platform, device = f"pytorch {torch.__version__} eager", "cpu", "cpu"
        compile_s, flops_per_step = 0.0, float("nan")

        def run(self, n):
            for _ in range(n):
                self.last = step()

        def loss(self):
            return float(self.last.detach())

    r = Runner()
    r.threads = torch.get_num_threads()
    return r
