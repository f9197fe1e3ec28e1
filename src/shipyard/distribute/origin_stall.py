"""Whether the origin's pieces have stopped reaching the swarm: the sign for backups to take the
pieces a slow owner keeps for itself.

A backup leaves an owner the front of its list (`relay.BACKUP_KEEP`) so that the two do not fetch
the same piece. But an owner can be slow to the very end: in a `--chaos` run a restarted host,
catching up on 70% of the artifact, came back as a gateway, and its one origin flow, sharing its
downlink with a dozen peer flows, took about 5 s for each of its last two pieces. Every other
piece had reached the swarm by 24.4 s; every surviving host waited on those two until 34 s.
Once no piece has left the swarm's nowhere set for `STALL_AFTER` seconds, backups take the kept
pieces too: at most `BACKUP_KEEP` extra origin pieces per stalled owner, and only once the
origin's pieces have stopped arriving anyway.
"""

# Many times the gap between pieces reaching the swarm from a busy origin (8 gateway flows of
# 1 MiB pieces at 100 Mbit/s land one every 0.09 s), and short next to the stall it ends.
STALL_AFTER = 2.0


class OriginStall:
    """When this peer last saw a piece leave the nowhere set (held by no live member)."""

    def __init__(self) -> None:
        self._nowhere: int | None = None
        self._since = 0.0

    def stalled(self, nowhere: int, now: float) -> bool:
        """Fed the count of pieces nowhere each time the origin is considered: whether some are
        nowhere and none has left that set for `STALL_AFTER` seconds."""
        if self._nowhere is None or nowhere < self._nowhere:
            self._since = now
        self._nowhere = nowhere
        return nowhere > 0 and now - self._since >= STALL_AFTER
