"""The repaired Thm 4.1 across widths: the rank of ``J(c)``, predicted from the head and ``c`` before the state exists.

docs/theory.md, section "Thm 4.1 repaired: when a collapsed equilibrium is unstable", parts (c) and (d):
for a one-hidden-layer head ``d -> h -> k`` (``h(z) = sigma(z W1) W2``, bias-free, so the pre-activation
at ``c`` is ``a = c W1``), ``J(c) = W2^T diag(sigma'(a)) W1^T`` and, for generic weights,

    rank J(c) = min(d, h - #{j : sigma'(a_j) = 0}).

So, from the head and ``c`` alone (:func:`predict`), with ``n0`` the units at a zero of ``sigma'``:

* ``"full"`` (``h >= d`` and ``n0 <= h - d``): ``J`` has full column rank, ``G > 0``, and the
  equilibrium is stable at every residual below its critical scale (``s* > 0``);
* ``"rank-drop"`` (``n0 > max(h - d, 0)``): ``dim null(J) = d - (h - n0)`` directions that ``M``
  curves for a generic residual: unstable at every residual scale (part (a));
* ``"bottleneck"`` (``h < d``, ``n0 = 0``): a constant-rank bottleneck, ``M = 0`` on ``null(J)``:
  ``d - h`` exact zero directions, degenerate, not unstable.

The sweep (:func:`sweep`) draws, per width ``(d, h, k)`` of ``analysis.widths``, smooth activation and
seed, three heads: ``random`` (the initialiser's draw), ``rank_drop`` (``h - d + 1`` columns of ``W1``
moved so that ``c W1`` hits the zero of ``sigma'``: :func:`place_at_zero`; no head for an activation
whose ``sigma'`` has no zero, e.g. tanh) and ``bottleneck`` (``d -> d // 2 -> k``). For each head the
prediction is written into its row first; then, for each residual scale, a fresh head and ``c`` (a
new key per scale: the head is solved anew, the residual not rescaled) gives the certified equilibrium
(:func:`ssl_geometry.geometry.collapsed_equilibrium`, ``n = analysis.widths_n`` samples), its
certificate (:func:`ssl_geometry.geometry.collapse_certificate`) and the measured ``lambda_min(H_eff)``
(:func:`ssl_geometry.geometry.classify_collapse`, Lanczos above ``analysis.max_dense_dim``).
:func:`decide_rank_predicts_stability` is the rule of ``thm4.1-rank-predicts-stability``.
"""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

from experiments import claims
from experiments.collapse_hessians.certificates import measured_sign
from ssl_geometry import activations, as_function, geometry, heads

RANK_PREDICTS_STABILITY = "thm4.1-rank-predicts-stability"
CONSTRUCTIONS = ("random", "rank_drop", "bottleneck")
CLASSES = ("full", "rank-drop", "bottleneck")
#: The predicted sign of lambda_min(H_eff) per class, at a residual below the state's critical scale.
PREDICTED_SIGN = {"full": 1, "rank-drop": -1, "bottleneck": 0}
_NO_PREDICTION = "premise violated (G not PSD)"


@functools.lru_cache(maxsize=None)
def _sigma_prime(activation: str):
    """``x -> sigma'(x)`` elementwise on a 1-D array, jitted once per activation name."""
    fn = activations.get(activation)
    return jax.jit(jax.vmap(jax.grad(lambda x: fn(x))))


@functools.lru_cache(maxsize=None)
def sigma_prime_zero(activation, lo: float = -8.0, hi: float = 8.0, num: int = 1601) -> float | None:
    """The first zero of ``sigma'`` on ``[lo, hi]``: a sign change of ``sigma'`` on a grid of ``num`` points,
    bisected in float64 to adjacent floats; ``None`` when ``sigma'`` keeps one sign on the grid (tanh,
    sigmoid, softplus). Swish: ``-1.2785``; GELU (erf): ``-0.7518``."""
    if not (lo < hi and num >= 2):
        raise ValueError(f"need lo < hi and num >= 2; got lo={lo}, hi={hi}, num={num}.")
    sp = _sigma_prime(activation)
    x = np.linspace(lo, hi, num)
    v = np.asarray(sp(jnp.asarray(x, jnp.float64)))
    if not np.all(np.isfinite(v)):
        raise FloatingPointError(f"sigma' of {activation!r} is not finite on [{lo}, {hi}].")
    change = np.nonzero(np.sign(v[:-1]) * np.sign(v[1:]) <= 0)[0]
    if change.size == 0:
        return None
    a, b = float(x[change[0]]), float(x[change[0] + 1])
    fa = float(v[change[0]])
    if fa == 0.0:
        return a
    for _ in range(200):
        m = 0.5 * (a + b)
        if m in (a, b):
            break
        fm = float(sp(jnp.asarray([m], jnp.float64))[0])
        if fm == 0.0:
            return m
        a, b, fa = (m, b, fm) if np.sign(fm) == np.sign(fa) else (a, m, fa)
    return 0.5 * (a + b)


def units_at_zero(pre, activation, zero_tol: float) -> int:
    """``#{j : |sigma'(pre_j)| <= zero_tol}``: the hidden units at a zero of ``sigma'``."""
    if not zero_tol > 0:
        raise ValueError(f"`zero_tol` must be positive; got {zero_tol!r}.")
    v = np.asarray(_sigma_prime(activation)(jnp.asarray(np.ravel(pre), jnp.float64)))
    if not np.all(np.isfinite(v)):
        raise FloatingPointError("sigma' at the pre-activations is not finite.")
    return int(np.sum(np.abs(v) <= zero_tol))


def predict(d: int, h: int, n_zero: int) -> dict:
    """The prediction of part (c) from the widths and the count ``n_zero`` of units at a zero of ``sigma'``:
    ``rank = min(d, h - n_zero)``, ``null_dim = d - rank`` and the class (module docstring)."""
    if not (isinstance(d, int) and isinstance(h, int) and d >= 1 and h >= 1 and 0 <= n_zero <= h):
        raise ValueError(f"need ints d, h >= 1 and 0 <= n_zero <= h; got d={d!r}, h={h!r}, n_zero={n_zero!r}.")
    rank = min(d, h - n_zero)
    cls = "rank-drop" if n_zero > max(h - d, 0) else ("bottleneck" if h < d else "full")
    return {
        "predicted_class": cls,
        "predicted_rank": rank,
        "predicted_null_dim": d - rank,
        "predicted_sign": PREDICTED_SIGN[cls],
    }


def place_at_zero(w1, c, units, x0: float):
    """``W1`` with columns ``units`` moved along ``c`` so that ``(c W1)_j = x0`` exactly for ``j in units``:
    ``W1[:, j] += (x0 - c . W1[:, j]) c / |c|^2``."""
    w1, c = np.array(w1, np.float64), np.asarray(c, np.float64)
    cc = float(c @ c)
    if cc == 0.0:
        raise ValueError("`c` must be non-zero (no column of W1 can reach x0 at c = 0).")
    for j in units:
        w1[:, j] += (x0 - float(c @ w1[:, j])) * c / cc
    return w1


def draw_head(d: int, h: int, k: int, activation: str, construction: str, key):
    """``(model, variables, c)`` for one construction (module docstring); ``None`` for ``rank_drop`` when
    ``sigma'`` has no zero."""
    if construction not in CONSTRUCTIONS:
        raise ValueError(f"`construction` must be one of {CONSTRUCTIONS}; got {construction!r}.")
    hidden = max(1, d // 2) if construction == "bottleneck" else h
    model = heads.mlp(d, (hidden,), k, activation=activation, bias=False, dtype=jnp.float64)
    variables = model.init(jax.random.fold_in(key, 0))
    c = jax.random.normal(jax.random.fold_in(key, 1), (d,), jnp.float64)
    if construction == "rank_drop":
        x0 = sigma_prime_zero(activation)
        if x0 is None:
            return None
        layers = [dict(layer) for layer in variables["params"]["layers"]]
        units = np.asarray(jax.random.permutation(jax.random.fold_in(key, 2), h))[: h - d + 1]
        layers[0]["w"] = jnp.asarray(place_at_zero(layers[0]["w"], c, units, x0))
        variables = {**variables, "params": {**variables["params"], "layers": layers}}
    return model, variables, c


def head_row(cfg, d, h, k, activation, construction, seed, scale, key) -> dict | None:
    """One row: the prediction from the head and ``c`` (written first), then the equilibrium, its certificate
    and the measured ``lambda_min(H_eff)``. ``None`` when the construction has no head (``sigma'`` without a zero)."""
    a = cfg.analysis
    t0 = time.perf_counter()
    drawn = draw_head(d, h, k, activation, construction, key)
    if drawn is None:
        return None
    model, variables, c = drawn
    w1 = np.asarray(variables["params"]["layers"][0]["w"])
    hidden = w1.shape[1]
    zero_tol = claims.claim(RANK_PREDICTS_STABILITY).thresholds["zero_tol"]
    n_zero = units_at_zero(np.asarray(c) @ w1, activation, zero_tol)
    row = {
        "width": f"{d}->{h}->{k}",
        "d": d,
        "h": h,
        "k": k,
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
    """Every head of the sweep (module docstring): ``{"rows", "seconds_by_width", "seconds"}``. Each row's key is
    ``fold_in`` of the width, activation, construction, seed and residual-scale indices: a fresh head per scale."""
    a = cfg.analysis
    rows, per_width, t_all = [], {}, time.perf_counter()
    for iw, (d, h, k) in enumerate(a.widths):
        t0 = time.perf_counter()
        for ia, act in enumerate(a.widths_activations):
            for ic, con in enumerate(CONSTRUCTIONS):
                for seed in range(a.widths_seeds):
                    for js, scale in enumerate(a.widths_residual_scales):
                        kk = key
                        for i in (iw, ia, ic, seed, js):
                            kk = jax.random.fold_in(kk, i)
                        r = head_row(cfg, int(d), int(h), int(k), act, con, seed, float(scale), kk)
                        if r is not None:
                            rows.append(r)
        per_width[f"{d}->{h}->{k}"] = time.perf_counter() - t0
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
    if row["conclusion"] == _NO_PREDICTION:
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
