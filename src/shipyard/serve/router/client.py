"""A client for the router's admin API (what the deploy controller uses)."""

from pathlib import Path
from typing import Any

from shipyard.home import shipyard_home
from shipyard.httpguard import call, read_token

SERVICE = "router"


class RouterClient:
    def __init__(self, url: str, home: Path | None = None, token: str | None = None) -> None:
        self.url = url.rstrip("/")
        self._token = token or read_token(SERVICE, home or shipyard_home())

    def put(
        self, name: str, versions: list[dict[str, Any]], mirror: dict[str, Any] | None = None
    ) -> Any:
        """Replace deployment `name` (split, mirror, counters) with these versions."""
        body = {"versions": versions, "mirror": mirror}
        return call(f"{self.url}/admin/deployments/{name}", "PUT", body, self._token)

    def status(self, name: str) -> Any:
        return call(f"{self.url}/admin/deployments/{name}")

    def mirrored(self, name: str, limit: int = 100) -> Any:
        url = f"{self.url}/admin/deployments/{name}/mirrored?limit={limit}"
        return call(url, "GET", None, self._token)

    def delete(self, name: str) -> Any:
        return call(f"{self.url}/admin/deployments/{name}", "DELETE", None, self._token)
