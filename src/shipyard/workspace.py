"""A workspace joins a piece store and a catalog: the one object higher layers use for artifacts.

`put` stores files and records who made them from what; `resolve` turns an id, a unique id prefix
or an alias into an id; `get` materializes and verifies. Layout under `$SHIPYARD_HOME` (default
`~/.shipyard`): `store/` (pieces, manifests) and `catalog.db` (the database); `SHIPYARD_STORE`
points the store elsewhere (for example `s3://bucket/prefix`), `SHIPYARD_DB` the database (for
example `postgresql://host/shipyard`, see `shipyard.db`).
"""

import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shipyard.catalog import ArtifactRecord, Catalog, RunStatus, open_catalog
from shipyard.catalog.base import looks_like_id_prefix
from shipyard.db import database_url
from shipyard.errors import InvalidInput, NotFound
from shipyard.home import shipyard_home as shipyard_home  # where callers have long found it
from shipyard.provenance import code_version, current_user
from shipyard.store import (
    DEFAULT_PIECE_SIZE,
    GcReport,
    Manifest,
    PieceStore,
    Problem,
    collect_garbage,
    materialize,
    open_backend,
    put_tree,
    verify,
)
from shipyard.store.manifest import HASH_HEX_LEN
from shipyard.store.put import Progress
from shipyard.store.sealed import Keyring, load_keyring


def _stderr_note(text: str) -> None:
    print(text, file=sys.stderr)


@dataclass
class Workspace:
    pieces: PieceStore
    catalog: Catalog
    note: Callable[[str], None] = field(default=_stderr_note)  # says what a command chose

    @classmethod
    def open(cls, home: Path | None = None) -> "Workspace":
        """The workspace under `home` (default `$SHIPYARD_HOME`), honouring the URI overrides."""
        home = home or shipyard_home()
        store_uri = os.environ.get("SHIPYARD_STORE") or str(home / "store")
        catalog_uri = database_url(home)
        return cls(PieceStore(open_backend(store_uri)), open_catalog(catalog_uri))

    def close(self) -> None:
        self.catalog.close()

    # Writing

    def put(
        self,
        source: Path,
        kind: str,
        *,
        name: str | None = None,
        inputs: Sequence[str] = (),
        metadata: dict[str, Any] | None = None,
        piece_size: int = DEFAULT_PIECE_SIZE,
        progress: Progress | None = None,
        confidential: bool = False,
        keys: Keyring | None = None,
    ) -> ArtifactRecord:
        """Store `source` as an artifact derived from `inputs` (refs) and point `name` at it.
        A `confidential` one is encrypted under the first of `keys` (default: the environment's)."""
        encrypt_with = (keys if keys is not None else load_keyring()) if confidential else None
        input_ids = [self.resolve(ref) for ref in inputs]
        run_id = self.catalog.start_run(
            "artifact-put",
            {"source": str(source), "kind": kind, "piece_size": piece_size},
            code_version(),
            current_user(),
            input_ids,
        )
        status: RunStatus = "failed"
        try:
            # The manifest names no run, so re-putting the same files gives the same id; the
            # catalog still records this run as the producer.
            manifest = put_tree(
                self.pieces,
                source,
                kind,
                piece_size,
                metadata=metadata,
                progress=progress,
                encrypt_with=encrypt_with,
            )
            record = self.register(manifest, run_id)
            if name:
                self.move_alias(name, record.id)
            status = "succeeded"
        finally:
            self.catalog.finish_run(run_id, status)
        return record

    def register(self, manifest: Manifest, run_id: str | None) -> ArtifactRecord:
        """Record a manifest already in the store as an artifact produced by `run_id`."""
        artifact_id = manifest.id
        if not self.pieces.has_manifest(artifact_id):
            raise NotFound(f"artifact {artifact_id} is not in the store; put it first")
        record = ArtifactRecord(
            artifact_id,
            manifest.kind,
            manifest.size,
            len(manifest.files),
            time.time(),
            run_id,
            manifest.metadata,
        )
        self.catalog.add_artifact(record)
        if run_id:
            self.catalog.add_run_output(run_id, artifact_id)
        return self.catalog.get_artifact(artifact_id) or record

    def move_alias(self, name: str, artifact_id: str, expect: str | bool | None = True) -> None:
        """Compare-and-swap `name` to `artifact_id`.

        `expect=True` means "from whatever it points at now" (still a CAS: a concurrent mover that
        got there first makes this one fail); otherwise `expect` is the id it must point at now.
        """
        current = self.catalog.get_alias(name) if expect is True else expect
        if isinstance(current, bool):
            raise InvalidInput("expect must be an artifact id, None or True")
        self.catalog.set_alias(name, artifact_id, current, current_user())

    # Reading

    def resolve(self, ref: str) -> str:
        """The artifact id that `ref` (alias, full id or unique id prefix) names.

        An alias wins over an id prefix it spells: alias names that read as id prefixes are
        refused now, but one made before that rule keeps working, with a note naming both.
        """
        aliased = self.catalog.get_alias(ref)
        if aliased:
            shadowed = (
                [m for m in self._by_id(ref) if m != aliased] if looks_like_id_prefix(ref) else []
            )
            if shadowed:
                self.note(
                    f"note: {ref!r} is an alias (→ {aliased[:16]}) and also prefixes artifact "
                    f"{', '.join(m[:16] for m in shadowed)}; used the alias. Give the id at "
                    "least one more digit to mean the artifact"
                )
            return aliased
        if looks_like_id_prefix(ref):
            matches = self._by_id(ref)
            if len(matches) == 1:
                return matches[0]
            if len(matches) > 1:
                shown = ", ".join(m[:16] for m in matches)
                raise InvalidInput(f"{ref!r} is ambiguous: it prefixes {shown}")
        raise NotFound(f"no artifact or alias named {ref!r}")

    def _by_id(self, ref: str) -> list[str]:
        """The artifacts whose id is or starts with `ref`: the catalog's, or a full id in the
        store that the catalog does not know."""
        lowered = ref.lower()
        if len(lowered) == HASH_HEX_LEN and (
            self.catalog.get_artifact(lowered) or self.pieces.has_manifest(lowered)
        ):
            return [lowered]
        return self.catalog.find_by_prefix(lowered)

    def manifest(self, ref: str) -> Manifest:
        return self.pieces.get_manifest(self.resolve(ref))

    def get(
        self,
        ref: str,
        dest: Path,
        progress: Progress | None = None,
        keys: Keyring | None = None,
    ) -> Manifest:
        """Materialize `ref` into `dest`; a confidential artifact is decrypted with `keys`
        (default: those the environment names)."""
        manifest = self.manifest(ref)
        materialize(self.pieces, manifest, dest, progress, keys)
        return manifest

    def verify(self, ref: str, progress: Progress | None = None) -> list[Problem]:
        return verify(self.pieces, self.manifest(ref), progress)

    def gc(self, dry_run: bool = False) -> GcReport:
        return collect_garbage(self.pieces, dry_run=dry_run)
