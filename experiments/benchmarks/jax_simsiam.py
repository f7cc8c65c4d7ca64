"""The JAX steps of ``experiments.bench_train``: the SimSiam ResNet-18 CIFAR step of the library's trainer, and a
minimal step on the same models (per-view or with the views fused), each compiled with its state.

JAX is imported inside the functions: ``bench_train`` sets ``XLA_FLAGS`` from its command line before the first
import of jax. The PyTorch reference is ``experiments/benchmarks/torch_simsiam.py``.
"""

from __future__ import annotations

import time

import numpy as np

__all__ = ["JaxRunner", "host_batch", "jax_plain", "jax_trainer", "models"]


class JaxRunner:
    """A compiled JAX step with its state: ``run(n)`` runs ``n`` steps and waits for them."""

    def __init__(self, impl, step, state, data):
        import jax

        t0 = time.perf_counter()
        self.compiled = step.lower(state, data).compile()
        self.compile_s = time.perf_counter() - t0
        cost = self.compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, (list, tuple)) else cost
        self.flops_per_step = float(cost.get("flops", float("nan"))) if cost else float("nan")
        self.impl, self.state, self.data, self.metrics = impl, state, data, None
        dev = jax.devices()[0]
        self.device, self.platform = dev.device_kind, dev.platform

    def run(self, n):
        import jax

        for _ in range(n):
            self.state, self.metrics = self.compiled(self.state, self.data)
        jax.block_until_ready(self.state)

    def loss(self):
        loss = float(self.metrics["loss"])
        if not np.isfinite(loss):
            raise FloatingPointError(f"{self.impl}: loss is {loss}")
        return loss


def models():
    """The benchmark's models: ResNet-18 (CIFAR stem), the SimSiam projector 512 -> 2048 -> 2048 and predictor
    2048 -> 512 -> 2048."""

    from ssl_geometry import backbones, heads

    return backbones.resnet18_cifar(), heads.simsiam_projector(512, 2048), heads.simsiam_predictor(2048, 512)


def host_batch(batch, seed):
    """A seeded host batch: ``batch`` uniform ``[0, 1)`` float32 32 x 32 x 3 images and int32 labels in ``0..9``."""

    rng = np.random.default_rng(seed)
    return {
        "images": rng.uniform(0, 1, (batch, 32, 32, 3)).astype(np.float32),
        "labels": rng.integers(0, 10, batch).astype(np.int32),
    }


def jax_trainer(batch: int, seed: int = 0, *, all_devices: bool = False) -> JaxRunner:
    """The library's step: ``trainer.make_train_step`` jitted on a one-device mesh (probe included).

    ``all_devices``: on a ``("data",)`` mesh over every device instead, the batch sharded (``trainer_dp``;
    with ``--xla-flags=--xla_force_host_platform_device_count=2`` the two halves of the batch run on two
    host threads: XLA:CPU runs each convolution on about one core). BatchNorm statistics stay global.
    """
    import jax
    import jax.numpy as jnp

    from ssl_geometry import objectives, trainer

    bb, proj, pred = models()
    obj = objectives.make_objective("simsiam", bb, proj, pred, augment=lambda k, x: (x, jnp.flip(x, axis=2)))
    tx, sched = trainer.make_optimizer(
        {"name": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4, "schedule": "constant"}, 1000, batch
    )
    devices = jax.devices() if all_devices else jax.devices()[:1]
    mesh = trainer.make_mesh(len(devices), 1, devices)
    state = trainer.place_state(trainer.init_train_state(obj, tx, jax.random.PRNGKey(seed), 10), mesh)
    step = trainer.jit_train_step(trainer.make_train_step(obj, tx, sched), mesh, state)
    return JaxRunner(
        f"jax trainer (ssl_geometry.trainer, jit, {len(devices)}-device data mesh)",
        step,
        state,
        trainer.place_batch(host_batch(batch, seed), mesh),
    )


def jax_plain(batch: int, seed: int = 0, *, fused: bool = False) -> JaxRunner:
    """A minimal SimSiam step on the same models: SGD momentum 0.9, wd 5e-4, no probe, no metrics.

    ``fused=True`` concatenates the two views into one backbone batch of ``2 n`` (BatchNorm over
    both views together -- a different model from the paper's per-view statistics; measured
    only to size what fusion could gain). The heads still run per view.
    """
    import jax
    import jax.numpy as jnp
    import optax

    from ssl_geometry import losses

    bb, proj, pred = models()
    keys = jax.random.split(jax.random.PRNGKey(seed), 3)
    variables = {"bb": bb.init(keys[0]), "proj": proj.init(keys[1]), "pred": pred.init(keys[2])}
    params = {k: v["params"] for k, v in variables.items()}
    stats = {k: {c: x for c, x in v.items() if c != "params"} for k, v in variables.items()}
    tx = optax.chain(optax.add_decayed_weights(5e-4), optax.sgd(0.05, momentum=0.9))

    def apply(name, model, p, st, x):
        y, new = model.apply({"params": p[name], **st[name]}, x, train=True)
        return y, new

    def loss_fn(p, st, x):
        x1, x2 = x, jnp.flip(x, axis=2)
        new = dict(st)
        if fused:
            h, new["bb"] = apply("bb", bb, p, st, jnp.concatenate([x1, x2]))
            h1, h2 = jnp.split(h, 2)
        else:
            h1, new["bb"] = apply("bb", bb, p, st, x1)
            h2, new["bb"] = apply("bb", bb, p, new, x2)
        z1, new["proj"] = apply("proj", proj, p, st, h1)
        z2, new["proj"] = apply("proj", proj, p, new, h2)
        p1, new["pred"] = apply("pred", pred, p, st, z1)
        p2, new["pred"] = apply("pred", pred, p, new, z2)
        return losses.simsiam(p1, p2, z1, z2), new

    def step(state, data):
        p, st, opt = state
        (loss, new_st), g = jax.value_and_grad(loss_fn, has_aux=True)(p, st, data["images"])
        upd, opt = tx.update(g, opt, p)
        return (optax.apply_updates(p, upd), new_st, opt), {"loss": loss}

    state = (params, stats, tx.init(params))
    data = {"images": jnp.asarray(host_batch(batch, seed)["images"])}
    name = "jax minimal step, views fused into one backbone batch" if fused else "jax minimal step, per-view"
    return JaxRunner(name, jax.jit(step, donate_argnums=(0,)), state, data)
