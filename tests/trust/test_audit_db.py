"""Audit events on both database engines: written, filtered, and their schema recorded."""

import os
import socket
import time

from shipyard.db import Database, version
from shipyard.trust.audit import AUDIT, Reader, get_event, query, record


def test_events_are_written_and_filtered_on_both_engines(db_url: str) -> None:
    db = Database(db_url)
    try:
        start = time.time()
        for n, (action, artifact, outcome) in enumerate(
            [
                ("get", "ab" * 32, "allowed"),
                ("pull", "cd" * 32, "refused"),
                ("serve", "ab" * 32, "warned"),
            ]
        ):
            record(
                db,
                action=action,
                artifact_id=artifact,
                kind="model",
                ref=f"ref-{n}",
                reader=Reader(
                    service="replica" if action == "serve" else None, client="10.0.0.9:5"
                ),
                outcome=outcome,  # type: ignore[arg-type]
                signer="release" if outcome == "allowed" else None,
                detail="why",
            )
        assert version(db, AUDIT) == AUDIT.latest
        every = query(db)
        assert [e.action for e in every] == ["get", "pull", "serve"]  # oldest first
        first = every[0]
        assert first.host == socket.gethostname() and first.pid == os.getpid()
        assert first.uid == os.getuid() and first.client == "10.0.0.9:5"
        assert first.signer == "release" and first.at >= start - 1
        assert [e.ref for e in query(db, artifact="abab")] == ["ref-0", "ref-2"]
        assert [e.action for e in query(db, outcome="refused")] == ["pull"]
        assert [e.service for e in query(db, action="serve")] == ["replica"]
        assert query(db, user=first.user_name, since=time.time() + 60) == []
        assert [e.action for e in query(db, limit=1)] == ["serve"]  # the latest
        assert get_event(db, first.id) == first
        assert get_event(db, 10**9) is None
    finally:
        db.close()
