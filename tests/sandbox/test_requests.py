"""The service's request handler against hostile requests: Shipyard's own errors or a result."""

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shipyard.errors import ShipyardError
from shipyard.sandbox import Host
from shipyard.sandbox.manager import Manager
from shipyard.sandbox.pool import PoolConfig
from shipyard.sandbox.server import handle

from .conftest import SMALL

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=10,
)
FIELDS = ["id", "argv", "stdin", "timeout", "env", "cwd", "files", "mode", "paths", "max_bytes",
          "ids", "image", "limits", "ttl_s", "lease_s"]  # fmt: skip
OPS = ["exec", "put", "get", "heartbeat", "close", "status", "nonsense", 7, None]


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
    fields=st.dictionaries(st.sampled_from(FIELDS), values),
    real=st.booleans(),
)
def test_hostile_requests_get_shipyard_errors(
    manager: Manager, op: Any, fields: dict[str, Any], real: bool
) -> None:
    if real:  # aim at a live sandbox, so validation past the id runs too
        if not manager.leases:
            manager.create("host", SMALL)
        fields["id"] = next(iter(manager.leases))
    with contextlib.suppress(ShipyardError):
        handle(manager, {"op": op, **fields})


def test_the_fuzzed_sandbox_still_works(manager: Manager) -> None:
    made = manager.create("host", SMALL)
    assert manager.exec(made["id"], ["true"]).ok
