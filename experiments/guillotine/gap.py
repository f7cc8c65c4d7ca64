"""The rule of ``guillotine-probe-gap`` (experiment 6): the rotation-probe gap ``acc(z) - acc(h(z))`` of the trained
and the untrained head, their difference with a paired bootstrap interval over test images and seeds
(:func:`probe_gap_interval`), and the verdict (:func:`gap_verdict`, :func:`decide_gap`) as the registry words it.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from experiments import claims

GAP = "guillotine-probe-gap"


def gap(rot: dict, head: str = "head") -> float:
    """Rotation-probe gap z - h(z): mean over the linear and MLP probes."""
    return 0.5 * sum(rot["backbone"][k] - rot[head][k] for k in ("linear", "mlp"))


#: The rotation probes whose gaps are averaged, and the representations a gap compares.
PROBES = ("linear", "mlp")
_GAP_REPS = ("backbone", "head", "head_untrained")


def _outcomes(per_seed: Sequence[Mapping]) -> list[np.ndarray]:
    """Per seed, the ``(3, 2, n)`` 0/1 array ``[rep, probe, test image]`` of :func:`probe_gap_interval`'s input."""
    if len(per_seed) < 1:
        raise ValueError("`per_seed` must hold the probe outcomes of at least one seed; got none.")
    out = []
    for s, rec in enumerate(per_seed):
        try:
            c = np.asarray([[np.asarray(rec[w][p], np.float64) for p in PROBES] for w in _GAP_REPS])
        except KeyError as err:
            raise ValueError(
                f"`per_seed[{s}]` must map each of {_GAP_REPS} to each of {PROBES}; missing {err}"
            ) from None
        except ValueError:
            raise ValueError(
                f"`per_seed[{s}]`: every probe outcome of a seed must be a 1-D 0/1 sequence over the same test images"
            ) from None
        if c.ndim != 3 or c.shape[2] < 2 or not np.all((c == 0) | (c == 1)):
            raise ValueError(
                f"`per_seed[{s}]`: probe outcomes must be 0/1 per test image, at least 2 images, the same "
                f"images for every representation; got shape {c.shape[1:]} per representation"
            )
        out.append(c)
    return out


def probe_gap_interval(per_seed: Sequence[Mapping], *, reps: int, seed: int = 0) -> dict:
    """The trained head's rotation-probe gap, the untrained head's, and their difference, with 95% intervals.

    ``per_seed``: one ``{rep: {probe: c}}`` per training seed, ``rep`` in backbone (z), head (h(z)) and
    head_untrained (h_0(z), the head at initialisation on the same z), ``probe`` in :data:`PROBES`, ``c`` the
    probe's outcome per test image (1 right, 0 wrong; the same test images, in the same order, for every rep of
    a seed). Per seed ``s`` and test image ``i``::

        g_si  = mean_p (c^z_psi - c^h_psi)        the gap, acc(z) - acc(h(z)), averaged over the probes
        g0_si = mean_p (c^z_psi - c^h0_psi)       the untrained head's gap
        d_si  = g_si - g0_si = mean_p (c^h0_psi - c^h_psi)   trained minus untrained (z cancels)

    ``gap = mean_s mean_i g_si``, ``gap_untrained`` and ``difference`` alike. Intervals: ``reps`` bootstrap
    resamples, each drawing the seeds with replacement and, within each drawn seed, its test images with
    replacement (paired: one draw of images serves every rep and probe); the 2.5% and 97.5% quantiles of the
    resampled means (one seed: the paired bootstrap over test images). ``seed`` seeds the resampling.
    Returns ``{"gap", "gap_ci", "gap_untrained", "gap_untrained_ci", "difference", "difference_ci", "seeds",
    "test_images"}``.
    """
    if not isinstance(reps, int) or reps < 100:
        raise ValueError(f"`reps` must be an int >= 100 (bootstrap resamples); got {reps!r}.")
    outcomes = _outcomes(per_seed)
    # per seed, per image: the three per-image statistics (g, g0, d) as a (3, n) array
    stats = [np.stack([(c[0] - c[1]).mean(0), (c[0] - c[2]).mean(0), (c[2] - c[1]).mean(0)]) for c in outcomes]
    S = len(stats)
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, S, (reps, S))  # the seeds of each resample
    boot = np.zeros((reps, 3))
    for j in range(S):  # draw slot j: an independent image resample of every seed, used where slot j drew it
        for k, st in enumerate(stats):
            n = st.shape[1]
            means = st[:, rng.integers(0, n, (reps, n))].mean(axis=2).T  # (reps, 3)
            boot += np.where((pick[:, j] == k)[:, None], means, 0.0)
    boot /= S
    point = np.mean([st.mean(axis=1) for st in stats], axis=0)
    lo, hi = np.quantile(boot, [0.025, 0.975], axis=0)
    out = {"seeds": S, "test_images": [int(st.shape[1]) for st in stats]}
    for i, name in enumerate(("gap", "gap_untrained", "difference")):
        out[name], out[f"{name}_ci"] = float(point[i]), [float(lo[i]), float(hi[i])]
    return out


def gap_outcomes(rot: Mapping) -> dict:
    """``{rep: {probe: per-test-image outcomes}}`` of one seed from the stored rotation probes ``rot``."""
    return {w: {p: rot[w][f"{p}_test_correct"] for p in PROBES} for w in _GAP_REPS}


def gap_verdict(stats: Mapping, margin: float) -> tuple[str, str]:
    """``(verdict, reason)`` of ``guillotine-probe-gap`` from :func:`probe_gap_interval` (premises met).

    Supported: the difference's interval lies above ``margin`` and the trained gap's above 0. Not supported: the
    difference's interval lies below 0 (the trained head keeps more rotation information than at its
    initialisation) or the trained gap's below 0 (h(z) more decodable than z). Inconclusive otherwise.
    """
    (dlo, dhi), (glo, ghi) = stats["difference_ci"], stats["gap_ci"]
    desc = (
        f"trained minus untrained gap {stats['difference']:.3g} (95% interval [{dlo:.3g}, {dhi:.3g}]), trained "
        f"gap {stats['gap']:.3g} ([{glo:.3g}, {ghi:.3g}]), the untrained head's gap {stats['gap_untrained']:.3g}"
    )
    if dhi < 0.0 or ghi < 0.0:
        why = (
            "training leaves the head more rotation-decodable than at initialisation"
            if dhi < 0.0
            else "rotation is more decodable from h(z) than from z"
        )
        return "not supported", f"{why}: {desc}"
    if dlo > margin and glo > 0.0:
        return "supported", f"{desc}: the difference's lower end > {margin:g} and the gap's > 0"
    return "inconclusive", (
        f"{desc}: the difference's interval does not lie above {margin:g}"
        if dlo <= margin
        else f"{desc}: the trained gap's interval reaches 0"
    )


def decide_gap(m: dict) -> dict:
    """``guillotine-probe-gap`` by the registry's rule: premises, then the trained-minus-untrained gap difference
    with its interval over test images and seeds (:func:`probe_gap_interval`, :func:`gap_verdict`)."""
    t, pv, rot = claims.CLAIMS[GAP].thresholds, m["premise_values"], m["probes"]["rotation"]
    extra = m["probes"].get("gap_seeds", [])
    stats = probe_gap_interval(
        [gap_outcomes(rot)] + [gap_outcomes(r["rotation"]) for r in extra], reps=int(t["bootstrap"]), seed=0
    )
    premises = {
        "ssl_loss_decreased": pv["loss_last_10pct"] < pv["loss_first_10pct"],
        "backbone_encodes_rotation": pv["backbone_rotation_acc"] >= t["min_backbone_rotation_acc"],
        "backbone_not_collapsed": pv["erank_rankme_backbone"] >= t["min_effective_rank"],
    }
    deciding = {
        "rotation_gap_difference": stats["difference"],
        "rotation_gap_difference_ci": stats["difference_ci"],
        "rotation_gap_mean": stats["gap"],
        "rotation_gap_mean_ci": stats["gap_ci"],
        "rotation_gap_mean_untrained_head": stats["gap_untrained"],
        "rotation_gap_mean_untrained_head_ci": stats["gap_untrained_ci"],
        "seeds": stats["seeds"],
        "rotation_probe_test_images": stats["test_images"],
        "rotation_gap_difference_per_seed": [
            gap(r) - gap(r, "head_untrained") for r in [rot] + [e["rotation"] for e in extra]
        ],
        **{f"rot_{k[:3]}_{w}": rot[w][k] for w in _GAP_REPS for k in PROBES},
        **pv,
    }
    item = {"id": GAP, "deciding": deciding}
    unmet = sorted(k for k, ok in premises.items() if not ok)
    if unmet:
        return {
            **item,
            "verdict": "premise violated",
            "reason": "premises not met: " + ", ".join(unmet) + f"; the untrained head's gap is "
            f"{stats['gap_untrained']:.3g}, the trained head's {stats['gap']:.3g}",
        }
    verdict, reason = gap_verdict(stats, float(t["probe_margin"]))
    return {**item, "verdict": verdict, "reason": reason}
