"""Self-supervised objectives as pure functions of head outputs.

Every loss takes the head outputs of two (or more) views of the same batch and
returns a scalar; stateful objectives (MoCo's key queue, DINO's teacher centre)
take their state as an argument and return the updated state, so there is no
hidden state and every function composes with ``jax.jit``, ``jax.grad`` and
``jax.hessian``.

The families live in submodules (all names are re-exported here, so
``ssl_geometry.losses.<name>`` is the stable path):

* :mod:`.cosine` — ``negative_cosine``, ``simsiam``, ``byol`` (+ ``ema_update``,
  ``byol_decay_schedule``), ``mse``;
* :mod:`.contrastive` — ``info_nce`` (SimCLR), ``info_nce_one_way`` (the authors' guillotine loss),
  ``moco``, ``moco_v3``, ``spectral_contrastive``;
* :mod:`.redundancy` — ``barlow_twins``, ``vicreg``, ``wmse`` (+ ``cholesky_whiten``, its whitening);
* :mod:`.distillation` — ``dino``;
* :mod:`.registry` — :data:`REGISTRY` (name -> :class:`LossSpec`, with its :class:`BatchNeeds`),
  :data:`LOSSES` (name -> function), :data:`NEEDS_BATCH`, :func:`get` (a loss by name or alias),
  :func:`spec` (its :class:`LossSpec`) and :func:`min_batch_size`: views of the objective table
  :data:`ssl_geometry.objectives.TABLE`, where each loss is registered (with its aliases and, for a training
  objective, how the trainer calls it). Each loss's spec is written beside it, in its family module's ``SPECS``;
  the table collects them. A loss of the table is published here under its table name, one import line each
  (``docs/howto/extend.md``).

Conventions:

- A batch of embeddings is an array ``(n, k)``: ``n`` samples, ``k`` features.
  Row ``i`` of ``z1`` and row ``i`` of ``z2`` are two views of the same sample
  (a positive pair); rows ``i != j`` are different samples.
- ``sg(.)`` is ``jax.lax.stop_gradient``: the value is used, no gradient flows.
- ``cos(a, b) = a . b / (max(|a|, eps) max(|b|, eps))``: each vector is
  L2-normalised with its norm floored at ``eps``, the form of PyTorch's
  ``F.normalize`` / ``F.cosine_similarity``, by :func:`ssl_geometry.ops.l2_normalize`
  (overflow-safe, finite zero-vector gradient). ``eps`` per loss follows that
  loss's reference code and is given in each docstring.
- Dtypes: float32 and float64 inputs are computed and returned in their dtype;
  float16 / bfloat16 inputs are computed in float32 and the loss is returned in
  **float32** (state outputs -- MoCo's queue, DINO's centre -- keep the dtype of
  the state passed in). Gradients come back in the input dtype.
- Numerics: scale-invariant losses (cosine, contrastive, Barlow Twins, W-MSE)
  give the right value at any finite input scale. Losses of polynomial degree in
  the scale (``mse`` 2, ``vicreg`` and ``spectral_contrastive`` 4) have a
  documented limit: when the value exceeds the dtype's range they raise
  ``FloatingPointError`` naming the loss. A non-finite loss from finite inputs is
  always an error, also inside ``jit`` (via :func:`equinox.error_if`, a run-time
  ``RuntimeError``), as is a traced hyper-parameter out of range (``temperature <= 0``,
  ``eps < 0``); NaN *inputs* propagate to a NaN loss (the training loop reports them).
  ``EQX_ON_ERROR=nan`` turns the in-``jit`` errors into NaN.

Losses that need batch statistics (a batch mean, covariance, in-batch
negatives) reject batches smaller than they need; :data:`NEEDS_BATCH` lists them
with their minimum batch size. :func:`get` returns a loss by name.

Example:
  >>> import jax, jax.numpy as jnp
  >>> z1 = jax.random.normal(jax.random.PRNGKey(0), (8, 4))
  >>> z2 = z1 + 0.1 * jax.random.normal(jax.random.PRNGKey(1), (8, 4))
  >>> loss = get("barlow_twins")(z1, z2)
  >>> loss.shape, bool(loss > 0)
  ((), True)
"""

from ssl_geometry._src.ssl.losses.contrastive import info_nce as info_nce
from ssl_geometry._src.ssl.losses.contrastive import info_nce_one_way as info_nce_one_way
from ssl_geometry._src.ssl.losses.contrastive import moco as moco
from ssl_geometry._src.ssl.losses.contrastive import moco_v3 as moco_v3
from ssl_geometry._src.ssl.losses.contrastive import spectral_contrastive as spectral_contrastive
from ssl_geometry._src.ssl.losses.cosine import byol as byol
from ssl_geometry._src.ssl.losses.cosine import byol_decay_schedule as byol_decay_schedule
from ssl_geometry._src.ssl.losses.cosine import ema_update as ema_update
from ssl_geometry._src.ssl.losses.cosine import mse as mse
from ssl_geometry._src.ssl.losses.cosine import negative_cosine as negative_cosine
from ssl_geometry._src.ssl.losses.cosine import simsiam as simsiam
from ssl_geometry._src.ssl.losses.distillation import dino as dino
from ssl_geometry._src.ssl.losses.redundancy import barlow_twins as barlow_twins
from ssl_geometry._src.ssl.losses.redundancy import cholesky_whiten as cholesky_whiten
from ssl_geometry._src.ssl.losses.redundancy import vicreg as vicreg
from ssl_geometry._src.ssl.losses.redundancy import wmse as wmse
from ssl_geometry._src.ssl.losses.registry import LOSSES as LOSSES
from ssl_geometry._src.ssl.losses.registry import NEEDS_BATCH as NEEDS_BATCH
from ssl_geometry._src.ssl.losses.registry import REGISTRY as REGISTRY
from ssl_geometry._src.ssl.losses.registry import BatchNeeds as BatchNeeds
from ssl_geometry._src.ssl.losses.registry import LossSpec as LossSpec
from ssl_geometry._src.ssl.losses.registry import get as get
from ssl_geometry._src.ssl.losses.registry import min_batch_size as min_batch_size
from ssl_geometry._src.ssl.losses.registry import spec as spec

__all__ = [
    "byol",
    "byol_decay_schedule",
    "ema_update",
    "mse",
    "negative_cosine",
    "simsiam",
    "info_nce",
    "info_nce_one_way",
    "moco",
    "moco_v3",
    "spectral_contrastive",
    "barlow_twins",
    "cholesky_whiten",
    "vicreg",
    "wmse",
    "dino",
    "BatchNeeds",
    "LOSSES",
    "LossSpec",
    "NEEDS_BATCH",
    "REGISTRY",
    "get",
    "min_batch_size",
    "spec",
]
