"""Plumbing for the experiment harness and the library's own tests: not public API.

Everything here may change or disappear in any release without notice or deprecation; code outside
this repository should not import it. A researcher trains with :mod:`ssl_geometry.trainer` (the run
loop, the builders, the state and its sharding, the step) and :mod:`ssl_geometry.checkpoint`; these are
the parts of the run loop that those call and the harness reaches into. What this namespace holds, by
the implementation module it comes from:

* ``training/workdir.py`` -- the guarded workdir: :func:`prepare`, :class:`Lock`, :func:`flatten_config`,
  :func:`config_record`, :func:`state_signature`, :func:`digest`, :func:`check_resume`,
  :func:`truncate_metrics`, :func:`set_aside`; the config fields a resume never compares,
  :data:`RUNTIME_FIELDS`, and the placeholder :data:`NOT_SAVED` for a field a checkpoint did not store;
* ``training/state.py`` -- :func:`unalias` (distinct buffers for a donated step);
* ``training/data_order.py`` -- :func:`host_slice` (this process's share of a global batch);
* ``training/distributed.py`` -- :func:`check_same_config` (every process started with one config);
* ``training/monitor.py`` -- :func:`check_knn_k` (the kNN probe's neighbour count against its data);
* ``training/run.py`` -- :data:`STOP_SIGNALS` (the signals that stop a run at the next checkpoint).

The errors a user catches (:class:`ssl_geometry.trainer.WorkdirLockedError`,
:class:`ssl_geometry.trainer.ConfigMismatchError`) stay public in :mod:`ssl_geometry.trainer`.
"""

from ssl_geometry._src.training.data_order import host_slice as host_slice
from ssl_geometry._src.training.distributed import check_same_config as check_same_config
from ssl_geometry._src.training.monitor import check_knn_k as check_knn_k
from ssl_geometry._src.training.run import STOP_SIGNALS as STOP_SIGNALS
from ssl_geometry._src.training.state import unalias as unalias
from ssl_geometry._src.training.workdir import NOT_SAVED as NOT_SAVED
from ssl_geometry._src.training.workdir import RUNTIME_FIELDS as RUNTIME_FIELDS
from ssl_geometry._src.training.workdir import Lock as Lock
from ssl_geometry._src.training.workdir import check_resume as check_resume
from ssl_geometry._src.training.workdir import config_record as config_record
from ssl_geometry._src.training.workdir import digest as digest
from ssl_geometry._src.training.workdir import flatten_config as flatten_config
from ssl_geometry._src.training.workdir import prepare as prepare
from ssl_geometry._src.training.workdir import set_aside as set_aside
from ssl_geometry._src.training.workdir import state_signature as state_signature
from ssl_geometry._src.training.workdir import truncate_metrics as truncate_metrics

__all__ = [
    "prepare",
    "Lock",
    "flatten_config",
    "config_record",
    "state_signature",
    "digest",
    "check_resume",
    "truncate_metrics",
    "set_aside",
    "RUNTIME_FIELDS",
    "NOT_SAVED",
    "unalias",
    "host_slice",
    "check_same_config",
    "check_knn_k",
    "STOP_SIGNALS",
]
