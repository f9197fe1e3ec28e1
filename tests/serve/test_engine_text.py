"""Streaming detokenisation: whole characters only, stop strings cut exactly, nothing lost."""

from pathlib import Path

import pytest
from transformers import AutoTokenizer

from shipyard.serve.engine.text import TextStream


@pytest.fixture(scope="module")
def tokenizer(smol_tokenizer_dir: Path) -> object:
    return AutoTokenizer.from_pretrained(smol_tokenizer_dir)


def stream(tokenizer: object, text: str, stop: tuple[str, ...] = ()) -> tuple[list[str], str]:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]  # type: ignore[operator]
    out = TextStream(tokenizer, stop)
    pieces = [out.push(i, special=False) for i in ids]
    pieces.append(out.flush())
    return pieces, "".join(pieces)


def test_pieces_join_to_the_text_and_never_split_a_character(tokenizer: object) -> None:
    text = "Cargo: 3 crates of 🍊 and 日本の茶, ok."
    pieces, joined = stream(tokenizer, text)
    assert joined == text
    assert all("\ufffd" not in p for p in pieces)


def test_stop_strings_end_the_text_before_them(tokenizer: object) -> None:
    _, joined = stream(tokenizer, "The ship left. END of log, more text", stop=("END",))
    assert joined == "The ship left. "
    _, joined = stream(tokenizer, "no stop here", stop=("zzz", "qq"))
    assert joined == "no stop here"


def test_special_tokens_add_no_text(tokenizer: object) -> None:
    out = TextStream(tokenizer)
    assert out.push(2, special=True) == ""  # <|im_end|>
    assert out.flush() == ""
