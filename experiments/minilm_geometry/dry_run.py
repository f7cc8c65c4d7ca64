"""Experiment 8's dry run: the full variant's training and analysis, each timed at two reduced sizes and projected.

Both fits are ``t(n) = a n^p`` through the two measured points (:func:`experiments.projection.power_law_projection`),
projected as ``count * a * N^p``; each unit is called once untimed first (compilation excluded). Known bias, for
both: fixed per-call costs (dispatch, host-side batch assembly, a fresh ``fit`` per call) lower ``p`` at small
sizes, so the fit under-projects where they dominate, and a reduced batch underuses an accelerator.
"""

from __future__ import annotations

import jax
import ml_collections

from experiments import configs, projection
from ssl_geometry import geometry, text

from . import core as C

#: The analysis is timed at these fractions of the full variant's evaluation sentences (1/32 and 1/16 of the
#: paper's 256: 8 and 16 sentences). Each sentence costs ``1 + 2 n_views`` MiniLM passes at the paper's token
#: length: 1/8 and 1/4 (32 and 64 sentences, up to 1088 passes per unit) would add minutes to a CPU dry run.
ANALYSIS_FRACTIONS = (1 / 32, 1 / 16)


def _sized(cfg, overrides: dict) -> ml_collections.ConfigDict:
    """A copy of ``cfg`` with the dotted-key ``overrides`` set (:func:`experiments.configs.apply_overrides`)."""
    return configs.apply_overrides(ml_collections.ConfigDict(cfg.to_dict()), overrides)


def training_projection(pm, head, head0, bank, tok_train, full, cfg, key) -> dict:
    """Training of the full variant ``full`` projected from one step of each path at 1/8 and 1/4 of its batch.

    Paths: the frozen-backbone head step (:func:`core.train_frozen`, batch ``train.frozen_batch``, on the view
    ``bank``) and the fine-tuning step (:func:`core.train_finetune`: MiniLM and head, batch
    ``train.finetune_batch``, tokens ``tok_train``), each timed at 1/8 and 1/4 of its own full batch
    (:func:`experiments.projection.reduced_sizes`; one step per call, ``cfg``'s other settings). The unit is
    the mean step of the variant's schedule at each fraction, ``t(n) = (F t_frozen + T t_finetune) / (F + T)``
    with ``F``, ``T`` its frozen and fine-tuning steps; count ``F + T``. Scaled: the batch, labelled by the
    fine-tuning batch (the frozen one when ``T = 0``). One power law through the mixed mean is exact only when
    both paths share ``p``; each path's own points are kept in ``paths``.
    """
    t = full.train
    paths = {
        "frozen": (
            t.frozen_steps,
            t.frozen_batch,
            3,
            lambda n: _sized(cfg, {"train.frozen_batch": n, "train.frozen_steps": 1, "train.fit_steps": 1}),
        )
    }
    if t.finetune_steps > 0:
        paths["finetune"] = (
            t.finetune_steps,
            t.finetune_batch,
            2,
            lambda n: _sized(cfg, {"train.finetune_batch": n, "train.finetune_steps": 1}),
        )

    def unit(name, c):
        if name == "frozen":
            return lambda: C.train_frozen(head, head0, bank, c, key)
        return lambda: C.train_finetune(pm.model, pm.variables, head, head0, tok_train, c, key)

    timed = {
        name: projection.time_at_sizes(
            lambda n, name=name, mk=mk: unit(name, mk(n)), projection.reduced_sizes(batch), repeats
        )
        for name, (_, batch, repeats, mk) in paths.items()
    }
    label = "finetune" if "finetune" in paths else "frozen"
    total = sum(steps for steps, *_ in paths.values())
    points = [[n, sum(paths[p][0] * timed[p][i][1] for p in paths) / total] for i, (n, _) in enumerate(timed[label])]
    rec = projection.power_law_projection(points, paths[label][1], total)
    rec["paths"] = {p: {"steps": int(paths[p][0]), "batch_full": int(paths[p][1]), "points": timed[p]} for p in paths}
    return rec


def analysis_projection(pm, head, head_vars, view, neg_view, tokens, full, cfg, key, n_heads: int) -> dict:
    """The analysis of the full variant ``full`` projected from one head's evaluation at two sentence counts.

    Unit: one head's evaluation on ``n`` sentences (the first ``n`` of ``tokens``): its embeddings ``z``, the
    ``n_views`` training views (``view``) and negative-control views (``neg_view``) through MiniLM (chunks of
    ``cfg.train.embed_batch``), :func:`core.head_geometry` (per sentence: the pullback metric and its
    eigenvalues, the gains along views and controls) and :func:`core.effective_hessian_at_data` on
    ``max(2, round(n_hessian n / N))`` sentences (the loss needs two). The per-sentence counts (``n_views``,
    ``n_between``) are the full variant's. Scaled: the evaluation sentences ``n`` at :data:`ANALYSIS_FRACTIONS`
    of ``N = data.n_eval``; count ``n_heads`` (untrained, frozen, fine-tuned). Biases beyond the module's: the
    init and frozen heads share one set of views in the full run, so the count over-projects one embedding pass
    of three; ``H_eff`` is timed through the full variant's route (matrix-free Lanczos when its ``n_hessian *
    384`` dimensions exceed ``geometry.MATRIX_FREE_ABOVE``, as at the paper's 3072; dense otherwise) on 2 or
    so sentences, where Lanczos needs fewer steps than at the full size, so the fit under-projects it.
    """
    a, N = full.analysis, int(full.data.n_eval)
    sizes = projection.reduced_sizes(N, fractions=ANALYSIS_FRACTIONS)
    if max(sizes) > tokens.input_ids.shape[0]:
        raise ValueError(
            f"analysis_projection: `tokens` must hold at least {max(sizes)} sentences; got {tokens.input_ids.shape[0]}."
        )
    k_eval, k_meas = jax.random.split(key)
    eval_keys = jax.random.split(k_eval, a.n_views)
    neg_keys = [jax.random.fold_in(k, 1) for k in eval_keys]

    def make_unit(n):
        c = _sized(
            cfg,
            {
                "data.n_eval": n,
                "analysis.n_views": a.n_views,
                "analysis.n_between": a.n_between,
                "analysis.n_hessian": min(n, max(2, round(a.n_hessian * n / N))),
            },
        )
        tok, eb, nh = C._tok_slice(tokens, slice(0, n)), c.train.embed_batch, c.analysis.n_hessian

        def run():
            z = text.embed(pm.model, pm.variables, tok, batch_size=eb)
            vs = C.views(view, pm.variables, tok, eval_keys, eb)
            neg = C.views(neg_view, pm.variables, tok, neg_keys, eb)
            # the full variant's route: matrix-free when its n_hessian x width exceeds the threshold
            dense_dim = 1 if a.n_hessian * vs.shape[-1] > geometry.MATRIX_FREE_ABOVE else geometry.MATRIX_FREE_ABOVE
            return (
                C.head_geometry(head, head_vars, z, vs, neg, c, k_meas),
                C.effective_hessian_at_data(head, head_vars, vs[0, :nh], vs[1, :nh], c, max_dense_dim=dense_dim),
            )

        return run

    return projection.project_at_sizes(make_unit, N, n_heads, sizes=sizes, repeats=2)


def record(training: dict, analysis: dict, full) -> dict:
    """``measurements["dry_run"]``: both projections (:func:`experiments.projection.dry_run_record`); the step
    time is the training unit's (the schedule's mean step) at the larger reduced batch."""
    t = full.train
    return projection.dry_run_record(
        training["points"][-1][1],
        training=training,
        analysis=analysis,
        scaled="batch (training), sentences (analysis)",
        batch_full=int(t.finetune_batch if t.finetune_steps else t.frozen_batch),
        sentences_full=int(full.data.n_eval),
        training_steps_full=int(training["count"]),
        projection="training: mean step of the schedule at 1/8 and 1/4 of the batch; analysis: one head's "
        "evaluation at 1/32 and 1/16 of the evaluation sentences",
    )
