"""The one run loop: a configured training to its step count, resumable, in a guarded workdir.

Implementation of :func:`ssl_geometry.trainer.train`, which ``python -m ssl_geometry.train`` and the
experiments that train (``experiments/guillotine/training.py``, ``experiments/paper_simsiam.py``) call;
the config fields, the workdir's rules and the hooks are documented there.
"""

from __future__ import annotations

import errno
import math
import pathlib
import re
import signal
import threading
import time
import warnings

import jax
import numpy as np

from ssl_geometry._src.checks import optional_import
from ssl_geometry._src.training import checkpoint as ckpt
from ssl_geometry._src.training import workdir as _wd
from ssl_geometry._src.training.builders import build_objective, build_optimizer
from ssl_geometry._src.training.distributed import init_distributed
from ssl_geometry._src.training.feed import make_feed
from ssl_geometry._src.training.monitor import MetricLogger, check_knn_k, evaluate, make_eval_metrics, read_metrics
from ssl_geometry._src.training.state import init_train_state, make_mesh, place_state
from ssl_geometry._src.training.step import jit_train_step, make_train_step
from ssl_geometry._src.training.validate import validate_config

__all__ = ["train"]

#: Updates after the first of an invocation (which compiles) timed to completion for ``step_time_s``.
_TIMED_STEPS = 5


def train(config, workdir, *, verbose: bool = True, observe=None, hooks=()) -> dict:
    """Train ``config`` in ``workdir`` to ``train.steps``, resuming from its newest checkpoint; return a summary.

    Update ``s`` (from the restored step on) trains on the global batch of step ``s`` (in memory:
    :func:`batch_indices` ``(seed, s)``; :func:`make_feed`) with the jitted, sharded
    :func:`make_train_step`. Every ``train.log_every`` steps (and at the invocation's last step) the
    update's metrics are appended to ``<workdir>/metrics.jsonl``; every ``train.metrics_every`` steps
    a ``"event": "tracked"`` record (:func:`make_eval_metrics` on ``eval.metrics_images`` test
    images); every ``train.checkpoint_every`` steps and at the invocation's last step an orbax
    checkpoint under ``<workdir>/checkpoints/`` (parameters, optimiser and objective state, RNG key,
    data position; ``train.keep_checkpoints`` kept); at ``train.steps`` an ``"event": "final"``
    record with the offline probes (:func:`evaluate`; none with ``eval.final_probes = False``).

    The workdir is guarded: it must be a writable directory; a lock file keeps a second run out (a
    stale lock of a dead process is taken over); each checkpoint stores the trajectory-defining
    config fields and the state's shapes, and a resume under a different config is refused naming the
    fields (``train.allow_config_change=True`` continues anyway when the shapes match, recording an
    ``"event": "config_change"`` record); logging/evaluation/checkpoint cadence, the probes and
    process set-up may always change (:data:`RUNTIME_FIELDS`). A damaged newest checkpoint is moved
    to ``checkpoints.damaged/`` and the previous step used; ``metrics.jsonl`` is cut back to the
    restored step; a finished workdir reports "already complete" and writes nothing.

    Config fields (``experiments/configs/tiny.py`` is a complete example):

    * ``seed`` (initial state and batch order), ``dtype`` (``"float32"`` | ``"float64"``);
    * ``data``: ``name``, ``image_size``, ``data_dir``, ``num_train``, ``num_test`` (0 / "": the
      data set's defaults), ``seed`` (rendering seed of a generated set, default 0) and
      ``shapes_max_angle_deg`` (``"shapes"`` only: nuisance rotations in ``[-a, a]`` degrees;
      default ``None``, the set's range), see :func:`load_split`; ``batch_size`` (global);
      ``stream`` (read a tfds set with tf.data, per-host shards, instead of from memory;
      :class:`StreamFeed`), ``shuffle_buffer`` (streaming);
    * ``augment``: ``name`` in :data:`AUGMENTS` (``simclr_custom``: the other fields are an
      :class:`ssl_geometry.augment.AugmentConfig`);
    * ``model``: ``backbone`` (name in :data:`BACKBONES`) and ``backbone_kwargs``;
      ``projector`` / ``predictor`` :func:`ssl_geometry.heads.mlp` arguments (``hidden``,
      ``out_dim``, ``activation``, ``batch_norm``, ``final_batch_norm``, ``bias``, ``scale``);
    * ``objective``: ``name`` and the constants of :func:`ssl_geometry.objectives.make_objective`;
    * ``optimizer``: see :func:`make_optimizer` (+ ``probe_lr``, the online probe's Adam);
    * ``train``: ``steps``, ``log_every``, ``metrics_every`` (0: off), ``checkpoint_every``,
      ``keep_checkpoints``, ``progress`` (tqdm bar), ``tensorboard``, ``stop_after`` (end this
      invocation at that step, checkpointed; 0: off), ``allow_config_change``;
    * ``eval``: ``final_probes`` (default True), ``max_train``, ``max_test``, ``knn_k``,
      ``ridge_l2``, ``rotation`` (run the rotation probe), ``rotation_epochs``, ``metrics_images``;
    * ``mesh``: ``data``, ``model``, ``min_model_dim``;
    * ``distributed``: ``initialize``, ``coordinator_address``, ``num_processes``, ``process_id``,
      ``cpu_collectives`` (``"gloo"``), ``timeout_s`` (the bound on the wait for every process to
      connect, default 300); see ``docs/multihost.md``. Every process must be started with the same
      config (:func:`check_same_config`; only :data:`PER_PROCESS_FIELDS` may differ).

    Hooks, for callers that measure along the run (``experiments/paper_simsiam.py``):

    * ``observe(state, batch, new_state) -> {name: scalar}`` is traced into the update (see
      :func:`make_train_step`); its values join the update's metrics.
    * each of ``hooks`` may define ``before_step(step, state, batch)`` and ``after_step(step, state,
      metrics)``. Both are called on every process for every update this invocation runs, with
      ``step == state["step"]``: ``before_step`` before the update from ``step`` (its state and global
      batch), ``after_step`` right after it (the new state and the update's metrics as device arrays;
      reading them waits for the update), before the update is logged or checkpointed. A resumed run
      calls them from the restored step on; a complete workdir not at all. The state's buffers are
      donated to the next update: a hook copies what it keeps. A hook that raises ends the run with
      its exception (the lock is released; the newest checkpoint stays the last one written).

    Returns ``{"step", "resumed_from", "status", "last", "final", "images_per_s", "step_time_s",
    "state", "objective"}``: ``resumed_from`` is ``None`` for a fresh start; ``status`` is
    ``"finished"``, ``"stopped"`` (at ``train.stop_after``), ``"interrupted"`` (SIGTERM or SIGINT: the
    update under way finished, was logged and checkpointed, and the run returned; ``"signal"`` names the
    signal) or ``"already_complete"`` (nothing is
    recomputed or logged again); ``last`` the last logged metrics; ``final`` the offline probe
    accuracies; ``images_per_s`` the throughput of this invocation (compilation, evaluation and
    checkpoints excluded); ``step_time_s`` the median wall time of up to 5 updates after the
    first, each timed to completion (``nan`` when none ran). Raises ``FloatingPointError``
    when a logged loss is non-finite, ``ValueError`` for a bad config (:func:`validate_config`) or a
    refused resume (:class:`ConfigMismatchError`), :class:`WorkdirLockedError`,
    ``NotADirectoryError`` / ``PermissionError`` for an unusable workdir.
    """
    validate_config(config, devices=False)  # the distributed fields too, before initialize waits on them
    init_distributed(config)
    validate_config(config)
    workdir = _wd.prepare(workdir)
    with _wd.Lock(workdir, enabled=jax.process_index() == 0), StopSignals() as stop:
        return _train_locked(config, workdir, verbose, observe, tuple(hooks), stop)


#: The signals that stop a run at the next step boundary, checkpointed (:class:`StopSignals`).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignals:
    """While active (context manager), SIGTERM and SIGINT only set :attr:`signum` (the run stops at the next
    step boundary, checkpointed); a second signal gets the previous handler back (a second Ctrl-C interrupts at
    once). Outside the main thread, where Python cannot install handlers, it does nothing."""

    def __init__(self):
        self.signum: int | None = None
        self._previous = {}

    def _handle(self, signum, frame):
        del frame
        self.signum = signum
        for sig, handler in self._previous.items():  # a second signal acts as before
            signal.signal(sig, handler)

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, self._handle) for sig in STOP_SIGNALS}
        return self

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}


def _checkpoint_meta(config, state, position) -> dict:
    return {
        "data_position": position,
        "seed": int(config.seed),
        "config": _wd.config_record(config),
        "state_signature": _wd.state_signature(state),
    }


def _final_record(workdir) -> dict | None:
    recs = (
        [r for r in read_metrics(workdir) if r.get("event") == "final"]
        if (pathlib.Path(workdir) / "metrics.jsonl").exists()
        else []
    )
    return recs[-1] if recs else None


def _resume(run: dict, config, workdir, verbose: bool):
    """Restore the newest readable checkpoint into ``run`` (state, start step, data position);
    refuses a mismatched config (see :func:`ssl_geometry.internal.check_resume`)."""
    allow = bool(config.train.get("allow_config_change", False))
    meta = ckpt.latest_meta(run["mngr"])
    if meta is not None:  # refuse a different run before orbax fails on mismatched shapes
        _wd.check_resume(meta, config, run["state"], allow_config_change=allow)
    restored = ckpt.restore_latest(run["mngr"], run["state"])
    if restored is None:
        if jax.process_index() == 0:  # a fresh start: earlier records are kept aside, never deleted
            moved = _wd.set_aside(workdir / "metrics.jsonl")
            if moved is not None:
                warnings.warn(
                    f"{workdir / 'metrics.jsonl'} held records but the workdir has no checkpoint to "
                    f"continue; moved it to {moved} (unchanged) and starting a fresh run.",
                    stacklevel=2,
                )
        return None
    changed = _wd.check_resume(restored.meta, config, run["state"], allow_config_change=allow)
    if "config" not in restored.meta:
        warnings.warn(
            f"checkpoint step {restored.step} in {workdir / 'checkpoints'} stores no config, so this "
            "resume cannot be checked against the run that wrote it; continuing, and recording the "
            "current config as a config_change in metrics.jsonl.",
            stacklevel=2,
        )
    steps = int(config.train.steps)
    if restored.step > steps:
        raise ValueError(
            f"workdir {workdir} holds a checkpoint at step {restored.step}, beyond `train.steps` = "
            f"{steps}; set train.steps >= {restored.step} or use a fresh --workdir."
        )
    run.update(state=restored.state, start=restored.step, position=restored.meta.get("data_position"))
    if jax.process_index() == 0:
        dropped = _wd.truncate_metrics(workdir / "metrics.jsonl", restored.step)
        if changed:
            run["logger"].write(
                {
                    "step": restored.step,
                    "event": "config_change",
                    "fields": {k: {"saved": a, "now": b} for k, (a, b) in changed.items()},
                }
            )
        if verbose:
            print(
                f"resumed from checkpoint step {restored.step}"
                + (f" (dropped {dropped} metrics records written after it)" if dropped else ""),
                flush=True,
            )
    return restored.step


_ADVICE = "try a lower optimizer.lr, or dtype='float64' (with JAX_ENABLE_X64=1)"


def _last_checkpoint(mngr) -> str:
    step = mngr.latest_step()
    return "no checkpoint was written yet" if step is None else f"the last checkpoint is step {step}"


def _in_jit_failure(err: Exception, step: int, mngr) -> FloatingPointError | None:
    """The trainer's ``FloatingPointError`` for an ``error_if`` check that failed inside the jitted update
    (a non-finite loss, a traced hyper-parameter out of range), or ``None`` for another runtime error.
    Updates run asynchronously, so the failure is of an update at or before ``step``."""
    found = re.search(r"EquinoxRuntimeError: (.*?)(?:\n\s*\n|-{5,}|$)", str(err), re.DOTALL)
    if found is None:
        return None
    what = " ".join(found.group(1).split())
    return FloatingPointError(
        f"update {step} (or one just before it) failed a check inside the jitted step: {what} "
        f"{_last_checkpoint(mngr).capitalize()}; {_ADVICE}."
    )


def _no_space(err: BaseException | None) -> OSError | None:
    """The ``OSError`` with ``errno == ENOSPC`` (disk full) or ``EDQUOT`` (quota) in ``err``'s chain (orbax wraps
    its writers' errors), or ``None``."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
            return err
        err = err.__cause__ or err.__context__
    return None


def _save_checkpoint(run, config, state, done: int) -> None:
    """Checkpoint step ``done`` and wait for it; a full disk (or quota) becomes one ``OSError`` naming the step,
    the directory, the last complete checkpoint and what to do."""
    before = run["mngr"].latest_step()
    try:
        ckpt.save(run["mngr"], done, state, _checkpoint_meta(config, state, run["feed"].position(done)))
        run["mngr"].wait_until_finished()
    except Exception as err:
        full = _no_space(err)
        if full is None:
            raise
        last = "no complete checkpoint" if before is None else f"the last complete checkpoint is step {before}"
        raise OSError(
            f"no space left on the device while writing checkpoint step {done} to "
            f"{run['mngr'].directory} ({full.strerror or full}); {last}. Free space (or lower "
            "train.keep_checkpoints) and run the same command again to continue."
        ) from None


def _log_step(run, metrics, done, clock) -> dict:
    rec = {k: float(v) for k, v in jax.device_get(metrics).items()}
    now = time.perf_counter()
    if done > clock["s_mark"]:
        clock["t_train"] += now - clock["t_mark"]
        clock["n_images"] += (done - clock["s_mark"]) * run["batch_size"]
        rec["images_per_s"] = (done - clock["s_mark"]) * run["batch_size"] / (now - clock["t_mark"])
    clock["t_mark"], clock["s_mark"] = now, done
    rec["step"] = done
    if not math.isfinite(rec["loss"]):
        raise FloatingPointError(
            f"non-finite SSL loss {rec['loss']} at step {done}; {_last_checkpoint(run['mngr'])}; {_ADVICE}."
        )
    run["logger"].write(rec)
    return rec


def _bookkeeping(run, config, state, metrics, done, end, clock, bar, verbose) -> dict | None:
    """Log, track and checkpoint after update ``done`` as the cadences say; the logged record or ``None``."""
    tc, steps, rec = config.train, int(config.train.steps), None
    if done % tc.log_every == 0 or done == end:
        rec = _log_step(run, metrics, done, clock)
        if bar is not None:
            bar.set_postfix(
                loss=f"{rec['loss']:.4f}",
                probe=f"{rec['probe_acc']:.3f}",
                img_s=f"{rec.get('images_per_s', float('nan')):.0f}",
            )
    if tc.metrics_every and (done % tc.metrics_every == 0 or done == steps):
        em = jax.device_get(run["eval_fn"](state["params"], state["obj_state"], run["eval_images"]))
        run["logger"].write({"step": done, "event": "tracked", **{k: float(v) for k, v in em.items()}})
        clock["t_mark"] = time.perf_counter()
    if done % tc.checkpoint_every == 0 or done == end:
        _save_checkpoint(run, config, state, done)
        if verbose and jax.process_index() == 0:
            msg = f"checkpoint saved: step {done}"
            (bar.write(msg) if bar is not None else print(msg, flush=True))
        clock["t_mark"] = time.perf_counter()
    return rec


def _run_steps(run: dict, config, verbose: bool, hooks) -> tuple[dict, dict, float, float]:
    """The updates from ``run["start"]`` to ``train.steps`` (or ``train.stop_after``):
    ``(state, last logged record, images per second, step time)``."""
    steps, tc = int(config.train.steps), config.train
    stop = int(tc.get("stop_after", 0) or 0)
    end = min(steps, stop) if 0 < stop else steps
    bar = None
    if verbose and tc.get("progress", True) and jax.process_index() == 0:
        tqdm = optional_import("tqdm.auto").tqdm

        bar = tqdm(total=steps, initial=run["start"], desc=f"{config.objective.name}", dynamic_ncols=True)
    before = [h.before_step for h in hooks if hasattr(h, "before_step")]
    after = [h.after_step for h in hooks if hasattr(h, "after_step")]
    last: dict = {}
    state = run["state"]
    times: list[float] = []
    clock = {"t_mark": None, "s_mark": run["start"], "n_images": 0, "t_train": 0.0}
    for s in range(run["start"], end):
        try:
            state, last = _one_update(run, config, s, state, last, clock, times, bar, verbose, before, after, end)
        except (jax.errors.JaxRuntimeError, ValueError) as err:  # jax raises a failed callback as either
            converted = _in_jit_failure(err, s + 1, run["mngr"])
            if converted is None:
                raise
            raise converted from None
        if run.get("stopped_at") is not None:
            break
    if bar is not None:
        bar.close()
    ips = clock["n_images"] / clock["t_train"] if clock["t_train"] > 0 else float("nan")
    return state, last, ips, float(np.median(times)) if times else float("nan")


def _one_update(run, config, s, state, last, clock, times, bar, verbose, before, after, end):
    """Update ``s`` of :func:`_run_steps` with its hooks and bookkeeping: ``(state, last logged record)``."""
    batch = run["feed"].batch(s)
    for fn in before:
        fn(s, state, batch)
    t0 = time.perf_counter()
    state, metrics = run["step_fn"](state, batch)
    done = s + 1
    if clock["t_mark"] is None:  # the first update compiles: start the clock after it
        jax.block_until_ready(metrics)
        clock["t_mark"], clock["s_mark"] = time.perf_counter(), done
    elif len(times) < _TIMED_STEPS:  # a few updates timed to completion; the rest run asynchronously
        jax.block_until_ready(metrics)
        times.append(time.perf_counter() - t0)
    for fn in after:
        fn(done, state, metrics)
    if run["stop"].signum is not None:  # SIGTERM / SIGINT: this update is the invocation's last (checkpointed)
        run["stopped_at"], end = done, done
    rec = _bookkeeping(run, config, state, metrics, done, end, clock, bar, verbose)
    if bar is not None:
        bar.update(1)
    return state, (rec if rec is not None else last)


def _setup(config, workdir) -> dict:
    """Data, objective, optimiser, mesh, fresh placed state, checkpoint manager and logger."""
    seed, steps, batch_size = int(config.seed), int(config.train.steps), int(config.data.batch_size)
    feed = make_feed(config)
    if config.eval.get("final_probes", True):  # before training, not at the end
        check_knn_k(config.eval.knn_k, min(len(feed.eval_train[0]), int(config.eval.max_train)))
    objective = build_objective(config, feed.image_shape, steps)
    tx, sched = build_optimizer(config)
    mesh = make_mesh(config.mesh.data, config.mesh.model)
    mmd = int(config.mesh.get("min_model_dim", 1024))
    state = init_train_state(objective, tx, jax.random.PRNGKey(seed), feed.num_classes)
    state = place_state(state, mesh, min_model_dim=mmd)
    feed.attach(mesh)
    mngr = ckpt.manager(workdir / "checkpoints", max_to_keep=int(config.train.keep_checkpoints))
    n_eval = min(len(feed.test[0]), int(config.eval.get("metrics_images", 512)))
    return {
        "feed": feed,
        "objective": objective,
        "tx": tx,
        "sched": sched,
        "mesh": mesh,
        "mmd": mmd,
        "state": state,
        "mngr": mngr,
        "start": 0,
        "batch_size": batch_size,
        "eval_images": np.asarray(feed.test[0][:n_eval]),  # numpy: valid under multi-process jit
        "eval_fn": jax.jit(make_eval_metrics(objective)),
        "logger": MetricLogger(workdir, tensorboard=bool(config.train.get("tensorboard", False))),
    }


def _summary(
    run, status, step, resumed_from, *, last=None, final=None, ips=float("nan"), step_time=float("nan")
) -> dict:
    return {
        "step": step,
        "resumed_from": resumed_from,
        "status": status,
        "last": last or {},
        "final": final or {},
        "images_per_s": ips,
        "step_time_s": step_time,
        "state": run["state"],
        "objective": run["objective"],
    }


def _train_locked(config, workdir, verbose, observe, hooks, stop):
    steps = int(config.train.steps)
    run = _setup(config, workdir)
    run["stop"] = stop
    try:
        resumed_from = _resume(run, config, workdir, verbose)
        final = _final_record(workdir) if resumed_from == steps else None
        if final is not None:
            if verbose and jax.process_index() == 0:
                print(f"already complete: {workdir} holds a finished run of {steps} steps; nothing to do.", flush=True)
            final = {k: v for k, v in final.items() if k not in ("step", "event")}
            return _summary(run, "already_complete", steps, resumed_from, final=final)
        run["feed"].seek(run["start"], run.pop("position", None))
        run["step_fn"] = jit_train_step(
            make_train_step(run["objective"], run["tx"], run["sched"], observe=observe),
            run["mesh"],
            run["state"],
            min_model_dim=run["mmd"],
        )
        state, last, ips, step_time = _run_steps(run, config, verbose, hooks)
        run["mngr"].wait_until_finished()
    finally:
        run["mngr"].close()
    run["state"] = state
    done = int(jax.device_get(state["step"]))
    if run.get("stopped_at") is not None and done < steps:
        out = _summary(run, "interrupted", done, resumed_from, last=last, ips=ips, step_time=step_time)
        out["signal"] = signal.Signals(stop.signum).name
        return out
    if done < steps:
        return _summary(run, "stopped", done, resumed_from, last=last, ips=ips, step_time=step_time)
    final = {}
    if config.eval.get("final_probes", True):
        final = evaluate(
            run["objective"],
            state["params"],
            state["obj_state"],
            run["feed"].eval_train,
            run["feed"].test,
            config.eval,
            key=jax.random.PRNGKey(int(config.seed)),
        )
    run["logger"].write({"step": steps, "event": "final", **final})
    return _summary(run, "finished", steps, resumed_from, last=last, final=final, ips=ips, step_time=step_time)
