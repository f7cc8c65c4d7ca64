"""Benchmark: extreme eigenvalues of hess_{z1} L for the paper's SimSiam heads, Lanczos vs the paper's estimator.

Two problems (``experiments/benchmarks/hessian_problems.py``; the setting is the paper's Hessian tracker,
docs/theory.md, section "The authors' experiments"), both at the paper's sizes by default
(batch 256 of d = 512 backbone features, projector 512 -> 2048 -> 2048, predictor 2048 -> 512 ->
2048, bias-free Swish, projector weights x 0.1): a 131072-dimensional Hessian.

* ``blockwise`` -- the heads without BatchNorm, as the authors' Hessian tracker runs them: the
  Hessian is block-diagonal (256 blocks of 512; ``curvature.block_coupling`` = 0). ``ours``:
  ``curvature.blockwise_extreme_eigenvalues`` (``target="union"``) on the linearised HVP; also
  ``curvature.hessian_extremes``, which measures the coupling first and picks the same solver.
* ``coupled`` -- the authors' ``ProjectionHead(use_bn=True)`` in train mode, as six settings of
  their collapse-dynamics ablation train it, ``z2 = z1 + 0.1 noise``: BatchNorm couples the batch,
  the Hessian is dense. ``ours``: the library's recommended path, ``curvature.hessian_extremes``
  (linearisation, coupling probes, full Lanczos), float32, stopping when the eigenvalue error bound
  ``min(r, r^2 / delta)`` (``--error-bound gap``, Kato-Temple) or the residual ``r`` (``residual``) is
  ``<= --tol`` relative to ``max|theta|``.

The baseline is the paper's 20-step shifted power iteration (``get_min_eigenvalue_hvp`` of the
authors' ``hessian_tracker.py``, 42 double-backward HVPs) in PyTorch, float32, on the same
weights and point, on the device JAX runs on (``--torch-device auto``: the GPU when JAX has one);
float32 products are full precision on both sides (TF32 off). The implementations run side by side in one process, interleaved
(``experiments.benchmarks.harness``: A B A B ... over ``--repeats`` rounds; the time ratio is the
median and spread of the per-round ratios). Accuracy is against a float64 reference: for
``blockwise`` the exact blocks (``--reference exact``) or float64 blockwise Lanczos at tol 1e-10;
for ``coupled`` float64 full Lanczos at tol 1e-10 (``hessian_extremes``). Beside each total: the
HVP count, the time of one HVP (timed alone, interleaved), the set-up (linearisation / gradient
graph) and the overhead ``wall - HVPs x s/HVP - set-up``.

Criteria: ``blockwise`` ratio <= 0.25, ``coupled`` ratio <= 0.5 (goal 0.25), relative error
<= 1e-4 on both ends, right signs, float32.

Usage::

    python -m experiments.bench_hessian                                  # both tables, paper sizes (quiet machine)
    python -m experiments.bench_hessian --small --problem coupled --out ''   # quick check, writes nothing
    python -m experiments.bench_hessian --repeats 7 --warmup 2 --out docs/bench_hessian_h200.md   # on a GPU machine
    python -m experiments.bench_hessian --convergence 6    # and how far the certified stop is from the oracle

On an accelerator the Lanczos steps between two checks run as one device loop
(``lanczos_core.advance``), so the time is the products' plus the checks', not one host dispatch a step.
"""
from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# float32 products at full precision on every backend (a GPU's default would be TF32, whose ~1e-3 relative error
# per product is far from the criterion's 1e-4; PyTorch's side turns TF32 off too); recorded in the table's header
os.environ.setdefault("JAX_DEFAULT_MATMUL_PRECISION", "highest")

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp
import numpy as np

from experiments.benchmarks import harness
from experiments.benchmarks.hessian_problems import PAPER, SMALL, Problem, TorchPaper, torch_device
from experiments.common import markdown_table
from ssl_geometry import curvature as cv

CRITERIA = {"blockwise": 0.25, "coupled": 0.5}  # the largest admissible time ratio ours / paper
GOAL = {"coupled": 0.25}


# ----------------------------------------------------------------------------- the solvers


def ours(pb: Problem, tol=1e-4, check_every=10, dtype=jnp.float32, target="union"):
    """Blockwise Lanczos on the linearised HVP: ``(lambda_min, lambda_max, LanczosResult)``.

    ``target="union"`` stops once the union's extremes (the Hessian's lambda_min and lambda_max)
    are resolved to ``tol``; ``"blocks"`` resolves every block's.
    """
    r = cv.blockwise_extreme_eigenvalues(cv.apply_linear, pb.batch, pb.dim, args=(pb.linearized(dtype),),
                                         dtype=dtype, target=target, key=jax.random.PRNGKey(pb.seed),
                                         options=cv.SolverOptions(num_steps=pb.dim, tol=tol, check_every=check_every))
    return float(r.smallest[:, 0].min()), float(r.largest[:, 0].max()), r


def recommended(pb: Problem, tol=1e-4, dtype=jnp.float32, num_steps=None, error_bound="gap"):
    """``curvature.hessian_extremes`` from the loss: ``(lambda_min, lambda_max, HessianExtremes)``.

    ``error_bound="gap"`` (the recommended setting when only eigenvalues are wanted) stops when the
    Kato-Temple bound ``min(r, r^2 / delta)`` on each end's eigenvalue error is ``<= tol max|theta|``;
    ``"residual"`` when the residual ``r`` is.
    """
    x, *args = pb.args(dtype)
    r = cv.hessian_extremes(pb.loss, x, args=tuple(args), key=jax.random.PRNGKey(pb.seed),
                            options=cv.SolverOptions(tol=tol, num_steps=num_steps, error_bound=error_bound))
    return float(r.smallest[0]), float(r.largest[0]), r


def reference(pb: Problem, method="exact", probe_chunk=16):
    """Float64 ``(lambda_min, lambda_max, description)``: exact blocks, or Lanczos to tol 1e-10."""
    if method == "exact" and not pb.batch_norm:
        blocks = jax.jit(lambda z1, p, z2: cv.block_diagonal_hessian(pb.loss, z1, args=(p, z2), chunk_size=probe_chunk))
        ev = np.linalg.eigvalsh(np.asarray(blocks(*pb.args(jnp.float64))))
        return float(ev[:, 0].min()), float(ev[:, -1].max()), f"exact block Hessian ({pb.dim} probing HVPs) + eigvalsh, float64"
    if method == "lanczos" and not pb.batch_norm:
        lo, hi, r = ours(pb, tol=1e-10, dtype=jnp.float64, target="blocks")
        steps, what = r.num_steps, "blockwise Lanczos"
    elif method == "lanczos":
        lo, hi, h = recommended(pb, tol=1e-10, dtype=jnp.float64, num_steps=min(pb.batch * pb.dim, 400),
                                error_bound="residual")
        r, steps, what = h.lanczos, h.num_steps, f"full Lanczos ({h.method})"
    else:
        raise ValueError(f"`method` must be 'exact' (blockwise problem only) or 'lanczos'; got {method!r}.")
    if not r.converged:
        raise RuntimeError(f"the float64 {what} reference did not converge to 1e-10 in {steps} steps")
    return lo, hi, f"{what}, float64, tol 1e-10 ({steps} HVPs, converged)"


def steps_to_tol(pb: Problem, ref, *, starts=6, tol=1e-4, dtype=jnp.float32, budget=200) -> list[dict]:
    """How far a certified stop is from the best possible one: full Lanczos on ``pb``'s Hessian from ``starts``
    random start vectors, and for each the first step at which

    * ``oracle``: the relative error of both ends against the float64 reference ``ref = (lambda_min, lambda_max)``
      is ``<= tol`` (what no solver can know; found by bisection over runs of a fixed number of steps: the
      extreme Ritz values of one start vector only move towards the extremes as steps are added);
    * ``gap``: the error bound ``min(r, r^2 / delta)`` of both ends is ``<= tol max|theta|`` (checked every step);
    * ``residual``: the residual ``r`` of both ends is.

    ``hessian_extremes`` with ``error_bound="gap"`` stops at ``gap`` (give or take its check schedule); any method
    with a certificate stops no earlier than ``oracle``, so ``oracle`` products at the measured cost per product
    bound what any such Krylov run on one start vector can reach.
    """
    if int(starts) < 1:
        raise ValueError(f"`starts` must be a number of start vectors >= 1; got {starts!r}.")
    z1 = pb.args(dtype)[0]
    lin, size, mv = pb.linearized(dtype), int(z1.size), cv.LinearMatvec(z1.shape)
    budget, rows = min(budget, size), []   # the Krylov space has at most `size` dimensions
    for s in range(starts):
        v0 = jax.random.normal(jax.random.PRNGKey(1000 + s), (size,), dtype)

        def run(v0=v0, **kw):
            options = cv.SolverOptions(tol=tol, check_every=1, **kw)
            return cv.extreme_eigenvalues(mv, size, args=(lin,), v0=v0, dtype=dtype, options=options)

        def within(j):
            r = run(num_steps=j, early_stop=False)
            e = _errors(float(r.smallest[0]), float(r.largest[0]), *ref)
            return max(e["rel_err_min"], e["rel_err_max"]) <= tol

        gap, res = run(error_bound="gap", num_steps=budget), run(error_bound="residual", num_steps=budget)
        if not (gap.converged and res.converged):
            raise RuntimeError(f"steps_to_tol: start vector {s} did not meet tol = {tol:g} in {budget} steps")
        lo, hi = 1, gap.num_steps   # the gap bound holds there, relative to max|theta|: within tol of both ends
        while not within(hi):       # unless one end is far smaller than the other: search on
            if hi >= budget:
                raise RuntimeError(f"steps_to_tol: start vector {s} is not within tol = {tol:g} in {budget} steps")
            lo, hi = hi + 1, min(budget, hi + max(1, hi // 4))
        while lo < hi:  # the first step within tol
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if within(mid) else (mid + 1, hi)
        rows.append({"start": s, "oracle": lo, "gap": gap.num_steps, "residual": res.num_steps})
    return rows


def convergence_report(rows, m: dict) -> str:
    """The :func:`steps_to_tol` table, and the time ratio each stop would give at the run's measured unit costs."""
    paper, ours = m["paper"], m["recommended"]
    extra = ours["hvps"] - ours["lanczos_steps"]  # probes
    ratio = lambda k: ((k + extra) * ours["hvp_s"] + ours["setup_s"]) / paper["wall_s_median"]
    table = markdown_table([{**r, **{f"ratio at {k}": f"{ratio(r[k]):.2f}" for k in ("oracle", "gap")}} for r in rows])
    med = {k: float(np.median([r[k] for r in rows])) for k in ("oracle", "gap", "residual")}
    return (f"Steps to tol {m['setting']['tol']:g} of full float32 Lanczos from {len(rows)} start vectors "
            f"(`steps_to_tol`): the first step where the true relative error of both ends is within tol (oracle, "
            f"known only from the reference), where the gap bound is, where the residual is. `ratio at k`: the time "
            f"ratio to the paper's a stop at k would give at this run's measured costs, (k + {extra} probe(s)) x "
            f"{ours['hvp_s']:.3g} s/HVP + {ours['setup_s']:.3g} s set-up, over {paper['wall_s_median']:.3g} s. "
            f"Medians: oracle {med['oracle']:g}, gap {med['gap']:g}, residual {med['residual']:g}.\n\n{table}\n")


# ----------------------------------------------------------------------------- the run


def _errors(lo, hi, ref_lo, ref_hi):
    return {"rel_err_min": abs(lo - ref_lo) / abs(ref_lo), "rel_err_max": abs(hi - ref_hi) / abs(ref_hi),
            "signs_ok": bool(np.sign(lo) == np.sign(ref_lo) and np.sign(hi) == np.sign(ref_hi))}


def unit_costs(pb: Problem, paper: TorchPaper, repeats=5) -> dict:
    """Median seconds of one HVP and of the set-up on each side, timed alone and interleaved."""
    lin = pb.linearized(jnp.float32)
    jhvp = jax.jit(cv.apply_linear)
    V = jnp.ones_like(pb.z1_32)
    thvp, tv = paper.hvp_fn(), paper.torch.ones_like(paper.z1)
    t = harness.interleave({"jax_hvp": lambda: jhvp(V, lin), "torch_hvp": lambda: thvp(tv),
                            "jax_linearize": lambda: pb.linearized(jnp.float32), "torch_grad_graph": paper.grad_graph},
                           repeats=repeats, warmup=1)
    return {k: float(np.median(v)) for k, v in t.items()}


def _side(value, times, hvps, hvp_s, setup_s, ref, **extra) -> dict:
    wall = float(np.median(times))
    return {"lambda_min": value[0], "lambda_max": value[1], **_errors(*value, *ref), "wall_s_median": wall,
            "times": times, "hvps": int(hvps), "hvp_s": hvp_s, "setup_s": setup_s,
            "overhead_s": wall - hvps * hvp_s - setup_s, **extra}


def measure(pb: Problem, *, tol=1e-4, steps=20, repeats=5, warmup=1, reference_method="exact",
            hvp_repeats=5, threads=None, error_bound="gap", device="cpu") -> dict:
    """One interleaved run of the paper's estimator and ours on ``pb``: timings, accuracy, criteria (numbers)."""
    problem = "coupled" if pb.batch_norm else "blockwise"
    t0 = time.perf_counter()
    ref_lo, ref_hi, ref_desc = reference(pb, "lanczos" if pb.batch_norm else reference_method)
    ref_s = time.perf_counter() - t0
    paper = TorchPaper(pb, steps, threads, device)
    impls = {"paper": paper, "recommended": lambda: recommended(pb, tol, error_bound=error_bound)}
    if not pb.batch_norm:
        impls["ours"] = lambda: ours(pb, tol)
    out: dict = {}
    times = harness.interleave(impls, repeats=repeats, warmup=warmup, results=out)
    unit = unit_costs(pb, paper, hvp_repeats)
    ref = (ref_lo, ref_hi)
    rec = out["recommended"][2]
    sides = {"paper": _side(out["paper"], times["paper"], paper.num_hvps, unit["torch_hvp"], unit["torch_grad_graph"], ref),
             "recommended": _side(out["recommended"][:2], times["recommended"], rec.num_hvps, unit["jax_hvp"],
                                  unit["jax_linearize"], ref, method=rec.method, coupling=rec.coupling,
                                  lanczos_steps=rec.num_steps, converged=rec.converged, error_bound=error_bound)}
    if "ours" in out:
        r = out["ours"][2]
        sides["ours"] = _side(out["ours"][:2], times["ours"], r.num_steps, unit["jax_hvp"], unit["jax_linearize"], ref,
                              lanczos_steps=r.num_steps, converged=r.converged, checks=r.num_checks)
    ratios = {k: harness.ratio_stats(times[k], times["paper"]) for k in sides if k != "paper"}
    main = "recommended" if pb.batch_norm else "ours"
    m, c = sides[main], ratios[main]
    return {
        "problem": problem, **sides, "ratio": ratios, "unit_costs": unit,
        "setting": {"batch": pb.batch, "dim": pb.dim, "variables": pb.batch * pb.dim, "tol": tol, "power_steps": steps,
                    "batch_norm": pb.batch_norm, "jax_backend": jax.default_backend(), "torch_device": device},
        "block_coupling": rec.coupling,
        "reference": {"lambda_min": ref_lo, "lambda_max": ref_hi, "method": ref_desc, "wall_s": ref_s},
        "criteria": {"solver": main, f"ratio_le_{CRITERIA[problem]}": c["median"] <= CRITERIA[problem],
                     **({f"goal_ratio_le_{GOAL[problem]}": c["median"] <= GOAL[problem]} if problem in GOAL else {}),
                     "rel_err_le_1e-4": m["rel_err_min"] <= 1e-4 and m["rel_err_max"] <= 1e-4,
                     "signs_ok": m["signs_ok"], "float32": True},
    }


_LABELS = {
    "paper": "the paper's {steps}-step power iteration, PyTorch float32 ({hvps} HVPs)",
    "ours": "blockwise Lanczos (target union), linearised HVP, float32, tol {tol:g}",
    "recommended": "curvature.hessian_extremes ({method} Lanczos, error bound {error_bound}), float32, tol {tol:g}",
}


def report(m: dict, repeats: int) -> str:
    """The table of one problem: method, values, errors, signs, work, unit costs, time, ratio."""
    s, ref = m["setting"], m["reference"]
    rows = []
    for key in ("paper", "ours", "recommended"):
        if key not in m:
            continue
        r = m[key]
        st = m["ratio"].get(key)
        rows.append({"method": _LABELS[key].format(steps=s["power_steps"], hvps=r["hvps"], tol=s["tol"],
                                                   method=r.get("method", ""),
                                                   error_bound=r.get("error_bound", "residual")),
                     "lambda_min": r["lambda_min"], "lambda_max": r["lambda_max"], "rel_err_min": r["rel_err_min"],
                     "rel_err_max": r["rel_err_max"], "signs": "ok" if r["signs_ok"] else "**wrong**",
                     "work (HVPs)": r["hvps"], "s / HVP": r["hvp_s"], "setup_s": r["setup_s"],
                     "overhead_s": r["overhead_s"], "time (median s)": r["wall_s_median"],
                     "ratio": "1.00" if st is None else f"{st['median']:.3g} ({st['q25']:.3g}-{st['q75']:.3g})"})
    rows.append({"method": f"reference: {ref['method']}", "lambda_min": ref["lambda_min"], "lambda_max": ref["lambda_max"],
                 "rel_err_min": 0.0, "rel_err_max": 0.0, "signs": "ok", "work (HVPs)": "-", "s / HVP": "-",
                 "setup_s": "-", "overhead_s": "-", "time (median s)": ref["wall_s"], "ratio": "-"})
    c = m["criteria"]
    crit = "; ".join(f"{k}: **{v}**" for k, v in c.items() if k != "solver")
    bn = "BatchNorm in train mode (the Hessian couples the batch)" if s["batch_norm"] else "no BatchNorm (block-diagonal)"
    return (f"Problem `{m['problem']}`: batch {s['batch']}, d = {s['dim']} ({s['variables']} variables), {bn}; "
            f"measured block coupling {m['block_coupling']}. JAX on {s['jax_backend']}, PyTorch on "
            f"{s['torch_device']}. Timings: median of {repeats} interleaved rounds after "
            f"warm-up (ours includes the linearisation and, for hessian_extremes, the coupling probes; the paper "
            f"includes building the gradient graph). `setup_s`: linearisation / gradient graph alone; `overhead_s` = "
            f"time - HVPs x s/HVP - setup_s. Ratio: per-round time / the paper's, median (quartiles).\n\n"
            f"{markdown_table(rows, list(rows[0]), floatfmt='.4g')}\n\nCriteria for `{c['solver']}`: {crit}.\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for k, v in PAPER.items():
        ap.add_argument(f"--{k}", type=type(v), default=v)
    ap.add_argument("--problem", choices=("blockwise", "coupled", "both"), default="both")
    ap.add_argument("--steps", type=int, default=20, help="power-iteration steps of the baseline")
    ap.add_argument("--tol", type=float, default=1e-4, help="relative tolerance of the Lanczos runs")
    ap.add_argument("--error-bound", choices=("gap", "residual"), default="gap",
                    help="what hessian_extremes stops on: the eigenvalue error bound min(r, r^2/delta), or r")
    ap.add_argument("--reference", choices=("exact", "lanczos"), default="exact", help="blockwise problem's reference")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--small", action="store_true", help="batch 16, dim 32, width 64, bottleneck 16")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    ap.add_argument("--torch-device", choices=("auto", "cpu", "cuda"), default="auto",
                    help="where the PyTorch baseline runs (auto: cuda when JAX runs on a GPU, else cpu)")
    ap.add_argument("--hvp-repeats", type=int, default=5)
    ap.add_argument("--convergence", type=int, default=0, metavar="N",
                    help="coupled problem: also the steps to tol from N start vectors (oracle, gap bound, residual)")
    ap.add_argument("--out", default="docs/bench_hessian.md", help="markdown file to write ('' to skip)")
    ap.add_argument("--json", default=None, help="also write the measurements here")
    harness.add_arguments(ap, repeats=5, warmup=1)
    args = ap.parse_args(argv)
    if args.convergence < 0:
        ap.error(f"--convergence: expected a number of start vectors >= 0, got {args.convergence}")
    if args.small:
        for k, v in SMALL.items():
            setattr(args, k, v)
    device = torch_device(args.torch_device)
    load0, cpu0 = harness.load_average(), harness.cpu_sample()
    problems = ("blockwise", "coupled") if args.problem == "both" else (args.problem,)
    results, bodies = {}, []
    for name in problems:
        pb = Problem(args.batch, args.dim, args.width, args.bottleneck, args.activation, args.scale, args.seed,
                     batch_norm=name == "coupled", view_noise=0.1 if name == "coupled" else None)
        results[name] = measure(pb, tol=args.tol, steps=args.steps, repeats=args.repeats, warmup=args.warmup,
                                reference_method=args.reference, hvp_repeats=args.hvp_repeats, threads=args.threads,
                                error_bound=args.error_bound, device=device)
        bodies.append(report(results[name], args.repeats))
        if name == "coupled" and args.convergence:
            m = results[name]
            rows = steps_to_tol(pb, (m["reference"]["lambda_min"], m["reference"]["lambda_max"]),
                                starts=args.convergence, tol=args.tol)
            m["steps_to_tol"] = rows
            bodies.append(convergence_report(rows, m))
    results["load"] = {"before": load0, "after": harness.load_average(),
                       "other_cpu_share": harness.other_cpu_share(cpu0)}
    body = "\n".join(bodies)
    print(body)
    if args.json:
        import json

        with open(args.json, "w") as f:
            json.dump(results, f, indent=2, default=float)
    if args.out:
        harness.write_table(args.out, "Benchmark: extreme eigenvalues of hess_z1 L (SimSiam, pseudo-collapse)", body,
                            command=harness.command_line("experiments.bench_hessian", argv),
                            load_before=load0, load_after=results["load"]["after"],
                            other_share=results["load"]["other_cpu_share"], threshold=args.load_threshold,
                            force=args.force)
        print(f"wrote {args.out}")
    return results


if __name__ == "__main__":
    main()
