"""Artifacts, aliases, runs and lineage: SQLite by default, PostgreSQL for many hosts."""

from shipyard.catalog.base import (
    AliasEvent,
    ArtifactRecord,
    Catalog,
    LineageEdge,
    RunRecord,
    RunStatus,
)
from shipyard.catalog.postgres import PostgresCatalog
from shipyard.catalog.sql import SQLCatalog
from shipyard.catalog.sqlite import SQLiteCatalog
from shipyard.db import parse_url


def open_catalog(uri: str) -> Catalog:
    """The catalog a URI names: `sqlite:///path/catalog.db`, an absolute file path, or
    `postgresql://user@host/dbname`."""
    url = parse_url(uri)
    if url.dialect == "postgresql":
        return PostgresCatalog(url.target)
    return SQLiteCatalog(url.path)


__all__ = [
    "AliasEvent",
    "ArtifactRecord",
    "Catalog",
    "LineageEdge",
    "PostgresCatalog",
    "RunRecord",
    "RunStatus",
    "SQLCatalog",
    "SQLiteCatalog",
    "open_catalog",
]
