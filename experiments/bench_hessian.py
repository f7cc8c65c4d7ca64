"""Benchmark: extreme eigenvalues of hess_{z1} L for the paper's SimSiam setting.

Setting (DESIGN.md s.3, the paper's Hessian tracker): batch 256 of d = 512
backbone features ``z1, z2`` (two views; here i.i.d. standard normal stand-ins,
since the Hessian in ``z1`` only needs the head and the point), projector
512 -> 2048 -> 2048 and predictor 2048 -> 512 -> 2048, bias-free, Swish, no
BatchNorm, pseudo-collapsed (projector weights x 0.1 via ``heads.scale_weights``),
loss ``losses.simsiam`` (symmetric negative cosine with stop-gradient) as a
function of ``z1``: a 131072-dimensional Hessian.

Methods compared (all on this machine, CPU):

* the paper's baseline: 20-step shifted power iteration written in PyTorch
  (double-backward HVP, float32);
* the same baseline in JAX (``curvature.paper_power_iteration``);
* ``curvature.extreme_eigenvalues``: Lanczos on the full 131072-dim HVP (float32);
* ``curvature.blockwise_extreme_eigenvalues``: without BatchNorm the objective
  is a mean of per-sample terms, so the Hessian is block-diagonal with 256
  blocks of 512 x 512 (verified numerically with ``curvature.block_coupling``);
  one HVP advances 256 independent Lanczos runs (float32);
* exact: ``curvature.block_diagonal_hessian`` (512 probing HVPs) + ``eigvalsh``,
  float64 -- the reference every error is measured against -- and float32.

Plus the dense Hessian of one sample block (``curvature.hessian`` under jit vs
``torch.func.hessian``). Warm-up runs are excluded from wall times; compile
time is reported separately (first call minus warm call; for the Lanczos rows
the whole warm-up run, which compiles and stops after one chunk of steps; for
the float32 exact row the ahead-of-time ``lower().compile()`` time).

Usage::

    python -m experiments.bench_hessian            # paper sizes
    python -m experiments.bench_hessian --small    # quick check
"""
from __future__ import annotations

import argparse
import os
import pathlib
import platform
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from experiments.common import markdown_table  # noqa: E402
from ssl_geometry import curvature as cv  # noqa: E402
from ssl_geometry import heads, losses  # noqa: E402


# ----------------------------------------------------------------------------- the objective (JAX)


def make_heads(dim, width, bottleneck, activation):
    proj = heads.simsiam_projector(dim, width, activation=activation, batch_norm=False, dtype=jnp.float64)
    pred = heads.simsiam_predictor(width, bottleneck, activation=activation, batch_norm=False, dtype=jnp.float64)
    return proj, pred


def build(args):
    proj, pred = make_heads(args.dim, args.width, args.bottleneck, args.activation)
    kp, kq, k1, k2 = jax.random.split(jax.random.PRNGKey(args.seed), 4)
    vp = heads.scale_weights(proj.init(kp), args.scale)  # pseudo-collapse
    vq = pred.init(kq)
    params = {"proj": vp["params"], "pred": vq["params"]}
    z1 = jax.random.normal(k1, (args.batch, args.dim), jnp.float64)
    z2 = jax.random.normal(k2, (args.batch, args.dim), jnp.float64)

    def loss(z1, params, z2):
        h1, _ = proj.apply({"params": params["proj"]}, z1)
        h2, _ = proj.apply({"params": params["proj"]}, z2)
        p1, _ = pred.apply({"params": params["pred"]}, h1)
        p2, _ = pred.apply({"params": params["pred"]}, h2)
        return losses.simsiam(p1, p2, h1, h2)

    return loss, params, z1, z2


def _cast(tree, dtype):
    return jax.tree_util.tree_map(lambda x: x.astype(dtype), tree)


# ----------------------------------------------------------------------------- the baseline (PyTorch)


def torch_baseline(params, z1, z2, steps, seed, *, repeats=1):
    """The paper's tracker: 20-step power iteration for lambda_max, then on (lambda_max I - H)."""
    import torch

    torch.manual_seed(seed)
    W = [torch.tensor(np.asarray(l["w"], np.float32)) for l in params["proj"]["layers"]]
    W += [torch.tensor(np.asarray(l["w"], np.float32)) for l in params["pred"]["layers"]]
    act = torch.nn.functional.silu
    cos = torch.nn.functional.cosine_similarity

    def head(z):
        h = act(z @ W[0]) @ W[1]
        return h, act(h @ W[2]) @ W[3]

    def loss_t(z1, z2):
        h1, p1 = head(z1)
        h2, p2 = head(z2)
        return -0.5 * cos(p1, h2.detach(), dim=-1, eps=1e-8).mean() - 0.5 * cos(p2, h1.detach(), dim=-1, eps=1e-8).mean()

    z1t = torch.tensor(np.asarray(z1, np.float32), requires_grad=True)
    z2t = torch.tensor(np.asarray(z2, np.float32))

    def run():
        (g,) = torch.autograd.grad(loss_t(z1t, z2t), z1t, create_graph=True)

        def hvp(v):
            return torch.autograd.grad(g, z1t, grad_outputs=v, retain_graph=True)[0]

        def power(op):
            v = torch.randn_like(z1t)
            v = v / v.norm()
            lam = torch.zeros(())
            for _ in range(steps):
                w = op(v)
                lam = (v * w).sum()
                v = w / w.norm()
            return lam

        lam_max = power(hvp)
        mu = power(lambda v: lam_max * v - hvp(v))
        return float(lam_max - mu), float(lam_max)

    run()  # warm-up
    t0 = time.perf_counter()
    for _ in range(repeats):
        out = run()
    return out, (time.perf_counter() - t0) / repeats, (head, loss_t)


def torch_dense_hessian(params, z1_row, z2_row):
    import torch
    from torch.func import hessian as thessian

    W = [torch.tensor(np.asarray(l["w"], np.float32)) for l in params["proj"]["layers"]]
    W += [torch.tensor(np.asarray(l["w"], np.float32)) for l in params["pred"]["layers"]]
    act = torch.nn.functional.silu
    z2t = torch.tensor(np.asarray(z2_row, np.float32))

    def f(z1):
        h1 = act(z1 @ W[0]) @ W[1]
        p1 = act(h1 @ W[2]) @ W[3]
        h2 = act(z2t @ W[0]) @ W[1]
        p2 = act(h2 @ W[2]) @ W[3]
        cos = torch.nn.functional.cosine_similarity
        return -0.5 * cos(p1, h2.detach(), dim=-1, eps=1e-8).mean() - 0.5 * cos(p2, h1.detach(), dim=-1, eps=1e-8).mean()

    x = torch.tensor(np.asarray(z1_row, np.float32))
    H = thessian(f)(x)  # warm-up
    t0 = time.perf_counter()
    H = thessian(f)(x)
    return H.reshape(x.numel(), x.numel()).numpy(), time.perf_counter() - t0


# ----------------------------------------------------------------------------- timing helper


def timed(fn, warm=True):
    """(result, warm wall seconds, compile seconds = first - warm)."""
    t0 = time.perf_counter()
    out = fn()
    first = time.perf_counter() - t0
    if not warm:
        return out, first, 0.0
    t0 = time.perf_counter()
    out = fn()
    wall = time.perf_counter() - t0
    return out, wall, max(first - wall, 0.0)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--bottleneck", type=int, default=512)
    ap.add_argument("--activation", default="swish")
    ap.add_argument("--scale", type=float, default=0.1, help="pseudo-collapse factor on projector weights")
    ap.add_argument("--steps", type=int, default=20, help="power-iteration steps of the baseline")
    ap.add_argument("--lanczos-steps", type=int, default=300, help="max steps of the full-dim Lanczos")
    ap.add_argument("--block-tol", type=float, default=2e-6, help="relative residual tol of the blockwise Lanczos")
    ap.add_argument("--probe-chunk", type=int, default=16, help="probing HVPs per batch for the exact block Hessian")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--small", action="store_true", help="batch 16, dim 32, width 64, bottleneck 16")
    ap.add_argument("--out", default="docs/bench_hessian.md", help="markdown file to write ('' to skip)")
    args = ap.parse_args(argv)
    if args.small:
        args.batch, args.dim, args.width, args.bottleneck = 16, 32, 64, 16
        args.lanczos_steps = min(args.lanczos_steps, args.batch * args.dim)
    n, d = args.batch, args.dim
    P = n * d
    print(f"hess_z1 L: batch {n} x dim {d} = {P} variables; heads {d}->{args.width}->{args.width}, "
          f"{args.width}->{args.bottleneck}->{args.width}, {args.activation}, no BN, projector x {args.scale}")

    loss, params64, z1_64, z2_64 = build(args)
    params32, z1_32, z2_32 = _cast(params64, jnp.float32), z1_64.astype(jnp.float32), z2_64.astype(jnp.float32)

    def block_hvp(V, z1, params, z2):
        """Full-batch HVP; row i of the output is H_ii V_i when H is block-diagonal."""
        return jax.jvp(lambda z: jax.grad(loss)(z, params, z2), (z1,), (V.astype(z1.dtype),))[1]

    def flat_hvp(v, z1, params, z2):
        return block_hvp(v.reshape(z1.shape), z1, params, z2).reshape(-1)

    rows, notes = [], []

    # ---- structure check and exact reference (float64)
    coupling = cv.block_coupling(loss, z1_64, params64, z2_64, num_probes=3)
    notes.append(f"block structure: max relative off-block HVP response = {coupling:.2e} (float64, 3 probes)")
    print(notes[-1])
    if coupling > 1e-12:
        raise SystemExit("hess_z1 L is not block-diagonal; the exact block reference does not apply.")

    block_hess = jax.jit(lambda z1, params, z2: cv.block_diagonal_hessian(loss, z1, params, z2,
                                                                           chunk_size=args.probe_chunk))

    def exact(z1, params, z2):
        B = np.asarray(block_hess(z1, params, z2))
        ev = np.linalg.eigvalsh(B)
        return ev

    ev64, wall, comp = timed(lambda: exact(z1_64, params64, z2_64), warm=False)
    lam_min, lam_max = float(ev64[:, 0].min()), float(ev64[:, -1].max())
    ref_row = dict(method=f"exact: block Hessian ({d} probing HVPs) + eigvalsh, float64 [reference]",
                   lambda_min=lam_min, lambda_max=lam_max, wall_s=wall, compile_s=float("nan"), matvecs=d)
    print(f"reference lambda_min = {lam_min:.10g}, lambda_max = {lam_max:.10g} ({wall:.1f} s incl. compile)")

    def err(row):
        row["rel_err_min"] = abs(row["lambda_min"] - lam_min) / abs(lam_min)
        row["rel_err_max"] = abs(row["lambda_max"] - lam_max) / abs(lam_max)
        row["signs_ok"] = bool(np.sign(row["lambda_min"]) == np.sign(lam_min) and np.sign(row["lambda_max"]) == np.sign(lam_max))
        return row

    # ---- baseline: PyTorch 20-step shifted power iteration (float32)
    (tmin, tmax), t_base, _ = torch_baseline(params64, z1_64, z2_64, args.steps, args.seed)
    rows.append(err(dict(method=f"paper: {args.steps}-step shifted power iteration, PyTorch float32 [baseline]",
                         lambda_min=tmin, lambda_max=tmax, wall_s=t_base, compile_s=0.0, matvecs=2 * args.steps)))

    # ---- the same baseline in JAX
    pw, wall, comp = timed(lambda: cv.paper_power_iteration(flat_hvp, P, steps=args.steps, args=(z1_32, params32, z2_32),
                                                             key=jax.random.PRNGKey(args.seed)))
    rows.append(err(dict(method=f"paper: {args.steps}-step shifted power iteration, JAX float32",
                         lambda_min=pw.lambda_min, lambda_max=pw.lambda_max, wall_s=wall, compile_s=comp,
                         matvecs=pw.num_matvecs)))

    # ---- ours: blockwise Lanczos (float32)
    def blockwise(tol=args.block_tol):
        return cv.blockwise_extreme_eigenvalues(block_hvp, n, d, num_steps=d, args=(z1_32, params32, z2_32),
                                                tol=tol, check_every=10, dtype=jnp.float32,
                                                key=jax.random.PRNGKey(args.seed))

    _, comp, _ = timed(lambda: blockwise(1e30), warm=False)  # warm-up: compiles, stops after one chunk
    bl, wall, _ = timed(blockwise, warm=False)
    rows.append(err(dict(method=f"ours: blockwise Lanczos ({n} blocks x {d}), float32, tol {args.block_tol:g}",
                         lambda_min=float(bl.smallest[:, 0].min()), lambda_max=float(bl.largest[:, 0].max()),
                         wall_s=wall, compile_s=comp, matvecs=bl.num_steps,
                         converged=bl.converged)))

    # ---- ours: Lanczos on the full operator (float32)
    def full(tol=1e-5):
        return cv.extreme_eigenvalues(flat_hvp, P, num_steps=args.lanczos_steps, args=(z1_32, params32, z2_32),
                                      tol=tol, check_every=20, dtype=jnp.float32,
                                      key=jax.random.PRNGKey(args.seed))

    _, comp, _ = timed(lambda: full(1e30), warm=False)  # warm-up: compiles, stops after one chunk
    fl, wall, _ = timed(full, warm=False)
    rows.append(err(dict(method=f"ours: Lanczos on the full {P}-dim HVP, float32, tol 1e-5",
                         lambda_min=float(fl.smallest[0]), lambda_max=float(fl.largest[0]),
                         wall_s=wall, compile_s=comp, matvecs=fl.num_steps, converged=fl.converged)))

    # ---- exact block Hessian in float32 (compiled ahead of time, so one timed run suffices)
    t0 = time.perf_counter()
    block_hess32 = block_hess.lower(z1_32, params32, z2_32).compile()
    comp = time.perf_counter() - t0
    t0 = time.perf_counter()
    ev32 = np.linalg.eigvalsh(np.asarray(block_hess32(z1_32, params32, z2_32)))
    wall = time.perf_counter() - t0
    rows.append(err(dict(method="ours: exact block Hessian + eigvalsh, float32",
                         lambda_min=float(ev32[:, 0].min()), lambda_max=float(ev32[:, -1].max()),
                         wall_s=wall, compile_s=comp, matvecs=d)))
    rows.append(err(ref_row))

    for r in rows:
        r["ratio_to_baseline"] = r["wall_s"] / t_base
        r.setdefault("converged", "-")

    # ---- dense Hessian of one sample block: ours vs torch.func.hessian
    one = lambda z1, params, z2: loss(z1, params, z2)
    zr1, zr2 = z1_32[:1], z2_32[:1]
    dense = jax.jit(lambda z1, params, z2: cv.hessian(one, z1, params, z2))
    Hj, wall_j, comp_j = timed(lambda: jax.block_until_ready(dense(zr1, params32, zr2)))
    Ht, wall_t = torch_dense_hessian(params64, np.asarray(zr1), np.asarray(zr2))
    dense_diff = float(np.max(np.abs(np.asarray(Hj) - Ht)) / np.max(np.abs(Ht)))
    dense_rows = [
        dict(method=f"ssl_geometry.curvature.hessian (jit, float32), {d}x{d}", wall_s=wall_j, compile_s=comp_j,
             ratio=wall_j / wall_t),
        dict(method=f"torch.func.hessian (float32), {d}x{d}", wall_s=wall_t, compile_s=0.0, ratio=1.0),
    ]
    notes.append(f"dense one-sample Hessians agree: max|H_jax - H_torch| / max|H_torch| = {dense_diff:.2e}")

    cols = ["method", "lambda_min", "lambda_max", "rel_err_min", "rel_err_max", "signs_ok", "wall_s",
            "compile_s", "ratio_to_baseline", "matvecs", "converged"]
    table = markdown_table(rows, cols, floatfmt=".6g")
    dtable = markdown_table(dense_rows, ["method", "wall_s", "compile_s", "ratio"], floatfmt=".4g")
    print(table)
    print(dtable)
    for note in notes:
        print(note)
    env = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores, load average "
           f"{os.getloadavg()[0]:.1f} at the end of the run; jax {jax.__version__}, "
           f"torch {__import__('torch').__version__}")
    cmd = "python -m experiments.bench_hessian" + ("" if argv is None and len(sys.argv) <= 1 else " " + " ".join(sys.argv[1:] if argv is None else argv))
    if args.out:
        text = _markdown(args, cmd, env, table, dtable, notes, P)
        path = pathlib.Path(args.out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path}")
    return rows, dense_rows


def _markdown(args, cmd, env, table, dtable, notes, P):
    return f"""# Benchmark: extreme eigenvalues of hess_z1 L (SimSiam, pseudo-collapse)

Produced by `{cmd}` ({env}).

Setting: batch {args.batch}, d = {args.dim} backbone features z1, z2 (i.i.d. standard normal stand-ins, seed {args.seed}),
projector {args.dim}->{args.width}->{args.width} and predictor {args.width}->{args.bottleneck}->{args.width} from
`ssl_geometry.heads` (bias-free, {args.activation}, no BatchNorm), projector weights x {args.scale}
(`heads.scale_weights`), loss `ssl_geometry.losses.simsiam` with stop-gradient, Hessian in z1 ({P} x {P}).
Relative errors are against the float64 exact reference (last row). Wall times exclude the
warm-up/compile run (compile_s: first call minus warm call; Lanczos rows: the whole one-chunk warm-up run;
float32 exact row: ahead-of-time compile); the reference row's time includes compilation.
`matvecs` counts full-batch HVPs (Lanczos steps; for the block methods each HVP serves all {args.batch} blocks).

{table}

Dense Hessian of one sample block (batch 1, {args.dim} x {args.dim}):

{dtable}

Notes:

""" + "\n".join(f"- {n}" for n in notes) + "\n"


if __name__ == "__main__":
    main()
