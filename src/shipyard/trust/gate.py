"""The one gate every read of an artifact passes: verify against the trust policy, then audit.

`artifact get`, `pull`, a checkpoint load, `model import` and a replica's start all call `admit`
before they use a byte of the artifact. It writes one audit event whatever the verdict, and
raises `Untrusted` (exit 8) when the policy refuses the artifact.
"""

from dataclasses import dataclass, field

from shipyard.catalog import SQLCatalog
from shipyard.db import Database
from shipyard.errors import StorageError, Untrusted
from shipyard.store.manifest import Manifest
from shipyard.trust.audit import Outcome, Reader, record
from shipyard.trust.policy import Verdict, judge, load_policy
from shipyard.trust.signatures import read_signatures
from shipyard.workspace import Workspace


@dataclass(frozen=True)
class Read:
    """One read: the artifact, the ref it was asked for by, and what the reader does with it
    (`get`, `pull`, `load`, `serve`)."""

    artifact_id: str
    ref: str
    action: str
    reader: Reader = field(default_factory=Reader)


def admit(
    ws: Workspace, read: Read, remote: tuple[Manifest, bytes | None] | None = None
) -> Manifest:
    """The artifact's manifest, once the policy accepts it; the audit event is written first.

    The manifest and signature file are those in the workspace's store, or `remote`'s when they
    came from elsewhere (a pull's come from its daemon; None: no signature file)."""
    if remote is None:
        manifest = ws.pieces.get_manifest(read.artifact_id)
        stored = read_signatures(ws.pieces.backend, read.artifact_id)
    else:
        manifest, stored = remote
    alias = read.ref if ws.catalog.get_alias(read.ref) == read.artifact_id else None
    policy = load_policy()
    db = audit_db(ws)

    def audit(outcome: Outcome, verdict: Verdict) -> None:
        record(
            db,
            action=read.action,
            artifact_id=read.artifact_id,
            kind=manifest.kind,
            ref=read.ref,
            reader=read.reader,
            outcome=outcome,
            signer=verdict.signer,
            detail=verdict.reason,
        )

    if policy is None:
        audit("allowed", Verdict(None, "no trust policy"))
        return manifest
    try:
        verdict = judge(policy, read.artifact_id, manifest.kind, alias, stored)
    except Untrusted as exc:
        audit("refused", Verdict(None, str(exc)))
        raise
    if verdict.signer is not None:
        audit("allowed", verdict)
        return manifest
    named = f"{manifest.kind} {read.artifact_id[:16]}" + (f" (alias {alias!r})" if alias else "")
    if policy.require:
        audit("refused", verdict)
        raise Untrusted(
            f"{named}: {verdict.reason}, and the trust policy {policy.source} requires a "
            "signature by a key allowed to sign it"
        )
    audit("warned", verdict)
    ws.note(f"warning: {named}: {verdict.reason}; read anyway (the trust policy only warns)")
    return manifest


def audit_db(ws: Workspace) -> Database:
    if not isinstance(ws.catalog, SQLCatalog):
        raise StorageError("the access audit needs Shipyard's SQL catalog")
    return ws.catalog.db
