"""Linearised dynamics at an equilibrium: predicted escape rates for gradient flow and SGD.

Near an equilibrium ``y*`` of ``dy/dt = F(y)`` (``F(y*) = 0``) a deviation ``delta`` obeys, to
first order, ``d delta/dt = J delta`` with ``J = dF/dy (y*)``, so

    delta(t) = expm(J t) delta(0),     |delta(t)| ~ exp(lambda_lead t),
    lambda_lead = max_i Re lambda_i(J).

For the gradient flow of a loss with stop-gradient targets (``F = -grad L`` where the target
depends on the state but is not differentiated), ``J`` is **not** the negative Hessian and not
symmetric; :func:`linearise` forms the exact ``J`` with ``jax.jacfwd`` of the field itself.

A discrete optimiser step ``y_{k+1} = y_k + lr F(y_k)`` (gradient descent) has the exact
linearisation ``delta_{k+1} = (I + lr J) delta_k`` (``I - lr H`` for ``J = -H``). Heavy-ball
momentum ``mu`` (optax ``sgd(lr, momentum=mu)``: ``v <- mu v - F``, ``y <- y - lr v``) is the
companion map on ``(delta, v)``::

    [delta']   [I + lr J   -lr mu I] [delta]
    [  v'  ] = [  -J          mu I ] [  v  ]

whose spectral radius is the predicted per-step growth factor (:func:`sgd_growth`). A step
escapes a flow-stable equilibrium when ``lr J`` has an eigenvalue outside the stability region
(for GD: a Hessian eigenvalue beyond ``2 / lr``) and a flow-unstable one whenever ``J`` has an
eigenvalue with positive real part.

:func:`amplification` measures how much a map magnifies a perturbation (``|Df(x) v| / |v|``);
applied to train-mode BatchNorm at a nearly collapsed batch it is the mechanism by which
BatchNorm un-collapses outputs (``~ 1 / sqrt(var + eps)``).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from ssl_geometry._src.checks import check_finite, check_positive

PyTree = Any

__all__ = [
    "Linearisation",
    "gradient_field",
    "field_jacobian",
    "linearise",
    "visible_rate",
    "sgd_map",
    "sgd_growth",
    "amplification",
    "predict_flow",
    "predict_sgd",
]


class Linearisation(NamedTuple):
    """The linearised vector field at a point.

    Attributes:
      jacobian: ``J = dF/dy`` over the ravelled state, ``(m, m)`` (NumPy, the state's dtype).
      eigenvalues: the ``m`` eigenvalues of ``J`` (complex), sorted by decreasing real part.
      eigenvectors: the right eigenvectors, columns in the order of ``eigenvalues``.
      rate: ``max Re lambda(J)``, the predicted exponential rate of a generic deviation.
      field_norm: ``|F(y)|_2`` at the point (0 at an exact equilibrium).
      asymmetry: ``|J - J^T|_F / |J|_F`` (0 for a gradient field without stop-gradient).
      stiffness: ``max |Re lambda| / max(|rate|, tiny)``, the ratio of the fastest time scale to
        the escape time scale (large = stiff: use an implicit solver).
      unravel: maps a ravelled ``(m,)`` vector back to the state's pytree.
    """

    jacobian: np.ndarray
    eigenvalues: np.ndarray
    eigenvectors: np.ndarray
    rate: float
    field_norm: float
    asymmetry: float
    stiffness: float
    unravel: Callable


def gradient_field(loss_fn: Callable, rates: Optional[PyTree] = None, target_fn: Optional[Callable] = None) -> Callable:
    """The (preconditioned) gradient-flow field ``F(y, args) = -rates * grad_1 L(y, T(y), args)``.

    Without ``target_fn``: ``loss_fn(y, batch, args)`` called with ``batch=None``, the loss
    signature of :func:`ssl_geometry.dynamics.gradient_flow` (so one loss gives the flow and its
    linearisation), and ``F = -rates * grad L`` (a gradient field; ``J = -rates * Hessian``). With
    ``target_fn``: ``loss_fn(y, target, args)`` (the target in the batch's place) is differentiated
    in ``y`` only, at ``target = target_fn(y, args)`` -- the stop-gradient of SSL objectives
    (``mse(p, sg u2)``): the target moves with the state but is not differentiated, so ``F``
    is not a gradient and its Jacobian is not symmetric.

    Write a stop-gradient target this way, **not** with ``lax.stop_gradient`` inside
    ``loss_fn``: ``stop_gradient`` also zeroes the target's tangent in the outer ``jacfwd`` of
    :func:`field_jacobian`, which then returns the Jacobian of a field whose target is frozen
    (wrong whenever the target depends on the state).

    ``rates`` is a pytree of the state's structure with a scalar (or array) per leaf: a
    different speed for each parameter group (timescale separation, e.g. the head ``tau``
    times faster than the representation; 0 freezes a group).
    """
    if rates is None:
        return _cached_field(loss_fn, target_fn)
    return _make_field(loss_fn, rates, target_fn)


@functools.lru_cache(maxsize=128)
def _cached_field(loss_fn, target_fn):
    """One field object per (loss, target) so that its jitted Jacobian is compiled once."""
    return _make_field(loss_fn, None, target_fn)


def _make_field(loss_fn, rates, target_fn):
    def field(y, args=None):
        if target_fn is None:
            g = jax.grad(loss_fn)(y, None, args)
        else:
            g = jax.grad(loss_fn)(y, target_fn(y, args), args)
        if rates is None:
            return jax.tree_util.tree_map(jnp.negative, g)
        return jax.tree_util.tree_map(lambda gi, r: -r * gi, g, rates)

    return field


def field_jacobian(field: Callable, y: PyTree, args: Any = None) -> tuple[np.ndarray, np.ndarray, Callable]:
    """``(J, F(y), unravel)``: the dense Jacobian ``dF/dy`` over the ravelled state and the field.

    ``field(y, args) -> pytree`` of the state's structure. ``J`` is formed by forward-mode
    ``jax.jacfwd`` of ``y_flat -> ravel(F(unravel(y_flat)))`` (exact, ``m`` JVPs).
    """
    flat, unravel = ravel_pytree(y)
    if flat.size == 0:
        raise ValueError("`y` has no entries.")
    J, F = _jacobian_and_field(field, y, args)
    J, F = np.asarray(J), np.asarray(F)
    check_finite(J, "Jacobian of `field`")
    return J, F, unravel


@functools.partial(jax.jit, static_argnums=0)
def _jacobian_and_field(field, y, args):
    """Jitted once per ``field`` (and shapes): ``(dF/dy, F)`` over the ravelled state."""
    flat, unravel = ravel_pytree(y)

    def f(x):
        out, _ = ravel_pytree(field(unravel(x), args))
        if out.shape != x.shape:
            raise ValueError(
                f"`field` must return a pytree of the state's structure ({x.size} entries); got {out.size} entries."
            )
        return out

    return jax.jacfwd(f)(flat), f(flat)


def linearise(field: Callable, y: PyTree, args: Any = None) -> Linearisation:
    """Linearise ``dy/dt = field(y, args)`` at ``y``: Jacobian, spectrum and predicted rate.

    ``delta(t) = expm(J t) delta(0)``; the leading rate is ``max Re lambda(J)`` (NumPy ``eig``;
    ``J`` need not be symmetric). ``field_norm`` says how far ``y`` is from an equilibrium:
    the prediction is about an equilibrium, so check it is small against the scale of ``J``.

    Example:
      >>> import jax.numpy as jnp
      >>> lin = linearise(lambda y, a: jnp.array([[1.0, 2.0], [0.0, -3.0]]) @ y, jnp.zeros(2))
      >>> round(lin.rate, 12), lin.field_norm
      (1.0, 0.0)
    """
    J, F, unravel = field_jacobian(field, y, args)
    ev, vec = np.linalg.eig(J)
    order = np.argsort(-ev.real, kind="stable")
    ev, vec = ev[order], vec[:, order]
    rate = float(ev.real[0])
    nj = float(np.linalg.norm(J))
    asym = float(np.linalg.norm(J - J.T) / nj) if nj > 0 else 0.0
    tiny = np.finfo(J.dtype).tiny
    stiff = float(np.max(np.abs(ev.real)) / max(abs(rate), tiny))
    return Linearisation(
        jacobian=J,
        eigenvalues=ev,
        eigenvectors=vec,
        rate=rate,
        field_norm=float(np.linalg.norm(F)),
        asymmetry=asym,
        stiffness=stiff,
        unravel=unravel,
    )


def visible_rate(lin: Linearisation, observable: np.ndarray, *, tol: float = 1e-6) -> float:
    """Leading rate among the modes an observable sees: ``max {Re lambda_i : |O v_i| > tol |O| |v_i|}``.

    ``observable`` ``O`` is a ``(q, m)`` matrix (e.g. the projection of the state onto the
    spread of the representation across samples, which a collapse monitor reads). A mode the
    observable cannot see (``O v_i = 0``, e.g. a common translation of all samples) cannot
    drive the measured deviation. Returns ``-inf`` when no mode is visible.
    """
    O = np.asarray(observable)
    m = lin.jacobian.shape[0]
    if O.ndim != 2 or O.shape[1] != m:
        raise ValueError(f"`observable` must be a (q, {m}) matrix; got shape {O.shape}.")
    scale = np.linalg.norm(O, 2)
    seen = np.linalg.norm(O @ lin.eigenvectors, axis=0) > tol * scale * np.linalg.norm(lin.eigenvectors, axis=0)
    return float(np.max(lin.eigenvalues.real[seen])) if np.any(seen) else float("-inf")


def sgd_map(J: np.ndarray, lr: float, momentum: float = 0.0) -> np.ndarray:
    """The exact linearisation of one optax SGD step at an equilibrium (see the module docstring).

    ``momentum = 0``: ``I + lr J`` (``m x m``). ``momentum = mu > 0``: the ``2m x 2m`` companion
    map on ``(delta, v)``.
    """
    J = np.asarray(J)
    check_positive(lr, "lr")
    if not 0.0 <= momentum < 1.0:
        raise ValueError(f"`momentum` must be in [0, 1); got {momentum}.")
    m = J.shape[0]
    eye = np.eye(m, dtype=J.dtype)
    if momentum == 0.0:
        return eye + lr * J
    top = np.concatenate([eye + lr * J, -lr * momentum * eye], axis=1)
    bottom = np.concatenate([-J, momentum * eye], axis=1)
    return np.concatenate([top, bottom], axis=0)


def sgd_growth(
    J: np.ndarray, lr: float, momentum: float = 0.0, observable: Optional[np.ndarray] = None, *, tol: float = 1e-6
) -> float:
    """Predicted per-step growth factor of a deviation under SGD: spectral radius of :func:`sgd_map`.

    The blocks of :func:`sgd_map` are polynomials in ``J``, so ``det(x I - A) = prod_j (x^2 - (1 + mu
    + lr lambda_j) x + mu)``: each eigenvalue ``lambda_j`` of ``J`` gives the roots
    ``x = (b +- sqrt(b^2 - 4 mu)) / 2``, ``b = 1 + mu + lr lambda_j`` (``x = 1 + lr lambda_j`` for
    ``mu = 0``), whose ``delta`` part is ``lambda_j``'s eigenvector -- exact, from one ``m x m``
    eigendecomposition. > 1: the step escapes (even from a flow-stable point when ``lr`` is
    large), < 1: it contracts. With ``observable`` ``O`` (``(q, m)``) only the roots of eigenvalues
    whose eigenvectors ``O`` sees count (as :func:`visible_rate`); ``0`` when none is visible.
    """
    J = np.asarray(J)
    sgd_map(J[:1, :1], lr, momentum)  # argument checks
    ev, vec = np.linalg.eig(J)
    b = 1.0 + momentum + lr * ev
    disc = np.sqrt(b * b - 4.0 * momentum + 0j)
    mags = np.maximum(np.abs((b + disc) / 2), np.abs((b - disc) / 2))
    if observable is None:
        return float(np.max(mags))
    O = np.asarray(observable)
    seen = np.linalg.norm(O @ vec, axis=0) > tol * np.linalg.norm(O, 2) * np.linalg.norm(vec, axis=0)
    return float(np.max(mags[seen])) if np.any(seen) else 0.0


def predict_flow(J: np.ndarray, delta0: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """``delta(t) = expm(J t) delta0`` at the (uniformly spaced, from 0) times ``ts``: ``(len(ts), m)``.

    Uses ``E = expm(J dt)`` once and ``delta_{j+1} = E delta_j`` (exact for uniform ``ts``).
    """
    import scipy.linalg

    ts = np.asarray(ts, float)
    dt = np.diff(ts)
    if ts.ndim != 1 or ts[0] != 0 or (dt.size and not np.allclose(dt, dt[0], rtol=1e-9, atol=0)):
        raise ValueError("`ts` must be uniformly spaced times starting at 0.")
    out = np.empty((len(ts), len(delta0)))
    out[0] = delta0
    if dt.size:
        E = scipy.linalg.expm(np.asarray(J) * dt[0])
        for j in range(1, len(ts)):
            out[j] = E @ out[j - 1]
    return out


def predict_sgd(J: np.ndarray, delta0: np.ndarray, lr: float, momentum: float, steps: int) -> np.ndarray:
    """``delta_k`` of the linearised SGD map (:func:`sgd_map`, zero initial velocity), ``k = 0..steps``."""
    A = sgd_map(J, lr, momentum)
    m = len(delta0)
    x = np.zeros(A.shape[0])
    x[:m] = delta0
    out = np.empty((steps + 1, m))
    out[0] = delta0
    for k in range(1, steps + 1):
        x = A @ x
        out[k] = x[:m]
    return out


def amplification(fn: Callable, x: jax.Array, v: jax.Array) -> float:
    """``|Df(x) v| / |v|``: how much ``fn`` magnifies a perturbation ``v`` of its input at ``x``.

    For train-mode BatchNorm at a batch of spread ``s`` (per feature) and a centred
    perturbation it is ``gamma / sqrt(s^2 + eps)``: at a collapsed batch (``s -> 0``) about
    ``gamma / sqrt(eps)``, the factor by which BatchNorm re-standardises a collapsed layer.
    """
    x, v = jnp.asarray(x), jnp.asarray(v)
    if x.shape != v.shape:
        raise ValueError(f"`v` must have the shape of `x` {x.shape}; got {v.shape}.")
    nv = float(jnp.linalg.norm(v))
    if nv == 0:
        raise ValueError("`v` must be a non-zero perturbation.")
    _, jv = jax.jvp(fn, (x,), (v,))
    return float(jnp.linalg.norm(jv)) / nv
