"""The warm engine a worker keeps per model: batched log-likelihoods and greedy generation.

Log-likelihood pairs are encoded as lm-evaluation-harness encodes them (trailing context spaces
move to the continuation; the pair is encoded whole and split at the context's length; an empty
context is the end-of-text token), so per-item scores agree with it. Batches are right-padded
with attention masks: padding sits after every real token, so causal attention never lets it
change a real position's logits, and a batched score equals the unbatched one to float error.
"""

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shipyard.errors import InvalidInput


@dataclass(frozen=True)
class LogLikelihood:
    logprob: float  # sum over the continuation's tokens
    greedy: bool  # every continuation token was the argmax


class Engine:
    """A causal LM from a Hugging Face directory, on CPU, one thread unless told otherwise."""

    def __init__(self, model_dir: Path, threads: int | None = None) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(threads or int(os.environ.get("SHIPYARD_EVAL_THREADS", "1")))
        if not (model_dir / "config.json").is_file():
            raise InvalidInput(f"{model_dir} is not a Hugging Face model directory (no config)")
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        self.model.train(False)
        self.decoder = self.model.get_decoder()  # type: ignore[no-untyped-call]
        self.head = self.model.get_output_embeddings()  # type: ignore[no-untyped-call]
        if self.head is None:
            raise InvalidInput(f"{model_dir}: the model has no output embeddings to score with")
        self.max_length = int(getattr(self.model.config, "max_position_embeddings", 2048))
        eos = self.tokenizer.eos_token_id
        self.eot = int(eos if eos is not None else 0)
        pad = self.tokenizer.pad_token_id
        self.pad = int(pad if pad is not None else self.eot)

    def encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        spaces = len(context) - len(context.rstrip())
        if spaces:
            context, continuation = context[:-spaces], context[-spaces:] + continuation
        if not context:
            return [self.eot], list(self.tokenizer.encode(continuation))
        whole = list(self.tokenizer.encode(context + continuation))
        context_ids = list(self.tokenizer.encode(context))
        return whole[: len(context_ids)], whole[len(context_ids) :]

    def loglikelihoods(
        self, pairs: Sequence[tuple[str, str]], batch_size: int = 16
    ) -> list[LogLikelihood]:
        """Scores of each (context, continuation) pair, in order; longest first inside."""
        encoded = [self.encode_pair(c, x) for c, x in pairs]
        order = sorted(range(len(pairs)), key=lambda i: -sum(map(len, encoded[i])))
        out: dict[int, LogLikelihood] = {}
        for start in range(0, len(order), max(1, batch_size)):
            chunk = order[start : start + batch_size]
            for index, score in zip(chunk, self._score([encoded[i] for i in chunk]), strict=True):
                out[index] = score
        return [out[i] for i in range(len(pairs))]

    def _score(self, batch: list[tuple[list[int], list[int]]]) -> list[LogLikelihood]:
        import torch

        rows = [(c + x)[-(self.max_length + 1) :][:-1] for c, x in batch]
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for n, row in enumerate(rows):
            ids[n, : len(row)] = torch.tensor(row)
            mask[n, : len(row)] = 1
        # The continuation's tokens are predicted by the last len(cont) real positions of each
        # row: only those go through the output layer (a 49k-word vocabulary makes it the
        # costliest matrix product of a small model), the rest of the positions never do.
        spans = [
            (n, len(row) - len(cont), len(row))
            for n, (row, (_, cont)) in enumerate(zip(rows, batch, strict=True))
        ]
        with torch.no_grad():
            hidden = self.decoder(input_ids=ids, attention_mask=mask).last_hidden_state
            picked = torch.cat([hidden[n, a:b] for n, a, b in spans])
            logprobs = self.head(picked).float().log_softmax(-1)
        scores, at = [], 0
        for _, cont in batch:
            mine = logprobs[at : at + len(cont)]
            at += len(cont)
            target = torch.tensor(cont)
            logprob = mine.gather(1, target[:, None]).sum().item()
            greedy = bool((mine.argmax(-1) == target).all())
            scores.append(LogLikelihood(float(logprob), greedy))
        return scores

    def generate(
        self, prompts: Sequence[str], max_tokens: int, stop: Sequence[str] = (), chat: bool = False
    ) -> list[str]:
        """Greedy completions, cut at the first stop string (one prompt at a time: a left-padded
        batch can flip a greedy tie, and a score must not depend on its batch-mates)."""
        import torch

        outputs = []
        for prompt in prompts:
            ids = self._prompt_ids(prompt, chat)[-(self.max_length - max_tokens) :]
            inputs = torch.tensor([ids])
            kwargs: dict[str, Any] = {}
            if stop:
                kwargs = {"stop_strings": list(stop), "tokenizer": self.tokenizer}
            with torch.no_grad():
                produced = self.model.generate(
                    input_ids=inputs,
                    attention_mask=torch.ones_like(inputs),
                    max_new_tokens=max_tokens,
                    do_sample=False,
                    pad_token_id=self.pad,
                    **kwargs,
                )
            text = self.tokenizer.decode(produced[0, len(ids) :], skip_special_tokens=True)
            outputs.append(cut_at_stop(str(text), stop))
        return outputs

    def _prompt_ids(self, prompt: str, chat: bool) -> list[int]:
        if not chat:
            return list(self.tokenizer.encode(prompt))
        if not getattr(self.tokenizer, "chat_template", None):
            raise InvalidInput("the task asks for a chat prompt but the model has no chat template")
        turn = [{"role": "user", "content": prompt}]
        text = self.tokenizer.apply_chat_template(turn, tokenize=False, add_generation_prompt=True)
        return list(self.tokenizer.encode(str(text), add_special_tokens=False))


def cut_at_stop(text: str, stop: Sequence[str]) -> str:
    cuts = [text.find(s) for s in stop if s in text]
    return text[: min(cuts)] if cuts else text


_ENGINES: dict[str, Engine] = {}
_LOCK = threading.Lock()


def warm_engine(model_id: str, model_dir: Path) -> Engine:
    """This process's engine for `model_id`, loaded once and shared by every task."""
    with _LOCK:
        engine = _ENGINES.get(model_id)
        if engine is None:
            engine = _ENGINES[model_id] = Engine(model_dir)
        return engine
