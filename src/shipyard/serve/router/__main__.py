"""`python -m shipyard.serve.router`: run the router; prints `listening http://HOST:PORT`."""

import argparse
import sys

from shipyard.cli.argtypes import count, nonnegative, port, positive
from shipyard.errors import InvalidInput, ShipyardError
from shipyard.home import shipyard_home
from shipyard.httpguard import Guard, is_loopback, token_path
from shipyard.httpguard.asgi import listen, uvicorn_server
from shipyard.serve.router.app import SERVICE, RouterConfig, create_app
from shipyard.serve.router.policy import POLICIES
from shipyard.serve.router.requestlog import requests_dir


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m shipyard.serve.router", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=port, default=0, help="0: any free port")
    parser.add_argument("--allow-remote", action="store_true", help="allow a non-loopback --host")
    parser.add_argument("--policy", default="prefix", choices=POLICIES)
    parser.add_argument("--epsilon", type=nonnegative, default=0.25, help="bounded-load slack")
    parser.add_argument("--prefix-chars", type=count, default=RouterConfig.prefix_chars)
    parser.add_argument("--health-interval", type=positive, default=RouterConfig.health_interval_s)
    parser.add_argument(
        "--request-log-mib",
        type=positive,
        default=RouterConfig.request_log_mib,
        help="bound of the request log under $SHIPYARD_HOME/serve/requests (default 128)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        config = RouterConfig(
            args.policy,
            args.epsilon,
            args.prefix_chars,
            args.health_interval,
            requests_dir(shipyard_home()),
            args.request_log_mib,
        )
        if not is_loopback(args.host) and not args.allow_remote:
            raise InvalidInput(
                f"--host {args.host} is reachable from other machines; add --allow-remote"
            )
        guard = Guard.start(SERVICE, shipyard_home(), args.host)
        sock = listen(args.host, args.port)
    except ShipyardError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    port = sock.getsockname()[1]
    shown = f"[{args.host}]" if ":" in args.host else args.host
    print(f"listening http://{shown}:{port}", flush=True)
    print(f"admin token in {token_path(SERVICE, shipyard_home())}", file=sys.stderr, flush=True)
    app = create_app(config, guard)
    uvicorn_server(app).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
