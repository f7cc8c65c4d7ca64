"""The effective Hessian of a projection head and the theorems built on it.

For a head ``h: z -> u`` and a loss ``L: u -> R`` the Hessian of ``L(h(z))`` with
respect to the representation splits exactly (chain rule, DESIGN.md section 2)::

    H_eff(z) = J^T H_L J  +  sum_i rho_i hess_z h_i(z)  =  G(z) + M(z)

with ``J = dh/dz`` (Jacobian), ``H_L = hess_u L`` (loss Hessian), ``rho = grad_u L``
(residual), ``G`` the pullback metric and ``M`` the interaction term.

Layout: ``z`` is a single sample ``(d,)`` or a batch ``(n, d)``; a batch is
flattened row-major, so ``z_flat[i * d + a] = z[i, a]`` and ``H_eff`` is
``(n*d, n*d)``. Head outputs are flattened the same way (``u_flat[i * k + p]``),
so batch-coupled losses (contrastive, covariance terms) give a dense ``H_L`` that
couples samples.

What is here:

* :func:`effective_hessian` -- dense ``H_eff``, ``G``, ``M``, ``H_L``, ``rho``, ``J``,
  each computed by its own route, so ``full == metric + interaction`` is a check.
* :func:`premises` -- the premises report (``H_L`` PSD?, rank, ``|rho|``, signs).
* :func:`pullback_metric` -- ``J^T J`` and ``J^T H_L J`` per sample.
* :func:`effective_hvp` -- matrix-free ``v -> H_eff v`` (or ``G v``, ``M v``);
  :func:`effective_hvp_operator` gives it as ``(matvec, args)`` for Lanczos.
* :func:`whitening_head`, :func:`check_whitening` -- Thm 3.1's construction.
* :func:`classify_collapse` -- Thm 4.1 at a given (collapsed) state.

Source: "The Geometry of Projection Heads: Conditioning, Invariance, and
Collapse" (arXiv 2605.17180, ICML 2026), Thm 3.1 and Thm 4.1.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ssl_geometry.models import activations as _act
from ssl_geometry._checks import check_choice, check_finite, check_positive, check_rank

Array = jax.Array

__all__ = [
    "EffectiveHessian",
    "Premises",
    "PullbackMetric",
    "WhiteningHead",
    "WhiteningCheck",
    "CollapseClassification",
    "effective_hessian",
    "premises",
    "pullback_metric",
    "effective_hvp",
    "effective_hvp_operator",
    "whitening_head",
    "check_whitening",
    "classify_collapse",
    "head_smoothness",
    "sign_structure",
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


def _flat_problem(head_fn, loss_fn, z):
    """Flattened head/loss and the point, after checking shapes."""
    z = jnp.asarray(z)
    check_rank(z, "z", (1, 2))
    if not jnp.issubdtype(z.dtype, jnp.floating):
        raise TypeError(f"`z` must be a floating-point array; got dtype {z.dtype}.")
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


def effective_hessian(
    head_fn: Callable[[Array], Array],
    loss_fn: Callable[[Array], Array],
    z: Array,
    *,
    per_sample: bool = False,
) -> EffectiveHessian:
    """Dense effective Hessian ``H_eff = G + M`` of ``L(h(z))`` with respect to ``z``.

    ``H_eff = J^T H_L J + sum_i rho_i hess_z h_i(z)`` (DESIGN.md section 2). The
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
        :func:`ssl_geometry.models.as_function`).
      loss_fn: ``u -> scalar``; may couple samples (batch objectives).
      z: point, ``(d,)`` or ``(n, d)``; a batch is flattened row-major.
      per_sample: set when the head acts sample-wise (no train-mode BatchNorm,
        ``head_fn(z)[i]`` depends on ``z[i]`` only). Then ``J`` and ``M`` are
        block diagonal and are computed as ``n`` blocks ``(k, d)`` and ``(d, d)``
        through ``vmap`` (``n`` times fewer derivative passes), and
        ``G = J^T H_L J`` is contracted block-wise; ``full`` is still the
        independent dense Hessian. Results are returned as dense matrices either
        way. With a head that couples samples the option gives a wrong ``G`` and
        ``M`` (the check ``full == metric + interaction`` then fails).

    Returns:
      :class:`EffectiveHessian`. Pure; works under ``jit`` when ``head_fn`` and
      ``loss_fn`` are closed over.

    Example:
      >>> import jax.numpy as jnp
      >>> W = jnp.array([[1.0, 2.0], [0.0, 1.0], [1.0, 0.0]])   # (d=3, k=2)
      >>> eh = effective_hessian(lambda z: z @ W, lambda u: 0.5 * jnp.sum(u**2), jnp.ones(3))
      >>> bool(jnp.allclose(eh.full, W @ W.T)), float(jnp.abs(eh.interaction).max())
      (True, 0.0)
    """
    z, head_flat, loss_flat, uf, u_shape = _flat_problem(head_fn, loss_fn, z)
    zf = z.reshape(-1)
    H_L = jax.hessian(loss_flat)(uf)
    rho = jax.grad(loss_flat)(uf)
    if per_sample and z.ndim == 2:
        if len(u_shape) != 2:
            raise ValueError(f"`per_sample=True` needs head outputs of shape (n, k); got {u_shape}.")
        n, d = z.shape
        k = u_shape[1]
        Jb = jax.vmap(jax.jacfwd(head_fn))(z)  # (n, k, d)
        rho_b = rho.reshape(n, k)

        def m_block(zi, ri):
            return jax.hessian(lambda x: jnp.vdot(ri, head_fn(x)))(zi)

        Mb = jax.vmap(m_block)(z, rho_b)  # (n, d, d)
        J = _block_diag(Jb)
        M = _block_diag(Mb)
        G = jnp.einsum("ipa,ipjq,jqb->iajb", Jb, H_L.reshape(n, k, n, k), Jb).reshape(n * d, n * d)
    else:
        J = jax.jacfwd(head_flat)(zf)
        G = J.T @ H_L @ J
        rho_fixed = jax.lax.stop_gradient(rho)
        M = jax.hessian(lambda x: jnp.vdot(rho_fixed, head_flat(x)))(zf)
    full = jax.hessian(lambda x: loss_flat(head_flat(x)))(zf)
    return EffectiveHessian(
        full=full, metric=G, interaction=M, loss_hessian=H_L, residual=rho, jacobian=J,
        loss=loss_flat(uf),
    )


# ------------------------------------------------------------------------ premises


def _default_tol(eigs: np.ndarray, dtype) -> float:
    """``max(dim) * eps(dtype) * max|lambda|`` (NumPy ``matrix_rank`` convention)."""
    eps = float(np.finfo(np.dtype(dtype)).eps)
    scale = float(np.max(np.abs(eigs))) if eigs.size else 0.0
    return max(eigs.size, 1) * eps * scale


def sign_structure(lmin: float, lmax: float, tol: float) -> str:
    """Name the definiteness of a symmetric matrix from its extreme eigenvalues.

    ``"zero"`` if ``max(|lmin|, |lmax|) <= tol``; ``"PSD"`` if ``lmin >= -tol``;
    ``"NSD"`` if ``lmax <= tol``; ``"indefinite"`` otherwise.
    """
    if max(abs(lmin), abs(lmax)) <= tol:
        return "zero"
    if lmin >= -tol:
        return "PSD"
    if lmax <= tol:
        return "NSD"
    return "indefinite"


@dataclasses.dataclass(frozen=True)
class Premises:
    """Premises report for the effective-Hessian theorems at one point.

    Attributes:
      loss_hessian_eigenvalues: all eigenvalues of ``H_L`` (ascending).
      loss_hessian_psd: ``lambda_min(H_L) >= -psd_tolerance``.
      psd_tolerance: the tolerance used for PSD (default
        ``dim * eps * max|lambda(H_L)|``).
      loss_hessian_rank: number of eigenvalues with ``|lambda| > rank_tolerance``.
      rank_tolerance: tolerance used for the rank (same default).
      residual_norm: ``|rho|_2``.
      extremes: ``{"loss_hessian" | "metric" | "interaction" | "full": (lmin, lmax)}``.
      signs: ``{name: "PSD" | "NSD" | "indefinite" | "zero"}`` from :func:`sign_structure`,
        each with its own tolerance ``dim * eps * max|lambda|``.
      tolerances: the per-matrix tolerances used for ``signs``.
    """

    loss_hessian_eigenvalues: np.ndarray
    loss_hessian_psd: bool
    psd_tolerance: float
    loss_hessian_rank: int
    rank_tolerance: float
    residual_norm: float
    extremes: dict
    signs: dict
    tolerances: dict

    def as_dict(self) -> dict:
        """JSON-friendly dictionary (eigenvalues as a list)."""
        d = dataclasses.asdict(self)
        d["loss_hessian_eigenvalues"] = [float(x) for x in self.loss_hessian_eigenvalues]
        return d


def premises(result: EffectiveHessian, *, psd_tol: float | None = None,
             rank_tol: float | None = None) -> Premises:
    """Premises report of an :func:`effective_hessian` result (concrete arrays only).

    Eigenvalues come from ``numpy.linalg.eigvalsh`` of the symmetrised matrices.
    Default tolerances follow NumPy's ``matrix_rank``: ``dim * eps(dtype) *
    max|lambda|``; pass ``psd_tol`` / ``rank_tol`` to override.

    Example:
      >>> import jax.numpy as jnp
      >>> eh = effective_hessian(lambda z: jnp.tanh(z), lambda u: 0.5 * jnp.sum((u - 1.0)**2),
      ...                        jnp.zeros(2))
      >>> p = premises(eh)
      >>> p.loss_hessian_psd, p.loss_hessian_rank, round(p.residual_norm, 6)
      (True, 2, 1.414214)
    """
    if not isinstance(result, EffectiveHessian):
        raise TypeError(f"`result` must be an EffectiveHessian; got {type(result).__name__}.")
    check_finite(result, "result")
    mats = {
        "loss_hessian": result.loss_hessian,
        "metric": result.metric,
        "interaction": result.interaction,
        "full": result.full,
    }
    eigs = {}
    for name, m in mats.items():
        a = np.asarray(m)
        eigs[name] = np.linalg.eigvalsh(0.5 * (a + a.T))
    dtype = np.asarray(result.full).dtype
    tols = {name: _default_tol(e, dtype) for name, e in eigs.items()}
    e_l = eigs["loss_hessian"]
    p_tol = tols["loss_hessian"] if psd_tol is None else float(psd_tol)
    r_tol = tols["loss_hessian"] if rank_tol is None else float(rank_tol)
    if psd_tol is not None:
        check_positive(psd_tol, "psd_tol", strict=False)
    if rank_tol is not None:
        check_positive(rank_tol, "rank_tol", strict=False)
    extremes = {name: (float(e[0]), float(e[-1])) for name, e in eigs.items()}
    signs = {name: sign_structure(*extremes[name], tols[name]) for name in eigs}
    return Premises(
        loss_hessian_eigenvalues=e_l,
        loss_hessian_psd=bool(e_l[0] >= -p_tol),
        psd_tolerance=p_tol,
        loss_hessian_rank=int(np.sum(np.abs(e_l) > r_tol)),
        rank_tolerance=r_tol,
        residual_norm=float(np.linalg.norm(np.asarray(result.residual))),
        extremes=extremes,
        signs=signs,
        tolerances=tols,
    )


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


def pullback_metric(head_fn: Callable[[Array], Array], z: Array, loss_hessian: Array | None = None) -> PullbackMetric:
    """Pullback of the output metric through the head, sample by sample.

    ``g_E(z) = J(z)^T J(z)`` (Euclidean metric on outputs pulled back) and, when
    ``loss_hessian`` is given, ``g_L(z) = J(z)^T H_L J(z)``. ``head_fn`` must act
    on a single sample ``(d,) -> (k,)``; a batch ``(n, d)`` is handled by ``vmap``.

    Args:
      head_fn: ``(d,) -> (k,)``.
      z: ``(d,)`` or ``(n, d)``.
      loss_hessian: ``(k, k)`` (shared by all samples) or ``(n, k, k)`` (one per
        sample). For a batch-coupled ``H_L`` use ``effective_hessian(...).metric``.

    Example:
      >>> import jax.numpy as jnp
      >>> W = jnp.array([[1.0, 0.0], [1.0, 2.0]])
      >>> pm = pullback_metric(lambda z: z @ W, jnp.ones((3, 2)))
      >>> pm.euclidean.shape, bool(jnp.allclose(pm.euclidean[0], W @ W.T))
      ((3, 2, 2), True)
    """
    z = jnp.asarray(z)
    check_rank(z, "z", (1, 2))
    jac = jax.jacfwd(head_fn)
    J = jac(z) if z.ndim == 1 else jax.vmap(jac)(z)
    if J.ndim != z.ndim + 1:
        raise ValueError(
            f"`head_fn` must map one sample (d,) to a vector (k,); its Jacobian has shape {J.shape}."
        )
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

Part = Literal["full", "metric", "interaction"]


def effective_hvp(
    head_fn: Callable[[Array], Array],
    loss_fn: Callable[[Array], Array],
    z: Array,
    *,
    part: Part = "full",
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
    z: Array,
    *,
    part: Part = "full",
) -> tuple[Callable, tuple]:
    """``(matvec, args)`` with ``matvec(v, *args)`` the product of :func:`effective_hvp`.

    The form :func:`ssl_geometry.curvature.extreme_eigenvalues` takes
    (``extreme_eigenvalues(matvec, z.size, args=args)``): the point and the residual
    travel as arguments ``args = (z_flat, rho)``, so they are not baked into the
    compiled Lanczos loop as constants. ``v`` is flat ``(n*d,)``.
    """
    raw, zf, rho = _raw_hvp(head_fn, loss_fn, z, part)
    return raw, (zf, rho)


def _raw_hvp(head_fn, loss_fn, z, part):
    """``(raw, zf, rho)`` with ``raw(v, zf, rho)`` the product for ``part`` (flat ``v``)."""
    check_choice(part, "part", ("full", "metric", "interaction"))
    z, head_flat, loss_flat, uf, _ = _flat_problem(head_fn, loss_fn, z)
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


# --------------------------------------------------------------- Thm 3.1 whitening


class WhiteningHead(NamedTuple):
    """Thm 3.1's linear head ``W = U_r Lambda_r^{-1/2} B^T``.

    Attributes:
      paper: the paper's ``(k, d)`` matrix, ``h(z) = W z``.
      weight: our layout ``(d, k)`` = ``paper.T``, ``h(z) = z @ weight``
        (usable as ``{"params": {"layers": [{"w": weight}]}}`` of ``heads.linear``).
      eigenvalues: ``Lambda_r`` (the top-r eigenvalues of ``H_L``, descending).
      eigenvectors: ``U_r``, ``(k, r)``.
      loss_hessian_rank: rank of ``H_L`` at the tolerance used.
    """

    paper: Array
    weight: Array
    eigenvalues: Array
    eigenvectors: Array
    loss_hessian_rank: int


def _orthonormal_check(B: np.ndarray, name: str) -> None:
    eps = float(np.finfo(B.dtype).eps)
    err = float(np.max(np.abs(B.T @ B - np.eye(B.shape[1])))) if B.size else 0.0
    if err > 1e3 * eps * max(B.shape):
        raise ValueError(
            f"`{name}` must have orthonormal columns (B^T B = I); max |B^T B - I| = {err:.3e}. "
            "Orthonormalise it first, e.g. with numpy.linalg.qr."
        )


def whitening_head(loss_hessian: Array, subspace_basis: Array, *, tol: float | None = None) -> WhiteningHead:
    """Thm 3.1 (local subspace whitening): a linear head that whitens ``H_eff`` on S.

    With ``H_L = U Lambda U^T`` (``k x k``), ``U_r, Lambda_r`` its top-r eigenpairs
    and ``B`` (``d x r``) an orthonormal basis of the subspace S, the head
    ``h(z) = W z`` with ``W = U_r Lambda_r^{-1/2} B^T`` gives
    ``H_eff = W^T H_L W = B B^T``: ``v^T H_eff v = |v|^2`` on S and ``H_eff = 0``
    on S-perp. (``H_eff`` involves ``H_L`` at ``u = W z``; for a non-quadratic loss
    the statement is local: use ``H_L`` at the point the head maps to, e.g.
    ``z = 0 -> u = 0`` for a bias-free head.)

    Args:
      loss_hessian: symmetric ``H_L``, ``(k, k)``.
      subspace_basis: ``B``, ``(d, r)`` with orthonormal columns; ``r`` must not
        exceed the number of eigenvalues of ``H_L`` above ``tol``.
      tol: eigenvalue threshold for the rank (default ``k * eps * max|lambda|``).

    Example:
      >>> import jax.numpy as jnp
      >>> H = jnp.diag(jnp.array([4.0, 1.0, 0.0]))
      >>> B = jnp.eye(4)[:, :2]
      >>> wh = whitening_head(H, B)
      >>> wh.paper.shape, wh.weight.shape, wh.loss_hessian_rank
      ((3, 4), (4, 3), 2)
      >>> bool(jnp.allclose(wh.paper.T @ H @ wh.paper, B @ B.T))
      True
    """
    H = np.asarray(loss_hessian)
    B = np.asarray(subspace_basis)
    if H.ndim != 2 or H.shape[0] != H.shape[1]:
        raise ValueError(f"`loss_hessian` must be a square (k, k) matrix; got shape {H.shape}.")
    check_rank(B, "subspace_basis", 2)
    check_finite(H, "loss_hessian")
    check_finite(B, "subspace_basis")
    asym = float(np.max(np.abs(H - H.T))) if H.size else 0.0
    if asym > 1e3 * np.finfo(H.dtype).eps * max(float(np.max(np.abs(H))), 1e-300):
        raise ValueError(f"`loss_hessian` must be symmetric; max |H - H^T| = {asym:.3e}.")
    _orthonormal_check(B, "subspace_basis")
    evals, evecs = np.linalg.eigh(0.5 * (H + H.T))
    order = np.argsort(evals)[::-1]
    evals, evecs = evals[order], evecs[:, order]
    t = _default_tol(evals, H.dtype) if tol is None else float(tol)
    rank = int(np.sum(evals > t))
    r = B.shape[1]
    if r > rank:
        raise ValueError(
            f"`subspace_basis` spans r = {r} dimensions but H_L has only {rank} eigenvalues > {t:.3e}; "
            "Thm 3.1 whitens a subspace of dimension at most rank(H_L) (positive part)."
        )
    lam = evals[:r]
    U = evecs[:, :r]
    W = (U / np.sqrt(lam)) @ B.T  # (k, d)
    dt = H.dtype
    return WhiteningHead(paper=jnp.asarray(W, dt), weight=jnp.asarray(W.T, dt), eigenvalues=jnp.asarray(lam, dt),
                         eigenvectors=jnp.asarray(U, dt), loss_hessian_rank=rank)


class WhiteningCheck(NamedTuple):
    """How well ``H_eff`` is whitened on S and what it does off S.

    Attributes:
      max_rel_error: ``max_{v in S} |v^T H v - |v|^2| / |v|^2`` (exact: spectral
        radius of ``B^T H B - I``).
      subspace_eigenvalues: eigenvalues of ``B^T H B`` (all 1 when whitened).
      complement_eigenvalues: eigenvalues of ``P^T H P`` with ``P`` an orthonormal
        basis of S-perp (empty when S = R^d).
      cross_norm: ``|B^T H P|_2`` (coupling between S and S-perp).
    """

    max_rel_error: float
    subspace_eigenvalues: np.ndarray
    complement_eigenvalues: np.ndarray
    cross_norm: float


def check_whitening(h_eff: Array | EffectiveHessian, subspace_basis: Array) -> WhiteningCheck:
    """Measure Thm 3.1's claim ``v^T H_eff v = |v|^2`` for ``v`` in ``S = span(B)``.

    For ``v = B c``: ``v^T H v - |v|^2 = c^T (B^T H B - I) c`` and ``|v| = |c|``, so the
    maximum relative error over S is the spectral radius of ``B^T H B - I``.

    Args:
      h_eff: ``(D, D)`` symmetric matrix or an :class:`EffectiveHessian` (its ``full``).
      subspace_basis: ``B``, ``(D, r)``, orthonormal columns.
    """
    H = np.asarray(h_eff.full if isinstance(h_eff, EffectiveHessian) else h_eff)
    B = np.asarray(subspace_basis)
    if H.ndim != 2 or H.shape[0] != H.shape[1]:
        raise ValueError(f"`h_eff` must be square; got shape {H.shape}.")
    check_rank(B, "subspace_basis", 2)
    if B.shape[0] != H.shape[0]:
        raise ValueError(f"`subspace_basis` must have {H.shape[0]} rows (the size of `h_eff`); got {B.shape}.")
    _orthonormal_check(B, "subspace_basis")
    H = 0.5 * (H + H.T)
    r = B.shape[1]
    A = B.T @ H @ B
    sub_eigs = np.linalg.eigvalsh(A)
    max_err = float(np.max(np.abs(sub_eigs - 1.0))) if r else 0.0
    Ufull = np.linalg.svd(B, full_matrices=True)[0]
    P = Ufull[:, r:]
    comp = np.linalg.eigvalsh(P.T @ H @ P) if P.shape[1] else np.zeros((0,), H.dtype)
    cross = float(np.linalg.norm(B.T @ H @ P, 2)) if (P.shape[1] and r) else 0.0
    return WhiteningCheck(max_rel_error=max_err, subspace_eigenvalues=sub_eigs, complement_eigenvalues=comp,
                          cross_norm=cross)


# --------------------------------------------------------------- Thm 4.1 collapse

#: Activations that are C^2 (smooth MLP heads: Thm 4.1 predicts strict instability).
C2_ACTIVATIONS = frozenset({"gelu", "gelu_tanh", "swish", "silu", "tanh", "softplus", "sigmoid"})
#: Affine heads: H_eff = G exactly.
AFFINE_ACTIVATIONS = frozenset({"identity", "linear"})
#: Not C^2 (kinks: relu, leaky_relu; ELU has a jump in its second derivative at 0).
NON_C2_ACTIVATIONS = frozenset({"relu", "leaky_relu", "elu"})


def head_smoothness(activation: str | Callable | None = None, smooth: bool | None = None) -> str:
    """Classify a head for Thm 4.1: ``"linear"``, ``"smooth"``, ``"piecewise"`` or ``"unknown"``.

    ``"linear"``: identity activation (``M = 0`` identically, C^infinity).
    ``"smooth"``: C^2 nonlinear activation (:data:`C2_ACTIVATIONS`).
    ``"piecewise"``: not C^2 (:data:`NON_C2_ACTIVATIONS`; ReLU's ``M = 0`` away from kinks).
    ``smooth`` (bool) overrides the name for custom callables: ``True`` -> ``"smooth"``,
    ``False`` -> ``"piecewise"``.
    """
    if smooth is not None:
        return "smooth" if smooth else "piecewise"
    if activation is None:
        return "unknown"
    if callable(activation) and not isinstance(activation, str):
        for name, fn in _act.ACTIVATIONS.items():
            if fn is activation:
                activation = name
                break
        else:
            return "unknown"
    name = str(activation).lower()
    check_choice(name, "activation", _act.ACTIVATIONS)
    if name in AFFINE_ACTIVATIONS:
        return "linear"
    if name in C2_ACTIVATIONS:
        return "smooth"
    if name in NON_C2_ACTIVATIONS:
        return "piecewise"
    return "unknown"


@dataclasses.dataclass(frozen=True)
class CollapseClassification:
    """Thm 4.1 at one state: premises, extreme eigenvalues and the conclusion.

    Attributes:
      conclusion: ``"strict instability"`` (``lambda_min(H_eff) < -eig_tol``: a
        second-order escape direction), ``"no second-order escape"``
        (``lambda_min >= -eig_tol``) or ``"premise violated"`` (``H_L`` not PSD,
        ``rho = 0``, or timescale separation not met; the eigenvalues are still
        reported).
      premises: ``{name: {"met": bool | None, "value": ..., "rule": str}}`` for
        ``c2_head``, ``residual_nonzero``, ``loss_hessian_psd``, ``timescale_separation``
        and, for a batch, ``collapsed`` (informational: rows equal up to a
        relative ``1e-6``; it does not change the conclusion).
      lambda_min: ``{"full" | "metric" | "interaction" | "loss_hessian": float}``.
      lambda_max: same keys.
      eig_tol: tolerance used for the sign of ``lambda_min(H_eff)``.
      method: ``"dense"`` or ``"lanczos"``.
      head_kind: from :func:`head_smoothness`.
      predicted: what Thm 4.1 predicts for this head kind when its premises hold
        (``None`` if it makes no prediction).
      notes: human-readable remarks (e.g. why a premise failed).
      residual_norms: Lanczos residual bounds per extreme eigenvalue (``{}`` for dense).
    """

    conclusion: str
    premises: dict
    lambda_min: dict
    lambda_max: dict
    eig_tol: float
    method: str
    head_kind: str
    predicted: str | None
    notes: tuple
    residual_norms: dict

    def as_dict(self) -> dict:
        """JSON-friendly dictionary."""
        d = dataclasses.asdict(self)
        d["notes"] = list(self.notes)
        return d


CONCLUSIONS = ("strict instability", "no second-order escape", "premise violated")


def _lanczos_extremes(raw_mv, args, dim, dtype, *, key, num_steps):
    """(lmin, lmax, info) of a symmetric operator by :func:`ssl_geometry.curvature.extreme_eigenvalues`.

    ``info`` holds the true residuals ``|A y - theta y|`` of the two Ritz vectors,
    the number of steps and the convergence flag.
    """
    from ssl_geometry.linalg.curvature import extreme_eigenvalues

    res = extreme_eigenvalues(raw_mv, dim, k=1, num_steps=min(num_steps, dim), key=key, args=args,
                              return_vectors=True, dtype=dtype)
    info = {
        "min": float(np.asarray(res.smallest_true_residuals)[0]),
        "max": float(np.asarray(res.largest_true_residuals)[0]),
        "num_steps": int(res.num_steps),
        "converged": bool(res.converged),
    }
    return float(np.asarray(res.smallest)[0]), float(np.asarray(res.largest)[0]), info


def classify_collapse(
    head_fn: Callable[[Array], Array],
    loss_fn: Callable[[Array], Array],
    z: Array,
    *,
    activation: str | Callable | None = None,
    smooth: bool | None = None,
    timescale_ratio: float | None = None,
    min_timescale_ratio: float = 1.0,
    residual_tol: float | None = None,
    psd_tol: float | None = None,
    eig_tol: float | None = None,
    per_sample: bool = False,
    max_dense_dim: int = 1024,
    lanczos_steps: int = 100,
    key: Array | None = None,
) -> CollapseClassification:
    """Thm 4.1 (instability of collapse) evaluated at the state ``z``.

    Theorem (paraphrased, DESIGN.md section 2): at a collapsed state with residual
    ``rho != 0``, ``H_L >= 0``, a C^2 head adapting faster than the backbone: a
    linear head gives ``H_eff = G >= 0`` (no second-order escape); a smooth MLP
    head generically gives ``lambda_min(H_eff) < 0`` (strict instability); ReLU
    heads have ``M = 0`` away from kinks and behave like linear ones.

    Premises checked (each reported with its value):

    * ``c2_head``: from ``activation`` / ``smooth`` via :func:`head_smoothness`
      (``None`` when unknown). A non-C^2 head is reported but does not by itself
      give ``"premise violated"``: away from kinks the Hessian is exact, and the
      theorem's ReLU statement is about exactly that case.
    * ``residual_nonzero``: ``|rho| > residual_tol`` (default ``sqrt(eps) * max(1, |L|)``).
    * ``loss_hessian_psd``: ``lambda_min(H_L) >= -psd_tol`` (default
      ``dim * eps * max|lambda(H_L)|``).
    * ``timescale_separation``: ``timescale_ratio > min_timescale_ratio`` when a
      ratio is given, where ``timescale_ratio`` = (head adaptation rate) /
      (backbone adaptation rate), e.g. the ratio of relative update sizes
      (:func:`ssl_geometry.metrics.relative_update_size`) or of learning rates;
      ``None`` (not checked) otherwise.

    Eigenvalues: dense ``eigh`` of :func:`effective_hessian` when ``n*d <=
    max_dense_dim``; otherwise Lanczos
    (:func:`ssl_geometry.curvature.extreme_eigenvalues`) on
    :func:`effective_hvp_operator` for each of ``full``, ``metric``,
    ``interaction``, with true residuals ``|A y - theta y|`` reported in
    ``residual_norms``. ``H_L`` likewise: dense when ``n*k <= max_dense_dim``,
    else Lanczos on ``v -> hess L(u) v``. ``eig_tol`` (default
    ``10 * sqrt(dim) * eps * max|lambda(H_eff)|``, plus the Lanczos residual)
    decides the sign of ``lambda_min(H_eff)``.

    Returns:
      :class:`CollapseClassification`.
    """
    z = jnp.asarray(z)
    check_rank(z, "z", (1, 2))
    if timescale_ratio is not None:
        check_positive(timescale_ratio, "timescale_ratio")
    check_positive(min_timescale_ratio, "min_timescale_ratio", strict=False)
    if not isinstance(max_dense_dim, int) or max_dense_dim < 1:
        raise ValueError(f"`max_dense_dim` must be a positive int; got {max_dense_dim!r}.")
    kind = head_smoothness(activation, smooth)
    dim = int(z.size)
    dtype = z.dtype
    eps = float(np.finfo(np.dtype(dtype)).eps)
    notes = []
    residual_norms = {}
    _, head_flat, loss_flat, uf, _ = _flat_problem(head_fn, loss_fn, z)
    rho = np.asarray(jax.grad(loss_flat)(uf))
    loss_val = float(loss_flat(uf))
    check_finite(rho, "residual rho")
    key = jax.random.PRNGKey(0) if key is None else key
    if uf.size <= max_dense_dim:
        H_L = np.asarray(jax.hessian(loss_flat)(uf))
        check_finite(H_L, "loss Hessian H_L")
        eL = np.linalg.eigvalsh(0.5 * (H_L + H_L.T))
        lam_min = {"loss_hessian": float(eL[0])}
        lam_max = {"loss_hessian": float(eL[-1])}
        default_p_tol = _default_tol(eL, dtype)
    else:  # matrix-free H_L: Lanczos on u -> hess L(u) v
        def loss_hvp(v, uf):
            return jax.jvp(jax.grad(loss_flat), (uf,), (v,))[1]

        lo, hi, res = _lanczos_extremes(loss_hvp, (uf,), int(uf.size), dtype, key=jax.random.fold_in(key, 7),
                                        num_steps=lanczos_steps)
        lam_min = {"loss_hessian": lo}
        lam_max = {"loss_hessian": hi}
        residual_norms["loss_hessian"] = res
        default_p_tol = uf.size * eps * max(abs(lo), abs(hi)) + res["min"]
        if not res["converged"]:
            notes.append(f"Lanczos for loss_hessian did not meet its tolerance in {res['num_steps']} steps.")

    if dim <= max_dense_dim:
        method = "dense"
        eh = effective_hessian(head_fn, loss_fn, z, per_sample=per_sample)
        check_finite(eh, "effective Hessian")
        for name in ("full", "metric", "interaction"):
            a = np.asarray(getattr(eh, name))
            e = np.linalg.eigvalsh(0.5 * (a + a.T))
            lam_min[name], lam_max[name] = float(e[0]), float(e[-1])
        extra = 0.0
    else:
        method = "lanczos"
        extra = 0.0
        for i, name in enumerate(("full", "metric", "interaction")):
            raw, args = effective_hvp_operator(head_fn, loss_fn, z, part=name)
            lo, hi, res = _lanczos_extremes(raw, args, dim, dtype, key=jax.random.fold_in(key, i),
                                            num_steps=lanczos_steps)
            if not (np.isfinite(lo) and np.isfinite(hi)):
                raise FloatingPointError(f"Lanczos returned non-finite extreme eigenvalues for {name}: {lo}, {hi}.")
            lam_min[name], lam_max[name] = lo, hi
            residual_norms[name] = res
            if not res["converged"]:
                notes.append(f"Lanczos for {name} did not meet its tolerance in {res['num_steps']} steps; "
                             f"true residuals min/max end: {res['min']:.3e} / {res['max']:.3e}.")
            if name == "full":
                extra = res["min"]
    scale = max(abs(lam_min["full"]), abs(lam_max["full"]), np.finfo(np.dtype(dtype)).tiny)
    tol = (10.0 * np.sqrt(dim) * eps * scale + extra) if eig_tol is None else float(eig_tol)

    r_norm = float(np.linalg.norm(rho))
    r_tol = np.sqrt(eps) * max(1.0, abs(loss_val)) if residual_tol is None else float(residual_tol)
    p_tol = default_p_tol if psd_tol is None else float(psd_tol)
    prem = {
        "c2_head": {"met": {"linear": True, "smooth": True, "piecewise": False}.get(kind), "value": kind,
                    "rule": "activation is C^2 (identity or in C2_ACTIVATIONS)"},
        "residual_nonzero": {"met": bool(r_norm > r_tol), "value": r_norm, "rule": f"|rho| > {r_tol:.3e}"},
        "loss_hessian_psd": {"met": bool(lam_min["loss_hessian"] >= -p_tol), "value": lam_min["loss_hessian"],
                             "rule": f"lambda_min(H_L) >= -{p_tol:.3e}"},
        "timescale_separation": {
            "met": None if timescale_ratio is None else bool(float(timescale_ratio) > min_timescale_ratio),
            "value": None if timescale_ratio is None else float(timescale_ratio),
            "rule": f"head/backbone adaptation-rate ratio > {min_timescale_ratio}",
        },
    }
    if z.ndim == 2:
        zc = np.asarray(z, np.float64)
        centre = zc.mean(axis=0)
        spread = float(np.max(np.linalg.norm(zc - centre, axis=1)))
        c_tol = 1e-6 * max(1.0, float(np.linalg.norm(centre)))
        prem["collapsed"] = {"met": bool(spread <= c_tol), "value": spread,
                             "rule": f"max_i |z_i - mean(z)| <= {c_tol:.3e} (informational)"}
        if spread > c_tol:
            notes.append("the batch is not collapsed (rows differ); the eigenvalues describe this state, "
                         "Thm 4.1 speaks of collapsed states.")
    violated = [n for n in ("residual_nonzero", "loss_hessian_psd", "timescale_separation") if prem[n]["met"] is False]
    if kind == "piecewise":
        notes.append("head is not C^2: the Hessian is exact only away from kinks; Thm 4.1's ReLU "
                     "statement (M = 0 a.e., behaves like a linear head) is what applies.")
    if kind == "unknown":
        notes.append("head smoothness unknown: pass `activation` or `smooth` to check the C^2 premise.")
    if timescale_ratio is None:
        notes.append("timescale separation not checked (no `timescale_ratio`).")
    for n in violated:
        notes.append(f"premise {n} violated: value {prem[n]['value']!r}, rule {prem[n]['rule']}.")
    if violated:
        conclusion = "premise violated"
    elif lam_min["full"] < -tol:
        conclusion = "strict instability"
    else:
        conclusion = "no second-order escape"
    predicted = {"linear": "no second-order escape", "piecewise": "no second-order escape",
                 "smooth": "strict instability"}.get(kind)
    return CollapseClassification(
        conclusion=conclusion, premises=prem, lambda_min=lam_min, lambda_max=lam_max, eig_tol=float(tol),
        method=method, head_kind=kind, predicted=predicted, notes=tuple(notes), residual_norms=residual_norms,
    )
