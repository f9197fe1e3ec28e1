"""`shipyard db upgrade|status`: the schema versions of Shipyard's database (SHIPYARD_DB)."""

import argparse

from shipyard.db import Schema, open_database, upgrade, version


def schemas() -> tuple[Schema, ...]:
    """Every subsystem's tables in the shared database, in the order they are upgraded.

    Imported when a db command runs: building the parser must not load the trainer's package."""
    from shipyard.catalog.schema import CATALOG
    from shipyard.evals.schema import EVALS
    from shipyard.queue.schema import QUEUE
    from shipyard.scheduler.store import SCHEDULER
    from shipyard.train.state import TRAIN
    from shipyard.trust.audit import AUDIT

    return (CATALOG, QUEUE, SCHEDULER, TRAIN, EVALS, AUDIT)


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    db = subparsers.add_parser("db", help="the database every subsystem keeps its state in")
    commands = db.add_subparsers(dest="db_command", required=True, metavar="COMMAND")
    up = commands.add_parser("upgrade", help="bring every subsystem's tables to this version")
    up.set_defaults(func=_upgrade)
    status = commands.add_parser("status", help="each subsystem's schema version, and ours")
    status.set_defaults(func=_status)


def _upgrade(args: argparse.Namespace) -> int:
    db = open_database()
    for subsystem, before, now in upgrade(db, schemas()):
        change = f"{before} → {now}" if before != now else f"{now} (up to date)"
        print(f"{subsystem}: {change}")
    print(f"database: {db.url.shown}")
    return 0


def _status(args: argparse.Namespace) -> int:
    db = open_database()
    for schema in schemas():
        found = version(db, schema)
        note = "" if found == schema.latest else f"  (this Shipyard: {schema.latest})"
        print(f"{schema.subsystem}: {found}{note}")
    print(f"database: {db.url.shown}")
    return 0
