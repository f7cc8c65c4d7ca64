"""An offline English corpus: sentences from Python's own documentation (deterministic)."""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

__all__ = ["python_docs_sentences", "corpus_fingerprint"]


def _corpus_paragraphs(text: str):
    for para in re.split(r"\n\s*\n", text):
        lines = para.split("\n")
        if any(line.startswith((" ", "\t")) for line in lines):
            continue  # indented: code, grammar productions, tables
        yield " ".join(line.strip() for line in lines)


def python_docs_sentences(n: int | None = None, *, seed: int = 0, min_words: int = 6, max_words: int = 40) -> list[str]:
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
