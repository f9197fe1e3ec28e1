"""Artifacts, aliases, runs and lineage: SQLite by default, PostgreSQL for many hosts."""

from pathlib import Path
from urllib.parse import unquote, urlparse

from shipyard.catalog.base import (
    AliasEvent,
    ArtifactRecord,
    Catalog,
    LineageEdge,
    RunRecord,
    RunStatus,
)
from shipyard.catalog.sqlite import SQLiteCatalog, ensure_catalog_file
from shipyard.errors import InvalidInput


def open_catalog(uri: str) -> Catalog:
    """The catalog a URI names: `sqlite:///path/catalog.db` or a plain file path."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "sqlite"):
        return SQLiteCatalog(Path(unquote(parsed.path) if parsed.scheme else uri))
    raise InvalidInput(f"catalog URI {uri!r}: unknown scheme {parsed.scheme!r} (allowed: sqlite)")


__all__ = [
    "AliasEvent",
    "ArtifactRecord",
    "Catalog",
    "LineageEdge",
    "RunRecord",
    "RunStatus",
    "SQLiteCatalog",
    "ensure_catalog_file",
    "open_catalog",
]
