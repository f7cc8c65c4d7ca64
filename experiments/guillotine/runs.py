"""Experiment 6, training runs: the main SimCLR run, the head-depth ablation and the probe gap's further seeds.

Each run is trained by :func:`.training.train_simclr` and probed by :func:`.probing.probe_suite`; progress goes to
stderr (:func:`log`).
"""

from __future__ import annotations

import sys
import time

import jax
import ml_collections

from experiments import configs

from . import dry_run as D
from . import probing
from . import training as T

__all__ = ["ablation_config", "extra_seed_probes", "gap_seeds", "log", "seed_config", "train_all"]

_NAME = __package__.rpartition(".")[2]  # the experiment's NAME, "guillotine"


def log(msg: str, t0: float) -> None:
    """Progress on stderr (a paper-size run takes hours; a CPU dry run minutes, mostly XLA compiles)."""
    print(f"[{_NAME}] {time.perf_counter() - t0:8.1f} s  {msg}", file=sys.stderr, flush=True)


def ablation_config(cfg):
    """The config of the head-depth ablation runs: ``train.batch_size`` / ``train.steps`` from ``ablation``
    (0 keeps the main run's) and their checkpoints under ``checkpoint_dir/ablation``."""
    a = cfg.ablation
    over = {
        "train.batch_size": int(a.batch_size or cfg.train.batch_size),
        "train.steps": int(a.steps or cfg.train.steps),
    }
    if cfg.train.get("checkpoint_dir"):
        over["train.checkpoint_dir"] = f"{cfg.train.checkpoint_dir}/ablation"
    return configs.apply_overrides(ml_collections.ConfigDict(cfg.to_dict()), over)


def train_all(cfg, train_ds, test_ds, sz, k_probe):
    sets = probing.probe_sets(cfg, train_ds, test_ds, sz)
    m, ab = cfg.model, ablation_config(cfg)
    same = (ab.train.batch_size, ab.train.steps) == (cfg.train.batch_size, cfg.train.steps)
    # The main run (head_depth, head_activation) first; then the ablation depths with ablation.activation (the
    # main run is reused at its depth when activation, batch and steps agree). Same seed: same backbone init.
    plan = [("main", cfg, m.head_depth, m.head_activation)]
    plan += [
        (d, ab, d, cfg.ablation.activation)
        for d in cfg.ablation.depths
        if not (d == m.head_depth and cfg.ablation.activation == m.head_activation and same)
    ]
    runs, probe_res = {}, {}
    t0 = time.perf_counter()
    for name, c, d, act in plan:
        runs[name] = T.train_simclr(c, d, act, batch=D.run_batch(cfg, c) if cfg.dry_run else None)
        runs[name]["batch_size"], runs[name]["steps"] = int(c.train.batch_size), int(c.train.steps)
        log(f"{name} (depth {d}, {act}): SimCLR trained ({runs[name]['step_time_s']:.3g} s/step)", t0)
        probe_res[name] = probing.probe_suite(
            cfg, runs[name], *sets, k_probe, class_probes=(name == "main"), untrained=(name == "main")
        )
        log(f"{name}: probes done", t0)
    for d in cfg.ablation.depths:  # the ablation's entries
        if d not in runs:
            runs[d], probe_res[d] = runs["main"], probe_res["main"]
    return runs, probe_res, sets


def seed_config(cfg, seed: int):
    """``cfg`` at another training seed (data rendering, initialisation, batch order, view and probe draws), its
    checkpoints under ``checkpoint_dir/seed<seed>``."""
    over = {"seed": int(seed)}
    if cfg.train.get("checkpoint_dir"):
        over["train.checkpoint_dir"] = f"{cfg.train.checkpoint_dir}/seed{int(seed)}"
    return configs.apply_overrides(ml_collections.ConfigDict(cfg.to_dict()), over)


def gap_seeds(cfg) -> list[int]:
    """The training seeds of the probe gap: ``seed, seed + 1, ..., seed + probes.gap_seeds - 1``."""
    n = int(cfg.probes.gap_seeds)
    if n < 1:
        raise ValueError(f"`probes.gap_seeds` must be >= 1; got {cfg.probes.gap_seeds!r}.")
    return [int(cfg.seed) + i for i in range(n)]


def extra_seed_probes(cfg, sz) -> list[dict]:
    """The rotation probes (z, h(z), h_0(z)) of the main run retrained at each further seed of :func:`gap_seeds`,
    every step of it at that seed (its own data rendering, probe sets and probe key): ``[{"seed", "rotation",
    "losses"}]``. They enter only the probe gap's interval (``guillotine-probe-gap``)."""
    out, t0 = [], time.perf_counter()
    for seed in gap_seeds(cfg)[1:]:
        c = seed_config(cfg, seed)
        tr, te = T.load_data(c)
        run = T.train_simclr(
            c, c.model.head_depth, c.model.head_activation, batch=D.run_batch(cfg, c) if cfg.dry_run else None
        )
        k_probe = jax.random.split(jax.random.PRNGKey(seed), 3)[1]
        res = probing.probe_suite(
            c, run, *probing.probe_sets(c, tr, te, sz), k_probe, class_probes=False, untrained=True
        )
        out.append({"seed": seed, "rotation": res["rotation"], "losses": run["losses"].tolist()})
        log(f"gap seed {seed}: trained and probed", t0)
    return out
