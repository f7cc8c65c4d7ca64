"""Token-level augmentations of a :class:`~ssl_geometry.text.Tokens` batch (the text views).

:func:`token_deletion`, :func:`token_masking`, :func:`span_deletion`, :func:`random_crop`,
:func:`local_shuffle`, composed by :func:`augment_tokens`, are pure, jit-able functions of a key
and a batch; they keep ``[CLS]`` first, ``[SEP]`` last, at least one content token, and re-pack
the kept tokens to the left so that the mask stays a right-padded prefix.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ssl_geometry._src.checks import check_positive
from ssl_geometry._src.models.text import MASK_ID, PAD_ID, Tokens, check_tokens

Array = jax.Array

__all__ = ["token_deletion", "token_masking", "span_deletion", "random_crop", "local_shuffle", "augment_tokens"]


def _layout(mask):
    """Per-row length ``m`` and masks of content positions (not [CLS], [SEP], padding)."""
    mask = mask > 0
    L = mask.shape[-1]
    length = jnp.sum(mask, axis=-1, keepdims=True)
    pos = jnp.arange(L)[None]
    content = mask & (pos > 0) & (pos < length - 1)
    return pos, length, content


def _repack(ids, keep):
    """Move kept tokens (``keep`` True) left in their original order; pad the rest.

    Returns ``Tokens`` with ``attention_mask = 1`` on the first ``sum(keep)`` positions.
    """
    order = jnp.argsort(jnp.logical_not(keep), axis=-1, stable=True)
    new_ids = jnp.take_along_axis(ids, order, axis=-1)
    n_keep = jnp.sum(keep, axis=-1, keepdims=True)
    new_mask = jnp.arange(ids.shape[-1])[None] < n_keep
    return Tokens(jnp.where(new_mask, new_ids, PAD_ID).astype(ids.dtype), new_mask.astype(jnp.int32))


def _at_least_one(keep, content, pos):
    """If a row would keep no content token, keep its first one (rows without content unchanged)."""
    none_kept = ~jnp.any(keep & content, axis=-1, keepdims=True)
    first = content & (pos == jnp.argmax(content, axis=-1)[:, None])
    return keep | (none_kept & first)


def _check_rate(rate, name):
    if not 0.0 <= float(rate) < 1.0:
        raise ValueError(f"`{name}` must lie in [0, 1); got {rate!r}.")


def token_deletion(key: Array, tokens: Tokens, rate: float) -> Tokens:
    """Delete each content token independently with probability ``rate`` (then re-pack).

    [CLS]/[SEP] are kept, and at least one content token per row.
    """
    _check_rate(rate, "rate")
    ids, mask = check_tokens(tokens)
    pos, _, content = _layout(mask)
    drop = jax.random.bernoulli(key, rate, ids.shape) & content
    keep = (mask > 0) & ~drop
    keep = _at_least_one(keep, content, pos)
    return _repack(ids, keep)


def token_masking(key: Array, tokens: Tokens, rate: float, mask_id: int = MASK_ID) -> Tokens:
    """Replace each content token by ``[MASK]`` (id 103) with probability ``rate``; mask unchanged."""
    _check_rate(rate, "rate")
    ids, mask = check_tokens(tokens)
    _, _, content = _layout(mask)
    hit = jax.random.bernoulli(key, rate, ids.shape) & content
    return Tokens(jnp.where(hit, jnp.asarray(mask_id, ids.dtype), ids), mask)


def span_deletion(key: Array, tokens: Tokens, fraction: float) -> Tokens:
    """Delete one contiguous span of ``floor(fraction * m)`` content tokens (``m`` = content
    length of the row) at a uniformly random start, keeping at least one content token."""
    _check_rate(fraction, "fraction")
    ids, mask = check_tokens(tokens)
    pos, length, content = _layout(mask)
    m = length - 2
    span = jnp.minimum(jnp.floor(fraction * m).astype(jnp.int32), jnp.maximum(m - 1, 0))
    start = 1 + jnp.floor(jax.random.uniform(key, m.shape) * (m - span + 1)).astype(jnp.int32)
    start = jnp.minimum(start, jnp.maximum(length - 1 - span, 1))
    cut = content & (pos >= start) & (pos < start + span)
    return _repack(ids, (mask > 0) & ~cut)


def random_crop(key: Array, tokens: Tokens, fraction: float) -> Tokens:
    """Keep one contiguous window of ``max(1, ceil(fraction * m))`` content tokens (plus
    [CLS]/[SEP]) at a uniformly random start: the text analogue of a random crop."""
    if not 0.0 < float(fraction) <= 1.0:
        raise ValueError(f"`fraction` must lie in (0, 1]; got {fraction!r}.")
    ids, mask = check_tokens(tokens)
    pos, length, content = _layout(mask)
    m = length - 2
    width = jnp.maximum(jnp.ceil(fraction * m).astype(jnp.int32), 1)
    start = 1 + jnp.floor(jax.random.uniform(key, m.shape) * jnp.maximum(m - width + 1, 1)).astype(jnp.int32)
    inside = content & (pos >= start) & (pos < start + width)
    keep = (mask > 0) & (~content | inside)
    return _repack(ids, keep)


def local_shuffle(key: Array, tokens: Tokens, window: float) -> Tokens:
    """Permute content tokens locally: sort positions by ``i + U(0, window)`` (Lample et al.
    2018, "Unsupervised MT using monolingual corpora only"), so a token moves by less than
    ``window`` places. [CLS], [SEP], padding and the mask are unchanged."""
    check_positive(window, "window", strict=False)
    ids, mask = check_tokens(tokens)
    pos, length, content = _layout(mask)
    L = ids.shape[-1]
    noise = jax.random.uniform(key, ids.shape) * window
    big = float(L) + float(window) + 2.0
    score = jnp.where(content, pos + noise, jnp.where(pos == 0, -1.0, big + pos))
    order = jnp.argsort(score, axis=-1, stable=True)
    return Tokens(jnp.take_along_axis(ids, order, axis=-1), mask)


def augment_tokens(
    key: Array,
    tokens: Tokens,
    *,
    deletion: float = 0.0,
    masking: float = 0.0,
    span: float = 0.0,
    crop: float = 1.0,
    shuffle_window: float = 0.0,
) -> Tokens:
    """Compose the token augmentations in the order crop -> span deletion -> token deletion
    -> masking -> local shuffle; each is skipped at its neutral value (static Python floats)."""
    k = jax.random.split(key, 5)
    if crop < 1.0:
        tokens = random_crop(k[0], tokens, crop)
    if span > 0.0:
        tokens = span_deletion(k[1], tokens, span)
    if deletion > 0.0:
        tokens = token_deletion(k[2], tokens, deletion)
    if masking > 0.0:
        tokens = token_masking(k[3], tokens, masking)
    if shuffle_window > 0.0:
        tokens = local_shuffle(k[4], tokens, shuffle_window)
    return check_tokens(tokens)
