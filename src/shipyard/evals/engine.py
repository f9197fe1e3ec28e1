"""The warm engine a worker keeps per model: batched log-likelihoods and greedy generation.

Log-likelihood pairs are encoded as lm-evaluation-harness encodes them (trailing context spaces
move to the continuation; the pair is encoded whole and split at the context's length; an empty
context is the end-of-text token), so per-item scores agree with it. Batches are right-padded
with attention masks: padding sits after every real token and is masked out, so it never
changes a real position, and a batched score equals the unbatched one to float error. The
choices of one item share a single pass over their context (its key/value cache), and only the
positions that predict a scored token go through the output layer.
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
        """Scores of each (context, continuation) pair, in order.

        Pairs whose context encodes alike (a multiple-choice item's choices) share one pass over
        the context: its keys and values are computed once, then every continuation runs on
        them. `batch_size` counts distinct contexts; the longest run first."""
        encoded = [self.encode_pair(c, x) for c, x in pairs]
        if any(not x for _, x in encoded):
            raise InvalidInput("a continuation to score encodes to no tokens")
        groups: dict[tuple[int, ...], list[int]] = {}
        for index, (context_ids, _) in enumerate(encoded):
            groups.setdefault(tuple(context_ids), []).append(index)
        longest = sorted(groups, key=lambda c: -len(c) - max(len(encoded[i][1]) for i in groups[c]))
        out: dict[int, LogLikelihood] = {}
        for start in range(0, len(longest), max(1, batch_size)):
            chunk = longest[start : start + batch_size]
            rows = [(list(c), [encoded[i][1] for i in groups[c]]) for c in chunk]
            for context, scores in zip(chunk, self._score(rows), strict=True):
                out.update(zip(groups[context], scores, strict=True))
        return [out[i] for i in range(len(pairs))]

    def _score(self, rows: list[tuple[list[int], list[list[int]]]]) -> list[list[LogLikelihood]]:
        import torch

        # Left-truncate a context so that it and its longest continuation fit, as the harness.
        contexts = [c[-(self.max_length + 1 - max(map(len, conts))) :] for c, conts in rows]
        ids, mask = self._right_padded(contexts)
        owner = [g for g, (_, conts) in enumerate(rows) for _ in conts]
        conts = [x for _, group in rows for x in group]
        width = max(len(x) for x in conts) - 1  # a continuation's last token is never an input
        with torch.no_grad():
            first = self.decoder(input_ids=ids, attention_mask=mask, use_cache=width > 0)
            # the last real context position predicts each continuation's first token
            ends = torch.stack(
                [first.last_hidden_state[g, len(c) - 1] for g, c in enumerate(contexts)]
            )
            picked = []
            if width > 0:
                cache = first.cache
                cache.reorder_cache(torch.tensor(owner))  # one copy of the context per continuation
                cont_ids, cont_mask = self._right_padded([x[:-1] for x in conts], width)
                starts = torch.tensor([len(contexts[g]) for g in owner])
                rest = self.decoder(
                    input_ids=cont_ids,
                    attention_mask=torch.cat([mask[owner], cont_mask], 1),
                    position_ids=starts[:, None] + torch.arange(width)[None, :],
                    cache=cache,
                ).last_hidden_state
            for r, x in enumerate(conts):
                picked.append(ends[owner[r]][None])
                if len(x) > 1:
                    picked.append(rest[r, : len(x) - 1])
            logprobs = self.head(torch.cat(picked)).float().log_softmax(-1)
        scores: list[list[LogLikelihood]] = [[] for _ in rows]
        at = 0
        for r, x in enumerate(conts):
            mine = logprobs[at : at + len(x)]
            at += len(x)
            target = torch.tensor(x)
            logprob = float(mine.gather(1, target[:, None]).sum().item())
            scores[owner[r]].append(LogLikelihood(logprob, bool((mine.argmax(-1) == target).all())))
        return scores

    def _right_padded(self, rows: list[list[int]], width: int = 0) -> tuple[Any, Any]:
        import torch

        width = max(width, *(len(r) for r in rows))
        ids = torch.full((len(rows), width), self.pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for n, row in enumerate(rows):
            ids[n, : len(row)] = torch.tensor(row, dtype=torch.long)
            mask[n, : len(row)] = 1
        return ids, mask

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
