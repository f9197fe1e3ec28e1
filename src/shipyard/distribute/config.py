"""The daemon's configuration: a typed dataclass checked once, at the edge."""

import re
from dataclasses import dataclass

from shipyard.errors import InvalidInput

Address = tuple[str, int]


def parse_address(text: str, what: str = "address") -> Address:
    """`HOST:PORT` → (host, port); raises `InvalidInput` naming `what` when malformed."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidInput(f"{what} {text!r} is not HOST:PORT with a port in 1-65535")
    return host.strip("[]"), int(port)


def format_address(address: Address) -> str:
    return f"{address[0]}:{address[1]}"


@dataclass(frozen=True)
class DaemonConfig:
    """How one peer daemon listens, whom it first asks, where it stores, and its limits.

    Times are seconds. `advertise` is the address other peers dial; it defaults to `listen`.
    """

    listen: Address
    store: str
    seeds: tuple[Address, ...] = ()
    origin: str | None = None
    advertise: Address | None = None
    fsync: bool = True
    gossip_interval: float = 0.3
    gossip_fanout: int = 3
    gossip_haves: int = 24  # other members whose piece bits ride on each gossip message
    dead_after: float = 3.0
    connect_timeout: float = 1.0
    idle_timeout: float = 4.0
    hedge_after: float = 1.5
    # Requests open in all, queued ones on a lane included: as many as the mesh lanes take
    # (`mesh_degree` x `per_peer_inflight`), so a request to a peer outside the mesh goes out
    # only when a lane has nothing to ask for. Each such request takes a share of an uplink its
    # holder's own downstream peers already fill (docs/distribution.md, "Limits and defaults").
    max_inflight: int = 12
    # Requests open to one peer, pipelined on its lane. Three, because on a busy host the next
    # request can take longer to reach the peer than a piece takes on the lane, and the peer's
    # link must never wait for it (docs/distribution.md, "Limits and defaults").
    per_peer_inflight: int = 3
    # Pieces behind the median live member at which a peer fetching a whole artifact catches
    # up (twice the requests, on two connections to each peer), and ahead of it at which it
    # yields (one request fewer per peer): see `catch_up`.
    catch_up_lag: int = 3
    origin_inflight: int = 1
    upload_slots: int = 4
    origin_replicas: int = 1
    # Members an artifact enters the swarm through: only these fetch it from the origin (0: all).
    # Fewer flows share the origin's link, so each piece crosses it sooner (see `relay`).
    origin_gateways: int = 8
    mesh_degree: int = 4  # upstream peers, each with a lane of requests; as many downstream
    relay_patience: float = 2.0
    upload_limit_bps: float | None = None
    # TCP congestion control for the connections this daemon uploads pieces on (None: the
    # kernel's default). Every uplink carries several downstream peers' lanes at once; CUBIC
    # shares it evenly between them, where BBR (v1) starved some of them for many seconds.
    congestion_control: str | None = "cubic"
    trace: str | None = None  # a file to append a line to for each piece stored (see `trace`)
    # Connections open at once, from peers and clients together (see `limits`): each peer keeps
    # a few to each other it talks to, and idle ones make room for new ones beyond this.
    max_connections: int = 256
    # ... of which one source (an IPv4 address, an IPv6 /64) may hold: a host that floods the
    # table makes room out of its own connections (see `limits`).
    max_connections_per_source: int = 64
    swarm_key_file: str | None = None  # a shared secret that refuses strangers (`swarm_key`)
    # Bytes per second a piece reply must average once it has had `piece_call.RATE_GRACE`
    # seconds: a sender trickling bytes is cut off and blamed (see `blame`). Far below any
    # working link's share (1 MiB pieces cross a shared 100 Mbit/s uplink at ~1.5 MB/s), and
    # below one flow of twelve on an uplink capped at 2 Mbit/s (`upload_limit_bps`).
    min_transfer_rate: float = 16 * 1024
    # Where daemons post their addresses and a lonely one finds members: a store URI every
    # host can write, such as the origin's bucket (`bootstrap`); None: seeds alone.
    members_uri: str | None = None
    members_ttl: float = 60.0  # seconds a posted address stays fresh without being renewed
    # Piece bytes a daemon may take from the origin while it expects peers and knows none
    # alive, before it waits for them instead (see `Holding._over_budget`).
    isolated_origin_budget: int = 1 << 30

    def __post_init__(self) -> None:
        if self.listen[0] in ("0.0.0.0", "::", "") and self.advertise is None:
            raise InvalidInput("listen address is a wildcard: give --advertise HOST:PORT")
        positive = {
            "gossip_interval": self.gossip_interval,
            "dead_after": self.dead_after,
            "connect_timeout": self.connect_timeout,
            "idle_timeout": self.idle_timeout,
            "hedge_after": self.hedge_after,
            "relay_patience": self.relay_patience,
            "members_ttl": self.members_ttl,
        }
        for name, value in positive.items():
            if not value > 0:
                raise InvalidInput(f"{name} must be positive, got {value}")
        counts = {
            "gossip_fanout": self.gossip_fanout,
            "gossip_haves": self.gossip_haves,
            "max_inflight": self.max_inflight,
            "per_peer_inflight": self.per_peer_inflight,
            "catch_up_lag": self.catch_up_lag,
            "origin_inflight": self.origin_inflight,
            "upload_slots": self.upload_slots,
            "origin_replicas": self.origin_replicas,
            "mesh_degree": self.mesh_degree,
            "max_connections": self.max_connections,
            "max_connections_per_source": self.max_connections_per_source,
        }
        for name, count in counts.items():
            if count < 1:
                raise InvalidInput(f"{name} must be at least 1, got {count}")
        if self.origin_gateways < 0:
            raise InvalidInput(
                f"origin_gateways must be 0 (all) or more, got {self.origin_gateways}"
            )
        algorithm = self.congestion_control
        if algorithm is not None and not re.fullmatch(r"[a-z0-9_]{1,15}", algorithm):
            raise InvalidInput(
                f"congestion control {algorithm!r} is not a kernel algorithm name such as 'cubic'"
            )
        for name, value in (
            ("min_transfer_rate", self.min_transfer_rate),
            ("isolated_origin_budget", self.isolated_origin_budget),
        ):
            if not value >= 0:
                raise InvalidInput(f"{name} must be 0 or more, got {value}")
        if self.upload_limit_bps is not None and not self.upload_limit_bps > 0:
            raise InvalidInput(f"upload limit must be positive, got {self.upload_limit_bps}")

    @property
    def me(self) -> str:
        """This daemon's identity in the swarm: its advertised HOST:PORT."""
        return format_address(self.advertise or self.listen)
