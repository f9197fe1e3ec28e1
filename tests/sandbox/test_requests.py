"""The service's request handler against hostile requests: Shipyard's own errors or a result."""

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shipyard.errors import InvalidInput, ShipyardError
from shipyard.sandbox import Host
from shipyard.sandbox.manager import Manager
from shipyard.sandbox.pool import PoolConfig
from shipyard.sandbox.server import handle

from .conftest import SMALL

# What each op reads, with one value of the wrong JSON type per kind it could be sent instead.
OP_FIELDS = {
    "create": ["image", "limits", "ttl_s", "lease_s"],
    "exec": ["id", "argv", "stdin", "timeout", "env", "cwd"],
    "put": ["id", "files", "mode"],
    "get": ["id", "paths", "max_bytes"],
    "heartbeat": ["ids"],
    "close": ["id"],
}
WRONG: dict[str, list[Any]] = {
    "id": [True, 7, 1.5, [], {}],
    "argv": [True, 7, 1.5, "ls", {}, [1], [None], [["ls"]]],
    "stdin": [True, 7, 1.5, [], {}],
    "timeout": [True, "1", [], {}],
    "env": [True, 7, 1.5, "A=B", [], {"A": 1}, {"A": None}],
    "cwd": [True, 7, 1.5, [], {}],
    "files": [True, 7, 1.5, "x", [], {"a": 1}, {"a": None}],
    "mode": [True, "644", 1.5, [], {}],
    "paths": [True, 7, 1.5, "x", {}, [1], [None]],
    "max_bytes": [True, "1", 1.5, [], {}],
    "ids": [True, 7, 1.5, "x", {}, [1]],
    "image": [True, 7, 1.5, [], {}],
    "limits": [True, 7, 1.5, "x", []],
    "ttl_s": [True, "1", [], {}],
    "lease_s": [True, "1", [], {}],
}
FIELDS = sorted(WRONG)
OPS: list[Any] = [*OP_FIELDS, "status", "metrics", "nonsense", 7, None, True, [], {}]
values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=10,
)
# Per field: anything, or one of its wrong types, so every field is hit with every kind.
field_values = {name: values | st.sampled_from(bad) for name, bad in WRONG.items()}


@pytest.fixture(scope="module")
def manager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Manager]:
    made = Manager(Host(tmp_path_factory.mktemp("home")), PoolConfig(0, 2, 0.0))
    yield made
    made.shutdown()


@pytest.mark.fuzz
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    op=st.sampled_from(OPS),
    fields=st.fixed_dictionaries({}, optional=field_values),
    real=st.booleans(),
)
def test_hostile_requests_get_shipyard_errors(
    manager: Manager, op: Any, fields: dict[str, Any], real: bool
) -> None:
    if real and "id" not in fields:  # aim at a live sandbox, so validation past the id runs too
        if not manager.leases:
            manager.create("host", SMALL)
        fields["id"] = next(iter(manager.leases))
    with contextlib.suppress(ShipyardError):
        handle(manager, {"op": op, **fields})


@pytest.mark.parametrize(
    ("op", "name", "value"),
    [(op, name, bad) for op, names in OP_FIELDS.items() for name in names for bad in WRONG[name]],
)
def test_each_field_of_the_wrong_type_is_refused_by_name(
    manager: Manager, op: str, name: str, value: Any
) -> None:
    if not manager.leases:
        manager.create("host", SMALL)
    live = next(iter(manager.leases))
    valid = {"id": live, "argv": ["true"], "files": {}, "paths": [], "ids": [live]}
    request = {"op": op, **{k: v for k, v in valid.items() if k in OP_FIELDS[op]}, name: value}
    with pytest.raises(InvalidInput, match=f"{op}: {name} "):
        handle(manager, request)


def test_the_fuzzed_sandbox_still_works(manager: Manager) -> None:
    made = manager.create("host", SMALL)
    assert manager.exec(made["id"], ["true"]).ok


@pytest.mark.parametrize("argv", [True, 7, 1.5, None, b"ls", "ls", [], [1]])
def test_in_process_exec_refuses_argv_of_the_wrong_type(manager: Manager, argv: Any) -> None:
    made = manager.create("host", SMALL)
    with pytest.raises(InvalidInput, match="argv"):
        manager.sandbox(made["id"]).exec(argv)
