"""Experiment 6's dry run: the full variant's training and analysis, each timed at two reduced sizes and projected.

Every fit is ``t(n) = a n^p`` through two measured points (:func:`experiments.projection.power_law_projection`),
projected as ``count * a * N^p``; compilation is excluded (the trainer times the updates after its first; each
analysis unit is called once untimed first). Known bias, for all: a fixed cost per unit (dispatch, per-call
set-up) lowers ``p`` at small sizes, and a reduced batch or image count underuses an accelerator, so the fits
under-project where those dominate. The training and geometry sizes are far below 1/8 of the paper's (1/32 and
1/16 of the batch, :data:`GEOMETRY_IMAGES`): every size compiles the ResNet-18 step or the float64 analysis
afresh, minutes each on a 2-core CPU. The probe passes are timed at :func:`probe_timing_sizes` (512 and 1024
images at the paper's size), large enough that the fixed cost of a pass is small beside its images, and the probe
fits on their features at :func:`fit_timing_sizes` (4096 and 8192 images), each kind of fit once per size.
"""

from __future__ import annotations

import jax
import ml_collections
import numpy as np

from experiments import configs, projection

from . import probing
from . import training as T

#: Probe-set training images of the dry run's own probes (the paper's 50,000; its test set scaled alike).
PROBE_IMAGES = 16
#: The most probe-set training images the analysis' probe part is timed at (:func:`probe_timing_sizes`).
PROBE_TIMING_CAP = (512, 1024)
#: The most probe-set training images the probe fits are timed at (:func:`fit_timing_sizes`): about 4 and 8 s of
#: fits on a 2-core CPU at the paper's widths.
FIT_TIMING_CAP = (4096, 8192)
#: Degeneracy images the analysis' geometry part is timed at (the paper's 256; curvature, convergence and orbit
#: images scaled by the same fraction, ``experiments.guillotine._sizes``: 3 and 6 curvature images, 1 and 2 for the
#: convergence study, so that the counts at least double); also the sizes of the dry run's geometry.
GEOMETRY_IMAGES = (8, 16)


def batches(cfg) -> list[int]:
    """The main run's two dry-run batches, ``train.dry_run_batches`` sorted.

    Raises:
      ValueError: unless they are two distinct batches >= 2.
    """
    b = sorted({int(x) for x in cfg.train.dry_run_batches})
    if len(b) != 2 or b[0] < 2:
        raise ValueError(f"`train.dry_run_batches` must be two distinct batches >= 2; got {cfg.train.dry_run_batches}.")
    return b


def run_batch(cfg, c, k: int = 0) -> int:
    """The dry-run batch of the run of config ``c`` (the main run's ``cfg`` or the ablation's) at size ``k`` of
    :func:`batches`: the main run's scaled by ``c``'s paper batch over the main run's (the same fraction of each
    run's own batch: the ablation's 512 against the main run's 256).

    Raises:
      ValueError: when it exceeds ``data.dry_run_examples`` (the images a dry run trains on).
    """
    b = max(2, round(batches(cfg)[k] * c.train.batch_size / cfg.train.batch_size))
    if b > cfg.data.dry_run_examples:
        raise ValueError(
            f"`data.dry_run_examples` = {cfg.data.dry_run_examples} is fewer than a dry run's batch {b} "
            f"(`train.dry_run_batches` = {cfg.train.dry_run_batches})."
        )
    return b


def _timing_config(c) -> ml_collections.ConfigDict:
    """``c`` for a run only timed: a temporary workdir (``train.checkpoint_every = 0``), never the real run's."""
    return configs.apply_overrides(ml_collections.ConfigDict(c.to_dict()), {"train.checkpoint_every": 0})


def training_projection(cfg, ab, runs: dict) -> dict:
    """Training of the full variant from its runs' updates at two batches, as the schedule's mean update.

    Paths: the main run (``S`` updates at batch ``B``) and, when the depth ablation trains runs of its own, the
    ablation (``A`` runs of ``S'`` updates at ``B'``), timed by its deepest head (the costliest; the heads differ
    in depth only, a small part of a ResNet-18 step). Each path is timed at the same two fractions of its own
    batch (:func:`run_batch`): the main run at ``b_k`` (:func:`batches`), the ablation at ``b_k B' / B``; the
    runs of ``runs`` at the smaller, the runs at the larger trained here (``train.dry_run_steps`` updates each,
    only timed). The unit is the mean update ``t(b_k) = (S t_main + A S' t_ablation) / (S + A S')``, fitted
    over ``b_k`` as ``a b^p`` and projected to ``N = B``: ``(S + A S') a N^p`` (exact when both paths share
    ``p``; each path's points are in ``paths``).
    ``ab``: the ablation runs' config (``experiments.guillotine.runs.ablation_config``).
    """
    main = runs["main"]
    own = sorted({d for d in cfg.ablation.depths if runs[d] is not main})
    t_main = T.train_simclr(
        _timing_config(cfg), cfg.model.head_depth, cfg.model.head_activation, batch=run_batch(cfg, cfg, 1)
    )["step_time_s"]
    paths = {"main": (int(cfg.train.steps), int(cfg.train.batch_size), cfg, [main["step_time_s"], t_main])}
    if own:
        deep = max(own)
        t_big = T.train_simclr(_timing_config(ab), deep, cfg.ablation.activation, batch=run_batch(cfg, ab, 1))
        paths["ablation"] = (
            len(own) * int(ab.train.steps),
            int(ab.train.batch_size),
            ab,
            [runs[deep]["step_time_s"], t_big["step_time_s"]],
        )
    total = sum(p[0] for p in paths.values())
    points = [[b, sum(p[0] * p[3][k] for p in paths.values()) / total] for k, b in enumerate(batches(cfg))]
    rec = projection.power_law_projection(points, cfg.train.batch_size, total)
    rec["paths"] = {
        name: {"steps": steps, "batch_full": full, "points": [[run_batch(cfg, c, k), t[k]] for k in (0, 1)]}
        for name, (steps, full, c, t) in paths.items()
    }
    return rec


def probe_timing_sizes(cfg) -> list[int]:
    """The probe-set training image counts the probe part is timed at: 1/8 and 1/4 of ``probes.train_images``
    (:func:`experiments.projection.reduced_sizes`), each at most :data:`PROBE_TIMING_CAP` (512 and 1024 at the
    paper's 50,000: a pass of about 600 and 1200 images, seconds each on a 2-core CPU)."""
    return sorted({min(n, cap) for n, cap in zip(projection.reduced_sizes(cfg.probes.train_images), PROBE_TIMING_CAP)})


def tile(images, n: int):
    """``n`` images: ``images`` repeated in order (``images[i % len(images)]``), for timing a pass over more images
    than a dry run generates (a pass costs the same whatever the pixels)."""
    if n < 1 or len(images) < 1:
        raise ValueError(f"tile: need at least one image and `n` >= 1; got {len(images)} images and n = {n}.")
    return np.asarray(images)[np.arange(n) % len(images)]


def probe_passes(cfg, n_runs: int) -> float:
    """Backbone passes over the probe sets (train and test) in the full variant, each followed by the heads on its
    z (:func:`experiments.guillotine.probing.representations`): the main run's rotation probes (z, h(z) and h_0(z)
    from one pass) and class probes (z and h(z) from one pass) (2), the rotation probes of each of the other
    ``n_runs - 1`` trained runs (1 each), and the representation statistics of z and h(z) on the test set (its
    share of the images)."""
    p = cfg.probes
    return 2 + (n_runs - 1) + p.test_images / (p.train_images + p.test_images)


def fit_timing_sizes(cfg) -> list[int]:
    """The probe-set training image counts the probe fits are timed at: 1/8 and 1/4 of ``probes.train_images``
    (:func:`experiments.projection.reduced_sizes`), each at most :data:`FIT_TIMING_CAP`."""
    return sorted({min(n, cap) for n, cap in zip(projection.reduced_sizes(cfg.probes.train_images), FIT_TIMING_CAP)})


def probe_fits(n_runs: int) -> dict:
    """``{(task, representation): fits}`` of the full variant, each fit a linear and an MLP probe
    (:func:`experiments.guillotine.probing.probe_suite`): rotation probes on z and on h(z) of every trained run and
    on the main run's untrained head h_0(z) (the head's width), class probes on the main run's z and h(z)."""
    return {
        ("rotation", "backbone"): n_runs,
        ("rotation", "head"): n_runs + 1,
        ("class", "backbone"): 1,
        ("class", "head"): 1,
    }


def _features(n_train: int, n_test: int, width: int, num_classes: int, seed: int = 0):
    """``((f_tr, y_tr), (f_te, y_te))``: standard normal float32 features and every class in turn as labels (a fit
    costs the same whatever the values)."""
    rng = np.random.default_rng(seed)
    return tuple(
        (rng.standard_normal((n, width), dtype=np.float32), np.arange(n) % num_classes) for n in (n_train, n_test)
    )


def fit_projection(cfg, n_runs: int, widths: dict, num_classes: int) -> dict:
    """The probe fits of the full variant (:func:`probe_fits`), timed at :func:`fit_timing_sizes` and projected.

    Each kind of fit (task and representation: its width ``widths[rep]``, its MLP's hidden width and its classes)
    runs once per size through the analysis' own functions (:func:`.probing.rotation_fit`,
    :func:`.probing.class_fit`) at ``probes.epochs`` epochs, on features of that many images (four rows each under
    ``probes.rotations = "all"``) and the test set scaled alike; the unit is the sum over kinds of ``fits x time``,
    fitted as ``a n^p`` and projected to ``N = probes.train_images`` (count 1). Each kind's points are under
    ``kinds``. The fits compile once per shape (:mod:`ssl_geometry.probes`), so the untimed first call of each size
    holds the compilation.
    """
    p = cfg.probes
    rows = 4 if p.rotations == "all" else 1
    hidden = {"backbone": int(p.hidden), "head": int(p.hidden_head)}
    key = jax.random.PRNGKey(0)
    sizes = fit_timing_sizes(cfg)

    def make(task, rep):
        def unit(n):
            n_test = max(1, round(n * p.test_images / p.train_images))
            if task == "rotation":
                feats = _features(rows * n, rows * n_test, widths[rep], 4)
                return lambda: probing.rotation_fit(feats, hidden[rep], key, int(p.epochs))
            feats = _features(n, n_test, widths[rep], num_classes)
            return lambda: probing.class_fit(feats, hidden[rep], key, int(p.epochs), num_classes)

        return unit

    kinds = {
        f"{task}/{rep}": {"fits": count, "points": projection.time_at_sizes(make(task, rep), sizes, repeats=1)}
        for (task, rep), count in probe_fits(n_runs).items()
    }
    points = [[n, sum(k["fits"] * k["points"][i][1] for k in kinds.values())] for i, n in enumerate(sizes)]
    return {**projection.power_law_projection(points, p.train_images, 1), "kinds": kinds}


def analysis_projection(cfg, n_runs: int, probe_unit, geometry_unit, widths: dict, num_classes: int) -> dict:
    """The analysis of the full variant: its three parts each timed at two sizes and projected, then summed.

    * probes: ``probe_unit(n)``, one pass of ``n`` probe-set training images (:func:`probe_timing_sizes`) and the
      test set scaled alike through the main run's z and then its head (a backbone pass and the small head; the
      main run's rotation pass applies two heads, the other passes one), projected to
      ``N = probes.train_images``, count :func:`probe_passes`;
    * fits: the linear and MLP probes trained on those features (:func:`fit_projection`; ``widths`` the widths of
      z and h(z), ``{"backbone": ..., "head": ...}``, and ``num_classes`` the data set's classes);
    * geometry: ``geometry_unit(n)`` (curvature with its FD convergence, orbits, degeneracy) at ``n`` degeneracy
      images (:data:`GEOMETRY_IMAGES`; every geometry image count scaled alike), projected to
      ``N = analysis.degeneracy_images``, count 1.

    The record is the costliest part's (its points and exponent) with ``projected_s`` the sum of all three and each
    part under ``parts``.
    """
    parts = {
        "probes": projection.project_at_sizes(
            probe_unit, cfg.probes.train_images, probe_passes(cfg, n_runs), sizes=probe_timing_sizes(cfg), repeats=1
        ),
        "fits": fit_projection(cfg, n_runs, widths, num_classes),
        "geometry": projection.project_at_sizes(
            geometry_unit, cfg.analysis.degeneracy_images, 1, sizes=GEOMETRY_IMAGES, repeats=1
        ),
    }
    top = max(parts, key=lambda k: parts[k]["projected_s"])
    return {
        **parts[top],
        "projected_s": sum(p["projected_s"] for p in parts.values()),
        "part_shown": top,
        "parts": parts,
    }


def dry_run(cfg, ab, runs: dict, probe_unit, geometry_unit, widths: dict, num_classes: int) -> dict:
    """``measurements["dry_run"]``: :func:`training_projection` and :func:`analysis_projection`
    (:func:`experiments.projection.dry_run_record`; the step time the mean update at the larger batch)."""
    n_runs = len({id(r) for r in runs.values()})
    training = training_projection(cfg, ab, runs)
    analysis = analysis_projection(cfg, n_runs, probe_unit, geometry_unit, widths, num_classes)
    return projection.dry_run_record(
        training["points"][-1][1],
        training=training,
        analysis=analysis,
        scaled="batch (training), probe and degeneracy images (analysis)",
        batch_full=int(cfg.train.batch_size),
        batches=batches(cfg),
        runs_full=n_runs,
    )
