"""Self-distillation: DINO's cross-entropy between teacher and student crops."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, ScalarLike

from ssl_geometry._src import fields
from ssl_geometry._src import ops as _ops
from ssl_geometry._src.checks import check_finite, check_min_batch, check_rank
from ssl_geometry._src.ops import ArrayIn
from ssl_geometry._src.ssl.losses._common import finite_loss, positive, sg, unit_interval
from ssl_geometry._src.ssl.losses.specs import EMA, BatchNeeds, Hyper, LossSpec, ObjectiveSpec

__all__ = ["SPECS", "dino"]


def _check_dino_shapes(student, teacher, center) -> None:
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


def dino(
    student: Float[ArrayIn, "vs n k"],
    teacher: Float[ArrayIn, "vt n k"],
    center: Float[ArrayIn, " k"],
    *,
    student_temp: ScalarLike = 0.1,
    teacher_temp: ScalarLike = 0.04,
    center_momentum: ScalarLike = 0.9,
) -> tuple[Float[Array, ""], Float[Array, " k"]]:
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

    (``m = center_momentum``; the loss uses the centre *before* the update; the new
    centre keeps ``center``'s dtype). The teacher-temperature warm-up of the
    reference code is the caller's schedule.
    """
    _check_dino_shapes(student, teacher, center)
    student_temp = positive(student_temp, "student_temp")
    teacher_temp = positive(teacher_temp, "teacher_temp")
    center_momentum = unit_interval(center_momentum, "center_momentum")
    center_dtype = jnp.result_type(center)
    student, t, c = _ops.upcast(student, sg(teacher), sg(center))
    v_s, n, _ = student.shape
    v_t = t.shape[0]
    p_t = jax.nn.softmax((t - c) / teacher_temp, axis=-1)
    log_q = jax.nn.log_softmax(student / student_temp, axis=-1)
    ce = -jnp.einsum("tnk,snk->ts", p_t, log_q) / n  # (V_t, V_s): mean over samples
    mask = 1.0 - jnp.eye(v_t, v_s, dtype=ce.dtype)
    loss = jnp.sum(ce * mask) / (v_t * v_s - v_t)
    batch_center = jnp.mean(t, axis=(0, 1))
    new_center = (center_momentum * c + (1.0 - center_momentum) * batch_center).astype(center_dtype)
    return finite_loss(loss, "dino", (student, t, c)), new_center


# ----------------------------------------------------------------------------- this family's entries of the table


def _dino_center(key, dim, dtype, values):
    """DINO's teacher centre, zero at the start."""
    del key, values
    return jnp.zeros((dim,), dtype)


_DINO_TEMPS = Hyper("dino_temps", (0.1, 0.04), fields.sequence(fields.POSITIVE, 2), "DINO (student, teacher) temps")
_DINO_CENTER_MOMENTUM = Hyper("dino_center_momentum", 0.9, fields.UNIT, "momentum of DINO's teacher centre")


#: This family's entries of the objective table (:data:`ssl_geometry.objectives.TABLE`, which collects the
#: ``SPECS`` of every family module in table order): one :class:`~ssl_geometry.objectives.ObjectiveSpec` per loss
#: above, with its training wiring where a training objective is built on it (``docs/howto/extend.md``).
SPECS: tuple[ObjectiveSpec, ...] = (
    ObjectiveSpec(
        "dino",
        LossSpec(
            fn=dino,
            args=("student", "teacher", "center"),
            differentiable=(0,),
            stop_gradient=(1, 2),
            stateful=True,
            batch=BatchNeeds(True, 2, "teacher centre is an EMA of batch means"),
            hessian_psd=True,
            degree=None,
            family="distillation",
        ),
        objective="dino",
        inputs=("z", "t", "center"),
        options={
            "student_temp": ("dino_temps", 0),
            "teacher_temp": ("dino_temps", 1),
            "center_momentum": "dino_center_momentum",
        },
        ema_target=True,
        hypers=(EMA, _DINO_TEMPS, _DINO_CENTER_MOMENTUM),
        state={"center": _dino_center},
    ),
)
