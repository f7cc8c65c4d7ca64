"""Experiment 6, probes: rotation and class prediction from z, from h(z) and from the untrained head's h_0(z).

The rotation probe is the authors' (``experiments.py``, ``RotationDataset`` and the probes of
``run_guillotine_experiment``): each image once, under a rotation by ``k * 90`` degrees with ``k``
drawn uniformly per image (``probes.rotations = "random"``; ``"all"`` uses all four), a linear
probe and a 2-layer ReLU MLP probe (hidden ``probes.hidden`` on z, ``probes.hidden_head`` on
h(z): the authors' 256 and 512), Adam 1e-3, batch 256, ``probes.epochs`` epochs, test accuracy.
The untrained head is the same head at its initialisation on the trained backbone: the probe gap
it already shows is architecture, not training.
"""

from __future__ import annotations

import jax

from ssl_geometry import augment, probes

from . import training as T

__all__ = [
    "untrained_head_run",
    "fit_epochs",
    "rotation_fit",
    "class_fit",
    "representations",
    "probe_suite",
    "probe_sets",
]


def untrained_head_run(run: dict) -> dict:
    """``run`` with the projector's parameters and statistics replaced by their values at initialisation."""
    return {
        **run,
        "params": {**run["params"], "projector": run["init_params"]["projector"]},
        "state": {**run["state"], "projector": run["init_state"]["projector"]},
    }


def fit_epochs(cfg) -> int:
    """Epochs of every probe fit: ``probes.epochs`` (the authors' 5), 1 in a dry run (a code-path check; the dry run
    times the fits at ``probes.epochs`` apart, :func:`experiments.guillotine.dry_run.fit_projection`)."""
    return 1 if cfg.dry_run else int(cfg.probes.epochs)


def rotation_fit(feats, hidden: int, key, epochs: int) -> dict:
    """The rotation probes (linear and MLP of width ``hidden``) on ``feats = ((f_tr, k_tr), (f_te, k_te))``:
    :func:`ssl_geometry.probes.fit_rotation_probes`, test and train accuracies and each probe's per-test-image
    outcome (``linear_test_correct``, ``mlp_test_correct``: 0/1 in the test order; the gap's interval reads them)."""
    (f_tr, y_tr), (f_te, y_te) = feats
    r = probes.fit_rotation_probes(f_tr, y_tr, f_te, y_te, epochs=epochs, hidden=hidden, key=key)
    return {k: r[k] for k in ("linear", "mlp", "linear_train", "mlp_train", "linear_test_correct", "mlp_test_correct")}


def class_fit(feats, hidden: int, key, epochs: int, num_classes: int | None = None) -> dict:
    """The class probes on ``feats = ((f_tr, y_tr), (f_te, y_te))``: :func:`ssl_geometry.probes.logistic_probe`
    and :func:`ssl_geometry.probes.mlp_probe` of width ``hidden`` with one key; their test accuracies."""
    (ftr, ytr), (fte, yte) = feats
    lin = probes.logistic_probe(ftr, ytr, fte, yte, num_classes=num_classes, epochs=epochs, key=key)
    mlp = probes.mlp_probe(ftr, ytr, fte, yte, num_classes=num_classes, hidden=hidden, epochs=epochs, key=key)
    return {"linear": lin["acc"], "mlp": mlp["acc"]}


def representations(backbone, heads: dict, images) -> dict:
    """``{"backbone": z, name: head(z), ...}`` of ``images`` (NumPy): ``z = backbone(x)`` computed once and every
    head of ``heads`` (``z -> h(z)``) applied to it, each through :func:`ssl_geometry.probes.features_in_batches`.
    """
    z = probes.features_in_batches(backbone, images)
    return {"backbone": z, **{name: probes.features_in_batches(h, z) for name, h in heads.items()}}


def probe_suite(
    cfg, run, rot_train, rot_test, cls_train, cls_test, key, *, class_probes: bool = True, untrained: bool = False
) -> dict:
    """Test accuracies ``{"rotation": {rep: {"linear", "mlp", ...}}, "class": {rep: {"linear", "mlp"}}}``.

    ``rep`` is ``backbone`` (z) and ``head`` (h(z)), plus ``head_untrained`` (h_0(z), rotation only)
    when ``untrained``. The rotation draws are the same for every representation (one key,
    :func:`ssl_geometry.probes.rotation_views`), so the probes of z, h(z) and h_0(z) see the same rotated
    images; the backbone runs once per image set (:func:`representations`) and the heads on its z. Each probe
    is :func:`ssl_geometry.probes.rotation_probe` of its representation with that key, computed in two halves.
    """
    if cfg.probes.rotations not in ("all", "random"):
        raise ValueError(f"`probes.rotations` must be 'all' or 'random'; got {cfg.probes.rotations!r}.")
    fz, fh = T.feature_fns(run)
    heads = {"head": fh}
    if untrained:
        heads["head_untrained"] = T.feature_fns(untrained_head_run(run))[1]
    hidden = {"backbone": cfg.probes.hidden, "head": cfg.probes.hidden_head, "head_untrained": cfg.probes.hidden_head}
    k_rot, k_cls = jax.random.split(key)
    (xr_tr, y_tr), (xr_te, y_te) = probes.rotation_views(rot_train, rot_test, rotations=cfg.probes.rotations, key=k_rot)
    r_tr, r_te = representations(fz, heads, xr_tr), representations(fz, heads, xr_te)
    epochs = fit_epochs(cfg)
    out = {
        "rotation": {
            name: rotation_fit(((r_tr[name], y_tr), (r_te[name], y_te)), hidden[name], k_rot, epochs) for name in r_tr
        },
        "class": {},
    }
    if class_probes:
        (xtr, ytr), (xte, yte) = cls_train, cls_test
        c_tr, c_te = representations(fz, {"head": fh}, xtr), representations(fz, {"head": fh}, xte)
        for i, name in enumerate(("backbone", "head")):
            out["class"][name] = class_fit(
                ((c_tr[name], ytr), (c_te[name], yte)), hidden[name], jax.random.fold_in(k_cls, i), epochs
            )
    return out


def probe_sets(cfg, train_ds, test_ds, sizes: dict):
    """``(rot_train, rot_test, cls_train, cls_test)``: the rotation-probe images (``data.rotation_probe_classes``)
    and the class-probe ``(images, labels)`` of each split, as floats in [0, 1]."""
    n_tr, n_te = sizes["probe_train"], sizes["probe_test"]
    rot_train = T.rotation_probe_subset(cfg, train_ds, n_tr)
    rot_test = T.rotation_probe_subset(cfg, test_ds, n_te)
    cls_train = (augment.to_float(train_ds.images[:n_tr]), train_ds.labels[:n_tr])
    cls_test = (augment.to_float(test_ds.images[:n_te]), test_ds.labels[:n_te])
    return rot_train, rot_test, cls_train, cls_test
