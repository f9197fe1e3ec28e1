"""Fan one artifact out to N emulated hosts (network namespaces, veth, a bridge, `tc tbf` caps)
and compare Shipyard's swarm with every host downloading straight from the origin over HTTP.

    sudo .venv/bin/python benchmarks/fanout.py [--hosts 16] [--rate-mbit 100] [--size-mib 256]
        [--modes warm,cold] [--chaos [--boost-restarted]] [--chaos-origin] [--origin-gateways N]
        [--baseline-size-mib S] [--no-baseline] [--no-aria2] [--trace] [--keep]
        [--liar notfound|halfreset|flip|slow] [--dead-seed]

The clock measures what a user waits for: from `shipyard pull ID --dest DIR` launched on every
host at once to the last host's pull returning with its file written (each file is then checked
against the source's SHA-256; see `fanout_pull.py`). `warm`: the daemons were already running;
`cold`: they are started at the same moment as the pulls, on empty stores. T_stores, the moment
the last store held every piece, is reported beside it.

Prints progress on stderr and, last, one JSON line: value = T_warm / (S/B), cold_value =
T_cold / (S/B), baseline = T_origin / (S/B), ratio = baseline / value (the speed-up),
origin_bytes_ratio = piece bytes the origin sent / S (warm; cold_origin_bytes_ratio for cold).
S/B is the artifact size over one host's link rate: no host can finish sooner. With aria2c
installed, a BitTorrent swarm of the same file on the same hosts, each to its verified file, is
the second baseline (`fanout_aria2.py`): aria2_baseline = T_aria2 / (S/B), warm_vs_aria2 and
cold_vs_aria2 = T_warm / T_aria2 and T_cold / T_aria2, aria2_origin_wire_ratio = bytes the
origin's link sent (packet headers included) / S. With --trace every daemon writes a transfer
trace (`peer serve --trace`) and `hops` summarises how the pieces spread (`peer hops`); with
--chaos too, `restarts` gives each restarted host's pieces at the kill, its lag, and how soon after
its restart it asked for and stored a piece.

--liar MODE: after the clean warm run, the same swarm again with its last `--liars` (4) hosts
replaced by liars (`fanout_liars.py`): liar_vs_clean = the honest hosts' time / the clean
run's, when each honest host blamed each liar (the latest per host in
blamed_all_within_s_by_host), and the bytes left in partial files; with
`--starve N`, N honest daemons are stopped for 2 s and run for 0.4 s over and over meanwhile,
and honest_peers_blamed says whether any host took them for liars.
--dead-seed: every host's only seed is an address where nothing listens; they must meet on the
members board (`--members-uri`, a directory standing in for the origin's bucket);
swarm_formed_s is how long that took, and origin_bytes_ratio is held to 1.2.
"""

import argparse
import hashlib
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bytecode import compile_shipyard
from fanout_aria2 import aria2_swarm
from fanout_aria2 import available as aria2_available
from fanout_liars import LIARS, blame_report, partial_bytes, start_liar, starved
from fanout_liars import MODES as LIAR_MODES
from fanout_links import LinkMeter
from fanout_pull import Pulls
from fanout_rig import Rig
from proc_cpu import cpu_seconds as proc_cpu_seconds
from shipyard.distribute import DaemonConfig
from shipyard.distribute.trace import hop_summary, read_traces
from shipyard.store import LocalBackend, Manifest, PieceStore, put_tree

PORT = 7000
ORIGIN_PORT = 8000
# The origin: a static HTTP/1.1 server over the store directory (object storage stand-in), with a
# listen backlog deep enough that N hosts connecting at once are not dropped.
ORIGIN_SERVER = """
import functools, http.server, sys
class Server(http.server.ThreadingHTTPServer):
    request_queue_size = 1024
class Handler(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as object stores do
handler = functools.partial(Handler, directory=sys.argv[3])
Server((sys.argv[1], int(sys.argv[2])), handler).serve_forever()
"""
MODES = ("warm", "cold")
WAIT_DAEMON = 60.0  # a cold pull's --wait-daemon: the daemons start on a busy machine


@dataclass
class Host:
    name: str
    ns: str
    ip: str
    store: Path
    log: Path
    dest: Path  # where its pull writes the files
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    resumed_from: int | None = None  # pieces on disk when it was restarted
    trace: Path | None = None  # its daemon's transfer trace, with --trace
    seen: set[str] = field(default_factory=set)  # pieces found in its store so far

    def piece_path(self, piece_hash: str) -> Path:
        return self.store / "pieces" / piece_hash[:2] / piece_hash

    def last_stored(self) -> float:
        """Wall-clock time its newest piece was written (after its hash was verified)."""
        return max(self.piece_path(h).stat().st_mtime for h in self.seen)

    @property
    def address(self) -> str:
        return f"{self.ip}:{PORT}"


@dataclass
class Run:
    hosts: list[Host]
    seeds: list[Host]
    sizes: dict[str, int]
    origin_log: Path
    dead: set[str] = field(default_factory=set)
    survivors_done: float | None = None
    stores_done: float | None = None  # seconds until every live store held every piece
    events: list[str] = field(default_factory=list)
    wall_started: float = 0.0  # time.time() when every host was asked to fetch
    killed_at: float | None = None  # --chaos: seconds from then to the kill
    restarted_at: float | None = None  # ... and to the restart

    def held(self, host: Host) -> set[str]:
        """The pieces in the host's store. Pieces never leave a store, so only the missing
        ones are looked for: listing every store 5 times a second cost a fifth of a core."""
        missing = [h for h in self.sizes if h not in host.seen]
        host.seen.update(h for h in missing if host.piece_path(h).exists())
        return host.seen


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--hosts", type=int, default=16)
    p.add_argument("--rate-mbit", type=float, default=100.0, help="each host's link, each way")
    p.add_argument("--origin-rate-mbit", type=float, default=100.0)
    p.add_argument("--size-mib", type=int, default=256)
    p.add_argument("--piece-mib", type=float, default=1.0)
    p.add_argument(
        "--modes", default="warm,cold",
        help="warm: pulls on running daemons; cold: daemons started with the pulls (default both)",
    )  # fmt: skip
    p.add_argument("--chaos", action="store_true", help="kill 25%% of hosts at 30%% progress")
    p.add_argument("--chaos-origin", action="store_true", help="kill the origin once pieces x2")
    p.add_argument(
        "--boost-restarted", action="store_true",
        help="a diagnostic for --chaos: restarted daemons' CPU share raised (autogroup nice -15) "
        "to what a host of their own would give them; goal figures are measured without it",
    )  # fmt: skip
    p.add_argument("--baseline-size-mib", type=int, help="origin-only run size (default: size)")
    p.add_argument("--no-baseline", action="store_true", help="measure Shipyard's swarm only")
    p.add_argument("--no-aria2", action="store_true", help="skip the BitTorrent baseline")
    p.add_argument("--no-origin-only", action="store_true", help="skip the HTTP-only baseline")
    p.add_argument(
        "--queue-ms", type=float, default=100.0,
        help="tbf queue per link, in ms of traffic (100: a deep FIFO; switches buffer less)",
    )  # fmt: skip
    p.add_argument(
        "--congestion-control", metavar="NAME",
        help="the daemons' TCP congestion control for uploads (default: theirs; 'kernel')",
    )  # fmt: skip
    p.add_argument(
        "--origin-gateways", type=int, metavar="N",
        help="members that fetch from the origin (default: 8 x origin rate / host rate, so that "
        "each gateway's origin flow stays an eighth of its link, as docs/distribution.md advises)",
    )  # fmt: skip
    p.add_argument(
        "--origin-inflight", type=int, metavar="N",
        help="origin requests each gateway keeps open (default: the daemons')",
    )  # fmt: skip
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=900.0)
    p.add_argument("--workdir", type=Path, help="stores go here (default: /dev/shm if it fits)")
    p.add_argument("--keep", action="store_true", help="keep stores, logs and link samples")
    p.add_argument("--trace", action="store_true", help="trace transfers; report how pieces spread")
    p.add_argument("--liar", choices=LIAR_MODES, help="then rerun with liars among the hosts")
    p.add_argument("--liars", type=int, default=LIARS, help=f"how many (default: {LIARS})")
    p.add_argument(
        "--starve", type=int, default=0, metavar="N",
        help="in the --liar run, stop and continue N honest daemons in bursts (2 s / 0.4 s)",
    )  # fmt: skip
    p.add_argument("--dead-seed", action="store_true", help="no live seed: join via a board")
    args = p.parse_args()
    if os.geteuid() != 0:
        p.error("needs root (network namespaces and tc)")
    if not 2 <= args.hosts <= 240:
        p.error("--hosts must be between 2 and 240")
    args.modes = args.modes.split(",")
    if "warm" not in args.modes or not set(args.modes) <= set(MODES):
        p.error(f"--modes: warm and optionally cold, comma-separated, not {args.modes}")
    if (args.chaos or args.chaos_origin or args.liar) and "cold" in args.modes:
        args.modes = ["warm"]  # the failures are staged on a warm swarm
    if args.liar and not 1 <= args.liars <= args.hosts - 2:
        p.error("--liars must be at least 1, and leave at least 2 honest hosts")
    if not 0 <= args.starve <= (args.hosts - args.liars if args.liar else 0):
        p.error("--starve needs --liar, and at most as many hosts as are honest")
    if args.origin_gateways is None:
        share = args.origin_rate_mbit / args.rate_mbit
        args.origin_gateways = max(1, round(DaemonConfig.origin_gateways * share))
    return args


def make_artifact(work: Path, size_mib: int, piece_mib: float) -> tuple[Path, Manifest]:
    src = work / "src"
    src.mkdir()
    rng = random.Random(1)
    with open(src / "model.bin", "wb") as out:
        for _ in range(size_mib):
            out.write(rng.randbytes(1 << 20))
    store = work / "origin"
    manifest = put_tree(
        PieceStore(LocalBackend(store, fsync=False)), src, "model", int(piece_mib * (1 << 20))
    )
    return store, manifest


def daemon_flags(args: argparse.Namespace) -> list[str]:
    """What every host's daemon is run with beyond its addresses, as an operator sets it up."""
    flags = ["--no-fsync", "--origin-gateways", str(args.origin_gateways)]
    if args.origin_inflight:
        flags += ["--origin-inflight", str(args.origin_inflight)]
    if args.congestion_control:
        flags += ["--congestion-control", args.congestion_control]
    if args.dead_seed:
        flags += ["--members-uri", str(args.board)]
    return flags


def start_daemon(rig: Rig, host: Host, seeds: list[Host], origin: str, flags: list[str]) -> None:
    host.starts += 1
    joined = ",".join(s.address for s in seeds)
    cmd = [sys.executable, "-m", "shipyard.cli.main", "peer", "serve", "--listen", host.address,
           "--seeds", joined, "--store", str(host.store), "--origin", origin, *flags]  # fmt: skip
    if host.trace:
        cmd += ["--trace", str(host.trace)]
    host.proc = rig.spawn(host.ns, cmd, host.log)


def wait_listening(hosts: list[Host], deadline: float) -> None:
    for host in hosts:
        while host.log.read_text().count("listening") < host.starts:
            if time.monotonic() > deadline or (host.proc and host.proc.poll() is not None):
                raise SystemExit(f"{host.name} did not start:\n{host.log.read_text()[-2000:]}")
            time.sleep(0.1)


def spawn_pulls(rig: Rig, hosts: list[Host], artifact: str, mode: str) -> Pulls:
    """A `shipyard pull --dest` per host, behind a closed gate (see `fanout_pull`)."""
    work = hosts[0].log.parent
    pulls = Pulls(rig, sys.executable, work / f"{mode}-gate")
    wait_daemon = WAIT_DAEMON if mode == "cold" else 10.0
    for host in hosts:
        log = work / f"{host.name}-{mode}-pull.log"
        pulls.spawn(host.name, host.ns, host.address, artifact, host.dest, log, wait_daemon)
    return pulls


def metrics(host: Host) -> dict[str, float]:
    text = subprocess.run(
        ["ip", "netns", "exec", host.ns, "curl", "-s", f"http://{host.address}/metrics"],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout  # fmt: skip
    return {
        k: float(v) for k, v in (ln.rsplit(" ", 1) for ln in text.splitlines() if ln[:1] != "#")
    }


def cpu_seconds(proc: subprocess.Popen[bytes] | None) -> npt.NDArray[np.float64]:
    """[user, system] CPU seconds a live process has used, then the same for its main thread:
    a daemon's event loop (its control plane), the rest being its transfer threads (`ip netns
    exec` execs, so the pid is ours). System time includes the emulated network's packet work
    done in its syscalls."""
    if proc is None:
        return np.zeros(4)
    stats = (f"/proc/{proc.pid}/stat", f"/proc/{proc.pid}/task/{proc.pid}/stat")
    try:
        return np.array([seconds for stat in stats for seconds in proc_cpu_seconds(stat)])
    except FileNotFoundError:
        return np.zeros(4)


def cpu_busy() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine, to tell a CPU-starved run from a slow one."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def memory_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) << 10
    return 0


def origin_piece_bytes(log: Path, sizes: dict[str, int], since: int = 0) -> int:
    """Piece bytes the origin served, by its log from byte `since` on."""
    with open(log, "rb") as f:
        f.seek(since)
        text = f.read().decode(errors="replace")
    served = re.findall(r'"GET /pieces/\w+/(\w+) HTTP/1\.[01]" 200', text)
    return sum(sizes.get(h, 0) for h in served)


def swarm(rig: Rig, args: argparse.Namespace, run: Run, origin_url: str,
          origin: subprocess.Popen[bytes], pulls: Pulls) -> float:  # fmt: skip
    """Release every host's pull, apply the chaos schedule, return seconds from the release
    until the pulls of all live hosts have returned, their files written. A killed host's pull
    rides out its daemon's restart (or is not waited for, if it stays dead). Also notes when the
    last live store held every piece (`stores_done`)."""
    wall_started = run.wall_started = pulls.release()
    started = time.monotonic() - (time.time() - wall_started)
    rng = random.Random(args.seed)
    total = len(run.sizes)
    restart_at: tuple[float, list[Host]] | None = None
    chaos_done = origin_done = False
    last_report = 0.0
    while True:
        now = time.monotonic() - started
        # Before the poll, which takes a second or more on a starved machine: the restart comes
        # when it is due, not when the poll is done.
        if restart_at and now >= restart_at[0]:
            run.restarted_at = now
            cpu = restart(rig, run, restart_at[1], origin_url, args)
            listening = time.monotonic() - started - now
            names = [h.name for h in restart_at[1]]
            run.events.append(
                f"t={now:.2f}s restarted {names}, listening {listening:.2f} s later, "
                f"having used {cpu:.2f} s of CPU each (the slowest)"
            )
            restart_at = None
            continue
        held = {h.name: run.held(h) for h in run.hosts}
        live = [h for h in run.hosts if h.name not in run.dead]
        never_killed = [h for h in live if h.starts == 1]
        finished = {h.name: pulls.finished(h.name) for h in live}
        if run.survivors_done is None and all(finished[h.name] for h in never_killed):
            run.survivors_done = max(finished[h.name] or 0 for h in never_killed) - wall_started
        if all(len(held[h.name]) == total for h in live) and run.stores_done is None:
            run.stores_done = max(h.last_stored() for h in live) - wall_started
        if all(finished.values()) and restart_at is None:
            return max(t or 0 for t in finished.values()) - wall_started
        if now > args.timeout:
            raise SystemExit(f"timed out after {now:.0f} s: {[len(held[h.name]) for h in live]}")
        for host in live:  # a daemon the benchmark did not kill: a crash, or out of memory
            if host.proc and host.proc.poll() is not None:
                raise SystemExit(f"{host.name} exited ({host.proc.returncode}), log: {host.log}")
        progress = sum(len(held[h.name]) for h in live) / (total * len(live))
        if now - last_report > 2:
            last_report = now
            low = min(len(held[h.name]) for h in live) / total
            sent = origin_piece_bytes(run.origin_log, run.sizes) / sum(run.sizes.values())
            say(f"  t={now:5.1f}s  mean {progress:6.1%}  min {low:6.1%}  origin {sent:5.1%}")
        if args.chaos and not chaos_done and progress >= 0.3:
            chaos_done = True
            victims = kill_quarter(rig, run, held, rng, always=run.seeds)
            killed = run.killed_at = time.monotonic() - started
            run.events[-1] = f"t={killed:.2f}s {run.events[-1]}"
            coming_back = rng.sample(victims, math.ceil(len(victims) / 2))
            restart_at = (killed + 10, coming_back)
        if args.chaos_origin and not origin_done and twice_held(held, list(run.sizes), live):
            origin_done = True
            rig.kill(origin)
            run.events.append(f"t={now:.1f}s killed the origin")
            kill_quarter(rig, run, held, rng, always=[])
        # Polls every 0.2 s, but wakes for a restart when it is due rather than up to 0.2 s late.
        due = restart_at[0] - (time.monotonic() - started) if restart_at else 0.2
        time.sleep(min(0.2, max(0.0, due)))


def restart(
    rig: Rig, run: Run, hosts: list[Host], origin_url: str, args: argparse.Namespace
) -> float:
    """Start the killed `hosts` again, wait until they listen, and return the most CPU seconds
    one had used by then: on a busy machine its share of the cores sets how long that takes."""
    for host in hosts:
        host.resumed_from = len(run.held(host))
        # As a supervisor would: the same command line. Its seeds are dead, unless one came
        # back with it, so it rejoins through the members it remembers.
        start_daemon(rig, host, run.seeds, origin_url, daemon_flags(args))
        if args.boost_restarted:  # its own session, so its own autogroup (see `spawn`)
            assert host.proc is not None
            Path(f"/proc/{host.proc.pid}/autogroup").write_text("-15")
        run.dead.discard(host.name)
    wait_listening(hosts, time.monotonic() + 60)
    # `ip netns exec` execs the daemon, so the process is the daemon itself.
    return max(sum(proc_cpu_seconds(f"/proc/{h.proc.pid}/stat")) for h in hosts if h.proc)


def restart_report(run: Run, records: list[dict[str, Any]]) -> list[dict[str, object]]:
    """Per restarted host, from its transfer trace: the pieces it held at the kill, how far it
    trailed a link run full from the start (`lag_s`, at its own rate after the restart), and how
    long after the restart it asked for and stored its first piece: what a restarted host's
    finish time is made of."""
    assert run.killed_at is not None and run.restarted_at is not None
    rows: list[dict[str, object]] = []
    for host in run.hosts:
        after = sorted(
            (r["requested"] - run.wall_started, r["stored"] - run.wall_started)
            for r in records
            if r["peer"] == host.address and r["requested"] - run.wall_started >= run.restarted_at
        )
        if host.resumed_from is None or len(after) < 2:
            continue
        stored = sorted(done for _, done in after)
        rate = (len(stored) - 1) / (stored[-1] - stored[0])
        rows.append({
            "host": host.name,
            "held_at_kill": host.resumed_from,
            "lag_s": round(run.killed_at - host.resumed_from / rate, 2),
            "first_request_after_restart_s": round(after[0][0] - run.restarted_at, 2),
            "first_piece_after_restart_s": round(stored[0] - run.restarted_at, 2),
            "pieces_per_s_after": round(rate, 2),
            "done_s": round(stored[-1], 2),
        })  # fmt: skip
    return rows


def twice_held(held: dict[str, set[str]], hashes: list[str], live: list[Host]) -> bool:
    counts = dict.fromkeys(hashes, 0)
    for host in live:
        for h in held[host.name]:
            counts[h] = counts.get(h, 0) + 1
    return min(counts.values()) >= 2


def kill_quarter(rig: Rig, run: Run, held: dict[str, set[str]], rng: random.Random,
                 always: list[Host]) -> list[Host]:  # fmt: skip
    """Kill 25% of live hosts: the given ones, the one holding most pieces, then random ones."""
    live = [h for h in run.hosts if h.name not in run.dead]
    chosen = [*always, max(live, key=lambda h: len(held[h.name]))]
    victims = list({h.name: h for h in chosen}.values())
    others = [h for h in live if h not in victims]
    count = max(math.ceil(len(run.hosts) / 4), len(victims))
    victims += rng.sample(others, max(0, count - len(victims)))
    for host in victims:
        assert host.proc is not None
        rig.kill(host.proc)
        run.dead.add(host.name)
    run.events.append(
        f"killed {[h.name for h in victims]} holding {[len(held[h.name]) for h in victims]} pieces"
    )
    return victims


def origin_only(rig: Rig, hosts: list[Host], url: str, work: Path) -> float:
    """Every host downloads the file straight from the origin over HTTP at the same caps."""
    started = time.monotonic()
    curl = ["curl", "-sSf", "--retry", "5", "--retry-all-errors", "-o", "/dev/null", url]
    logs = [work / f"{h.name}-curl.log" for h in hosts]
    procs = [rig.spawn(h.ns, curl, log) for h, log in zip(hosts, logs, strict=True)]
    failed = [log for proc, log in zip(procs, logs, strict=True) if proc.wait() != 0]
    if failed:
        raise SystemExit(f"origin-only baseline: {failed[0].name}: {failed[0].read_text()[-500:]}")
    retried = [log.name for log in logs if log.read_text().strip()]
    if retried:
        say(f"origin-only: {len(retried)} downloads needed retries, e.g. {retried[0]}")
    return time.monotonic() - started


def main() -> None:
    args = parse_args()
    compile_shipyard()
    need = (2 * args.hosts + 3) * args.size_mib << 20  # stores and destinations
    shm = shutil.disk_usage("/dev/shm").free if Path("/dev/shm").is_dir() else 0
    # A tmpfs keeps a contended shared disk out of the measurement when memory allows. Its files
    # live in memory, so it also needs free memory: kept runs had the OOM killer end daemons.
    shm = min(shm, memory_available())
    parent = args.workdir or (Path("/dev/shm") if shm > 2 * need else None)
    work = Path(tempfile.mkdtemp(prefix="shipyard-fanout-", dir=parent))
    rig = Rig(f"{os.getpid() % 100000}", args.queue_ms)
    try:
        result = bench(args, rig, work)
    finally:
        rig.close()
        if args.keep:
            say(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result))


def bench(args: argparse.Namespace, rig: Rig, work: Path) -> dict[str, object]:
    say(f"building a {args.size_mib} MiB artifact ...")
    store, manifest = make_artifact(work, args.size_mib, args.piece_mib)
    sizes = {p.hash: p.size for f in manifest.files for p in f.pieces}
    base_mib = min(args.baseline_size_mib or args.size_mib, args.size_mib)
    with open(work / "src" / "model.bin", "rb") as src, open(store / "baseline.bin", "wb") as out:
        out.write(src.read(base_mib << 20))
    origin_ns, origin_ip = rig.host("o", 0, args.origin_rate_mbit)
    origin_log = work / "origin.log"
    http = [sys.executable, "-c", ORIGIN_SERVER, origin_ip, str(ORIGIN_PORT), str(store)]
    origin = rig.spawn(origin_ns, http, origin_log)
    origin_url = f"http://{origin_ip}:{ORIGIN_PORT}"
    hosts = []
    for i in range(args.hosts):
        ns, ip = rig.host(f"h{i}", i + 1, args.rate_mbit)
        hosts.append(Host(f"h{i}", ns, ip, work / f"h{i}", work / f"h{i}.log", work / f"h{i}-dest"))
        hosts[-1].trace = work / f"h{i}.trace" if args.trace else None
    # Every host is told only of the first N/8: the would-be "trackers" that --chaos kills.
    seeds = hosts[: max(1, args.hosts // 8)]
    if args.dead_seed:  # nothing listens on the origin's host at PORT
        seeds = [Host("dead", origin_ns, origin_ip, work / "dead", work / "dead.log", work)]
        args.board = work / "board"
    for host in hosts:
        start_daemon(rig, host, seeds, origin_url, daemon_flags(args))
    wait_listening(hosts, time.monotonic() + 120)
    pulls = spawn_pulls(rig, hosts, manifest.id, "warm")  # they import Shipyard meanwhile
    time.sleep(2)  # let gossip spread membership before the clock starts
    formed = wait_formed(hosts, time.monotonic() + 60) if args.dead_seed else None
    run = Run(hosts, seeds, sizes, origin_log)
    size = manifest.size
    bound = size * 8 / (args.rate_mbit * 1e6)
    say(f"swarm: {args.hosts} hosts at {args.rate_mbit} Mbit/s, S/B = {bound:.1f} s")
    idle_cpu = {h.name: cpu_seconds(h.proc) for h in hosts}  # start-up, before the clock
    busy_before = cpu_busy()
    links = LinkMeter(rig, sys.executable, work / "links.jsonl")
    t_swarm = swarm(rig, args, run, origin_url, origin, pulls)
    link_use = links.summary(args.rate_mbit, args.origin_rate_mbit, manifest.size)
    busy_after = cpu_busy()
    machine_busy = (busy_after[0] - busy_before[0]) / max(1, busy_after[1] - busy_before[1])
    counted = [h for h in hosts if h.starts == 1 and h.name not in run.dead]
    used = [cpu_seconds(h.proc) - idle_cpu[h.name] for h in counted]
    daemon_cpu = np.mean(used, axis=0) if used else np.zeros(4)
    resumed = [(h.name, h.resumed_from, metrics(h)) for h in hosts if h.resumed_from is not None]
    refetched = sum(
        int(m.get('shipyard_peer_pieces_received_total{source="peer"}', 0)
            + m.get('shipyard_peer_pieces_received_total{source="origin"}', 0))
        - (len(sizes) - (before or 0))
        for _, before, m in resumed
    )  # fmt: skip
    origin_bytes = origin_piece_bytes(origin_log, sizes)
    counters = [metrics(h) for h in hosts if h.name not in run.dead]
    hedged = sum(m.get("shipyard_peer_hedged_requests_total", 0) for m in counters)
    failed = {
        reason: int(sum(m.get(f'shipyard_peer_request_failures_total{{source="{reason}"}}', 0)
                        for m in counters))
        for reason in ("busy", "peer", "origin")
    }  # fmt: skip
    served_key = 'shipyard_peer_requests_served_total{op="'  # then the op and '"}'
    ops = sorted(
        {key[len(served_key) : -2] for m in counters for key in m if key.startswith(served_key)}
    )
    served = {
        op: round(float(np.mean([m.get(f'{served_key}{op}"}}', 0) for m in counters])), 1)
        for op in ops
    }
    result: dict[str, object] = {
        "name": "fanout",
        "value": round(t_swarm / bound, 3),
        "unit": "x S/B",
        "t_shipyard_s": round(t_swarm, 2),
        "t_stores_s": round(run.stores_done or t_swarm, 2),
        "t_never_killed_hosts_s": round(run.survivors_done or t_swarm, 2),
        "bound_s": round(bound, 2),
        "origin_bytes_ratio": round(origin_bytes / size, 3),
        "hosts": args.hosts,
        "rate_mbit": args.rate_mbit,
        "size_mib": args.size_mib,
        "piece_mib": args.piece_mib,
        "queue_ms": args.queue_ms,
        "chaos": args.chaos,
        "chaos_origin": args.chaos_origin,
        "boost_restarted": args.boost_restarted,
        "congestion_control": args.congestion_control or DaemonConfig.congestion_control,
        "origin_gateways": args.origin_gateways,
        "events": run.events,
        "dead_seed": args.dead_seed,
        "swarm_formed_s": formed,
        "restarted_hosts_refetched_pieces": refetched if resumed else None,
        "hedged_requests": int(hedged),
        "failed_requests": failed,
        "requests_served_per_host": served,
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "machine_cpu_busy": round(machine_busy, 3),
        "swarm_cpu_s_per_host": round(float(daemon_cpu[:2].sum()), 2),
        "swarm_cpu_user_s_per_host": round(float(daemon_cpu[0]), 2),
        "swarm_cpu_loop_s_per_host": round(float(daemon_cpu[2:].sum()), 2),
        **link_use,
    }
    traces = [h.trace for h in hosts if h.trace and h.trace.exists()]
    if traces:  # read while the daemons run: each line is written whole as its piece is stored
        records, _ = read_traces(traces)  # a SIGKILL ends no write midway: nothing is torn
        result["hops"] = hop_summary(records)
        if run.restarted_at is not None:
            result["restarts"] = restart_report(run, records)
    digest = sha256_file(work / "src" / "model.bin")
    pulls.check([h.name for h in hosts if h.name not in run.dead], "model.bin", digest)
    say(f"warm: every pull returned with its file in {t_swarm:.1f} s ({t_swarm / bound:.3f} x "
        f"S/B; stores complete at {run.stores_done or t_swarm:.1f} s); origin sent "
        f"{origin_bytes / size:.2f} x S")  # fmt: skip
    if args.liar:
        return goals(result | liar_run(rig, args, run, origin_url, origin, store, manifest,
                                       t_swarm, digest))  # fmt: skip
    if "cold" in args.modes:
        if origin.poll() is not None:
            origin = rig.spawn(origin_ns, http, origin_log)
            time.sleep(1)
        t_cold, cold_origin = cold(rig, args, run, origin_url, manifest, bound, digest)
        result |= {
            "cold_value": round(t_cold / bound, 3),
            "t_cold_s": round(t_cold, 2),
            "cold_origin_bytes_ratio": round(cold_origin, 3),
        }
    for host in hosts:
        if host.proc:
            rig.kill(host.proc)
        shutil.rmtree(host.dest, ignore_errors=True)  # room in /dev/shm for the baselines
    if args.no_baseline:
        return goals(result)
    if origin.poll() is not None:
        origin = rig.spawn(origin_ns, http, origin_log)
        time.sleep(1)
    if not args.no_origin_only:
        say(f"origin-only: {args.hosts} curl downloads of {base_mib} MiB ...")
        measured = origin_only(rig, hosts, f"{origin_url}/baseline.bin", work)
        t_origin = measured * args.size_mib / base_mib  # bandwidth-bound: linear in size
        result |= {
            "baseline": round(t_origin / bound, 3),
            "ratio": round(t_origin / t_swarm, 3),
            "t_origin_s": round(t_origin, 2),
            "baseline_measured_mib": base_mib,
        }
    if args.no_aria2 or not aria2_available():
        say("aria2 baseline skipped" + ("" if args.no_aria2 else ": aria2c is not installed"))
        return goals(result)
    for host in hosts:
        shutil.rmtree(host.store, ignore_errors=True)  # room in /dev/shm for aria2's copies
    say(f"aria2: a BitTorrent swarm of the {args.size_mib} MiB file on the same hosts ...")
    t_aria2, aria2_origin = aria2_swarm(
        rig,
        (origin_ns, origin_ip),
        [(h.ns, h.ip) for h in hosts],
        work / "src" / "model.bin",
        int(args.piece_mib * (1 << 20)),
        work,
        args.timeout,
    )
    result |= {
        "aria2_baseline": round(t_aria2 / bound, 3),
        "t_aria2_s": round(t_aria2, 2),
        "aria2_origin_wire_ratio": round(aria2_origin, 3),
        "warm_vs_aria2": round(t_swarm / t_aria2, 3),
    }
    if "cold" in args.modes:
        result["cold_vs_aria2"] = round(t_cold / t_aria2, 3)
    return goals(result)


def cold(rig: Rig, args: argparse.Namespace, run: Run, origin_url: str, manifest: Manifest,
         bound: float, digest: str) -> tuple[float, float]:  # fmt: skip
    """Stop every daemon and empty its store, then start them all at the moment the pulls
    start: seconds until the last pull returned, and the origin's bytes over S."""
    for host in run.hosts:
        if host.proc:
            rig.kill(host.proc)
        shutil.rmtree(host.store, ignore_errors=True)
        shutil.rmtree(host.dest, ignore_errors=True)
        host.seen.clear()
        host.trace = None  # the hop summary is the warm run's
    since = run.origin_log.stat().st_size
    pulls = spawn_pulls(rig, run.hosts, manifest.id, "cold")
    say(f"cold: {len(run.hosts)} daemons started with their pulls ...")
    started = pulls.release()
    for host in run.hosts:
        start_daemon(rig, host, run.seeds, origin_url, daemon_flags(args))

    def report() -> None:
        held = [len(run.held(h)) / len(run.sizes) for h in run.hosts]
        say(f"  t={time.time() - started:5.1f}s  mean {np.mean(held):6.1%}  min {min(held):6.1%}")

    t_cold = pulls.wait([h.name for h in run.hosts], args.timeout, report) - started
    pulls.check([h.name for h in run.hosts], "model.bin", digest)
    origin = origin_piece_bytes(run.origin_log, run.sizes, since) / manifest.size
    say(f"cold: every pull returned with its file in {t_cold:.1f} s ({t_cold / bound:.3f} x "
        f"S/B); origin sent {origin:.2f} x S")  # fmt: skip
    return t_cold, origin


def wait_formed(hosts: list[Host], deadline: float) -> float:
    """Seconds after the daemons listened until each knew every other alive (--dead-seed:
    through the members board alone)."""
    started = time.monotonic() - 2  # the settling pause before this
    while time.monotonic() < deadline:
        alive = [metrics(h).get("shipyard_peer_members_alive", 0) for h in hosts]
        if min(alive) >= len(hosts) - 1:
            return round(time.monotonic() - started, 2)
        time.sleep(0.5)
    raise SystemExit(f"no swarm formed through the members board: members alive {alive}")


def liar_run(rig: Rig, args: argparse.Namespace, run: Run, origin_url: str,
             origin: subprocess.Popen[bytes], store: Path, manifest: Manifest, t_clean: float,
             digest: str) -> dict[str, object]:  # fmt: skip
    """The warm run again with the last `args.liars` hosts replaced by liars of `args.liar`'s kind:
    the honest hosts' time against the clean run's, whom they blamed and how soon, and the
    bytes left in their partial files."""
    honest, liars = run.hosts[: -args.liars], run.hosts[-args.liars :]
    for host in run.hosts:
        if host.proc:
            rig.kill(host.proc)
        shutil.rmtree(host.store, ignore_errors=True)
        shutil.rmtree(host.dest, ignore_errors=True)
        host.seen.clear()
        host.trace = None
        host.log, host.starts = host.log.with_name(f"{host.name}-liar.log"), 0  # a fresh start
    for host in honest:
        start_daemon(rig, host, run.seeds, origin_url, daemon_flags(args))
    seeds = ",".join(s.address for s in run.seeds)
    for host in liars:
        host.starts += 1
        host.proc = start_liar(rig, host.ns, host.address, args.liar, host.store, store, seeds,
                               host.log)  # fmt: skip
    wait_listening(run.hosts, time.monotonic() + 120)
    pulls = spawn_pulls(rig, honest, manifest.id, "liar")
    time.sleep(2)  # as in the clean run
    since = run.origin_log.stat().st_size
    lying = Run(honest, run.seeds, run.sizes, run.origin_log)
    say(f"liars: {len(honest)} honest hosts and {args.liars} liars ({args.liar}) ...")
    hungry = [h.proc for h in honest[: args.starve] if h.proc]
    with starved(hungry):
        t_liar = swarm(rig, args, lying, origin_url, origin, pulls)
    pulls.check([h.name for h in honest], "model.bin", digest)
    blamed = blame_report([(h.ns, h.address) for h in honest], [h.address for h in liars],
                          lying.wall_started)  # fmt: skip
    left = sum(partial_bytes(h.store) for h in honest)
    origin_ratio = origin_piece_bytes(run.origin_log, run.sizes, since) / manifest.size
    say(f"liars: every honest pull returned in {t_liar:.1f} s ({t_liar / t_clean:.2f} x the "
        f"clean run); {blamed}; partial bytes left {left}")  # fmt: skip
    return {
        "liar": args.liar,
        "liars": args.liars,
        "starved_hosts": args.starve,
        "t_liar_s": round(t_liar, 2),
        "liar_vs_clean": round(t_liar / t_clean, 3),
        "liar_origin_bytes_ratio": round(origin_ratio, 3),
        "partial_bytes_left": left,
        **blamed,
    }


GOALS = (  # (figure, most, what) from issue 32, for the 16-host default
    ("value", 1.35, "warm x S/B"),
    ("cold_value", 1.5, "cold x S/B"),
    ("warm_vs_aria2", 0.65, "warm / aria2"),
    ("origin_bytes_ratio", 1.1, "origin bytes / S"),
    ("liar_vs_clean", 1.5, "honest hosts with liars / clean run"),
    ("blamed_all_within_s", 10.0, "seconds until every honest host blamed every liar"),
    ("partial_bytes_left", 0, "bytes left in partial files"),
    ("dead_seed_origin_bytes_ratio", 1.2, "origin bytes / S with a dead seed"),
)


def goals(result: dict[str, object]) -> dict[str, object]:
    """Say each figure against its goal (on stderr), and return `result`."""
    if result.get("dead_seed"):
        result["dead_seed_origin_bytes_ratio"] = result["origin_bytes_ratio"]
    for key, most, what in GOALS:
        figure = result.get(key)
        if isinstance(figure, float | int):
            verdict = "met" if figure <= most else "NOT met"
            say(f"goal {what}: {figure:.3f} (at most {most}): {verdict}")
    return result


def sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


if __name__ == "__main__":
    main()
