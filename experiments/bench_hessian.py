"""Benchmark: extreme eigenvalues of hess_{z1} L for the paper's SimSiam setting, Lanczos vs the paper.

Setting (the paper's Hessian tracker, docs/theory.md, section "The authors' experiments"):
batch 256 of d = 512 backbone features
``z1, z2`` (two views; i.i.d. standard normal stand-ins, since the Hessian in ``z1`` only needs
the head and the point), projector 512 -> 2048 -> 2048 and predictor 2048 -> 512 -> 2048,
bias-free, Swish, no BatchNorm, pseudo-collapsed (projector weights x 0.1 via
``heads.scale_weights``), loss ``losses.simsiam`` (symmetric negative cosine with stop-gradient)
as a function of ``z1``: a 131072-dimensional Hessian, block-diagonal with 256 blocks of 512
(a mean of per-sample terms; verified numerically with ``curvature.block_coupling``).

Side by side in one run, interleaved (``experiments.benchmarks.harness``: A B A B ... over
``--repeats`` rounds, median and spread of the per-round time ratio):

* ``ours``: ``curvature.blockwise_extreme_eigenvalues`` in float32 on the HVP linearised once
  at the point (``curvature.linearized_hvp``: one forward/backward, then only the tangent map
  per product), stopping at relative residual ``--tol`` (1e-4); the linearisation is timed as
  part of the run.
* ``paper``: the paper's 20-step shifted power iteration written in PyTorch (double-backward
  HVP with the gradient graph built once per run, float32).

Accuracy against a float64 reference: the exact block Hessian (``--reference exact``:
``block_diagonal_hessian``, d probing HVPs, then ``eigvalsh``) or blockwise Lanczos in float64
at tol 1e-10 (``--reference lanczos``, much cheaper). The criteria: ratio <= 0.5,
relative error <= 1e-4 on both ends, right signs. Beside the totals: HVP counts and the time of
one HVP of each side (timed alone, interleaved), so the solver overhead is visible.

Usage::

    python -m experiments.bench_hessian                       # paper sizes (quiet machine)
    python -m experiments.bench_hessian --small --out ''      # quick check, writes nothing
"""
from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from experiments.benchmarks import harness  # noqa: E402
from experiments.common import markdown_table  # noqa: E402
from ssl_geometry import curvature as cv  # noqa: E402
from ssl_geometry import heads, losses  # noqa: E402

PAPER = dict(batch=256, dim=512, width=2048, bottleneck=512, activation="swish", scale=0.1)
SMALL = dict(batch=16, dim=32, width=64, bottleneck=16)


# ----------------------------------------------------------------------------- the objective (JAX)


def build(batch, dim, width, bottleneck, activation="swish", scale=0.1, seed=0):
    """``(loss(z1, params, z2), params, z1, z2)`` in float64 (cast for float32 runs)."""
    proj = heads.simsiam_projector(dim, width, activation=activation, batch_norm=False, dtype=jnp.float64)
    pred = heads.simsiam_predictor(width, bottleneck, activation=activation, batch_norm=False, dtype=jnp.float64)
    kp, kq, k1, k2 = jax.random.split(jax.random.PRNGKey(seed), 4)
    vp = heads.scale_weights(proj.init(kp), scale)  # pseudo-collapse
    vq = pred.init(kq)
    params = {"proj": vp["params"], "pred": vq["params"]}
    z1 = jax.random.normal(k1, (batch, dim), jnp.float64)
    z2 = jax.random.normal(k2, (batch, dim), jnp.float64)

    def loss(z1, params, z2):
        h1, _ = proj.apply({"params": params["proj"]}, z1)
        h2, _ = proj.apply({"params": params["proj"]}, z2)
        p1, _ = pred.apply({"params": params["pred"]}, h1)
        p2, _ = pred.apply({"params": params["pred"]}, h2)
        return losses.simsiam(p1, p2, h1, h2)

    return loss, params, z1, z2


def _cast(tree, dtype):
    return jax.tree_util.tree_map(lambda x: x.astype(dtype), tree)


class Problem:
    """The benchmark's problem in float64 (reference) and float32 (the timed runs)."""

    def __init__(self, batch, dim, width, bottleneck, activation="swish", scale=0.1, seed=0):
        self.batch, self.dim, self.seed = batch, dim, seed
        self.loss, self.params64, self.z1_64, self.z2_64 = build(batch, dim, width, bottleneck, activation, scale, seed)
        self.params32 = _cast(self.params64, jnp.float32)
        self.z1_32, self.z2_32 = self.z1_64.astype(jnp.float32), self.z2_64.astype(jnp.float32)


def ours(pb: Problem, tol=1e-4, check_every=10, dtype=jnp.float32, target="union"):
    """Blockwise Lanczos on the linearised HVP: ``(lambda_min, lambda_max, LanczosResult)``.

    ``target="union"`` stops once the union's extremes (the Hessian's lambda_min and lambda_max)
    are resolved to ``tol``; ``"blocks"`` resolves every block's.
    """
    z1, params, z2 = ((pb.z1_32, pb.params32, pb.z2_32) if dtype == jnp.float32 else (pb.z1_64, pb.params64, pb.z2_64))
    lin = cv.linearized_hvp(pb.loss, z1, params, z2)
    r = cv.blockwise_extreme_eigenvalues(cv.apply_linear, pb.batch, pb.dim, num_steps=pb.dim, args=(lin,),
                                         tol=tol, check_every=check_every, dtype=dtype, target=target,
                                         key=jax.random.PRNGKey(pb.seed))
    return float(r.smallest[:, 0].min()), float(r.largest[:, 0].max()), r


def ours_full(pb: Problem, tol=1e-4, check_every=10):
    """Lanczos on the full ``n d``-dimensional operator (same linearised HVP, flat): for comparison."""
    lin = cv.linearized_hvp(pb.loss, pb.z1_32, pb.params32, pb.z2_32)
    r = cv.extreme_eigenvalues(cv.LinearMatvec(pb.z1_32.shape), pb.batch * pb.dim, num_steps=min(300, pb.batch * pb.dim),
                               args=(lin,), tol=tol, check_every=check_every, dtype=jnp.float32,
                               key=jax.random.PRNGKey(pb.seed))
    return float(r.smallest[0]), float(r.largest[0]), r


def reference(pb: Problem, method="exact", probe_chunk=16):
    """Float64 ``(lambda_min, lambda_max, description)``: exact block Hessian or tight Lanczos."""
    if method == "exact":
        B = np.asarray(jax.jit(lambda z1, p, z2: cv.block_diagonal_hessian(pb.loss, z1, p, z2, chunk_size=probe_chunk))(
            pb.z1_64, pb.params64, pb.z2_64))
        ev = np.linalg.eigvalsh(B)
        return float(ev[:, 0].min()), float(ev[:, -1].max()), f"exact block Hessian ({pb.dim} probing HVPs) + eigvalsh, float64"
    if method == "lanczos":
        lo, hi, r = ours(pb, tol=1e-10, dtype=jnp.float64, target="blocks")
        if not r.converged:
            raise RuntimeError("the float64 Lanczos reference did not converge to 1e-10")
        return lo, hi, f"blockwise Lanczos float64, tol 1e-10 ({r.num_steps} HVPs, converged)"
    raise ValueError(f"`method` must be 'exact' or 'lanczos'; got {method!r}.")


# ----------------------------------------------------------------------------- the baseline (PyTorch)


class TorchPaper:
    """The paper's tracker in PyTorch: 20 power steps for lambda_max, then 20 on (lambda_max I - H)."""

    def __init__(self, pb: Problem, steps=20, threads=None):
        import torch

        if threads:
            torch.set_num_threads(threads)
        self.torch, self.steps = torch, steps
        torch.manual_seed(pb.seed)
        p = pb.params64
        self.W = [torch.tensor(np.asarray(l["w"], np.float32)) for l in p["proj"]["layers"] + p["pred"]["layers"]]
        self.z1 = torch.tensor(np.asarray(pb.z1_64, np.float32), requires_grad=True)
        self.z2 = torch.tensor(np.asarray(pb.z2_64, np.float32))

    def loss(self, z1, z2):
        F, W = self.torch.nn.functional, self.W

        def head(z):
            h = F.silu(z @ W[0]) @ W[1]
            return h, F.silu(h @ W[2]) @ W[3]

        h1, p1 = head(z1)
        h2, p2 = head(z2)
        cos = F.cosine_similarity
        return -0.5 * cos(p1, h2.detach(), dim=-1, eps=1e-8).mean() - 0.5 * cos(p2, h1.detach(), dim=-1, eps=1e-8).mean()

    def _grad(self):
        (g,) = self.torch.autograd.grad(self.loss(self.z1, self.z2), self.z1, create_graph=True)
        return g

    def hvp_fn(self):
        g = self._grad()
        return lambda v: self.torch.autograd.grad(g, self.z1, grad_outputs=v, retain_graph=True)[0]

    def __call__(self):
        torch, hvp = self.torch, self.hvp_fn()

        def power(op):
            v = torch.randn_like(self.z1)
            v = v / v.norm()
            lam = torch.zeros(())
            for _ in range(self.steps):
                w = op(v)
                lam = (v * w).sum()
                v = w / w.norm()
            return lam

        lam_max = power(hvp)
        mu = power(lambda v: lam_max * v - hvp(v))
        return float(lam_max - mu), float(lam_max)


# ----------------------------------------------------------------------------- the run


def _errors(lo, hi, ref_lo, ref_hi):
    return {"rel_err_min": abs(lo - ref_lo) / abs(ref_lo), "rel_err_max": abs(hi - ref_hi) / abs(ref_hi),
            "signs_ok": bool(np.sign(lo) == np.sign(ref_lo) and np.sign(hi) == np.sign(ref_hi))}


def measure(pb: Problem, *, tol=1e-4, steps=20, repeats=5, warmup=1, reference_method="exact",
            hvp_repeats=5, threads=None, full=False) -> dict:
    """Interleaved timings, per-HVP timings, accuracy and the criteria; all numbers."""
    coupling = cv.block_coupling(pb.loss, pb.z1_64, pb.params64, pb.z2_64, num_probes=3)
    if coupling > 1e-12:
        raise SystemExit(f"hess_z1 L is not block-diagonal (coupling {coupling:.2e}); the blockwise solver does not apply.")
    t0 = time.perf_counter()
    ref_lo, ref_hi, ref_desc = reference(pb, reference_method)
    ref_s = time.perf_counter() - t0
    paper = TorchPaper(pb, steps, threads)
    out: dict = {}
    impls = {"ours": lambda: ours(pb, tol), "paper": paper}
    if full:
        impls["full"] = lambda: ours_full(pb, tol)
    times = harness.interleave(impls, repeats=repeats, warmup=warmup, results=out)
    lo, hi, res = out["ours"]
    plo, phi = out["paper"]
    # one HVP of each side, timed alone (interleaved), at the same point
    lin = cv.linearized_hvp(pb.loss, pb.z1_32, pb.params32, pb.z2_32)
    jhvp = jax.jit(cv.apply_linear)
    V = jnp.ones_like(pb.z1_32)
    thvp = paper.hvp_fn()
    tv = paper.torch.ones_like(paper.z1)
    lin_fn = lambda: cv.linearized_hvp(pb.loss, pb.z1_32, pb.params32, pb.z2_32)  # noqa: E731
    t_h = harness.interleave({"jax_hvp": lambda: jhvp(V, lin), "torch_hvp": lambda: thvp(tv),
                              "jax_linearize": lin_fn, "torch_grad_graph": paper._grad},
                             repeats=hvp_repeats, warmup=1)
    med = {k: float(np.median(v)) for k, v in t_h.items()}
    stats = harness.ratio_stats(times["ours"], times["paper"])
    t_ours, t_paper = float(np.median(times["ours"])), float(np.median(times["paper"]))
    e_ours, e_paper = _errors(lo, hi, ref_lo, ref_hi), _errors(plo, phi, ref_lo, ref_hi)
    extra = {}
    if full:
        flo, fhi, fres = out["full"]
        t_full = float(np.median(times["full"]))
        extra["full"] = {"lambda_min": flo, "lambda_max": fhi, **_errors(flo, fhi, ref_lo, ref_hi),
                         "wall_s_median": t_full, "times": times["full"], "hvps": fres.num_steps,
                         "checks": fres.num_checks, "converged": fres.converged, "hvp_s": med["jax_hvp"],
                         "linearize_s": med["jax_linearize"],
                         "overhead_s": t_full - fres.num_steps * med["jax_hvp"] - med["jax_linearize"]}
    return {
        **extra,
        "setting": {"batch": pb.batch, "dim": pb.dim, "variables": pb.batch * pb.dim, "tol": tol, "power_steps": steps},
        "block_coupling": coupling,
        "reference": {"lambda_min": ref_lo, "lambda_max": ref_hi, "method": ref_desc, "wall_s": ref_s},
        "ours": {"lambda_min": lo, "lambda_max": hi, **e_ours, "wall_s_median": t_ours, "times": times["ours"],
                 "hvps": res.num_steps, "checks": res.num_checks, "converged": res.converged,
                 "hvp_s": med["jax_hvp"], "linearize_s": med["jax_linearize"],
                 "overhead_s": t_ours - res.num_steps * med["jax_hvp"] - med["jax_linearize"]},
        "paper": {"lambda_min": plo, "lambda_max": phi, **e_paper, "wall_s_median": t_paper, "times": times["paper"],
                  "hvps": 2 * steps, "hvp_s": med["torch_hvp"], "grad_graph_s": med["torch_grad_graph"],
                  "overhead_s": t_paper - 2 * steps * med["torch_hvp"] - med["torch_grad_graph"]},
        "ratio": stats,
        "criteria": {"ratio_le_0.5": stats["median"] <= 0.5,
                     "rel_err_le_1e-4": e_ours["rel_err_min"] <= 1e-4 and e_ours["rel_err_max"] <= 1e-4,
                     "signs_ok": e_ours["signs_ok"], "float32": True},
    }


def report(m: dict, repeats: int) -> str:
    rows = []
    labels = [("ours", f"ours: blockwise Lanczos (target union), linearised HVP, float32, tol {m['setting']['tol']:g}"),
              ("paper", f"paper: {m['setting']['power_steps']}-step shifted power iteration, PyTorch float32")]
    if "full" in m:
        labels.append(("full", f"ours: Lanczos on the full {m['setting']['variables']}-dim operator, float32"))
    for key, label in labels:
        r = m[key]
        rows.append({"method": label, "lambda_min": r["lambda_min"], "lambda_max": r["lambda_max"],
                     "rel_err_min": r["rel_err_min"], "rel_err_max": r["rel_err_max"], "signs_ok": r["signs_ok"],
                     "wall_s (median)": r["wall_s_median"], "HVPs": r["hvps"], "s / HVP": r["hvp_s"],
                     "setup_s": r.get("linearize_s", r.get("grad_graph_s")), "overhead_s": r["overhead_s"]})
    ref = m["reference"]
    rows.append({"method": f"reference: {ref['method']}", "lambda_min": ref["lambda_min"], "lambda_max": ref["lambda_max"],
                 "rel_err_min": 0.0, "rel_err_max": 0.0, "signs_ok": True, "wall_s (median)": ref["wall_s"],
                 "HVPs": "-", "s / HVP": "-", "setup_s": "-", "overhead_s": "-"})
    st, c = m["ratio"], m["criteria"]
    table = markdown_table(rows, list(rows[0]), floatfmt=".4g")
    s = m["setting"]
    return (f"Setting: batch {s['batch']}, d = {s['dim']} ({s['variables']} variables), Hessian of the SimSiam loss in z1, "
            f"block coupling {m['block_coupling']:.1e}. Timings: median of {repeats} interleaved rounds after warm-up "
            f"(ours includes the linearisation; paper includes building the gradient graph). `setup_s`: linearisation / "
            f"gradient graph alone; `overhead_s` = wall - HVPs x s/HVP - setup_s (solver cost beyond the products).\n\n"
            f"{table}\n\n"
            f"Time ratio ours / paper per round: median {st['median']:.3g}, quartiles {st['q25']:.3g}-{st['q75']:.3g}, "
            f"range {st['min']:.3g}-{st['max']:.3g} (n = {st['n']}).\n\n"
            f"Criteria: ratio <= 0.5: **{c['ratio_le_0.5']}**; relative error <= 1e-4 on both ends: "
            f"**{c['rel_err_le_1e-4']}**; signs right: **{c['signs_ok']}**; float32: {c['float32']}. "
            f"Lanczos: {m['ours']['hvps']} HVPs in {m['ours']['checks']} device chunks, converged {m['ours']['converged']}.\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for k, v in PAPER.items():
        ap.add_argument(f"--{k}", type=type(v), default=v)
    ap.add_argument("--steps", type=int, default=20, help="power-iteration steps of the baseline")
    ap.add_argument("--tol", type=float, default=1e-4, help="relative residual tolerance of the Lanczos run")
    ap.add_argument("--reference", choices=("exact", "lanczos"), default="exact")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--small", action="store_true", help="batch 16, dim 32, width 64, bottleneck 16")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    ap.add_argument("--full", action="store_true", help="also time Lanczos on the full (non-blockwise) operator")
    ap.add_argument("--out", default="docs/bench_hessian.md", help="markdown file to write ('' to skip)")
    ap.add_argument("--json", default=None, help="also write the measurements here")
    harness.add_arguments(ap, repeats=5, warmup=1)
    args = ap.parse_args(argv)
    if args.small:
        for k, v in SMALL.items():
            setattr(args, k, v)
    load0 = harness.load_average()
    pb = Problem(args.batch, args.dim, args.width, args.bottleneck, args.activation, args.scale, args.seed)
    m = measure(pb, tol=args.tol, steps=args.steps, repeats=args.repeats, warmup=args.warmup,
                reference_method=args.reference, threads=args.threads, full=args.full)
    m["load"] = {"before": load0, "after": harness.load_average()}
    body = report(m, args.repeats)
    print(body)
    if args.json:
        import json

        with open(args.json, "w") as f:
            json.dump(m, f, indent=2, default=float)
    if args.out:
        harness.write_table(args.out, "Benchmark: extreme eigenvalues of hess_z1 L (SimSiam, pseudo-collapse)", body,
                            command=harness.command_line("experiments.bench_hessian", argv),
                            load_before=load0, load_after=m["load"]["after"], threshold=args.load_threshold,
                            force=args.force)
        print(f"wrote {args.out}")
    return m


if __name__ == "__main__":
    main()
