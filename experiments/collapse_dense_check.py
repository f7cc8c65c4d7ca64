"""An independent float64 check of collapse_hessians' certified equilibria: ``lambda_min(H_eff)`` from closed forms.

At a collapsed equilibrium ``z_i = c`` of a one-hidden-layer bias-free head ``h(x) = sigma(x W1) W2`` and a loss that
is a sum over samples, ``H_eff`` is block diagonal by sample, and block ``i`` is

    J^T H_L,ii J + M_i,   J = W2^T diag(sigma'(a)) W1^T,   M_i = W1 diag(sigma''(a) * (W2 rho_i)) W1^T,   a = c W1.

``H_L,ii`` and ``rho_i`` come in closed form from the two constructions of
:func:`ssl_geometry.geometry.collapsed_equilibrium`:

* ``mse_target``, ``L = (1/n) sum_i |u_i - t_i|^2``: ``H_L,ii = (2/n) I`` and ``rho_i = (2/n)(u* - t_i)``;
* ``dino_fixed_teacher``, ``L = -(1/n) sum_i P_i . log softmax(u_i / tau_s)`` with ``P_i = softmax(T_i / tau_t)``:
  ``H_L,ii = (diag(q) - q q^T) / (n tau_s^2)`` and ``rho_i = (q - P_i) / (n tau_s)``, ``q = softmax(u* / tau_s)``.

So ``lambda_min(H_eff) = min_i lambda_min(block i)``, each block solved by NumPy's ``eigvalsh``. None of this runs the
library's certificate, Lanczos, loss Hessians or sample-block kernels: only the head's weights, ``sigma'`` and
``sigma''`` by ``jax.grad`` of the activation, and dense float64 algebra. The experiment's state is rebuilt with its
own keys (:func:`experiments.collapse_hessians.certificates.equilibrium_state`), and ``|rho|`` is compared with the
stored row, so that the check is known to be about the same state.

    python -m experiments.collapse_dense_check results/history/collapse_hessians-paper-21639b2055fae003/results.json \
        --objective dino_fixed_teacher
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from experiments.collapse_hessians.cases import all_cases
from experiments.collapse_hessians.certificates import equilibrium_state
from experiments.configs import collapse_hessians as config_module
from ssl_geometry import activations, geometry

#: The temperatures of the DINO construction: ``collapsed_equilibrium``'s defaults, which the experiment keeps.
_DEFAULTS = inspect.signature(geometry.collapsed_equilibrium).parameters
STUDENT_TEMP, TEACHER_TEMP = _DEFAULTS["student_temp"].default, _DEFAULTS["teacher_temp"].default


def dense_blocks(W1, W2, act, c, objective, targets) -> dict:
    """``{"lambda_min_H_eff", "lambda_min_G", "lambda_max_G", "rounding", "sign", "rho_norm"}`` from the module
    docstring's closed forms; ``rounding = d eps max|lambda|`` (a dense float64 eigensolve's) and ``sign`` the sign of
    ``lambda_min(H_eff)`` beyond it
    (``W1`` ``(d, h)``, ``W2`` ``(h, k)``, ``act`` a name :func:`ssl_geometry.activations.get` knows, ``c`` ``(d,)``,
    ``targets`` the construction's ``(n, k)`` targets or teacher logits)."""
    W1, W2, c = (np.asarray(x, np.float64) for x in (W1, W2, c))
    targets = np.asarray(targets, np.float64)
    n = targets.shape[0]
    f = activations.get(act)
    a = c @ W1
    u = np.asarray(f(jnp.asarray(a))) @ W2
    s1 = np.asarray(jax.vmap(jax.grad(f))(jnp.asarray(a)))
    s2 = np.asarray(jax.vmap(jax.grad(jax.grad(f)))(jnp.asarray(a)))
    J = W2.T @ (s1[:, None] * W1.T)  # (k, d)
    if objective == "mse_target":
        HL = (2.0 / n) * np.eye(u.size)
        rho = (2.0 / n) * (u[None, :] - targets)
    elif objective == "dino_fixed_teacher":
        q = np.asarray(jax.nn.softmax(jnp.asarray(u) / STUDENT_TEMP))
        HL = (np.diag(q) - np.outer(q, q)) / (n * STUDENT_TEMP**2)
        P = np.asarray(jax.nn.softmax(jnp.asarray(targets) / TEACHER_TEMP, axis=1))
        rho = (q[None, :] - P) / (n * STUDENT_TEMP)
    else:
        raise ValueError(f"`objective` must be one of {geometry.EQUILIBRIUM_OBJECTIVES}; got {objective!r}.")
    G = J.T @ HL @ J
    G = 0.5 * (G + G.T)
    eG = np.linalg.eigvalsh(G)
    coef = s2[None, :] * (rho @ W2.T)  # (n, h): sigma''(a) * (W2 rho_i)
    if np.max(np.abs(coef)) == 0.0:  # an affine or piecewise-linear head: M_i = 0, every block is G
        lmin = float(eG[0])
    else:
        lmin = min(float(np.linalg.eigvalsh(G + W1 @ (coef[i][:, None] * W1.T))[0]) for i in range(n))
    rounding = W1.shape[0] * float(np.finfo(np.float64).eps) * max(abs(lmin), abs(float(eG[-1])))
    return {
        "lambda_min_H_eff": lmin,
        "lambda_min_G": float(eG[0]),
        "lambda_max_G": float(eG[-1]),
        "rounding": rounding,
        "sign": 0 if abs(lmin) <= rounding else (1 if lmin > 0 else -1),
        "rho_norm": float(np.linalg.norm(rho)),
    }


def check_case(cfg, index, objective, activation, scale) -> dict:
    """:func:`dense_blocks` at equilibrium case ``index`` of ``cfg`` (rebuilt from the experiment's key)."""
    key = jax.random.fold_in(jax.random.PRNGKey(cfg.seed), index)
    _, variables, eq = equilibrium_state(cfg, objective, activation, key, scale)
    layers = variables["params"]["layers"]
    if len(layers) != 2:
        raise ValueError(f"the closed forms need a one-hidden-layer head; case {index} has {len(layers)} layers.")
    return dense_blocks(layers[0]["w"], layers[1]["w"], activation, eq.z[0], objective, eq.targets)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", help="a collapse_hessians results.json (its variant's config is rebuilt)")
    p.add_argument("--objective", choices=geometry.EQUILIBRIUM_OBJECTIVES, default=None)
    args = p.parse_args(argv)
    jax.config.update("jax_enable_x64", True)
    try:
        with open(args.results) as fh:
            res = json.load(fh)
        cfg = config_module.get_config(res["variant"])
        rows = res["measurements"]["cases"]
        certs = {c["case"]: c for c in res["measurements"]["certificates"]}
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(
            f"collapse_dense_check: `results` must be a collapse_hessians results.json with its cases and "
            f"certificates ({args.results}: {type(e).__name__}: {e})",
            file=sys.stderr,
        )
        return 2
    bad = 0
    for i, (o, act, bn, state, s) in enumerate(all_cases(cfg)):
        if state != "equilibrium" or bn or (args.objective and o != args.objective):
            continue
        t0 = time.perf_counter()
        got, row = check_case(cfg, i, o, act, s), rows[i]
        same = np.isclose(got["rho_norm"], row["rho_norm"], rtol=1e-9, atol=0.0)
        bad += not same
        print(
            f"{o}/{act}/{s}: dense lambda_min(H_eff) {got['lambda_min_H_eff']:.6e} (lambda_min(G) "
            f"{got['lambda_min_G']:.6e}, rounding {got['rounding']:.1e}); experiment "
            f"{row['lambda_min_H_eff']:.3e} +- {row['eig_tol']:.2e}; certificate {certs[i]['predicted_sign']:+d}, "
            f"dense sign {got['sign']:+d}; |rho| {'same' if same else 'DIFFERS'} ({got['rho_norm']:.9e}); "
            f"{time.perf_counter() - t0:.0f} s",
            flush=True,
        )
    if bad:
        print(f"collapse_dense_check: {bad} rebuilt state(s) differ from the stored rows", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
