"""The suite: which experiments it holds, in report order, the variants each runs and its config, and running one.

Each experiment is one module ``experiments/<name>`` with its config ``experiments/configs/<name>.py``
(:func:`load`); ``variant V`` runs variant ``V`` of every config that defines it, and ``paper`` also each
sibling ``paper_*`` variant in a directory of its own (:func:`variants_of`, :func:`run_dir`).
:func:`run_one` runs (or reuses) one of them; ``python -m experiments.reproduce`` runs them all.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pathlib
import shutil
from typing import NamedTuple

from experiments import claims, common

#: The suite, in report order: (module name under experiments/, label in REPORT.md).
EXPERIMENTS = [
    ("paper_data", "0. The paper's released results, re-analysed"),
    ("whitening", "1. Whitening (Thm 3.1)"),
    ("metric_adaptation", "2. Local metric adaptation and depth (Thm 3.2, Prop 3.3)"),
    ("collapse_hessians", "3. Collapse Hessians (Thm 4.1)"),
    ("collapse_escape", "4. Collapse escape dynamics"),
    ("collapse_escape_paper", "4b. Collapse escape: the authors' SimSiam runs"),
    ("hessian_tracker", "5. Hessian tracker parity"),
    ("guillotine", "6. Guillotine and information-invariance (Sec. 5)"),
    ("objectives", "7. Objectives"),
    ("minilm_geometry", "8. Foundation model: MiniLM (Sec. 5 on text)"),
    ("pretrained_orbits", "9. Foundation models: released vision checkpoints"),
]
NAMES = [n for n, _ in EXPERIMENTS]


def is_paper_variant(variant: str | None) -> bool:
    """``paper`` and its named siblings (``paper_vit_tiny``, ``paper_cifar100``, ...)."""
    return variant is not None and (variant == "paper" or variant.startswith("paper_"))


def parse_variant(text: str) -> str:
    """``--variant``'s type: ``tiny``, ``smoke``, ``paper`` or a sibling ``paper_*`` variant's name (run alone).

    Raises:
      argparse.ArgumentTypeError: naming the accepted values.
    """
    if text in ("tiny", "smoke") or is_paper_variant(text):
        return text
    raise argparse.ArgumentTypeError(f"expected tiny, smoke, paper or a sibling paper_* variant; got {text!r}")


def load(name: str):
    """``(experiments.<name>, experiments.configs.<name>)``; ``ValueError`` naming the suite for an unknown name."""
    if name not in NAMES:
        raise ValueError(f"Unknown experiment {name!r}; expected one of {NAMES}.")
    return importlib.import_module(f"experiments.{name}"), importlib.import_module(f"experiments.configs.{name}")


def variants_of(name: str, variant: str) -> list[str]:
    """The variants ``--variant VARIANT`` runs for ``name``: ``[variant]`` if its config defines it (else
    ``[]``), and for ``paper`` also every ``paper_*`` variant the config defines."""
    defined = getattr(load(name)[1], "VARIANTS", {})
    out = [variant] if variant in defined else []
    if variant == "paper":
        out += [v for v in defined if is_paper_variant(v) and v != "paper"]
    return out


def run_dir(name: str, variant: str) -> str:
    """Directory (under the output root) of ``name`` in ``variant``: ``name`` for ``tiny`` and ``smoke``,
    ``name-<variant>`` for ``paper`` and each sibling ``paper_*`` variant, so that a paper-scale run stored beside the
    smoke run in ``results/`` never overwrites it, and no two runs overwrite (or resume from) each other."""
    return f"{name}-{variant}" if is_paper_variant(variant) else name


def stored_dirs(out_root, name: str) -> list[pathlib.Path]:
    """The run directories of ``name`` under ``out_root`` that hold a ``results.json``, in report order: ``name``
    (``tiny`` or ``smoke``), ``name-paper``, then each ``name-paper_*`` sorted (:func:`run_dir`)."""
    root = pathlib.Path(out_root)
    dirs = [root / name, root / f"{name}-paper", *sorted(root.glob(f"{name}-paper_*"))]
    return [d for d in dirs if (d / "results.json").exists()]


def make_config(
    name: str, variant: str, *, seed: int | None = None, data_dir: str | None = None, dry_run: bool = False
):
    """The config of ``name`` in ``variant`` with the command-line overrides applied.

    ``data_dir`` goes to ``config.data.data_dir`` (or a top-level ``data_dir``) where the config has
    the field; ``dry_run`` sets ``config.dry_run = True`` and raises ``NotImplementedError`` when the
    module does not declare ``DRY_RUN = True`` or the config has no ``dry_run`` field (such an
    experiment would ignore the flag and run its full variant).
    """
    module, cfg_module = load(name)
    if dry_run and not getattr(module, "DRY_RUN", False):
        raise NotImplementedError(
            f"{name}: module {module.__name__} does not declare DRY_RUN = True (it does not "
            "honour config.dry_run), so a dry run would run its full variant."
        )
    config = cfg_module.get_config(variant)
    if seed is not None and "seed" in config:
        config.seed = seed
    if data_dir:
        if "data" in config and hasattr(config.data, "keys") and "data_dir" in config.data:
            config.data.data_dir = data_dir
        elif "data_dir" in config:
            config.data_dir = data_dir
    if dry_run:
        if "dry_run" not in config:
            raise NotImplementedError(f"{name}: its {variant!r} config has no `dry_run` field, so it cannot dry-run.")
        config.dry_run = True
    return config


def _checkpoint_dir(config, out_dir: pathlib.Path, *, fresh: bool) -> None:
    """Point ``train.checkpoint_dir`` at ``out_dir/checkpoints`` for a config that checkpoints its training
    (``train.checkpoint_every > 0``), and a top-level ``checkpoint_dir`` there for a config that stores the parts
    of its measurement (collapse_hessians: :mod:`experiments.stored_parts`); ``fresh`` (a forced or new run)
    removes old checkpoints there first, so only a resumed reproduce run continues from them."""
    trains = bool(config.get("train", {}).get("checkpoint_every", 0))
    if not trains and "checkpoint_dir" not in config:
        return
    path = out_dir / "checkpoints"
    if fresh and path.exists():
        shutil.rmtree(path)
    if trains:
        config.train.checkpoint_dir = str(path)
    if "checkpoint_dir" in config:
        config.checkpoint_dir = str(path)


def is_done(out_dir: pathlib.Path, config, code_digest: str | None = None) -> bool:
    """True when ``out_dir/results.json`` exists and was produced by ``config`` (and, where ``code_digest`` is
    given, by that code: a resumed run never reuses a result of code edited since)."""
    path = out_dir / "results.json"
    if not path.exists():
        return False
    try:
        stored = json.loads(path.read_text())
    except json.JSONDecodeError:
        return False
    if code_digest is not None and stored.get("code_digest") != code_digest:
        return False
    return json.dumps(stored.get("config"), sort_keys=True) == json.dumps(common.to_jsonable(config), sort_keys=True)


def run_one(
    name: str,
    variant: str,
    out_root: pathlib.Path,
    force: bool = False,
    seed: int | None = None,
    data_dir: str | None = None,
    dry_run: bool = False,
) -> dict:
    """Run (or reuse) one experiment; returns its results dict (see :func:`make_config` for the options)."""
    module, _ = load(name)
    config = make_config(name, variant, seed=seed, data_dir=data_dir, dry_run=dry_run)
    out_dir = pathlib.Path(out_root) / run_dir(name, variant)
    _checkpoint_dir(config, out_dir, fresh=force)
    if not force and is_done(out_dir, config, claims.code_digest(name)):
        return common.read_results(out_dir)
    results = common.run_experiment(module, config, out_dir, variant=variant)
    if dry_run and "dry_run" not in results.get("measurements", {}):
        raise RuntimeError(f"{name}: declares DRY_RUN but its measurements carry no `dry_run` timing record.")
    return results


class Stale(NamedTuple):
    """A stored result that no longer stands for the current code and registry (:func:`stale_runs`)."""

    name: str  #: the experiment
    run_dir: str  #: its directory under the output root (:func:`run_dir`)
    variant: str | None  #: the stored variant (``None``: nothing stored)
    seed: int | None  #: the stored seed (``None``: nothing stored, or a config without one)
    why: str  #: one line: what is stale


def _staleness(name: str, res: dict, current_digest: str, current_files: dict[str, str]) -> list[str]:
    """Why one stored results file is stale (empty: it is not)."""
    why = []
    stored = res.get("code_digest")
    if stored is None:
        why.append("no code digest stored (run before results carried one)")
    elif stored != current_digest:
        changed = claims.provenance.changed_files(res.get("code_files"), current_files)
        shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
        why.append(f"code digest {stored} != current {current_digest} (changed: {shown or 'unknown files'})")
    recs = res.get("claims") or []
    for rec in recs:
        cid = rec.get("id")
        if cid not in claims.CLAIMS:
            why.append(f"{cid!r} is not a registered claim")
        elif rec.get("rule_digest") != claims.rule_digest(cid):
            why.append(f"{cid} decided under rule {rec.get('rule_digest')}, registry has {claims.rule_digest(cid)}")
        elif rec.get("code_digest") not in (None, stored):
            why.append(f"{cid} carries code digest {rec.get('code_digest')}, its file {stored}")
    expected = [cid for cid, c in claims.CLAIMS.items() if name in c.experiments]
    module, cfg_module = load(name)
    measured = getattr(module, "measured_claims", None)  # a variant that measures some of them (paper_widths)
    if measured is not None and res.get("variant") in getattr(cfg_module, "VARIANTS", {}):
        keep = set(measured(cfg_module.get_config(res["variant"])))
        expected = [cid for cid in expected if cid in keep]
    missing = [cid for cid in expected if cid not in {r.get("id") for r in recs}]
    if missing:
        why.append(f"no record of {missing}")
    return list(dict.fromkeys(why))


def stale_runs(out_root, names=None, *, root=None) -> list[Stale]:
    """The stored results under ``out_root`` (experiments ``names``, default all, in suite order) that are stale:
    no ``results.json`` for the experiment at all, an unreadable one, a code digest that differs from the
    current code's (:func:`experiments.claims.code_digest` of the code under ``root``, default this
    repository) or is missing, a record whose rule digest differs from the registry's, or a registered
    claim of the experiment without a record. Every stored run directory counts (:func:`stored_dirs`); a missing
    experiment is one :class:`Stale` with ``variant`` ``None``."""
    out_root = pathlib.Path(out_root)
    out = []
    for name in NAMES:
        if names is not None and name not in names:
            continue
        dirs = stored_dirs(out_root, name)
        if not dirs:
            out.append(Stale(name, name, None, None, f"no stored results ({out_root / name / 'results.json'})"))
            continue
        files = claims.file_digests(name, root=root)
        digest = claims.code_digest(name, root=root)
        for d in dirs:
            try:
                res = common.read_results(d)
            except (OSError, ValueError) as err:
                out.append(Stale(name, d.name, None, None, f"{d / 'results.json'} unreadable ({err})"))
                continue
            why = _staleness(name, res, digest, files)
            if why:
                seed = res.get("seed", (res.get("config") or {}).get("seed"))
                out.append(Stale(name, d.name, res.get("variant"), seed, "; ".join(why)))
    return out


def jobs(names, variant: str, seed: int | None) -> tuple[list[tuple[str, str, int | None]], dict]:
    """The (experiment, variant, seed) runs ``--variant variant`` makes for ``names`` (:func:`variants_of`), and
    ``{name: why}`` of the experiments it skips (no such variant)."""
    out, skipped = [], {}
    for name in names:
        vs = variants_of(name, variant)
        if not vs:
            skipped[name] = f"skipped: experiments/configs/{name}.py defines no {variant!r} variant"
        out += [(name, v, seed) for v in vs]
    return out, skipped


def stale_jobs(
    out_root, names, variant: str, *, root=None
) -> tuple[list[tuple[str, str, int | None]], dict, list[Stale]]:
    """``reproduce --stale``: the (experiment, variant, seed) runs that replace the stale results under ``out_root``
    (:func:`stale_runs`; ``root``: whose code is current, default this repository), each at its stored variant and
    seed, a missing or unreadable one at ``variant`` (its config's seed); the skipped ones (:func:`jobs`); and the
    stale results themselves."""
    stale = stale_runs(out_root, names, root=root)
    out, skipped = [], {}
    for s in stale:
        if s.variant is not None:
            out.append((s.name, s.variant, s.seed))
            continue
        more, skip = jobs([s.name], variant, None)
        out += more
        skipped.update(skip)
    return list(dict.fromkeys(out)), skipped, stale


def stale_message(stale: list[Stale], out_root) -> str:
    """What a reader must do about ``stale`` (one line per run); empty when nothing is stale."""
    if not stale:
        return ""
    lines = [
        f"{len(stale)} stored result(s) under {out_root} do not come from the current code and registry "
        f"(stale: {sorted({s.run_dir for s in stale})}); rerun exactly those with "
        "`python -m experiments.reproduce --stale`:"
    ]
    lines += [f"  {s.run_dir}: {s.why}" for s in stale]
    return "\n".join(lines)
