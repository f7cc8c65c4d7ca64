"""The README's complete small run: SimCLR on the embedded 8x8 digits, MLP backbone, 600 steps,
offline ridge / kNN / rotation probes on backbone and head (a few minutes on 2 CPU cores).

    python -m ssl_geometry.train --config experiments/configs/small.py --workdir runs/small
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import tiny

#: The variants ``get_config`` accepts after ``:`` on the command line (``python -m ssl_geometry.train`` refuses others).
VARIANTS = ()


def get_config(arg=None):
    del arg
    c = tiny.get_config()
    c.objective.name = "simclr"
    c.objective.temperature = 0.2
    c.model.backbone = "mlp"
    c.model.backbone_kwargs = {"hidden": (256,), "out_dim": 32, "batch_norm": True}
    c.model.projector = {
        "hidden": (128,),
        "out_dim": 64,
        "activation": "relu",
        "batch_norm": True,
        "final_batch_norm": False,
        "bias": True,
        "scale": 1.0,
    }
    c.optimizer.update(name="adam", lr=3e-3, weight_decay=0.0, warmup_steps=30, probe_lr=1e-2)
    c.data.batch_size = 128
    c.train.update(steps=600, log_every=50, metrics_every=200, checkpoint_every=200)
    c.eval.update(rotation=True, rotation_epochs=5)
    return c
