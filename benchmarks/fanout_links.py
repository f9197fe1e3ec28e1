"""How busy the emulated links were during a fan-out: where `fanout.py`'s time goes.

A sampler inside the bridge namespace reads every host port's byte counters four times a second
(a bridge port's tx is what its host downloads, its rx what it uploads). `summary` averages them
over the steady phase, while the origin's link is at least half busy, as fractions of the
nominal link rate: hosts that download well below 1.0 while the origin sends at ~0.96 trail it
by a growing margin, and the fan-out ends that much after the origin's last byte.
"""

import itertools
import json
from pathlib import Path
from typing import Any

from fanout_rig import Rig

SAMPLER = """
import json, os, sys, time
with open(sys.argv[1], "w") as out:
    while True:
        row = {"t": time.monotonic()}
        for dev in os.listdir("/sys/class/net"):
            if dev.startswith("p"):
                try:
                    stats = f"/sys/class/net/{dev}/statistics/"
                    row[dev] = [int(open(stats + "tx_bytes").read()),
                                int(open(stats + "rx_bytes").read())]
                except OSError:
                    pass
        out.write(json.dumps(row) + "\\n")
        out.flush()
        time.sleep(0.25)
"""


Sample = dict[str, Any]  # "t": seconds; a port's name: [tx bytes, rx bytes]


class LinkMeter:
    """Samples from construction until `summary`."""

    def __init__(self, rig: Rig, python: str, path: Path) -> None:
        self.rig = rig
        self.path = path
        log = path.with_suffix(".log")
        self.proc = rig.spawn(rig.bridge_ns, [python, "-c", SAMPLER, str(path)], log)

    def summary(self, rate_mbit: float, origin_mbit: float, size: int) -> dict[str, float]:
        """Mean host download and upload use, and the origin's upload use, in the steady phase;
        and the bytes the hosts' links delivered over the whole run, per host, ÷ `size` (packet
        headers add a few percent; more is transfers cut short or duplicated)."""
        self.rig.kill(self.proc)
        origin_port = self.rig.port("o")
        rows = [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]
        steps = list(itertools.pairwise(rows))
        steady = [
            (a, b) for a, b in steps
            if origin_port in a and origin_port in b
            and _mbit([(a, b)], origin_port, 1) > origin_mbit / 2
        ]  # fmt: skip
        if not steady:
            return {}
        hosts = [k for k in steady[0][0] if k not in ("t", origin_port)]

        delivered = sum(rows[-1][h][0] - rows[0][h][0] for h in hosts if h in rows[-1])

        def use(port: str, way: int, rate: float) -> float:
            return _mbit([(a, b) for a, b in steady if port in a and port in b], port, way) / rate

        return {
            "host_download_use": round(sum(use(h, 0, rate_mbit) for h in hosts) / len(hosts), 3),
            "host_upload_use": round(sum(use(h, 1, rate_mbit) for h in hosts) / len(hosts), 3),
            "origin_upload_use": round(use(origin_port, 1, origin_mbit), 3),
            "steady_s": round(sum(b["t"] - a["t"] for a, b in steady), 1),
            "host_wire_bytes_ratio": round(delivered / len(hosts) / size, 3),
        }


def _mbit(spans: list[tuple[Sample, Sample]], port: str, way: int) -> float:
    """A port's mean rate one way (0: tx, 1: rx) over the spans, in Mbit/s."""
    moved = sum(b[port][way] - a[port][way] for a, b in spans)
    seconds = sum(float(b["t"]) - float(a["t"]) for a, b in spans)
    return moved * 8 / max(seconds, 1e-9) / 1e6
