"""Experiment 8, core: views, head training through ``training.loop.fit``, geometry of one head; H_eff
(:func:`effective_hessian_at_data`) is in :mod:`.hessian`, the two-view loss (:func:`loss_fn`) in :mod:`.objective`."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from experiments import rules
from ssl_geometry import as_function, fit, geometry, metrics, text
from ssl_geometry import paper as P

from .hessian import effective_hessian_at_data
from .objective import loss_fn

__all__ = [
    "CONTROLS",
    "view_fn",
    "negative_view_fn",
    "views",
    "loss_fn",
    "train_frozen",
    "train_finetune",
    "head_geometry",
    "effective_hessian_at_data",
]

#: The Sec. 5 controls of the registry (``experiments/claims/``): exact isotropic tangent directions,
#: directions to other sentences, Gaussian directions with the covariance of the evaluation embeddings
#: (projected to the tangent space).
CONTROLS = rules.SEC5_RATIO_CONTROLS


def _tok_slice(tokens, idx):
    return text.Tokens(tokens.input_ids[idx], tokens.attention_mask[idx])


def view_fn(model, augment):
    """jit: (variables, tokens, key) -> z of one training-style view (token aug + dropout)."""

    @jax.jit
    def view(variables, tokens, key):
        ka, kd = jax.random.split(key)
        t = text.augment_tokens(ka, tokens, **augment)
        return model.apply(variables, t, train=True, rng=kd)[0]

    return view


def negative_view_fn(model, augment):
    """jit: (variables, tokens, key) -> z of the negative control's view: the token augmentation ``augment``
    alone, in eval mode (no dropout), so that none of the training views' noise enters the direction."""

    @jax.jit
    def view(variables, tokens, key):
        return model.apply(variables, text.augment_tokens(key, tokens, **augment), train=False)[0]

    return view


def views(view, variables, tokens, keys, batch):
    """Stack of views ``(len(keys), n, d)``; chunks of ``batch`` sentences (padded to one shape)."""
    ids, mask = np.asarray(tokens.input_ids), np.asarray(tokens.attention_mask)
    n, L = ids.shape
    out = []
    for key in keys:
        rows = []
        for i in range(0, n, batch):
            ci, cm = ids[i : i + batch], mask[i : i + batch]
            short = batch - ci.shape[0]
            if short:
                ci = np.concatenate([ci, np.tile(ci[:1], (short, 1))])
                cm = np.concatenate([cm, np.tile(cm[:1], (short, 1))])
            rows.append(
                view(variables, text.Tokens(jnp.asarray(ci), jnp.asarray(cm)), jax.random.fold_in(key, i))[
                    : batch - short
                ]
            )
        out.append(jnp.concatenate(rows))
    return jnp.stack(out)


@functools.lru_cache(maxsize=None)
def _frozen_loss(head, two_view_loss):
    """``(params, state, batch, args) -> (loss, new_state)`` on a batch of bank view pairs (one object per head)."""

    def objective(params, state, batch, args):
        za, zb = batch["za"], batch["zb"]
        u, new_state = head.apply({**state, "params": params}, jnp.concatenate([za, zb]), train=True)
        return two_view_loss(u[: za.shape[0]], u[za.shape[0] :]), {**state, **new_state}

    return objective


def _fit_in_calls(objective, params, state, opt, steps, per_call, make_batches):
    """Run ``fit`` over ``steps`` steps, ``per_call`` per call, with ``make_batches(first_step, n)``."""
    per_call = min(per_call, steps)
    if steps % per_call:
        raise ValueError(f"steps ({steps}) must be a multiple of `train.fit_steps` ({per_call}).")
    opt_state, out = None, []
    for s0 in range(0, steps, per_call):
        res = fit(
            objective, params, opt, steps=per_call, batches=make_batches(s0, per_call), state=state, opt_state=opt_state
        )
        params, state, opt_state = res.params, res.state, res.opt_state
        out.append(np.asarray(res.losses))  # blocks until the call is done
    return params, state, np.concatenate(out)


@functools.lru_cache(maxsize=None)
def _frozen_optimizer(lr: float):
    """Adam on the head (one object per learning rate: ``fit`` caches its compiled program per optimizer)."""
    return optax.adam(lr)


@functools.lru_cache(maxsize=None)
def _finetune_optimizer(lr_head: float, lr_backbone: float):
    """Adam on head and backbone at their own learning rates (one object per pair, as :func:`_frozen_optimizer`)."""
    return optax.multi_transform(
        {"head": optax.adam(lr_head), "backbone": optax.adam(lr_backbone)}, {"head": "head", "backbone": "backbone"}
    )


def train_frozen(head, head_vars, bank, cfg, key):
    """Adam on the head only; each step pairs two distinct bank views of each batch sentence.

    ``bank``: ``(V, n, d)`` backbone views; the pairs of step ``s`` are drawn on the host from
    ``default_rng([seed, s])``. Returns ``(head_vars, losses)``; a non-finite step raises ``FitError``.
    """
    del key  # pairs are drawn on the host, reproducibly from the seed
    t = cfg.train
    bank = np.asarray(bank)
    V, n, _ = bank.shape

    def make_batches(s0, m):
        za, zb = [], []
        for s in range(s0, s0 + m):
            rng = np.random.default_rng([cfg.seed, s])
            idx = rng.choice(n, t.frozen_batch, replace=False)
            a = rng.integers(0, V, t.frozen_batch)
            b = (a + rng.integers(1, V, t.frozen_batch)) % V  # b != a
            za.append(bank[a, idx])
            zb.append(bank[b, idx])
        return {"za": jnp.asarray(np.stack(za)), "zb": jnp.asarray(np.stack(zb))}

    state = {k: v for k, v in head_vars.items() if k != "params"}
    params, state, losses_ = _fit_in_calls(
        _frozen_loss(head, loss_fn(cfg)),
        head_vars["params"],
        state,
        _frozen_optimizer(float(t.frozen_lr)),
        t.frozen_steps,
        t.fit_steps,
        make_batches,
    )
    return {**state, "params": params}, losses_


def train_finetune(model, bb_vars, head, head_vars, tokens, cfg, key):
    """Joint Adam (head lr, small backbone lr) with live dropout + token-augmented views (``text.fit_two_view``).

    One ``fit`` over all steps; under ``dry_run`` one call per step (the one-step program the dry run's
    projection times, compiled once; the Adam state restarts at each call, which a 2-step run does not care about).
    """
    t = cfg.train
    opt = _finetune_optimizer(float(t.finetune_lr_head), float(t.finetune_lr_backbone))
    rng = np.random.default_rng(cfg.seed + 1)
    n, steps = tokens.input_ids.shape[0], t.finetune_steps
    idx = np.stack([np.sort(rng.choice(n, t.finetune_batch, replace=False)) for _ in range(steps)])
    ids, mask = np.asarray(tokens.input_ids)[idx], np.asarray(tokens.attention_mask)[idx]
    keys = jnp.stack([jax.random.fold_in(key, s) for s in range(steps)])
    calls = [(s, s + 1) for s in range(steps)] if cfg.dry_run else [(0, steps)]
    losses_ = []
    for a, b in calls:
        res = text.fit_two_view(
            model,
            head,
            loss_fn(cfg),
            opt,
            bb_vars,
            head_vars,
            tokens=text.Tokens(jnp.asarray(ids[a:b]), jnp.asarray(mask[a:b])),
            keys=keys[a:b],
            finetune=True,
            augment=dict(cfg.augment),
        )
        bb_vars, head_vars = res.backbone, res.head
        losses_.append(np.asarray(res.losses))
    return bb_vars, head_vars, np.concatenate(losses_)


@functools.partial(jax.jit, static_argnames=("head", "n_random", "n_between"))
def _measure_core(head, hv, z, views, neg_views, key, *, n_random, n_between):
    """Jitted float64 core of :func:`head_geometry` (arrays only; see there)."""
    hfn = as_function(head, hv)
    n, d = z.shape
    u = hfn(z)
    u_views = jax.vmap(hfn)(views)  # (V, n, k): the head on every view (the orbits)
    eranks = {
        f"erank_{m}_{nm}": metrics.effective_rank(a, m)
        for m in metrics.EFFECTIVE_RANK_METHODS
        for nm, a in (("z", z), ("u", u))
    }
    G = geometry.pullback_metric(hfn, z).euclidean  # (n, d, d), G_i = J_i^T J_i
    eig = jnp.linalg.eigvalsh(G)[:, ::-1]  # descending
    # Exact isotropic tangent-space baseline: E|Jv|^2/|v|^2 = tr(P G P)/(d-1), P = I - z z^T.
    zn = z / jnp.linalg.norm(z, axis=1, keepdims=True)
    P = jnp.eye(d, dtype=z.dtype) - zn[:, :, None] * zn[:, None, :]
    g_rand = jnp.sqrt(jnp.einsum("nab,nbc,nca->n", P, G, P) / (d - 1))
    deg = jax.vmap(jax.vmap(lambda zi, vi: metrics.metric_degeneracy(hfn, zi, vi), in_axes=(None, 0)))
    V_aug = jnp.swapaxes(views - z[None], 0, 1)  # (n, V, d): v = z(view) - z(clean)
    gains_aug = deg(z, V_aug)  # |J v| / |v| by jvp
    V_neg = jnp.swapaxes(neg_views - z[None], 0, 1)  # (n, V', d); a view that left the tokens unchanged is 0
    vgv = jnp.einsum("nva,nab,nvb->nv", V_aug, G, V_aug) / jnp.sum(V_aug**2, axis=-1)
    k1, k2 = jax.random.split(key)
    R = jax.random.normal(k1, (n, n_random, d), z.dtype)
    R = R - jnp.einsum("nvd,nd->nv", R, zn)[..., None] * zn[:, None]  # tangent to the sphere
    others = jax.random.randint(k2, (n, n_between), 1, n)
    Vb = z[(jnp.arange(n)[:, None] + others) % n] - z[:, None]
    # data control: Gaussian directions with the covariance of the evaluation embeddings, tangent to the sphere
    Rd = jnp.einsum(
        "nvm,md->nvd", jax.random.normal(jax.random.fold_in(k1, 7), (n, n_random, n), z.dtype), z - jnp.mean(z, axis=0)
    ) / jnp.sqrt(n)
    Rd = Rd - jnp.einsum("nvd,nd->nv", Rd, zn)[..., None] * zn[:, None]
    return {
        **eranks,
        "eig": eig,
        "g_rand": g_rand,
        "gains_aug": gains_aug,
        "vgv": vgv,
        "u_views": u_views,
        "aug_norms": jnp.linalg.norm(V_aug, axis=-1),
        "neg_norms": jnp.linalg.norm(V_neg, axis=-1),
        "gains_neg": deg(
            z, jnp.where(jnp.linalg.norm(V_neg, axis=-1, keepdims=True) > 0, V_neg, R[:, : V_neg.shape[1]])
        ),  # zero directions replaced, masked on the host
        "g_rand_sampled": jnp.sqrt(jnp.mean(deg(z, R) ** 2, axis=1)),
        "g_between": jnp.sqrt(jnp.mean(deg(z, Vb) ** 2, axis=1)),
        "g_data": jnp.sqrt(jnp.mean(deg(z, Rd) ** 2, axis=1)),
    }


def head_geometry(head, head_vars, z, views, neg_views, cfg, key):
    """Geometry of one head at the evaluation embeddings ``z`` (n, d), views ``(V, n, d)``.

    Float64 throughout (head parameters and embeddings are cast). Per sentence ``i``: ``g_aug,i =
    sqrt(mean_v |J_h v|^2 / |v|^2)`` over ``v = z(view) - z(clean)`` of the training views,
    ``g_neg,i`` the same over the negative control's views (``neg_views``, ``(V', n, d)``), and the
    control gains ``g_c,i`` (see the package docstring); ``D_c`` = :func:`experiments.rules.degeneracy_ratio`
    of each against each control. The orbit of a sentence is its ``V`` training views: the paper's
    spread (:func:`ssl_geometry.paper.orbit_spreads`, L2-normalised) of z and of h(z) per sentence,
    their ratio :func:`experiments.rules.orbit_compression`.
    """
    with jax.enable_x64(True):
        hv = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64), head_vars)
        z = jnp.asarray(z, jnp.float64)
        views, neg_views = jnp.asarray(views, jnp.float64), jnp.asarray(neg_views, jnp.float64)
        r = jax.tree_util.tree_map(
            np.asarray,
            _measure_core(
                head, hv, z, views, neg_views, key, n_random=4 * cfg.analysis.n_views, n_between=cfg.analysis.n_between
            ),
        )
    n, d = z.shape
    if np.min(r["aug_norms"]) == 0.0:
        raise ValueError(
            "a training view equals its clean embedding (zero direction); check the augmentation / dropout settings."
        )
    eig = r["eig"]
    spec = eig.mean(axis=0)
    g_aug = np.sqrt(np.mean(r["gains_aug"] ** 2, axis=1))
    ctl = {"random": r["g_rand"], "data": r["g_data"], "between": r["g_between"]}
    # The negative control's views: a token augmentation can leave a short sentence unchanged (a zero
    # direction, no direction at all); the RMS is over the sentence's non-zero ones, and a sentence without
    # one is left out of the negative control's ratios.
    moved = r["neg_norms"] > 0
    g_neg = np.sqrt(np.sum(np.where(moved, r["gains_neg"] ** 2, 0.0), axis=1) / np.maximum(moved.sum(1), 1))
    use = moved.any(axis=1)
    if use.sum() < 2:
        raise ValueError(
            f"the negative control's augmentation {dict(cfg.analysis.negative)} changed fewer than 2 "
            "evaluation sentences."
        )
    V = views.shape[0]
    ids = np.repeat(np.arange(n), V)
    orbit_z = P.orbit_spreads(np.swapaxes(np.asarray(views), 0, 1).reshape(n * V, d), ids)
    orbit_u = P.orbit_spreads(np.swapaxes(r["u_views"], 0, 1).reshape(n * V, -1), ids)
    out = {k: float(v) for k, v in r.items() if k.startswith("erank_")}
    out.update(
        {
            "G_spectrum_mean": spec.tolist(),
            "G_lambda_max": float(spec[0]),
            "G_trace_per_dim": float(spec.sum() / d),
            "G_participation_ratio": float(spec.sum() ** 2 / np.sum(spec**2)),
            "G_frac_below_1e-3_max": float(np.mean(eig < 1e-3 * eig[:, :1])),
            "jvp_vs_G_max_rel_err": float(np.max(np.abs(r["gains_aug"] ** 2 - r["vgv"]) / r["vgv"])),
            "views": {c: rules.degeneracy_ratio(g_aug, g, seed=cfg.seed) for c, g in ctl.items()},
            "negative": {c: rules.degeneracy_ratio(g_neg[use], g[use], seed=cfg.seed) for c, g in ctl.items()},
            "negative_zero_views": int(np.sum(~moved)),
            "negative_sentences_used": int(use.sum()),
            "orbit_compression": rules.orbit_compression(orbit_z, orbit_u, seed=cfg.seed),
            "gains": {
                "views": g_aug.tolist(),
                "negative": np.where(use, g_neg, np.nan).tolist(),
                **{c: g.tolist() for c, g in ctl.items()},
            },
            "orbit_spreads": {"z": orbit_z.tolist(), "u": orbit_u.tolist()},
            "frac_sentences_aug_below": {c: float(np.mean(g_aug < g)) for c, g in ctl.items()},
            "gain_aug_mean": float(np.mean(g_aug)),
            "gain_negative_mean": float(np.mean(g_neg[use])),
            "gain_random_exact_mean": float(np.mean(r["g_rand"])),
            "gain_random_sampled_mean": float(np.mean(r["g_rand_sampled"])),
            "gain_between_mean": float(np.mean(r["g_between"])),
            "gain_data_mean": float(np.mean(r["g_data"])),
            "aug_direction_norm_mean": float(np.mean(r["aug_norms"])),
            "negative_direction_norm_mean": float(np.mean(r["neg_norms"])),
        }
    )
    return out
