"""Experiment 5, one checkpoint: the paper's 20-step power iteration on ``hess_{z1} L`` against converged Lanczos
(and, where configured, the blockwise and exact per-sample references), and the comparison the rule reads.
The training and the verdict are in :mod:`experiments.hessian_tracker`.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from experiments import claims
from ssl_geometry import curvature, losses

__all__ = ["THRESHOLDS", "cast_tree", "checkpoint", "head_functions"]

#: The registry's thresholds of the claim (the rule is ``claims.rule_text("tracker-power-iteration")``).
THRESHOLDS = claims.CLAIMS["tracker-power-iteration"].thresholds


@functools.lru_cache(maxsize=8)
def head_functions(projector, predictor):
    """``(first_view_loss, hvp)`` for one head pair (cached: one compile per shape).

    ``first_view_loss(z1, hp, u2) = 1/2 negative_cosine(q(g(z1)), u2)``; ``hvp(v, z1_flat, hp, u2)`` is
    ``H v`` by forward-over-reverse in the dtype of its arguments (``hp``: projector/predictor params), the
    product of the paper's estimator (its double backward: the primal pass redone for every product).
    """

    def first_view_loss(z1, hp, u2):
        u, _ = projector.apply({"params": hp["projector"]}, z1)
        p, _ = predictor.apply({"params": hp["predictor"]}, u)
        return 0.5 * losses.negative_cosine(p, u2)

    def hvp(v, zf, hp, u2):
        shape = (u2.shape[0], zf.size // u2.shape[0])
        g = jax.grad(lambda x: first_view_loss(x.reshape(shape), hp, u2))
        return jax.jvp(g, (zf,), (v.astype(zf.dtype),))[1]

    return first_view_loss, hvp


@functools.partial(jax.jit, static_argnums=0)
def _blocks(f, z1, hp, u2):
    return curvature.block_diagonal_hessian(f, z1, args=(hp, u2))


def cast_tree(tree, dtype):
    """Every leaf of ``tree`` as a ``dtype`` array."""
    return jax.tree_util.tree_map(lambda a: jnp.asarray(a, dtype), tree)


def checkpoint(run, cfg, state, batch, key) -> dict:
    """The three estimates of the spectrum ends of ``H`` at one batch (before its update)."""
    first_view_loss, hvp = head_functions(run.projector, run.predictor)
    z1, z2 = run.features(state, batch["images"])
    hp = {k: state["params"][k] for k in ("projector", "predictor")}
    hp64, z1_64 = cast_tree(hp, jnp.float64), jnp.asarray(z1, jnp.float64)
    u2_64, _ = run.projector.apply({"params": hp64["projector"]}, jnp.asarray(z2, jnp.float64))
    n, d = z1_64.shape
    kl, kp = jax.random.split(key)
    a = cfg.analysis
    # the references' products: the gradient linearised once at this state (H v without the primal pass)
    lin = curvature.linearized_hvp(first_view_loss, z1_64, args=(hp64, u2_64))
    lz = curvature.extreme_eigenvalues(
        curvature.LinearMatvec((n, d)),
        n * d,
        k=1,
        key=kl,
        args=(lin,),
        return_vectors=True,
        dtype=jnp.float64,
        options=curvature.SolverOptions(num_steps=min(n * d, a.lanczos_steps), tol=a.lanczos_tol),
    )
    hp32 = cast_tree(hp, jnp.float32)
    u2_32, _ = run.projector.apply({"params": hp32["projector"]}, jnp.asarray(z2, jnp.float32))
    pw = curvature.paper_power_iteration(
        hvp, n * d, steps=a.power_steps, key=kp, args=(jnp.asarray(z1, jnp.float32).reshape(-1), hp32, u2_32)
    )
    row = {
        "n": n,
        "d": d,
        "lambda_min_lanczos": float(lz.smallest[0]),
        "lambda_max_lanczos": float(lz.largest[0]),
        "lanczos_true_residual_min": float(np.asarray(lz.smallest_true_residuals)[0]),
        "lanczos_true_residual_max": float(np.asarray(lz.largest_true_residuals)[0]),
        "lanczos_steps": int(lz.num_steps),
        "lanczos_converged": bool(lz.converged),
        "lambda_min_power": pw.lambda_min,
        "lambda_max_power": pw.lambda_max,
    }
    scale = max(abs(row["lambda_min_lanczos"]), abs(row["lambda_max_lanczos"]))
    row["lanczos_valid"] = bool(
        max(row["lanczos_true_residual_min"], row["lanczos_true_residual_max"])
        <= THRESHOLDS["converged_residual"] * max(scale, 1e-300)
    )
    if a.blockwise_lanczos:  # per-sample Lanczos in each (d, d) block: d-dimensional Krylov spaces, one HVP a step
        bl = curvature.blockwise_extreme_eigenvalues(
            curvature.apply_linear,
            n,
            d,
            k=1,
            key=kl,
            args=(lin,),
            return_vectors=True,
            dtype=jnp.float64,
            options=curvature.SolverOptions(num_steps=min(d, a.block_lanczos_steps), tol=a.lanczos_tol),
        )
        sm, lg = np.asarray(bl.smallest)[:, 0], np.asarray(bl.largest)[:, 0]
        rs, rl = np.asarray(bl.smallest_true_residuals)[:, 0], np.asarray(bl.largest_true_residuals)[:, 0]
        i, j = int(np.argmin(sm)), int(np.argmax(lg))
        bscale = max(abs(sm[i]), abs(lg[j]))
        worst = float(max(rs.max(), rl.max()))  # every block certified: an unconverged block could hide the minimum
        row.update(
            lambda_min_block_lanczos=float(sm[i]),
            lambda_max_block_lanczos=float(lg[j]),
            block_lanczos_true_residual=worst,
            block_lanczos_valid=bool(worst <= THRESHOLDS["converged_residual"] * max(bscale, 1e-300)),
        )
    else:
        row.update(
            lambda_min_block_lanczos=float("nan"),
            lambda_max_block_lanczos=float("nan"),
            block_lanczos_true_residual=float("nan"),
            block_lanczos_valid=False,
        )
    if a.exact_blocks:
        blocks = np.asarray(_blocks(first_view_loss, z1_64, hp64, u2_64))
        ev = np.linalg.eigvalsh(blocks)
        row.update(
            lambda_min_exact=float(ev.min()),
            lambda_max_exact=float(ev.max()),
            dead_head=bool(np.all(blocks == 0)),
            reference="exact",
        )
    else:
        block = row["block_lanczos_valid"]
        row.update(
            lambda_min_exact=float("nan"),
            lambda_max_exact=float("nan"),
            dead_head=bool(scale == 0.0),
            reference="block_lanczos" if block else "lanczos",
        )
    return _compare(row)


def _compare(row: dict) -> dict:
    """Errors of the power iteration against the reference: the exact blocks if computed, else the
    blockwise Lanczos if its true residuals certify it, else the global Lanczos (valid only if certified)."""
    ref = row["reference"]
    exact = ref == "exact"
    src = {"exact": "exact", "block_lanczos": "block_lanczos", "lanczos": "lanczos"}[ref]
    lmin, lmax = row[f"lambda_min_{src}"], row[f"lambda_max_{src}"]
    scale = max(abs(lmin), abs(lmax))
    tol = 100 * row["n"] * row["d"] * np.finfo(np.float64).eps * max(scale, np.finfo(np.float64).tiny)
    pmin, pmax = row["lambda_min_power"], row["lambda_max_power"]
    row.update(
        valid=bool((exact or ref == "block_lanczos" or row["lanczos_valid"]) and not row["dead_head"]),
        lambda_min_ref=lmin,
        lambda_max_ref=lmax,
        sign_tol=tol,
        rel_error_min_power=abs(pmin - lmin) / abs(lmin) if abs(lmin) > tol else float("nan"),
        rel_error_max_power=abs(pmax - lmax) / abs(lmax) if abs(lmax) > tol else float("nan"),
        sign_error_min=bool(abs(lmin) > tol and np.sign(pmin) != np.sign(lmin)),
        sign_error_max=bool(abs(lmax) > tol and np.sign(pmax) != np.sign(lmax)),
        underestimate_ratio=abs(lmin) / abs(pmin) if pmin != 0 else float("inf"),
        lanczos_abs_error=(
            max(abs(row["lambda_min_lanczos"] - lmin), abs(row["lambda_max_lanczos"] - lmax)) if exact else float("nan")
        ),
        block_lanczos_abs_error=(
            max(abs(row["lambda_min_block_lanczos"] - lmin), abs(row["lambda_max_block_lanczos"] - lmax))
            if exact
            else float("nan")
        ),
    )
    return row
