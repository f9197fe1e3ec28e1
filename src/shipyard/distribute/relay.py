"""Who relays to whom: each peer's fixed upstream peers, and which pieces it fetches from the
origin. Every peer works both out alone from the same membership view, without talking.

**The mesh.** The members that want the whole artifact sit in a ring (sorted by their own hash).
A member's upstream peers are the members `d` places after it, for `degree` offsets `d` spread
geometrically round the ring (1, 2, 4, 8 at 16 members; 1, 6, 32, 178 at 1,000), and its
downstream peers are the members the same offsets before it. So every member fetches from
exactly `degree` peers and serves exactly `degree` peers, and any piece reaches every member in
a few hops. Keeping requests open to each upstream peer on one connection (its lane) makes
every link carry one flow, the balanced pattern a shaped network carries best: on the
benchmark's rig, 1 MiB requests between fixed pairs used 0.94 of each link, and the same
requests to random holders 0.83 (`fanout_floor.py --mode pairs` and `--mode pieces`), because
random choices pile transfers onto some uplinks while others idle.

**Origin owners.** Each piece has `owners` members (default 1) that alone may fetch it from the
origin, which bounds origin bytes to about one copy. They are chosen by rendezvous hashing with
bounded loads: in piece order, a piece goes to its highest-scoring members (hash of member and
piece) that do not already own their share, ⌈pieces × owners / gateways⌉ (below). Plain rendezvous
hashing gave owners from about 0.4 to 1.5 times the mean (256 pieces, 16 members); the owners
with the most pieces then fetched alone at the end, each through a downlink shared with peer
traffic, and the origin's link fell idle for seconds. When a member leaves, its pieces move to
others, and a few pieces move between the others to keep the loads bounded (2% of 1,000 pieces
at 16 or 32 members, 10% at 100).

**Gateways.** Only a few members per artifact, its gateways (`origin_gateways`, 8), own pieces
at all: the members scoring highest for the artifact's first piece. Each owner keeps one origin
request open, so the origin's link is shared by as many flows as there are owners, and every
piece takes that many piece-times to cross it: with all 32 members owning, 32 first pieces came
out together 2.8 s after the start, and every later piece reached the swarm as late. Eight
gateways cut that to eight piece-times, and each gateway's origin flow stays a small share of
its own downlink, which also carries its peer traffic. (Four, in a 16-member swarm, each
needing a quarter of its downlink for the origin, were slower than all 16: see the history.)

**Backups.** Each piece also has a backup: among the other gateways, by the same bounded-load
rendezvous hashing. A member whose own origin pieces are all out fetches, one at a time, a piece
it backs up from the far end of a slower owner's list, while the owner works through the front.
Owners do fall behind: on the benchmark's rig, an owner whose first origin request met an already
full origin link got a tenth of its share there for about 10 s (the origin's TCP, BBR, was slow
to give a late flow its share), and without backups the origin's link then ran half idle for
the last seconds while those few owners alone still fetched.

A plan costs O(pieces × members log members) numpy work; it is rebuilt only when the members
change.
"""

import hashlib
import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

# The pieces at the front of an owner's list that its backups leave to it: the one it is
# fetching and the next, which it may start before others hear it has the first.
BACKUP_KEEP = 2
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def _key(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def _scores(member_keys: npt.NDArray[np.uint64], piece_key: int) -> npt.NDArray[np.uint64]:
    """The rendezvous score of each member for one piece: splitmix64 of the two keys' xor."""
    x = member_keys ^ np.uint64(piece_key)
    x = (x ^ (x >> np.uint64(30))) * _MIX1
    x = (x ^ (x >> np.uint64(27))) * _MIX2
    scores: npt.NDArray[np.uint64] = x ^ (x >> np.uint64(31))
    return scores


def mesh_offsets(members: int, degree: int) -> list[int]:
    """Distinct ring offsets to a member's upstream peers: `degree` of them (fewer in a small
    ring), spread geometrically from 1 towards the ring's length."""
    offsets: list[int] = []
    for k in range(degree):
        offset = max(1, math.ceil(members ** (k / degree)))
        if offset < members and offset not in offsets:
            offsets.append(offset)
    return offsets


def owner_lists(
    hashes: Sequence[str], members: Sequence[str], owners: int, gateways: int = 0
) -> list[list[str]]:
    """Per piece, its origin owners, highest score first: rendezvous hashing with bounded loads."""
    dealt = _deal(hashes, members, owners, gateways)[0]
    return [[members[i] for i in chosen] for chosen in dealt]


def gateway_mask(
    hashes: Sequence[str], keys: npt.NDArray[np.uint64], gateways: int
) -> npt.NDArray[np.bool_]:
    """Which members may fetch the artifact from the origin: the `gateways` best-scoring ones
    for its first piece (all of them when `gateways` is 0 or at least their number)."""
    mask = np.ones(len(keys), dtype=bool)
    if 0 < gateways < len(keys) and hashes:
        mask[:] = False
        mask[np.argsort(_scores(keys, _key(hashes[0])))[::-1][:gateways]] = True
    return mask


def _deal(
    hashes: Sequence[str], members: Sequence[str], owners: int, gateways: int
) -> tuple[list[list[int]], list[int | None]]:
    """Per piece, the indexes of its `owners` gateways, highest score first, and of its backup,
    the best-scoring other gateway: neither owners nor backups taking more than their share
    of all pieces (rendezvous hashing with bounded loads). No backup with a single gateway."""
    keys = np.array([_key(m) for m in members], dtype=np.uint64)
    eligible = gateway_mask(hashes, keys, gateways)
    eligible_count = max(1, int(eligible.sum()))
    count = min(owners, eligible_count)
    owner_share = -(-len(hashes) * count // eligible_count)
    backup_share = -(-len(hashes) // eligible_count)
    owned = np.zeros(len(members), dtype=np.int64)
    backed = np.zeros(len(members), dtype=np.int64)
    others = eligible.copy()
    dealt, backups = [], []
    for piece_hash in hashes:
        ranked = np.argsort(_scores(keys, _key(piece_hash)))[::-1]
        ranked = ranked[eligible[ranked]]
        chosen = _bounded(ranked, owned, owner_share, count)
        others[chosen] = False
        backup = _bounded(ranked[others[ranked]], backed, backup_share, 1)
        others[chosen] = True
        dealt.append(chosen.tolist())
        backups.append(int(backup[0]) if len(backup) else None)
    return dealt, backups


def _bounded(
    ranked: npt.NDArray[np.intp], loads: npt.NDArray[np.int64], share: int, count: int
) -> npt.NDArray[np.intp]:
    """The first `count` of `ranked` whose load is under `share` (falling back on the others:
    the last pieces may find too few under it), their loads counted up."""
    under = loads[ranked] < share
    chosen = np.concatenate([ranked[under], ranked[~under]])[:count]
    loads[chosen] += 1
    return chosen


class RelayPlan:
    """This peer's upstream and downstream peers in the mesh, the pieces it owns (as a set and
    as a mask over all pieces, for the scheduler's per-round array work) and those it backs up."""

    def __init__(
        self,
        hashes: Sequence[str],
        members: Sequence[str],
        me: str,
        degree: int,
        owners: int,
        gateways: int = 0,
    ) -> None:
        ring = sorted(members, key=_key)
        mine = ring.index(me)
        offsets = mesh_offsets(len(ring), degree)
        self.upstream = [ring[(mine + d) % len(ring)] for d in offsets]
        self.downstream = [ring[(mine - d) % len(ring)] for d in offsets]
        owners_of, backups = _deal(hashes, members, owners, gateways)
        mine_at = members.index(me)
        self.owned = {i for i, chosen in enumerate(owners_of) if mine_at in chosen}
        self.owned_mask = np.zeros(len(hashes), dtype=bool)
        self.owned_mask[list(self.owned)] = True
        # Each piece's first owner, and whether this peer is its backup.
        self.first_owner = np.array([chosen[0] for chosen in owners_of], dtype=np.intp)
        self.backed_mask = np.array([backup == mine_at for backup in backups], dtype=bool)

    def origin_picks(
        self, todo: npt.NDArray[np.intp], nowhere: npt.NDArray[np.bool_], stalled: bool = False
    ) -> list[int]:
        """Pieces to fetch from the origin, first first, of those nobody holds (`nowhere`)
        and this peer may start (`todo`, in index order): its own, in order; once none is
        left, one it backs up (`backup_pick`, which takes an owner's front pieces too once the
        origin has `stalled`)."""
        own: list[int] = todo[self.owned_mask[todo] & nowhere[todo]].tolist()
        if own:
            return own
        backup = self.backup_pick(todo, nowhere, 0 if stalled else BACKUP_KEEP)
        return [] if backup is None else [backup]

    def backup_pick(
        self, todo: npt.NDArray[np.intp], nowhere: npt.NDArray[np.bool_], keep: int = BACKUP_KEEP
    ) -> int | None:
        """Of the pieces this peer backs up, the one furthest down its owner's list (owners
        work through theirs from the front), leaving the owner at least `keep` pieces before
        it so that the two do not fetch the same one (none once the origin's pieces have
        stopped reaching the swarm: see `origin_stall`); None if there is no such piece."""
        pieces = np.flatnonzero(nowhere)
        owners = self.first_owner[pieces]
        order = np.lexsort((pieces, owners))  # grouped by owner, each in the owner's order
        grouped = owners[order]
        position = np.empty(len(pieces), dtype=np.intp)
        position[order] = np.arange(len(pieces)) - np.searchsorted(grouped, grouped)
        eligible = self.backed_mask[pieces] & (position >= keep) & np.isin(pieces, todo)
        if not eligible.any():
            return None
        return int(pieces[np.argmax(np.where(eligible, position, -1))])
