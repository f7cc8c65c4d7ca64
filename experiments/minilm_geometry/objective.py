"""Experiment 8, the objective: the two-view loss the heads train on and whose effective Hessian is measured."""

from __future__ import annotations

import functools

from ssl_geometry import losses

__all__ = ["loss_fn"]


def loss_fn(cfg):
    """The config's two-view loss ``(u1, u2) -> scalar``: ``losses.get(train.loss)``, at ``train.temperature``
    for the contrastive ones."""
    return _named_loss(cfg.train.loss, float(cfg.train.temperature))


@functools.lru_cache(maxsize=None)
def _named_loss(name, temperature):
    """The two-view loss ``(u1, u2) -> scalar`` (one object per setting, so jit caches hit)."""
    fn = losses.get(name)
    if name in ("info_nce", "simclr", "nt_xent", "moco_v3"):
        fn = functools.partial(fn, temperature=temperature)
    return fn
