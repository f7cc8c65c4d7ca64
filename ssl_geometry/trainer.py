"""The SSL trainer: one run loop and one jitted, sharded update step for every objective.

What a run is made of, each idea in one module of ``ssl_geometry/_src/training/``:

* the run (``run.py``): :func:`train` takes a config to its step count in a guarded workdir --
  resume, checkpoints, batch order, metrics, ``stop_after``, the workdir lock -- with per-step
  hooks for callers that measure along the way; ``python -m ssl_geometry.train`` (:mod:`ssl_geometry.train`)
  and the experiments that train call it;
* the builders (``builders.py``): config sections to objects -- :func:`load_split` /
  :func:`load_dataset`, :func:`build_augment` / :func:`augment_config`, :func:`build_backbone`,
  :func:`build_head`, :func:`build_objective`, :func:`build_optimizer` -- the name tables
  :data:`BACKBONES`, :data:`AUGMENTS`, :data:`DTYPES`;
* the check of the whole config before anything is built (``validate.py``): :func:`validate_config`;
* the optimiser (``optimizer.py``): :func:`make_schedule`, :func:`make_optimizer` (the names they take,
  :data:`SCHEDULES`, :data:`OPTIMIZERS`);
* the update (``step.py``): :func:`make_train_step` (with the online probe inside it) and
  :func:`jit_train_step`;
* the state and its sharding (``state.py``): :func:`init_train_state`, :func:`init_probe`,
  :func:`make_mesh`, :func:`state_shardings`, :func:`batch_sharding`, :func:`place_state`,
  :func:`place_batch`;
* the data order (``data_order.py``): :func:`batch_indices`; the input feeds
  (``feed.py``): :class:`MemoryFeed`, :class:`StreamFeed`, :func:`make_feed`;
* metrics and logging into the workdir (``monitor.py``): :func:`representation_metrics`,
  :func:`make_eval_metrics`, :func:`evaluate`, :class:`MetricLogger`, :func:`read_metrics`;
* process set-up (``distributed.py``): :func:`init_distributed` (bounded by ``distributed.timeout_s``;
  every process must be started with the same config, except the fields :data:`PER_PROCESS_FIELDS`);
* the guarded workdir (``workdir.py``): the errors a run refuses with, :class:`WorkdirLockedError`
  (another live run holds the workdir) and :class:`ConfigMismatchError` (the checkpoints are of
  another run).

The plumbing these call -- the workdir lock, config digests and resume checks, the per-process slice
of a batch, buffer unaliasing, the signals that stop a run -- is :mod:`ssl_geometry.internal`, for the
experiment harness, and may change without notice.

Training state (a plain dict pytree, checkpointed whole)::

    {"step": int32, "params": {backbone, projector[, predictor], probe},
     "opt_state": optax state, "obj_state": objective state (BN stats, EMA target,
     queue, centre), "rng": base PRNG key}

One update (:func:`make_train_step`) draws ``rng_t = fold_in(rng, step)``, runs the
objective's ``loss_fn`` (augmentations on device), adds the online linear probe's
cross-entropy on ``stop_gradient(backbone features of view 1)`` (so the probe never
changes the backbone), takes ``jax.value_and_grad`` of the sum, applies the optax
update, then the objective's ``update_state`` (EMA target). It returns scalar
metrics: SSL loss, probe loss/accuracy, learning rate, gradient norm and the
relative update size ``|theta_{t+1} - theta_t| / |theta_t|`` of each parameter group
(``backbone`` vs ``head`` = projector + predictor).

Sharding. :func:`make_mesh` builds a ``jax.sharding.Mesh`` with axes
``("data", "model")``. The batch is sharded over ``data`` (``P("data")``); every
parameter and optimiser leaf is replicated, except 2-D weight matrices whose
both sides are at least ``min_model_dim`` and whose output side divides by the
``model`` axis size, which are sharded along their output dimension
(``P(None, "model")``: wide head matrices such as the 2048x2048 projector).
The step is ``jax.jit`` with these ``in_shardings``/``out_shardings``; XLA's SPMD
partitioner inserts the collectives.

Cross-replica BatchNorm. Because the step is written for the *global* batch and
jitted over a batch sharded across devices, ``jnp.mean(x, axis=0)`` inside
BatchNorm is a mean over the global batch: batch statistics (and the running
statistics) are those of all devices together, i.e. synchronised BatchNorm
(SyncBN), and the result equals the single-device computation on the same global
batch up to floating-point reduction order (tested in ``tests/test_trainer.py``, in
float64). In float32 that round-off (~1e-7 per step) can move a pre-activation across a
ReLU kink in one run and not the other, after which the runs drift apart: for
``experiments/configs/tiny.py`` the parameters agree within 1e-5 relative for 17 steps
(measurement and explanation in ``docs/multihost.md``).
This differs from PyTorch DDP's default per-GPU BatchNorm.

Multi-host. With ``config.distributed.initialize = True`` :func:`train` calls
``jax.distributed.initialize(coordinator_address, num_processes, process_id)``
(all three may be left empty on TPU pods / SLURM / Open MPI, where JAX detects
them) before touching any device. Every process computes the same global batch
indices from ``(seed, step)`` and feeds its own contiguous slice with
``jax.make_array_from_process_local_data``; the mesh spans ``jax.devices()`` (all
processes). Only process 0 writes ``metrics.jsonl``; orbax coordinates the
checkpoint writes of all processes. Streaming input (``data.stream``, tfds per-host
shards) is :class:`StreamFeed`; launching: ``docs/multihost.md``.

Data order and resumption. The batch at step ``s`` is a pure function of
``(seed, s)`` (a per-epoch permutation from ``numpy.random.default_rng([seed,
epoch])``), and the step RNG is ``fold_in(rng, s)``; the checkpoint stores the
state (with ``rng`` and ``step``) and the data position, so a resumed run
reproduces the uninterrupted one bit for bit.
"""

from ssl_geometry._src.training.builders import AUGMENTS as AUGMENTS
from ssl_geometry._src.training.builders import BACKBONES as BACKBONES
from ssl_geometry._src.training.builders import DTYPES as DTYPES
from ssl_geometry._src.training.builders import augment_config as augment_config
from ssl_geometry._src.training.builders import build_augment as build_augment
from ssl_geometry._src.training.builders import build_backbone as build_backbone
from ssl_geometry._src.training.builders import build_head as build_head
from ssl_geometry._src.training.builders import build_objective as build_objective
from ssl_geometry._src.training.builders import build_optimizer as build_optimizer
from ssl_geometry._src.training.builders import load_dataset as load_dataset
from ssl_geometry._src.training.builders import load_split as load_split
from ssl_geometry._src.training.data_order import batch_indices as batch_indices
from ssl_geometry._src.training.distributed import PER_PROCESS_FIELDS as PER_PROCESS_FIELDS
from ssl_geometry._src.training.distributed import init_distributed as init_distributed
from ssl_geometry._src.training.feed import MemoryFeed as MemoryFeed
from ssl_geometry._src.training.feed import StreamFeed as StreamFeed
from ssl_geometry._src.training.feed import make_feed as make_feed
from ssl_geometry._src.training.monitor import MetricLogger as MetricLogger
from ssl_geometry._src.training.monitor import evaluate as evaluate
from ssl_geometry._src.training.monitor import make_eval_metrics as make_eval_metrics
from ssl_geometry._src.training.monitor import read_metrics as read_metrics
from ssl_geometry._src.training.monitor import representation_metrics as representation_metrics
from ssl_geometry._src.training.optimizer import OPTIMIZERS as OPTIMIZERS
from ssl_geometry._src.training.optimizer import SCHEDULES as SCHEDULES
from ssl_geometry._src.training.optimizer import make_optimizer as make_optimizer
from ssl_geometry._src.training.optimizer import make_schedule as make_schedule
from ssl_geometry._src.training.run import train as train
from ssl_geometry._src.training.state import batch_sharding as batch_sharding
from ssl_geometry._src.training.state import init_probe as init_probe
from ssl_geometry._src.training.state import init_train_state as init_train_state
from ssl_geometry._src.training.state import make_mesh as make_mesh
from ssl_geometry._src.training.state import place_batch as place_batch
from ssl_geometry._src.training.state import place_state as place_state
from ssl_geometry._src.training.state import state_shardings as state_shardings
from ssl_geometry._src.training.step import jit_train_step as jit_train_step
from ssl_geometry._src.training.step import make_train_step as make_train_step
from ssl_geometry._src.training.validate import validate_config as validate_config
from ssl_geometry._src.training.workdir import ConfigMismatchError as ConfigMismatchError
from ssl_geometry._src.training.workdir import WorkdirLockedError as WorkdirLockedError

__all__ = [
    "init_distributed",
    "PER_PROCESS_FIELDS",
    "train",
    "BACKBONES",
    "AUGMENTS",
    "DTYPES",
    "load_dataset",
    "load_split",
    "build_augment",
    "augment_config",
    "build_backbone",
    "build_head",
    "build_objective",
    "build_optimizer",
    "validate_config",
    "OPTIMIZERS",
    "SCHEDULES",
    "make_schedule",
    "make_optimizer",
    "make_train_step",
    "jit_train_step",
    "make_mesh",
    "state_shardings",
    "batch_sharding",
    "init_probe",
    "init_train_state",
    "place_state",
    "place_batch",
    "batch_indices",
    "MemoryFeed",
    "StreamFeed",
    "make_feed",
    "representation_metrics",
    "make_eval_metrics",
    "evaluate",
    "MetricLogger",
    "read_metrics",
    "WorkdirLockedError",
    "ConfigMismatchError",
]
