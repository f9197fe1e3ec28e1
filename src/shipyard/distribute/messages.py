"""What each peer message may hold, checked once where it arrives, so that the code acting on it
can trust its types and ranges: the server checks every request (`check_request`), a daemon the
view in a gossip reply (`check_view`).

A check raises `InvalidInput` naming the op and the field. Fields a message does not use are
left alone (a newer peer may send more); the frame's size (`wire.MAX_HEADER`) bounds them.
"""

import re
from collections.abc import Callable
from typing import Any

from shipyard.errors import InvalidInput
from shipyard.store.manifest import MAX_PIECE_SIZE

Header = dict[str, Any]

VIEW_MEMBERS = 1024  # members one gossip view may name (larger swarms send a sample)
MAX_ARTIFACTS = 1024  # artifacts one member's record may name
MAX_PIECES = 1 << 20  # pieces one fetch may name
MAX_PATH = 4096  # characters in a directory a daemon is asked to write into
MAX_HEARTBEAT = (1 << 53) - 1  # wall-clock milliseconds: some 285,000 years

_HASH = re.compile(r"[0-9a-f]{64}")
# HOST:PORT as `config.format_address` writes it: a name, an IPv4 address, or an IPv6 one with
# or without brackets.
_MEMBER = re.compile(r"[0-9A-Za-z._:\[\]-]{1,253}:[0-9]{1,5}")
_BITS = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")


def check_request(header: Header) -> str:
    """The request's op, once every field it uses is the right type and within range."""
    op = header.get("op")
    check = _OPS.get(op) if isinstance(op, str) else None
    if check is None:
        raise InvalidInput(f"unknown op {str(op)[:40]!r}")
    check(header)
    return str(op)


def check_view(view: Any, where: str) -> dict[str, Any]:
    """A gossip view: {member: [heartbeat, {artifact: [wants all, bits or null]}]}."""
    if not isinstance(view, dict):
        raise InvalidInput(f"{where} is not an object")
    if len(view) > VIEW_MEMBERS:
        raise InvalidInput(f"{where} names {len(view)} members, more than {VIEW_MEMBERS}")
    for member, record in view.items():
        _member(member, f"{where}: member")
        at = f"{where}: {member}"
        if not isinstance(record, list) or len(record) != 2:
            raise InvalidInput(f"{at} is not [heartbeat, haves]")
        heartbeat, haves = record
        _count(heartbeat, f"{at}: heartbeat", MAX_HEARTBEAT)
        if not isinstance(haves, dict) or len(haves) > MAX_ARTIFACTS:
            raise InvalidInput(f"{at}: haves is not an object of up to {MAX_ARTIFACTS} artifacts")
        for artifact, have in haves.items():
            _hash(artifact, f"{at}: artifact")
            if not isinstance(have, list) or len(have) != 2 or not isinstance(have[0], bool):
                raise InvalidInput(f"{at}: {artifact[:12]} is not [wants all, bits]")
            if have[1] is not None:
                _bits(have[1], f"{at}: {artifact[:12]} bits")
    return view


def _gossip(header: Header) -> None:
    check_view(header.get("view"), "gossip: view")
    _optional(header, "from", _member, "gossip")


def _have(header: Header) -> None:
    _hash(header.get("artifact"), "have: artifact")
    _member(header.get("from"), "have: from")
    _bits(header.get("have"), "have: have")


def _piece(header: Header) -> None:
    _hash(header.get("hash"), "piece: hash")
    _optional(header, "artifact", _hash, "piece")
    _optional(header, "from", _member, "piece")
    _optional(header, "have", _bits, "piece")
    if "offset" in header:
        _count(header["offset"], "piece: offset", MAX_PIECE_SIZE)
    if not isinstance(header.get("relay", False), bool):
        raise InvalidInput("piece: relay is not true or false")


def _manifest(header: Header) -> None:
    _hash(header.get("id"), "manifest: id")


def _signatures(header: Header) -> None:
    _hash(header.get("id"), "signatures: id")


def _fetch(header: Header) -> None:
    _artifact_and_pieces(header, "fetch")
    if not isinstance(header.get("signatures", False), bool):
        raise InvalidInput("fetch: signatures is not true or false")


def _artifact_and_pieces(header: Header, op: str) -> None:
    _hash(header.get("artifact"), f"{op}: artifact")
    pieces = header.get("pieces")
    if pieces is None:
        return
    if not isinstance(pieces, list) or len(pieces) > MAX_PIECES:
        raise InvalidInput(f"{op}: pieces is not null or a list of up to {MAX_PIECES} hashes")
    for piece_hash in pieces:
        _hash(piece_hash, f"{op}: pieces")


def _materialize(header: Header) -> None:
    _artifact_and_pieces(header, "materialize")
    directory = header.get("dir")
    if not isinstance(directory, str) or not 0 < len(directory) <= MAX_PATH:
        raise InvalidInput(f"materialize: dir {_show(directory)} is not 1-{MAX_PATH} characters")
    if not isinstance(header.get("verify", False), bool):
        raise InvalidInput("materialize: verify is not true or false")
    wait = header.get("wait", 0)
    if isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait <= 60:
        raise InvalidInput(f"materialize: wait {_show(wait)} is not a number of seconds in 0-60")


def _status(header: Header) -> None:
    if header.get("artifact") is not None:
        _hash(header["artifact"], "status: artifact")


_OPS: dict[str, Callable[[Header], None]] = {
    "gossip": _gossip,
    "have": _have,
    "piece": _piece,
    "manifest": _manifest,
    "signatures": _signatures,
    "fetch": _fetch,
    "status": _status,
    "materialize": _materialize,
}


def _optional(header: Header, name: str, check: Callable[[Any, str], None], op: str) -> None:
    if header.get(name) is not None:
        check(header[name], f"{op}: {name}")


def _hash(value: Any, where: str) -> None:
    if not isinstance(value, str) or not _HASH.fullmatch(value):
        raise InvalidInput(f"{where} {_show(value)} is not 64 lowercase hex digits")


def _member(value: Any, where: str) -> None:
    if not isinstance(value, str) or not _MEMBER.fullmatch(value):
        raise InvalidInput(f"{where} {_show(value)} is not HOST:PORT")
    if not 0 < int(value.rpartition(":")[2]) < 65536:
        raise InvalidInput(f"{where} {_show(value)} has a port outside 1-65535")


def _bits(value: Any, where: str) -> None:
    if not isinstance(value, str) or not _BITS.fullmatch(value):
        raise InvalidInput(f"{where} is not base64")


def _count(value: Any, where: str, most: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= most:
        raise InvalidInput(f"{where} {_show(value)} is not an integer in 0-{most}")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
