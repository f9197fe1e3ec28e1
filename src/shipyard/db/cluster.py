"""A throwaway PostgreSQL cluster for tests and benchmarks: `initdb` and `pg_ctl` in a temporary
directory, on a free port, with its unix socket in that directory.

PostgreSQL refuses to run as root, so as root the cluster belongs to the `postgres` system user
that Debian's `postgresql` package creates, and every server command runs through `runuser`.
"""

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path

from shipyard import children
from shipyard.errors import StorageError

RUN_AS = "postgres"  # the system user Debian's package creates


def find_bindir() -> Path | None:
    """The directory holding `initdb` and `pg_ctl` (Debian keeps them off PATH)."""
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).parent
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
    return found[-1].parent if found else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Cluster:
    """`durable=False` turns fsync off: for tests, which check correctness, not crash safety."""

    def __init__(self, durable: bool = True, bindir: Path | None = None) -> None:
        found = bindir or find_bindir()
        if found is None:
            raise StorageError("PostgreSQL is not installed: apt-get install postgresql")
        self.bindir = found
        self.root = Path(tempfile.mkdtemp(prefix="shipyard-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.user = "shipyard"
        self._as: list[str] = []
        if os.geteuid() == 0:
            self._as = ["runuser", "-u", RUN_AS, "--"]
            entry = pwd.getpwnam(RUN_AS)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        settings = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            "unix_socket_directories": str(self.root),
            "max_connections": "200",
            "fsync": "on" if durable else "off",
            "synchronous_commit": "on" if durable else "off",
            "full_page_writes": "on" if durable else "off",
        }
        self._options = " ".join(f"-c {k}={v}" for k, v in settings.items())
        self._pg(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            self.user,
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-locale",
            "--no-sync",  # a throwaway cluster: initdb need not wait on the disk
        )
        self.start()

    def _pg(self, tool: str, *args: str) -> None:
        command: Sequence[str] = [*self._as, str(self.bindir / tool), *args]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise StorageError(
                f"{tool} failed ({result.returncode}): {result.stderr.strip() or result.stdout}"
            )

    def start(self) -> None:
        self._pg(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.root / "server.log"),
            "-o",
            self._options,
            "-w",
            "-t",
            "60",
            "start",
        )
        # Should this process die without `remove` (SIGKILL, a timeout), the keeper ends the
        # server and removes its files: no cluster outlives its script or test session.
        self._postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
        children.keep(self._postmaster, signal.SIGQUIT, remove=self.root)

    def stop(self, mode: str = "fast") -> None:
        self._pg("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")
        children.forget(self._postmaster)

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://{self.user}@/{dbname}?host={self.root}&port={self.port}"

    def tcp_url(self, dbname: str = "postgres") -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, name: str | None = None) -> str:
        """A fresh, empty database; returns its URL."""
        import psycopg

        name = name or f"t_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" STRATEGY file_copy')  # fast, no WAL
        return self.url(name)

    def remove(self) -> None:
        with suppress(StorageError):  # already down: remove its files all the same
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)
