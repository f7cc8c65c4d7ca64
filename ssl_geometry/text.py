"""Everything about text in one namespace: the MiniLM encoder, token augmentations, the corpus, two-view training.

* the encoder (all-MiniLM-L6-v2 in pure JAX) and its loading: :func:`bert_encoder`,
  :func:`load_minilm`, :func:`load_tokenizer`, :func:`tokenize`, :func:`embed`;
* token augmentations (:func:`augment_tokens` and the primitives it draws from);
* the offline corpus (:func:`python_docs_sentences`);
* two-view contrastive training of the encoder (:func:`fit_two_view`).

The pieces: the encoder's :class:`BertConfig` (:data:`MINILM_CONFIG`, all-MiniLM-L6-v2's),
:func:`encode_tokens` (last hidden states), :func:`mean_pool`, :func:`convert_state_dict` (a HuggingFace
``BertModel`` state dict to this encoder's parameters), the packaged files :func:`minilm_path`
(:data:`PACKAGE`, :data:`REQUIRED_FILES`), a tokenised batch :class:`Tokens` with the special ids
:data:`PAD_ID`, :data:`UNK_ID`, :data:`CLS_ID`, :data:`SEP_ID`, :data:`MASK_ID`, and what
:func:`load_minilm` returns, :class:`Pretrained`. The augmentation primitives: :func:`token_deletion`,
:func:`token_masking`, :func:`span_deletion`, :func:`random_crop`, :func:`local_shuffle`. The corpus's
:func:`corpus_fingerprint`. Two-view training: :func:`make_two_view_loss` (the objective) and
:class:`TwoViewResult` (what :func:`fit_two_view` returns).

Embeddings are L2-normalised with :func:`ssl_geometry.ops.l2_normalize`.
"""

from ssl_geometry._src.models.text import CLS_ID as CLS_ID
from ssl_geometry._src.models.text import MASK_ID as MASK_ID
from ssl_geometry._src.models.text import MINILM_CONFIG as MINILM_CONFIG
from ssl_geometry._src.models.text import PACKAGE as PACKAGE
from ssl_geometry._src.models.text import PAD_ID as PAD_ID
from ssl_geometry._src.models.text import REQUIRED_FILES as REQUIRED_FILES
from ssl_geometry._src.models.text import SEP_ID as SEP_ID
from ssl_geometry._src.models.text import UNK_ID as UNK_ID
from ssl_geometry._src.models.text import BertConfig as BertConfig
from ssl_geometry._src.models.text import Pretrained as Pretrained
from ssl_geometry._src.models.text import Tokens as Tokens
from ssl_geometry._src.models.text import bert_encoder as bert_encoder
from ssl_geometry._src.models.text import convert_state_dict as convert_state_dict
from ssl_geometry._src.models.text import embed as embed
from ssl_geometry._src.models.text import encode_tokens as encode_tokens
from ssl_geometry._src.models.text import load_minilm as load_minilm
from ssl_geometry._src.models.text import load_tokenizer as load_tokenizer
from ssl_geometry._src.models.text import mean_pool as mean_pool
from ssl_geometry._src.models.text import minilm_path as minilm_path
from ssl_geometry._src.models.text import tokenize as tokenize
from ssl_geometry._src.ssl.text_augment import augment_tokens as augment_tokens
from ssl_geometry._src.ssl.text_augment import local_shuffle as local_shuffle
from ssl_geometry._src.ssl.text_augment import random_crop as random_crop
from ssl_geometry._src.ssl.text_augment import span_deletion as span_deletion
from ssl_geometry._src.ssl.text_augment import token_deletion as token_deletion
from ssl_geometry._src.ssl.text_augment import token_masking as token_masking
from ssl_geometry._src.ssl.text_corpus import corpus_fingerprint as corpus_fingerprint
from ssl_geometry._src.ssl.text_corpus import python_docs_sentences as python_docs_sentences
from ssl_geometry._src.training.text import TwoViewResult as TwoViewResult
from ssl_geometry._src.training.text import fit_two_view as fit_two_view
from ssl_geometry._src.training.text import make_two_view_loss as make_two_view_loss

__all__ = [
    "BertConfig",
    "Tokens",
    "Pretrained",
    "encode_tokens",
    "mean_pool",
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
    "token_deletion",
    "token_masking",
    "span_deletion",
    "random_crop",
    "local_shuffle",
    "augment_tokens",
    "python_docs_sentences",
    "corpus_fingerprint",
    "TwoViewResult",
    "make_two_view_loss",
    "fit_two_view",
]
