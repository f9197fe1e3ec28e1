"""Tasks: a character vocabulary, procedural arithmetic from reasoning-gym, and a code task.

An arithmetic problem is reasoning-gym's `basic_arithmetic` entry (question, answer, metadata),
generated locally from a seed; the prompt is the question and a newline, the completion is an
optional run of '.' ("thinking") then the answer, then end-of-sequence. Its verifier is
reasoning-gym's own `score_answer`. A code problem asks for a Python expression of `x`; the
reward service runs it against tests in the sandbox.
"""

import functools
import random
from dataclasses import dataclass
from typing import Any

from shipyard.errors import InvalidInput
from shipyard.rl.config import TaskConfig

PAD, BOS, EOS = 0, 1, 2
_FIRST = 32  # printable ASCII 32..126 follow the three specials
VOCAB_SIZE = 3 + 95
THINK = "."


def encode(text: str) -> list[int]:
    """Token ids of printable-ASCII text (newline maps to space's neighbour: '\\n' -> '~')."""
    out = []
    for i, char in enumerate(text.replace("\n", "~")):
        code = ord(char)
        if not 32 <= code <= 126:
            raise InvalidInput(f"character {char!r} at {i} is outside the policy's vocabulary")
        out.append(3 + code - _FIRST)
    return out


def decode(tokens: list[int]) -> str:
    """Text of `tokens` up to the first end-of-sequence; specials are dropped."""
    chars = []
    for token in tokens:
        if token == EOS:
            break
        if token >= 3:
            chars.append(chr(token - 3 + _FIRST))
    return "".join(chars).replace("~", "\n")


@dataclass(frozen=True)
class Problem:
    """One task instance: `env` names its verifier; `entry` is what the verifier needs."""

    uid: str
    env: str
    prompt: str
    answer: str
    entry: dict[str, Any]


@functools.lru_cache(maxsize=8)
def _dataset(seed: int, max_digits: int, max_terms: int, operators: tuple[str, ...]) -> Any:
    import reasoning_gym

    return reasoning_gym.create_dataset(
        "basic_arithmetic",
        seed=seed,
        size=100_000,
        min_terms=2,
        max_terms=max_terms,
        min_digits=1,
        max_digits=max_digits,
        operators=operators,
        allow_parentheses=False,
        allow_negation=False,
        whitespace="no_space",
    )


def arith_problem(task: TaskConfig, index: int, heldout: bool = False) -> Problem:
    """The `index`-th problem of the training (or held-out, another seed) stream."""
    seed = task.seed * 2 + (1 if heldout else 0)
    data = _dataset(seed, task.max_digits, task.max_terms, task.operators)
    entry = data[index % data.size]
    question = str(entry["question"]).removeprefix("Calculate ").removesuffix(".")
    entry = {"question": entry["question"], "answer": entry["answer"]}
    return Problem(
        f"{'h' if heldout else 't'}{seed}-{index}",
        task.env,
        question + "=",
        str(entry["answer"]),
        entry,
    )


CODE_TESTS = {"double": [(1, 2), (3, 6), (-4, -8)], "square": [(2, 4), (3, 9), (-1, 1)]}


def code_problem(name: str) -> Problem:
    """A code task: a Python expression of `x` that passes CODE_TESTS[name] in the sandbox."""
    if name not in CODE_TESTS:
        raise InvalidInput(f"code task {name!r} is unknown; known: {sorted(CODE_TESTS)}")
    return Problem(f"code-{name}", "code", f"{name}(x)=", "", {"tests": CODE_TESTS[name]})


def think_length(task: TaskConfig, rng: random.Random) -> int:
    """A geometric run length with mean `think_mean`, capped at `think_max`: a long tail."""
    if task.think_mean <= 0:
        return 0
    p = 1.0 / (1.0 + task.think_mean)
    length = 0
    while rng.random() > p and length < task.think_max:
        length += 1
    return length


def target(problem: Problem, think: int) -> str:
    """The supervised warm-up completion for `problem`."""
    return THINK * think + problem.answer


def extract_answer(completion: str) -> str:
    """What follows the thinking run: the answer the verifier sees."""
    return completion.lstrip(THINK).strip()
