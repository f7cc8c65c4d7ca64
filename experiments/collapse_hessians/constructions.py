"""The heads of the width sweep (:mod:`experiments.collapse_hessians.widths`): hidden units placed at a zero of sigma'.

docs/theory.md, section "Thm 4.1 repaired: when a collapsed equilibrium is unstable", parts (c) and (d). Every head
is bias-free, float64, with the one smooth activation ``sigma`` on every hidden layer; ``c ~ N(0, I_d)``.

One hidden layer, ``d -> h -> k`` (``h(z) = sigma(z W1) W2``, the paper's projector shape):

* ``random``: the initialiser's draw;
* ``rank_drop``: ``h - d + 1`` columns of ``W1`` moved along ``c`` so that ``c W1`` hits the zero ``x0`` of
  ``sigma'`` (:func:`place_at_zero`): ``J(c) = W2^T diag(sigma'(c W1)) W1^T`` keeps ``d - 1`` units' worth of rank;
* ``bottleneck``: ``d -> d // 2 -> k``, a constant-rank bottleneck.

The composed SimSiam head, part (d), ``d -> h -> k`` then ``k -> p -> k`` with ``p >= d`` (the paper:
``512 -> 2048 -> 2048`` then ``2048 -> 512 -> 2048``, ``p = d``): ``u(z) = sigma(y(z) V1) V2`` with
``y(z) = sigma(z W1) W2``, so

    J(c) = V2^T diag(sigma'(b)) V1^T W2^T diag(sigma'(a)) W1^T,   a = c W1,  b = y(c) V1,

of generic rank ``min(d, h - n0(a), p - n0(b))`` (``n0``: the units at a zero of ``sigma'``):

* ``composed``: the initialiser's draw, no unit placed: full column rank;
* ``composed_rank_drop``: ``p - d + 1`` predictor hidden units (one at ``p = d``) placed at ``x0`` by moving their
  columns of ``V1`` along ``y(c)`` (:func:`place_at_zero` with ``y(c)`` for ``c``; the projector, hence ``y(c)``,
  untouched): rank ``d - 1``.

At ``p = d`` the fixed-target equilibria of a composed head are special: ``J^T rho_i = 0`` puts ``V1 D2 V2 rho_i``
(``D2 = diag(sigma'(b))``) in ``null(J_proj^T)``, which meets the ``d``-dimensional ``range(V1)`` only in 0, so
``D2 V2 rho_i = 0``. For the initialiser's head ``V2 rho_i = 0``, hence ``rho_i . u(z) = 0`` for every ``z``:
``M = 0`` exactly and ``s* = inf`` (stable at every residual). At the rank drop ``(V2 rho_i)_j`` survives at the
placed unit ``j`` alone: ``M_i = (V2 rho_i)_j sigma''(b_j) g g^T`` with ``g = J_proj^T V1[:, j]``, rank one and
non-zero on ``null(J)`` (tests/test_collapse_hessians_widths.py checks both).

A ``*rank_drop`` construction has no head for an activation whose ``sigma'`` has no zero (tanh, sigmoid,
softplus): :func:`draw_head` returns ``None`` and the sweep builds nothing there (:func:`widths.heads_of` skips it).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ssl_geometry import activations, heads

#: The constructions of a one-hidden-layer rung ``(d, h, k)`` and of a composed rung ``(d, h, k, p)``.
ONE_LAYER, COMPOSED = ("random", "rank_drop", "bottleneck"), ("composed", "composed_rank_drop")
CONSTRUCTIONS = ONE_LAYER + COMPOSED


@functools.lru_cache(maxsize=None)
def _sigma_prime(activation: str):
    """``x -> sigma'(x)`` elementwise on a 1-D array, jitted once per activation name."""
    fn = activations.get(activation)
    return jax.jit(jax.vmap(jax.grad(lambda x: fn(x))))


@functools.lru_cache(maxsize=None)
def sigma_prime_zero(activation, lo: float = -8.0, hi: float = 8.0, num: int = 1601) -> float | None:
    """The first zero of ``sigma'`` on ``[lo, hi]``: a sign change of ``sigma'`` on a grid of ``num`` points,
    bisected in float64 to adjacent floats; ``None`` when ``sigma'`` keeps one sign on the grid (tanh,
    sigmoid, softplus). Swish: ``-1.2785``; GELU (erf): ``-0.7518``."""
    if not (lo < hi and num >= 2):
        raise ValueError(f"need lo < hi and num >= 2; got lo={lo}, hi={hi}, num={num}.")
    sp = _sigma_prime(activation)
    x = np.linspace(lo, hi, num)
    v = np.asarray(sp(jnp.asarray(x, jnp.float64)))
    if not np.all(np.isfinite(v)):
        raise FloatingPointError(f"sigma' of {activation!r} is not finite on [{lo}, {hi}].")
    change = np.nonzero(np.sign(v[:-1]) * np.sign(v[1:]) <= 0)[0]
    if change.size == 0:
        return None
    a, b = float(x[change[0]]), float(x[change[0] + 1])
    fa = float(v[change[0]])
    if fa == 0.0:
        return a
    for _ in range(200):
        m = 0.5 * (a + b)
        if m in (a, b):
            break
        fm = float(sp(jnp.asarray([m], jnp.float64))[0])
        if fm == 0.0:
            return m
        a, b, fa = (m, b, fm) if np.sign(fm) == np.sign(fa) else (a, m, fa)
    return 0.5 * (a + b)


def units_at_zero(pre, activation, zero_tol: float) -> int:
    """``#{j : |sigma'(pre_j)| <= zero_tol}``: the hidden units at a zero of ``sigma'``."""
    if not zero_tol > 0:
        raise ValueError(f"`zero_tol` must be positive; got {zero_tol!r}.")
    v = np.asarray(_sigma_prime(activation)(jnp.asarray(np.ravel(pre), jnp.float64)))
    if not np.all(np.isfinite(v)):
        raise FloatingPointError("sigma' at the pre-activations is not finite.")
    return int(np.sum(np.abs(v) <= zero_tol))


def place_at_zero(w1, c, units, x0: float):
    """``W1`` with columns ``units`` moved along ``c`` so that ``(c W1)_j = x0`` exactly for ``j in units``:
    ``W1[:, j] += (x0 - c . W1[:, j]) c / |c|^2``."""
    w1, c = np.array(w1, np.float64), np.asarray(c, np.float64)
    cc = float(c @ c)
    if cc == 0.0:
        raise ValueError("`c` must be non-zero (no column of W1 can reach x0 at c = 0).")
    for j in units:
        w1[:, j] += (x0 - float(c @ w1[:, j])) * c / cc
    return w1


def _mlps(variables) -> list[list[dict]]:
    """The layer lists of a head's MLPs in order: one for :func:`heads.mlp`, one per part for :func:`heads.compose`."""
    params = variables["params"]
    if "layers" in params:
        return [params["layers"]]
    return [params[str(i)]["layers"] for i in range(len(params))]


def hidden_pre_activations(variables, c, activation) -> list[np.ndarray]:
    """The pre-activation of every hidden layer at ``c``, in order, for a bias-free MLP head or a composition of
    them: ``x <- c``; per MLP, ``a = x W_l`` then ``x <- sigma(a)`` for each hidden layer, ``x <- x W_L`` at its last."""
    fn, x, out = activations.get(activation), jnp.asarray(c, jnp.float64), []
    for layers in _mlps(variables):
        for layer in layers[:-1]:
            a = x @ layer["w"]
            out.append(np.asarray(a))
            x = fn(a)
        x = x @ layers[-1]["w"]
    return out


def _placed(layers, units, at, x0):
    """``layers`` with the first layer's columns ``units`` placed at ``x0`` for the input ``at``."""
    layers = [dict(layer) for layer in layers]
    layers[0]["w"] = jnp.asarray(place_at_zero(layers[0]["w"], at, units, x0))
    return layers


def draw_head(dims, activation: str, construction: str, key):
    """``(model, variables, c)`` for one construction (module docstring) at the rung ``dims``: ``(d, h, k)`` for the
    one-hidden-layer constructions, ``(d, h, k, p)`` for the composed ones; ``None`` for a ``*rank_drop`` construction
    when ``sigma'`` has no zero."""
    dims = tuple(int(x) for x in dims)
    expected = ONE_LAYER if len(dims) == 3 else COMPOSED if len(dims) == 4 else ()
    if construction not in expected:
        raise ValueError(
            f"`construction` {construction!r} does not fit the rung {dims}: a rung (d, h, k) takes one of "
            f"{ONE_LAYER}, a rung (d, h, k, p) one of {COMPOSED}."
        )
    d, h, k = dims[:3]
    if len(dims) == 4 and not d <= min(h, k, dims[3]):
        raise ValueError(f"a composed rung (d, h, k, p) needs d <= h, k, p (part (d): no bottleneck); got {dims}.")
    x0 = sigma_prime_zero(activation) if construction.endswith("rank_drop") else 0.0
    if x0 is None:
        return None
    mlp = lambda i, hid, o: heads.mlp(i, (hid,), o, activation=activation, bias=False, dtype=jnp.float64)
    if len(dims) == 3:
        model = mlp(d, max(1, d // 2) if construction == "bottleneck" else h, k)
    else:
        proj, model = mlp(d, h, k), heads.compose(mlp(d, h, k), mlp(k, dims[3], k))
    variables = model.init(jax.random.fold_in(key, 0))
    c = jax.random.normal(jax.random.fold_in(key, 1), (d,), jnp.float64)
    params = variables["params"]
    if construction == "rank_drop":
        units = np.asarray(jax.random.permutation(jax.random.fold_in(key, 2), h))[: h - d + 1]
        params = {**params, "layers": _placed(params["layers"], units, c, x0)}
    elif construction == "composed_rank_drop":
        p = dims[3]
        y = proj.apply({"params": params["0"]}, c)[0]  # the projector's output at c: the predictor's input
        units = np.asarray(jax.random.permutation(jax.random.fold_in(key, 2), p))[: p - d + 1]
        params = {**params, "1": {**params["1"], "layers": _placed(params["1"]["layers"], units, y, x0)}}
    return model, {**variables, "params": params}, c
