"""Run every experiment of the suite and assemble ``REPORT.md``.

    python -m experiments.reproduce [--out DIR] [--only NAME[,NAME]] [--variant smoke|tiny|paper]
                                    [--force] [--report PATH] [--data-dir DIR] [--dry-run]

``--variant paper --data-dir DIR`` runs the paper variants (the authors' recipes, for an
accelerator) with the prepared tfds data in ``DIR`` (set as ``data.data_dir`` in every config
that has that field). ``--variant paper --dry-run`` runs each paper variant end to end on the
current device with ``config.dry_run = True`` (the paper's models and image shapes, tfds mock or
generated data, a reduced batch, 2 steps per training phase plus every analysis step), prints the
measured step time and the projected wall time of the full variant, and writes its results under
``dry_run/<variant>/`` and a report marked as a dry run (``DIR/DRY_RUN.md``; never ``REPORT.md``).
``--variant paper`` runs every paper variant an experiment defines: ``paper`` in ``DIR/<name>/`` and each
sibling ``paper_*`` variant (the guillotine's ``paper_vit_tiny``, ``paper_cifar100``) in
``DIR/<name>-<variant>/`` (:func:`variants_of`, :func:`run_dir`).

Two experiment contracts are accepted while the suite is converted to the skeleton of
:mod:`experiments.common`: a module with ``measure``/``decide`` runs through
:func:`experiments.common.run_experiment`; an old module through its ``run(config, out_dir)``.
A dry run runs only modules that declare ``DRY_RUN = True`` (they honour ``config.dry_run``: reduced
batch, 2 steps per training phase, ``measurements["dry_run"]`` with ``step_time_s``,
``projected_wall_time_s`` and ``device``); any other experiment is listed as skipped, with the
reason, because running it would run its full paper variant.

Each experiment writes ``DIR/<name>/results.json`` and its figures. While a run is in
progress ``DIR/.reproduce_in_progress.json`` marks it; if the run is interrupted (or an
experiment fails) the marker stays, and the next ``reproduce`` on the same ``DIR`` resumes:
experiments whose stored config equals the requested one are not run again. Without a
marker (a finished run, or the results committed in the repository) every requested
experiment is computed afresh, so the numbers always come from the code being run.
``--resume`` reuses stored results even without a marker; ``--force`` never does.
``REPORT.md`` is assembled from
the stored results of every experiment (a claim table with verdicts first, then one
section per experiment) and names the command and date at its top.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import json
import os
import pathlib
import shutil
import sys
import time
import traceback

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import jax  # noqa: E402

from experiments import common  # noqa: E402

#: The suite, in report order: (module name under experiments/, short label).
EXPERIMENTS = [
    ("paper_data", "0. The paper's released results, re-analysed"),
    ("whitening", "1. Whitening (Thm 3.1)"),
    ("metric_adaptation", "2. Local metric adaptation and depth (Thm 3.2, Prop 3.3)"),
    ("collapse_hessians", "3. Collapse Hessians (Thm 4.1)"),
    ("collapse_escape", "4. Collapse escape dynamics"),
    ("hessian_tracker", "5. Hessian tracker parity"),
    ("guillotine", "6. Guillotine and information-invariance (Sec. 5)"),
    ("objectives", "7. Objectives"),
    ("minilm_geometry", "8. Foundation model: MiniLM (Sec. 5 on text)"),
    ("pretrained_orbits", "9. Foundation models: released vision checkpoints"),
]
NAMES = [n for n, _ in EXPERIMENTS]
#: Experiments whose ``paper`` variant lives in a module of its own (same name in configs/).
PAPER_MODULES = {"collapse_escape": "collapse_escape_paper"}
#: File that marks an unfinished run in the output directory (its presence means "resume").
MARKER = ".reproduce_in_progress.json"
#: Default output directory and report of a dry run (kept apart from results/ and REPORT.md).
DRY_RUN_DIR = "dry_run"


def is_paper_variant(variant: str | None) -> bool:
    """``paper`` and its named siblings (``paper_vit_tiny``, ``paper_cifar100``, ...)."""
    return variant is not None and (variant == "paper" or variant.startswith("paper_"))


def module_name(name: str, variant: str | None = None) -> str:
    """The module that runs experiment ``name`` in ``variant`` (see :data:`PAPER_MODULES`)."""
    if name not in NAMES:
        raise ValueError(f"Unknown experiment {name!r}; expected one of {NAMES}.")
    return PAPER_MODULES.get(name, name) if is_paper_variant(variant) else name


def variants_of(name: str, variant: str) -> list[str]:
    """The variants ``--variant VARIANT`` runs for ``name``: ``[variant]``, and for ``paper`` also every
    ``paper_*`` variant its config defines (e.g. the guillotine's ``paper_vit_tiny`` and ``paper_cifar100``)."""
    if variant != "paper":
        return [variant]
    _, cfg_module = load(name, variant)
    extra = [v for v in getattr(cfg_module, "VARIANTS", {}) if is_paper_variant(v) and v != "paper"]
    return ["paper", *extra]


def run_dir(name: str, variant: str) -> str:
    """Directory (under the output root) of ``name`` in ``variant``: ``name``, or ``name-paper_x`` for a sibling
    paper variant, so that the sibling runs never overwrite (or resume from) each other."""
    return f"{name}-{variant}" if is_paper_variant(variant) and variant != "paper" else name


def load(name: str, variant: str | None = None):
    """Import ``experiments.<module>`` and ``experiments.configs.<module>`` for ``name`` in ``variant``."""
    mod = module_name(name, variant)
    return importlib.import_module(f"experiments.{mod}"), importlib.import_module(f"experiments.configs.{mod}")


def on_skeleton(module) -> bool:
    """True when ``module`` follows the skeleton contract (``measure`` and ``decide``)."""
    return callable(getattr(module, "measure", None)) and callable(getattr(module, "decide", None))


def make_config(name: str, variant: str, *, seed: int | None = None, data_dir: str | None = None,
                dry_run: bool = False):
    """The config of ``name`` in ``variant`` with the command-line overrides applied.

    ``data_dir`` goes to ``config.data.data_dir`` (or a top-level ``data_dir``) where the config has
    the field; ``dry_run`` sets ``config.dry_run = True`` and raises ``NotImplementedError`` when the
    module does not declare ``DRY_RUN = True`` or the config has no ``dry_run`` field (such an
    experiment would ignore the flag and run its full variant).
    """
    module, cfg_module = load(name, variant)
    if dry_run and not getattr(module, "DRY_RUN", False):
        raise NotImplementedError(f"{name}: module {module.__name__} does not declare DRY_RUN = True (it does not "
                                  "honour config.dry_run yet), so a dry run would run its full variant.")
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
            raise NotImplementedError(f"{name}: its {variant!r} config has no `dry_run` field (experiment not on "
                                      "the skeleton of experiments/common.py yet), so it cannot dry-run.")
        config.dry_run = True
    return config


def _checkpoint_dir(config, out_dir: pathlib.Path, *, fresh: bool) -> None:
    """Point ``train.checkpoint_dir`` at ``out_dir/checkpoints`` for a config that checkpoints
    (``train.checkpoint_every > 0``); ``fresh`` (a forced or new run) removes old checkpoints there first,
    so only a resumed reproduce run continues from them."""
    if not config.get("train", {}).get("checkpoint_every", 0):
        return
    path = out_dir / "checkpoints"
    if fresh and path.exists():
        shutil.rmtree(path)
    config.train.checkpoint_dir = str(path)


def _config_json(config) -> str:
    return json.dumps(common.to_jsonable(config), sort_keys=True)


def is_done(out_dir: pathlib.Path, config) -> bool:
    """True when ``out_dir/results.json`` exists and was produced by ``config``."""
    path = out_dir / "results.json"
    if not path.exists():
        return False
    try:
        stored = json.loads(path.read_text())
    except json.JSONDecodeError:
        return False
    return json.dumps(stored.get("config"), sort_keys=True) == _config_json(config)


def run_one(name: str, variant: str, out_root: pathlib.Path, force: bool = False, seed: int | None = None,
            data_dir: str | None = None, dry_run: bool = False) -> dict:
    """Run (or reuse) one experiment; returns its results dict (see :func:`make_config` for the options)."""
    module, _ = load(name, variant)
    config = make_config(name, variant, seed=seed, data_dir=data_dir, dry_run=dry_run)
    out_dir = out_root / run_dir(name, variant)
    _checkpoint_dir(config, out_dir, fresh=force)
    if not force and is_done(out_dir, config):
        return common.read_results(out_dir)
    results = common.run_experiment(module, config, out_dir, variant=variant)
    if dry_run and "dry_run" not in results.get("measurements", {}):
        raise RuntimeError(f"{name}: declares DRY_RUN but its measurements carry no `dry_run` timing record.")
    return results


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _cell(text: str) -> str:
    """Escape a markdown table cell (``|`` would end the cell; newlines would end the row)."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def headline_table(entries: list[tuple[str, str, dict]]) -> str:
    """The claim table: one row per stored claim verdict (claim id, experiment, scale, verdict, numbers)."""
    from experiments import claims as _claims  # noqa: PLC0415

    lines = ["| claim | experiment | statement | scale | verdict | deciding numbers (ours) | paper |",
             "|---|---|---|---|---|---|---|"]
    for name, label, res in entries:
        paper = "; ".join(f"{k} = {_fmt(v)}" for k, v in res.get("paper", {}).items()) or "-"
        for rec in res.get("claims", []):
            stmt = _claims.CLAIMS[rec["id"]].statement if rec["id"] in _claims.CLAIMS else "(not in the registry)"
            subj = f" [{rec['subject']}]" if rec.get("subject") else ""
            nums = "; ".join(f"{k} = {_fmt(v)}" for k, v in list(rec.get("deciding", {}).items())[:6])
            lines.append(f"| `{rec['id']}`{_cell(subj)} | {_cell(label)} | {_cell(stmt)} | {rec['scale']} | "
                         f"**{_cell(_claims.label(rec))}** | {_cell(nums)} | {_cell(paper)} |")
    return "\n".join(lines)


def _verdicts(res: dict) -> str:
    """``id: verdict (scale)`` of every claim record of one results file, for progress lines and sections."""
    from experiments import claims as _claims  # noqa: PLC0415

    return "; ".join(f"{r['id']}{'[' + r['subject'] + ']' if r.get('subject') else ''}: {_claims.label(r)}"
                     for r in res.get("claims", []))


def dry_run_table(entries: list[tuple[str, str, dict]], skipped: dict | None = None) -> str:
    """The dry-run summary: measured step time and projected wall time of each full paper variant."""
    lines = ["| experiment | status | step time (s) | projected full run | device | dry-run wall time (s) |",
             "|---|---|---|---|---|---|"]
    for name, label, res in entries:
        d = res.get("measurements", {}).get("dry_run", {})
        proj = d.get("projected_wall_time_s", float("nan"))
        lines.append(f"| {_cell(label)} | ran | {_fmt(d.get('step_time_s', float('nan')))} | "
                     f"{_fmt(proj / 3600)} h | {_cell(d.get('device', '-'))} | {_fmt(res.get('wall_time_s', float('nan')))} |")
    for name, why in (skipped or {}).items():
        lines.append(f"| {_cell(name)} | {_cell(why)} | - | - | - | - |")
    return "\n".join(lines)


def _section(mod, res, label, out_dir, report_path, dry_run) -> str:
    """One experiment's report section (figures linked relative to the report)."""
    rel = os.path.relpath(out_dir, report_path.parent)
    body = mod.report(res, rel)
    env = res.get("environment", {})
    return (
        f"## {label}{' (DRY RUN)' if dry_run else ''}\n\n*Claim.* {mod.CLAIM}\n\n*Verdicts:* **{_verdicts(res)}**\n\n"
        f"{body}\n\n<sub>variant `{res.get('variant')}`, wall time {res.get('wall_time_s', float('nan')):.1f} s, "
        f"{env.get('backend')} ({env.get('device_kind')}), jax {env.get('versions', {}).get('jax')}; "
        f"results: `{rel}/results.json`</sub>\n"
    )


def assemble_report(out_root: pathlib.Path, report_path: pathlib.Path, command: str, names=None,
                    dry_run: bool = False, skipped: dict | None = None) -> str:
    """Write ``report_path`` from the stored results under ``out_root``.

    ``dry_run``: the report is marked as a dry run (its numbers come from 2-step runs on mock data
    and decide nothing) and starts with the projected wall times instead of the claim table.
    """
    entries, sections = [], []
    for name, label in EXPERIMENTS:
        if names is not None and name not in names:
            continue
        for out_dir in [out_root / name, *sorted(out_root.glob(f"{name}-paper_*"))]:
            if not (out_dir / "results.json").exists():
                continue
            res = common.read_results(out_dir)
            mod, _ = load(name, res.get("variant"))
            label_v = label if out_dir.name == name else f"{label} [{res.get('variant')}]"
            entries.append((name, label_v, res))
            sections.append(_section(mod, res, label_v, out_dir, report_path, dry_run))
    date = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    if dry_run:
        text = (
            "# DRY RUN of the paper variants (not results)\n\n"
            f"Generated by `{command}` on {date}. Each paper variant ran end to end with `config.dry_run = True`: "
            "the paper's models and image shapes, mock or generated data, a reduced batch, 2 steps per training "
            "phase and every analysis step. Its verdicts and numbers decide nothing; what it shows is that every "
            "paper path executes, and how long the full variant would take on this device (projected from the "
            "measured step time, cost taken as linear in the batch size).\n\n"
            "## Projected wall time of each full paper variant\n\n" + dry_run_table(entries, skipped) + "\n\n"
            + "\n".join(sections))
    else:
        text = (
            "# REPORT: the geometry of projection heads, checked by computation\n\n"
            f"Generated by `{command}` on {date} from the committed code. Every number below comes from "
            "that run; rerunning the command regenerates this file.\n\n"
            "Verdicts: *supported* (the computation shows what the claim says, with its premises met), "
            "*not supported* (premises met, outcome contradicts the claim), *premise violated* (the setting "
            "does not meet the theorem's premises, so it says nothing there; what happened is reported), "
            "*inconclusive* (the numbers do not decide it at this scale).\n\n"
            "## Claims and verdicts\n\n" + headline_table(entries) + "\n\n" + "\n".join(sections)
        )
    report_path.write_text(text)
    return text


def _parse(argv):
    parser = argparse.ArgumentParser(prog="python -m experiments.reproduce", description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=None, help=f"output directory (default: results, or {DRY_RUN_DIR}/<variant> "
                                                    "with --dry-run)")
    parser.add_argument("--only", default=None, help=f"comma-separated subset of {NAMES}")
    parser.add_argument("--variant", default="smoke", choices=["tiny", "smoke", "paper"])
    parser.add_argument("--force", action="store_true", help="rerun every experiment, even when resuming")
    parser.add_argument("--resume", action="store_true",
                        help="reuse stored results with the same config even if no interrupted run is marked")
    parser.add_argument("--seed", type=int, default=None, help="override every experiment's seed")
    parser.add_argument("--data-dir", default=None, help="tfds data directory, set as data.data_dir in every config "
                                                         "that has the field (the paper variants read CIFAR from it)")
    parser.add_argument("--dry-run", action="store_true",
                        help="run each experiment end to end with config.dry_run = True (reduced batch, 2 steps per "
                             "training phase, mock data) and project the full variant's wall time")
    parser.add_argument("--report", default=None, help="where to write the report (default: REPORT.md, DIR/REPORT.md "
                                                        "with --out, DIR/DRY_RUN.md with --dry-run)")
    args = parser.parse_args(argv)
    names = NAMES if args.only is None else [n.strip() for n in args.only.split(",") if n.strip()]
    for n in names:
        if n not in NAMES:
            parser.error(f"--only: unknown experiment {n!r}; expected names from {NAMES}")
    return args, names


def _paths(args):
    if args.dry_run:
        out_root = pathlib.Path(args.out or pathlib.Path(DRY_RUN_DIR) / args.variant)
        report_path = pathlib.Path(args.report) if args.report else out_root / "DRY_RUN.md"
        if report_path.resolve() == pathlib.Path("REPORT.md").resolve():
            raise SystemExit("--dry-run never writes REPORT.md; choose another --report.")
        return out_root, report_path
    out_root = pathlib.Path(args.out or "results")
    report_path = pathlib.Path(args.report) if args.report else (
        pathlib.Path("REPORT.md") if args.out in (None, "results") else out_root / "REPORT.md")
    return out_root, report_path


def _dry_line(name: str, res: dict) -> str:
    d = res.get("measurements", {}).get("dry_run")
    if not d:
        return f"[{name}] dry run finished but reported no dry_run timing"
    return (f"[{name}] dry run: step {d.get('step_time_s', float('nan')):.3g} s; projected full variant "
            f"{d.get('projected_wall_time_s', float('nan')) / 3600:.3g} h on {d.get('device')}")


def main(argv=None) -> int:
    args, names = _parse(argv)
    jax.config.update("jax_enable_x64", True)  # exact checks; training code states float32 explicitly
    out_root, report_path = _paths(args)
    out_root.mkdir(parents=True, exist_ok=True)

    from tqdm.auto import tqdm

    marker = out_root / MARKER
    resuming = (marker.exists() or args.resume) and not args.force
    if resuming and marker.exists():
        tqdm.write(f"resuming the interrupted run recorded in {marker}")
    marker.write_text(json.dumps({"variant": args.variant, "only": names, "seed": args.seed,
                                  "dry_run": args.dry_run, "data_dir": args.data_dir,
                                  "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}))
    failures, skipped = {}, {}
    jobs = [(name, v) for name in names for v in variants_of(name, args.variant)]
    bar = tqdm(jobs, desc="reproduce" + (" --dry-run" if args.dry_run else ""), unit="run")
    for name, variant in bar:
        tag = run_dir(name, variant)
        bar.set_postfix_str(tag)
        try:
            res = run_one(name, variant, out_root, force=not resuming, seed=args.seed, data_dir=args.data_dir,
                          dry_run=args.dry_run)
            if args.dry_run:  # 2 steps on mock data: the verdict decides nothing, the timing is the result
                tqdm.write(f"{_dry_line(tag, res)} (dry run took {res.get('wall_time_s', 0):.1f} s)")
            else:
                tqdm.write(f"[{tag}] {_verdicts(res)} ({res.get('wall_time_s', 0):.1f} s)")
        except NotImplementedError as err:  # dry run of an experiment not on the skeleton yet
            skipped[tag] = f"skipped: {err}"
            tqdm.write(f"[{tag}] {skipped[tag]}")
        except Exception:  # keep going: one broken experiment must not lose the others' results
            failures[tag] = traceback.format_exc()
            tqdm.write(f"[{tag}] FAILED\n{failures[tag]}")
    command = "python -m experiments.reproduce" + ("" if argv is None and len(sys.argv) <= 1 else " " + " ".join(sys.argv[1:] if argv is None else argv))
    assemble_report(out_root, report_path, command.strip(), names=names if args.dry_run else None,
                    dry_run=args.dry_run, skipped=skipped)
    print(f"wrote {report_path}")
    if skipped:
        print(f"{len(skipped)} experiment(s) skipped (no dry-run support yet): {sorted(skipped)}", file=sys.stderr)
    if failures:  # the marker stays: the next run resumes and retries the failed experiments
        print(f"{len(failures)} experiment(s) failed: {sorted(failures)}", file=sys.stderr)
        return 1
    marker.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
