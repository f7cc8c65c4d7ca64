"""The one optimisation loop: any optax optimiser over any loss, on device, in ``lax.scan`` chunks.

Every optimisation loop of the suite goes through :func:`fit` (the experiments' head fits, the
MiniLM fine-tuning, :func:`ssl_geometry.dynamics`). One step is

    g_k = grad_theta L(theta_k; b_k),    (u_k, s_{k+1}) = optimizer.update(g_k, s_k, theta_k),
    theta_{k+1} = theta_k + u_k,

with ``b_k`` the ``k``-th slice of ``batches`` (any pytree with leading axis ``steps``: data,
per-step PRNG keys from which the loss draws its views, ...) and ``args`` the data shared by
every step. The steps run inside one jitted program: an outer ``lax.scan`` over chunks of
``chunk`` steps, an inner ``lax.scan`` over the steps of a chunk, ``observe(params, k, args)``
recorded at each chunk's end. The loss of every step is recorded (no host round trip per step).

One signature, as diffrax passes ``args`` to every vector field whether it uses it or not::

    loss_fn(params, batch, args) -> scalar                                 # batch = batches[k] or None
    loss_fn(params, state, batch, args) -> (scalar, new_state)             # when a loss `state` is given
    observe(params, k, args) -> pytree

``batch`` is ``None`` when there are no ``batches``, ``args`` is ``None`` when none is given;
the loss is never called with fewer arguments.

Failure is explicit: the first step whose loss, gradient, loss state or new parameters are
non-finite is reported (``first_bad_step``); from there on the parameters are frozen at the
last finite ones, and :func:`fit` raises :class:`FitError` unless ``throw=False``.

Compiled programs are cached per ``(loss_fn, optimizer, observe, shapes)``: calling :func:`fit`
again with new arrays of the same shapes does not compile again (pass the same function
objects; a lambda made anew per call is a new cache key).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ssl_geometry._src.checks import check_arity
from ssl_geometry._src.ops import loop_reports_non_finite

PyTree = Any

__all__ = ["FitResult", "FitError", "fit", "tree_all_finite"]


class FitResult(NamedTuple):
    """What :func:`fit` returns.

    Attributes:
      params: final parameters (the last finite ones when a step failed).
      state: final loss state (``None`` for a stateless loss).
      opt_state: final optimiser state.
      losses: ``(steps,)`` loss of every step, evaluated at the parameters *before* the step;
        NaN from the first failing step on.
      observed: ``observe(params, k)`` stacked over ``k = 0, chunk, 2 chunk, ..., steps``
        (leading axis ``steps // chunk + 1``); ``None`` without ``observe``.
      n_steps: steps taken (``steps`` when every step was finite, else ``first_bad_step``).
      first_bad_step: index of the first non-finite step, ``None`` when there was none.
    """

    params: PyTree
    state: PyTree
    opt_state: PyTree
    losses: np.ndarray
    observed: PyTree
    n_steps: int
    first_bad_step: Optional[int]

    @property
    def ok(self) -> bool:
        """True when every step was finite."""
        return self.first_bad_step is None


class FitError(FloatingPointError):
    """A :func:`fit` run hit a non-finite loss, gradient, state or update; ``.result`` holds the run."""

    def __init__(self, message: str, result: FitResult):
        super().__init__(message)
        self.result = result


def tree_all_finite(tree) -> jax.Array:
    """``True`` (a traced bool) when every inexact leaf of ``tree`` is finite."""
    leaves = [
        jnp.all(jnp.isfinite(x))
        for x in jax.tree_util.tree_leaves(tree)
        if jnp.issubdtype(jnp.result_type(x), jnp.inexact)
    ]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


def _value_and_grad(loss_fn, params, state, batch, args, has_state):
    """``(loss, grad, new_state)`` of ``loss_fn(params, batch, args)`` (with a state: ``(params, state, batch, args)``)."""
    if has_state:
        (loss, new_state), g = jax.value_and_grad(loss_fn, has_aux=True)(params, state, batch, args)
        return loss, g, new_state
    loss, g = jax.value_and_grad(loss_fn)(params, batch, args)
    return loss, g, state


def _make_step(loss_fn, optimizer, has_state, has_batches):
    """One optimiser step ``step(carry, (k, batch, args)) -> (carry, loss)``, frozen after the first bad step."""

    def step(carry, xs):
        params, state, opt_state, first_bad = carry
        k, batch, args = xs
        loss, g, new_state = _value_and_grad(loss_fn, params, state, batch if has_batches else None, args, has_state)
        updates, new_opt = optimizer.update(g, opt_state, params)
        new_params = optax.apply_updates(params, updates)
        good = jnp.isfinite(loss) & tree_all_finite(g) & tree_all_finite(new_params) & tree_all_finite(new_state)
        alive = first_bad < 0
        take = good & alive
        first_bad = jnp.where(alive & ~good, k, first_bad)
        pick = lambda new, old: jax.tree_util.tree_map(lambda a, b: jnp.where(take, a, b), new, old)
        loss = jnp.where(alive & good, loss, jnp.nan)
        return (pick(new_params, params), pick(new_state, state), pick(new_opt, opt_state), first_bad), loss

    return step


def _make_observer(observe):
    def observe_at(params, k, args):
        return None if observe is None else observe(params, k, args)

    return observe_at


@functools.lru_cache(maxsize=128)
def _stepper(loss_fn, optimizer, observe, has_state, has_batches):
    """``(jitted step, jitted observer)`` for the host-loop mode of :func:`fit` (``scan=False``)."""
    return jax.jit(_make_step(loss_fn, optimizer, has_state, has_batches)), jax.jit(_make_observer(observe))


@functools.lru_cache(maxsize=128)
def _runner(loss_fn, optimizer, observe, has_state, has_batches, n_chunks, chunk):
    """The jitted program of :func:`fit` for one static configuration (``scan=True``)."""
    step = _make_step(loss_fn, optimizer, has_state, has_batches)
    observe_at = _make_observer(observe)

    @jax.jit
    def run(params0, state0, opt_state0, batches, args):
        def one_chunk(carry, xs):
            ks, bs = xs
            carry, losses = jax.lax.scan(lambda c, x: step(c, (x[0], x[1], args)), carry, (ks, bs))
            return carry, (losses, observe_at(carry[0], ks[-1] + 1, args))

        ks = jnp.arange(n_chunks * chunk).reshape(n_chunks, chunk)
        init = (params0, state0, opt_state0, jnp.asarray(-1))
        carry, (losses, observed) = jax.lax.scan(one_chunk, init, (ks, batches))
        if observe is not None:
            first = observe_at(params0, jnp.asarray(0), args)
            observed = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]), first, observed)
        return carry, losses.reshape(-1), observed

    return run


def _check_functions(loss_fn, observe, has_state: bool) -> None:
    """The loss and ``observe`` take the arguments :func:`fit` passes (``TypeError`` naming the signature)."""
    if has_state:
        check_arity(
            loss_fn, "loss_fn", 4, "loss_fn(params, state, batch, args) -> (loss, new_state) (a `state` was given)"
        )
    else:
        check_arity(loss_fn, "loss_fn", 3, "loss_fn(params, batch, args) -> scalar")
    if observe is not None:
        check_arity(observe, "observe", 3, "observe(params, k, args) -> pytree")


def _check_args(optimizer, steps, chunk, batches):
    if not isinstance(optimizer, optax.GradientTransformation):
        raise TypeError(f"`optimizer` must be an optax.GradientTransformation; got {type(optimizer).__name__}.")
    if not isinstance(steps, (int, np.integer)) or isinstance(steps, bool) or steps < 1:
        raise ValueError(f"`steps` must be a positive int; got {steps!r}.")
    if not isinstance(chunk, (int, np.integer)) or isinstance(chunk, bool) or chunk < 1:
        raise ValueError(f"`chunk` must be a positive int; got {chunk!r}.")
    if steps % chunk:
        raise ValueError(f"`steps` ({steps}) must be a multiple of `chunk` ({chunk}).")
    if batches is not None:
        for leaf in jax.tree_util.tree_leaves(batches):
            if jnp.ndim(leaf) < 1 or jnp.shape(leaf)[0] != steps:
                raise ValueError(
                    f"every leaf of `batches` must have leading axis `steps`={steps}; "
                    f"got shape {tuple(jnp.shape(leaf))}."
                )


def fit(
    loss_fn: Callable,
    params: PyTree,
    optimizer: optax.GradientTransformation,
    *,
    steps: int,
    batches: PyTree = None,
    args: Any = None,
    state: PyTree = None,
    opt_state: PyTree = None,
    chunk: Optional[int] = None,
    observe: Optional[Callable] = None,
    scan: bool = True,
    throw: bool = True,
) -> FitResult:
    """Minimise ``loss_fn`` with ``optimizer`` for ``steps`` steps on device (see the module docstring).

    Args:
      loss_fn: ``loss_fn(params, batch, args) -> scalar`` with ``batch = batches[k]`` (``None``
        without ``batches``) and ``args`` as given (``None`` if not); with a loss ``state``,
        ``loss_fn(params, state, batch, args) -> (loss, new_state)`` (e.g. BatchNorm statistics,
        an EMA target).
      params: initial parameters (any pytree).
      optimizer: any ``optax.GradientTransformation``.
      steps: number of optimiser steps.
      batches: per-step data, every leaf with leading axis ``steps``.
      args: data shared by every step (full-batch data, fixed targets, constants).
      state: initial loss state; given (not ``None``), the loss takes and returns it.
      opt_state: optimiser state to continue from (default ``optimizer.init(params)``).
      chunk: steps per inner scan and observation interval (default ``steps``).
      observe: ``observe(params, k, args) -> pytree`` recorded at ``k = 0, chunk, ..., steps``.
      scan: run the steps inside one jitted ``lax.scan`` program (default). ``False`` runs the
        same jitted step once per step from a host loop, dispatched asynchronously (no host sync
        per step; the losses stay on device): on XLA:CPU a convolutional network inside a
        ``while`` loop runs about 20x slower than the same step jitted on its own (measured on
        the guillotine's ResNet stem, batch 128: 0.28 s against 0.013 s per step), so CPU
        training of conv nets passes ``scan=False``. Both modes give the same numbers.
      throw: raise :class:`FitError` on a non-finite step (default); ``False`` returns the
        flagged result.

    Returns:
      :class:`FitResult`.

    Example:
      >>> import jax.numpy as jnp, optax
      >>> r = fit(lambda p, batch, args: 0.5 * jnp.sum(p ** 2), jnp.ones(2), optax.sgd(0.5), steps=4)
      >>> [float(x) for x in r.params], [float(l) for l in r.losses]
      ([0.0625, 0.0625], [1.0, 0.25, 0.0625, 0.015625])
    """
    chunk = steps if chunk is None else chunk
    has_state = state is not None
    _check_args(optimizer, steps, chunk, batches)
    _check_functions(loss_fn, observe, has_state)
    if not jax.tree_util.tree_leaves(params):
        raise ValueError("`params` has no leaves.")
    n_chunks = steps // chunk
    if batches is not None:
        xb = jax.tree_util.tree_map(lambda b: jnp.reshape(b, (n_chunks, chunk) + jnp.shape(b)[1:]), batches)
    else:
        xb = jnp.zeros((n_chunks, chunk), jnp.int32)  # scanned alongside the step index
    opt_state = optimizer.init(params) if opt_state is None else opt_state
    key = (loss_fn, optimizer, observe, has_state, batches is not None)
    with loop_reports_non_finite():  # a diverging loss is this loop's first non-finite step, not an exception
        if scan:
            run = _runner(*key, n_chunks, chunk)
            (params, state, opt_state, first_bad), losses, observed = run(params, state, opt_state, xb, args)
        else:
            (params, state, opt_state, first_bad), losses, observed = _host_loop(
                key, params, state, opt_state, batches, args, steps, chunk
            )
    first_bad = int(first_bad)
    result = FitResult(
        params=params,
        state=state if has_state else None,
        opt_state=opt_state,
        losses=np.asarray(losses),
        observed=observed,
        n_steps=steps if first_bad < 0 else first_bad,
        first_bad_step=None if first_bad < 0 else first_bad,
    )
    if first_bad >= 0 and throw:
        raise FitError(
            f"fit: the loss, gradient, state or update of step {first_bad} of {steps} was non-finite; "
            "the returned parameters are those before that step (pass throw=False to get them).",
            result,
        )
    return result


def _host_loop(key, params, state, opt_state, batches, args, steps, chunk):
    """``scan=False``: the jitted step dispatched once per step from Python (see :func:`fit`)."""
    step, observe_at = _stepper(*key)
    carry = (params, state, opt_state, jnp.asarray(-1))
    losses, observed = [], [observe_at(params, jnp.asarray(0), args)] if key[2] is not None else None
    for k in range(steps):
        batch = jax.tree_util.tree_map(lambda b: b[k], batches) if batches is not None else jnp.zeros((), jnp.int32)
        carry, loss = step(carry, (jnp.asarray(k), batch, args))
        losses.append(loss)
        if observed is not None and (k + 1) % chunk == 0:
            observed.append(observe_at(carry[0], jnp.asarray(k + 1), args))
    if observed is not None:
        observed = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *observed)
    return carry, jnp.stack(losses), observed
