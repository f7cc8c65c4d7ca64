"""Vision backbones as pure ``(init, apply)`` :class:`~ssl_geometry.Model` pairs.

Every backbone maps images ``x`` of shape ``(n, H, W, C)`` (NHWC, float) to the
representation ``z = f(x)`` of shape ``(n, d)`` that the projection head sees.
Flax (``flax.linen``) defines the networks internally; the public face is the
:class:`~ssl_geometry.Model` pair::

    variables = model.init(key)       # {"params": ..., ["batch_stats": ...]}
    z, new_state = model.apply(variables, x, train=False)

``new_state`` is ``{"batch_stats": ...}`` for networks with BatchNorm (updated in
``train=True``, returned unchanged otherwise) and ``{}`` for networks without.

Backbones
---------
* :func:`mlp` -- fully connected network on vectors (delegates to :func:`ssl_geometry.heads.mlp`).
* :func:`small_cnn` -- a few strided 3x3 convolutions + global average pool, for 8x8..32x32 images.
* :func:`resnet18_cifar` -- torchvision ResNet-18 with the CIFAR stem (3x3 stride-1 ``conv1``, no
  max-pool), ``d = 512``, 11,168,832 parameters (He et al. 2016; the paper's SimSiam backbone).
* :func:`resnet50` -- torchvision ResNet-50 (v1.5: stride in the 3x3 conv), ImageNet stem,
  ``d = 2048``, 23,508,032 parameters without ``fc``.
* :func:`vit_tiny` -- the paper's ViT-Tiny: patch 4, width 192, depth 3, 3 heads, 32x32 input,
  cls token, 1,357,056 parameters.
* :func:`vit_small16` -- DINO ViT-S/16 (Caron et al. 2021, ``facebookresearch/dino``
  ``vision_transformer.py``): patch 16, width 384, depth 12, 6 heads, qkv bias, LayerNorm
  eps 1e-6, 21,665,664 parameters; ``z`` = cls token after the final norm.

The families behind them: :func:`resnet` (torchvision ResNet-18/34/50/101/152 without ``fc``) and
:func:`vit` (DINO/timm Vision Transformer); :func:`interpolate_pos_embed` resizes a ViT's patch position
grid bicubically (DINO's ``interpolate_pos_encoding``) with :func:`bicubic_resize_matrix`, PyTorch's 1-D
bicubic resize as a matrix.

BatchNorm (:class:`BatchNorm`) has PyTorch semantics: batch mean and *biased* batch
variance normalise in training, running statistics are updated as
``r <- 0.9 r + 0.1 batch`` (PyTorch ``momentum=0.1``) with the *unbiased* batch
variance, ``eps = 1e-5``; in eval mode the running statistics normalise.

Mapping from the official PyTorch key layouts
---------------------------------------------
Flax submodules carry the PyTorch attribute names, with ``.i`` list indices written
``_i``. A PyTorch state-dict key maps to a Flax variable path mechanically
(:func:`torch_key` gives the key for a path):

==========================================  =========================================
PyTorch key                                 Flax variable path
==========================================  =========================================
``conv1.weight`` ``(O, I, kh, kw)``          ``params/conv1/kernel`` ``(kh, kw, I, O)``
``bn1.weight`` / ``bn1.bias``               ``params/bn1/scale`` / ``params/bn1/bias``
``bn1.running_mean`` / ``running_var``      ``batch_stats/bn1/mean`` / ``batch_stats/bn1/var``
``layer1.0.conv1.weight``                   ``params/layer1_0/conv1/kernel``
``layer2.0.downsample.0.weight`` / ``.1.*``  ``params/layer2_0/downsample_0/kernel`` / ``downsample_1/*``
``cls_token``, ``pos_embed`` ``(1, N, D)``    ``params/cls_token``, ``params/pos_embed`` (same shape)
``patch_embed.proj.weight`` ``(D, C, p, p)``  ``params/patch_embed/proj/kernel`` ``(p, p, C, D)``
``blocks.i.attn.qkv.weight`` ``(3D, D)``      ``params/blocks_i/attn/qkv/kernel`` ``(D, 3D)``
``blocks.i.norm1.weight`` (LayerNorm)        ``params/blocks_i/norm1/scale``
``blocks.i.mlp.fc1.bias``, ``norm.bias``     ``params/blocks_i/mlp/fc1/bias``, ``params/norm/bias``
==========================================  =========================================

``num_batches_tracked`` (a PyTorch BatchNorm counter) has no counterpart: PyTorch uses it
only when ``momentum=None``.
"""

from ssl_geometry._src.models.backbones import BatchNorm as BatchNorm
from ssl_geometry._src.models.backbones import bicubic_resize_matrix as bicubic_resize_matrix
from ssl_geometry._src.models.backbones import interpolate_pos_embed as interpolate_pos_embed
from ssl_geometry._src.models.backbones import mlp as mlp
from ssl_geometry._src.models.backbones import resnet as resnet
from ssl_geometry._src.models.backbones import resnet18_cifar as resnet18_cifar
from ssl_geometry._src.models.backbones import resnet50 as resnet50
from ssl_geometry._src.models.backbones import small_cnn as small_cnn
from ssl_geometry._src.models.backbones import torch_key as torch_key
from ssl_geometry._src.models.backbones import vit as vit
from ssl_geometry._src.models.backbones import vit_small16 as vit_small16
from ssl_geometry._src.models.backbones import vit_tiny as vit_tiny

__all__ = [
    "BatchNorm",
    "mlp",
    "small_cnn",
    "resnet18_cifar",
    "resnet50",
    "vit_tiny",
    "vit_small16",
    "vit",
    "resnet",
    "bicubic_resize_matrix",
    "interpolate_pos_embed",
    "torch_key",
]
