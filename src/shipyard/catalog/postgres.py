"""The catalog on a PostgreSQL server, for many hosts: the same SQL as the SQLite catalog.

`SHIPYARD_DB=postgresql://user@host/dbname` selects it; the tables are made (or upgraded) on first
open, or ahead of time with `shipyard db upgrade`.
"""

from shipyard.catalog.sql import SQLCatalog
from shipyard.db import Database, DatabaseURL


class PostgresCatalog(SQLCatalog):
    def __init__(self, url: str) -> None:
        super().__init__(Database(DatabaseURL("postgresql", url), label="catalog"))
