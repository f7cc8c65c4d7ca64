"""The effective Hessian of a projection head: dense pieces, pullback metric, matrix-free products.

For a head ``h: z -> u`` and a loss ``L: u -> R`` the Hessian of ``L(h(z))`` with
respect to the representation splits exactly (chain rule, docs/theory.md, section "The effective Hessian")::

    H_eff(z) = J^T H_L J  +  sum_i rho_i hess_z h_i(z)  =  G(z) + M(z)

with ``J = dh/dz`` (Jacobian), ``H_L = hess_u L`` (loss Hessian), ``rho = grad_u L``
(residual), ``G`` the pullback metric and ``M`` the interaction term.

Layout: ``z`` is a single sample ``(d,)`` or a batch ``(n, d)``; a batch is
flattened row-major, so ``z_flat[i * d + a] = z[i, a]`` and ``H_eff`` is
``(n*d, n*d)``. Head outputs are flattened the same way (``u_flat[i * k + p]``),
so batch-coupled losses (contrastive, covariance terms) give a dense ``H_L`` that
couples samples.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from ssl_geometry._src.checks import check_choice, check_finite, check_rank, is_concrete
from ssl_geometry._src.linalg.canonical import closure_convert
from ssl_geometry._src.linalg.hessians import apply_linear, linearize, linearize_gradient

__all__ = [
    "EffectiveHessian",
    "PullbackMetric",
    "effective_hessian",
    "pullback_metric",
    "effective_hvp",
    "effective_hvp_operator",
]

# --------------------------------------------------------------------------- dense


class EffectiveHessian(NamedTuple):
    """Dense pieces of the effective Hessian at one point.

    Attributes:
      full: ``hess_z L(h(z))``, ``(n*d, n*d)`` (``(d, d)`` for a single sample),
        computed by ``jax.hessian`` of the composition.
      metric: ``G = J^T H_L J`` (pullback metric), same shape.
      interaction: ``M = sum_i rho_i hess_z h_i`` with ``rho`` held fixed, same shape.
      loss_hessian: ``H_L = hess_u L``, ``(n*k, n*k)``.
      residual: ``rho = grad_u L``, ``(n*k,)``.
      jacobian: ``J = dh/dz``, ``(n*k, n*d)``.
      loss: the scalar ``L(h(z))``.
    """

    full: Array
    metric: Array
    interaction: Array
    loss_hessian: Array
    residual: Array
    jacobian: Array
    loss: Array


def flat_problem(head_fn, loss_fn, z) -> tuple[Array, Callable, Callable, Array, tuple[int, ...]]:
    """Flattened head/loss and the point, after checking shapes."""
    z = jnp.asarray(z)
    check_rank(z, "z", (1, 2))
    if not jnp.issubdtype(z.dtype, jnp.floating):
        raise TypeError(f"`z` must be a floating-point array; got dtype {z.dtype}.")
    if z.size == 0:
        raise ValueError(
            f"`z` is empty (shape {z.shape}): the effective Hessian needs at least one sample with at "
            "least one feature."
        )
    check_finite(z, "z")
    z_shape = z.shape
    u = head_fn(z)
    u_shape = jnp.shape(u)
    if z.ndim == 2 and (len(u_shape) == 0 or u_shape[0] != z_shape[0]):
        raise ValueError(
            f"`head_fn` must map a batch (n, d) = {z_shape} to outputs with the same leading "
            f"axis n; got output shape {u_shape}."
        )
    val = loss_fn(u)
    if jnp.shape(val) != ():
        raise ValueError(f"`loss_fn` must return a scalar; got shape {jnp.shape(val)}.")

    def head_flat(zf):
        return jnp.ravel(head_fn(zf.reshape(z_shape)))

    def loss_flat(uf):
        return loss_fn(uf.reshape(u_shape))

    return z, head_flat, loss_flat, jnp.ravel(u), u_shape


def _block_diag(blocks):
    """``(n, a, b)`` blocks -> dense block-diagonal ``(n*a, n*b)``."""
    n, a, b = blocks.shape
    eye = jnp.eye(n, dtype=blocks.dtype)
    return jnp.einsum("ij,iab->iajb", eye, blocks).reshape(n * a, n * b)


class SampleBlocks(NamedTuple):
    """The pieces of ``H_eff = G + M`` of a sample-wise head at a batch ``z`` ``(n, d)``, block by block.

    Attributes:
      jacobian: ``J_i = dh/dz (z_i)``, ``(n, k, d)``.
      metric: ``G_ij = J_i^T H_L,ij J_j``, ``(n, d, n, d)`` (``H_L`` may couple samples: then ``G_ij != 0``
        for ``i != j``).
      interaction: ``M_i = sum_a rho_ia hess h_a(z_i)``, ``(n, d, d)``.
      residual: ``rho = grad_u L``, ``(n, k)``.
    """

    jacobian: Array
    metric: Array
    interaction: Array
    residual: Array


def sample_blocks(
    head_fn: Callable[[Array], Array], loss_fn: Callable[[Array], Array], z: Float[ArrayLike, "n d"]
) -> SampleBlocks:
    """The sample blocks of the effective Hessian of a sample-wise head (``head_fn(z)[i]`` depends on ``z_i``).

    ``J_i`` by ``jax.jacfwd`` and ``M_i = hess_x (rho_i . h(x))|_{z_i}`` (``rho`` fixed) through ``vmap`` over
    the samples; ``G_ij = J_i^T (H_L (J_j e_b))`` by one loss Hessian-vector product (forward-over-reverse) per
    tangent ``J_j e_b``, ``n d`` of them in one ``vmap``: ``H_L`` is never formed. ``head_fn`` and ``loss_fn``
    are closure-converted (``linalg.canonical.closure_convert``) and the arrays they hold are arguments of one
    jitted kernel, so a fresh closure of the same code over arrays of the same shapes compiles nothing.
    :func:`effective_hessian` (``per_sample=True``) and :func:`ssl_geometry.geometry.collapse_certificate`
    read their blocks from here.

    Raises:
      ValueError: ``z`` not ``(n, d)``, or head outputs not ``(n, k)``.
    """
    z, _, _, _, u_shape = flat_problem(head_fn, loss_fn, z)
    check_rank(z, "z", 2)
    if len(u_shape) != 2:
        raise ValueError(f"`head` must map a batch (n, d) = {z.shape} to outputs (n, k); got {u_shape}.")
    head_c, head_consts, _ = closure_convert(head_fn, z)
    loss_c, loss_consts, _ = closure_convert(loss_fn, jax.ShapeDtypeStruct(u_shape, z.dtype))
    return SampleBlocks(*_sample_blocks(head_c, loss_c, head_consts, loss_consts, z))


def sample_functions(head_c, head_consts, loss_c, loss_consts):
    """``(h1, head, loss)`` of closure-converted ``head_c``, ``loss_c`` and their arrays: ``h1(x) = h(x[None])[0]``
    (one sample ``(d,) -> (k,)``), ``head(z) = h(z)`` (a batch) and ``loss(u) = L(u)``, for use inside a jitted
    kernel that takes the arrays as arguments (the sample-block kernels here and in
    :mod:`ssl_geometry._src.instrument.diagonal_blocks`)."""

    def h1(x):
        return head_c(head_consts, x[None])[0]

    def head(x):
        return head_c(head_consts, x)

    def loss(u):
        return loss_c(loss_consts, u)

    return h1, head, loss


@functools.partial(jax.jit, static_argnums=(0, 1))
def _sample_blocks(head_c, loss_c, head_consts, loss_consts, z):
    """:func:`sample_blocks` on closure-converted ``head_c``, ``loss_c`` (jitted; the arrays are arguments)."""
    n, d = z.shape
    h1, head, loss = sample_functions(head_c, head_consts, loss_c, loss_consts)
    u = head(z)
    k = u.shape[1]
    Jb = jax.vmap(jax.jacfwd(h1))(z)  # (n, k, d)
    rho = jax.grad(loss)(u)  # (n, k)
    Mb = jax.vmap(lambda zi, ri: jax.hessian(lambda x: jnp.vdot(ri, h1(x)))(zi))(z, rho)
    # the n d tangents J_j e_b (sample j's rows only), and H_L applied to each
    T = jnp.einsum("jpb,jm->jbmp", Jb, jnp.eye(n, dtype=Jb.dtype)).reshape(n * d, n, k)
    HT = jax.vmap(lambda t: jax.jvp(jax.grad(loss), (u,), (t,))[1])(T).reshape(n, d, n, k)
    G = jnp.einsum("ipa,jbip->iajb", Jb, HT)  # (n, d, n, d)
    return Jb, G, Mb, rho


def _per_sample_pieces(head_fn, loss_fn, z, u_shape):
    """``(J, G, M)`` of a sample-wise head at a batch ``z`` ``(n, d)`` from :func:`sample_blocks`, as dense
    matrices: ``J`` and ``M`` block-diagonal, ``G`` with its coupling blocks."""
    if len(u_shape) != 2:
        raise ValueError(f"`per_sample=True` needs head outputs of shape (n, k); got {u_shape}.")
    n, d = z.shape
    blocks = sample_blocks(head_fn, loss_fn, z)
    return _block_diag(blocks.jacobian), blocks.metric.reshape(n * d, n * d), _block_diag(blocks.interaction)


def effective_hessian(
    head_fn: Callable[[Array], Array],
    loss_fn: Callable[[Array], Array],
    z: Float[ArrayLike, "*n d"],
    *,
    per_sample: bool = False,
) -> EffectiveHessian:
    """Dense effective Hessian ``H_eff = G + M`` of ``L(h(z))`` with respect to ``z``.

    ``H_eff = J^T H_L J + sum_i rho_i hess_z h_i(z)`` (docs/theory.md, section "The effective Hessian"). The
    three matrices are computed independently:

    * ``full`` = ``jax.hessian(z -> L(h(z)))``;
    * ``metric`` = ``J^T H_L J`` with ``J`` from ``jax.jacfwd`` and ``H_L`` from
      ``jax.hessian(L)``;
    * ``interaction`` = ``jax.hessian(z -> rho . h(z))`` with ``rho = grad L(h(z))``
      held fixed;

    so ``full - (metric + interaction)`` measures the round-off of the chain rule,
    not an identity built into the code.

    Args:
      head_fn: ``z -> u``; for a batch ``(n, d) -> (n, k)`` (any function, e.g.
        :func:`ssl_geometry.as_function`).
      loss_fn: ``u -> scalar``; may couple samples (batch objectives).
      z: point, ``(d,)`` or ``(n, d)``; a batch is flattened row-major.
      per_sample: set when the head acts sample-wise (no train-mode BatchNorm,
        ``head_fn(z)[i]`` depends on ``z[i]`` only). Then ``J`` and ``M`` are
        block diagonal and are computed as ``n`` blocks ``(k, d)`` and ``(d, d)``
        through ``vmap`` (``n`` times fewer derivative passes), and
        ``G = J^T H_L J`` block by block (computed per sample block); ``full`` is still the
        independent dense Hessian. Results are returned as dense matrices either
        way. With a head that couples samples the option gives a wrong ``G`` and
        ``M`` (the check ``full == metric + interaction`` then fails).

    Returns:
      :class:`EffectiveHessian`. Pure; works under ``jit`` when ``head_fn`` and
      ``loss_fn`` are closed over.

    Raises:
      ValueError: ``z`` is empty (an empty batch ``(0, d)``).
      FloatingPointError: (concrete inputs only) when ``z`` is non-finite, or when a piece
        (``H_L``, ``rho``, ``J``, ``G``, ``M``, the full Hessian, the loss) comes out NaN/inf
        at ``z``; the message names the piece, so a loss or head undefined at the point
        (e.g. a norm-normalised loss at ``u = 0``) is reported, never returned silently.

    Example:
      >>> import jax.numpy as jnp
      >>> W = jnp.array([[1.0, 2.0], [0.0, 1.0], [1.0, 0.0]])   # (d=3, k=2)
      >>> eh = effective_hessian(lambda z: z @ W, lambda u: 0.5 * jnp.sum(u**2), jnp.ones(3))
      >>> bool(jnp.allclose(eh.full, W @ W.T)), float(jnp.abs(eh.interaction).max())
      (True, 0.0)
    """
    z, head_flat, loss_flat, uf, u_shape = flat_problem(head_fn, loss_fn, z)
    zf = z.reshape(-1)
    H_L = jax.hessian(loss_flat)(uf)
    rho = jax.grad(loss_flat)(uf)
    if per_sample and z.ndim == 2:
        J, G, M = _per_sample_pieces(head_fn, loss_fn, z, u_shape)
    else:
        J = jax.jacfwd(head_flat)(zf)
        G = J.T @ H_L @ J
        rho_fixed = jax.lax.stop_gradient(rho)
        M = jax.hessian(lambda x: jnp.vdot(rho_fixed, head_flat(x)))(zf)
    full = jax.hessian(lambda x: loss_flat(head_flat(x)))(zf)
    out = EffectiveHessian(
        full=full,
        metric=G,
        interaction=M,
        loss_hessian=H_L,
        residual=rho,
        jacobian=J,
        loss=loss_flat(uf),
    )
    _check_finite_pieces(out)
    return out


_PIECE_NAMES = {
    "full": "full Hessian hess_z L(h(z))",
    "metric": "metric G = J^T H_L J",
    "interaction": "interaction M = sum_i rho_i hess h_i",
    "loss_hessian": "loss Hessian H_L",
    "residual": "residual rho = grad_u L",
    "jacobian": "head Jacobian J = dh/dz",
    "loss": "loss L",
}


def _check_finite_pieces(result: EffectiveHessian) -> None:
    """Raise ``FloatingPointError`` naming the first non-finite piece (concrete values only)."""
    for name, value in result._asdict().items():
        if not is_concrete(value):
            return
        check_finite(value, f"effective_hessian: {_PIECE_NAMES[name]} at the given `z` (`{name}`)")


# ------------------------------------------------------------------ pullback metric


class PullbackMetric(NamedTuple):
    """Per-sample pullback metrics.

    Attributes:
      euclidean: ``J^T J``, ``(d, d)`` or ``(n, d, d)``.
      loss: ``J^T H_L J`` when a loss Hessian was given, else ``None``.
      jacobian: ``J``, ``(k, d)`` or ``(n, k, d)``.
    """

    euclidean: Array
    loss: Array | None
    jacobian: Array


def pullback_metric(
    head_fn: Callable[[Array], Array],
    z: Float[ArrayLike, "*n d"],
    loss_hessian: Float[ArrayLike, "*m k k"] | None = None,
) -> PullbackMetric:
    """Pullback of the output metric through the head, sample by sample.

    ``g_E(z) = J(z)^T J(z)`` (Euclidean metric on outputs pulled back) and, when
    ``loss_hessian`` is given, ``g_L(z) = J(z)^T H_L J(z)``. ``head_fn`` must act
    on a single sample ``(d,) -> (k,)``; a batch ``(n, d)`` is handled by ``vmap``.

    Args:
      head_fn: ``(d,) -> (k,)``.
      z: ``(d,)`` or ``(n, d)``.
      loss_hessian: ``(k, k)`` (shared by all samples) or ``(n, k, k)`` (one per
        sample). For a batch-coupled ``H_L`` use ``effective_hessian(...).metric``.

    Raises:
      FloatingPointError: (concrete inputs only) when ``z`` holds NaN or inf, as :func:`effective_hvp`.

    Example:
      >>> import jax.numpy as jnp
      >>> W = jnp.array([[1.0, 0.0], [1.0, 2.0]])
      >>> pm = pullback_metric(lambda z: z @ W, jnp.ones((3, 2)))
      >>> pm.euclidean.shape, bool(jnp.allclose(pm.euclidean[0], W @ W.T))
      ((3, 2, 2), True)
    """
    z = jnp.asarray(z)
    check_rank(z, "z", (1, 2))
    check_finite(z, "z")
    jac = jax.jacfwd(head_fn)
    J = jac(z) if z.ndim == 1 else jax.vmap(jac)(z)
    if J.ndim != z.ndim + 1:
        raise ValueError(f"`head_fn` must map one sample (d,) to a vector (k,); its Jacobian has shape {J.shape}.")
    euclid = jnp.einsum("...pa,...pb->...ab", J, J)
    loss = None
    if loss_hessian is not None:
        H = jnp.asarray(loss_hessian)
        k = J.shape[-2]
        ok_shapes = [(k, k)] + ([(z.shape[0], k, k)] if z.ndim == 2 else [])
        if H.shape not in ok_shapes:
            raise ValueError(f"`loss_hessian` must have shape {' or '.join(map(str, ok_shapes))}; got {H.shape}.")
        if H.ndim == 2 and z.ndim == 2:
            loss = jnp.einsum("npa,pq,nqb->nab", J, H, J)
        else:
            loss = jnp.einsum("...pa,...pq,...qb->...ab", J, H, J)
    return PullbackMetric(euclidean=euclid, loss=loss, jacobian=J)


# -------------------------------------------------------------------- matrix-free


def effective_hvp(
    head_fn: Callable[[Array], Array],
    loss_fn: Callable[[Array], Array],
    z: Float[ArrayLike, "*n d"],
    *,
    part: str = "full",
) -> Callable[[Array], Array]:
    """Matrix-free product ``v -> H_eff v`` (or ``G v`` / ``M v``), compiled once.

    * ``"full"``: forward-over-reverse, ``jvp(grad(z -> L(h(z))), (z,), (v,))``;
    * ``"metric"``: ``G v = J^T (H_L (J v))`` by a head ``jvp``, a loss
      Hessian-vector product (forward-over-reverse) and a head ``vjp``;
    * ``"interaction"``: ``M v = jvp(grad(z -> rho . h(z)), (z,), (v,))`` with
      ``rho`` fixed at the point.

    ``v`` may be flat ``(n*d,)`` (the layout of :func:`effective_hessian`) or
    shaped like ``z``; the product has the shape of ``v``. The returned function
    is ``jit``-compiled with the point passed as an argument, so repeated calls
    (Lanczos, :func:`ssl_geometry.curvature.extreme_eigenvalues`) reuse one
    compilation.

    Example:
      >>> import jax.numpy as jnp
      >>> W = jnp.array([[2.0, 0.0], [0.0, 3.0]])
      >>> mv = effective_hvp(lambda z: z @ W, lambda u: 0.5 * jnp.sum(u**2), jnp.ones(2))
      >>> mv(jnp.array([1.0, 1.0]))
      Array([4., 9.], dtype=float64)
    """
    raw, zf, rho = _raw_hvp(head_fn, loss_fn, z, part)
    z = jnp.asarray(z)
    size = zf.size
    _mv = jax.jit(raw)

    def matvec(v):
        v = jnp.asarray(v)
        if v.size != size or v.shape not in ((size,), z.shape):
            raise ValueError(f"`v` must have shape ({size},) or {z.shape}; got {v.shape}.")
        return _mv(v.reshape(-1).astype(zf.dtype), zf, rho).reshape(v.shape)

    return matvec


def effective_hvp_operator(
    head_fn: Callable[[Array], Array],
    loss_fn: Callable[[Array], Array],
    z: Float[ArrayLike, "*n d"],
    *,
    part: str = "full",
) -> tuple[Callable, tuple]:
    """``(matvec, args)`` with ``matvec(v, *args)`` the product of :func:`effective_hvp`, linearised once.

    The form :func:`ssl_geometry.curvature.extreme_eigenvalues` takes
    (``extreme_eigenvalues(matvec, z.size, args=args)``). The point enters through its
    linearisation (``linalg.hessians.linearize``, one forward and one backward
    pass at ``z``, compiled once per computation), so each product evaluates only tangent maps:

    * ``"full"``: ``args = (lin,)``, ``lin`` the derivative of ``grad_z L(h(z))``;
    * ``"interaction"``: ``args = (lin,)``, ``lin`` the derivative of ``grad_z (rho . h(z))``, ``rho`` fixed;
    * ``"metric"``: ``args = (J, H_L)``, the head's tangent map and the loss Hessian's at ``u = h(z)``;
      ``G v = J^T (H_L (J v))``, with ``J^T`` the transpose of ``J``.

    ``v`` is flat ``(n*d,)``; the linearisations are arguments, not constants of the compiled solver.
    The closures built here are new on every call: they are closure-converted
    (``linalg.canonical.closure_convert``), so the same code over new arrays compiles nothing.
    """
    check_choice(part, "part", ("full", "metric", "interaction"))
    z, head_flat, loss_flat, uf, _ = flat_problem(head_fn, loss_fn, z)
    zf = z.reshape(-1)
    if part == "full":
        return apply_linear, (linearize_gradient(lambda x: loss_flat(head_flat(x)), zf)[1],)
    if part == "interaction":
        rho = jax.grad(loss_flat)(uf)
        lin = linearize_gradient(lambda x, r: jnp.vdot(r, head_flat(x)), zf, args=(rho,))[1]
        return apply_linear, (lin,)
    _, J = linearize(head_flat, zf)
    return _metric_product, (J, linearize_gradient(loss_flat, uf)[1])


def _metric_product(v, J, H_L):
    """``G v = J^T (H_L (J v))`` for linear maps ``J: z -> u`` and ``H_L: u -> u``."""
    (out,) = jax.linear_transpose(J, v)(H_L(J(v)))
    return out


def _raw_hvp(head_fn, loss_fn, z, part):
    """``(raw, zf, rho)`` with ``raw(v, zf, rho)`` the product for ``part`` (flat ``v``)."""
    check_choice(part, "part", ("full", "metric", "interaction"))
    z, head_flat, loss_flat, uf, _ = flat_problem(head_fn, loss_fn, z)
    zf = z.reshape(-1)
    rho = jax.grad(loss_flat)(uf)

    def objective(x):
        return loss_flat(head_flat(x))

    if part == "full":

        def raw(v, zf, rho):
            del rho
            return jax.jvp(jax.grad(objective), (zf,), (v,))[1]
    elif part == "metric":

        def raw(v, zf, rho):
            del rho
            u, Jv = jax.jvp(head_flat, (zf,), (v,))
            HJv = jax.jvp(jax.grad(loss_flat), (u,), (Jv,))[1]
            _, vjp = jax.vjp(head_flat, zf)
            return vjp(HJv)[0]
    else:

        def raw(v, zf, rho):
            g = jax.grad(lambda x: jnp.vdot(rho, head_flat(x)))
            return jax.jvp(g, (zf,), (v,))[1]

    return raw, zf, rho
