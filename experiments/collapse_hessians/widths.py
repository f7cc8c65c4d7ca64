"""The repaired Thm 4.1 across widths: the rank of ``J(c)``, predicted from the head and ``c`` before the state exists.

docs/theory.md, section "Thm 4.1 repaired: when a collapsed equilibrium is unstable", parts (c) and (d):
for a bias-free MLP head whose hidden layers have widths ``h_l`` and pre-activations ``a_l`` at ``c`` (one layer,
``d -> h -> k``: ``J(c) = W2^T diag(sigma'(c W1)) W1^T``; the composed SimSiam head ``d -> h -> k -> p -> k``: the
product of the projector's and the predictor's, :mod:`experiments.collapse_hessians.constructions`), for generic
weights

    rank J(c) = min(d, min_l (h_l - n0_l)),   n0_l = #{j : sigma'(a_lj) = 0}.

So, from the head and ``c`` alone (:func:`predict`):

* ``"full"`` (every ``h_l >= d`` and ``n0_l <= h_l - d``): ``J`` has full column rank, ``G > 0``, and the
  equilibrium is stable at every residual below its critical scale (``s* > 0``);
* ``"rank-drop"`` (some ``n0_l > max(h_l - d, 0)``): ``dim null(J) = d - min_l (h_l - n0_l)`` directions that ``M``
  curves for a generic residual: unstable at every residual scale (part (a));
* ``"bottleneck"`` (one hidden layer, ``h < d``, ``n0 = 0``): a constant-rank bottleneck, ``M = 0`` on
  ``null(J)``: ``d - h`` exact zero directions, degenerate, not unstable.

The sweep (:func:`sweep`) builds every head of :func:`heads_of`: per rung of ``analysis.widths`` (one hidden layer
``(d, h, k)``: the constructions ``random``, ``rank_drop``, ``bottleneck``) and of ``analysis.widths_composed``
(``(d, h, k, p)``: ``composed``, ``composed_rank_drop``), smooth activation, seed and residual scale, one head
(:func:`experiments.collapse_hessians.constructions.draw_head`; no ``*rank_drop`` head for an activation whose
``sigma'`` has no zero, e.g. tanh). For each head the prediction is written into its row first; then a fresh head
and ``c`` per residual scale (a new key per scale: the head is solved anew, the residual not rescaled) gives the
certified equilibrium (:func:`ssl_geometry.geometry.collapsed_equilibrium`, ``n = analysis.widths_n`` samples),
its certificate (:func:`ssl_geometry.geometry.collapse_certificate`) and the measured ``lambda_min(H_eff)``
(:func:`ssl_geometry.geometry.classify_collapse`, Lanczos above ``analysis.max_dense_dim``).
:func:`decide_rank_predicts_stability` is the rule of ``thm4.1-rank-predicts-stability``.
"""

from __future__ import annotations

import time
from typing import Iterator, NamedTuple

import jax

from experiments import claims
from experiments.collapse_hessians.certificates import NO_PREDICTION, measured_sign
from experiments.collapse_hessians.constructions import (
    COMPOSED,
    CONSTRUCTIONS,
    ONE_LAYER,
    draw_head,
    hidden_pre_activations,
    sigma_prime_zero,
    units_at_zero,
)
from ssl_geometry import as_function, geometry

RANK_PREDICTS_STABILITY = "thm4.1-rank-predicts-stability"
CLASSES = ("full", "rank-drop", "bottleneck")
#: The predicted sign of lambda_min(H_eff) per class, at a residual below the state's critical scale.
PREDICTED_SIGN = {"full": 1, "rank-drop": -1, "bottleneck": 0}


def predict(d: int, hidden, n_zero) -> dict:
    """The prediction of parts (c) and (d) from the input width ``d``, the hidden widths ``h_l`` and the counts
    ``n0_l`` of units at a zero of ``sigma'`` (ints for one hidden layer, equal-length sequences for several):
    ``rank = min(d, min_l (h_l - n0_l))``, ``null_dim = d - rank`` and the class (module docstring). A layer after
    the first narrower than ``d`` is refused (``ValueError``): its null space moves with ``c``, no class is
    predicted."""
    hs, ns = ([hidden], [n_zero]) if isinstance(hidden, int) else (list(hidden), list(n_zero))
    ok = isinstance(d, int) and d >= 1 and len(hs) == len(ns) >= 1
    if not (ok and all(isinstance(h, int) and h >= 1 and 0 <= n <= h for h, n in zip(hs, ns))):
        raise ValueError(
            f"need an int d >= 1 and, per hidden layer, an int width h >= 1 with 0 <= n_zero <= h; got d={d!r}, "
            f"hidden={hidden!r}, n_zero={n_zero!r}."
        )
    if any(h < d for h in hs[1:]):
        raise ValueError(f"a hidden layer after the first is narrower than d={d}: {hs}; no class is predicted.")
    rank = min(d, *(h - n for h, n in zip(hs, ns)))
    cls = "rank-drop" if any(n > max(h - d, 0) for h, n in zip(hs, ns)) else ("bottleneck" if hs[0] < d else "full")
    return {
        "predicted_class": cls,
        "predicted_rank": rank,
        "predicted_null_dim": d - rank,
        "predicted_sign": PREDICTED_SIGN[cls],
    }


def rung_label(dims) -> str:
    """``"d->h->k"`` for a one-hidden-layer rung, ``"d->h->k->p->k"`` for a composed one."""
    dims = [int(x) for x in dims]
    return "->".join(map(str, dims if len(dims) == 3 else [*dims, dims[2]]))


class HeadSpec(NamedTuple):
    """One head of the sweep: its rung, activation, construction, seed, residual scale and key."""

    dims: tuple
    activation: str
    construction: str
    seed: int
    scale: float
    key: jax.Array


def heads_of(cfg, key) -> Iterator[HeadSpec]:
    """Every head the sweep builds, in its order: the rungs of ``analysis.widths`` (``analysis.widths_seeds`` seeds,
    the constructions :data:`ONE_LAYER`) then those of ``analysis.widths_composed`` (``analysis.widths_composed_seeds``,
    :data:`COMPOSED`); per rung, activation, construction, seed and residual scale, skipping a ``*rank_drop``
    construction at an activation whose ``sigma'`` has no zero (no such head exists). The key is ``fold_in`` of the
    rung, activation, construction (its index in :data:`CONSTRUCTIONS`), seed and scale indices."""
    a = cfg.analysis
    rungs: list[tuple] = [(w, ONE_LAYER, a.widths_seeds) for w in a.widths]
    rungs += [(w, COMPOSED, a.widths_composed_seeds) for w in a.widths_composed]
    for iw, (dims, cons, seeds) in enumerate(rungs):
        for ia, act in enumerate(a.widths_activations):
            for con in cons:
                if con.endswith("rank_drop") and sigma_prime_zero(act) is None:
                    continue
                for seed in range(int(seeds)):
                    for js, scale in enumerate(a.widths_residual_scales):
                        kk = key
                        for i in (iw, ia, CONSTRUCTIONS.index(con), seed, js):
                            kk = jax.random.fold_in(kk, i)
                        yield HeadSpec(tuple(int(x) for x in dims), act, con, seed, float(scale), kk)


def head_row(cfg, dims, activation, construction, seed, scale, key) -> dict | None:
    """One row: the prediction from the head and ``c`` (written first), then the equilibrium, its certificate
    and the measured ``lambda_min(H_eff)``. ``None`` when the construction has no head (``sigma'`` without a zero)."""
    a = cfg.analysis
    t0 = time.perf_counter()
    drawn = draw_head(dims, activation, construction, key)
    if drawn is None:
        return None
    model, variables, c = drawn
    pre = hidden_pre_activations(variables, c, activation)
    zero_tol = claims.claim(RANK_PREDICTS_STABILITY).thresholds["zero_tol"]
    hidden, n_zero = [int(x.size) for x in pre], [units_at_zero(x, activation, zero_tol) for x in pre]
    d, h, k = dims[:3]
    row = {
        "width": rung_label(dims),
        "d": d,
        "h": h,
        "k": k,
        "p": dims[3] if len(dims) == 4 else None,
        "hidden": hidden,
        "activation": activation,
        "construction": construction,
        "seed": seed,
        "residual_scale": scale,
        "zero_tol": zero_tol,
        "units_at_zero": n_zero,
        **predict(d, hidden, n_zero),
    }
    k_eig = jax.random.fold_in(key, 5)
    # the premises classify_collapse would compute (same options; their Lanczos start key the default), computed
    # once, inside the construction
    eq = geometry.collapsed_equilibrium(
        model,
        variables,
        a.widths_objective,
        c,
        a.widths_n,
        key=jax.random.fold_in(key, 3),
        residual_scale=scale,
        activation=activation,
        max_dense_dim=a.max_dense_dim,
    )
    cert = geometry.collapse_certificate(
        model, eq.loss_fn, eq.z, variables=variables, max_dense_dim=a.max_dense_dim, key=jax.random.fold_in(key, 4)
    )
    # classify_collapse's path with the premises reused; a sample-wise head: G and M block by block (per_sample)
    fn = as_function(model, variables, train=False)
    spec = geometry.collapse_spectrum(fn, eq.loss_fn, eq.z, max_dense_dim=a.max_dense_dim, key=k_eig, per_sample=True)
    res = geometry.thm41_conclusion(eq.premises, spec)
    row.update(
        {
            "certified": bool(eq.certified and res.premises.holds_except_smoothness),
            "rho_norm": float(eq.premises.residual_norm),
            "conclusion": cert.conclusion,
            "critical_scale": float(cert.critical_scale),
            "critical_residual": float(scale * cert.critical_scale),
            "block_null_dims": [int(x) for x in cert.block_null_dims],
            "null_curvature": float(cert.null_curvature),
            "m_on_null": bool(cert.null_dim > 0 and cert.critical_scale == 0.0),
            "cert_method": cert.method,
            "lambda_min_H_eff": float(res.lambda_min["full"]),
            "lambda_max_H_eff": float(res.lambda_max["full"]),
            "eig_tol": float(res.eig_tol),
            "method": res.method,
            "seconds": time.perf_counter() - t0,
        }
    )
    return row


def sweep(cfg, key) -> dict:
    """Every head of :func:`heads_of`: ``{"rows", "seconds_by_width", "seconds"}`` (the wall time per rung label)."""
    rows, per_width, t_all = [], dict[str, float](), time.perf_counter()
    for spec in heads_of(cfg, key):
        t0 = time.perf_counter()
        r = head_row(cfg, spec.dims, spec.activation, spec.construction, spec.seed, spec.scale, spec.key)
        if r is not None:
            rows.append(r)
        label = rung_label(spec.dims)
        per_width[label] = per_width.get(label, 0.0) + time.perf_counter() - t0
    return {"rows": rows, "seconds_by_width": per_width, "seconds": time.perf_counter() - t_all}


# ----------------------------------------------------------------------------- the rule


def outcome(row) -> str:
    """How one row of the sweep enters the rule of ``thm4.1-rank-predicts-stability``:

    * ``"not certified"``, ``"no prediction"`` (certificate: premise violated): not counted;
    * ``"rank mismatch"``: some block's ``dim null(G)`` differs from ``predicted_null_dim`` (refutes (c));
    * ``"above critical"``: class ``full`` or ``bottleneck`` with ``critical_scale <= 1`` (the residual is
      not below its critical scale; the class makes no sign prediction there): not counted;
    * ``"M zero on null(G)"``: class ``rank-drop`` whose certificate finds ``M`` vanishing on ``null(G)``
      (``m_on_null`` false): not counted;
    * ``"match"`` / ``"sign mismatch"``: the measured sign (:func:`measured_sign` of ``lambda_min_H_eff``
      with ``eig_tol``) equals / differs from ``PREDICTED_SIGN[class]``.
    """
    if not row["certified"]:
        return "not certified"
    if row["conclusion"] == NO_PREDICTION:
        return "no prediction"
    if any(x != row["predicted_null_dim"] for x in row["block_null_dims"]):
        return "rank mismatch"
    cls = row["predicted_class"]
    if cls == "rank-drop":
        if not row["m_on_null"]:
            return "M zero on null(G)"
    elif not row["critical_scale"] > 1.0:
        return "above critical"
    sign = measured_sign(row["lambda_min_H_eff"], row["eig_tol"])
    return "match" if sign == PREDICTED_SIGN[cls] else "sign mismatch"


def _label(r) -> str:
    return f"{r['width']}/{r['activation']}/{r['construction']}/seed {r['seed']}/scale {r['residual_scale']:g}"


def decide_rank_predicts_stability(rows, zero_tol: float) -> dict:
    """The rule of ``thm4.1-rank-predicts-stability`` (experiments/claims/sec4.py) on the sweep's rows.

    Rows whose prediction used another ``zero_tol`` than the registered one are refused (``ValueError``: stale
    measurements). Each row's :func:`outcome`. Not supported if any row is a ``rank mismatch`` or ``sign mismatch`` (named);
    inconclusive if no ``full`` row and no ``rank-drop`` row is a ``match`` (both sides of the prediction must
    be tested); supported otherwise.
    """
    stale = sorted({r["zero_tol"] for r in rows if r["zero_tol"] != zero_tol})
    if stale:
        raise ValueError(
            f"rows predicted with zero_tol {stale}, the registered threshold is {zero_tol!r}: measure the sweep again."
        )
    outs = [(r, outcome(r)) for r in rows]
    count = {
        o: sum(x == o for _, x in outs)
        for o in (
            "match",
            "sign mismatch",
            "rank mismatch",
            "above critical",
            "M zero on null(G)",
            "not certified",
            "no prediction",
        )
    }
    per_class = {c: sum(x == "match" and r["predicted_class"] == c for r, x in outs) for c in CLASSES}
    deciding = {
        "heads": len(rows),
        **{o.replace(" ", "_").replace("(", "").replace(")", ""): v for o, v in count.items()},
        **{f"matched_{c.replace('-', '_')}": v for c, v in per_class.items()},
    }
    item = {"id": RANK_PREDICTS_STABILITY, "deciding": deciding}
    bad = [(r, x) for r, x in outs if x in ("rank mismatch", "sign mismatch")]
    if bad:
        return {
            **item,
            "verdict": "not supported",
            "reason": f"{len(bad)} of {len(rows)} heads contradict the rank prediction: "
            + ", ".join(
                f"{_label(r)} ({x}: predicted {r['predicted_class']}, null dim {r['predicted_null_dim']}; "
                f"measured null dims {sorted(set(r['block_null_dims']))}, lambda_min(H_eff) = "
                f"{r['lambda_min_H_eff']:.3g}, tol {r['eig_tol']:.2g})"
                for r, x in bad[:5]
            ),
        }
    if not (per_class["full"] and per_class["rank-drop"]):
        return {
            **item,
            "verdict": "inconclusive",
            "reason": (
                f"the prediction is tested on both sides only with a matched full-rank and a matched "
                f"rank-drop head; matched: {per_class['full']} full, {per_class['rank-drop']} rank-drop "
                f"({count['not certified']} not certified, {count['above critical']} above critical, "
                f"{count['M zero on null(G)']} with M zero on null(G))"
            ),
        }
    return {
        **item,
        "verdict": "supported",
        "reason": (
            f"the rank predicted from the head and c matches dim null(G), and the predicted sign the "
            f"measured lambda_min(H_eff), at all {count['match']} counted heads ({per_class['full']} full "
            f"rank: stable; {per_class['rank-drop']} rank drop: unstable; {per_class['bottleneck']} "
            f"bottleneck: degenerate); not counted: {count['above critical']} above critical, "
            f"{count['M zero on null(G)']} with M zero on null(G), {count['not certified']} not "
            "certified"
        ),
    }


def decide_item(measurements) -> dict:
    """The claim's item; inconclusive, saying why, where the sweep was not measured (a dry run, or measurements
    from before the sweep existed)."""
    if "widths" not in measurements:
        why = "dry run: " if "dry_run" in measurements else ""
        return {
            "id": RANK_PREDICTS_STABILITY,
            "verdict": "inconclusive",
            "deciding": {},
            "reason": why + "the width sweep is not in the measurements",
        }
    return decide_rank_predicts_stability(
        measurements["widths"]["rows"], claims.claim(RANK_PREDICTS_STABILITY).thresholds["zero_tol"]
    )
