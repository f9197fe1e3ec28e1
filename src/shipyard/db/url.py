"""Which database Shipyard's state lives in: `SHIPYARD_DB`; by default the SQLite file
`$SHIPYARD_HOME/catalog.db`. `SHIPYARD_CATALOG`, the older name, is still read when
`SHIPYARD_DB` is unset.

The accepted forms, and nothing else (docs/database.md): `sqlite:///ABSOLUTE/PATH` (or
`sqlite:////ABSOLUTE/PATH`), a bare absolute path (the older name's form), and a libpq URL
`postgresql://...` or `postgres://...`. Anything else is refused by name rather than read as a
file name, which would start an empty database wherever the command happens to run. Every
message names a URL through `redact`, so none shows a password, however the URL is spelled.
"""

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlsplit

from shipyard.errors import InvalidInput
from shipyard.home import shipyard_home

Dialect = Literal["sqlite", "postgresql"]
DEFAULT_FILE = "catalog.db"  # the name the catalog has always had, so old homes keep their state
FORMS = "sqlite:///ABSOLUTE/PATH, an absolute path, or postgresql://..."

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")
# `password=`, `sslpassword=` and the like, in a query or a libpq keyword string.
_QUERY_SECRET = re.compile(r"(password=)('(?:[^'\\]|\\.)*'[^&#\s]*|[^&#\s]*)", re.IGNORECASE)


@dataclass(frozen=True)
class DatabaseURL:
    dialect: Dialect
    target: str  # sqlite: the file's path; postgresql: the URL libpq connects to

    @property
    def shown(self) -> str:
        """The URL (a SQLite file's path) without its password, for messages and logs."""
        return redact(self.target)

    def scrub(self, message: str) -> str:
        """`message` (a driver's, say) with every password of this URL in it hidden."""
        for secret in _secrets(self.target):
            message = message.replace(secret, "***")
        return message

    @property
    def path(self) -> Path:
        if self.dialect != "sqlite":
            raise InvalidInput(f"{self.shown} is not a SQLite database file")
        return Path(self.target)


def redact(text: str) -> str:
    """`text`, a URL spelled right or wrong, with its passwords replaced by `***`: every
    `password=` value, and whatever follows the first `:` of the userinfo, which is all before
    the last `@` (after `scheme://` when the text starts so, else from its start)."""
    text = _QUERY_SECRET.sub(lambda m: m[1] + "***", text)
    span = _userinfo_password(text)
    return text if span is None else text[: span[0]] + "***" + text[span[1] :]


def _userinfo_password(text: str) -> tuple[int, int] | None:
    """Where the userinfo's password is in `text`, if it has one."""
    end = text.rfind("@", 0, min(_find(text, "?"), _find(text, "#")))
    if end < 0:
        return None
    scheme = _SCHEME.match(text)
    start = scheme.end() + 2 if scheme and text.startswith("//", scheme.end()) else 0
    colon = text.find(":", start, end)
    return None if colon < 0 else (colon + 1, end)


def _find(text: str, char: str) -> int:
    at = text.find(char)
    return len(text) if at < 0 else at


def _secrets(text: str) -> list[str]:
    """The passwords `redact` hides in `text`, as written and percent-decoded, longest first."""
    found = [m[2] for m in _QUERY_SECRET.finditer(text)]
    span = _userinfo_password(text)
    if span is not None:
        found.append(text[span[0] : span[1]])
    found += [unquote(s.strip("'")) for s in found]
    return sorted({s for s in found if s}, key=len, reverse=True)


def database_url(home: Path | None = None) -> str:
    """The configured URL: `SHIPYARD_DB`, else `SHIPYARD_CATALOG`, else the file under `home`
    (default `$SHIPYARD_HOME`)."""
    for name in ("SHIPYARD_DB", "SHIPYARD_CATALOG"):
        if os.environ.get(name):
            return os.environ[name]
    return f"sqlite://{((home or shipyard_home()) / DEFAULT_FILE).absolute()}"


def parse_url(text: str) -> DatabaseURL:
    """Read a database URL in one of the accepted forms; refuse anything else by name."""
    if not text.strip():
        raise InvalidInput(f"database URL is empty: use {FORMS}")
    scheme = _SCHEME.match(text)
    name = scheme[1].lower() if scheme else None
    if name in ("postgresql", "postgres"):
        rest = text[len(name) + 1 :]
        if not rest.startswith("//"):
            raise InvalidInput(
                f"database URL {redact(text)!r}: a PostgreSQL URL begins postgresql://"
            )
        before_query = rest[2 : min(_find(rest, "?"), _find(rest, "#"))]
        if "@" in before_query[_find(before_query, "/") :]:
            # libpq ends the userinfo at the first `/`: it would read the password's tail as
            # a host and quote it back in its error.
            raise InvalidInput(
                f"database URL {redact(text)!r}: an `@` after the host: percent-encode `/`, "
                "`?`, `#` and `@` in a user name or password (%2F, %3F, %23, %40)"
            )
        return DatabaseURL("postgresql", text)
    if name == "sqlite":
        return DatabaseURL("sqlite", _sqlite_path(text))
    if scheme and not text.startswith(("/", "~")):
        raise InvalidInput(
            f"database URL {redact(text)!r}: unknown scheme {scheme[1]!r} (use {FORMS})"
        )
    path = Path(text).expanduser()
    if not path.is_absolute():
        # Read as a file name, it would be a new, empty database in whatever directory the
        # command runs in: state forked without a word.
        raise InvalidInput(f"database URL {redact(text)!r} is not an absolute path (use {FORMS})")
    return DatabaseURL("sqlite", str(path))


def _sqlite_path(text: str) -> str:
    parts = urlsplit(text)
    if parts.netloc or not text[len("sqlite:") :].startswith("///"):
        raise InvalidInput(
            f"database URL {redact(text)!r}: a SQLite URL has three slashes before an absolute "
            "path (sqlite:///ABSOLUTE/PATH)"
        )
    if parts.query or parts.fragment or "?" in text:
        raise InvalidInput(f"database URL {redact(text)!r}: a SQLite URL takes no ?query")
    # sqlite:///abs/path, or sqlite:////abs/path as SQLAlchemy spells it: one root either way
    path = unquote(parts.path)
    return "/" + path.lstrip("/") if path.startswith("//") else path
