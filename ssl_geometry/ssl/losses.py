"""Self-supervised objectives as pure functions of head outputs.

Every loss takes the head outputs of two (or more) views of the same batch and
returns a scalar; stateful objectives (MoCo's key queue, DINO's teacher centre)
take their state as an argument and return the updated state, so there is no
hidden state and every function composes with ``jax.jit``, ``jax.grad`` and
``jax.hessian`` in float32 and float64 (the dtype of the inputs decides).

Conventions:

- A batch of embeddings is an array ``(n, k)``: ``n`` samples, ``k`` features.
  Row ``i`` of ``z1`` and row ``i`` of ``z2`` are two views of the same sample
  (a positive pair); rows ``i != j`` are different samples.
- ``sg(.)`` is ``jax.lax.stop_gradient``: the value is used, no gradient flows.
- ``cos(a, b) = a . b / (max(|a|, eps) max(|b|, eps))``: each vector is
  L2-normalised with its norm floored at ``eps``, the form of PyTorch's
  ``F.normalize`` / ``F.cosine_similarity``. We compute it as
  ``a * rsqrt(max(|a|^2, eps^2))``, which has a finite gradient (zero) at
  ``a = 0`` where ``a / |a|`` would give NaN. ``eps`` per loss follows that
  loss's reference code and is given in each docstring.

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
from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from ssl_geometry._checks import (
    check_choice,
    check_finite,
    check_min_batch,
    check_positive,
    check_rank,
    check_same_shape,
    is_concrete,
)

Array = jax.Array
sg = jax.lax.stop_gradient

# Norm floors of the reference implementations (see each loss's docstring).
_EPS_TORCH_COSINE = 1e-8  # torch.nn.functional.cosine_similarity
_EPS_TORCH_NORMALIZE = 1e-12  # torch.nn.functional.normalize
_EPS_TF_L2_NORMALIZE = 1e-6  # tf.math.l2_normalize: rsqrt(max(|x|^2, 1e-12))


# ----------------------------------------------------------------------------- helpers


def _l2_normalize(x: Array, eps: float) -> Array:
    """``x / max(|x|, eps)`` along the last axis, as ``x * rsqrt(max(|x|^2, eps^2))``."""
    sq = jnp.sum(x * x, axis=-1, keepdims=True)
    return x * jax.lax.rsqrt(jnp.maximum(sq, eps * eps))


def _check_pair(a, b, name_a: str, name_b: str, min_batch: int = 1, why: str = "") -> None:
    check_rank(a, name_a, 2)
    check_rank(b, name_b, 2)
    check_same_shape(a, b, name_a, name_b)
    check_min_batch(a, name_a, max(min_batch, 1), why)
    if jnp.shape(a)[1] < 1:
        raise ValueError(f"`{name_a}` must have at least one feature; got shape {tuple(jnp.shape(a))}.")
    check_finite(a, name_a)  # concrete inputs only: a no-op under jit/grad/vmap tracing
    check_finite(b, name_b)


def _check_unit_interval(value, name: str) -> None:
    check_positive(value, name, strict=False)
    if is_concrete(value) and float(value) > 1.0:
        raise ValueError(f"`{name}` must lie in [0, 1]; got {value!r}.")


def _off_diagonal_mask(k: int, dtype) -> Array:
    return 1.0 - jnp.eye(k, dtype=dtype)


# ----------------------------------------------------------------------------- SimSiam / BYOL


def negative_cosine(p: Array, z: Array) -> Array:
    """SimSiam's one-directional loss ``D(p, z) = -(1/n) sum_i cos(p_i, sg(z_i))``.

    Chen & He, "Exploring Simple Siamese Representation Learning", CVPR 2021,
    Eq. (1) with the stop-gradient of Eq. (3). ``cos`` floors each norm at
    ``1e-8`` (PyTorch ``F.cosine_similarity``, the reference code).

    Args:
      p: predictor outputs ``(n, k)``.
      z: projector outputs ``(n, k)`` (no gradient flows into ``z``).

    Returns:
      scalar in ``[-1, 1]``; invariant to positive rescaling of any ``p_i`` or ``z_i``.
    """
    _check_pair(p, z, "p", "z")
    pn = _l2_normalize(p, _EPS_TORCH_COSINE)
    zn = _l2_normalize(sg(z), _EPS_TORCH_COSINE)
    return -jnp.mean(jnp.sum(pn * zn, axis=-1))


def simsiam(p1: Array, p2: Array, z1: Array, z2: Array) -> Array:
    """SimSiam symmetric loss ``L = D(p1, sg(z2)) / 2 + D(p2, sg(z1)) / 2``.

    ``D(p, z) = -(1/n) sum_i cos(p_i, z_i)`` (see :func:`negative_cosine`);
    Chen & He, CVPR 2021, Eq. (3). ``p = pred(proj(f(x)))``, ``z = proj(f(x))``
    for two augmented views; gradients reach only ``p1`` and ``p2``.

    Args:
      p1, p2: predictor outputs of views 1 and 2, ``(n, k)``.
      z1, z2: projector outputs of views 1 and 2, ``(n, k)`` (stop-gradient).

    Example:
      >>> import jax.numpy as jnp
      >>> u = jnp.array([[1.0, 0.0], [0.0, 2.0]])
      >>> float(simsiam(u, u, u, u))  # identical directions: minimum -1
      -1.0
    """
    _check_pair(p1, p2, "p1", "p2")
    _check_pair(z1, z2, "z1", "z2")
    check_same_shape(p1, z1, "p1", "z1")
    return 0.5 * negative_cosine(p1, z2) + 0.5 * negative_cosine(p2, z1)


def _byol_regression(p: Array, t: Array) -> Array:
    pn = _l2_normalize(p, _EPS_TF_L2_NORMALIZE)
    tn = _l2_normalize(sg(t), _EPS_TF_L2_NORMALIZE)
    return jnp.mean(2.0 - 2.0 * jnp.sum(pn * tn, axis=-1))


def byol(p1: Array, p2: Array, t1: Array, t2: Array) -> Array:
    """BYOL symmetrised normalised MSE ``L = l(p1, sg(t2)) + l(p2, sg(t1))``.

    ``l(p, t) = (1/n) sum_i |p_i/|p_i| - t_i/|t_i||^2 = (1/n) sum_i (2 - 2 cos(p_i, t_i))``.
    Grill et al., "Bootstrap Your Own Latent", NeurIPS 2020, Eq. (2) and the
    total ``L^BYOL = L + L~`` (a *sum* of the two directions, as in the paper and
    DeepMind's JAX code). Normalisation is DeepMind's ``x * rsqrt(max(|x|^2,
    1e-12))`` (norm floor ``1e-6``).

    Args:
      p1, p2: online predictions of views 1 and 2, ``(n, k)``.
      t1, t2: target-network projections of views 1 and 2, ``(n, k)`` (stop-gradient).

    Returns:
      scalar in ``[0, 8]``.
    """
    _check_pair(p1, p2, "p1", "p2")
    _check_pair(t1, t2, "t1", "t2")
    check_same_shape(p1, t1, "p1", "t1")
    return _byol_regression(p1, t2) + _byol_regression(p2, t1)


def ema_update(target, online, decay):
    """Exponential moving average of pytrees: ``target <- decay * target + (1 - decay) * online``.

    The BYOL / MoCo / DINO target-network update (Grill et al. 2020, Eq. (1);
    He et al. 2020, Eq. (2)). ``decay`` may be a Python float or a traced scalar
    (e.g. from :func:`byol_decay_schedule`); it is cast to each leaf's dtype so
    float32 parameters stay float32.

    Example:
      >>> import jax.numpy as jnp
      >>> ema_update({"w": jnp.array(1.0)}, {"w": jnp.array(3.0)}, 0.75)["w"]
      Array(1.5, dtype=float64)
    """
    _check_unit_interval(decay, "decay")
    t_def = jax.tree_util.tree_structure(target)
    o_def = jax.tree_util.tree_structure(online)
    if t_def != o_def:
        raise ValueError(f"`target` and `online` must have the same tree structure; got {t_def} and {o_def}.")

    def upd(t, o):
        if jnp.shape(t) != jnp.shape(o):
            raise ValueError(f"`target` and `online` leaves differ in shape: {jnp.shape(t)} vs {jnp.shape(o)}.")
        d = jnp.asarray(decay, dtype=jnp.result_type(t))
        return d * t + (1 - d) * o

    return jax.tree_util.tree_map(upd, target, online)


def byol_decay_schedule(total_steps: int, base_decay: float = 0.996) -> optax.Schedule:
    """BYOL's EMA decay schedule ``tau_k = 1 - (1 - tau_base) (cos(pi k / K) + 1) / 2``.

    Grill et al. 2020, Sec. 3.2: ``tau`` rises from ``tau_base`` at ``k = 0`` to
    1 at ``k = K = total_steps`` (and stays 1 afterwards). Built on
    :func:`optax.cosine_decay_schedule` applied to ``1 - tau``.

    Returns:
      an optax schedule ``k -> tau_k`` (jit-compatible in ``k``).

    Example:
      >>> sched = byol_decay_schedule(100, base_decay=0.99)
      >>> round(float(sched(0)), 6), round(float(sched(50)), 6), round(float(sched(100)), 6)
      (0.99, 0.995, 1.0)
    """
    _check_unit_interval(base_decay, "base_decay")
    if not isinstance(total_steps, int) or total_steps < 1:
        raise ValueError(f"`total_steps` must be a positive int; got {total_steps!r}.")
    one_minus = optax.cosine_decay_schedule(init_value=1.0 - base_decay, decay_steps=total_steps)

    def schedule(step):
        return 1.0 - one_minus(step)

    return schedule


# ----------------------------------------------------------------------------- contrastive


def info_nce(z1: Array, z2: Array, *, temperature: float = 0.1) -> Array:
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
      temperature: ``tau > 0``.
    """
    _check_pair(z1, z2, "z1", "z2", 2, "NT-Xent needs in-batch negatives")
    check_positive(temperature, "temperature")
    n = z1.shape[0]
    u = _l2_normalize(jnp.concatenate([z1, z2], axis=0), _EPS_TF_L2_NORMALIZE)
    sim = (u @ u.T) / temperature
    eye = jnp.eye(2 * n, dtype=bool)
    lse = jax.nn.logsumexp(jnp.where(eye, -jnp.inf, sim), axis=1)
    pos = jnp.sum(u[:n] * u[n:], axis=-1) / temperature
    pos = jnp.concatenate([pos, pos])
    return jnp.mean(lse - pos)


def moco(q: Array, k: Array, queue: Array, *, temperature: float = 0.2) -> tuple[Array, Array]:
    """MoCo v2 InfoNCE against a queue of keys; returns ``(loss, new_queue)``.

    He et al., "Momentum Contrast for Unsupervised Visual Representation
    Learning", CVPR 2020, Eq. (1); Chen et al. 2020 (MoCo v2, ``tau = 0.2``).
    With ``q^_i = q_i/|q_i|``, ``k^_i = sg(k_i/|k_i|)`` (``F.normalize``, norm
    floor ``1e-12``) and queue rows ``m_j`` (``j = 1..K``, stop-gradient, used as
    given: they are expected to be unit keys, as the reference code stores them),

        L = (1/n) sum_i [ -q^_i.k^_i/tau + log( exp(q^_i.k^_i/tau) + sum_j exp(q^_i.m_j/tau) ) ].

    ``new_queue`` drops the ``n`` oldest rows and appends the ``n`` new unit keys
    (rows are ordered oldest first): ``new_queue = [queue[n:]; k^]``. This is the
    reference ring buffer up to a permutation of rows, to which the loss is
    invariant.

    Args:
      q: query projections ``(n, k)`` (online encoder).
      k: key projections ``(n, k)`` (momentum encoder; stop-gradient).
      queue: ``(K, k)`` unit keys of earlier batches, ``K >= n``.
      temperature: ``tau > 0``.
    """
    _check_pair(q, k, "q", "k")
    check_rank(queue, "queue", 2)
    check_positive(temperature, "temperature")
    n, dim = q.shape
    if queue.shape[1] != dim:
        raise ValueError(f"`queue` must have shape (K, {dim}) to match `q`; got {tuple(queue.shape)}.")
    if queue.shape[0] < n:
        raise ValueError(f"`queue` must hold at least as many keys as the batch ({n}); got K={queue.shape[0]}.")
    qn = _l2_normalize(q, _EPS_TORCH_NORMALIZE)
    kn = sg(_l2_normalize(k, _EPS_TORCH_NORMALIZE))
    mem = sg(queue)
    l_pos = jnp.sum(qn * kn, axis=-1, keepdims=True)
    l_neg = qn @ mem.T
    logits = jnp.concatenate([l_pos, l_neg], axis=1) / temperature
    loss = jnp.mean(jax.nn.logsumexp(logits, axis=1) - logits[:, 0])
    new_queue = jnp.concatenate([mem[n:], kn.astype(mem.dtype)], axis=0)
    return loss, new_queue


def _moco_v3_ce(q: Array, k: Array, temperature) -> Array:
    qn = _l2_normalize(q, _EPS_TORCH_NORMALIZE)
    kn = _l2_normalize(sg(k), _EPS_TORCH_NORMALIZE)
    logits = (qn @ kn.T) / temperature
    ce = jax.nn.logsumexp(logits, axis=1) - jnp.diagonal(logits)
    return jnp.mean(ce) * (2.0 * temperature)


def moco_v3(q1: Array, q2: Array, k1: Array, k2: Array, *, temperature: float = 0.2) -> Array:
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
    _check_pair(q1, q2, "q1", "q2", 2, "MoCo v3 uses in-batch negatives")
    _check_pair(k1, k2, "k1", "k2", 2, "MoCo v3 uses in-batch negatives")
    check_same_shape(q1, k1, "q1", "k1")
    check_positive(temperature, "temperature")
    return _moco_v3_ce(q1, k2, temperature) + _moco_v3_ce(q2, k1, temperature)


def spectral_contrastive(z1: Array, z2: Array) -> Array:
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

    Args:
      z1, z2: ``(n, k)``, ``n >= 2``.
    """
    _check_pair(z1, z2, "z1", "z2", 2, "the negative term needs pairs of different samples")
    n = z1.shape[0]
    pos = -2.0 * jnp.mean(jnp.sum(z1 * z2, axis=-1))
    g = z1 @ z2.T
    neg = jnp.sum(jnp.square(g) * _off_diagonal_mask(n, g.dtype)) / (n * (n - 1))
    return pos + neg


# ----------------------------------------------------------------------------- redundancy reduction


def _standardize(z: Array, eps: float) -> Array:
    mu = jnp.mean(z, axis=0)
    zc = z - mu
    var = jnp.mean(jnp.square(zc), axis=0)
    return zc * jax.lax.rsqrt(var + eps)


def barlow_twins(z1: Array, z2: Array, *, lambd: float = 5e-3, eps: float = 1e-5) -> Array:
    """Barlow Twins redundancy-reduction loss.

    Zbontar et al., "Barlow Twins: Self-Supervised Learning via Redundancy
    Reduction", ICML 2021, Eq. (1)-(2), as their code computes it: each view is
    standardised per feature over the batch, ``z^ = (z - mean) / sqrt(var + eps)``
    (``BatchNorm1d(affine=False)``: biased variance, ``eps = 1e-5``), then

        C = z1^T z2^ / n,      L = sum_i (1 - C_ii)^2 + lambd * sum_{i != j} C_ij^2.

    With ``eps = 0`` the loss is invariant to per-feature affine maps
    ``z -> a * z + b`` (``a != 0``) applied to both views; with ``eps > 0`` only
    up to ``O(eps / var)``.

    Args:
      z1, z2: ``(n, k)``, ``n >= 2``.
      lambd: off-diagonal weight (paper: ``5e-3``; code default ``0.0051``).
      eps: variance floor of the standardisation.
    """
    _check_pair(z1, z2, "z1", "z2", 2, "Barlow Twins standardises over the batch")
    check_positive(lambd, "lambd", strict=False)
    check_positive(eps, "eps", strict=False)
    n, k = z1.shape
    c = _standardize(z1, eps).T @ _standardize(z2, eps) / n
    on = jnp.sum(jnp.square(jnp.diagonal(c) - 1.0))
    off = jnp.sum(jnp.square(c) * _off_diagonal_mask(k, c.dtype))
    return on + lambd * off


def vicreg(
    z1: Array,
    z2: Array,
    *,
    sim_coeff: float = 25.0,
    std_coeff: float = 25.0,
    cov_coeff: float = 1.0,
    eps: float = 1e-4,
) -> Array:
    """VICReg: variance-invariance-covariance regularisation.

    Bardes, Ponce & LeCun, "VICReg", ICLR 2022, Eq. (1)-(6), exactly as their
    ``main_vicreg.py``::

        inv = (1/(n k)) sum_{i,f} (z1_if - z2_if)^2
        std = (1/2k) sum_f relu(1 - sqrt(Var(z1_f) + eps)) + (same for z2)
        cov = (1/k) sum_{f != g} C(z1)_fg^2 + (1/k) sum_{f != g} C(z2)_fg^2
        L   = sim_coeff * inv + std_coeff * std + cov_coeff * cov

    with unbiased ``Var`` and covariance ``C(z) = (z - mean)^T (z - mean) / (n - 1)``.
    The hinge makes ``L`` piecewise smooth: its Hessian jumps where some feature's
    ``sqrt(Var + eps)`` crosses 1.

    Args:
      z1, z2: ``(n, k)``, ``n >= 2``.
    """
    _check_pair(z1, z2, "z1", "z2", 2, "VICReg uses unbiased batch variances")
    for v, nm in ((sim_coeff, "sim_coeff"), (std_coeff, "std_coeff"), (cov_coeff, "cov_coeff"), (eps, "eps")):
        check_positive(v, nm, strict=False)
    n, k = z1.shape
    inv = jnp.mean(jnp.square(z1 - z2))
    mask = _off_diagonal_mask(k, z1.dtype)

    def std_cov(z):
        zc = z - jnp.mean(z, axis=0)
        var = jnp.sum(jnp.square(zc), axis=0) / (n - 1)
        std = jnp.sqrt(var + eps)
        cov = zc.T @ zc / (n - 1)
        return jnp.mean(jax.nn.relu(1.0 - std)) / 2.0, jnp.sum(jnp.square(cov) * mask) / k

    s1, c1 = std_cov(z1)
    s2, c2 = std_cov(z2)
    return sim_coeff * inv + std_coeff * (s1 + s2) + cov_coeff * (c1 + c2)


def _cholesky_whiten(z: Array, eps) -> Array:
    n, k = z.shape
    zc = z - jnp.mean(z, axis=0)
    cov = zc.T @ zc / (n - 1)
    cov = (1.0 - eps) * cov + eps * jnp.eye(k, dtype=cov.dtype)
    chol = jnp.linalg.cholesky(cov)
    # rows w_i = L^{-1} zc_i, i.e. W = zc L^{-T}
    return jax.scipy.linalg.solve_triangular(chol, zc.T, lower=True).T


def wmse(z1: Array, z2: Array, *, eps: float = 0.0) -> Array:
    """W-MSE: MSE of unit vectors after Cholesky whitening of each view's batch.

    Ermolov et al., "Whitening for Self-Supervised Representation Learning",
    ICML 2021 (reference code ``methods/whitening.py``, ``methods/wmse.py``).
    Our exact choice: each view is whitened on its own, with the whole batch as
    one whitening sub-batch and one iteration (``w_size = n``, ``w_iter = 1``,
    no random sub-batch split, so the loss is deterministic):

        zc = z - mean(z),   S = zc^T zc / (n - 1),   S_eps = (1 - eps) S + eps I = L L^T,
        w_i = L^{-1} zc_i,
        L_WMSE = (1/n) sum_i |w1_i/|w1_i| - w2_i/|w2_i||^2 = 2 - (2/n) sum_i cos(w1_i, w2_i)

    (normalisation ``F.normalize``, norm floor ``1e-12``). The reference
    default is ``eps = 0``, which needs ``n >= k + 1`` for ``S`` to be positive
    definite; ``eps > 0`` (shrinkage towards I) admits any ``n >= 2``.
    For ``eps = 0`` the whitened batch satisfies ``w^T w / (n - 1) = I``, and the
    loss is invariant to ``z -> z A + b`` applied to either view separately for
    any *upper*-triangular ``A`` with positive diagonal (e.g. per-feature
    positive rescaling): the Cholesky factor maps to ``A^T L``, so ``w`` is
    unchanged. A general invertible ``A`` rotates the whitened batch, which
    changes the loss.

    Raises:
      FloatingPointError: (eager calls) when ``S_eps`` is not positive definite
        and the Cholesky factorisation fails (under ``jit`` JAX returns NaN instead).
    """
    _check_pair(z1, z2, "z1", "z2", 2, "W-MSE whitens with the batch covariance")
    _check_unit_interval(eps, "eps")
    n, k = z1.shape
    if is_concrete(eps) and float(eps) == 0.0 and n < k + 1:
        raise ValueError(
            f"`z1` needs a batch of at least k + 1 = {k + 1} samples for W-MSE with eps=0 "
            f"(the covariance of {k} features must be positive definite); got {n}. "
            "Pass eps > 0 to shrink the covariance towards the identity."
        )
    w1 = _l2_normalize(_cholesky_whiten(z1, eps), _EPS_TORCH_NORMALIZE)
    w2 = _l2_normalize(_cholesky_whiten(z2, eps), _EPS_TORCH_NORMALIZE)
    loss = 2.0 - 2.0 * jnp.mean(jnp.sum(w1 * w2, axis=-1))
    try:
        check_finite(loss, "wmse loss")
    except FloatingPointError as err:
        raise FloatingPointError(
            f"{err} The batch covariance is not positive definite (Cholesky failed); "
            "the embeddings are (nearly) rank-deficient. Pass eps > 0 or a larger batch."
        ) from None
    return loss


# ----------------------------------------------------------------------------- DINO


def dino(
    student: Array,
    teacher: Array,
    center: Array,
    *,
    student_temp: float = 0.1,
    teacher_temp: float = 0.04,
    center_momentum: float = 0.9,
) -> tuple[Array, Array]:
    """DINO self-distillation cross-entropy; returns ``(loss, new_center)``.

    Caron et al., "Emerging Properties in Self-Supervised Vision Transformers",
    ICCV 2021 (reference ``DINOLoss``). Shapes: ``student (V_s, n, K)`` holds all
    ``V_s >= 2`` crops, ``teacher (V_t, n, K)`` the ``1 <= V_t <= V_s`` global
    crops, where teacher view ``t`` and student view ``t`` are the same crop
    (global crops first, as in the reference code); ``center`` is ``(K,)``.

        P_t = softmax((sg(teacher_t) - sg(center)) / teacher_temp)
        log Q_s = log_softmax(student_s / student_temp)
        L = 1/(V_t V_s - V_t) sum_{t < V_t} sum_{s != t} (1/n) sum_i -P_t[i] . log Q_s[i]
        new_center = m * center + (1 - m) * mean_{t, i} sg(teacher_t[i])

    (``m = center_momentum``; the loss uses the centre *before* the update).
    The teacher-temperature warm-up of the reference code is the caller's schedule.
    """
    check_rank(student, "student", 3)
    check_rank(teacher, "teacher", 3)
    check_rank(center, "center", 1)
    for arr, arg in ((student, "student"), (teacher, "teacher"), (center, "center")):
        check_finite(arr, arg)
    v_s, n, k = student.shape
    v_t = teacher.shape[0]
    if teacher.shape[1:] != (n, k):
        raise ValueError(f"`teacher` must have shape (V_t, {n}, {k}) to match `student`; got {tuple(teacher.shape)}.")
    if center.shape != (k,):
        raise ValueError(f"`center` must have shape ({k},); got {tuple(center.shape)}.")
    if v_s < 2:
        raise ValueError(f"`student` needs at least 2 views (a cross-view pair); got V_s={v_s}.")
    if not 1 <= v_t <= v_s:
        raise ValueError(f"`teacher` must hold 1 <= V_t <= V_s = {v_s} views (the global crops); got V_t={v_t}.")
    check_min_batch(teacher[0], "teacher", 2, "the teacher centre is an EMA of batch means")
    check_positive(student_temp, "student_temp")
    check_positive(teacher_temp, "teacher_temp")
    _check_unit_interval(center_momentum, "center_momentum")
    t = sg(teacher)
    c = sg(center)
    p_t = jax.nn.softmax((t - c) / teacher_temp, axis=-1)
    log_q = jax.nn.log_softmax(student / student_temp, axis=-1)
    ce = -jnp.einsum("tnk,snk->ts", p_t, log_q) / n  # (V_t, V_s): mean over samples
    mask = 1.0 - jnp.eye(v_t, v_s, dtype=ce.dtype)
    loss = jnp.sum(ce * mask) / (v_t * v_s - v_t)
    batch_center = jnp.mean(t, axis=(0, 1))
    new_center = center_momentum * c + (1.0 - center_momentum) * batch_center.astype(c.dtype)
    return loss, new_center


# ----------------------------------------------------------------------------- alignment


def mse(u1: Array, u2: Array) -> Array:
    """Plain alignment ``L = (1/n) sum_i |u1_i - u2_i|^2`` (sum over features, mean over samples).

    A quadratic loss with constant Hessian ``hess L = (2/n) [[I, -I], [-I, I]]``:
    the flat-metric negative control of DESIGN.md (Prop. 3.3).
    """
    _check_pair(u1, u2, "u1", "u2")
    return jnp.mean(jnp.sum(jnp.square(u1 - u2), axis=-1))


# ----------------------------------------------------------------------------- registry


class BatchNeeds(NamedTuple):
    """How a loss depends on the batch.

    Attributes:
      batch_statistics: the value for one sample depends on the other samples.
      min_batch: smallest batch size ``n`` the loss accepts.
      why: what the batch is used for.
    """

    batch_statistics: bool
    min_batch: int
    why: str


#: Which losses need batch statistics and the minimum batch size each accepts.
#: W-MSE with its default ``eps=0`` additionally needs ``n >= k + 1``
#: (see :func:`min_batch_size`).
NEEDS_BATCH: dict[str, BatchNeeds] = {
    "simsiam": BatchNeeds(False, 1, "per-sample cosine, averaged"),
    "negative_cosine": BatchNeeds(False, 1, "per-sample cosine, averaged"),
    "byol": BatchNeeds(False, 1, "per-sample normalised MSE, averaged"),
    "mse": BatchNeeds(False, 1, "per-sample squared distance, averaged"),
    "moco": BatchNeeds(False, 1, "negatives come from the queue (K >= n keys)"),
    "info_nce": BatchNeeds(True, 2, "in-batch negatives (2n - 2 per anchor)"),
    "moco_v3": BatchNeeds(True, 2, "in-batch negatives (n - 1 per query)"),
    "spectral_contrastive": BatchNeeds(True, 2, "negative pairs of different samples"),
    "barlow_twins": BatchNeeds(True, 2, "per-feature batch standardisation"),
    "vicreg": BatchNeeds(True, 2, "unbiased batch variance and covariance"),
    "wmse": BatchNeeds(True, 2, "batch covariance whitening (n >= k + 1 when eps = 0)"),
    "dino": BatchNeeds(True, 2, "teacher centre is an EMA of batch means"),
}

LOSSES: dict[str, Callable] = {
    "simsiam": simsiam,
    "negative_cosine": negative_cosine,
    "byol": byol,
    "mse": mse,
    "moco": moco,
    "info_nce": info_nce,
    "moco_v3": moco_v3,
    "spectral_contrastive": spectral_contrastive,
    "barlow_twins": barlow_twins,
    "vicreg": vicreg,
    "wmse": wmse,
    "dino": dino,
}

_ALIASES = {"simclr": "info_nce", "nt_xent": "info_nce", "ntxent": "info_nce", "mocov2": "moco",
            "moco_v2": "moco", "mocov3": "moco_v3", "barlow": "barlow_twins", "w_mse": "wmse",
            "spectral": "spectral_contrastive", "alignment": "mse"}


def _canonical(name: str) -> str:
    if not isinstance(name, str):
        raise TypeError(f"`name` must be a string; got {type(name).__name__}.")
    key = name.lower().replace("-", "_")
    key = _ALIASES.get(key, key)
    check_choice(key, "loss name", list(LOSSES) + list(_ALIASES))
    return key


def get(name: str) -> Callable:
    """Return the loss function registered as ``name`` (case-insensitive; ``-`` == ``_``).

    Names: the keys of :data:`LOSSES`, plus aliases ``simclr``/``nt_xent``
    (``info_nce``), ``moco_v2`` (``moco``), ``barlow``, ``w_mse``, ``spectral``,
    ``alignment`` (``mse``).

    Example:
      >>> get("SimCLR") is info_nce
      True
    """
    return LOSSES[_canonical(name)]


def min_batch_size(name: str, dim: int | None = None) -> int:
    """Smallest batch the loss ``name`` accepts; for ``wmse`` with feature dimension
    ``dim`` given, ``dim + 1`` (its default ``eps = 0`` needs a full-rank covariance).

    Example:
      >>> min_batch_size("vicreg"), min_batch_size("wmse", 64)
      (2, 65)
    """
    key = _canonical(name)
    m = NEEDS_BATCH[key].min_batch
    if key == "wmse" and dim is not None:
        m = max(m, int(dim) + 1)
    return m


__all__ = [
    "BatchNeeds", "LOSSES", "NEEDS_BATCH", "barlow_twins", "byol", "byol_decay_schedule", "dino",
    "ema_update", "get", "info_nce", "min_batch_size", "moco", "moco_v3", "mse", "negative_cosine",
    "simsiam", "spectral_contrastive", "vicreg", "wmse",
]
