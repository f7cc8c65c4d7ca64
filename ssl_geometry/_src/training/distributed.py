"""Process set-up of a multi-host run: ``jax.distributed`` initialisation in bounded time, and one config.

Implementation of :func:`ssl_geometry.trainer.init_distributed` and
:func:`ssl_geometry.internal.check_same_config`.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
from typing import Any

import jax
import numpy as np

from ssl_geometry._src.training.workdir import flatten_config

__all__ = ["init_distributed", "check_same_config", "PER_PROCESS_FIELDS"]

#: Config fields that may differ between the processes of one run (each process's own id, where its
#: host keeps the data, its progress bar); every other field must be the same in all of them.
PER_PROCESS_FIELDS = ("distributed.process_id", "data.data_dir", "train.progress")


def init_distributed(config) -> None:
    """``jax.distributed.initialize`` from ``config.distributed`` when ``initialize`` is set, then
    :func:`check_same_config` (empty fields are left to JAX's cluster auto-detection: TPU pods,
    SLURM, Open MPI). On CPU the collectives go over gloo (``jax_cpu_collectives_implementation``).

    ``distributed.timeout_s`` (default 300) bounds the wait for every process to connect. Before
    waiting, one line on stderr names the coordinator, this process and the processes it waits for.
    A watchdog thread ends a process still waiting after ``timeout_s`` with one ``error:`` line naming
    the same facts and exit status 1 (``os._exit``: the wait is inside C++, and jax's coordination client,
    given ``timeout_s + 30`` s, would otherwise end it later with a C++ abort and stack trace). An
    initialisation error that does come back to Python is a ``TimeoutError`` with the same facts.
    """
    dist = config.get("distributed", None)
    if dist is None or not dist.get("initialize", False):
        return
    timeout = int(max(1, round(float(dist.get("timeout_s", 300)))))
    # JAX's own bound is set past the watchdog's, so the watchdog's one line ends a stuck wait, not a C++ abort.
    kw: dict[str, Any] = {"initialization_timeout": timeout + _JAX_GRACE_S}
    if dist.get("coordinator_address"):
        kw["coordinator_address"] = dist.coordinator_address
    if dist.get("num_processes", 0) > 0:
        kw["num_processes"] = int(dist.num_processes)
    if dist.get("process_id", -1) >= 0:
        kw["process_id"] = int(dist.process_id)
    if dist.get("cpu_collectives", "gloo"):
        jax.config.update("jax_cpu_collectives_implementation", dist.get("cpu_collectives", "gloo"))
    if not jax.distributed.is_initialized():
        n, me = kw.get("num_processes"), kw.get("process_id")
        others = sorted(set(range(n)) - {me}) if n is not None and me is not None else "the others"
        facts = (
            f"coordinator {kw.get('coordinator_address', '(auto-detected)')}, process {me} of {n}, "
            f"waiting for process(es) {others}"
        )
        print(
            f"ssl_geometry: jax.distributed.initialize: {facts}, for at most distributed.timeout_s = "
            f"{timeout} s (a process missing by then ends this one).",
            file=sys.stderr,
            flush=True,
        )
        advice = (
            "Start every process with the same coordinator_address and num_processes, or raise distributed.timeout_s."
        )
        done = threading.Event()
        threading.Thread(
            target=_watchdog,
            args=(
                done,
                timeout,
                f"jax.distributed.initialize did not complete "
                f"within distributed.timeout_s = {timeout} s: {facts}. {advice}",
            ),
            name="ssl_geometry-init-watchdog",
            daemon=True,
        ).start()
        try:
            jax.distributed.initialize(**kw)
        except Exception as err:  # noqa: BLE001 - the coordination service reports a timeout as several XLA error types
            raise TimeoutError(
                f"jax.distributed.initialize did not complete within distributed.timeout_s = "
                f"{timeout} s: {facts}. {advice} ({' '.join(str(err).split())[:300]})"
            ) from None
        finally:
            done.set()
    check_same_config(config)


#: Seconds JAX's ``initialization_timeout`` is set beyond ``distributed.timeout_s`` (the watchdog's bound).
_JAX_GRACE_S = 30

#: Exit status of a process the watchdog ends (a failure during the run, as the CLI's documented 1).
WATCHDOG_EXIT_STATUS = 1


def _watchdog(done: threading.Event, timeout_s: float, message: str) -> None:
    """End the process with one ``error:`` line and :data:`WATCHDOG_EXIT_STATUS` unless ``done`` is set within
    ``timeout_s``: jax's coordination client would otherwise abort it later with a C++ stack trace (SIGABRT), and
    ``jax.distributed.initialize`` blocks in C++, where no Python exception can interrupt it."""
    if done.wait(timeout_s):
        return
    print(f"error: {message}", file=sys.stderr, flush=True)
    os._exit(WATCHDOG_EXIT_STATUS)


def _field_digests(config) -> tuple[list[str], np.ndarray]:
    """The shared fields (all but :data:`PER_PROCESS_FIELDS`) and one 31-bit digest per field, the
    first entry being the digest of the field names themselves."""
    flat = {k: v for k, v in flatten_config(config).items() if k not in PER_PROCESS_FIELDS}
    names = sorted(flat)
    texts = [json.dumps(names)] + [json.dumps(flat[k], sort_keys=True) for k in names]
    digests = [int.from_bytes(hashlib.sha256(t.encode()).digest()[:4], "little") >> 1 for t in texts]
    return names, np.asarray(digests, np.int32)


def check_same_config(config) -> None:
    """Refuse, in every process, a multi-process run whose processes were started with different configs.

    Each process's per-field digests (``_field_digests``) are gathered from all processes
    (``multihost_utils.process_allgather``, one collective of a fixed size, so every process
    reaches the same verdict at the same point); any difference raises ``ValueError`` naming the
    differing fields and the processes that hold other values than process 0. One process: no-op.
    """
    if jax.process_count() == 1:
        return
    from jax.experimental import multihost_utils

    names, mine = _field_digests(config)
    size = multihost_utils.process_allgather(np.asarray([mine.size], np.int32))
    if len(set(np.asarray(size).ravel().tolist())) > 1:
        raise ValueError(
            f"the processes' configs have different numbers of fields ({np.asarray(size).ravel().tolist()} "
            "by process id); start every process with the same config file and overrides."
        )
    every = np.asarray(multihost_utils.process_allgather(mine)).reshape(jax.process_count(), -1)
    differ = np.any(every != every[0], axis=0)
    if not differ.any():
        return
    if differ[0]:
        raise ValueError(
            "the processes' configs have different fields; start every process with the same config file and overrides."
        )
    fields = [names[i - 1] for i in np.flatnonzero(differ)]
    procs = sorted(int(p) for p in np.flatnonzero(np.any(every != every[0], axis=1)))
    raise ValueError(
        f"the processes of this run were started with different configs: field(s) {fields} differ "
        f"between process 0 and process(es) {procs}; start every process with the same config file "
        "and overrides."
    )
