"""Offline evaluation probes on frozen features.

* :func:`ridge_probe`: closed-form ridge regression onto one-hot labels
  ``W = (X^T X + lambda n I)^{-1} X^T Y`` on centred, standardised features, predict
  ``argmax``;
* :func:`logistic_probe` / :func:`mlp_probe`: linear softmax regression / a
  2-layer MLP (``ReLU``) trained with optax Adam on cross-entropy, minibatches in
  ``lax.scan``;
* :func:`knn_probe`: k-nearest neighbours under cosine similarity, majority vote
  (or similarity-weighted vote ``sum exp(s / T)`` as in Wu et al. 2018);
* :func:`rotation_probe`: the paper's guillotine probe -- predict which of the four
  rotations (0, 90, 180, 270 degrees) was applied to an image from its features,
  with a linear and a 2-layer MLP probe trained for a few epochs; each image under all
  four rotations, or once under a uniformly drawn one (``rotations="random"``, the
  authors' ``RotationDataset``); its two halves, :func:`rotation_views` (the rotated images
  and labels) and :func:`fit_rotation_probes` (the probes on given features), let one
  feature pass serve several representations (a backbone and the heads on it).

Their parts: :func:`standardize`, :func:`features_in_batches` (a feature function over images in
chunks), :func:`rotate_images` and :func:`rotation_dataset`.

Features are ``(n, d)`` arrays; labels integer ``(n,)`` in ``[0, num_classes)``.
Every probe returns a dict with ``"acc"`` (test accuracy in [0, 1]) and the
quantities it used. Features are standardised with the *training* mean/std.

Example:
  >>> import numpy as np
  >>> x = np.array([[0., 1.], [0., 2.], [1., 0.], [2., 0.]]); y = np.array([0, 0, 1, 1])
  >>> float(knn_probe(x, y, x, y, k=1)["acc"]), float(ridge_probe(x, y, x, y)["acc"])
  (1.0, 1.0)
"""

from ssl_geometry._src.training.probes import features_in_batches as features_in_batches
from ssl_geometry._src.training.probes import fit_rotation_probes as fit_rotation_probes
from ssl_geometry._src.training.probes import knn_probe as knn_probe
from ssl_geometry._src.training.probes import logistic_probe as logistic_probe
from ssl_geometry._src.training.probes import mlp_probe as mlp_probe
from ssl_geometry._src.training.probes import ridge_probe as ridge_probe
from ssl_geometry._src.training.probes import rotate_images as rotate_images
from ssl_geometry._src.training.probes import rotation_dataset as rotation_dataset
from ssl_geometry._src.training.probes import rotation_probe as rotation_probe
from ssl_geometry._src.training.probes import rotation_views as rotation_views
from ssl_geometry._src.training.probes import standardize as standardize

__all__ = [
    "standardize",
    "ridge_probe",
    "knn_probe",
    "logistic_probe",
    "mlp_probe",
    "rotate_images",
    "rotation_dataset",
    "features_in_batches",
    "rotation_views",
    "fit_rotation_probes",
    "rotation_probe",
]
