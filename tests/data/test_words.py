"""The shared word tokenizer splits as spaCy's English tokenizer (datatrove's reference) does."""

import pytest

from shipyard.data.words import is_symbol, sentence_count, tokens, words

# (text, spaCy 3.8 `spacy.blank("en")` tokens with whitespace tokens left out)
CASES = [
    ("Hello, world!", ["Hello", ",", "world", "!"]),
    ("(See e.g. U.S. sys.path)", ["(", "See", "e.g.", "U.S.", "sys.path", ")"]),
    ("don't can't I'm it's", ["do", "n't", "ca", "n't", "I", "'m", "it", "'s"]),
    ('"quoted" 10km $5', ['"', "quoted", '"', "10", "km", "$", "5"]),
    (
        "end.The well-known UTF-8 2015-03-31",
        ["end", ".", "The", "well", "-", "known", "UTF-8", "2015", "-", "03", "-", "31"],
    ),
    ("/etc/apt ... Contents-arch.gz", ["/etc", "/", "apt", "...", "Contents-arch.gz"]),
    (
        "derive(Debug) std::fmt // x--y :)",
        ["derive(Debug", ")", "std::fmt", "//", "x", "--", "y", ":)"],
    ),
    ("see http://a.com/b?c=d.", ["see", "http://a.com/b?c=d", "."]),
    ("method(): and/or", ["method", "(", "):", "and/or"]),
]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_tokens_match_spacy(text: str, expected: list[str]) -> None:
    assert tokens(text) == expected


def test_symbols_sentences_and_dedup_words() -> None:
    assert is_symbol("...") and is_symbol("«") and not is_symbol("n't")
    assert sentence_count(tokens("One here. Two here! Three? 3.14 is e.g. fine")) == 4
    assert sentence_count(tokens("No end at all")) == 1
    # dedup words: NFKC, lowercase, no punctuation tokens
    assert words("Ｆｕｌｌ-width, ﬁne ÉCOLE!") == ["full", "width", "fine", "école"]
