"""The diagonal sample blocks of the pullback metric, without the ``(n, d, n, d)`` metric.

:func:`ssl_geometry._src.instrument.effective.sample_blocks` forms every block ``G_ij = J_i^T H_L,ij J_j`` of
the metric of a sample-wise head at a batch ``z`` ``(n, d)``: ``(n d)^2`` numbers (137 GB in float64 at the
paper's ``n = 256``, ``d = 512``). A certificate needs only the diagonal blocks ``G_ii`` and whether the
off-diagonal ones vanish; :func:`diagonal_sample_blocks` computes exactly that, in chunks:

* ``J_i = dh/dz (z_i)`` ``(n, k, d)`` and ``M_i = hess_x (rho_i . h(x))|_{z_i}`` ``(n, d, d)`` (``rho = grad_u L``
  fixed) by ``jax.lax.map`` over chunks of :data:`SAMPLE_CHUNK` samples;
* ``C_i = J_i^T [H_L T_b]_i`` column by column, ``T_b = (J_j e_b)_j`` (``(n, k)``, every sample's ``b``-th Jacobian
  column at once): ``d`` loss Hessian-vector products (forward-over-reverse, ``H_L`` never formed),
  :data:`COLUMN_CHUNK` at a time. ``C_i e_b = sum_j G_ij e_b``, which is ``G_ii e_b`` exactly when the
  off-diagonal blocks vanish;
* ``coupled``: for :data:`COUPLING_PROBES` Gaussian probes ``v`` ``(n, d)`` (fixed keys), ``y = J^T H_L J v`` by one
  head ``jvp``, one loss Hessian-vector product and one head ``vjp``, and the residual ``r = y - (C_i v_i)_i``.
  ``r_i = sum_{j != i} G_ij (v_j - v_i)``: the linear map ``v -> r`` has the off-diagonal blocks ``G_ij`` as its
  ``(i, j)`` blocks, so it is zero iff every off-diagonal block is zero, and when it is not zero ``r != 0`` for
  almost every ``v`` (a non-zero linear map vanishes on a hyperplane at most, a Gaussian null set). Coupled iff
  ``|r| > tol = n d eps (max_i |J_i|_F |H_L J v| + max_i |C_i|_F |v|)`` for some probe: ``n d eps`` times the
  sizes of the products whose rounding ``r`` carries (the ``vjp`` of ``H_L J v`` and the blocks applied to
  ``v``). A wrong ``C`` (zeros, say) leaves ``r = y`` and reads as coupled.

When not coupled, ``C_i = G_ii`` (to the rounding that ``tol`` bounds). Memory: the ``(n, k, d)`` Jacobians
(2.1 GB at the paper's head 512 -> 2048 -> 2048), two ``(n, d, d)`` blocks, and one chunk of tangents.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from ssl_geometry._src.checks import check_rank
from ssl_geometry._src.instrument.effective import flat_problem, sample_functions
from ssl_geometry._src.linalg.canonical import closure_convert

__all__ = ["DENSE_METRIC_MAX", "DiagonalBlocks", "diagonal_sample_blocks"]

#: The largest ``n d`` for which :func:`ssl_geometry.geometry.collapse_certificate` forms the whole ``(n, d, n, d)``
#: metric (``sample_blocks``; 128 MiB in float64 at ``n d = 4096``, twice the largest ``n d`` any stored result used);
#: above it, :func:`diagonal_sample_blocks`.
DENSE_METRIC_MAX = 4096
#: Samples per chunk of the Jacobian and interaction blocks; Jacobian columns per chunk of loss Hessian products.
SAMPLE_CHUNK, COLUMN_CHUNK = 16, 32
#: Gaussian probes deciding ``coupled`` (keys ``fold_in(PRNGKey(0), p)``).
COUPLING_PROBES = 2


class DiagonalBlocks(NamedTuple):
    """The diagonal sample blocks at a batch ``z`` ``(n, d)`` and the coupling test (module docstring).

    Attributes:
      jacobian: ``J_i``, ``(n, k, d)``.
      metric: ``C_i = J_i^T [H_L (J_j e_b)_j]_i`` column ``b``, ``(n, d, d)``; ``G_ii`` when not ``coupled``.
      interaction: ``M_i``, ``(n, d, d)``.
      residual: ``rho = grad_u L``, ``(n, k)``.
      coupled: whether some off-diagonal block ``G_ij`` (``i != j``) is non-zero beyond rounding.
      coupling: ``max_p |r_p| / tol_p`` over the probes (``> 1``: coupled).
    """

    jacobian: Array
    metric: Array
    interaction: Array
    residual: Array
    coupled: bool
    coupling: float


def diagonal_sample_blocks(
    head_fn: Callable[[Array], Array], loss_fn: Callable[[Array], Array], z: Float[ArrayLike, "n d"]
) -> DiagonalBlocks:
    """``G_ii``, ``M_i``, ``J_i`` of a sample-wise head at ``z`` ``(n, d)`` and whether ``H_L`` couples samples.

    The formulas and the coupling test are the module docstring's. One jitted kernel with the closure-converted
    head's and loss's arrays as arguments (a fresh closure of the same code compiles nothing).

    Raises:
      ValueError: ``z`` not ``(n, d)``, or head outputs not ``(n, k)``.
    """
    z, _, _, _, u_shape = flat_problem(head_fn, loss_fn, z)
    check_rank(z, "z", 2)
    if len(u_shape) != 2:
        raise ValueError(f"`head` must map a batch (n, d) = {z.shape} to outputs (n, k); got {u_shape}.")
    head_c, head_consts, _ = closure_convert(head_fn, z)
    loss_c, loss_consts, _ = closure_convert(loss_fn, jax.ShapeDtypeStruct(u_shape, z.dtype))
    Jb, C, Mb, rho, r, scale = _diagonal_blocks(head_c, loss_c, head_consts, loss_consts, z)
    n, d = z.shape
    tol = n * d * float(np.finfo(np.dtype(z.dtype)).eps) * np.asarray(scale, np.float64)
    r = np.asarray(r, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(tol > 0, r / tol, np.where(r > 0, np.inf, 0.0))
    coupling = float(np.max(ratio)) if n > 1 else 0.0
    return DiagonalBlocks(Jb, C, Mb, rho, bool(coupling > 1.0), coupling)


def _metric_blocks(Jb, hvp):
    """``C_i = J_i^T [H_L T_b]_i`` column by column, ``T_b[j] = J_j e_b`` (``hvp(t) = H_L t``): ``(n, d, d)``."""
    d = Jb.shape[2]
    cols = jax.lax.map(
        lambda b: jnp.einsum("ipa,ip->ia", Jb, hvp(Jb[:, :, b])), jnp.arange(d), batch_size=min(d, COLUMN_CHUNK)
    )  # (d, n, d): cols[b, i, a] = C_i[a, b]
    return jnp.transpose(cols, (1, 2, 0))


@functools.partial(jax.jit, static_argnums=(0, 1))
def _diagonal_blocks(head_c, loss_c, head_consts, loss_consts, z):
    """``(J, C, M, rho, |r| per probe, tolerance scale per probe)`` (module docstring), jitted."""
    h1, head, loss = sample_functions(head_c, head_consts, loss_c, loss_consts)
    u = head(z)
    rho = jax.grad(loss)(u)  # (n, k)

    def hvp(t):
        return jax.jvp(jax.grad(loss), (u,), (t,))[1]

    chunk = min(z.shape[0], SAMPLE_CHUNK)
    Jb = jax.lax.map(jax.jacfwd(h1), z, batch_size=chunk)  # (n, k, d)
    Mb = jax.lax.map(lambda a: jax.hessian(lambda x: jnp.vdot(a[1], h1(x)))(a[0]), (z, rho), batch_size=chunk)
    C = _metric_blocks(Jb, hvp)
    j_norm = jnp.max(jnp.sqrt(jnp.sum(Jb**2, axis=(1, 2))))
    c_norm = jnp.max(jnp.sqrt(jnp.sum(C**2, axis=(1, 2))))
    _, head_vjp = jax.vjp(head, z)

    def probe(p):
        v = jax.random.normal(jax.random.fold_in(jax.random.PRNGKey(0), p), z.shape, z.dtype)
        HJv = hvp(jax.jvp(head, (z,), (v,))[1])
        y = head_vjp(HJv)[0]
        r = y - jnp.einsum("iab,ib->ia", C, v)
        return jnp.linalg.norm(r), j_norm * jnp.linalg.norm(HJv) + c_norm * jnp.linalg.norm(v)

    r, scale = jax.lax.map(probe, jnp.arange(COUPLING_PROBES))
    return Jb, C, Mb, rho, r, scale
