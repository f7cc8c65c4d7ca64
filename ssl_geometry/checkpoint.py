"""Orbax checkpointing of training state, with verified restore and fallback.

A checkpoint at step ``s`` is a directory ``<workdir>/checkpoints/<s>/`` written by
:class:`orbax.checkpoint.CheckpointManager` with two items:

* ``state``: the training-state pytree (parameters, optimiser state, objective
  state such as BatchNorm statistics / EMA target / MoCo queue / DINO centre, the
  base RNG key and the step counter), saved with ``StandardSave``;
* ``meta``: a JSON dict (data-iterator position, RNG seed, config digest, ...)
  plus ``"fingerprint"``: a SHA-256 digest of the bytes of every state leaf.

:func:`restore_latest` walks the saved steps from the newest to the oldest. A
step whose files are truncated or half-written (orbax raises while reading it) or
whose restored bytes do not match the saved fingerprint is skipped with a
:class:`CheckpointWarning` naming the step and the error, and the previous good
step is used. Orbax itself writes each step into a temporary directory and
renames it only after it is complete, so a process killed during a save leaves
no step that looks finished; the fingerprint additionally catches a step whose
files were damaged after the fact.

The functions: :func:`manager` (an orbax ``CheckpointManager``), :func:`save`, :func:`restore` (one step),
:func:`restore_latest` (the newest good one, a :class:`Restored`), :func:`latest_meta`, :func:`quarantine`
(a damaged step moved aside), :func:`fingerprint` and :func:`tree_signature` (what a save stores to check a
restore by). A step that holds another tree than the restore target is a :class:`CheckpointMismatchError`,
not damage.

Example:
  >>> import tempfile, jax.numpy as jnp
  >>> d = tempfile.mkdtemp()
  >>> mngr = manager(d, max_to_keep=2)
  >>> save(mngr, 10, {"w": jnp.arange(3.0)}, {"position": 10})
  True
  >>> r = restore_latest(mngr, {"w": jnp.zeros(3)})
  >>> r.step, r.state["w"].tolist(), r.meta["position"]
  (10, [0.0, 1.0, 2.0], 10)
  >>> mngr.close()
"""

from ssl_geometry._src.training.checkpoint import CheckpointMismatchError as CheckpointMismatchError
from ssl_geometry._src.training.checkpoint import CheckpointWarning as CheckpointWarning
from ssl_geometry._src.training.checkpoint import Restored as Restored
from ssl_geometry._src.training.checkpoint import fingerprint as fingerprint
from ssl_geometry._src.training.checkpoint import latest_meta as latest_meta
from ssl_geometry._src.training.checkpoint import manager as manager
from ssl_geometry._src.training.checkpoint import quarantine as quarantine
from ssl_geometry._src.training.checkpoint import restore as restore
from ssl_geometry._src.training.checkpoint import restore_latest as restore_latest
from ssl_geometry._src.training.checkpoint import save as save
from ssl_geometry._src.training.checkpoint import tree_signature as tree_signature

__all__ = [
    "CheckpointWarning",
    "CheckpointMismatchError",
    "Restored",
    "manager",
    "fingerprint",
    "save",
    "restore",
    "restore_latest",
    "latest_meta",
    "quarantine",
    "tree_signature",
]
