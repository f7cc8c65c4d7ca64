"""Vision Transformer modules (Flax) and position-embedding interpolation, PyTorch-compatible.

Part of :mod:`ssl_geometry.backbones` (re-exported there): the DINO / timm
``vision_transformer.py`` layout (patch embedding, pre-norm blocks, cls token), and the
bicubic position-embedding resize of PyTorch's ``F.interpolate`` (``align_corners=False``,
``A = -0.75``) that DINO uses for other input sizes.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

Dtype = Any

__all__ = [
    "Attention",
    "Block",
    "MlpBlock",
    "PatchEmbed",
    "VisionTransformer",
    "bicubic_resize_matrix",
    "interpolate_pos_embed",
]


def _cubic_weights(t: np.ndarray, a: float = -0.75) -> np.ndarray:
    """Keys cubic-convolution weights for offsets ``t`` in [0, 1) at taps -1, 0, 1, 2 (PyTorch's A=-0.75)."""

    def c1(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def c2(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return np.stack([c2(t + 1), c1(t), c1(1 - t), c2(2 - t)], axis=-1)


def bicubic_resize_matrix(in_size: int, out_size: int, scale_factor: float | None = None) -> np.ndarray:
    """Matrix ``A`` (out_size, in_size) with ``A @ v`` = PyTorch's 1-D bicubic resize of ``v``.

    Reproduces ``torch.nn.functional.interpolate(mode="bicubic", align_corners=False)``:
    output pixel ``i`` samples the source at ``s = (i + 0.5) / scale_factor - 0.5`` (``scale_factor``
    defaults to ``out_size / in_size``), with cubic-convolution weights (``a = -0.75``) at
    ``floor(s) - 1 .. floor(s) + 2`` and indices clamped to the border.
    """
    scale = 1.0 / scale_factor if scale_factor else in_size / out_size
    src = (np.arange(out_size, dtype=np.float64) + 0.5) * scale - 0.5
    i0 = np.floor(src)
    w = _cubic_weights(src - i0)
    A = np.zeros((out_size, in_size), np.float64)
    for k in range(4):
        idx = np.clip(i0.astype(np.int64) - 1 + k, 0, in_size - 1)
        np.add.at(A, (np.arange(out_size), idx), w[:, k])
    return A


def interpolate_pos_embed(pos_embed, grid_h: int, grid_w: int):
    """DINO's ``interpolate_pos_encoding``: bicubic resize of the patch position grid.

    ``pos_embed`` is ``(1, 1 + N, D)`` (cls position first, ``N = g^2`` patch positions on a square
    ``g x g`` grid). When the target grid is ``g x g`` it is returned unchanged; otherwise the grid is
    resized with PyTorch bicubic interpolation at ``scale_factor = ((grid_h + 0.1) / g, (grid_w + 0.1) / g)``
    exactly as ``facebookresearch/dino`` ``vision_transformer.py`` does (the ``+0.1`` avoids a
    floating-point off-by-one; it also shifts the sampling positions slightly, which we reproduce).
    """
    n = pos_embed.shape[1] - 1
    g = int(round(math.sqrt(n)))
    if g * g != n:
        raise ValueError(f"`pos_embed` must hold 1 + g^2 positions for a square grid; got {pos_embed.shape[1]}.")
    if grid_h == g and grid_w == g:
        return pos_embed
    Ah = jnp.asarray(bicubic_resize_matrix(g, grid_h, (grid_h + 0.1) / g), pos_embed.dtype)
    Aw = jnp.asarray(bicubic_resize_matrix(g, grid_w, (grid_w + 0.1) / g), pos_embed.dtype)
    grid = pos_embed[0, 1:].reshape(g, g, -1)
    new = jnp.einsum("ih,jw,hwd->ijd", Ah, Aw, grid, precision=jax.lax.Precision.HIGHEST)
    return jnp.concatenate([pos_embed[:, :1], new.reshape(1, grid_h * grid_w, -1)], axis=1)


class PatchEmbed(nn.Module):
    """``patch_embed.proj``: a ``p x p`` stride-``p`` convolution, then flatten to tokens."""

    dim: int
    patch: int
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, x):
        x = nn.Conv(
            self.dim,
            (self.patch, self.patch),
            strides=(self.patch, self.patch),
            padding="VALID",
            dtype=self.dtype,
            param_dtype=self.param_dtype,
            kernel_init=nn.initializers.truncated_normal(0.02),
            name="proj",
        )(x)
        return x.reshape(x.shape[0], -1, self.dim)


class Attention(nn.Module):
    """Multi-head self-attention: ``softmax(q k^T / sqrt(d_head)) v`` with a fused ``qkv`` projection."""

    dim: int
    heads: int
    qkv_bias: bool = True
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, x):
        b, n, c = x.shape
        dense = partial(
            nn.Dense, dtype=self.dtype, param_dtype=self.param_dtype, kernel_init=nn.initializers.truncated_normal(0.02)
        )
        qkv = dense(3 * c, use_bias=self.qkv_bias, name="qkv")(x)
        qkv = qkv.reshape(b, n, 3, self.heads, c // self.heads).transpose(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = jax.nn.softmax((q @ jnp.swapaxes(k, -1, -2)) * (c // self.heads) ** -0.5, axis=-1)
        out = (attn @ v).transpose(0, 2, 1, 3).reshape(b, n, c)
        return dense(c, name="proj")(out)


class MlpBlock(nn.Module):
    """Transformer MLP ``fc2(gelu(fc1(x)))`` (exact erf GELU, as ``nn.GELU()``)."""

    dim: int
    hidden: int
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, x):
        dense = partial(
            nn.Dense, dtype=self.dtype, param_dtype=self.param_dtype, kernel_init=nn.initializers.truncated_normal(0.02)
        )
        return dense(self.dim, name="fc2")(jax.nn.gelu(dense(self.hidden, name="fc1")(x), approximate=False))


class Block(nn.Module):
    """Pre-norm transformer block: ``x + attn(norm1(x))`` then ``x + mlp(norm2(x))``."""

    dim: int
    heads: int
    mlp_ratio: float = 4.0
    qkv_bias: bool = True
    eps: float = 1e-6
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, x):
        kw = dict(dtype=self.dtype, param_dtype=self.param_dtype)
        x = x + Attention(self.dim, self.heads, self.qkv_bias, name="attn", **kw)(
            nn.LayerNorm(self.eps, name="norm1", **kw)(x)
        )
        return x + MlpBlock(self.dim, int(self.dim * self.mlp_ratio), name="mlp", **kw)(
            nn.LayerNorm(self.eps, name="norm2", **kw)(x)
        )


class VisionTransformer(nn.Module):
    """DINO/timm ``VisionTransformer`` without classifier; returns the normalised cls token."""

    img_size: int = 224
    patch: int = 16
    dim: int = 384
    depth: int = 12
    heads: int = 6
    mlp_ratio: float = 4.0
    qkv_bias: bool = True
    eps: float = 1e-6
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, x, train: bool = False):
        del train  # no dropout / drop-path at inference; kept for the common signature
        kw = dict(dtype=self.dtype, param_dtype=self.param_dtype)
        b, h, w, _ = x.shape
        g = self.img_size // self.patch
        tokens = PatchEmbed(self.dim, self.patch, name="patch_embed", **kw)(jnp.asarray(x, self.dtype))
        init = nn.initializers.truncated_normal(0.02)
        cls = self.param("cls_token", init, (1, 1, self.dim), self.param_dtype)
        pos = self.param("pos_embed", init, (1, g * g + 1, self.dim), self.param_dtype)
        tokens = jnp.concatenate([jnp.broadcast_to(cls.astype(self.dtype), (b, 1, self.dim)), tokens], axis=1)
        tokens = tokens + interpolate_pos_embed(pos, h // self.patch, w // self.patch).astype(self.dtype)
        for i in range(self.depth):
            tokens = Block(self.dim, self.heads, self.mlp_ratio, self.qkv_bias, self.eps, name=f"blocks_{i}", **kw)(
                tokens
            )
        tokens = nn.LayerNorm(self.eps, name="norm", **kw)(tokens)
        return tokens[:, 0]


# ----------------------------------------------------------------------------- Model wrappers
