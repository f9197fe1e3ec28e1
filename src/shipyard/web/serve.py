"""Run the console on uvicorn: loopback unless the user means otherwise."""

import sys
from pathlib import Path

from shipyard.errors import InvalidInput
from shipyard.httpguard import Guard, is_loopback, token_path
from shipyard.httpguard.asgi import listen, uvicorn_server
from shipyard.web.app import create_app
from shipyard.web.context import Console

SERVICE = "console"


def serve_console(
    home: Path,
    host: str = "127.0.0.1",
    port: int = 8643,
    allow_remote: bool = False,
    scheduler_url: str = "http://127.0.0.1:8642",
    peers: tuple[str, ...] = (),
    swarm_key_file: Path | None = None,
) -> None:
    """Serve until interrupted. Changes need the token written to `<home>/tokens/console.token`."""
    if not is_loopback(host):
        if not allow_remote:
            raise InvalidInput(
                f"--host {host} is reachable from other machines; add --allow-remote to mean it"
            )
        print(
            f"warning: console on {host}, beyond this machine: anyone who can reach the port "
            "can read the catalog, and anyone with the token can move aliases",
            file=sys.stderr,
            flush=True,
        )
    guard = Guard.start(SERVICE, home, host)
    console = Console(home, guard, scheduler_url, peers, swarm_key_file)
    sock = listen(host, port)
    shown = f"[{host}]" if ":" in host else host
    bound = sock.getsockname()[1]
    print(
        f"console on http://{shown}:{bound}/ (token for changes in {token_path(SERVICE, home)})",
        flush=True,
    )
    uvicorn_server(create_app(console)).run(sockets=[sock])
