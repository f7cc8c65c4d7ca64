"""Config: experiment 8, Sec. 5 on a real text foundation model (all-MiniLM-L6-v2 + a trained SSL head).

Data: English sentences from Python's own documentation (``pydoc_data.topics``, stdlib; see
:func:`ssl_geometry.text.python_docs_sentences`), drawn deterministically by ``seed``. Views: backbone
dropout noise (SimCSE) plus token augmentations (``augment``); they are the head's training
augmentations, so the Sec. 5 rule counts them. Not a setting of the paper (its Sec. 5 is on
images): there is no ``paper`` variant of the authors' recipe, only a larger run for an accelerator.

Sec. 5 controls, fixed here before any run: the registry's random, between and data directions and
the untrained head (the same head at initialisation on the same embeddings); the negative control
``analysis.negative`` is local token shuffling (each token moves by less than 3 places; eval mode,
no dropout), a token augmentation of another kind (word order, not content) that the training
views (dropout + token deletion) never apply.
"""

import ml_collections

from experiments import configs


def base() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(
        {
            "seed": 0,
            "data": {"n_train": 256, "n_eval": 64, "max_length": 48},  # tokens incl. [CLS]/[SEP]; fixed padding
            # Smooth MLP head so that the interaction term M of H_eff is not zero
            # (docs/theory.md, section "Linear, ReLU and smooth heads").
            "model": {"head_hidden": 512, "head_out": 128, "head_activation": "gelu", "head_batch_norm": False},
            "augment": {"deletion": 0.1, "span": 0.0, "crop": 1.0, "masking": 0.0, "shuffle_window": 0.0},
            "train": {
                # SimCSE's InfoNCE (temperature 0.05) on dropout + token-augmented views.
                "loss": "info_nce",
                "temperature": 0.05,
                "embed_batch": 64,
                # Frozen backbone: a bank of view_bank views per training sentence, drawn once; each head step pairs
                # two distinct bank views of each sentence of the batch.
                "view_bank": 6,
                "frozen_steps": 300,
                "frozen_batch": 64,
                "frozen_lr": 1e-3,
                # Fine-tuned backbone: live views, Adam on both, small backbone lr.
                "finetune_steps": 6,
                "finetune_batch": 16,
                "finetune_lr_head": 1e-3,
                "finetune_lr_backbone": 2e-5,
                "fit_steps": 50,  # steps per training.loop.fit call (frozen steps are cheap dense layers)
            },
            "analysis": {
                "n_views": 4,  # augmentation directions per evaluation sentence (its orbit), and negative-control views
                "n_between": 8,  # other-sentence directions per evaluation sentence
                "n_hessian": 4,  # batch for H_eff (n * 384 dimensions, float64; dense up to 2048, matrix-free Lanczos above)
                # The negative control: token augmentations (text.augment_tokens) the training views do not use.
                "negative": {"deletion": 0.0, "span": 0.0, "crop": 1.0, "masking": 0.0, "shuffle_window": 3.0},
                # Label, not a threshold: the run cannot show invariance pressure if the frozen loss is below
                # easy_loss after easy_steps steps (the two-view task is then solved at once).
                "easy_loss": 1e-2,
                "easy_steps": 20,
            },
            "expected_runtime": (
                "463 s measured on 2 CPU cores shared with other jobs (load average ~12); an idle "
                "machine should need a few minutes (not measured)"
            ),
        }
    )


VARIANTS = {
    "tiny": {
        "data.n_train": 24,
        "data.n_eval": 12,
        "data.max_length": 24,
        "model.head_hidden": 64,
        "model.head_out": 32,
        "train.view_bank": 3,
        "train.frozen_steps": 30,
        "train.frozen_batch": 12,
        "train.fit_steps": 30,
        "train.finetune_steps": 0,
        "analysis.n_views": 2,
        "analysis.n_between": 4,
        "analysis.n_hessian": 2,
        "train.embed_batch": 12,
        "expected_runtime": "41 s measured on 2 shared CPU cores (load average ~10), mostly XLA compiles",
    },
    "smoke": {},
    # A larger text run for an accelerator, SimCSE-like sizes (the corpus holds ~1100 sentences).
    "paper": {
        "data.n_train": 800,
        "data.n_eval": 256,
        "data.max_length": 64,
        "model.head_hidden": 2048,
        "model.head_out": 256,
        "train.view_bank": 16,
        "train.frozen_steps": 3000,
        "train.frozen_batch": 128,
        "train.fit_steps": 500,
        "train.finetune_steps": 500,
        "train.finetune_batch": 64,
        "analysis.n_views": 8,
        "analysis.n_between": 16,
        "analysis.n_hessian": 8,
        "train.embed_batch": 128,
        "expected_runtime": "about 10-20 min on one GPU (not yet run on an accelerator)",
    },
}


def get_config(arg=None) -> ml_collections.ConfigDict:
    return configs.build(base(), VARIANTS, arg)
