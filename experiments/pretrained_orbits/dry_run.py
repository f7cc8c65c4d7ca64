"""Experiment 9's dry run: one analysis timed at two orbit sizes and projected to every analysis of the full variant.

Nothing is trained: the projection is the analysis alone (``analysis=`` of
:func:`experiments.projection.dry_run_record`).
"""

from __future__ import annotations

from experiments import projection

from .pipeline import STATUS_CONTROL, analyse

#: The analysis the dry run times, when the variant runs its control: ResNet-50 with VICReg's 8192-8192-8192
#: projector, the widest head of the four controls (about 150 M multiply-adds per head jvp, 25 jvps per orbit
#: point at the paper's 8 control directions, against about 25 M for the DINO heads; Barlow Twins' has the same
#: widths), on a backbone as costly as ViT-S/16; else the first control.
DRY_RUN_UNIT = "vicreg_resnet50"


def unit_name(config) -> str:
    """The control :func:`project` times: :data:`DRY_RUN_UNIT` when ``config.control.checkpoints`` runs it, else
    the first of them.

    Raises:
      ValueError: when ``config.control`` runs no control (the dry run times a control's analysis).
    """
    names = [n for n in config.model.checkpoints if n in config.control.checkpoints] if config.control.enabled else []
    if not names:
        raise ValueError(
            "pretrained_orbits dry run: `control.enabled` with at least one of `model.checkpoints` in "
            "`control.checkpoints` is needed (the projection times a control's analysis)."
        )
    return DRY_RUN_UNIT if DRY_RUN_UNIT in names else names[0]


def orbit_points(c, section: str) -> int:
    """Orbit points per augmentation of one analysis, ``classes x images per class x orbit steps``, of the
    checkpoints' (``section = "data"``) or the controls' (``"control"``) settings of config ``c``."""
    steps = c.analysis.orbit_steps if section == "data" else c.control.orbit_steps
    return int(c[section].num_classes * c[section].images_per_class * steps)


def n_analyses(full, n_present: int) -> int:
    """The analyses of the full variant: its present checkpoints and its controls."""
    controls = sum(n in full.control.checkpoints for n in full.model.checkpoints) if full.control.enabled else 0
    return int(n_present + controls)


def project(name: str, models, config, full, key, image_cache: dict, n_present: int):
    """``(row, aug_rows, record)``: the control ``name``'s analysis at the dry run's size, and the projection.

    Unit: one analysis (:func:`pipeline.analyse`: orbits of the four augmentations, the backbone jvp of every
    orbit point, the head's gains along tangents and controls, orbit statistics, the Lanczos pullback spectrum)
    of the control ``models = (backbone, head, variables)`` at the dry config ``config``. Scaled: the orbit
    points per augmentation ``n = classes x images x steps`` (:func:`orbit_points`), by images: the dry run's
    ``n_1`` (its ``control.images_per_class``) and ``2 n_1`` (twice the images), against ``N`` = the full
    variant's (600 in the paper: 1/100 and 1/50 of it; 1/8 would put 300 images per augmentation through
    ResNet-50's jvp per unit on a CPU). The per-point settings are the full variant's (``control_directions``),
    the backbone chunk is the dry run's (one compiled shape). ``t(n) = a n^p`` through the two points; total
    ``count * a * N^p``, ``count`` = :func:`n_analyses` (:func:`experiments.projection.power_law_projection`).
    The untimed first call at ``n_1`` (compilation) is the dry run's own analysis of ``name`` (returned as
    ``row``, ``aug_rows``), the one at ``2 n_1`` compiles the new shapes. Known biases: fixed costs per
    analysis (the Lanczos spectrum, here ``metric_points`` x ``lanczos_steps`` of the dry config, against
    4 x 400 in the paper; dispatch) lower ``p`` and under-project; a present checkpoint's analysis also
    measures its untrained head (about twice the head's cost), which a control's does not; the other controls
    are taken to cost what ``name``'s does (the widest head, :data:`DRY_RUN_UNIT`: an over-projection for the
    DINO ones); a reduced image count underuses an accelerator.
    """
    c = config.control
    per_image = int(c.num_classes) * int(c.orbit_steps)
    n1, full_n = orbit_points(config, "control"), orbit_points(full, "control")
    backbone, head, variables = models
    first = []

    def make_unit(n):
        def run():
            out = analyse(
                name,
                STATUS_CONTROL,
                backbone,
                head,
                variables,
                config,
                image_size=int(c.image_size),
                num_classes=int(c.num_classes),
                images_per_class=n // per_image,
                steps=int(c.orbit_steps),
                key=key,
                image_cache=image_cache,
            )
            if not first:
                first.append(out)
            return out

        return run

    analysis = projection.project_at_sizes(
        make_unit, full_n, n_analyses(full, n_present), sizes=[n1, 2 * n1], repeats=1
    )
    record = projection.dry_run_record(
        analysis["points"][-1][1],
        analysis=analysis,
        scaled="orbit points per augmentation (images)",
        orbit_points_full=full_n,
        analyses_full=int(analysis["count"]),
        unit=name,
        projection=f"one analysis ({name}'s control) timed at {n1} and {2 * n1} orbit points per augmentation, "
        f"t = a n^p, x {int(analysis['count'])} analyses at {full_n}",
    )
    row, aug_rows = first[0]
    return row, aug_rows, record
