"""Task files from outside (fuzzed), templates, built-in tasks, triggers and contamination."""

import contextlib
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shipyard.errors import InvalidInput, NotFound, ShipyardError
from shipyard.evals import ContaminationIndex, TriggerPolicy, export_benchmarks, get_task
from shipyard.evals.jsonl import parse_jsonl_task
from shipyard.evals.tasks import Item, render

GOOD = b'{"id": "a", "question": "1+1?", "choices": ["1", "2"], "answer": 1}\n'


@pytest.mark.fuzz
@given(st.binary(max_size=400))
def test_hostile_bytes_raise_only_our_errors(data: bytes) -> None:
    with contextlib.suppress(ShipyardError):
        parse_jsonl_task(data, "fuzz.jsonl")


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
_keys = st.sampled_from(["id", "question", "prompt", "choices", "answer", "cluster", "task", "x"])


@pytest.mark.fuzz
@given(st.lists(st.dictionaries(_keys, _json, max_size=6), min_size=1, max_size=5))
def test_hostile_records_raise_only_our_errors(records: list[dict[str, object]]) -> None:
    data = "\n".join(json.dumps(r) for r in records).encode()
    try:
        task = parse_jsonl_task(data, "fuzz.jsonl")
    except ShipyardError:
        return
    for item in task.load():  # what loads renders
        task.render(item)


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"", "no items"),
        (b"\xff\xfe", "not UTF-8"),
        (b"[1, 2]\n", "JSON object"),
        (b'{"question": "q", "answer": NaN}\n', "NaN is not JSON"),
        (GOOD + b'{"id": "a", "question": "q", "choices": ["1", "2"], "answer": 0}\n', "twice"),
        (b'{"question": "q", "choices": ["1", "2"], "answer": 2}\n', "index into choices"),
        (b'{"question": 3, "answer": "x"}\n', "must be a string"),
        (b'{"task": {"kind": "code"}}\n' + GOOD, "kind"),
        (b'{"task": {"template": "{nope}"}}\n' + GOOD, "{nope}"),
        (b'{"task": {"fewshot": 1}}\n' + GOOD, "leaves no items"),
    ],
)
def test_bad_task_files_are_named(data: bytes, says: str) -> None:
    with pytest.raises(InvalidInput, match=r"bad\.jsonl") as raised:
        parse_jsonl_task(data, "bad.jsonl")
    assert says in str(raised.value)


def test_file_content_is_part_of_the_task_version(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(GOOD)
    first = get_task(f"jsonl:{path}")
    path.write_bytes(GOOD.replace(b"1+1?", b"one plus one?"))
    assert get_task(f"jsonl:{path}").version != first.version
    with pytest.raises(InvalidInput, match="cannot read"):
        get_task(f"jsonl:{tmp_path / 'missing.jsonl'}")


def test_templates_fill_fields_and_nothing_else() -> None:
    assert render("Q: {question} {question}", {"question": "x"}) == "Q: x x"
    assert render("{question.__class__}", {"question": "x"}) == "{question.__class__}"
    with pytest.raises(InvalidInput, match=r"\{other\}"):
        render("{other}", {"question": "x"})


def test_builtin_tasks_load_real_items() -> None:
    humaneval = get_task("humaneval").load()
    assert len(humaneval) == 164 and humaneval[0].entry_point
    gym = get_task("rg-basic-arithmetic").load()
    assert len(gym) == 100 and gym == get_task("rg-basic-arithmetic").load()  # seeded
    mc = get_task("arith-mc")
    assert mc.render(mc.load()[0]).count("Answer:") == 4  # three shots, then the item
    with pytest.raises(NotFound, match="arith-mc"):
        get_task("no-such-task")


def test_trigger_policy_fast_every_time_full_every_nth_and_on_promotion() -> None:
    policy = TriggerPolicy(fast=("arith-mc",), full=("arith-mc", "humaneval"), full_every=3)
    tiers = [policy.tiers(n) for n in range(1, 7)]
    assert tiers == [["fast"], ["fast"], ["fast", "full"], ["fast"], ["fast"], ["fast", "full"]]
    assert policy.tiers(1, promotion_candidate=True) == ["fast", "full"]
    assert policy.tasks(["fast", "full"]) == ["arith-mc", "humaneval"]
    with pytest.raises(InvalidInput, match="full_every"):
        TriggerPolicy(full_every=0)


def test_contamination_flags_tasks_found_in_a_corpus(tmp_path: Path) -> None:
    task = get_task("humaneval")
    clean = get_task("rg-leg-counting")
    index = ContaminationIndex([task, clean])
    leaked = [f"A blog post. {i.fields['prompt']} And so on." for i in task.load()[:10]]
    instructions = clean.load()[0].fields["question"].split("\n")[0]  # every item's preamble
    report = {r["task"]: r for r in index.check([instructions, *leaked])}
    # the ten leaked, plus any item that shares a 13-word run with one of them
    assert 10 <= report["humaneval"]["overlapping"] <= 12 and report["humaneval"]["flagged"]
    assert report["humaneval"]["examples"][0].startswith("HumanEval/")
    assert report["rg-leg-counting"]["overlapping"] == 0
    assert not report["rg-leg-counting"]["flagged"]
    out = tmp_path / "bench.txt"
    assert export_benchmarks([task], out) == 164
    assert len(out.read_text().splitlines()) == 164


def test_item_json_is_stable() -> None:
    item = Item("x", {"q": "a"}, 1, ("a", "b"), "c")
    assert item.as_json()["choices"] == ["a", "b"]


@pytest.mark.fuzz
@given(st.binary(max_size=300))
def test_hostile_corpus_and_canary_files_raise_only_our_errors(data: bytes) -> None:
    import tempfile

    from shipyard.evals.canary import load_baseline
    from shipyard.evals.contamination import read_corpus

    with tempfile.TemporaryDirectory() as scratch:
        corpus = Path(scratch) / "corpus.jsonl"
        corpus.write_bytes(data)
        with contextlib.suppress(ShipyardError):
            list(read_corpus(corpus))
        with contextlib.suppress(ShipyardError):
            load_baseline(corpus)
