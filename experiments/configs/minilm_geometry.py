"""Config: Sec. 5 on a real text foundation model (all-MiniLM-L6-v2 + a trained SSL head).

Data: English sentences from Python's own documentation (``pydoc_data.topics``, stdlib;
see :func:`ssl_geometry.text.python_docs_sentences`), drawn deterministically by ``seed``.
Views: backbone dropout noise (SimCSE) plus token augmentations (``augment``).
"""
import ml_collections


def get_config(variant: str = "smoke") -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.seed = 0
    # Data.
    c.n_train = 256
    c.n_eval = 64
    c.max_length = 48  # tokens per sentence incl. [CLS]/[SEP]; fixed padding, one compile
    # Head: smooth MLP so that the interaction term M of H_eff is not zero (DESIGN.md s.2).
    c.head_hidden = 512
    c.head_out = 128
    c.head_activation = "gelu"
    c.head_batch_norm = False
    # Objective: SimCSE's InfoNCE (temperature 0.05) on dropout + token-augmented views.
    c.loss = "info_nce"
    c.temperature = 0.05
    c.augment = ml_collections.ConfigDict({"deletion": 0.1, "span": 0.0, "crop": 1.0, "masking": 0.0,
                                           "shuffle_window": 0.0})
    c.embed_batch = 64
    # Frozen backbone: precomputed bank of `view_bank` dropout+augmentation views per
    # training sentence (the backbone is fixed, so its views can be drawn once);
    # each head step pairs two distinct bank views of each sentence of the batch.
    c.view_bank = 6
    c.frozen_steps = 300
    c.frozen_batch = 64
    c.frozen_lr = 1e-3
    # Fine-tuned backbone: live views through the backbone, Adam on both, small backbone lr.
    c.finetune_steps = 6
    c.finetune_batch = 16
    c.finetune_lr_head = 1e-3
    c.finetune_lr_backbone = 2e-5
    # Measurements.
    c.n_views = 4  # augmentation directions per evaluation sentence
    c.n_between = 8  # other-sentence directions per evaluation sentence (context)
    c.n_hessian = 4  # batch for the dense H_eff (n * 384 dimensions, float64)
    c.bootstrap = 2000
    c.expected_runtime = ("463 s measured on 2 CPU cores shared with other jobs (load average ~12); "
                          "an idle machine should need a few minutes (not measured)")
    if variant == "tiny":
        c.n_train, c.n_eval, c.max_length = 24, 12, 24
        c.head_hidden, c.head_out = 64, 32
        c.view_bank, c.frozen_steps, c.frozen_batch = 3, 30, 12
        c.finetune_steps = 0  # the live fine-tuning step is exercised in tests/test_text.py
        c.n_views, c.n_between, c.n_hessian, c.bootstrap = 2, 4, 2, 200
        c.embed_batch = 12
        c.expected_runtime = "41 s measured on 2 shared CPU cores (load average ~10), mostly XLA compiles"
    elif variant == "smoke":
        pass
    elif variant == "paper":
        # Not a setting of the paper (its Sec. 5 is on images): a larger text run for an
        # accelerator, SimCSE-like sizes.
        c.n_train, c.n_eval, c.max_length = 800, 256, 64  # the corpus holds ~1100 sentences
        c.head_hidden, c.head_out = 2048, 256
        c.view_bank, c.frozen_steps, c.frozen_batch = 16, 3000, 128
        c.finetune_steps, c.finetune_batch = 500, 64
        c.n_views, c.n_between, c.n_hessian = 8, 16, 8
        c.embed_batch = 128
        c.expected_runtime = "about 10-20 min on one GPU (not yet run on an accelerator)"
    else:
        raise ValueError(f"unknown variant {variant!r}; expected 'tiny', 'smoke' or 'paper'")
    return c
