"""The embedded catalog: one SQLite file in WAL mode, safe for many processes on one host.

Only a missing file means a fresh catalog (`shipyard.db.sqlitefile`); an existing file that is
empty or not a database is refused by name (`StorageError`), never replaced: it held every alias
and lineage record.
"""

from pathlib import Path

from shipyard.catalog.sql import SQLCatalog
from shipyard.db import Database, DatabaseURL


class SQLiteCatalog(SQLCatalog):
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        super().__init__(Database(DatabaseURL("sqlite", str(self.path)), label="catalog"))
