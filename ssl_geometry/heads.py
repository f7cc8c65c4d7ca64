"""Projection heads and predictors as pure ``(init, apply)`` pairs.

A head maps representations ``z`` (trailing dimension ``in_dim``) to ``u = h(z)``.
Layer ``l`` computes ``a_l = W_l^T x + b_l`` with ``W_l`` of shape ``(in, out)``
(so ``y = x @ W``), optionally BatchNorm, then the activation; the last layer is
affine (optionally followed by BatchNorm, as in the SimSiam projector).

Initialisation follows PyTorch's ``nn.Linear`` default (``U(-1/sqrt(fan_in),
1/sqrt(fan_in))`` for weights and biases), the initialisation the paper's code
used; ``scale`` multiplies every weight matrix (the paper's "pseudo-collapse"
is ``scale=0.1``; see also :func:`scale_weights`).

BatchNorm follows PyTorch semantics: in ``train=True`` the batch mean and the
biased batch variance normalise, and the running statistics are updated as
``r <- (1 - momentum) r + momentum * batch`` with the unbiased variance; in
``train=False`` the running statistics are used, so the head acts per sample and
accepts a single vector ``(d,)``. Inside ``jit`` with a batch sharded over a
mesh, the batch mean is the mean over the *global* batch (synchronised BN).

Heads: :func:`linear` (``z @ W (+ b)``), :func:`mlp` (any depth, optional BatchNorm), the paper's
SimSiam pair :func:`simsiam_projector` and :func:`simsiam_predictor`, and :func:`compose` (models chained
into one, e.g. projector then predictor). :func:`batchnorm` is the BatchNorm they use;
:func:`check_batchnorm_hparams`, :func:`check_shapes` and :func:`check_variables` are the checks a
caller's variables and hyper-parameters go through (a ``ValueError`` naming the layer or path).

Variables layout::

    {"params": {"layers": [{"w": (in, out), "b": (out,)}, ...],
                "bn": [{"scale": (out,), "bias": (out,)}, ...]},
     "batch_stats": {"bn": [{"mean": (out,), "var": (out,)}, ...]}}
"""

from ssl_geometry._src.models.heads import batchnorm as batchnorm
from ssl_geometry._src.models.heads import check_batchnorm_hparams as check_batchnorm_hparams
from ssl_geometry._src.models.heads import check_shapes as check_shapes
from ssl_geometry._src.models.heads import check_variables as check_variables
from ssl_geometry._src.models.heads import compose as compose
from ssl_geometry._src.models.heads import linear as linear
from ssl_geometry._src.models.heads import mlp as mlp
from ssl_geometry._src.models.heads import scale_weights as scale_weights
from ssl_geometry._src.models.heads import simsiam_predictor as simsiam_predictor
from ssl_geometry._src.models.heads import simsiam_projector as simsiam_projector

__all__ = [
    "batchnorm",
    "check_batchnorm_hparams",
    "check_shapes",
    "check_variables",
    "compose",
    "linear",
    "mlp",
    "scale_weights",
    "simsiam_predictor",
    "simsiam_projector",
]
