"""The catalog's records and the interface every catalog backend implements.

The catalog knows artifacts (by id), aliases (mutable names with full history), runs (what a job
consumed and produced) and the lineage graph those make: artifact → run → artifact. SQLite is the
embedded default; a PostgreSQL catalog implements the same `Catalog` protocol, so callers never
see which one they have.
"""

import string
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from shipyard.errors import InvalidInput

RunStatus = Literal["running", "succeeded", "failed"]

ALIAS_CHARS = frozenset(string.ascii_letters + string.digits + "-_./:")
MAX_ALIAS_LEN = 200
MIN_ID_PREFIX = 4  # a ref of this many hex digits or more is read as an artifact id prefix


def looks_like_id_prefix(ref: str) -> bool:
    """Whether `ref` reads as an artifact id or a prefix of one (case-insensitive hex)."""
    return len(ref) >= MIN_ID_PREFIX and all(c in string.hexdigits for c in ref)


def check_alias_name(name: str) -> None:
    """Refuse an alias name that a shell or a ref lookup would read as something else."""
    allowed = f"1-{MAX_ALIAS_LEN} letters, digits or '-_./:', not starting with '-', '.' or '/'"
    if not name or len(name) > MAX_ALIAS_LEN or not set(name) <= ALIAS_CHARS:
        raise InvalidInput(f"alias {name!r}: use {allowed}")
    if name[0] in "-./":
        why = "an option" if name[0] == "-" else "a path"
        raise InvalidInput(f"alias {name!r} would read as {why}: use {allowed}")
    if looks_like_id_prefix(name):
        raise InvalidInput(
            f"alias {name!r} is {MIN_ID_PREFIX} or more hex digits, which reads as an artifact id "
            f"prefix: add a letter g-z or a '-_./:' (for example '{name}-model')"
        )


@dataclass(frozen=True)
class ArtifactRecord:
    id: str
    kind: str
    size: int
    file_count: int
    created_at: float
    run_id: str | None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AliasEvent:
    """One move of an alias: from `old_id` (None when created) to `new_id`."""

    name: str
    old_id: str | None
    new_id: str
    at: float
    by: str


@dataclass(frozen=True)
class RunRecord:
    id: str
    kind: str
    status: RunStatus
    started_at: float
    ended_at: float | None
    config_hash: str
    code_version: str
    user: str
    config: dict[str, Any]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class LineageEdge:
    """`parent` produced or fed `child`; ids are artifact ids or run ids. `depth` counts from 1."""

    parent: str
    child: str
    depth: int


class Catalog(Protocol):
    def add_artifact(self, record: ArtifactRecord) -> None:
        """Register an artifact; registering the same id again is a no-op."""
        ...

    def get_artifact(self, artifact_id: str) -> ArtifactRecord | None: ...

    def list_artifacts(self, kind: str | None = None) -> list[ArtifactRecord]: ...

    def find_by_prefix(self, prefix: str) -> list[str]:
        """Artifact ids starting with `prefix` (at most a few, enough to report ambiguity)."""
        ...

    def get_alias(self, name: str) -> str | None: ...

    def list_aliases(self) -> dict[str, str]: ...

    def set_alias(self, name: str, new_id: str, expect: str | None, by: str) -> None:
        """Move `name` to `new_id` only if it now points at `expect` (None: must not exist).

        Raises `Conflict` naming the current target when it does not.
        """
        ...

    def alias_history(self, name: str) -> list[AliasEvent]: ...

    def start_run(
        self,
        kind: str,
        config: dict[str, Any],
        code_version: str,
        user: str,
        inputs: list[str],
    ) -> str:
        """Record a run that consumes `inputs`; return its id."""
        ...

    def add_run_output(self, run_id: str, artifact_id: str) -> None: ...

    def finish_run(self, run_id: str, status: RunStatus) -> None: ...

    def get_run(self, run_id: str) -> RunRecord | None: ...

    def lineage(
        self,
        node_id: str,
        direction: Literal["up", "down"],
        max_depth: int = 1000,
        max_nodes: int | None = None,
    ) -> list[LineageEdge]:
        """Every edge reachable from `node_id` towards its sources (up) or derivatives (down),
        at most `max_depth` edges away, ordered by depth, then parent and child; each edge once,
        with its least depth. With `max_nodes`, the walk may stop once it has found more than
        that many nodes (the root included): the nearest are then complete, farther ones not."""
        ...

    def close(self) -> None: ...
