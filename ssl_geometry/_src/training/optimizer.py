"""The optimiser of a training run: learning-rate schedules and the optax transformation.

Implementation of :func:`ssl_geometry.trainer.make_schedule` and :func:`~ssl_geometry.trainer.make_optimizer`;
the run builds them from its ``optimizer`` section with :func:`ssl_geometry.trainer.build_optimizer`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from ssl_geometry._src.checks import check_choice, check_positive

__all__ = ["OPTIMIZERS", "SCHEDULES", "make_schedule", "make_optimizer"]

OPTIMIZERS = ("sgd", "lars", "adam", "adamw")
SCHEDULES = ("cosine", "constant")


def _decay_mask(params):
    """Weight decay / LARS adaptation on matrices and kernels only (not biases, BN, 1-D leaves)."""
    return jax.tree_util.tree_map(lambda x: jnp.ndim(x) > 1, params)


def make_schedule(cfg, total_steps: int, batch_size: int) -> optax.Schedule:
    """Learning-rate schedule from ``cfg`` (an ``optimizer`` ConfigDict or dict).

    ``peak = lr * batch_size / 256`` when ``cfg.lr_batch_scaling`` (the SimSiam /
    BYOL linear scaling rule) else ``lr``. ``cosine``: linear warm-up from 0 to
    ``peak`` over ``warmup_steps``, then ``peak * (1 + cos(pi t / T)) / 2`` down to 0
    (``optax.warmup_cosine_decay_schedule``); ``constant``: ``peak`` after warm-up.
    """
    lr = float(cfg["lr"])
    check_positive(lr, "optimizer.lr")
    peak = lr * batch_size / 256.0 if cfg.get("lr_batch_scaling", False) else lr
    warmup = int(cfg.get("warmup_steps", 0))
    if warmup < 0 or warmup > total_steps:
        raise ValueError(f"`optimizer.warmup_steps` must lie in [0, total steps = {total_steps}]; got {warmup}.")
    name = cfg.get("schedule", "cosine")
    check_choice(name, "optimizer.schedule", SCHEDULES)
    if name == "cosine":
        if warmup == total_steps:
            return optax.linear_schedule(0.0, peak, warmup)
        return optax.warmup_cosine_decay_schedule(0.0, peak, warmup, total_steps, end_value=0.0)
    if warmup == 0:
        return optax.constant_schedule(peak)
    return optax.join_schedules([optax.linear_schedule(0.0, peak, warmup), optax.constant_schedule(peak)], [warmup])


def make_optimizer(cfg, total_steps: int, batch_size: int, *, probe_lr: float = 1e-3):
    """``(tx, schedule)``: the optax transformation for the SSL parameters plus the probe.

    ``cfg.name``: ``sgd`` (momentum ``cfg.momentum``, optional ``nesterov``, decoupled
    ``weight_decay`` added to the gradient of matrices as in PyTorch SGD), ``lars``
    (``optax.lars``, trust ratio and decay on matrices only), ``adam``, ``adamw``.
    The online probe (top-level key ``"probe"``) is trained by its own Adam
    (``probe_lr``) through ``optax.multi_transform``.
    """
    name = cfg.get("name", "sgd")
    check_choice(name, "optimizer.name", OPTIMIZERS)
    sched = make_schedule(cfg, total_steps, batch_size)
    wd = float(cfg.get("weight_decay", 0.0))
    check_positive(wd, "optimizer.weight_decay", strict=False)
    momentum = float(cfg.get("momentum", 0.9))
    if not 0.0 <= momentum < 1.0:
        raise ValueError(f"`optimizer.momentum` must lie in [0, 1); got {momentum}.")
    if name == "sgd":
        parts = []
        if wd:
            parts.append(optax.add_decayed_weights(wd, mask=_decay_mask))
        parts.append(optax.sgd(sched, momentum=momentum or None, nesterov=bool(cfg.get("nesterov", False))))
        main = optax.chain(*parts)
    elif name == "lars":
        main = optax.lars(
            sched, weight_decay=wd, weight_decay_mask=_decay_mask, trust_ratio_mask=_decay_mask, momentum=momentum
        )
    elif name == "adam":
        main = optax.adam(sched, b1=float(cfg.get("b1", 0.9)), b2=float(cfg.get("b2", 0.999)))
        if wd:
            main = optax.chain(optax.add_decayed_weights(wd, mask=_decay_mask), main)
    else:
        main = optax.adamw(
            sched, b1=float(cfg.get("b1", 0.9)), b2=float(cfg.get("b2", 0.999)), weight_decay=wd, mask=_decay_mask
        )

    def labels(params):
        return {k: jax.tree_util.tree_map(lambda _: "probe" if k == "probe" else "ssl", v) for k, v in params.items()}

    tx = optax.multi_transform({"ssl": main, "probe": optax.adam(probe_lr)}, labels)
    return tx, sched
