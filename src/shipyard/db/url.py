"""Which database Shipyard's state lives in: `SHIPYARD_DB`, a `sqlite:///path` or
`postgresql://user@host/dbname` URL; by default the SQLite file `$SHIPYARD_HOME/catalog.db`.

`SHIPYARD_CATALOG`, the older name, is still read when `SHIPYARD_DB` is unset.
"""

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlsplit, urlunsplit

from shipyard.errors import InvalidInput
from shipyard.home import shipyard_home

Dialect = Literal["sqlite", "postgresql"]
DEFAULT_FILE = "catalog.db"  # the name the catalog has always had, so old homes keep their state


@dataclass(frozen=True)
class DatabaseURL:
    dialect: Dialect
    target: str  # sqlite: the file's path; postgresql: the URL libpq connects to

    @property
    def shown(self) -> str:
        """The URL without its password, for messages and logs."""
        if self.dialect == "sqlite":
            return self.target
        parts = urlsplit(self.target)
        if parts.password is None:
            return self.target
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
        return urlunsplit(parts._replace(netloc=netloc))

    @property
    def path(self) -> Path:
        if self.dialect != "sqlite":
            raise InvalidInput(f"{self.shown} is not a SQLite database file")
        return Path(self.target)


def database_url(home: Path | None = None) -> str:
    """The configured URL: `SHIPYARD_DB`, else `SHIPYARD_CATALOG`, else the file under `home`
    (default `$SHIPYARD_HOME`)."""
    for name in ("SHIPYARD_DB", "SHIPYARD_CATALOG"):
        if os.environ.get(name):
            return os.environ[name]
    return f"sqlite://{((home or shipyard_home()) / DEFAULT_FILE).absolute()}"


def parse_url(text: str) -> DatabaseURL:
    """Read a database URL (or a bare file path, meaning SQLite); refuse any other scheme."""
    if not text.strip():
        raise InvalidInput("database URL is empty: use sqlite:///PATH or postgresql://HOST/DB")
    parts = urlsplit(text)
    if parts.scheme in ("postgresql", "postgres"):
        return DatabaseURL("postgresql", text)
    if parts.scheme == "sqlite":
        if parts.netloc:
            raise InvalidInput(
                f"database URL {text!r}: a SQLite URL has three slashes before an absolute path "
                f"(sqlite:///{parts.netloc}{parts.path})"
            )
        # sqlite:///abs/path, or sqlite:////abs/path as SQLAlchemy spells it: one root either way
        path = unquote(parts.path)
        return DatabaseURL("sqlite", "/" + path.lstrip("/") if path.startswith("//") else path)
    if parts.scheme:
        raise InvalidInput(
            f"database URL {text!r}: unknown scheme {parts.scheme!r} "
            "(allowed: sqlite:///PATH, postgresql://...)"
        )
    return DatabaseURL("sqlite", str(Path(text).expanduser()))
