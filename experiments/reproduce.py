"""Run every experiment of the suite and assemble ``REPORT.md``.

    python -m experiments.reproduce [--out DIR] [--only NAME[,NAME]] [--variant smoke|tiny|paper]
                                    [--force] [--report PATH]

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
#: File that marks an unfinished run in the output directory (its presence means "resume").
MARKER = ".reproduce_in_progress.json"


def load(name: str):
    """Import ``experiments.<name>`` and ``experiments.configs.<name>``."""
    if name not in NAMES:
        raise ValueError(f"Unknown experiment {name!r}; expected one of {NAMES}.")
    return importlib.import_module(f"experiments.{name}"), importlib.import_module(f"experiments.configs.{name}")


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


def run_one(name: str, variant: str, out_root: pathlib.Path, force: bool = False, seed: int | None = None) -> dict:
    """Run (or reuse) one experiment; returns its results dict."""
    module, cfg_module = load(name)
    config = cfg_module.get_config(variant)
    if seed is not None and "seed" in config:
        config.seed = seed
    out_dir = out_root / name
    if not force and is_done(out_dir, config):
        return common.read_results(out_dir)
    t0 = time.perf_counter()
    results = module.run(config, out_dir)
    results = dict(results)
    results["wall_time_s"] = time.perf_counter() - t0
    results["variant"] = variant
    common.write_results(out_dir, results, config)
    return common.read_results(out_dir)


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _cell(text: str) -> str:
    """Escape a markdown table cell (``|`` would end the cell; newlines would end the row)."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def headline_table(entries: list[tuple[str, str, dict]]) -> str:
    """The claim table: one row per experiment with its verdict and deciding numbers."""
    lines = ["| experiment | claim | verdict | deciding numbers (ours) | paper |", "|---|---|---|---|---|"]
    for name, label, res in entries:
        mod, _ = load(name)
        head = res.get("headline", {})
        nums = "; ".join(f"{k} = {_fmt(v)}" for k, v in list(head.items())[:6])
        paper = "; ".join(f"{k} = {_fmt(v)}" for k, v in res.get("paper", {}).items()) or "-"
        lines.append(f"| {_cell(label)} | {_cell(mod.CLAIM)} | **{res['verdict']}** | {_cell(nums)} | {_cell(paper)} |")
    return "\n".join(lines)


def assemble_report(out_root: pathlib.Path, report_path: pathlib.Path, command: str, names=None) -> str:
    """Write ``report_path`` from the stored results under ``out_root``."""
    entries, sections = [], []
    for name, label in EXPERIMENTS:
        if names is not None and name not in names:
            continue
        out_dir = out_root / name
        if not (out_dir / "results.json").exists():
            continue
        res = common.read_results(out_dir)
        mod, _ = load(name)
        entries.append((name, label, res))
        # Figures are linked relative to the report.
        rel = os.path.relpath(out_dir, report_path.parent)
        body = mod.report(res, rel)
        env = res.get("environment", {})
        sections.append(
            f"## {label}\n\n*Claim.* {mod.CLAIM}\n\n*Verdict:* **{res['verdict']}** — rule: {res['verdict_rule']}\n\n"
            f"{body}\n\n<sub>variant `{res.get('variant')}`, wall time {res.get('wall_time_s', float('nan')):.1f} s, "
            f"{env.get('backend')} ({env.get('device_kind')}), jax {env.get('versions', {}).get('jax')}; "
            f"results: `{rel}/results.json`</sub>\n"
        )
    date = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.reproduce", description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="results", help="output directory (default: results)")
    parser.add_argument("--only", default=None, help=f"comma-separated subset of {NAMES}")
    parser.add_argument("--variant", default="smoke", choices=["tiny", "smoke", "paper"])
    parser.add_argument("--force", action="store_true", help="rerun every experiment, even when resuming")
    parser.add_argument("--resume", action="store_true",
                        help="reuse stored results with the same config even if no interrupted run is marked")
    parser.add_argument("--seed", type=int, default=None, help="override every experiment's seed")
    parser.add_argument("--report", default=None, help="where to write the report (default: REPORT.md, or DIR/REPORT.md with --out)")
    args = parser.parse_args(argv)

    jax.config.update("jax_enable_x64", True)  # exact checks; training code states float32 explicitly
    names = NAMES if args.only is None else [n.strip() for n in args.only.split(",") if n.strip()]
    for n in names:
        if n not in NAMES:
            parser.error(f"--only: unknown experiment {n!r}; expected names from {NAMES}")
    out_root = pathlib.Path(args.out)
    out_root.mkdir(parents=True, exist_ok=True)
    report_path = pathlib.Path(args.report) if args.report else (
        pathlib.Path("REPORT.md") if args.out == "results" else out_root / "REPORT.md")

    from tqdm.auto import tqdm

    marker = out_root / MARKER
    resuming = (marker.exists() or args.resume) and not args.force
    if resuming and marker.exists():
        tqdm.write(f"resuming the interrupted run recorded in {marker}")
    marker.write_text(json.dumps({"variant": args.variant, "only": names, "seed": args.seed,
                                  "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}))
    failures = {}
    bar = tqdm(names, desc="reproduce", unit="exp")
    for name in bar:
        bar.set_postfix_str(name)
        try:
            res = run_one(name, args.variant, out_root, force=not resuming, seed=args.seed)
            tqdm.write(f"[{name}] {res['verdict']} ({res.get('wall_time_s', 0):.1f} s)")
        except Exception:  # keep going: one broken experiment must not lose the others' results
            failures[name] = traceback.format_exc()
            tqdm.write(f"[{name}] FAILED\n{failures[name]}")
    command = "python -m experiments.reproduce" + ("" if argv is None and len(sys.argv) <= 1 else " " + " ".join(sys.argv[1:] if argv is None else argv))
    assemble_report(out_root, report_path, command.strip())
    print(f"wrote {report_path}")
    if failures:  # the marker stays: the next run resumes and retries the failed experiments
        print(f"{len(failures)} experiment(s) failed: {sorted(failures)}", file=sys.stderr)
        return 1
    marker.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
