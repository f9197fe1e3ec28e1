"""The vendored rules are spaCy's: where spaCy is installed, its English tokenizer's patterns and
special cases equal `shipyard.data.english_rules`, so a spaCy release that changes them is
noticed here rather than as a quiet drift from datatrove's decisions."""

import pytest

from shipyard.data import english_rules

spacy = pytest.importorskip("spacy")


def test_vendored_rules_equal_the_installed_spacy() -> None:
    tokenizer = spacy.blank("en").tokenizer
    assert tokenizer.prefix_search.__self__.pattern == english_rules.PREFIX
    assert tokenizer.suffix_search.__self__.pattern == english_rules.SUFFIX
    assert tokenizer.infix_finditer.__self__.pattern == english_rules.INFIX
    assert tokenizer.url_match.__self__.pattern == english_rules.URL
    assert tokenizer.token_match is None
    orth = spacy.symbols.ORTH
    special = {
        chunk: tuple(piece[orth] for piece in pieces)
        for chunk, pieces in tokenizer.rules.items()
        if chunk.strip()  # whitespace never reaches a chunk: text is split at it first
    }
    assert special == english_rules.SPECIAL
