"""Config: experiment 0, the paper's released results re-analysed (``experiments/paper_data/``).

Nothing is trained: the experiment reads the authors' arrays vendored in
``experiments/paper_results/`` (GitHub farischaudhry/projection-head-geometry, commit 117231d,
``results/``; MIT) and recomputes the paper's numbers with the paper's definitions
(:mod:`ssl_geometry.paper`) and with the project's estimators (:mod:`ssl_geometry.metrics`)
beside them. Every variant is the same computation (seconds on one CPU core); ``tiny``,
``smoke`` and ``paper`` exist so that ``reproduce --variant ...`` finds them. Deviations from
the authors' code: none in the estimators (each is the paper's formula, see
``ssl_geometry.paper``); the project's escape criterion and growth-rate fit are the project's,
labelled as such. The rule and its tolerance are the registry's (``experiments/claims/``:
``released-arrays``).
"""

import ml_collections

from experiments import configs


def base() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(
        {
            "seed": 0,  # unused (no randomness); kept so that reproduce --seed works uniformly
            "data": {
                "root": "",  # "" = experiments/paper_results next to this package
            },
            "analysis": {
                # Spearman as hessian_tracker.plot_hessian_composite: epochs 1..99 (epoch 0 dropped).
                "spearman_first_epoch": 1,
                # The project's escape criterion (dynamics.escape_time "std_threshold", as experiment 4):
                # std of L2-normalised outputs > escape_fraction / sqrt(head_dim).
                "escape_fraction": 0.5,
                "head_dim": 2048,  # the paper's projector/predictor output width k
                # Growth rate: least-squares slope of log(std) per epoch from this epoch on (epoch 0 is the
                # average over the first epoch, which starts from the un-collapsed initialisation).
                "growth_first_epoch": 1,
            },
        }
    )


VARIANTS = {"tiny": {}, "smoke": {}, "paper": {}}


def get_config(arg=None) -> ml_collections.ConfigDict:
    return configs.build(base(), VARIANTS, arg)
