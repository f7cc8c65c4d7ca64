"""The problems of ``experiments/bench_hessian.py``: SimSiam's ``hess_{z1} L`` at a pseudo-collapsed point, in JAX and PyTorch.

Both problems are the authors' SimSiam heads (``experiments.py`` ``ProjectionHead``: bias-free,
Swish) as projector ``d -> width -> width`` and predictor ``width -> bottleneck -> width``, the
projector's weights times 0.1 (pseudo-collapse), and the loss ``losses.simsiam`` (symmetric
negative cosine with stop-gradient) as a function of the backbone features ``z1``:

* ``batch_norm=False`` -- ``ProjectionHead(use_bn=False)``, as the authors' Hessian tracker
  (``hessian_tracker.py``) runs it: ``L`` is a mean of per-sample terms, so ``hess_{z1} L`` is
  block-diagonal (``n`` blocks of ``d``); ``z1, z2`` independent standard normal stand-ins.
* ``batch_norm=True`` -- ``ProjectionHead(use_bn=True)`` (Linear, BatchNorm1d, activation, Linear,
  BatchNorm1d) in train mode, as the authors' collapse-dynamics ablation (``experiments.py``)
  trains six of its settings: BatchNorm's batch statistics couple the samples, so the Hessian is
  dense across the batch; ``z1`` standard normal, ``z2 = z1 + 0.1 xi`` (a second view).

:class:`TorchPaper` is the baseline in PyTorch: ``get_min_eigenvalue_hvp`` of the authors'
``hessian_tracker.py``, transcribed line for line (20 power steps, a Rayleigh quotient, 20 steps
on the shifted operator, a Rayleigh quotient: 42 double-backward HVPs), on the same weights and
point in float32.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ssl_geometry import curvature as cv
from ssl_geometry import heads, losses

__all__ = ["PAPER", "SMALL", "Problem", "TorchPaper", "authors_power_iteration", "torch_device"]

PAPER = dict(batch=256, dim=512, width=2048, bottleneck=512, activation="swish", scale=0.1)
SMALL = dict(batch=16, dim=32, width=64, bottleneck=16)


def _head(d_in, hidden, d_out, activation, batch_norm):
    """The authors' ``ProjectionHead(d_in, hidden, d_out, activation, use_bn=batch_norm)`` (bias-free)."""
    return heads.mlp(
        d_in,
        (hidden,),
        d_out,
        activation=activation,
        batch_norm=batch_norm,
        final_batch_norm=batch_norm,
        bias=False,
        dtype=jnp.float64,
    )


def _cast(tree, dtype):
    return jax.tree_util.tree_map(lambda x: x.astype(dtype), tree)


class Problem:
    """The benchmark's problem in float64 (reference) and float32 (the timed runs).

    ``loss(z1, params, z2)``; ``params = {"proj": variables, "pred": variables}``.
    """

    def __init__(
        self, batch, dim, width, bottleneck, activation="swish", scale=0.1, seed=0, *, batch_norm=False, view_noise=None
    ):
        self.batch, self.dim, self.seed, self.batch_norm = batch, dim, seed, batch_norm
        proj = _head(dim, width, width, activation, batch_norm)
        pred = _head(width, bottleneck, width, activation, batch_norm)
        kp, kq, k1, k2 = jax.random.split(jax.random.PRNGKey(seed), 4)
        params = {"proj": heads.scale_weights(proj.init(kp), scale), "pred": pred.init(kq)}
        z1 = jax.random.normal(k1, (batch, dim), jnp.float64)
        xi = jax.random.normal(k2, (batch, dim), jnp.float64)
        z2 = xi if view_noise is None else z1 + view_noise * xi
        train = batch_norm

        def loss(z1, params, z2):
            h1, _ = proj.apply(params["proj"], z1, train=train)
            h2, _ = proj.apply(params["proj"], z2, train=train)
            p1, _ = pred.apply(params["pred"], h1, train=train)
            p2, _ = pred.apply(params["pred"], h2, train=train)
            return losses.simsiam(p1, p2, h1, h2)

        self.loss, self.params64, self.z1_64, self.z2_64 = loss, params, z1, z2
        self.params32 = _cast(params, jnp.float32)
        self.z1_32, self.z2_32 = z1.astype(jnp.float32), z2.astype(jnp.float32)

    def args(self, dtype):
        """``(z1, params, z2)`` in ``dtype``."""
        if dtype == jnp.float64:
            return self.z1_64, self.params64, self.z2_64
        return self.z1_32, self.params32, self.z2_32

    def linearized(self, dtype=jnp.float32):
        z1, params, z2 = self.args(dtype)
        return cv.linearized_hvp(self.loss, z1, args=(params, z2))


def authors_power_iteration(torch, hvp, z, num_iterations=20):
    """``get_min_eigenvalue_hvp`` of the authors' ``hessian_tracker.py`` with ``hvp(v) = H v``: ``(lambda_min, lambda_max)``."""
    v = torch.randn_like(z)
    v = v / (torch.norm(v) + 1e-8)
    for _ in range(num_iterations):
        Hv = hvp(v)
        v = Hv / (torch.norm(Hv) + 1e-8)
    lambda_max = torch.sum(v * hvp(v))
    v_min = torch.randn_like(z)
    v_min = v_min / (torch.norm(v_min) + 1e-8)
    for _ in range(num_iterations):
        Hv = hvp(v_min)
        shifted_Hv = Hv - lambda_max * v_min
        v_min = shifted_Hv / (torch.norm(shifted_Hv) + 1e-8)
    lambda_min = torch.sum(v_min * hvp(v_min))
    return lambda_min.item(), lambda_max.item()


def torch_device(requested: str = "auto") -> str:
    """The device the PyTorch baseline runs on: ``"auto"`` is ``"cuda"`` when JAX runs on a GPU and PyTorch sees
    one (the two sides on the same kind of device), else ``"cpu"``; ``"cpu"`` and ``"cuda"`` are taken as given."""
    if requested not in ("auto", "cpu", "cuda"):
        raise ValueError(f"`torch_device` must be 'auto', 'cpu' or 'cuda'; got {requested!r}.")
    if requested != "auto":
        return requested
    import torch

    return "cuda" if jax.default_backend() == "gpu" and torch.cuda.is_available() else "cpu"


class TorchPaper:
    """The paper's tracker in PyTorch on the problem's weights and point (float32), the authors' modules.

    ``__call__`` builds the gradient graph (``create_graph=True``) and runs
    :func:`authors_power_iteration`: ``2 (steps + 1)`` HVPs. ``hvp_fn`` and ``grad_graph`` time the parts;
    on ``device="cuda"`` they wait for the GPU before returning (``__call__`` waits by reading the values),
    with TF32 off, so the products are full float32 as on the JAX side.
    """

    def __init__(self, pb: Problem, steps=20, threads=None, device="cpu"):
        import torch

        if threads:
            torch.set_num_threads(threads)
        if device == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
        self.torch, self.steps, self.device = torch, steps, device
        torch.manual_seed(pb.seed)
        self.proj = self._module(pb.params64["proj"], pb.batch_norm).to(device)
        self.pred = self._module(pb.params64["pred"], pb.batch_norm).to(device)
        self.z1 = torch.tensor(np.asarray(pb.z1_64, np.float32), device=device, requires_grad=True)
        self.z2 = torch.tensor(np.asarray(pb.z2_64, np.float32), device=device)

    def _sync(self, out):
        if self.device == "cuda":
            self.torch.cuda.synchronize()
        return out

    def _module(self, variables, batch_norm):
        nn = self.torch.nn
        (w1, w2) = (np.asarray(layer["w"], np.float32) for layer in variables["params"]["layers"])
        l1, l2 = nn.Linear(*w1.shape, bias=False), nn.Linear(*w2.shape, bias=False)
        with self.torch.no_grad():
            l1.weight.copy_(self.torch.tensor(w1.T))
            l2.weight.copy_(self.torch.tensor(w2.T))
        layers = (
            [l1]
            + ([nn.BatchNorm1d(w1.shape[1])] if batch_norm else [])
            + [nn.SiLU(), l2]
            + ([nn.BatchNorm1d(w2.shape[1])] if batch_norm else [])
        )
        return nn.Sequential(*layers).train()

    def loss(self):
        F = self.torch.nn.functional
        p1, p2 = self.proj(self.z1), self.proj(self.z2)  # the authors' names: p = projector, h = predictor
        h1, h2 = self.pred(p1), self.pred(p2)
        return 0.5 * (-(F.cosine_similarity(h1, p2.detach()).mean() + F.cosine_similarity(h2, p1.detach()).mean()))

    def grad_graph(self):
        (g,) = self.torch.autograd.grad(self.loss(), self.z1, create_graph=True)
        return self._sync(g)

    def hvp_fn(self):
        g = self.grad_graph()
        return lambda v: self._sync(self.torch.autograd.grad(g, self.z1, grad_outputs=v, retain_graph=True)[0])

    @property
    def num_hvps(self) -> int:
        return 2 * (self.steps + 1)

    def __call__(self):
        return authors_power_iteration(self.torch, self.hvp_fn(), self.z1, self.steps)
