"""The client side: one JSON request to a guarded service, refusals mapped to Shipyard's errors.

Clients send `read_token(service, home)` as the bearer token.
"""

import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlparse

from shipyard.errors import Conflict, InvalidInput, NotFound, ShipyardError, StorageError
from shipyard.httpguard.guard import MUTATIONS

_BY_STATUS: dict[int, type[ShipyardError]] = {
    400: InvalidInput,
    404: NotFound,
    409: Conflict,
    413: InvalidInput,
    415: InvalidInput,
}


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any) -> None:
        return None  # a redirect would carry the token to another address


# Never through a proxy (the token stays on this machine's loopback), never redirected.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())


def call(url: str, method: str = "GET", body: Any = None, token: str | None = None) -> Any:
    """One JSON request to a guarded service; its refusals come back as Shipyard's errors.

    400/413/415 → InvalidInput, 404 → NotFound, 409 → Conflict; no answer, a refused token or
    Host, or a server error → StorageError. Each message names the URL.
    """
    if urlparse(url).scheme not in ("http", "https"):
        raise InvalidInput(f"service URL {url!r}: expected http://HOST:PORT/...")
    headers = {"Accept": "application/json"}
    data = None
    if method in MUTATIONS:
        headers["Content-Type"] = "application/json"
        data = json.dumps({} if body is None else body).encode()
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with _OPENER.open(request, timeout=30) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(exc.read()).get("error", exc.reason)
        except (ValueError, AttributeError, OSError):
            message = exc.reason
        kind = _BY_STATUS.get(exc.code, StorageError)
        raise kind(f"{method} {url}: {exc.code} {message}") from None
    except (urllib.error.URLError, OSError) as exc:
        why = getattr(exc, "reason", exc)
        raise StorageError(f"no answer from {url} ({why}): is the service running?") from None
    except ValueError as exc:
        raise StorageError(f"{method} {url}: reply is not JSON ({exc})") from None
