"""Contrastive losses: SimCLR's NT-Xent, its one-directional form, MoCo v2 (queue) and v3 (in-batch),
spectral contrastive."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, ScalarLike

from ssl_geometry._src import fields
from ssl_geometry._src import ops as _ops
from ssl_geometry._src.checks import check_rank, check_same_shape
from ssl_geometry._src.ops import ArrayIn
from ssl_geometry._src.ssl.losses._common import (
    EPS_TF_L2_NORMALIZE,
    EPS_TORCH_NORMALIZE,
    check_pair,
    finite_loss,
    off_diagonal_mask,
    positive,
    sg,
)
from ssl_geometry._src.ssl.losses.specs import EMA, TEMPERATURE, BatchNeeds, Hyper, LossSpec, ObjectiveSpec

__all__ = ["SPECS", "info_nce", "info_nce_one_way", "moco", "moco_v3", "spectral_contrastive"]


def info_nce(
    z1: Float[ArrayIn, "n k"], z2: Float[ArrayIn, "n k"], *, temperature: ScalarLike = 0.1
) -> Float[Array, ""]:
    """SimCLR NT-Xent over the ``2n`` views of a batch.

    With ``u = [z1; z2] / |.|`` (rows L2-normalised, norm floor ``1e-6`` as
    ``tf.math.l2_normalize`` in the SimCLR code), ``s_ab = u_a . u_b / tau`` and
    ``pos(a)`` the other view of ``a``'s sample (``a +- n``),

        L = (1/2n) sum_{a=1}^{2n} [ -s_{a,pos(a)} + log sum_{b != a} exp(s_ab) ],

    i.e. each anchor's positive is its other view and the other ``2n - 2`` views
    are negatives (Chen et al., "A Simple Framework for Contrastive Learning of
    Visual Representations", ICML 2020, Eq. (1) averaged over all ``2n``
    anchors). Computed with ``logsumexp`` over the row with its diagonal masked.

    Args:
      z1, z2: projections of views 1 and 2, ``(n, k)``, ``n >= 2``.
      temperature: ``tau > 0`` (a traced ``tau <= 0`` raises at run time under ``jit``).
    """
    check_pair(z1, z2, "z1", "z2", 2, "NT-Xent needs in-batch negatives")
    temperature = positive(temperature, "temperature")
    z1, z2 = _ops.upcast(z1, z2)
    n = z1.shape[0]
    u = _ops.l2_normalize(jnp.concatenate([z1, z2], axis=0), EPS_TF_L2_NORMALIZE)
    sim = (u @ u.T) / temperature
    eye = jnp.eye(2 * n, dtype=bool)
    lse = jax.nn.logsumexp(jnp.where(eye, -jnp.inf, sim), axis=1)
    pos = jnp.sum(u[:n] * u[n:], axis=-1) / temperature
    pos = jnp.concatenate([pos, pos])
    return finite_loss(jnp.mean(lse - pos), "info_nce", (z1, z2))


def info_nce_one_way(
    u1: Float[ArrayIn, "n k"], u2: Float[ArrayIn, "n k"], *, temperature: ScalarLike = 0.1
) -> Float[Array, ""]:
    """One-directional InfoNCE: view 1 anchors, view 2 candidates, ``n - 1`` cross-view negatives.

    With ``a_i = u1_i / max(|u1_i|, 1e-12)``, ``b_j = u2_j / max(|u2_j|, 1e-12)``
    (``F.normalize``) and ``s_ij = a_i . b_j / tau``,

        L = (1/n) sum_{i=1}^{n} [ -s_ii + log sum_{j=1}^{n} exp(s_ij) ],

    the cross-entropy of the logits ``A B^T / tau`` against the targets ``arange(n)``: each
    anchor ``a_i`` has its own second view ``b_i`` as the positive and the second views of the
    other ``n - 1`` samples as negatives; no view-1 negatives and no symmetrisation (unlike
    :func:`info_nce`, which averages over all ``2n`` anchors with ``2n - 2`` negatives each).
    This is the loss of the authors' guillotine experiment (``run_guillotine_experiment`` in
    their ``experiments.py``: ``z = F.normalize(head(backbone(x)), dim=1)``, then
    ``F.cross_entropy(z1 @ z2.T / 0.1, arange(n))``). It is not symmetric in ``(u1, u2)``.

    Args:
      u1, u2: head outputs of views 1 and 2, ``(n, k)``, ``n >= 2``.
      temperature: ``tau > 0`` (a traced ``tau <= 0`` raises at run time under ``jit``).
    """
    check_pair(u1, u2, "u1", "u2", 2, "one-way InfoNCE needs in-batch negatives")
    temperature = positive(temperature, "temperature")
    u1, u2 = _ops.upcast(u1, u2)
    a = _ops.l2_normalize(u1, EPS_TORCH_NORMALIZE)
    b = _ops.l2_normalize(u2, EPS_TORCH_NORMALIZE)
    logits = (a @ b.T) / temperature
    loss = jnp.mean(jax.nn.logsumexp(logits, axis=1) - jnp.diagonal(logits))
    return finite_loss(loss, "info_nce_one_way", (u1, u2))


def moco(
    q: Float[ArrayIn, "n k"], k: Float[ArrayIn, "n k"], queue: Float[ArrayIn, "m k"], *, temperature: ScalarLike = 0.2
) -> tuple[Float[Array, ""], Float[Array, "m k"]]:
    """MoCo v2 InfoNCE against a queue of keys; returns ``(loss, new_queue)``.

    He et al., "Momentum Contrast for Unsupervised Visual Representation
    Learning", CVPR 2020, Eq. (1); Chen et al. 2020 (MoCo v2, ``tau = 0.2``).
    With ``q^_i = q_i/|q_i|``, ``k^_i = sg(k_i/|k_i|)`` (``F.normalize``, norm
    floor ``1e-12``) and queue rows ``m_j`` (``j = 1..K``, stop-gradient, used as
    given: they are expected to be unit keys, as the reference code stores them),

        L = (1/n) sum_i [ -q^_i.k^_i/tau + log( exp(q^_i.k^_i/tau) + sum_j exp(q^_i.m_j/tau) ) ].

    ``new_queue`` drops the ``n`` oldest rows and appends the ``n`` new unit keys
    (rows are ordered oldest first): ``new_queue = [queue[n:]; k^]``, in the
    queue's dtype. This is the reference ring buffer up to a permutation of rows,
    to which the loss is invariant.

    Args:
      q: query projections ``(n, k)`` (online encoder).
      k: key projections ``(n, k)`` (momentum encoder; stop-gradient).
      queue: ``(K, k)`` unit keys of earlier batches, ``K >= n``.
      temperature: ``tau > 0``.
    """
    check_pair(q, k, "q", "k")
    check_rank(queue, "queue", 2)
    temperature = positive(temperature, "temperature")
    n, dim = q.shape
    if queue.shape[1] != dim:
        raise ValueError(f"`queue` must have shape (K, {dim}) to match `q`; got {tuple(queue.shape)}.")
    if queue.shape[0] < n:
        raise ValueError(f"`queue` must hold at least as many keys as the batch ({n}); got K={queue.shape[0]}.")
    queue_dtype = jnp.result_type(queue)
    q, k, mem = _ops.upcast(q, k, sg(queue))
    qn = _ops.l2_normalize(q, EPS_TORCH_NORMALIZE)
    kn = sg(_ops.l2_normalize(k, EPS_TORCH_NORMALIZE))
    l_pos = jnp.sum(qn * kn, axis=-1, keepdims=True)
    l_neg = qn @ mem.T
    logits = jnp.concatenate([l_pos, l_neg], axis=1) / temperature
    loss = jnp.mean(jax.nn.logsumexp(logits, axis=1) - logits[:, 0])
    new_queue = jnp.concatenate([mem[n:], kn], axis=0).astype(queue_dtype)
    return finite_loss(loss, "moco", (q, k, mem)), new_queue


def _moco_v3_ce(q, k, temperature):
    qn = _ops.l2_normalize(q, EPS_TORCH_NORMALIZE)
    kn = _ops.l2_normalize(sg(k), EPS_TORCH_NORMALIZE)
    logits = (qn @ kn.T) / temperature
    ce = jax.nn.logsumexp(logits, axis=1) - jnp.diagonal(logits)
    return jnp.mean(ce) * (2.0 * temperature)


def moco_v3(
    q1: Float[ArrayIn, "n k"],
    q2: Float[ArrayIn, "n k"],
    k1: Float[ArrayIn, "n k"],
    k2: Float[ArrayIn, "n k"],
    *,
    temperature: ScalarLike = 0.2,
) -> Float[Array, ""]:
    """MoCo v3 symmetrised InfoNCE with in-batch negatives.

    Chen, Xie & He, "An Empirical Study of Training Self-Supervised Vision
    Transformers", ICCV 2021 (reference code ``moco/builder.py``):
    ``L = ctr(q1, k2) + ctr(q2, k1)`` with, for unit ``q^``, ``k^ = sg(k/|k|)``
    (norm floor ``1e-12``),

        ctr(q, k) = 2 tau * (1/n) sum_i [ -q^_i.k^_i/tau + log sum_j exp(q^_i.k^_j/tau) ],

    the ``2 tau`` factor as in the reference code. Keys of the other samples in
    the batch are the negatives (single device: no all-gather).

    Args:
      q1, q2: online predictions of views 1 and 2, ``(n, k)``, ``n >= 2``.
      k1, k2: momentum-encoder projections of views 1 and 2 (stop-gradient).
      temperature: ``tau > 0``.
    """
    check_pair(q1, q2, "q1", "q2", 2, "MoCo v3 uses in-batch negatives")
    check_pair(k1, k2, "k1", "k2", 2, "MoCo v3 uses in-batch negatives")
    check_same_shape(q1, k1, "q1", "k1")
    temperature = positive(temperature, "temperature")
    q1, q2, k1, k2 = _ops.upcast(q1, q2, k1, k2)
    loss = _moco_v3_ce(q1, k2, temperature) + _moco_v3_ce(q2, k1, temperature)
    return finite_loss(loss, "moco_v3", (q1, q2, k1, k2))


def spectral_contrastive(z1: Float[ArrayIn, "n k"], z2: Float[ArrayIn, "n k"]) -> Float[Array, ""]:
    """Spectral contrastive loss (HaoChen et al., "Provable Guarantees for
    Self-Supervised Deep Learning with Spectral Contrastive Loss", NeurIPS 2021, Eq. (4)):

        L = -2 E_{(x, x+)}[f(x)^T f(x+)] + E_{x, x-}[(f(x)^T f(x-))^2]
          = -(2/n) sum_i z1_i . z2_i  +  1/(n(n-1)) sum_{i != j} (z1_i . z2_j)^2.

    The positive term averages over the ``n`` positive pairs; the negative term
    averages over the ``n(n-1)`` *cross-view* pairs of different samples
    (``z1_i`` against ``z2_j``, ``i != j``), exactly the estimator of the
    authors' code (``mean`` of the off-diagonal of ``(Z1 Z2^T)^2`` times
    ``n/(n-1)``). The authors' optional projection of ``f`` onto the ball
    ``|f| <= sqrt(mu)`` is not applied: the loss acts on the given outputs.

    Limit: the negative term is of degree 4 in the input scale ``s``; once
    ``k^2 s^4`` exceeds the dtype's range (float32: ``s >~ 1e9``) the loss raises
    ``FloatingPointError`` (under ``jit``: a run-time error) instead of returning
    ``inf - inf = NaN``.

    Args:
      z1, z2: ``(n, k)``, ``n >= 2``.
    """
    check_pair(z1, z2, "z1", "z2", 2, "the negative term needs pairs of different samples")
    z1, z2 = _ops.upcast(z1, z2)
    n = z1.shape[0]
    pos = -2.0 * jnp.mean(jnp.sum(z1 * z2, axis=-1))
    g = z1 @ z2.T
    neg = jnp.sum(jnp.square(g) * off_diagonal_mask(n, g.dtype)) / (n * (n - 1))
    return finite_loss(pos + neg, "spectral_contrastive", (z1, z2), degree=4)


# ----------------------------------------------------------------------------- this family's entries of the table


def _moco_queue(key, dim, dtype, values):
    """MoCo v2's queue: ``queue_size`` unit rows, drawn in the parameter dtype (independent of x64)."""
    return _ops.l2_normalize(jax.random.normal(jax.random.fold_in(key, 7), (values["queue_size"], dim), dtype))


_QUEUE_SIZE = Hyper("queue_size", 4096, fields.integer(1), "MoCo v2 queue length K")


#: This family's entries of the objective table (:data:`ssl_geometry.objectives.TABLE`, which collects the
#: ``SPECS`` of every family module in table order): one :class:`~ssl_geometry.objectives.ObjectiveSpec` per loss
#: above, with its training wiring where a training objective is built on it (``docs/howto/extend.md``).
SPECS: tuple[ObjectiveSpec, ...] = (
    ObjectiveSpec(
        "moco",
        LossSpec(
            fn=moco,
            args=("q", "k", "queue"),
            differentiable=(0,),
            stop_gradient=(1, 2),
            stateful=True,
            batch=BatchNeeds(False, 1, "negatives come from the queue (K >= n keys)"),
            hessian_psd=False,
            degree=0,
            family="contrastive",
        ),
        aliases=("mocov2", "moco_v2"),
        objective="moco",
        inputs=("z1", "t2", "queue"),
        options={"temperature": "temperature"},
        ema_target=True,
        hypers=(EMA, TEMPERATURE, _QUEUE_SIZE),
        state={"queue": _moco_queue},
    ),
    ObjectiveSpec(
        "info_nce",
        LossSpec(
            fn=info_nce,
            args=("z1", "z2"),
            differentiable=(0, 1),
            stop_gradient=(),
            stateful=False,
            batch=BatchNeeds(True, 2, "in-batch negatives (2n - 2 per anchor)"),
            hessian_psd=False,
            degree=0,
            family="contrastive",
        ),
        aliases=("simclr", "nt_xent", "ntxent"),
        objective="simclr",
        inputs=("z1", "z2"),
        options={"temperature": "temperature"},
        hypers=(TEMPERATURE,),
    ),
    ObjectiveSpec(
        "info_nce_one_way",
        LossSpec(
            fn=info_nce_one_way,
            args=("u1", "u2"),
            differentiable=(0, 1),
            stop_gradient=(),
            stateful=False,
            batch=BatchNeeds(True, 2, "in-batch cross-view negatives (n - 1 per anchor, one direction)"),
            hessian_psd=False,
            degree=0,
            family="contrastive",
        ),
        aliases=("simclr_one_way",),
        objective="simclr_one_way",
        inputs=("z1", "z2"),
        options={"temperature": "temperature"},
        hypers=(TEMPERATURE,),
    ),
    ObjectiveSpec(
        "moco_v3",
        LossSpec(
            fn=moco_v3,
            args=("q1", "q2", "k1", "k2"),
            differentiable=(0, 1),
            stop_gradient=(2, 3),
            stateful=False,
            batch=BatchNeeds(True, 2, "in-batch negatives (n - 1 per query)"),
            hessian_psd=False,
            degree=0,
            family="contrastive",
        ),
        aliases=("mocov3",),
        objective="moco_v3",
        inputs=("p1", "p2", "t1", "t2"),
        options={"temperature": "temperature"},
        predictor=True,
        ema_target=True,
        hypers=(EMA, TEMPERATURE),
    ),
    ObjectiveSpec(
        "spectral_contrastive",
        LossSpec(
            fn=spectral_contrastive,
            args=("z1", "z2"),
            differentiable=(0, 1),
            stop_gradient=(),
            stateful=False,
            batch=BatchNeeds(True, 2, "negative pairs of different samples"),
            hessian_psd=False,
            degree=4,
            family="contrastive",
        ),
        aliases=("spectral",),
        objective="spectral_contrastive",
        inputs=("z1", "z2"),
    ),
)
