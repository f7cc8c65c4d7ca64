"""Converters for the released self-supervised checkpoints (backbone AND head) into JAX variables.

The paper's pretrained-checkpoint experiments (``pretrained.ipynb``) use four official PyTorch
releases that ship the projection head next to the backbone:

===========================  =================================================  ==========================================
name                         file (official source)                             head
===========================  =================================================  ==========================================
``dino_vits16``              ``dino_deitsmall16_pretrain_full_checkpoint.pth``  DINOHead: 384-2048-2048-256 (GELU),
                                                                                L2-normalise, weight-normed 256->65536
``dino_resnet50``            ``dino_resnet50_pretrain_full_checkpoint.pth``     DINOHead from 2048 (BatchNorm in the
                                                                                head if the checkpoint has it)
``vicreg_resnet50``          ``resnet50_fullckpt.pth``                          expander 2048-8192-8192-8192, Linear+BN+ReLU,
                                                                                last Linear bias-free
``barlowtwins_resnet50``     ``checkpoint.pth``                                 projector 2048-8192-8192-8192, bias-free
                                                                                Linear+BN+ReLU, then BN(affine=False)
===========================  =================================================  ==========================================

Layouts (read from the official code):

* DINO, ``facebookresearch/dino`` ``main_dino.py``: ``save_dict = {"student": student.state_dict(),
  "teacher": teacher.state_dict(), "optimizer", "epoch", "args": argparse.Namespace, "dino_loss",
  "fp16_scaler"}``; the student is wrapped in DDP (keys ``module.backbone.*``, ``module.head.*``), the
  teacher only when the head has BatchNorm (otherwise ``backbone.*``, ``head.*``).
  ``vision_transformer.py``: ``DINOHead.mlp`` is an ``nn.Sequential`` of ``Linear, [BatchNorm1d], GELU``
  per hidden layer and a final ``Linear`` to the bottleneck; ``forward`` L2-normalises (``F.normalize``,
  eps 1e-12) and applies ``last_layer = weight_norm(Linear(bottleneck, out_dim, bias=False))`` with
  ``weight = weight_g * weight_v / ||weight_v||`` (row norms; ``weight_g`` (out, 1)). ResNet-50 is
  torchvision's with ``fc`` replaced by ``Identity`` (``utils.MultiCropWrapper``). Whether the head has
  BatchNorm (``--use_bn_in_head``) is read from the keys present.
* VICReg, ``facebookresearch/vicreg`` ``main_vicreg.py``: ``state = dict(epoch, model=model.state_dict(),
  optimizer)`` of the DDP model: ``module.backbone.*`` (``resnet.py``: torchvision key layout; its
  ``ConstantPad2d(1)`` + ``conv1`` padding 2 equals torchvision's padding 3) and ``module.projector.*``
  from ``Projector``: ``Linear(bias) , BatchNorm1d, ReLU`` per hidden layer, last ``Linear(bias=False)``.
* Barlow Twins, ``facebookresearch/barlowtwins`` ``main.py``: ``state = dict(epoch, model=model.state_dict(),
  optimizer)`` of the DDP model: ``module.backbone.*`` (torchvision ``resnet50``, ``fc = Identity``),
  ``module.projector.*`` (``Linear(bias=False), BatchNorm1d, ReLU`` per hidden layer, last
  ``Linear(bias=False)``) and ``module.bn`` (``BatchNorm1d(affine=False)``, used by the loss to
  normalise the projector output; included in the head when ``loss_bn=True``).

Widths are read from the tensor shapes, so checkpoints of the same layout with other widths
convert too (the tests use narrow heads). Every converter, and :func:`load_converted`, then checks
each tensor against the shapes its model expects (``jax.eval_shape`` of the model's ``init``):
a missing, extra or differently shaped tensor is a :class:`CheckpointLayoutError` naming the first
that differs. A name that is not a key of :data:`CHECKPOINTS` is refused, naming the known ones.

Loading is safe: ``torch.load(path, map_location="cpu", weights_only=True)`` (only tensors,
containers and primitive types unpickle; DINO's ``argparse.Namespace`` is allow-listed, it only
holds the training arguments), and everything that is not a tensor is dropped. A file carrying any
other pickled object (e.g. a code-execution payload) is refused with :class:`UnsafeCheckpointError`
before anything in it runs; a file that is not a checkpoint or is damaged (a torch file, or a
safetensors file for :func:`load_converted`: truncated, another format, a config that is not JSON)
raises :class:`CorruptCheckpointError` naming the path, one without tensors :class:`CheckpointLayoutError`.
``torch`` is imported lazily: this module imports without it, and :func:`save_converted` /
:func:`load_converted` need only NumPy and ``safetensors``.

Also here: the records :class:`Pretrained` (a converted checkpoint: backbone and head models with their
variables) and :class:`CheckpointInfo` (file name, download URL, layout source of each entry of
:data:`CHECKPOINTS`); one converter per checkpoint, :func:`convert_dino_resnet50`,
:func:`convert_dino_vits16`, :func:`convert_barlowtwins_resnet50`, :func:`convert_vicreg_resnet50`, built
from :func:`load_torch_checkpoint`, :func:`variables_from_torch`, :func:`resnet_from_torch` and
:func:`vit_from_torch`; the heads :func:`dino_head`, :func:`barlowtwins_projector`,
:func:`vicreg_projector`; and the input normalisation :func:`imagenet_normalize` with
:data:`IMAGENET_MEAN` and :data:`IMAGENET_STD`.
"""

from ssl_geometry._src.models.pretrained import CHECKPOINTS as CHECKPOINTS
from ssl_geometry._src.models.pretrained import IMAGENET_MEAN as IMAGENET_MEAN
from ssl_geometry._src.models.pretrained import IMAGENET_STD as IMAGENET_STD
from ssl_geometry._src.models.pretrained import CheckpointInfo as CheckpointInfo
from ssl_geometry._src.models.pretrained import CheckpointLayoutError as CheckpointLayoutError
from ssl_geometry._src.models.pretrained import CorruptCheckpointError as CorruptCheckpointError
from ssl_geometry._src.models.pretrained import Pretrained as Pretrained
from ssl_geometry._src.models.pretrained import UnsafeCheckpointError as UnsafeCheckpointError
from ssl_geometry._src.models.pretrained import barlowtwins_projector as barlowtwins_projector
from ssl_geometry._src.models.pretrained import convert_barlowtwins_resnet50 as convert_barlowtwins_resnet50
from ssl_geometry._src.models.pretrained import convert_dino_resnet50 as convert_dino_resnet50
from ssl_geometry._src.models.pretrained import convert_dino_vits16 as convert_dino_vits16
from ssl_geometry._src.models.pretrained import convert_vicreg_resnet50 as convert_vicreg_resnet50
from ssl_geometry._src.models.pretrained import dino_head as dino_head
from ssl_geometry._src.models.pretrained import imagenet_normalize as imagenet_normalize
from ssl_geometry._src.models.pretrained import load_converted as load_converted
from ssl_geometry._src.models.pretrained import load_torch_checkpoint as load_torch_checkpoint
from ssl_geometry._src.models.pretrained import resnet_from_torch as resnet_from_torch
from ssl_geometry._src.models.pretrained import save_converted as save_converted
from ssl_geometry._src.models.pretrained import variables_from_torch as variables_from_torch
from ssl_geometry._src.models.pretrained import vicreg_projector as vicreg_projector
from ssl_geometry._src.models.pretrained import vit_from_torch as vit_from_torch

__all__ = [
    "CHECKPOINTS",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "CheckpointInfo",
    "CheckpointLayoutError",
    "CorruptCheckpointError",
    "Pretrained",
    "UnsafeCheckpointError",
    "barlowtwins_projector",
    "convert_barlowtwins_resnet50",
    "convert_dino_resnet50",
    "convert_dino_vits16",
    "convert_vicreg_resnet50",
    "dino_head",
    "imagenet_normalize",
    "load_converted",
    "load_torch_checkpoint",
    "resnet_from_torch",
    "save_converted",
    "variables_from_torch",
    "vicreg_projector",
    "vit_from_torch",
]
