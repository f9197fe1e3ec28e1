"""Scorers: turn a stored output into a score and an explicit outcome, without the model.

Because scorers read only stored outputs, a new judge version re-scores a finished run without
regenerating anything (`ResultStore.rescore`). Code is run in the sandbox service (or a sandbox in
this process when no service runs): a solution that loops is a `timeout`, one that dies or breaks
a cap a `crash`, each with the sandbox's reason.
"""

import math
import os
import re
from dataclasses import dataclass
from typing import Any

from shipyard.errors import ShipyardError
from shipyard.evals.tasks import Item, Task

# The judge version of each scorer: bump it when its verdicts change.
JUDGE_VERSIONS = {"mc": "1", "exact": "1", "numeric": "1", "code": "1"}
# The sandbox image code runs in (an image artifact's alias or id): part of the code judge's
# version, so a new image is a new judge and the canary re-runs.
SANDBOX_IMAGE = os.environ.get("SHIPYARD_EVAL_IMAGE", "host")
CODE_TIMEOUT_S = 10.0
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?")


@dataclass(frozen=True)
class Score:
    value: float
    outcome: str  # correct, wrong; code: pass, fail, timeout, crash
    detail: str = ""


def score(task: Task, item: Item, output: dict[str, Any]) -> Score:
    if task.scorer == "mc":
        logprobs = output["logprobs"]
        best = max(range(len(logprobs)), key=lambda i: logprobs[i])
        return _verdict(best == item.target)
    text = str(output.get("text", ""))
    if task.scorer == "exact":
        return _verdict(_normal(text) == _normal(str(item.target)))
    if task.scorer == "numeric":
        got, want = first_number(text), first_number(str(item.target))
        ok = got is not None and want is not None and math.isclose(got, want, abs_tol=1e-6)
        return _verdict(ok)
    return run_code(program(task, item, text))


def _verdict(ok: bool) -> Score:
    return Score(1.0 if ok else 0.0, "correct" if ok else "wrong")


def _normal(text: str) -> str:
    return " ".join(text.split()).strip(" .").lower()


def first_number(text: str) -> float | None:
    match = _NUMBER.search(text)
    if match is None:
        return None
    try:
        value = float(match.group().replace(",", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def program(task: Task, item: Item, completion: str) -> str:
    """The file a code item runs: the prompt and its completion (or, when the answer is a fenced
    block that defines the entry point itself, the prompt then that block), then the tests and
    the check."""
    prompt = item.fields.get("prompt", "")  # the code to complete (a chat template wraps it)
    code = fenced_code(completion)
    if code is not None and f"def {item.entry_point}" in code:
        body = f"{prompt}    pass\n\n\n{code}"  # the prompt's imports, then the model's definition
    else:
        body = prompt + (code if code is not None else completion)
    return f"{body}\n\n{item.tests}\n\ncheck({item.entry_point})\n"


_FENCE = re.compile(r"```[ \t]*(?:python|py)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)


def fenced_code(text: str) -> str | None:
    """The first fenced code block of a chat answer, if it has one."""
    match = _FENCE.search(text)
    return match.group(1) if match else None


def run_code(source: str, timeout: float = CODE_TIMEOUT_S) -> Score:
    from shipyard.sandbox import Limits, Outcome

    limits = Limits(memory_mib=256, pids=32, output_bytes=64 * 1024)
    argv = ["python3", "-I", "-B", "solution.py"]
    # A sandbox that cannot start raises: the item is retried, never scored as a failure.
    with _sandbox(limits) as box:
        box.put_files({"solution.py": source.encode()})
        result = box.exec(argv, timeout=timeout)
    if result.outcome is Outcome.OK:
        return Score(1.0, "pass")
    if result.outcome is Outcome.NONZERO_EXIT:
        tail = result.stderr.decode(errors="replace").strip().splitlines()[-1:] or [""]
        return Score(0.0, "fail", tail[0][:200])
    if result.outcome is Outcome.TIMEOUT:
        return Score(0.0, "timeout", result.detail)
    return Score(0.0, "crash", f"{result.outcome.value}: {result.detail}"[:200])


def _sandbox(limits: Any) -> Any:
    """A sandbox from the service when one runs on this home, else one started here."""
    from shipyard.sandbox import Client, create

    try:
        client = Client()
    except ShipyardError:
        return create(image=SANDBOX_IMAGE, limits=limits)
    return _ServiceBox(client, limits)


class _ServiceBox:
    """A service sandbox that closes its client connection with it."""

    def __init__(self, client: Any, limits: Any) -> None:
        self.client = client
        self.limits = limits

    def __enter__(self) -> Any:
        self.box = self.client.create(image=SANDBOX_IMAGE, limits=self.limits, ttl_s=120)
        return self.box

    def __exit__(self, *exc: object) -> None:
        try:
            self.box.close()
        finally:
            self.client.close()
