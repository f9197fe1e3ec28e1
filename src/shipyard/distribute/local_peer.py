"""Who is at the other end of a connection from this host: the user id that owns the client's
socket, read from the kernel's socket table (`/proc/net/tcp`, `/proc/net/tcp6`).

A daemon does for local clients what it never does for peers (writing files into a directory:
see `materialize`), and only for its own user or root. A TCP connection carries no credentials,
but a client on this host, in this network namespace, owns a socket in the same table whose
local address is the connection's remote one; a client anywhere else owns none.
"""

import ipaddress
import struct
from pathlib import Path
from typing import Any

_TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))


def requester_uid(remote: Any, local: Any) -> int | None:
    """The user id of the process at the other end of a connection from `remote` to `local`
    (the socket's peer and own addresses); None unless that process is on this host."""
    if not (isinstance(remote, tuple) and isinstance(local, tuple)):
        return None
    wanted = (_proc_address(*remote[:2]), _proc_address(*local[:2]))
    for table in _TABLES:
        try:
            lines = table.read_text().splitlines()[1:]
        except OSError:
            continue  # no IPv6, or no /proc: the next table, then the refusal below
        for line in lines:
            fields = line.split()
            if len(fields) > 7 and (fields[1], fields[2]) == wanted:
                return int(fields[7])
    return None


def _proc_address(host: str, port: int) -> str:
    """An address as the kernel's socket tables print it: each 32-bit word of the address in
    host byte order, in hex, then the port. IPv4-mapped IPv6 addresses are their IPv4 one."""
    address = ipaddress.ip_address(host.split("%", 1)[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    packed = address.packed
    words = struct.unpack(f"={len(packed) // 4}I", packed)
    return "".join(f"{word:08X}" for word in words) + f":{port:04X}"
