"""Collapse, conditioning, invariance and trajectory metrics of representations.

Implementation of :mod:`ssl_geometry.metrics`; the conventions and formulas are in its docstring.
"""

from __future__ import annotations

from typing import Callable, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import jax.scipy.special

from ssl_geometry._src.checks import check_choice, check_positive, check_rank, check_same_shape, is_concrete

Array = jax.Array

__all__ = [
    "EFFECTIVE_RANK_METHODS",
    "effective_rank",
    "spearman",
    "covariance_condition_number",
    "normalized_std",
    "relative_update_size",
    "OrbitStatistics",
    "orbit_statistics",
    "trajectory_curvature",
    "fd_trajectory_curvature",
    "metric_degeneracy",
    "augmentation_metric_degeneracy",
]

EFFECTIVE_RANK_METHODS = ("rankme", "squared")


def _matrix(z, name="z") -> Array:
    z = jnp.asarray(z)
    check_rank(z, name, 2)
    if not jnp.issubdtype(z.dtype, jnp.floating):
        z = z.astype(jnp.result_type(float))
    return z


def effective_rank(z: Array, method: str, *, eps: float = 1e-7, center: bool = False) -> Array:
    """Effective rank ``exp(H(p))`` of an ``(n, d)`` matrix, by a named method.

    With singular values ``s_k`` of ``z`` (of ``z - mean_rows(z)`` when ``center=True``):

    * ``"rankme"`` (Garrido et al. 2023, "RankMe", ICML): ``p_k = s_k / sum_j s_j + eps``;
    * ``"squared"`` (the paper's released code): ``p_k = s_k^2 / sum_j s_j^2 + eps``;

    and ``H(p) = -sum_k p_k log p_k`` (``0 log 0 = 0``). ``eps`` is RankMe's small
    constant (``1e-7``, as in their paper); pass ``eps=0`` for the exact entropy. For
    ``r`` equal non-zero singular values both give ``r`` (with ``eps = 0``); otherwise
    ``"squared" <= "rankme"``.

    ``method`` is required: the two definitions differ (docs/theory.md, section "Effective rank").
    ``center`` (default ``False``, RankMe's convention) subtracts the row mean first, as the
    paper's ``pretrained.ipynb`` does (``traj - mean(traj, 0)``): it drops the direction of
    the mean, so on a trajectory far from the origin the centred rank counts how many
    directions the trajectory *moves* in, the uncentred one is near 1 (the mean dominates).
    The paper's exact estimator is :func:`ssl_geometry.paper.effective_rank_squared`.

    Example:
      >>> import jax.numpy as jnp
      >>> z = jnp.diag(jnp.array([3.0, 1.0]))
      >>> round(float(effective_rank(z, "rankme", eps=0.0)), 6), round(float(effective_rank(z, "squared", eps=0.0)), 6)
      (1.754765, 1.384145)
    """
    check_choice(method, "method", EFFECTIVE_RANK_METHODS)
    check_positive(eps, "eps", strict=False)
    if not isinstance(center, bool):
        raise TypeError(f"`center` must be a bool; got {type(center).__name__}.")
    z = _matrix(z)
    if center:
        z = z - jnp.mean(z, axis=0)
    s = _singular_values(z)
    w = s if method == "rankme" else s**2
    total = jnp.sum(w)
    if is_concrete(total) and not float(total) > 0:
        raise ValueError("`z` is the zero matrix (or non-finite): its effective rank is undefined.")
    p = w / total + eps
    return jnp.exp(-jnp.sum(jax.scipy.special.xlogy(p, p)))


def _singular_values(z: Array) -> Array:
    """Singular values of an ``(n, d)`` matrix via the ``min(n, d)``-square R of a QR factorisation.

    ``z^T = Q R`` (``d > n``) or ``z = Q R`` (``n > d``) leaves the singular values unchanged and is
    backward stable; it keeps memory at ``O(n d)`` for very wide matrices (a 24 x 65536 head output:
    XLA's direct SVD allocated a 65536 x 65536 workspace).
    """
    n, d = z.shape
    if d > n:
        z = jnp.linalg.qr(z.T, mode="r")
    elif n > d:
        z = jnp.linalg.qr(z, mode="r")
    return jnp.linalg.svd(z, compute_uv=False)


def spearman(x, y) -> float:
    """Spearman rank correlation ``rho = corr(rank(x), rank(y))`` of two 1-D series (host-side).

    Ties get average ranks (``scipy.stats.spearmanr``). Pairs where either value is NaN are
    dropped; infinities are kept (they rank last: a singular covariance's ``inf`` condition
    number is the largest). Returns NaN -- the correlation is undefined -- when fewer than 3
    pairs remain or either series is constant on them (a constant, including all-``inf``,
    series has no ranks to correlate). This is the one Spearman of the suite: the paper's
    ``hessian_tracker.py`` calls ``scipy.stats.spearmanr`` on epochs 1..99, which agrees
    with it on finite, non-constant data.

    Example:
      >>> round(spearman([1.0, 2.0, 3.0, 4.0], [10.0, 20.0, float("inf"), 15.0]), 12)
      0.4
    """
    import numpy as np
    import scipy.stats

    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim != 1 or y.ndim != 1 or x.shape != y.shape:
        raise ValueError(f"`x` and `y` must be 1-D series of equal length; got shapes {x.shape} and {y.shape}.")
    ok = ~np.isnan(x) & ~np.isnan(y)
    x, y = x[ok], y[ok]
    if x.size < 3 or np.all(x == x[0]) or np.all(y == y[0]):
        return float("nan")
    return float(scipy.stats.spearmanr(scipy.stats.rankdata(x), scipy.stats.rankdata(y)).statistic)


def covariance_condition_number(z: Array, *, eig_floor: float = 0.0) -> Array:
    """Condition number ``lambda_max / max(lambda_min, eig_floor)`` of the covariance of ``z``.

    ``C = (z - mean)^T (z - mean) / (n - 1)`` for ``z`` of shape ``(n, d)``, eigenvalues
    by ``eigh``. Eigen-floor handling: eigenvalues are first clipped at 0 (``eigh``
    round-off can make a singular ``C``'s smallest eigenvalue slightly negative); with
    the default ``eig_floor = 0`` a singular covariance (``n <= d`` or collapsed
    data) gives ``inf``, never a negative or NaN number; a positive ``eig_floor``
    (absolute, in the units of ``C``) caps the ratio at ``lambda_max / eig_floor``.
    A zero covariance (``lambda_max = 0``: all samples equal) gives ``inf`` too.

    Example:
      >>> import jax.numpy as jnp
      >>> z = jnp.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 2.0], [0.0, -2.0]])
      >>> float(covariance_condition_number(z))
      4.0
    """
    check_positive(eig_floor, "eig_floor", strict=False)
    z = _matrix(z)
    if z.shape[0] < 2:
        raise ValueError(f"`z` needs at least 2 samples for a covariance; got shape {z.shape}.")
    zc = z - jnp.mean(z, axis=0)
    cov = zc.T @ zc / (z.shape[0] - 1)
    lam = jnp.clip(jnp.linalg.eigvalsh(cov), 0.0)
    lo = jnp.maximum(lam[0], eig_floor)
    hi = lam[-1]
    return jnp.where(lo > 0, hi / jnp.where(lo > 0, lo, 1.0), jnp.inf)


def normalized_std(z: Array, *, ddof: int = 1) -> Array:
    """SimSiam's collapse monitor: mean over dimensions of the std of L2-normalised rows.

    ``mean_j std_i( z_ij / |z_i| )`` for ``z`` of shape ``(n, d)``; ``ddof=1`` (default)
    is PyTorch's ``Tensor.std`` as in ``F.normalize(z).std(0).mean()``. It is 0 for
    complete collapse (all rows parallel with the same direction) and about
    ``1/sqrt(d)`` for directions uniform on the sphere (each coordinate has variance
    ``1/d``). Rows with zero norm raise (their direction is undefined).
    """
    z = _matrix(z)
    if z.shape[0] <= ddof:
        raise ValueError(f"`z` needs more than ddof={ddof} samples; got shape {z.shape}.")
    norms = jnp.linalg.norm(z, axis=1, keepdims=True)
    if is_concrete(norms) and bool(jnp.any(norms == 0)):
        raise ValueError("`z` has rows of zero norm; their L2-normalised direction is undefined.")
    zn = z / norms
    return jnp.mean(jnp.std(zn, axis=0, ddof=ddof))


def _group_leaves(tree, selector) -> list:
    flat = jax.tree_util.tree_flatten_with_path(tree)[0]
    out = []
    for path, leaf in flat:
        key = "/".join(_key_str(k) for k in path)
        if callable(selector):
            keep = selector(key)
        else:
            keep = key == selector or key.startswith(selector.rstrip("/") + "/")
        if keep:
            out.append(leaf)
    return out


def _key_str(k) -> str:
    for attr in ("key", "idx", "name"):
        if hasattr(k, attr):
            return str(getattr(k, attr))
    return str(k)


def relative_update_size(before, after, groups: Mapping[str, str | Callable[[str], bool]] | None = None) -> dict:
    """Relative update size ``|Delta theta_g| / |theta_g|`` per named parameter group.

    ``|Delta theta_g| = sqrt(sum over leaves in g of |after - before|^2)`` and
    ``|theta_g|`` the same norm of ``before`` (Frobenius norms over all leaves of the
    group). Paths are the pytree key paths joined by ``"/"`` (e.g.
    ``"head/layers/0/w"``).

    Args:
      before, after: pytrees of the same structure (parameters before/after a step).
      groups: ``{name: selector}`` where a selector is a path prefix (``"head"``
        selects ``"head/..."``) or a predicate ``path -> bool``. Default: one group
        per top-level key of a dict, plus ``"all"``.

    Returns:
      ``{name: scalar array}``. A group whose ``before`` norm is 0 gives ``inf`` if it
      moved and ``0`` if it did not. A selector that matches no leaf raises.

    Example:
      >>> import jax.numpy as jnp
      >>> old = {"backbone": jnp.ones(4), "head": jnp.ones(4)}
      >>> new = {"backbone": jnp.ones(4) * 1.01, "head": jnp.ones(4) * 1.5}
      >>> {k: round(float(v), 6) for k, v in relative_update_size(old, new).items()}
      {'backbone': 0.01, 'head': 0.5, 'all': 0.353624}
    """
    s_b = jax.tree_util.tree_structure(before)
    s_a = jax.tree_util.tree_structure(after)
    if s_b != s_a:  # type: ignore[operator]  # jax's PyTreeDef is an unresolved name in its stubs (no __eq__/__ne__ to mypy)
        raise ValueError(f"`before` and `after` must have the same pytree structure; got {s_b} and {s_a}.")
    for lb, la in zip(jax.tree_util.tree_leaves(before), jax.tree_util.tree_leaves(after)):
        check_same_shape(lb, la, "before leaf", "after leaf")
    if groups is None:
        if not isinstance(before, Mapping):
            raise ValueError("`groups` is required when `before` is not a dict (no top-level keys to group by).")
        groups = {str(k): str(k) for k in before}
        groups["all"] = lambda path: True
    delta = jax.tree_util.tree_map(lambda a, b: jnp.asarray(a) - jnp.asarray(b), after, before)
    out = {}
    for name, sel in groups.items():
        if not (callable(sel) or isinstance(sel, str)):
            raise TypeError(f"group {name!r}: selector must be a path prefix or a predicate; got {type(sel).__name__}.")
        lb = _group_leaves(before, sel)
        ld = _group_leaves(delta, sel)
        if not lb:
            raise ValueError(f"group {name!r} (selector {sel!r}) matches no parameter.")
        nb = jnp.sqrt(sum(jnp.sum(jnp.square(x)) for x in lb))
        nd = jnp.sqrt(sum(jnp.sum(jnp.square(x)) for x in ld))
        out[name] = jnp.where(nb > 0, nd / jnp.where(nb > 0, nb, 1.0), jnp.where(nd > 0, jnp.inf, 0.0))
    return out


class OrbitStatistics(NamedTuple):
    """Orbit geometry of representations ``r[c, i, t]`` (class c, image i, step t).

    Attributes:
      orbit_spread: mean over orbits ``(c, i)`` of the mean distance of the orbit's
        points to the orbit centroid ``o_ci = mean_t r[c, i, t]``.
      intra_orbit_distance: mean over orbits of the mean pairwise distance
        ``|r[c,i,t] - r[c,i,t']|`` over ordered pairs ``t != t'``.
      inter_class_distance: mean pairwise distance between class centroids
        ``m_c = mean_{i,t} r[c, i, t]`` over pairs ``c != c'``.
      class_orbit_ratio: ``inter_class_distance / intra_orbit_distance`` (large:
        classes far apart relative to the size of augmentation orbits).
    """

    orbit_spread: Array
    intra_orbit_distance: Array
    inter_class_distance: Array
    class_orbit_ratio: Array


def _mean_pairwise(x):
    """Mean distance over ordered pairs of distinct rows of ``x`` (``(m, d)``, m >= 2)."""
    m = x.shape[0]
    diff = x[:, None, :] - x[None, :, :]
    sq = jnp.sum(diff**2, axis=-1)
    off = ~jnp.eye(m, dtype=bool)
    dist = jnp.sqrt(jnp.where(off, sq, 1.0))  # safe sqrt (differentiable) on the diagonal
    return jnp.sum(jnp.where(off, dist, 0.0)) / (m * (m - 1))


def orbit_statistics(reps: Array) -> OrbitStatistics:
    """Orbit spread, intra-orbit distance, inter-class distance and their ratio.

    Args:
      reps: ``(classes, images, orbit_steps, d)`` (the paper's orbits: 5 x 3 x 12 x d),
        needing at least 2 classes and 2 orbit steps. Definitions: see
        :class:`OrbitStatistics`.

    Example (two classes at distance 4, orbits of two points at distance 2):
      >>> import jax.numpy as jnp
      >>> r = jnp.array([[[[-1.0, 0.0], [1.0, 0.0]]], [[[-1.0, 4.0], [1.0, 4.0]]]])
      >>> [float(x) for x in orbit_statistics(r)]
      [1.0, 2.0, 4.0, 2.0]
    """
    reps = jnp.asarray(reps)
    check_rank(reps, "reps", 4)
    C, I, T, _ = reps.shape
    if C < 2 or T < 2 or I < 1:
        raise ValueError(f"`reps` needs at least 2 classes, 1 image and 2 orbit steps; got shape {reps.shape}.")
    orbit_centroid = jnp.mean(reps, axis=2, keepdims=True)
    spread = jnp.mean(jnp.linalg.norm(reps - orbit_centroid, axis=-1))
    flat_orbits = reps.reshape(C * I, T, -1)
    intra = jnp.mean(jax.vmap(_mean_pairwise)(flat_orbits))
    class_centroid = jnp.mean(reps, axis=(1, 2))
    inter = _mean_pairwise(class_centroid)
    return OrbitStatistics(spread, intra, inter, inter / intra)


def _scalar_theta(theta):
    theta = jnp.asarray(theta)
    if theta.ndim != 0:
        raise ValueError(f"`theta` must be a scalar (use jax.vmap for a grid); got shape {theta.shape}.")
    if not jnp.issubdtype(theta.dtype, jnp.floating):
        theta = theta.astype(jnp.result_type(float))
    return theta


def trajectory_curvature(path_fn: Callable[[Array], Array], theta: Array, *, kind: str = "acceleration") -> Array:
    """Curvature of the representation trajectory ``theta -> r(theta)``, exactly.

    ``r' = jvp(r, theta, 1)`` and ``r'' = jvp(theta -> r'(theta), theta, 1)`` (nested
    forward mode, exact). ``kind``:

    * ``"acceleration"``: ``|d^2 r / d theta^2|`` (the paper's ``kappa``; depends on the
      parametrisation: a circle of radius R traversed by angle gives ``R``);
    * ``"geometric"``: the curve's curvature
      ``sqrt(|r'|^2 |r''|^2 - (r' . r'')^2) / |r'|^3`` (parametrisation-invariant;
      ``1/R`` on the circle).

    Args:
      path_fn: differentiable ``theta (scalar) -> r`` (any shape; flattened), e.g.
        ``lambda a: head(backbone(rotate(x, a)))``.
      theta: scalar; ``jax.vmap`` over a grid.

    Example (circle of radius 3):
      >>> import jax.numpy as jnp
      >>> c = lambda a: 3.0 * jnp.stack([jnp.cos(a), jnp.sin(a)])
      >>> float(trajectory_curvature(c, 0.4)), round(float(trajectory_curvature(c, 0.4, kind="geometric")), 12)
      (3.0, 0.333333333333)
    """
    check_choice(kind, "kind", ("acceleration", "geometric"))
    theta = _scalar_theta(theta)
    one = jnp.ones_like(theta)

    def velocity(t):
        return jax.jvp(lambda s: jnp.ravel(path_fn(s)), (t,), (one,))[1]

    v, a = jax.jvp(velocity, (theta,), (one,))
    if kind == "acceleration":
        return jnp.linalg.norm(a)
    vv, aa, va = jnp.vdot(v, v), jnp.vdot(a, a), jnp.vdot(v, a)
    return jnp.sqrt(jnp.maximum(vv * aa - va**2, 0.0)) / vv**1.5


def fd_trajectory_curvature(reps: Array, spacing: float) -> Array:
    """Second-difference curvature ``|r_{t+1} - 2 r_t + r_{t-1}| / h^2`` (the paper's estimator).

    ``reps`` holds representations on a uniform grid ``theta_t = theta_0 + t h``,
    shape ``(..., T, d)`` with ``T >= 3``; returns ``(..., T - 2)`` values at the
    interior points. The truncation error is ``O(h^2)`` (``|r''''| h^2 / 12``);
    compare with :func:`trajectory_curvature`. Head/backbone ratios do not depend
    on the units of ``h``.

    Example (circle of radius 1, h = 0.1: ``(2 - 2 cos h) / h^2``):
      >>> import jax.numpy as jnp
      >>> a = jnp.arange(4) * 0.1
      >>> r = jnp.stack([jnp.cos(a), jnp.sin(a)], axis=-1)
      >>> [round(float(x), 8) for x in fd_trajectory_curvature(r, 0.1)]
      [0.99916694, 0.99916694]
    """
    check_positive(spacing, "spacing")
    reps = jnp.asarray(reps)
    if reps.ndim < 2 or reps.shape[-2] < 3:
        raise ValueError(f"`reps` must have shape (..., T, d) with T >= 3; got {reps.shape}.")
    d2 = reps[..., 2:, :] - 2.0 * reps[..., 1:-1, :] + reps[..., :-2, :]
    return jnp.linalg.norm(d2, axis=-1) / spacing**2


def metric_degeneracy(head_fn: Callable[[Array], Array], z: Array, v: Array) -> Array:
    """``|J_h(z) v| / |v|``: how much the head keeps of the direction ``v`` at ``z``.

    ``J_h v`` by one ``jax.jvp`` (no Jacobian is formed). ``sqrt(v^T G v) / |v|`` for the
    Euclidean pullback metric ``G = J^T J``; near 0 means the head's metric
    degenerates along ``v`` (Sec. 5: invariance by destroying information).

    Args:
      head_fn: ``z -> u`` (any shapes).
      z: the point.
      v: tangent vector, same shape as ``z``, non-zero.
    """
    z = jnp.asarray(z)
    v = jnp.asarray(v, z.dtype)
    check_same_shape(z, v, "z", "v")
    nv = jnp.linalg.norm(jnp.ravel(v))
    if is_concrete(nv) and float(nv) == 0.0:
        raise ValueError("`v` must be non-zero.")
    jv = jax.jvp(head_fn, (z,), (v,))[1]
    return jnp.linalg.norm(jnp.ravel(jv)) / nv


def augmentation_metric_degeneracy(
    head_fn: Callable[[Array], Array], path_fn: Callable[[Array], Array], theta: Array
) -> Array:
    """``|J_h(z) v| / |v|`` along an augmentation tangent ``v = dz/dtheta`` at ``z = z(theta)``.

    ``path_fn: theta -> z`` (e.g. backbone of the augmented image); ``v`` by
    ``jax.jvp`` of ``path_fn``; then :func:`metric_degeneracy`. Equals
    ``|d h(z(theta)) / d theta| / |d z / d theta|``.
    """
    theta = _scalar_theta(theta)
    z, v = jax.jvp(path_fn, (theta,), (jnp.ones_like(theta),))
    return metric_degeneracy(head_fn, z, v)
