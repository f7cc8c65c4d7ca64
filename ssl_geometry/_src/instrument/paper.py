"""The paper's estimators, exactly as its released code computes them, named.

Implementation of :mod:`ssl_geometry.paper`; the conventions and formulas are in its docstring.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ssl_geometry._src.checks import check_positive, check_rank
from ssl_geometry._src.instrument import metrics as _metrics
from ssl_geometry._src.models.text import l2_normalize as _l2_normalize

__all__ = [
    "CONDITION_CLAMP",
    "ROTATION_ORBIT_ANGLES",
    "CURVATURE_ANGLES",
    "representation_std",
    "clamped_condition_number",
    "fd_curvature",
    "curvature_ratio",
    "orbit_spreads",
    "orbit_metrics",
    "orbit_compression",
    "orbits_by_class",
    "effective_rank_squared",
    "timescale_ratio",
]

#: ``torch.clamp(eigenvalues[0], min=1e-7)`` in ``experiments.py`` and ``hessian_tracker.py``.
CONDITION_CLAMP = 1e-7
#: ``np.linspace(0, 360, 12, endpoint=False)``: the orbit angles of ``run_orbit_visualization_experiment``.
ROTATION_ORBIT_ANGLES = tuple(float(a) for a in np.linspace(0.0, 360.0, 12, endpoint=False))
#: ``np.linspace(0, 45, 10)``: the curvature sweep of ``run_curvature_experiment``.
CURVATURE_ANGLES = tuple(float(a) for a in np.linspace(0.0, 45.0, 10))


def _stack_views(z1, z2):
    z = jnp.asarray(z1)
    check_rank(z, "z1", 2)
    if z2 is not None:
        z2 = jnp.asarray(z2)
        check_rank(z2, "z2", 2)
        if z2.shape[1] != z.shape[1]:
            raise ValueError(f"`z1` and `z2` must have the same feature dimension; got {z.shape} and {z2.shape}.")
        z = jnp.concatenate([z, z2], axis=0)
    if not jnp.issubdtype(z.dtype, jnp.floating):
        z = z.astype(jnp.result_type(float))
    return z


def representation_std(z1, z2=None):
    """The paper's collapse monitor: ``mean_j std_i(zhat_ij)``, ``zhat = z / |z|`` over both views.

    ``z = concat(z1, z2)`` (rows; ``(2n, d)``), ``zhat_i = z_i / max(|z_i|, 1e-12)``
    (``F.normalize``), ``std`` with ``ddof = 1`` (``torch.std``), mean over the ``d`` features:
    ``torch.std(F.normalize(torch.cat([z1, z2]), dim=1), dim=0).mean()``
    (``hessian_tracker.py``; ``experiments.py`` on projector outputs).

    Difference from the project: the formula is :func:`metrics.normalized_std`; what differs is
    the input. The paper's Hessian tracker applies it to the *backbone* ``z`` of both views
    stacked (512 rows for batch 256), the project's tracker to one view's projector output
    ``u1``. The two monitor different spaces: a head can be collapsed (``u`` constant) while
    ``z`` is not, so a Spearman correlation read from one is not the other's.
    """
    z = _stack_views(z1, z2)
    if z.shape[0] < 2:
        raise ValueError(f"need at least 2 rows for a std; got {z.shape[0]}.")
    return jnp.mean(jnp.std(_l2_normalize(z), axis=0, ddof=1))


def clamped_condition_number(z1, z2=None, *, clamp: float = CONDITION_CLAMP):
    """The paper's condition number: ``lambda_max(C) / max(lambda_min(C), clamp)``, ``clamp = 1e-7``.

    ``C = (zhat - mean)^T (zhat - mean) / (n - 1)`` for the L2-normalised rows ``zhat`` of
    ``concat(z1, z2)`` (as :func:`representation_std`), eigenvalues by ``eigh``; a round-off
    negative ``lambda_min`` is clamped to ``clamp`` as well (``torch.clamp(eig[0], min=1e-7)``).

    Difference from the project: :func:`metrics.covariance_condition_number` (default
    ``eig_floor = 0``) returns ``inf`` for a singular covariance. The paper's covariance is
    singular by construction (``n - 1 = 511`` centred rows of normalised ``z`` in ``d = 512``
    for ResNet-18, and any head-output covariance with ``k = 2048 > n``), so its number is
    ``1e7 * lambda_max``: a statement about the *largest* eigenvalue (how much variance one
    direction carries), not about conditioning. A Spearman correlation of it with the std is
    then a correlation of two spread measures. Equal to
    ``metrics.covariance_condition_number(zhat, eig_floor=clamp)``.
    """
    check_positive(clamp, "clamp")
    z = _stack_views(z1, z2)
    if z.shape[0] < 2:
        raise ValueError(f"need at least 2 rows for a covariance; got {z.shape[0]}.")
    zhat = _l2_normalize(z)
    zc = zhat - jnp.mean(zhat, axis=0)
    lam = jnp.linalg.eigvalsh(zc.T @ zc / (z.shape[0] - 1))
    return lam[-1] / jnp.maximum(lam[0], clamp)


def fd_curvature(traj, *, normalize: bool = True):
    """The paper's trajectory curvature: ``mean_t |r_{t+1} - 2 r_t + r_{t-1}|`` over interior t.

    ``traj``: ``(..., T, d)`` representations along an augmentation sweep (``T >= 3``;
    the paper: 10 rotation angles in [0, 45] degrees, :data:`CURVATURE_ANGLES`), rows
    L2-normalised first when ``normalize`` (``F.normalize(backbone(x))`` and
    ``F.normalize(head(backbone(x)))`` in ``run_curvature_experiment``; ``pretrained.ipynb``
    uses raw outputs: ``normalize=False``). Returns ``(...)``.

    Difference from the project: :func:`metrics.fd_trajectory_curvature` divides by the grid
    spacing squared (an estimate of ``|d^2 r / d theta^2|``, in units of the angle) and
    :func:`metrics.trajectory_curvature` computes the acceleration exactly by nested
    ``jvp``. The paper's number is not divided by ``h^2`` (so it depends on the grid: halving
    the step divides it by about 4) and lives on the unit sphere (normalised), so it mixes
    the trajectory's bending with the normalisation's. A head/backbone *ratio* on the same grid
    does not depend on ``h``, but it does depend on the normalisation.
    """
    r = jnp.asarray(traj)
    if r.ndim < 2 or r.shape[-2] < 3:
        raise ValueError(f"`traj` must have shape (..., T, d) with T >= 3; got {r.shape}.")
    if normalize:
        r = jnp.asarray(_l2_normalize(r))
    d2 = r[..., 2:, :] - 2.0 * r[..., 1:-1, :] + r[..., :-2, :]
    return jnp.mean(jnp.linalg.norm(d2, axis=-1), axis=-1)


def curvature_ratio(curv_z, curv_h):
    """The paper's curvature ratio ``mean(curv_h) / (mean(curv_z) + 1e-8)`` (one seed).

    The paper reports the mean over seeds of this per-seed ratio (1.93 ResNet-18, 2.59 ViT-T on
    CIFAR-10). A ratio of means, not a mean of per-image ratios.
    """
    cz, ch = jnp.asarray(curv_z), jnp.asarray(curv_h)
    if cz.size == 0 or ch.size == 0:
        raise ValueError("`curv_z` and `curv_h` must be non-empty.")
    return jnp.mean(ch) / (jnp.mean(cz) + 1e-8)


def _pdist_mean_std(x: np.ndarray):
    """Mean and std of the Euclidean distances over unordered pairs of rows (``scipy pdist``)."""
    iu = np.triu_indices(x.shape[0], k=1)
    d = np.sqrt(np.maximum(np.sum((x[:, None, :] - x[None, :, :]) ** 2, axis=-1)[iu], 0.0))
    return float(np.mean(d)), float(np.std(d))


def orbit_spreads(x, orbit_ids, *, normalize: bool = True) -> np.ndarray:
    """The paper's spread of each orbit: ``mean_{i in o} |x_i - c_o|^2``, orbits in sorted id order.

    ``x``: ``(n, d)`` representations, ``orbit_ids``: ``(n,)`` integer orbit of each row; rows
    L2-normalised first when ``normalize`` (as the paper's code stores them). Host-side NumPy
    float64, shape ``(number of orbits,)``. :func:`orbit_metrics`' ``spread`` is their mean.
    """
    x = np.asarray(x, dtype=np.float64)
    check_rank(x, "x", 2)
    ids = np.asarray(orbit_ids)
    if ids.shape != (x.shape[0],):
        raise ValueError(f"`orbit_ids` must have shape ({x.shape[0]},); got {ids.shape}.")
    if normalize:
        x = x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)
    out = []
    for oid in np.unique(ids):
        pts = x[ids == oid]
        out.append(np.mean(np.sum((pts - pts.mean(axis=0)) ** 2, axis=1)))
    return np.asarray(out, np.float64)


def orbit_metrics(x, orbit_ids, labels, *, normalize: bool = True) -> dict:
    """The paper's orbit geometry (``plot_results._calculate_geometric_metrics``), host-side in float64.

    ``x``: ``(n, d)`` representations, ``orbit_ids``/``labels``: ``(n,)`` integer orbit and class
    of each row (the paper: 5 classes x 3 images x 12 rotations 0..330 degrees,
    :data:`ROTATION_ORBIT_ANGLES`; rows L2-normalised first when ``normalize``, as the
    paper's code stores them). Returns floats:

    * ``spread``: mean over orbits ``o`` of ``mean_{i in o} |x_i - c_o|^2`` (squared distance);
    * ``intra``: mean over orbits of the mean pairwise distance within the orbit;
    * ``inter``: mean pairwise distance between class centroids (all points of a class);
    * ``ratio``: ``inter / (intra + 1e-10)``, with ``*_std`` the stds over orbits/pairs and
      ``ratio_std`` by the paper's error propagation.

    Difference from the project: :func:`metrics.orbit_statistics` defines the spread as the mean
    *distance* (not squared) to the centroid, so a spread ratio between two spaces is roughly the
    square of the project's (21.9x here is 4.8x in distance). The project's experiments also
    used orbits of 0..45 degrees, a small arc: over the full circle a rotation-*invariant*
    backbone would have spread 0, over 45 degrees the spread mostly measures smoothness.
    """
    x = np.asarray(x, dtype=np.float64)
    check_rank(x, "x", 2)
    ids = np.asarray(orbit_ids)
    lab = np.asarray(labels)
    if ids.shape != (x.shape[0],) or lab.shape != (x.shape[0],):
        raise ValueError(f"`orbit_ids` and `labels` must have shape ({x.shape[0]},); got {ids.shape}, {lab.shape}.")
    if normalize:
        x = x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)
    spreads = orbit_spreads(x, ids, normalize=False)
    intras = [_pdist_mean_std(x[ids == oid])[0] for oid in np.unique(ids) if np.sum(ids == oid) > 1]
    classes = np.unique(lab)
    if classes.size < 2 or not intras:
        raise ValueError("need at least 2 classes and one orbit with 2 or more points.")
    inter, inter_std = _pdist_mean_std(np.stack([x[lab == c].mean(axis=0) for c in classes]))
    intra, intra_std = float(np.mean(intras)), float(np.std(intras))
    ratio = inter / (intra + 1e-10)
    ratio_std = ratio * np.sqrt((inter_std / (inter + 1e-10)) ** 2 + (intra_std / (intra + 1e-10)) ** 2)
    return {
        "spread": float(np.mean(spreads)),
        "spread_std": float(np.std(spreads)),
        "intra": intra,
        "intra_std": intra_std,
        "inter": inter,
        "inter_std": inter_std,
        "ratio": float(ratio),
        "ratio_std": float(ratio_std),
    }


def orbit_compression(x_z, x_h, orbit_ids, labels, *, normalize: bool = True) -> float:
    """The paper's orbit compression ``spread(z) / (spread(h) + 1e-10)`` (21.9x, ResNet-18 CIFAR-10).

    Spreads by :func:`orbit_metrics` (mean squared distance to the orbit centroid). A ratio of
    squared distances: in the project's distance units it is its square root.
    """
    sz = orbit_metrics(x_z, orbit_ids, labels, normalize=normalize)["spread"]
    sh = orbit_metrics(x_h, orbit_ids, labels, normalize=normalize)["spread"]
    return sz / (sh + 1e-10)


def orbits_by_class(x, orbit_ids, labels, angles):
    """Rearrange paper-layout rows into the project's ``(classes, images, steps, d)`` orbit array.

    Rows are grouped by class (sorted), then orbit id (sorted), then angle (sorted), so the
    result feeds :func:`metrics.orbit_statistics`. Raises when the classes do not hold equally
    many orbits of equally many angles.
    """
    x = np.asarray(x)
    check_rank(x, "x", 2)
    ids, lab, ang = (np.asarray(a) for a in (orbit_ids, labels, angles))
    classes = np.unique(lab)
    out = []
    for c in classes:
        orbs = []
        for oid in np.unique(ids[lab == c]):
            sel = np.nonzero(ids == oid)[0]
            orbs.append(x[sel[np.argsort(ang[sel], kind="stable")]])
        out.append(orbs)
    shapes = {(len(o), *o[0].shape) for o in out} | {p.shape for o in out for p in o}
    try:
        return np.asarray(out, dtype=x.dtype)
    except ValueError as exc:
        raise ValueError(f"orbits are ragged (classes x orbits x steps differ): {sorted(map(str, shapes))}") from exc


def effective_rank_squared(traj, *, center: bool = True):
    """The paper's effective rank: ``exp(H(p))``, ``p_k = s_k^2 / sum_j s_j^2``, rows centred.

    ``pretrained.ipynb``'s ``calculate_effective_rank``: ``traj - mean(traj, 0)``, singular
    values ``s``, ``p = s^2 / (sum s^2 + 1e-10)``, ``scipy.stats.entropy`` (which renormalises
    ``p``). Equal to ``metrics.effective_rank(traj, "squared", eps=0.0, center=center)``.

    Difference from the project: :func:`metrics.effective_rank` does not centre by default
    and adds RankMe's ``eps = 1e-7`` to every ``p_k``; ``"rankme"`` uses ``s_k``, not ``s_k^2``
    (``squared <= rankme``). Centring matters most for an orbit: its rows share a large mean
    (the image's representation), and uncentred that one direction dominates, giving a rank
    near 1 however many directions the orbit moves in.
    """
    return _metrics.effective_rank(traj, "squared", eps=0.0, center=center)


def timescale_ratio(head_rel_update, backbone_rel_update):
    """The paper's timescale separation ``mean(head) / (mean(backbone) + 1e-8)`` of relative updates.

    ``plot_results.plot_timescale_separation``: per-epoch relative update sizes
    ``lr |grad_g| / |theta_g|`` averaged over seeds, then over epochs, then divided. The
    project's :func:`metrics.relative_update_size` measures the actual update ``|Delta theta|``
    (with momentum), which is not ``lr |grad|``.
    """
    h, b = jnp.asarray(head_rel_update), jnp.asarray(backbone_rel_update)
    if h.size == 0 or b.size == 0:
        raise ValueError("`head_rel_update` and `backbone_rel_update` must be non-empty.")
    return jnp.mean(h) / (jnp.mean(b) + 1e-8)
