"""``ssl_geometry.text``: everything about text in one namespace.

The MiniLM encoder and its loading (:mod:`ssl_geometry.models.text`), token augmentations
(:mod:`ssl_geometry.ssl.text_augment`), the offline corpus (:mod:`ssl_geometry.ssl.text_corpus`)
and two-view training (:mod:`ssl_geometry.training.text`).
"""
import importlib  # noqa: F401  (kept: ``text.importlib.util`` is the documented patch point for offline tests)
import importlib.util  # noqa: F401

from ssl_geometry.models.text import *  # noqa: F401,F403
from ssl_geometry.models.text import _check_tokens, _dropout, _eval_apply, _layer_norm  # noqa: F401
from ssl_geometry.models.text import __all__ as _models_all
from ssl_geometry.ssl.text_augment import *  # noqa: F401,F403
from ssl_geometry.ssl.text_augment import __all__ as _augment_all
from ssl_geometry.ssl.text_corpus import *  # noqa: F401,F403
from ssl_geometry.ssl.text_corpus import __all__ as _corpus_all
from ssl_geometry.training.text import *  # noqa: F401,F403
from ssl_geometry.training.text import __all__ as _training_all

__all__ = [*_models_all, *_augment_all, *_corpus_all, *_training_all]
