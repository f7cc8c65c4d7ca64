"""Test fixtures: every projection head / predictor by name, with a tiny example configuration.

To add a head: write its builder (returning a :class:`~ssl_geometry.Model`),
and add one :class:`HeadSpec` here. The registry-parametrized tests (``tests/test_registries.py``)
then build it from ``example`` and check its output shape, eager-versus-``jit`` agreement,
gradients against finite differences, BatchNorm state handling and that ``apply`` rejects the
variables of a different width. Activations have their own registry,
:data:`ssl_geometry.activations.ACTIVATIONS`.
"""

from typing import Callable, NamedTuple

import jax.numpy as jnp

from ssl_geometry import Model, pretrained
from ssl_geometry import heads as _heads


class HeadSpec(NamedTuple):
    """One registered head.

    Attributes:
      builder: the function that returns the :class:`Model`.
      example: keyword arguments of a tiny instance (what the tests build); ``dtype`` is added.
      wider: the same with a different width somewhere (its variables must be rejected).
      batch_norm: the head holds BatchNorm (``train=True`` needs a batch of ``n >= 2``).
      source: where the architecture comes from.
    """

    builder: Callable[..., Model]
    example: dict
    wider: dict
    batch_norm: bool
    source: str


#: Every head, by name.
HEADS: dict[str, HeadSpec] = {
    "mlp": HeadSpec(
        _heads.mlp,
        dict(in_dim=3, hidden=(5,), out_dim=4, activation="swish"),
        dict(in_dim=3, hidden=(6,), out_dim=4, activation="swish"),
        False,
        "heads.mlp",
    ),
    "mlp_bn": HeadSpec(
        _heads.mlp,
        dict(in_dim=3, hidden=(5,), out_dim=4, batch_norm=True, final_batch_norm=True),
        dict(in_dim=3, hidden=(5,), out_dim=5, batch_norm=True, final_batch_norm=True),
        True,
        "heads.mlp (SimSiam-style BatchNorm)",
    ),
    "linear": HeadSpec(_heads.linear, dict(in_dim=3, out_dim=4), dict(in_dim=3, out_dim=5), False, "heads.linear"),
    "simsiam_projector": HeadSpec(
        _heads.simsiam_projector, dict(in_dim=3, width=6), dict(in_dim=3, width=7), True, "SimSiam projector (paper)"
    ),
    "simsiam_predictor": HeadSpec(
        _heads.simsiam_predictor, dict(dim=4, bottleneck=2), dict(dim=4, bottleneck=3), True, "SimSiam predictor"
    ),
    "dino_head": HeadSpec(
        pretrained.dino_head,
        dict(in_dim=3, out_dim=5, hidden_dim=6, bottleneck_dim=4, nlayers=3),
        dict(in_dim=3, out_dim=6, hidden_dim=6, bottleneck_dim=4, nlayers=3),
        False,
        "DINO DINOHead",
    ),
    "dino_head_bn": HeadSpec(
        pretrained.dino_head,
        dict(in_dim=3, out_dim=5, hidden_dim=6, bottleneck_dim=4, nlayers=2, use_bn=True),
        dict(in_dim=3, out_dim=5, hidden_dim=7, bottleneck_dim=4, nlayers=2, use_bn=True),
        True,
        "DINO DINOHead (--use_bn_in_head)",
    ),
    "vicreg_projector": HeadSpec(
        pretrained.vicreg_projector, dict(dims=(3, 6, 6, 4)), dict(dims=(3, 6, 7, 4)), True, "VICReg expander"
    ),
    "barlowtwins_projector": HeadSpec(
        pretrained.barlowtwins_projector, dict(dims=(3, 6, 4)), dict(dims=(3, 7, 4)), True, "Barlow Twins projector"
    ),
    "barlowtwins_projector_loss_bn": HeadSpec(
        pretrained.barlowtwins_projector,
        dict(dims=(3, 6, 4), loss_bn=True),
        dict(dims=(3, 6, 5), loss_bn=True),
        True,
        "Barlow Twins projector + loss BatchNorm",
    ),
}


def build(name: str, *, dtype=jnp.float64, wider: bool = False) -> Model:
    """The tiny example instance of head ``name`` (or its ``wider`` variant) in ``dtype``."""
    if name not in HEADS:
        raise ValueError(f"Unknown head name {name!r}; expected one of {sorted(HEADS)}.")
    spec = HEADS[name]
    return spec.builder(**(spec.wider if wider else spec.example), dtype=dtype)
