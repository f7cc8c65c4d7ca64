"""Non-contrastive alignment losses: SimSiam, BYOL (with its EMA target), plain MSE."""

import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, Float, PyTree, ScalarLike

from ssl_geometry._src import ops as _ops
from ssl_geometry._src.checks import check_same_shape
from ssl_geometry._src.ops import ArrayIn
from ssl_geometry._src.ssl.losses._common import (
    EPS_TF_L2_NORMALIZE,
    EPS_TORCH_COSINE,
    check_pair,
    finite_loss,
    sg,
    unit_interval,
)
from ssl_geometry._src.ssl.losses.specs import EMA, BatchNeeds, LossSpec, ObjectiveSpec

__all__ = ["SPECS", "byol", "byol_decay_schedule", "ema_update", "mse", "negative_cosine", "simsiam"]


def _neg_cos(p, z):
    pn = _ops.l2_normalize(p, EPS_TORCH_COSINE)
    zn = _ops.l2_normalize(sg(z), EPS_TORCH_COSINE)
    return -jnp.mean(jnp.sum(pn * zn, axis=-1))


def negative_cosine(p: Float[ArrayIn, "n k"], z: Float[ArrayIn, "n k"]) -> Float[Array, ""]:
    """SimSiam's one-directional loss ``D(p, z) = -(1/n) sum_i cos(p_i, sg(z_i))``.

    Chen & He, "Exploring Simple Siamese Representation Learning", CVPR 2021,
    Eq. (1) with the stop-gradient of Eq. (3). ``cos`` floors each norm at
    ``1e-8`` (PyTorch ``F.cosine_similarity``, the reference code).

    Args:
      p: predictor outputs ``(n, k)``.
      z: projector outputs ``(n, k)`` (no gradient flows into ``z``).

    Returns:
      scalar in ``[-1, 1]``; invariant to positive rescaling of any ``p_i`` or ``z_i``
      (at any scale the dtype holds: the norms are overflow-safe).
    """
    check_pair(p, z, "p", "z")
    p, z = _ops.upcast(p, z)
    return finite_loss(_neg_cos(p, z), "negative_cosine", (p, z))


def simsiam(
    p1: Float[ArrayIn, "n k"], p2: Float[ArrayIn, "n k"], z1: Float[ArrayIn, "n k"], z2: Float[ArrayIn, "n k"]
) -> Float[Array, ""]:
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
    check_pair(p1, p2, "p1", "p2")
    check_pair(z1, z2, "z1", "z2")
    check_same_shape(p1, z1, "p1", "z1")
    p1, p2, z1, z2 = _ops.upcast(p1, p2, z1, z2)
    loss = 0.5 * _neg_cos(p1, z2) + 0.5 * _neg_cos(p2, z1)
    return finite_loss(loss, "simsiam", (p1, p2, z1, z2))


def _byol_regression(p, t):
    pn = _ops.l2_normalize(p, EPS_TF_L2_NORMALIZE)
    tn = _ops.l2_normalize(sg(t), EPS_TF_L2_NORMALIZE)
    return jnp.mean(2.0 - 2.0 * jnp.sum(pn * tn, axis=-1))


def byol(
    p1: Float[ArrayIn, "n k"], p2: Float[ArrayIn, "n k"], t1: Float[ArrayIn, "n k"], t2: Float[ArrayIn, "n k"]
) -> Float[Array, ""]:
    """BYOL symmetrised normalised MSE ``L = l(p1, sg(t2)) + l(p2, sg(t1))``.

    ``l(p, t) = (1/n) sum_i |p_i/|p_i| - t_i/|t_i||^2 = (1/n) sum_i (2 - 2 cos(p_i, t_i))``.
    Grill et al., "Bootstrap Your Own Latent", NeurIPS 2020, Eq. (2) and the
    total ``L^BYOL = L + L~`` (a *sum* of the two directions, as in the paper and
    DeepMind's JAX code). Normalisation is DeepMind's ``x * rsqrt(max(|x|^2,
    1e-12))`` (norm floor ``1e-6``), computed overflow-safe.

    Args:
      p1, p2: online predictions of views 1 and 2, ``(n, k)``.
      t1, t2: target-network projections of views 1 and 2, ``(n, k)`` (stop-gradient).

    Returns:
      scalar in ``[0, 8]``.
    """
    check_pair(p1, p2, "p1", "p2")
    check_pair(t1, t2, "t1", "t2")
    check_same_shape(p1, t1, "p1", "t1")
    p1, p2, t1, t2 = _ops.upcast(p1, p2, t1, t2)
    loss = _byol_regression(p1, t2) + _byol_regression(p2, t1)
    return finite_loss(loss, "byol", (p1, p2, t1, t2))


def ema_update(target: PyTree, online: PyTree, decay: ScalarLike) -> PyTree:
    """Exponential moving average of pytrees: ``target <- decay * target + (1 - decay) * online``.

    The BYOL / MoCo / DINO target-network update (Grill et al. 2020, Eq. (1);
    He et al. 2020, Eq. (2)). ``decay`` may be a Python float or a traced scalar
    (e.g. from :func:`byol_decay_schedule`; a traced value outside ``[0, 1]``
    raises at run time); it is cast to each leaf's dtype so float32 parameters
    stay float32.

    Example:
      >>> import jax.numpy as jnp
      >>> ema_update({"w": jnp.array(1.0)}, {"w": jnp.array(3.0)}, 0.75)["w"]
      Array(1.5, dtype=float64)
    """
    decay = unit_interval(decay, "decay")
    t_def = jax.tree_util.tree_structure(target)
    o_def = jax.tree_util.tree_structure(online)
    if t_def != o_def:  # type: ignore[operator]  # jax's PyTreeDef is an unresolved name in its stubs (no __eq__/__ne__ to mypy)
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
    unit_interval(base_decay, "base_decay")
    if not isinstance(total_steps, int) or total_steps < 1:
        raise ValueError(f"`total_steps` must be a positive int; got {total_steps!r}.")
    one_minus = optax.cosine_decay_schedule(init_value=1.0 - base_decay, decay_steps=total_steps)

    def schedule(step):
        return 1.0 - one_minus(step)

    return schedule


def mse(u1: Float[ArrayIn, "n k"], u2: Float[ArrayIn, "n k"]) -> Float[Array, ""]:
    """Plain alignment ``L = (1/n) sum_i |u1_i - u2_i|^2`` (sum over features, mean over samples).

    A quadratic loss with constant Hessian ``hess L = (2/n) [[I, -I], [-I, I]]``:
    the flat-metric control of Prop. 3.3 (docs/theory.md, section "prop3.3-barrier"). Limit: ``L`` is of
    degree 2 in the input scale; when its value exceeds the dtype's range
    (float32 differences ``>~ 1e19``) a ``FloatingPointError`` (under ``jit``: a
    run-time error) says so instead of returning ``inf``.
    """
    check_pair(u1, u2, "u1", "u2")
    u1, u2 = _ops.upcast(u1, u2)
    loss = jnp.mean(jnp.sum(jnp.square(u1 - u2), axis=-1))
    return finite_loss(loss, "mse", (u1, u2), degree=2)


# ----------------------------------------------------------------------------- this family's entries of the table

#: This family's entries of the objective table (:data:`ssl_geometry.objectives.TABLE`, which collects the
#: ``SPECS`` of every family module in table order): one :class:`~ssl_geometry.objectives.ObjectiveSpec` per loss
#: above, with its training wiring where a training objective is built on it (``docs/howto/extend.md``).
SPECS: tuple[ObjectiveSpec, ...] = (
    ObjectiveSpec(
        "simsiam",
        LossSpec(
            fn=simsiam,
            args=("p1", "p2", "z1", "z2"),
            differentiable=(0, 1),
            stop_gradient=(2, 3),
            stateful=False,
            batch=BatchNeeds(False, 1, "per-sample cosine, averaged"),
            hessian_psd=False,
            degree=0,
            family="cosine",
        ),
        objective="simsiam",
        inputs=("p1", "p2", "z1", "z2"),
        predictor=True,
    ),
    ObjectiveSpec(
        "negative_cosine",
        LossSpec(
            fn=negative_cosine,
            args=("p", "z"),
            differentiable=(0,),
            stop_gradient=(1,),
            stateful=False,
            batch=BatchNeeds(False, 1, "per-sample cosine, averaged"),
            hessian_psd=False,
            degree=0,
            family="cosine",
        ),
    ),
    ObjectiveSpec(
        "byol",
        LossSpec(
            fn=byol,
            args=("p1", "p2", "t1", "t2"),
            differentiable=(0, 1),
            stop_gradient=(2, 3),
            stateful=False,
            batch=BatchNeeds(False, 1, "per-sample normalised MSE, averaged"),
            hessian_psd=False,
            degree=0,
            family="cosine",
        ),
        objective="byol",
        inputs=("p1", "p2", "t1", "t2"),
        predictor=True,
        ema_target=True,
        hypers=(EMA,),
    ),
    ObjectiveSpec(
        "mse",
        LossSpec(
            fn=mse,
            args=("u1", "u2"),
            differentiable=(0, 1),
            stop_gradient=(),
            stateful=False,
            batch=BatchNeeds(False, 1, "per-sample squared distance, averaged"),
            hessian_psd=True,
            degree=2,
            family="cosine",
        ),
        aliases=("alignment",),
    ),
)
