"""A real two-node Slurm (slurmctld, two slurmd, munged) on this machine, with fake GPU gres.

Both slurmd daemons run here under different node names and ports; each node declares four
"GPUs" backed by character devices made with mknod (copies of /dev/null), which is all Slurm
needs to allocate them and set CUDA_VISIBLE_DEVICES.
"""

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

NODES = ("sn1", "sn2")
GPUS = 4
DAEMONS = ("slurmctld", "slurmd", "munged", "mungekey", "sbatch")


def missing() -> str | None:
    """Why the testbed cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (munged and slurmd run as root, mknod makes the fake GPUs)"
    absent = [d for d in DAEMONS if shutil.which(d) is None]
    if absent:
        return f"Slurm/munge not installed ({', '.join(absent)}); see scripts/apt-packages.txt"
    return None


def _ports(count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _write_config(root: Path) -> Path:
    ctld, slurmd, *node_ports = _ports(2 + len(NODES))
    (root / "dev").mkdir()
    for i in range(GPUS):
        os.mknod(root / "dev" / f"gpu{i}", 0o666 | 0o020000, os.makedev(1, 3))
    for sub in ("state", "log", *(f"spool/{n}" for n in NODES)):
        (root / sub).mkdir(parents=True)
    lines = [
        "ClusterName=shipyard",
        "SlurmctldHost=localhost",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={root}/munge/sock",
        f"SlurmctldPort={ctld}",
        f"SlurmdPort={slurmd}",
        f"StateSaveLocation={root}/state",
        f"SlurmdSpoolDir={root}/spool/%n",
        f"SlurmctldPidFile={root}/slurmctld.pid",
        f"SlurmdPidFile={root}/slurmd.%n.pid",
        f"SlurmctldLogFile={root}/log/slurmctld.log",
        f"SlurmdLogFile={root}/log/slurmd.%n.log",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "MpiDefault=none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "GresTypes=gpu",
        "ReturnToService=2",
        "KillWait=5",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "JobAcctGatherType=jobacct_gather/none",
        "PlugStackConfig=/dev/null",
    ]
    for name, port in zip(NODES, node_ports, strict=True):
        lines.append(
            f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} CPUs=2"
            f" RealMemory=500 Gres=gpu:{GPUS} State=UNKNOWN"
        )
    lines.append("PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    conf = root / "slurm.conf"
    conf.write_text("\n".join(lines) + "\n")
    (root / "gres.conf").write_text(
        f"NodeName={','.join(NODES)} Name=gpu File={root}/dev/gpu[0-{GPUS - 1}]\n"
    )
    return conf


@contextmanager
def slurm_cluster(root: Path) -> Iterator[Path]:
    """Start the daemons under `root`; yields the slurm.conf path; stops them all on exit."""
    munge = root / "munge"
    munge.mkdir(mode=0o711)
    subprocess.run(["mungekey", "-c", "-f", "-k", str(munge / "key")], check=True)
    conf = _write_config(root)
    env = {**os.environ, "SLURM_CONF": str(conf)}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.append(
            subprocess.Popen(
                [
                    "munged",
                    "-F",
                    "-f",
                    f"--key-file={munge}/key",
                    "-S",
                    f"{munge}/sock",
                    f"--pid-file={munge}/pid",
                    f"--log-file={munge}/log",
                    f"--seed-file={munge}/seed",
                ]
            )
        )
        _wait(lambda: (munge / "sock").exists(), "munged socket")
        procs.append(subprocess.Popen(["slurmctld", "-D", "-i", "-f", str(conf)], env=env))
        for name in NODES:
            procs.append(subprocess.Popen(["slurmd", "-D", "-f", str(conf), "-N", name], env=env))
        _wait(lambda: _idle_nodes(env) == len(NODES), "both slurmd nodes idle")
        yield conf
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in reversed(procs):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _idle_nodes(env: dict[str, str]) -> int:
    done = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True, env=env
    )
    return sum(1 for line in done.stdout.splitlines() if line.split()[-1] == "idle")


def _wait(check: object, what: str, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError(f"slurm testbed: timed out waiting for {what}")
        time.sleep(0.2)
